"""A per-node lock that every rblnctl honours: a coordination.k8s.io/v1 Lease, renewed while the work runs.

The Lease `rblnctl-node-<node>` (in the operator's namespace) names its holder (host, pid, what it
does), when it was acquired and last renewed, and for how long a renewal counts. A second drain or
switch of a locked node refuses, naming the holder and its last renewal. A holder that dies stops
renewing; once `leaseDurationSeconds` have passed the lock is expired and can be taken over (only
when asked to: the holder may be alive behind a network partition or a skewed clock). Writes are
guarded by resourceVersion, so two runs can never both believe they hold it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any
from datetime import UTC, datetime

from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop, Stopped, sliced
from rblnctl.errors import ClusterError, ClusterUnreachable, Conflict, Forbidden, NotFound, RblnError, Refused
from rblnctl.kube import LEASES, Kube, writes
from rblnctl.kube.lease import LockState, lease_state
from rblnctl.plan import Blocker

log = logging.getLogger(__name__)

MANAGED_BY = {"app.kubernetes.io/managed-by": "rblnctl"}
NODE_LABEL = "rblnctl.rebellions.ai/node"


def lease_name(node: str) -> str:
    """`rblnctl-node-<node>`, shortened with a hash when the node name is very long (names stay <= 253)."""
    name = f"rblnctl-node-{node}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:12]
    return f"rblnctl-node-{node[:200].rstrip('.-')}-{digest}"


def default_identity(what: str) -> str:
    """`rblnctl@HOST pid N: WHAT`: enough for a person to find the holder."""
    return f"rblnctl@{socket.gethostname()} pid {os.getpid()}: {what}"


def _micro(when: datetime) -> str:
    """metav1.MicroTime as the API server writes it."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    """A metav1.MicroTime or metav1.Time (always UTC, `Z`); None when absent or unreadable."""
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text or "", fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def read_state(lease: dict, now: datetime) -> LockState | None:
    """The lock a Lease describes; None when it holds nobody."""
    spec = lease.get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    if not holder:
        return None
    duration = int(spec.get("leaseDurationSeconds") or 0)
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    return lease_state(holder, renewed, duration, now)


class LockLost(Refused):
    """Another run took the lock over while this one held it; this run must stop writing."""


@dataclass(kw_only=True)
class NodeLock:
    """Acquire, renew and release one node's lock."""

    kube: Kube
    node: str
    namespace: str
    identity: str
    duration_s: int = 60
    clock: Clock = SYSTEM_CLOCK
    server_dry_run: bool = False  # validate the Lease write with dryRun=All; hold nothing
    stop: Stop | None = None  # the run was interrupted: ensure_held() raises Stopped before the next write
    _lease: dict | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    lost: threading.Event = field(default_factory=threading.Event, init=False)
    _attempted: bool = field(default=False, init=False)  # a write taking the lock was sent: it may have landed

    @property
    def name(self) -> str:
        return lease_name(self.node)

    def check(self, *, take_over: bool = False) -> list[Blocker]:
        """Read the lock (no write): a blocker when someone else holds it, or holds it expired without `take_over`."""
        lease = self.kube.get_optional(LEASES, self.name, namespace=self.namespace)
        state = read_state(lease, self.clock.now()) if lease else None
        if state is None or state.holder == self.identity:
            return []
        now = self.clock.now()
        if not state.expired:
            return [Blocker(f"node {self.node} is locked by {state.describe(now)}; the lock expires "
                            f"{state.duration_s}s after its last renewal if that run stops: wait for it to finish")]
        if take_over:
            return []
        return [Blocker(f"node {self.node} is locked by {state.describe(now)}, expired: if that run is gone, take "
                        "the lock over", override="take_over")]

    def acquire(self, *, take_over: bool = False) -> LockState | None:
        """Take the lock; return the expired holder taken over (None when the lock was free).

        Raises Refused when someone else holds it (or holds it expired and `take_over` is False),
        and the API's errors unchanged.
        """
        for _ in range(3):
            now = self.clock.now()
            lease = self.kube.get_optional(LEASES, self.name, namespace=self.namespace)
            if lease is None:
                try:
                    self._attempted = True
                    self._lease = self._write_new(now)
                    return None
                except Conflict:
                    continue  # created by someone else in between: read it and judge again
            state = read_state(lease, now)
            if state is not None and state.holder != self.identity:
                blockers = self.check(take_over=take_over)
                if blockers:
                    raise Refused(f"node {self.node} is locked by another rblnctl run", blockers=blockers)
            try:
                self._attempted = True
                self._lease = self._take(lease, now)
                return state if state is not None and state.holder != self.identity else None
            except Conflict:
                continue  # it changed under us: read it and judge again
        raise Refused(f"the lock of node {self.node} kept changing while rblnctl tried to take it")

    def _body(self, now: datetime, *, transitions: int) -> dict:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration_s),
                "acquireTime": _micro(now), "renewTime": _micro(now), "leaseTransitions": transitions}

    def _settle(self, next_write: Any, *, dry_run: bool = False) -> writes.Settled:
        """One Lease write, settled by reading the Lease back when its outcome is unknown (rblnctl.kube.writes)."""
        return writes.settle(self.kube, next_write, what=f"Lease {self.namespace}/{self.name}", dry_run=dry_run,
                             read=lambda: self.kube.get_optional(LEASES, self.name, namespace=self.namespace))

    def _ours(self, lease: dict | None) -> bool:
        return lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity

    def _write_new(self, now: datetime) -> dict:
        """Create the Lease naming us. A create whose outcome is unknown (a lost reply, a 504) is settled by
        reading the Lease back: ours, done; absent, created again; someone else's, Conflict (acquire judges)."""
        obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": self.name, "namespace": self.namespace,
                            "labels": {**MANAGED_BY, NODE_LABEL: self.node[:63].rstrip(".-")}},
               "spec": self._body(now, transitions=0)}

        def next_write(lease: Any) -> writes.Write | None:
            if lease is writes.UNREAD or lease is None:
                return writes.create(LEASES, obj, namespace=self.namespace)
            if self._ours(lease):
                return None
            raise Conflict(f"the Lease of node {self.node} was created by someone else meanwhile",
                           status=409, reason="AlreadyExists")

        try:
            done = self._settle(next_write, dry_run=self.server_dry_run)
        except NotFound as e:
            if f'namespaces "{self.namespace}" not found' not in str(e):
                raise
            raise Refused(f"cannot lock node {self.node}: namespace {self.namespace} does not exist (name another "
                          "namespace for the lock)") from e
        for found in (done.reply, done.state):
            if isinstance(found, dict) and (found.get("metadata") or {}).get("name"):
                return found
        return obj

    def _take(self, lease: dict, now: datetime) -> dict:
        """Take over (or renew) the Lease with a merge patch guarded by the resourceVersion read."""
        spec = lease.get("spec") or {}
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if spec.get("holderIdentity") != self.identity else 0)
        patch = {"metadata": {"resourceVersion": lease["metadata"].get("resourceVersion")},
                 "spec": self._body(now, transitions=transitions)}
        sent: list[bool] = []

        def next_write(current: Any) -> writes.Write | None:
            if sent and current is not writes.UNREAD and self._ours(current) and \
                    (current.get("spec") or {}).get("acquireTime") == patch["spec"]["acquireTime"]:
                return None  # our patch landed; its reply was lost
            if sent and current is None:
                raise Conflict(f"the Lease of node {self.node} was deleted meanwhile", status=409, reason="Conflict")
            sent.append(True)
            return writes.patch(LEASES, self.name, patch, patch_type="merge", namespace=self.namespace)

        done = self._settle(next_write, dry_run=self.server_dry_run)
        return done.reply if isinstance(done.reply, dict) else done.state

    def renew(self) -> None:
        """Move renewTime forward (guarded by resourceVersion); set `lost` when someone else took the lock.

        A renewal whose reply is lost is settled by the next one: its stale resourceVersion draws a 409,
        and the Lease read back says whether it is still ours.
        """
        if self._lease is None or self.server_dry_run:
            return
        patch = {"metadata": {"resourceVersion": self._lease["metadata"].get("resourceVersion")},
                 "spec": {"renewTime": _micro(self.clock.now()), "holderIdentity": self.identity}}
        try:
            self._lease = writes.send(self.kube, writes.patch(LEASES, self.name, patch, patch_type="merge",
                                                              namespace=self.namespace))
        except (Conflict, NotFound):
            lease = self.kube.get_optional(LEASES, self.name, namespace=self.namespace)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                self.lost.set()
                return
            self._lease = lease  # our own lost reply had landed: go on from what the server holds
        except (ClusterError, ClusterUnreachable) as e:
            log.debug("renewing the lock of node %s failed (%s); trying again next time", self.node, e)

    def ensure_held(self) -> None:
        """Raise LockLost when another run took the lock, Stopped when the run was interrupted: call before a write."""
        if self.stop is not None and self.stop.is_set():
            raise Stopped(f"stopped before the next write to node {self.node}")
        if self.lost.is_set():
            raise LockLost(f"another rblnctl run took over the lock of node {self.node}; this run stopped writing")

    def start_renewing(self) -> None:
        """Renew every third of the lease duration in a daemon thread until release()."""
        if self._lease is None or self.server_dry_run or self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self.duration_s / 3):
                self.renew()
                if self.lost.is_set():
                    return

        self._thread = threading.Thread(target=loop, name=f"rblnctl-lock-{self.node}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and give the lock back, only if it is still ours.

        The Lease is deleted with uid and resourceVersion preconditions; a delete whose outcome is unknown
        (a lost reply, a 5xx) is settled by reading the Lease back (rblnctl.kube.writes). When deleting is
        refused (RBAC allows the Lease's create and patch but not its delete), the lock is released as
        client-go's leader election does: the holder is cleared, so the next run takes the Lease at once
        instead of waiting out leaseDurationSeconds. Never raises an RblnError: a lock that cannot be given back
        expires.

        An acquire cut short (Ctrl-C or a signal while its write was on its way) may have taken the lock: the Lease
        is read back and given back when it names this run. Ctrl-C or a signal while the lock is given back does
        not stop that: it is tried once more, then the interrupt goes on. Either way a lock left behind would refuse
        the very command the interrupted run printed to resume, until it expired (issue 28).
        """
        self._stop.set()
        if self._thread is not None:
            renewer = self._thread

            def ended(seconds: float) -> bool:
                renewer.join(seconds)
                return not renewer.is_alive()

            sliced(ended, 5)  # a renewal in flight ends with its request; a Ctrl-C meanwhile runs at once
            self._thread = None
        if self.server_dry_run or self.lost.is_set():
            self._lease = None
            return
        if self._lease is None:
            if not self._attempted:
                return
            try:
                found = self.kube.get_optional(LEASES, self.name, namespace=self.namespace)
            except RblnError as e:
                log.warning("could not read the lock of node %s back (%s); if it is ours it expires in %ss", self.node,
                            e, self.duration_s)
                return
            if not self._ours(found):
                return
            self._lease = found
        try:
            self._give_back()
        except KeyboardInterrupt:
            self._give_back()
            raise
        finally:
            self._lease = None

    def _give_back(self) -> None:
        """Delete the Lease if it is still ours (see release)."""
        if self._lease is None:
            return
        uid = (self._lease.get("metadata") or {}).get("uid")

        def preconditions(lease: Any) -> dict:
            md = lease.get("metadata") or {}
            return {"apiVersion": "v1", "kind": "DeleteOptions",
                    "preconditions": {"uid": md.get("uid"), "resourceVersion": md.get("resourceVersion")}}

        def still_ours(lease: Any) -> bool:
            return lease is not None and (lease.get("metadata") or {}).get("uid") == uid and self._ours(lease)

        def next_delete(lease: Any) -> writes.Write | None:
            current = self._lease if lease is writes.UNREAD else lease
            if not still_ours(current):
                return None  # gone, or no longer ours: nothing to give back
            return writes.delete(LEASES, self.name, namespace=self.namespace, body=preconditions(current))

        try:
            writes.settle(self.kube, next_delete, what=f"Lease {self.namespace}/{self.name}", retry=writes.is_409,
                          read=lambda: self.kube.get_optional(LEASES, self.name, namespace=self.namespace))
        except NotFound:
            pass
        except Forbidden as e:
            self._release_by_patch(still_ours, e)
        except RblnError as e:
            log.warning("could not release the lock of node %s (%s); it expires in %ss", self.node, e, self.duration_s)

    def _release_by_patch(self, still_ours: Any, refused: RblnError) -> None:
        """Clear the Lease's holder (a patch guarded by resourceVersion) when deleting it is forbidden."""
        def next_patch(lease: Any) -> writes.Write | None:
            current: Any = self._lease if lease is writes.UNREAD else lease
            if not still_ours(current):
                return None
            body = {"metadata": {"resourceVersion": current["metadata"].get("resourceVersion")},
                    "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _micro(self.clock.now())}}
            return writes.patch(LEASES, self.name, body, patch_type="merge", namespace=self.namespace)

        try:
            writes.settle(self.kube, next_patch, what=f"Lease {self.namespace}/{self.name}", retry=writes.is_409,
                          read=lambda: self.kube.get_optional(LEASES, self.name, namespace=self.namespace))
            log.info("deleting the lock of node %s was refused (%s); released it by clearing its holder", self.node,
                     refused)
        except RblnError as e:
            log.warning("could not release the lock of node %s (%s; clearing its holder: %s); it expires in %ss",
                        self.node, refused, e, self.duration_s)
