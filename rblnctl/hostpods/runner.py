"""HostPodRunner: one pod per node, at most N at once, each judged and deleted as it ends; nothing left behind.

Requests grow with the nodes, not with the waiting: per node one create, one log read (pods that ran)
and one delete; for the whole run one watch of its pods by label selector (rblnctl.kube.watch: one LIST,
then one stream from its resourceVersion, reopened where it stopped, relisted on 410), however many pods
are in flight and however long they take. A pod that cannot be placed (PodScheduled
False/Unschedulable), whose image cannot be pulled, that the kubelet rejects or that misses its deadline
is an outcome with its reason, never a hang. Whatever happens (an error, Ctrl-C, SIGTERM), every pod the
run created is deleted before run() returns or raises, unless `keep`.
"""

from __future__ import annotations

import enum
import json
import logging
import secrets
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.batch import stops_the_rest
from rblnctl.errors import AdmissionDenied, ClusterError, Forbidden, InvalidInput, NotFound, RblnError, one_line
from rblnctl.hostpods.spec import CONTAINER, HostCommand, pod_manifest
from rblnctl.kube import (
    PODS,
    SYNC,
    Kube,
    Mirror,
    WatchEvent,
    WatchSpec,
    validate_name,
    validate_namespace,
    watch_many,
    writes,
)

log = logging.getLogger(__name__)

# Waiting reasons that mean the image will not come (kubelet images/types.go: ErrImagePull,
# ImagePullBackOff, ErrImageNeverPull, InvalidImageName): reported at once, not after the deadline.
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})


class PodState(enum.StrEnum):
    """How a host pod ended."""

    COMPLETED = "completed"  # its container ran to the end (any exit code); `log` holds its output
    UNSCHEDULABLE = "unschedulable"  # PodScheduled False/Unschedulable
    IMAGE_PULL = "image-pull"  # the image cannot be pulled
    REJECTED = "rejected"  # failed before its container ran (kubelet admission: OutOfcpu, NodeAffinity...)
    TIMED_OUT = "timed-out"  # still not finished at its deadline
    VANISHED = "vanished"  # deleted by someone else (or evicted) before it finished
    CREATE_FAILED = "create-failed"  # the API server would not create it (after retries; admission, a 5xx...)
    NOT_ATTEMPTED = "not-attempted"  # no pod was sent: an earlier failure made trying pointless (message: why)


@dataclass(frozen=True, kw_only=True)
class PodOutcome:
    """One node's pod: how it ended, its exit code and log (COMPLETED), or the reason it did not run."""

    node: str
    pod: str
    state: PodState
    exit_code: int | None = None
    log: str = ""
    reason: str = ""  # Kubernetes' one-word reason: Unschedulable, ErrImagePull, OutOfcpu...
    message: str = ""  # what Kubernetes (or rblnctl, for a deadline) said about it


@dataclass(frozen=True, kw_only=True)
class HostPodRun:
    """Every node's outcome (in the order the nodes were given), and the pods left in place (`keep`, or undeletable)."""

    namespace: str
    image: str
    run_id: str
    outcomes: tuple[PodOutcome, ...]
    left_behind: tuple[str, ...] = ()
    stopped: str | None = None  # why some nodes were not attempted (their outcome is NOT_ATTEMPTED)


ADMISSION_RETRIES = 3  # creates of one node's pod that admission may refuse while the run's own pods are around


def _noop(*_: object) -> None:
    return None


def _stops_the_rest(err: RblnError) -> str | None:
    """Why a failed create makes creating the other nodes' pods pointless (None: each node is tried).

    RBAC and a missing namespace refuse every pod the same way; so does an API server that is gone
    (rblnctl.batch.stops_the_rest). A 5xx that would not pass, or admission refusing one pod, does not.
    """
    if isinstance(err, (Forbidden, NotFound)):
        return f"creating host pods is refused: {one_line(err)}"
    return stops_the_rest(err)


def json_document(log_text: str) -> dict[str, Any]:
    """The JSON document an rblnctl command printed, from its pod's log.

    A container log holds stdout and stderr in one stream, so lines before the document (warnings)
    and after it (the `error: ...` line of a failing check) are skipped. Raises ValueError when
    there is no JSON object.
    """
    lines = log_text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("{")), None)
    if start is None:
        raise ValueError("no JSON report in the log")
    data, _ = json.JSONDecoder().raw_decode("".join(lines[start:]))
    if not isinstance(data, dict):
        raise ValueError("the log's JSON is not an object")
    return data


