"""connect(): a Kube from a kubeconfig (as kubectl resolves it), the in-cluster service account, and kubectl's flags."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


from rblnctl.errors import (
    ConfigError,
)
from rblnctl.kube.client import Kube
from rblnctl.kube.kubeconfig import (
    Endpoint,
    Transport,
    apply_flags,
    choose_context,
    context_namespace,
    endpoint_from_kubeconfig,
    has_contexts,
    in_cluster_endpoint,
    read_kubeconfig,
    resolve_kubeconfig,
)

SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, kw_only=True)
class KubeOptions:
    """How to reach the cluster; None means kubectl's default resolution."""

    kubeconfig: str | None = None  # else $KUBECONFIG, else ~/.kube/config, else in-cluster
    context: str | None = None  # else the kubeconfig's current-context
    # kubectl's connection flags, for break-glass use. `server` replaces the context's server URL (with
    # no usable kubeconfig it is a plain URL without credentials: tests, `kubectl proxy`).
    server: str | None = None
    cluster: str | None = None  # a kubeconfig cluster entry instead of the context's
    user: str | None = None  # a kubeconfig user entry instead of the context's
    token: str | None = None  # a bearer token instead of the user's credentials
    certificate_authority: str | None = None  # a CA bundle file for the server's certificate
    insecure_skip_tls_verify: bool = False
    impersonate_user: str | None = None  # --as
    impersonate_groups: tuple[str, ...] = ()  # --as-group (repeatable)
    request_timeout_s: float | None = 30.0  # None: wait as long as it takes (kubectl's --request-timeout=0)


def connect(opts: KubeOptions) -> Kube:
    """Build a Kube from kubeconfig, context or in-cluster service account, then kubectl's connection flags.

    Raises ConfigError when no configuration fits, AuthError when a credential plugin fails. Only
    credential plugins and in-cluster configuration import the kubernetes package (rblnctl.kube.kubeconfig).
    """
    context = None
    namespace = DEFAULT_NAMESPACE
    source = _kubeconfig_source(opts)
    if source is not None:
        kc = read_kubeconfig(source)
        context = choose_context(kc, opts.context)
        namespace = context_namespace(kc, context) or DEFAULT_NAMESPACE
        endpoint = endpoint_from_kubeconfig(kc, context, cluster=opts.cluster, user=opts.user)
        if opts.context is None:
            context = None  # the current context: messages say so
    elif not opts.server:
        if not os.environ.get("KUBERNETES_SERVICE_HOST") or not SA_TOKEN.exists():
            raise ConfigError(
                "no kubeconfig found: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or run in a pod"
            )
        endpoint = in_cluster_endpoint()
        namespace = in_cluster_namespace()
    else:
        endpoint = Endpoint()
    apply_flags(endpoint, server=opts.server, token=opts.token, certificate_authority=opts.certificate_authority,
                insecure_skip_tls_verify=opts.insecure_skip_tls_verify)
    if opts.server:
        server_url(opts.server, "--server")  # a bad flag is named as the flag
    if not endpoint.server or endpoint.server.rstrip("/") in ("http:", "https:"):
        where = f"context {context}" if context else "the current context"
        raise ConfigError(f"kubeconfig {opts.kubeconfig or resolve_kubeconfig(None)}: the cluster of {where} has no "
                          "server URL")
    endpoint.server = server_url(endpoint.server, "--server" if opts.server else f"kubeconfig {context or ''}".strip())
    transport = Transport(endpoint)
    return Kube(transport=transport, server=endpoint.server, context=context, namespace=namespace,
                request_timeout_s=opts.request_timeout_s, proxy=transport.proxy,
                impersonate_user=opts.impersonate_user, impersonate_groups=tuple(opts.impersonate_groups))


def in_cluster_namespace() -> str:
    """The namespace of a pod's service account, as client-go's in-cluster config resolves it.

    POD_NAMESPACE (the downward API) first, then the service account's namespace file, then
    `default` (kubernetes/client-go tools/clientcmd/client_config.go, inClusterClientConfig.Namespace).
    """
    env = os.environ.get("POD_NAMESPACE", "").strip()
    if env:
        return env
    try:
        return SA_NAMESPACE.read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def _kubeconfig_source(opts: KubeOptions) -> str | None:
    """The kubeconfig to load; None for in-cluster, or for --server with no kubeconfig that names a context."""
    if not opts.server or opts.kubeconfig or opts.context or opts.user or opts.cluster:
        return resolve_kubeconfig(opts.kubeconfig)
    # --server alone: kubectl keeps the current context's credentials when there is one; no
    # kubeconfig, or one without contexts, leaves a plain URL.
    try:
        source = resolve_kubeconfig(None)
    except ConfigError:
        return None
    return source if source is not None and has_contexts(source) else None


def server_url(server: str, where: str) -> str:
    """The API server URL as client-go reads it (rest.DefaultServerURL: no scheme means https://), checked:
    http or https, a host, no spaces. Anything else is a ConfigError (exit 2), not an unreachable cluster."""
    from urllib.parse import urlsplit

    url = server if "://" in server else f"https://{server}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as e:
        raise ConfigError(f"{where}: invalid API server URL {server!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise ConfigError(f"{where}: invalid API server URL {server!r}: expected https://HOST[:PORT] (or http://)")
    return url
