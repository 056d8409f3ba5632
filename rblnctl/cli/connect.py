"""The root command's connection flags as rblnctl.kube.KubeOptions fields: the command and the completers read them."""

from __future__ import annotations

from rblnctl.durations import parse_duration


def connection_options(params: dict) -> dict:
    """The root command's connection flags as KubeOptions fields (also read by completers, before the callback)."""
    timeout = params.get("request_timeout") or "30s"
    return {
        "kubeconfig": params.get("kubeconfig"), "context": params.get("context"), "cluster": params.get("cluster"),
        "user": params.get("user"), "server": params.get("server"), "token": params.get("token"),
        "certificate_authority": params.get("certificate_authority"),
        "insecure_skip_tls_verify": bool(params.get("insecure_skip_tls_verify")),
        "impersonate_user": params.get("as_user"), "impersonate_groups": tuple(params.get("as_group") or ()),
        "request_timeout_s": parse_duration(timeout, what="--request-timeout", zero_means_forever=True),
    }
