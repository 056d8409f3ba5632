"""The HTTP side: the request handler, the order a request goes through, and how replies are written.

A request is parsed and recorded (``on_request`` callbacks run), then an injected fault may take
it over (faults.py). Otherwise it is handled in kube-apiserver's order: authentication (401),
authorization (403, rbac.py, from the path alone, before anything is looked up), health and
OpenAPI paths, KubeVirt's aggregated API (kubevirt.py), then discovery or a resource: the REST
verbs (rest.py), watch (watch.py), ``pods/eviction`` (eviction.py), ``pods/log`` and
``pods/binding`` (pods.py) and SelfSubjectAccessReviews (rbac.py). Every failure is a ``Status``
(errors.py).
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.apiserver import protobuf
from tests.fakes.apiserver.config import ADMIN_TOKEN
from tests.fakes.apiserver.discovery import MUX_NOT_FOUND, served_path, discovery
from tests.fakes.apiserver.errors import ApiError, bad_request, method_not_allowed, status_body, unknown_path
from tests.fakes.apiserver.events import SSR_ID, self_subject_review
from tests.fakes.apiserver.faults import Fault
from tests.fakes.apiserver.meta import first, truthy
from tests.fakes.apiserver.rbac import request_info
from tests.fakes.apiserver.recording import RecordedRequest
from tests.fakes.apiserver.resources import Route

if TYPE_CHECKING:
    from tests.fakes.apiserver.server import FakeApiServer

SSAR_ID = "selfsubjectaccessreviews.authorization.k8s.io"
SSRR_ID = "selfsubjectrulesreviews.authorization.k8s.io"
STREAMED = -1  # a handler that wrote its own (chunked) response returns this code


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up on the TLS handshake (as it should on an untrusted certificate) is
        not a server error; anything else still prints the usual traceback."""
        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError)):
            return
        super().handle_error(request, client_address)


