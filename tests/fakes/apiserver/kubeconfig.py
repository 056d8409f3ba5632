"""A kubeconfig for the fake: a bearer token (``fake-token``), optional CA data and client certificate."""

from __future__ import annotations

import base64
import json
from pathlib import Path


def write_kubeconfig(path: str | Path, *, url: str, user: str, token: str, context: str = "fake",
                     namespace: str = "default", ca: str | Path | None = None, insecure: bool = False,
                     client_cert: str | Path | None = None, client_key: str | Path | None = None) -> Path:
    """Write the kubeconfig; see ``FakeApiServer.write_kubeconfig``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    q = json.dumps

    def data(pem: str | Path) -> str:
        return base64.b64encode(Path(pem).read_bytes()).decode()

    tls = ""
    if ca:
        tls += f"    certificate-authority-data: {data(ca)}\n"
    if insecure:
        tls += "    insecure-skip-tls-verify: true\n"
    user_tls = ""
    if client_cert:
        user_tls += f"    client-certificate-data: {data(client_cert)}\n"
        user_tls += f"    client-key-data: {data(client_key or client_cert)}\n"
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: {q(context)}\n"
        "  cluster:\n"
        f"    server: {q(url)}\n"
        f"{tls}"
        "contexts:\n"
        f"- name: {q(context)}\n"
        "  context:\n"
        f"    cluster: {q(context)}\n"
        f"    user: {q(user)}\n"
        f"    namespace: {q(namespace)}\n"
        f"current-context: {q(context)}\n"
        "preferences: {}\n"
        "users:\n"
        f"- name: {q(user)}\n"
        "  user:\n"
        f"    token: {q(token)}\n"
        f"{user_tls}"
    )
    return path
