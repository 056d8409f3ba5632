"""A refused server certificate says why, as kubectl (Go's crypto/x509) does: what the certificate is valid for, an
unknown authority, an expiry date (rblnctl.kube.tls; issue 38). On the fake API server over TLS; the same through a
real proxy to the real apiserver: tests/envtest/test_proxies_real.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rblnctl.errors import ClusterUnreachable
from rblnctl.kube import KubeOptions, connect
from tests.fakes.apiserver import FakeApiServer

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not on PATH")

CA_CONFIG = """\
[ ca ]
default_ca = CA_default
[ CA_default ]
dir = .
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = policy_any
copy_extensions = copy
[ policy_any ]
commonName = supplied
[ san ]
subjectAltName = {san}
"""


def _cert(d: Path, *, san: str, start: str | None = None, end: str | None = None) -> tuple[Path, Path]:
    """A self-signed certificate with `san`; with `start`/`end` (YYYYMMDDHHMMSSZ) its validity (openssl ca)."""
    d.mkdir(parents=True, exist_ok=True)
    cert, key = d / "c.pem", d / "k.pem"
    if start is None:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
                        "-out", str(cert), "-subj", "/CN=fake-apiserver", "-addext", f"subjectAltName={san}"],
                       check=True, capture_output=True, timeout=60)
        return cert, key
    (d / "ca.cnf").write_text(CA_CONFIG.format(san=san))
    (d / "index.txt").write_text("")
    (d / "serial").write_text("01\n")
    subprocess.run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", "csr",
                    "-subj", "/CN=fake-apiserver"], cwd=d, check=True, capture_output=True, timeout=60)
    subprocess.run(["openssl", "ca", "-batch", "-selfsign", "-config", "ca.cnf", "-keyfile", str(key), "-in", "csr",
                    "-startdate", start, "-enddate", end, "-extensions", "san", "-out", str(cert)],
                   cwd=d, check=True, capture_output=True, timeout=60)
    return cert, key


def _kubeconfig(path: Path, server: str, *, ca: Path | None, tls_server_name: str | None = None) -> Path:
    cluster: dict = {"server": server}
    if ca is not None:
        cluster["certificate-authority"] = str(ca)
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": {"token": "t0ken-xyz"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def _refusal(kc: Path) -> str:
    with pytest.raises(ClusterUnreachable) as err:
        connect(KubeOptions(kubeconfig=str(kc), request_timeout_s=5)).server_version()
    msg = str(err.value)
    assert "\n" not in msg and "t0ken-xyz" not in msg
    return msg


def test_a_name_the_certificate_does_not_hold(tmp_path):
    cert, key = _cert(tmp_path / "c", san="IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc")
    with FakeApiServer(tls_cert=cert, tls_key=key) as fake:
        msg = _refusal(_kubeconfig(tmp_path / "kc", fake.url, ca=cert, tls_server_name="kube.example"))
        assert not fake.requests  # nothing was sent over the connection that read the certificate
    assert msg == (f"cannot reach the API server at {fake.url}: TLS: the server's certificate is valid for "
                   "localhost, kubernetes.default.svc, not kube.example (its IP SANs: 127.0.0.1)")


@pytest.mark.parametrize("san,validity,want", [
    ("DNS:localhost", None,
     "TLS: the server's certificate is not valid for 127.0.0.1: it has no IP SANs (its DNS names: localhost)"),
    ("IP:10.0.0.1,IP:::1,DNS:localhost", None,
     "the server's certificate is valid for 10.0.0.1, ::1, not 127.0.0.1 (its DNS names: localhost)"),
    ("IP:127.0.0.1", ("20200101000000Z", "20200102000000Z"),
     "TLS: the server's certificate expired on Jan  2 00:00:00 2020 GMT"),
], ids=["no-ip-sans", "ip-not-held", "expired"])
def test_a_certificate_the_client_trusts_but_refuses_says_why(tmp_path, san, validity, want):
    start, end = validity or (None, None)
    cert, key = _cert(tmp_path / "c", san=san, start=start, end=end)
    with FakeApiServer(tls_cert=cert, tls_key=key) as fake:
        msg = _refusal(_kubeconfig(tmp_path / "kc", fake.url, ca=cert))
    assert msg.endswith(want), msg


def test_an_unknown_authority(tmp_path):
    cert, key = _cert(tmp_path / "c", san="IP:127.0.0.1")
    with FakeApiServer(tls_cert=cert, tls_key=key) as fake:
        msg = _refusal(_kubeconfig(tmp_path / "kc", fake.url, ca=None))
    assert f"cannot reach the API server at {fake.url}: TLS: the server's certificate is signed by an unknown " \
           "authority (issued by CN=fake-apiserver): self-signed certificate; pass --certificate-authority" in msg
