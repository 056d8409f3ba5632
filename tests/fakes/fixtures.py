"""Pytest fixtures for the fake API server and the library's client of it (``kube``). tests/conftest.py re-exports
them (``from tests.fakes.fixtures import apiserver, kube, kubeconfig``), for every test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from rblnctl.kube import KubeOptions, connect
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.clock import FakeClock


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A started FakeApiServer (Kubernetes v1.34.1, no deletion delay), stopped after the test."""
    fake = FakeApiServer().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def kubeconfig(apiserver: FakeApiServer, tmp_path: Path) -> Path:
    """Path of a kubeconfig (context ``fake``, namespace ``default``) pointing at ``apiserver``."""
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


# A bound, not the expected time: a fake that never answers fails its test in seconds, not after the client's 30 s,
# with room for a machine busy with other work.
FAKE_REQUEST_TIMEOUT_S = 10


@pytest.fixture
def kube(request, apiserver):
    """The library's client of the fake API server (`apiserver`), as `rblnctl --server URL` builds it.

    A test (or module) marked `kube_on_fake_clock` gets it reached through a kubeconfig (`kubeconfig`), its read
    retries waiting on a FakeClock: `kube.clock.sleeps` says how long it would have waited, and no test waits."""
    if request.node.get_closest_marker("kube_on_fake_clock") is None:
        return connect(KubeOptions(server=apiserver.url, request_timeout_s=FAKE_REQUEST_TIMEOUT_S))
    k = connect(KubeOptions(kubeconfig=str(request.getfixturevalue("kubeconfig")), request_timeout_s=2))
    k.clock = FakeClock()
    return k


def _self_signed(directory: Path, name: str, cn: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
         "-out", str(cert), "-subj", f"/CN={cn}", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Self-signed PEM files made with the openssl CLI: ``cert``/``key`` for the server (its own CA)
    and ``client_cert``/``client_key`` for client-certificate auth. Skips when openssl is missing."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    d = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(d, "server", "127.0.0.1")
    client_cert, client_key = _self_signed(d, "client", "rblnctl-test-user")
    return SimpleNamespace(cert=cert, key=key, client_cert=client_cert, client_key=client_key)


@pytest.fixture
def tls_apiserver(tls_files: SimpleNamespace) -> Iterator[FakeApiServer]:
    """A started FakeApiServer on HTTPS with a self-signed certificate (``tls_files.cert``)."""
    fake = FakeApiServer(tls_cert=tls_files.cert, tls_key=tls_files.key).start()
    try:
        yield fake
    finally:
        fake.stop()
