"""``FakeApiServer``: the facade a test holds. It owns the components and forwards to them:

    _table  ResourceTable   what is served (resources.py)
    _store  Store           objects, resourceVersions, history, deletion (store.py)
    _api    RestApi         the REST verbs on the store (rest.py)
    _watches WatchHub       open watch streams (watch.py)
    _evictions Evictions    pods/eviction and PodDisruptionBudgets (eviction.py)
    _authz  Authorizer      forbid(), enforce_rbac(), SelfSubjectAccessReviews (rbac.py)
    _faults FaultBook       injected faults (faults.py)
    _log    RequestLog      recorded requests (recording.py)
    _pod_lifecycle PodLifecycle  kubelet hook, pod phases, logs, binding, scheduling failures (pods.py)
    _kubevirt KubeVirt      subresources.kubevirt.io and the optional VM simulation (kubevirt.py)
    _aggregator Aggregator  APIServices; the proxy's 503 while virt-api cannot be reached (aggregator.py)

and ``settings`` (config.py), the knobs every component reads, which the test sets as attributes.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable, Iterable

from tests.fakes.apiserver.config import ADMIN_TOKEN, HARNESS_USER_AGENT, Settings
from tests.fakes.apiserver.discovery import version_info
from tests.fakes.apiserver.eviction import Evictions
from tests.fakes.apiserver.faults import UNSET, FaultBook
from tests.fakes.apiserver.http import Handler, QuietServer, make_httpd
from tests.fakes.apiserver.kubeconfig import write_kubeconfig
from tests.fakes.apiserver.aggregator import Aggregator
from tests.fakes.apiserver.kubevirt import KubeVirt
from tests.fakes.apiserver.pods import PodLifecycle
from tests.fakes.apiserver.rbac import Authorizer
from tests.fakes.apiserver.recording import RecordedRequest, RequestLog
from tests.fakes.apiserver.resources import RESOURCES, Resource, ResourceTable
from tests.fakes.apiserver.rest import RestApi
from tests.fakes.apiserver.store import Store
from tests.fakes.apiserver.watch import WatchHub


class _Setting:
    """A FakeApiServer attribute kept on its shared ``Settings``, where the components read it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj.settings, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj.settings, self.name, value)


