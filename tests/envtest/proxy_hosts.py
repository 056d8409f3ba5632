"""A proxy.py plugin (loaded into the real forward proxy tests/envtest/forward_proxy.py starts): the proxy's own
resolver for names this machine's DNS does not know.

The envtest apiserver's serving certificate names `kubernetes.default.svc`, which resolves nowhere here. Mapped to
127.0.0.1 in the proxy only, a kubeconfig whose server is `https://kubernetes.default.svc:PORT` works through the
proxy and nowhere else: no request can reach the apiserver around it. It also lets an environment proxy be tested:
Go (and rblnctl) never send a loopback address through HTTPS_PROXY, a name is sent. This is proxy.py's documented
hook for a custom resolver (HttpProxyBasePlugin.resolve_dns); the proxy itself is proxy.py's, unchanged.

RBLNCTL_TEST_PROXY_HOSTS: `name=ip[,name=ip...]`.
"""

from __future__ import annotations

import os
from typing import Any

from proxy.http.proxy import HttpProxyBasePlugin


class MapHosts(HttpProxyBasePlugin):
    def resolve_dns(self, host: str, port: int) -> tuple[Any, Any]:
        table = dict(pair.split("=", 1) for pair in os.environ.get("RBLNCTL_TEST_PROXY_HOSTS", "").split(",")
                     if "=" in pair)
        return table.get(host), None

    def before_upstream_connection(self, request: Any) -> Any:
        return request
