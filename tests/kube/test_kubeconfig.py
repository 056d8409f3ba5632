"""rblnctl.kube.kubeconfig: kubectl's merge rules, paths relative to their file, inline data, token files, and no
kubernetes package for static credentials."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest

from rblnctl.errors import ConfigError
from rblnctl.kube import KubeOptions, connect


def _write(path, *, server, current=None, contexts=(), clusters=(), users=()):
    lines = ["apiVersion: v1", "kind: Config"]
    if clusters:
        lines.append("clusters:")
        for name, body in clusters:
            fields = {"server": server, **body}
            lines += [f"- name: {name}", "  cluster:"] + [f"    {k}: {v}" for k, v in fields.items()]
    if contexts:
        lines.append("contexts:")
        for name, cluster, user in contexts:
            lines += [f"- name: {name}", f"  context: {{cluster: {cluster}, user: {user}}}"]
    if users:
        lines.append("users:")
        for name, body in users:
            lines += [f"- name: {name}", "  user:"] + [f"    {k}: {v}" for k, v in body.items()]
    if current:
        lines.append(f"current-context: {current}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_first_file_to_set_the_current_context_wins(apiserver, tmp_path, monkeypatch):
    """client-go's rule (tools/clientcmd/loader.go): the first file that sets a value wins, current-context too."""
    apiserver.require_token = True
    first = _write(tmp_path / "a", server=apiserver.url, current="good", contexts=[("good", "c", "right")],
                   clusters=[("c", {})], users=[("right", {"token": "fake-token"})])
    second = _write(tmp_path / "b", server="http://127.0.0.1:9", current="bad", contexts=[("bad", "c", "wrong")],
                    clusters=[("c", {})], users=[("wrong", {"token": "nope"}), ("right", {"token": "nope"})])
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    kube = connect(KubeOptions())
    assert kube.server == apiserver.url and kube.server_version()["major"] == "1"  # a's cluster and user


def test_a_token_file_relative_to_the_kubeconfig_is_read(apiserver, tmp_path):
    apiserver.require_token = True
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "token").write_text("fake-token\n")
    kc = _write(tmp_path / "kc", server=apiserver.url, current="c", contexts=[("c", "c", "u")], clusters=[("c", {})],
                users=[("u", {"tokenFile": "secrets/token"})])
    assert connect(KubeOptions(kubeconfig=str(kc))).server_version()["major"] == "1"
    assert apiserver.requests[-1].headers["authorization"] == "Bearer fake-token"


def test_basic_auth(apiserver, tmp_path):
    kc = _write(tmp_path / "kc", server=apiserver.url, current="c", contexts=[("c", "c", "u")], clusters=[("c", {})],
                users=[("u", {"username": "admin", "password": "s3cret"})])
    connect(KubeOptions(kubeconfig=str(kc))).server_version()
    assert apiserver.requests[-1].headers["authorization"] == "Basic " + base64.b64encode(b"admin:s3cret").decode()


def test_inline_ca_and_client_certificate_data(tls_files, tmp_path):
    from tests.fakes.apiserver import FakeApiServer

    def data(path):
        return base64.b64encode(path.read_bytes()).decode()

    with FakeApiServer(tls_cert=tls_files.cert, tls_key=tls_files.key, client_ca=tls_files.client_cert) as fake:
        kc = _write(tmp_path / "kc", server=fake.url, current="c", contexts=[("c", "c", "u")],
                    clusters=[("c", {"certificate-authority-data": data(tls_files.cert)})],
                    users=[("u", {"client-certificate-data": data(tls_files.client_cert),
                                  "client-key-data": data(tls_files.client_key)})])
        assert connect(KubeOptions(kubeconfig=str(kc))).server_version()["gitVersion"] == "v1.34.1"


def test_a_certificate_without_its_key_is_a_config_error(tmp_path):
    kc = _write(tmp_path / "kc", server="https://127.0.0.1:1", current="c", contexts=[("c", "c", "u")],
                clusters=[("c", {})], users=[("u", {"client-certificate": "/etc/cert.pem"})])
    with pytest.raises(ConfigError, match="without its key"):
        connect(KubeOptions(kubeconfig=str(kc)))


def test_a_current_context_that_is_not_defined_is_a_config_error(tmp_path):
    kc = _write(tmp_path / "kc", server="http://127.0.0.1:1", current="gone", contexts=[("c", "c", "u")],
                clusters=[("c", {})], users=[("u", {"token": "t"})])
    with pytest.raises(ConfigError, match="current-context 'gone' is not defined"):
        connect(KubeOptions(kubeconfig=str(kc)))


PROBE = """
import sys
from rblnctl.kube import KubeOptions, connect
connect(KubeOptions(kubeconfig=sys.argv[1])).server_version()
print(",".join(sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes."))))
"""


def test_static_credentials_do_not_import_the_kubernetes_package(apiserver, tmp_path):
    kc = apiserver.write_kubeconfig(tmp_path / "kc")  # a bearer token
    out = subprocess.run([sys.executable, "-c", PROBE, str(kc)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