class FakeApiServer:
    """A stateful fake kube-apiserver on 127.0.0.1. See the package docstring."""

    deletion_delay_s = _Setting()
    require_token = _Setting()
    token = _Setting()
    user = _Setting()
    auto_namespaces = _Setting()
    eviction_hook = _Setting()
    kubevirt_eviction_webhook = _Setting()
    virt_api_available = _Setting()
    kubelet = _Setting()
    bookmark_interval_s = _Setting()
    version_info = _Setting()

    def __init__(self, *, version: str = "v1.34.1", deletion_delay_s: float = 0.0,
                 require_token: bool = False, auto_namespaces: bool = True,
                 resources: Iterable[Resource] = RESOURCES,
                 tls_cert: str | Path | None = None, tls_key: str | Path | None = None,
                 client_ca: str | Path | None = None, simulate_kubevirt: bool = False):
        """``tls_cert``/``tls_key`` (PEM files) serve HTTPS instead of HTTP; ``client_ca`` then also
        requires a client certificate signed by that CA (kubeconfig ``client-certificate``).
        ``simulate_kubevirt`` makes VMIs follow their VMs' run strategy (see kubevirt.py)."""
        lock = threading.RLock()
        self._lock = lock
        self.settings = Settings(deletion_delay_s=deletion_delay_s, require_token=require_token,
                                 auto_namespaces=auto_namespaces)
        #: Exceptions raised by callbacks or by the server itself while handling requests.
        self.errors: list[str] = []
        self._table = ResourceTable(resources, lock)
        self._store = Store(self._table, lock, self.settings, self.errors)
        self._api = RestApi(self._store)
        self._watches = WatchHub(self._store, self.settings)
        self._evictions = Evictions(self._store, self.settings)
        self._authz = Authorizer(lock, self.settings)
        self._faults = FaultBook(lock)
        self._log = RequestLog(lock, self.errors)
        self._pod_lifecycle = PodLifecycle(self._store, self.settings)
        self._kubevirt = KubeVirt(self._store, simulate_kubevirt, through_api=self._by_a_client)
        self._aggregator = Aggregator(self._table, self._kubevirt, self.settings)
        self._api.update_admission.append(self._kubevirt.admit_update)
        self._api.warn = self._warn
        self.tls_cert, self.tls_key, self.client_ca = tls_cert, tls_key, client_ca
        self.url = ""
        self._conns: set[socket.socket] = set()
        self._current = threading.local()  # the request a handler thread is serving (current_request())
        self._httpd: QuietServer | None = None
        self._thread: threading.Thread | None = None
        self.set_version(version)

    # ---- lifecycle --------------------------------------------------------------------------------

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class bound to this fake (for callers running their own server)."""
        return type("BoundHandler", (Handler,), {"fake": self})

    def start(self) -> FakeApiServer:
        if self._httpd is not None:
            return self
        self._store.stopping.clear()
        self._httpd, scheme = make_httpd(self.handler(), self.tls_cert, self.tls_key, self.client_ca)
        self.url = f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._store.stopping.set()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._store.cancel_timers()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _track_connection(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1]) if self.url else 0

    #: The cluster admin's bearer token (config.ADMIN_TOKEN): never refused by forbid() or enforce_rbac().
    admin_token = ADMIN_TOKEN

    def write_kubeconfig(self, path: str | Path, *, context: str = "fake", namespace: str = "default",
                         ca: str | Path | None = None, insecure: bool = False,
                         client_cert: str | Path | None = None, client_key: str | Path | None = None) -> Path:
        """Write a kubeconfig (bearer token ``fake-token``) pointing at this server. For HTTPS: ``ca``
        (a PEM file, written inline as certificate-authority-data) or ``insecure``
        (insecure-skip-tls-verify), and ``client_cert``/``client_key`` for client-certificate auth."""
        return write_kubeconfig(path, url=self.url, user=self.user, token=self.token, context=context,
                                namespace=namespace, ca=ca, insecure=insecure, client_cert=client_cert,
                                client_key=client_key)

    def set_version(self, git_version: str) -> None:
        """What ``/version`` reports (``v1.33.2``...)."""
        self.settings.version_info = version_info(git_version)

    # ---- resource table ---------------------------------------------------------------------------

    def add_resource(self, res: Resource) -> None:
        self._table.add(res)

    def remove_resource(self, name: str) -> None:
        """Stop serving a resource (``"kubevirts.kubevirt.io"``, ``"KubeVirt"`` or ``"nodes"``),
        e.g. to simulate a CRD that is not installed or an API group the cluster lacks."""
        self._table.remove(name)

    def remove_group(self, group: str) -> None:
        """Stop serving every resource of an API group (``"kubevirt.io"``): the group's CRDs are not installed,
        and the real server's mux answers a plain-text 404 under it."""
        for r in self._table.all():
            if r.group == group:
                self._table.remove(r.id)

    def resources(self) -> list[Resource]:
        return self._table.all()

    # ---- state (thread-safe) ----------------------------------------------------------------------

    def add(self, *objs: dict) -> None:
        """Seed objects. uid/resourceVersion/creationTimestamp/generation are set when missing."""
        self._store.add(*objs)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self._store.get(kind, name, namespace)

    def list(self, kind: str, namespace: str | None = None, *, api_version: str | None = None) -> list[dict]:
        """The objects of a kind (`api_version`: of that group's, where two groups serve one kind: Event)."""
        return self._store.list(kind, namespace, api_version)

    def update(self, obj: dict) -> dict:
        """Server-side replace (no resourceVersion check). Keeps uid/creationTimestamp when absent,
        bumps resourceVersion (and generation when the spec changed), notifies watchers."""
        return self._store.update(obj)

    def mutate(self, kind: str, name: str, namespace: str | None = None,
               fn: Callable[[dict], dict | None] | None = None) -> dict:
        """Atomic read-modify-write: ``fn`` edits a copy of the object in place (or returns a new
        object dict with ``metadata``; any other return value, e.g. of ``dict.pop``, is ignored),
        which is then stored as by ``update``. Raises KeyError when the object is missing."""
        assert fn is not None
        return self._store.mutate(kind, name, namespace, fn)

    def delete_now(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Remove an object at once (no grace period, finalizers ignored)."""
        self._store.delete_now(kind, name, namespace)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """Delete as an API DELETE would (graceful pod deletion, finalizers). Returns the object
        as the server answers it, or None when it did not exist."""
        return self._store.delete(kind, name, namespace)

    def compact(self, resource_version: int | None = None) -> None:
        """Forget the change history up to ``resource_version`` (default: all of it), as etcd
        compaction does: a watch from an older resourceVersion then gets 410 Expired."""
        self._store.compact(resource_version)

    # ---- hooks ------------------------------------------------------------------------------------

    def on_change(self, callback: Callable[[str, dict], None]) -> Callable[[], None]:
        """Call ``callback(event, obj)`` (ADDED/MODIFIED/DELETED, a copy of the object) after every
        committed change, outside the lock, on the thread that made it (for HTTP writes: before
        the response is sent). Exceptions land in ``errors``. Returns a function that unsubscribes."""
        with self._lock:
            self._store.change_callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._store.change_callbacks:
                    self._store.change_callbacks.remove(callback)

        return unsubscribe

    def _warn(self, text: str) -> None:
        """An admission warning for the reply of the request being served, as kube-apiserver's warning recorder
        keeps them (k8s.io/apiserver pkg/endpoints/filters/warning.go AddWarning: an empty text is dropped, a text
        already recorded for this request is not added again)."""
        req = self.current_request()
        if req is not None and text and text not in req.warnings:
            req.warnings.append(text)

    def current_request(self) -> RecordedRequest | None:
        """The request whose handling made the change an ``on_change`` callback is told of (None when the test changed
        the store directly): e.g. to tell a change by the client under test from the harness's own."""
        return getattr(self._current, "request", None)

    def _by_a_client(self) -> bool:
        """Whether the change being made comes from a client's request: not the test seeding the store (``add``) or
        through the harness's own client (config.HARNESS_USER_AGENT), both of which stand for a world already there."""
        req = self.current_request()
        return req is not None and not (req.headers.get("user-agent") or "").startswith(HARNESS_USER_AGENT)

    def on_request(self, callback: Callable[[RecordedRequest], None]) -> Callable[[], None]:
        """Call ``callback(req)`` before handling each request (outside the lock; ``req.status``
        is 0 then). A test can change state here between a client's read and its write."""
        return self._log.on_request(callback)

    def on_handled(self, callback: Callable[[RecordedRequest], None]) -> Callable[[], None]:
        """Call ``callback(req)`` once a client's request was handled and committed (``req.status`` set), before its
        reply is sent (outside the lock; not for a request an injected fault answered instead, nor a watch). A test
        can change state here, right after a client's write and before the client hears of it."""
        return self._log.on_handled(callback)

    # ---- the request log --------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request of the clients under test so far, in arrival order (the live list); the test harness's
        own requests (config.HARNESS_USER_AGENT: simulated operator and kubelets) are in ``harness_requests``."""
        return self._log.requests

    @property
    def harness_requests(self) -> list[RecordedRequest]:
        """The test harness's requests (User-Agent config.HARNESS_USER_AGENT), in arrival order."""
        return self._log.harness_requests

    def writes(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.is_write]

    def schedule(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` after ``delay_s`` seconds on a timer thread, unless the server stops first: a simulated
        component's delayed write (a kubelet's pod ending), which ``wait_scheduled`` waits for as for the fake's own."""
        self._store.schedule(delay_s, fn, *args)

    def wait_scheduled(self, horizon_s: float = 0.2, timeout_s: float = 5.0) -> bool:
        """Wait until the simulated controllers' delayed writes due within ``horizon_s`` have been made (Store.
        wait_scheduled): instead of sleeping a fixed time before judging what they leave."""
        return self._store.wait_scheduled(horizon_s, timeout_s)

    def clear_requests(self) -> None:
        self._log.clear()

    def requests_matching(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        """The requests with ``method`` (any when None) whose path matches the regex ``path`` (re.search),
        e.g. to count retries or measure their spacing with ``RecordedRequest.at``."""
        return self._log.matching(method, path)

    # ---- faults -----------------------------------------------------------------------------------

    def inject_fault(self, *, method: str | None = None, path: str | None = None, status: int | None = UNSET,
                     reason: str | None = None, message: str = "injected fault", delay_s: float = 0.0,
                     drop: bool = False, times: int = 1, retry_after_s: int | None = None,
                     lose_reply: bool = False, body: Any = None, content_type: str = "application/json",
                     client: str | None = None, watch: bool | None = None,
                     then: Callable[[], None] | None = None) -> None:
        """The next ``times`` requests matching ``method`` and ``path`` (regex, ``re.search`` on the
        path without query) wait ``delay_s``, then: the connection is dropped (``drop``); or
        ``body`` (bytes, str or any JSON value) is answered raw with ``content_type`` and ``status``
        (default 200); or a Status with ``status`` (default 500; ``retry_after_s`` adds Retry-After
        and details.retryAfterSeconds) is returned; or (``status=None``) the request is served
        normally. ``lose_reply`` serves it normally, commits, then drops the connection instead
        of replying (after ``delay_s``); its RecordedRequest has ``applied`` and ``reply_lost``. ``watch`` limits
        the fault to watch requests (True) or to the others (False); ``then`` runs once the fault has the request
        (lose_reply: after the commit, before the drop), e.g. to signal the client at that exact request."""
        self._faults.inject(method=method, path=path, status=status, reason=reason, message=message,
                            delay_s=delay_s, drop=drop, times=times, retry_after_s=retry_after_s,
                            lose_reply=lose_reply, body=body, content_type=content_type, client=client,
                            watch=watch, then=then)

    def clear_faults(self) -> None:
        self._faults.clear()

    # ---- authorization ----------------------------------------------------------------------------

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Make matching requests fail with a real-style 403. ``verb`` may be ``*``; ``resource``
        is ``nodes``, ``pods/eviction``, ``kubevirts`` or group-qualified ``kubevirts.kubevirt.io``;
        ``namespace`` None matches every namespace and the cluster scope."""
        self._authz.forbid(verb, resource, namespace)

    def enforce_rbac(self, objects: Iterable[dict]) -> None:
        """Allow only what the given Role/ClusterRole objects allow (a Role in its namespace), plus
        what every authenticated user may do (discovery, /version, /healthz, access reviews).
        Replaces the roles of an earlier call."""
        self._authz.enforce(list(objects))

    def allow_all(self) -> None:
        """Drop the forbid() rules and the RBAC enforcement."""
        self._authz.allow_all()

    # ---- watches ----------------------------------------------------------------------------------

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now."""
        return self._watches.open_count()

    def close_watches(self) -> int:
        """End every open watch stream cleanly (as when the server's watch timeout passes); returns
        how many there were. Clients resume from their last resourceVersion."""
        return self._watches.close_all()

    # ---- pods: kubelet and scheduler --------------------------------------------------------------

    def set_pod_phase(self, namespace: str, name: str, phase: str, *, exit_code: int | None = None,
                      reason: str | None = None, message: str | None = None) -> dict:
        """Report ``phase`` for a pod on a node as its kubelet would: container states (``reason``
        and ``message`` of the waiting/terminated containers, e.g. ErrImagePull; ``exit_code`` of
        a terminated one, or of the last run for a restarted Pending/Running container),
        conditions, IPs. Returns the stored pod."""
        return self._pod_lifecycle.set_phase(namespace, name, phase, exit_code=exit_code, reason=reason,
                                             message=message)

    def set_pod_log(self, namespace: str, name: str, text: str, *, container: str | None = None) -> None:
        """What ``GET pods/NAME/log`` answers for the pod (or one ``container``) from now on."""
        self._pod_lifecycle.set_log(namespace, name, text, container)

    def mark_unschedulable(self, namespace: str, name: str, message: str) -> dict:
        """The scheduler's verdict: PodScheduled False/Unschedulable with ``message`` (``0/3 nodes are
        available: ...``) and a FailedScheduling Warning Event for the pod. Returns the pod."""
        return self._pod_lifecycle.mark_unschedulable(namespace, name, message)

    # ---- KubeVirt ---------------------------------------------------------------------------------

    @property
    def simulate_kubevirt(self) -> bool:
        return self._kubevirt.simulate

    @simulate_kubevirt.setter
    def simulate_kubevirt(self, on: bool) -> None:
        self._kubevirt.simulate = on

    @property
    def kubevirt_launcher_delay_s(self) -> float:
        """How long a simulated VMI's virt-launcher pod stays Pending (and the VM not ready) after a start."""
        return self._kubevirt.launcher_delay_s

    @kubevirt_launcher_delay_s.setter
    def kubevirt_launcher_delay_s(self, seconds: float) -> None:
        self._kubevirt.launcher_delay_s = seconds