@dataclass
class _InFlight:
    node: str
    deadline: float
    seen: bool = False  # the watch has shown the pod: its absence now means it is gone


@dataclass(kw_only=True)
class HostPodRunner:
    """Run `command` on nodes, one pod each, at most `max_parallel` pods of the run at once.

    Pods that ended and are being deleted still count until the watch shows them gone, so no more than
    `max_parallel` of the run's pods exist at any time (with `keep`, finished pods stay but no longer
    count: they run nothing). `timeout_s` bounds each pod from its creation. `poll_interval_s`: the
    backoff of a create or delete that is retried, and how often the pods are listed where watching
    them is forbidden (rblnctl.kube.watch).
    """

    kube: Kube
    command: HostCommand
    image: str
    namespace: str
    max_parallel: int = 20
    timeout_s: float = 120.0
    poll_interval_s: float = 1.0
    keep: bool = False
    clock: Clock = SYSTEM_CLOCK
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    on_started: Callable[[str, str], None] = _noop  # (node, pod) after the pod was created
    on_finished: Callable[[PodOutcome], None] = _noop  # each node's outcome, as it is known
    on_left_behind: Callable[[list[str]], None] = _noop  # pods that could not be deleted (names)
    # a transient failure, tried again: of the pods' watch (watch()), or a create or delete sent again after a 5xx
    # or a lost reply (writes.settle): one hook for every retry of the run, the CLI's `retrying:` line
    on_retry: Callable[[RblnError], None] = _noop

    def __post_init__(self) -> None:
        if self.max_parallel < 1:
            raise InvalidInput(f"--max-parallel must be at least 1, not {self.max_parallel}")
        if not self.timeout_s > 0:
            raise InvalidInput(f"the pod timeout must be positive, not {self.timeout_s:g}s")
        if not self.image.strip() or any(c.isspace() for c in self.image):
            raise InvalidInput(f"invalid image {self.image!r}")
        validate_namespace(self.namespace)

    def pod_name(self, index: int) -> str:
        """The name of the run's index-th pod (node names can be 253 characters; pod names carry an index)."""
        return f"rblnctl-{self.command.name}-{self.run_id}-{index}"

    @property
    def selector(self) -> str:
        """The label selector that lists this run's pods, and only them."""
        return f"{C.HOST_POD_RUN_LABEL}={self.run_id}"

    def run(self, nodes: Sequence[str]) -> HostPodRun:
        """One pod per node; returns every outcome. Raises (after deleting what it created) on API errors: the
        watch of the pods tries a transient one again (a 5xx, a dropped stream) until the first deadline of a
        pod in flight, as every wait of rblnctl does (each retry told to `on_retry`), and raises it then.

        Each node is tried (rblnctl.batch): a create whose outcome is unknown is settled by reading the pod
        back, a 5xx is retried (rblnctl.kube.writes; each create or delete sent again told to `on_retry`), and
        a create that still fails, or that admission refuses (a ResourceQuota, Pod Security: retried while the
        run's own pods may hold the quota), is that node's CREATE_FAILED outcome. A refusal that every pod
        would meet (RBAC, a namespace that does not exist, the API server gone) raises when nothing has run
        yet, and otherwise leaves the nodes not yet started NOT_ATTEMPTED (`stopped` says why).
        """
        for node in nodes:
            validate_name(node)
        queue = deque(enumerate(nodes))
        created: list[str] = []  # every name sent in a create, even one whose reply was lost
        in_flight: dict[str, _InFlight] = {}
        terminating: set[str] = set()  # deleted, not yet seen gone by the watch
        gone: set[str] = set()  # deleted or confirmed absent: nothing to clean up
        outcomes: dict[str, PodOutcome] = {}
        left: list[str] = []
        denied: dict[str, int] = {}  # node -> creates admission refused (a quota our own pods may be holding)
        stopped: str | None = None  # why the nodes left in the queue are not attempted
        shown = Mirror()  # the run's pods, as the watch shows them
        events: Iterator[WatchEvent] | None = None  # the watch under way: it ends at the first deadline in flight
        version: str | None = None  # where the next watch resumes (None: it lists first)

        def settle_outcome(outcome: PodOutcome) -> None:
            outcomes[outcome.node] = outcome
            self.on_finished(outcome)

        def next_event() -> WatchEvent | None:
            """The next change to the run's pods; None when the first deadline of a pod in flight has passed."""
            nonlocal events, version
            if events is None:
                # Pods created later have later deadlines: a watch that ends at the first one misses none. It
                # resumes where the last one stopped (the first lists, after the first creates).
                now = self.clock.monotonic()
                until = min((fl.deadline for fl in in_flight.values()), default=now + self.timeout_s)
                # watch_many, not watch: the stream is read on a thread, the main thread waits for Ctrl-C in slices
                events = watch_many(self.kube, [WatchSpec(PODS, namespace=self.namespace, label_selector=self.selector,
                                                          resource_version=version)],
                                    timeout_s=max(0.0, until - now), clock=self.clock, poll_s=self.poll_interval_s,
                                    on_retry=self.on_retry)
            ev = next(events, None)
            if ev is None:
                events = None
                return None
            shown.apply(ev)
            version = ev.resource_version or version
            return ev

        try:
            while queue or in_flight:
                while queue and len(in_flight) + len(terminating) < self.max_parallel:
                    index, node = queue.popleft()
                    name = self.pod_name(index)
                    created.append(name)
                    try:
                        self._create(node, name)
                    except AdmissionDenied as e:
                        gone.add(name)
                        if (in_flight or terminating) and denied.get(node, 0) < ADMISSION_RETRIES:
                            # A ResourceQuota may count this run's own pods: try again when one has gone.
                            denied[node] = denied.get(node, 0) + 1
                            queue.appendleft((index, node))
                            break
                        settle_outcome(PodOutcome(node=node, pod=name, state=PodState.CREATE_FAILED,
                                                  reason="AdmissionDenied", message=str(e)))
                        continue
                    except RblnError as e:
                        why = _stops_the_rest(e)
                        if why is not None and not outcomes and not in_flight and not terminating:
                            raise  # nothing ran yet: the run itself failed (RBAC, the namespace, the server)
                        settle_outcome(PodOutcome(node=node, pod=name, state=PodState.CREATE_FAILED,
                                                  reason=type(e).__name__, message=one_line(e)))
                        if why is not None:
                            stopped = why
                            for _, rest in queue:
                                settle_outcome(PodOutcome(node=rest, pod="", state=PodState.NOT_ATTEMPTED,
                                                          reason="NotAttempted", message=why))
                            queue.clear()
                        continue
                    in_flight[name] = _InFlight(node=node, deadline=self.clock.monotonic() + self.timeout_s)
                    self.on_started(node, name)
                if not in_flight and not terminating and not queue:
                    break
                ev = next_event()
                # A list (SYNC) is made after every create so far: a pod it lacks is gone, seen before or not.
                # Otherwise a pod not shown yet is on its way (its ADDED event comes).
                listed = ev is not None and ev.type == SYNC
                pods = {name: p for (_, name), p in shown.objects.items()}
                gone.update(n for n in terminating if n not in pods)
                terminating.intersection_update(pods)
                for name, fl in list(in_flight.items()):
                    pod = pods.get(name)
                    if pod is not None:
                        fl.seen = True
                    if pod is None and not (fl.seen or listed):
                        outcome = self._late(name, fl, {})
                    else:
                        outcome = self._judge(name, fl, pod)
                    if outcome is None:
                        continue
                    del in_flight[name]
                    settle_outcome(outcome)
                    if outcome.state == PodState.VANISHED:
                        gone.add(name)
                    elif not self.keep:
                        if self._delete(name, left):
                            terminating.add(name)
                        gone.add(name)
        finally:
            close = getattr(events, "close", None)
            if close is not None:  # the stream ends now, not when the generator is collected
                close()
            if not self.keep:
                for name in created:
                    if name not in gone:
                        self._delete(name, left)
            if left:
                log.warning("host pods left behind in %s: %s", self.namespace, ", ".join(left))
                self.on_left_behind(list(left))
        kept = tuple(n for n in created if n not in gone) if self.keep else ()
        return HostPodRun(namespace=self.namespace, image=self.image, run_id=self.run_id,
                          outcomes=tuple(outcomes[n] for n in nodes if n in outcomes),
                          left_behind=kept + tuple(left), stopped=stopped)

    # -- steps --------------------------------------------------------------------------------

    def _create(self, node: str, name: str) -> None:
        manifest = pod_manifest(command=self.command, node=node, name=name, namespace=self.namespace,
                                image=self.image, run_id=self.run_id, timeout_s=self.timeout_s)
        def next_write(pod: Any) -> writes.Write | None:
            if pod is writes.UNREAD or pod is None:
                return writes.create(PODS, manifest, namespace=self.namespace)
            return None  # a create whose reply was lost: the pod is there

        try:
            writes.settle(self.kube, next_write, what=f"pod {self.namespace}/{name}", backoff_s=self.poll_interval_s,
                          clock=self.clock, read=lambda: self.kube.get_optional(PODS, name, namespace=self.namespace),
                          on_retry=self._write_retried)
        except NotFound as e:
            raise NotFound(f"cannot create host pods in namespace {self.namespace}: {e} (pass -n NAMESPACE)") from e

    def _delete(self, name: str, left: list[str]) -> bool:
        """Delete one pod; True when the API server took the request, False when it was already gone."""
        def next_write(pod: Any) -> writes.Write | None:
            if pod is writes.UNREAD:
                return writes.delete(PODS, name, namespace=self.namespace)
            if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
                return None  # a delete whose reply was lost: gone, or going
            return writes.delete(PODS, name, namespace=self.namespace)

        try:
            writes.settle(self.kube, next_write, what=f"pod {self.namespace}/{name}", backoff_s=self.poll_interval_s,
                          clock=self.clock, read=lambda: self.kube.get_optional(PODS, name, namespace=self.namespace),
                          on_retry=self._write_retried)
            return True
        except NotFound:
            return False
        except ClusterError as e:  # unreachable, refused: say which pods stay, never hide the first error
            log.debug("cannot delete pod %s/%s: %s", self.namespace, name, e)
            left.append(name)
            return False

    def _write_retried(self, sent: int, why: str) -> None:
        """writes.settle's hook: a create or delete about to be sent again, told to `on_retry` as the watch's retries
        are (settle says why: `the create was answered 503 (...) and pod NS/NAME read back does not hold the
        change`)."""
        self.on_retry(RblnError(f"{why}: sending it again (attempt {sent + 1})"))

    def _judge(self, name: str, fl: _InFlight, pod: dict[str, Any] | None) -> PodOutcome | None:
        """The pod's outcome when it has one; None while it is still on its way."""
        if pod is None:
            return PodOutcome(node=fl.node, pod=name, state=PodState.VANISHED,
                              message="the pod was deleted before it finished (by someone else, or evicted)")
        status = pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        cs: dict[str, Any] = next((c for c in status.get("containerStatuses") or [] if c.get("name") == CONTAINER), {})
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        if terminated is not None:
            return self._completed(name, fl.node, terminated)
        scheduled: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            return PodOutcome(node=fl.node, pod=name, state=PodState.UNSCHEDULABLE, reason="Unschedulable",
                              message=str(scheduled.get("message") or ""))
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            return PodOutcome(node=fl.node, pod=name, state=PodState.IMAGE_PULL, reason=str(waiting["reason"]),
                              message=str(waiting.get("message") or ""))
        if phase == "Failed":
            return PodOutcome(node=fl.node, pod=name, state=PodState.REJECTED, reason=str(status.get("reason") or ""),
                              message=str(status.get("message") or ""))
        return self._late(name, fl, status)

    def _late(self, name: str, fl: _InFlight, status: dict[str, Any]) -> PodOutcome | None:
        """TIMED_OUT once the pod's deadline has passed (`status` says where it is), else None."""
        phase = status.get("phase") or "Pending"
        cs: dict[str, Any] = next((c for c in status.get("containerStatuses") or [] if c.get("name") == CONTAINER), {})
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if self.clock.monotonic() >= fl.deadline:
            where = phase + (f", {waiting['reason']}" if waiting.get("reason") else "")
            detail = waiting.get("message") or status.get("message") or ""
            return PodOutcome(node=fl.node, pod=name, state=PodState.TIMED_OUT, reason=where,
                              message=f"not finished after {self.timeout_s:g}s ({where})"
                              + (f": {detail}" if detail else ""))
        return None

    def _completed(self, name: str, node: str, terminated: dict[str, Any]) -> PodOutcome:
        code = terminated.get("exitCode")
        try:
            text = self.kube.pod_log(name, namespace=self.namespace, container=CONTAINER)
            message = ""
        except (NotFound, ClusterError) as e:
            if isinstance(e, ClusterError) and e.status in (0, 401, 403):
                raise  # unreachable or refused: the next pods would fail the same way
            text, message = "", f"cannot read its log: {e}"
        return PodOutcome(node=node, pod=name, state=PodState.COMPLETED,
                          exit_code=int(code) if code is not None else None, log=text,
                          reason=str(terminated.get("reason") or ""), message=message)
