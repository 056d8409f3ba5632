"""FaultProxy: a loopback TLS proxy in front of a real kube-apiserver that can lose replies.

What a test cannot get from the real server itself is a reply that never arrives after the write was
applied (client-go's "unknown outcome"), a connection reset in the middle of a burst, or a request that
never reaches the server. The proxy terminates TLS with the apiserver's own serving certificate (it
listens on 127.0.0.1 too, so the kubeconfig's CA still verifies it), forwards each HTTP/1.1 request over a
fresh TLS connection to the server, and answers with the server's reply, streaming watches, unless a rule
says otherwise:

* ``lose_reply``: forward, let the server apply it, read its answer, then close the client's connection
  without a byte of it (the write happened; the client cannot know);
* ``drop``: close the client's connection without forwarding (nothing applied);
* ``reset``: like ``lose_reply`` but with a TCP RST (SO_LINGER 0), as a crashed load balancer does.

Rules match a method and a path regex (``re.search`` on the path without the query) and fire ``times``
times. Every request is recorded (method, path, query, user agent, status, what happened) in ``log``.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

_FORWARD = ("authorization", "content-type", "accept", "user-agent", "impersonate-user", "impersonate-group",
            "impersonate-uid", "accept-encoding")


@dataclass
class Rule:
    action: str  # lose_reply | drop | reset
    method: str | None
    path: re.Pattern
    times: int


@dataclass
class Proxied:
    method: str
    path: str
    query: str
    user_agent: str
    status: int = 0
    action: str = "forwarded"  # forwarded | lose_reply | drop | reset

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class FaultProxy:
    upstream: str  # https://127.0.0.1:PORT
    ca: Path
    cert: Path
    key: Path
    log: list[Proxied] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    url: str = ""
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(self.key))
        ctx.set_alpn_protocols(["http/1.1"])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.url = f"https://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def add_rule(self, action: str, *, method: str | None = None, path: str = "", times: int = 1) -> None:
        if action not in ("lose_reply", "drop", "reset"):
            raise ValueError(action)
        with self._lock:
            self.rules.append(Rule(action, method, re.compile(path), times))

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.log.clear()

    def _take(self, method: str, path: str) -> str | None:
        with self._lock:
            for rule in self.rules:
                if rule.times > 0 and (rule.method in (None, method)) and rule.path.search(path):
                    rule.times -= 1
                    return rule.action
        return None

    def writes(self) -> list[Proxied]:
        return [r for r in list(self.log) if r.is_write]


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._proxy()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET  # noqa: N815

    def _proxy(self) -> None:
        proxy = self.owner
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        rec = Proxied(self.command, parts.path, parts.query, self.headers.get("User-Agent") or "")
        with proxy._lock:
            proxy.log.append(rec)
        action = proxy._take(self.command, parts.path)
        if action == "drop":
            rec.action = "drop"
            self._close(reset=False)
            return
        up = urlsplit(proxy.upstream)
        ctx = ssl.create_default_context(cafile=str(proxy.ca))
        conn = http.client.HTTPSConnection(up.hostname, up.port, context=ctx, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARD}
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            rec.status = resp.status
            if action in ("lose_reply", "reset"):
                resp.read()
                rec.action = action
                self._close(reset=action == "reset")
                return
            streaming = "watch=true" in parts.query or "watch=1" in parts.query or \
                resp.getheader("Transfer-Encoding", "").lower() == "chunked" and "watch" in parts.query
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(k, v)
            if streaming:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(4096)
                    if not chunk:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            else:
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        except (OSError, http.client.HTTPException):
            self._close(reset=False)
        finally:
            conn.close()

    def _close(self, *, reset: bool) -> None:
        self.close_connection = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass
