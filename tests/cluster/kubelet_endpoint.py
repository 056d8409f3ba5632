"""KubeletEndpoint: the HTTPS endpoint of simulated kubelets, which kube-apiserver asks for a container's log.

``GET pods/NAME/log`` is not answered from storage: kube-apiserver looks up the pod's node, picks an address of it
(``--kubelet-preferred-address-types``, by default Hostname, InternalDNS, InternalIP, ExternalDNS, ExternalIP) and
its ``status.daemonEndpoints.kubeletEndpoint.Port`` (10250 when unset), and relays ``GET
https://ADDR:PORT/containerLogs/NS/POD/CONTAINER?tailLines=...`` (the kubelet's certificate is not verified unless
``--kubelet-certificate-authority`` is given). It relays a 200 as the log, a non-2xx as a Status of that code whose
message is the kubelet's text (400 "container ... is waiting to start: ContainerCreating"), a 404 as "the server
could not find the requested resource ( pods/log NAME)", and a failed dial as a 500 naming the URL (measured on
kube-apiserver v1.36.2: tests/envtest/test_host_scenarios.py). The project's fake API server does the same for a
node whose address is loopback (tests/fakes/apiserver/pods.py).

This endpoint listens on 127.0.0.1 with a self-signed certificate (made once per process with the openssl CLI) and
serves what a simulation puts in it: ``set_log(ns, pod, text)`` or ``set_waiting(ns, pod, reason)`` (the kubelet's
refusal for a container that never started); anything else is the kubelet's 404. ``register(api, node)`` points the
node at it: its only address InternalIP 127.0.0.1 (a Hostname would be dialled by name first), its kubelet port this
endpoint's.
"""

from __future__ import annotations

import atexit
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tests.cluster.client import Api

# Found when the module is imported: a test may later narrow PATH (to hide helm or kubectl from rblnctl).
_OPENSSL = shutil.which("openssl") or shutil.which("openssl", path=os.pathsep.join(("/usr/bin", "/usr/local/bin")))
_CERT_LOCK = threading.Lock()
_CERT: tuple[Path, Path] | None = None
# The kubelet's words for a container that has not started (pkg/kubelet/kubelet_pods.go validateContainerLogStatus).
WAITING = {"ErrImagePull": "image can't be pulled", "ImagePullBackOff": "trying and failing to pull image"}


def _certificate() -> tuple[Path, Path]:
    global _CERT
    with _CERT_LOCK:
        if _CERT is None:
            if _OPENSSL is None:
                raise RuntimeError("openssl is not on PATH: the simulated kubelet's serving certificate is made with "
                                   "it (as the fake's TLS tests and the real control plane's are)")
            d = Path(tempfile.mkdtemp(prefix="sim-kubelet-tls-"))
            atexit.register(shutil.rmtree, d, True)
            cert, key = d / "kubelet.crt", d / "kubelet.key"
            subprocess.run([_OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-days", "2", "-keyout", str(key), "-out", str(cert), "-subj", "/CN=sim-kubelet",
                            "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
            _CERT = (cert, key)
        return _CERT


class KubeletEndpoint:
    def __init__(self) -> None:
        self._logs: dict[tuple[str, str], tuple[int, str]] = {}  # (ns, pod) -> (HTTP code, text)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self.port = 0
        self.requests: list[str] = []  # the paths asked, in order

    def start(self) -> "KubeletEndpoint":
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                code, text = endpoint._answer(self.path)
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                # One request per connection: a stopped endpoint must not go on answering on a kept-alive one.
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                self.wfile.write(data)

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        cert, key = _certificate()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self._httpd = httpd
        self.port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="sim-kubelet-endpoint",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def register(self, api: Api, node: str) -> None:
        """Point `node` at this endpoint, as its kubelet's status update does (PATCH nodes/NAME/status)."""
        api.patch("Node", node, {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                                            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}}}},
                  sub="status")

    def set_log(self, namespace: str, pod: str, text: str) -> None:
        with self._lock:
            self._logs[(namespace, pod)] = (200, text)

    def set_waiting(self, namespace: str, pod: str, container: str, reason: str) -> None:
        why = WAITING.get(reason, reason)
        with self._lock:
            self._logs[(namespace, pod)] = (400, f'container "{container}" in pod "{pod}" is waiting to start: {why}')

    def forget(self, namespace: str, pod: str) -> None:
        with self._lock:
            self._logs.pop((namespace, pod), None)

    def _answer(self, raw_path: str) -> tuple[int, str]:
        parts = urlsplit(raw_path)
        self.requests.append(parts.path)
        segs = [unquote(s) for s in parts.path.strip("/").split("/")]
        if len(segs) != 4 or segs[0] != "containerLogs":
            return 404, "404 page not found\n"
        with self._lock:
            code, text = self._logs.get((segs[1], segs[2]), (404, f'pod "{segs[2]}" not found'))
        tail = (parse_qs(parts.query).get("tailLines") or [None])[0]
        if code == 200 and tail is not None and int(tail) >= 0:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[len(lines) - int(tail):]) if int(tail) else ""
        return code, text