def make_httpd(handler: type[BaseHTTPRequestHandler], tls_cert: str | Path | None, tls_key: str | Path | None,
               client_ca: str | Path | None) -> tuple[QuietServer, str]:
    """A bound, listening server on 127.0.0.1 port 0 and its scheme (https when ``tls_cert`` is given)."""
    httpd = QuietServer(("127.0.0.1", 0), handler)
    if not tls_cert:
        return httpd, "http"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(tls_cert), str(tls_key) if tls_key else None)
    if client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(str(client_ca))
    # The handshake runs on the handler thread (Handler.setup), so a client that fails it (an
    # untrusted certificate) never stalls the accept loop.
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    return httpd, "https"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    sys_version = ""
    fake: FakeApiServer  # set on the subclass FakeApiServer.handler() makes

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle + delayed ACK add ~40 ms
        # to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fake._track_connection(self.connection, open_=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.fake._track_connection(self.connection, open_=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    # ---- writing ---------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_raw(self, code: int, data: bytes, content_type: str | None, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        req = getattr(self, "_req", None)
        for text in req.warnings if req is not None else ():
            self.send_header("Warning", warning_header(text))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.send_raw(code, (json.dumps(body, separators=(",", ":")) + "\n").encode(), "application/json", headers)

    def start_chunked(self, code: int) -> None:
        self._req.status = code
        self._req.applied = True
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def write_chunk(self, obj: Any) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunked(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def abort(self) -> None:
        self.close_connection = True

    def client_gone(self) -> bool:
        """Whether the client closed its end (EOF waiting to be read); a TLS socket cannot be peeked: False."""
        if isinstance(self.connection, ssl.SSLSocket):
            return False
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ---- the request's way through ---------------------------------------------------------------

    def _dispatch(self) -> None:
        try:
            self._dispatch_one()
        finally:
            self.fake._current.request = None

    def _dispatch_one(self) -> None:
        fake = self.fake
        parts = urlsplit(self.path)
        path = parts.path or "/"
        raw = self._read_body()
        ctype = self.headers.get("Content-Type")
        body: Any = None
        self._body_error: ApiError | None = None
        if raw and (ctype or "").split(";")[0].strip() == protobuf.CONTENT_TYPE:
            try:
                body = protobuf.decode(raw)
            except protobuf.UndecodableProtobuf as exc:
                body, self._body_error = raw, ApiError(415, "UnsupportedMediaType", str(exc))
        elif raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        req = RecordedRequest(self.command, path, parse_qs(parts.query, keep_blank_values=True), ctype, body,
                              headers={k.lower(): v for k, v in self.headers.items()})
        self._req = req
        fake._current.request = req  # what on_change callbacks of this request's changes can ask about
        fake._log.record(req)
        fault = fake._faults.take(self.command, path, self.headers.get("User-Agent") or "",
                                  watch=truthy(first(req.query, "watch")))
        if fault is not None and not fault.lose_reply and fault.then is not None:
            fault.then()
        if fault is not None and not fault.lose_reply and self._apply_fault(req, fault):
            return
        try:
            code, out, headers = self._handle(req, path)
        except ApiError as exc:
            code, out, headers = exc.code, exc.body, exc.headers
        except Exception as exc:  # noqa: BLE001 - a bug in the fake: answer 500 and record it
            fake.errors.append(f"{self.command} {self.path}: {exc!r}")
            code, out, headers = 500, status_body(500, "InternalError", f"fake apiserver error: {exc!r}"), {}
        if code == STREAMED:
            return
        req.status, req.applied = code, True
        fake._log.handled(req)
        if fault is not None and fault.lose_reply:  # handled and committed; the client never hears of it
            if fault.then is not None:
                fault.then()
            time.sleep(fault.delay_s)
            req.reply_lost = True
            self.drop()
            return
        try:
            if isinstance(out, bytes):
                self.send_raw(code, out, None, headers)
            elif isinstance(out, str):
                self.send_raw(code, out.encode(), "text/plain; charset=utf-8", headers)
            else:
                self.send_json(code, out, headers)
        except OSError:
            self.close_connection = True

    def _apply_fault(self, req: RecordedRequest, fault: Fault) -> bool:
        """Delay, then drop or answer as the fault says. True when the request is done with."""
        if fault.delay_s:
            time.sleep(fault.delay_s)
        if fault.drop:
            req.status = 0
            self.drop()
            return True
        if fault.status is None:
            return False
        req.status = fault.status
        if fault.body is not None:
            self.send_raw(fault.status, fault.body, fault.content_type, fault.headers)
            return True
        details = {"retryAfterSeconds": fault.retry_after_s} if fault.retry_after_s is not None else None
        self.send_json(fault.status, status_body(fault.status, fault.reason, fault.message, details), fault.headers)
        return True

    def _handle(self, req: RecordedRequest, path: str) -> tuple[int, Any, dict[str, str]]:
        fake = self.fake
        settings = fake.settings
        # The scheme is case-insensitive, as in the real bearer-token authenticator (the
        # kubernetes client sends "bearer <token>" for an in-cluster service account).
        scheme, _, token = (self.headers.get("Authorization") or "").strip().partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        if settings.require_token and token not in (settings.token, ADMIN_TOKEN):
            return 401, status_body(401, "Unauthorized", "Unauthorized"), {}
        if token != ADMIN_TOKEN:  # system:masters: no authorizer refuses the cluster admin
            fake._authz.authorize(request_info(req.method, path, req.query))
        if self._body_error is not None:
            raise self._body_error
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, "ok", {}
        if path.startswith("/openapi/"):
            raise unknown_path()
        extra = fake._kubevirt.discovery_groups() + fake._aggregator.discovery_groups()
        if not served_path(path, fake._table.all(), extra):
            # kube-apiserver's HTTP mux routes nothing there (no such API group: a CRD not installed)
            # and answers with Go's http.NotFound, not a Status.
            return 404, MUX_NOT_FOUND, {}
        answer = fake._aggregator.handle(req.method, path) or \
            fake._kubevirt.handle(req.method, path, req.body, self.headers.get("Accept"))
        if answer is not None:
            return answer[0], answer[1], {}
        route = fake._table.route(path)
        if route is None:
            if req.method != "GET":
                raise method_not_allowed()
            host = self.headers.get("Host") or f"127.0.0.1:{fake.port}"
            out = discovery(path, host, fake._table.all(), dict(settings.version_info), extra)
            if out is None:
                raise unknown_path()
            return 200, out, {}
        code, out = self._resource(req, route)
        return code, out, {}

    def _resource(self, req: RecordedRequest, route: Route) -> tuple[int, Any]:
        fake, api = self.fake, self.fake._api
        res, ns, name, sub = route
        method, q = req.method, req.query
        if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise method_not_allowed()
        dry = q.get("dryRun")
        if dry and any(v != "All" for v in dry):
            raise bad_request(f"Invalid dry run value: {dry}")
        dry_run = bool(dry)
        watch = truthy(first(q, "watch"))
        if sub is None and _verb(method, name, watch) not in res.verbs:
            raise method_not_allowed()
        if (sub, method) == ("eviction", "POST"):
            return fake._evictions.evict(res, ns, name or "", req.body, dry_run)
        if (sub, method) == ("log", "GET"):
            return fake._pod_lifecycle.read_log(res, ns, name or "", q)
        if (sub, method) == ("binding", "POST"):
            return fake._pod_lifecycle.bind(res, ns, name or "", req.body, dry_run)
        if sub not in (None, "status"):
            raise method_not_allowed()
        if method == "GET":
            if name is not None:
                return api.get(res, ns, name)
            if watch:
                fake._watches.serve(self, res, ns, q)
                return STREAMED, None
            return 200, api.list(res, ns, q)
        if method == "POST":
            if name is not None or (res.namespaced and ns is None):
                raise method_not_allowed()
            if res.id == SSAR_ID:
                return fake._authz.review(res, req.body)
            if res.id == SSRR_ID:
                return fake._authz.rules_review(res, req.body)
            if res.id == SSR_ID:
                return self_subject_review(res, req.body, fake.user)
            return api.create(res, ns, req.body, dry_run)
        if name is None:
            if method != "DELETE":
                raise method_not_allowed()
        if method == "PUT":
            return api.put(res, ns, name or "", sub, req.body, dry_run)
        if method == "PATCH":
            return api.patch(res, ns, name or "", sub, req.content_type, req.body, q, dry_run)
        if sub is not None:
            raise method_not_allowed()
        if isinstance(req.body, dict):
            # A DELETE with a body takes its options from the body alone: the query's dryRun and
            # gracePeriodSeconds are ignored (apiserver handlers/delete.go; measured: `?dryRun=All` beside a
            # DeleteOptions body deletes for real).
            options = req.body
            dry_run = "All" in (options.get("dryRun") or [])
        else:
            options = {}
            if "gracePeriodSeconds" in q:
                options["gracePeriodSeconds"] = int(first(q, "gracePeriodSeconds") or 0)
        if name is None:
            return api.delete_collection(res, ns, q, options, dry_run)
        return api.delete(res, ns, name, options, dry_run)


def warning_header(text: str) -> str:
    """A ``Warning`` header value as kube-apiserver writes it: k8s.io/apimachinery pkg/util/net/http.go
    NewWarningHeader(299, "-", text): ``299 - "text"``, with ``"`` and ``\\`` escaped by a backslash."""
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _verb(method: str, name: str | None, watch: bool) -> str:
    if method == "GET":
        return "get" if name else ("watch" if watch else "list")
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method) or (
        "delete" if name else "deletecollection")
