"""Roll a mode switch or a drain across a pool of NPU nodes, at most `max_unavailable` nodes at once.

Each node runs exactly as the single-node command runs it (ModeSwitcher or Drainer: its own lock,
its own progress record, its own resume); the pool only decides which node starts when. Nodes that
an earlier, interrupted run left mid-switch go first, so the pool never holds more nodes out of
service than it may. After the first failure no new node starts (unless asked to go on), while
the nodes already started finish. Interrupting the pool (PoolRunner.stop, set by the front end on
Ctrl-C or a signal) stops every node before its next write, as Ctrl-C stops a single switch; the
same pool command run again resumes them, and nodes already converged are no-ops.
"""

from __future__ import annotations

import enum
import logging
import re
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from rblnctl import constants as C
from rblnctl.audit import Auditor
from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop, Stopped, first_done, result_of
from rblnctl.errors import InvalidInput, NotFound, Partial, RblnError, Refused
from rblnctl.kube import Kube, validate_name
from rblnctl.node.drain import Drainer, DrainPlan, DrainResult
from rblnctl.node.events import NodeEvents
from rblnctl.node.inventory import list_npu_node_objects
from rblnctl.node.mode import ModePlan, ModeResult, ModeSwitcher, parse_mode, short_mode
from rblnctl.node.vms import stranded_pods, stranded_vms
from rblnctl.node.options import DrainOptions, ModeOptions
from rblnctl.node.pods import PodRef
from rblnctl.plan import Blocker
from rblnctl.remedy import Remedy

log = logging.getLogger(__name__)

PLAN_PARALLEL = 8  # nodes planned at once (reads only)
_MAX_UNAVAILABLE = re.compile(r"(\d+)(%?)")


class Outcome(enum.StrEnum):
    """What became of one node of the pool."""

    DONE = "done"  # switched (or drained)
    UNCHANGED = "unchanged"  # already in the mode, converged: nothing to do
    REFUSED = "refused"  # a safety gate refused it (blockers); nothing written
    FAILED = "failed"  # it started and failed (the error says what is left behind)
    INTERRUPTED = "interrupted"  # the pool was stopped while this node ran
    SKIPPED = "skipped"  # never started: an earlier node failed, or the pool was stopped


FAILURES = frozenset({Outcome.REFUSED, Outcome.FAILED})


@dataclass(frozen=True)
class MaxUnavailable:
    """How many nodes may be mid-switch at once: a count, or a percentage of the selected nodes."""

    value: int
    percent: bool = False

    @classmethod
    def parse(cls, text: str | int) -> MaxUnavailable:
        """`3` or `25%` (as a Deployment's maxUnavailable); InvalidInput otherwise."""
        m = _MAX_UNAVAILABLE.fullmatch(str(text).strip())
        if not m:
            raise InvalidInput(f"max unavailable must be a number of nodes or a percentage such as 25%, not {text!r}")
        value, percent = int(m.group(1)), bool(m.group(2))
        if value < 1 or (percent and value > 100):
            raise InvalidInput(f"max unavailable must be at least 1 (or 1% to 100%), not {text!r}")
        return cls(value, percent)

    def resolve(self, total: int) -> int:
        """The number of nodes for a pool of `total`: a percentage rounds down, but never below 1.

        As Kubernetes resolves a Deployment's maxUnavailable (kubernetes/kubernetes
        pkg/controller/deployment/util/deployment_util.go ResolveFenceposts: scaled with
        roundUp=false, and 1 when that comes to 0).
        """
        n = self.value * total // 100 if self.percent else self.value
        return max(1, min(n, max(total, 1)))

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True, kw_only=True)
class PoolOptions:
    """How a pool runs; `continue_on_error`: keep starting nodes after one failed (and run past refused ones)."""

    max_unavailable: MaxUnavailable = field(default_factory=lambda: MaxUnavailable(1))
    continue_on_error: bool = False


NodePlan: TypeAlias = ModePlan | DrainPlan  # one node's plan: a switch's or a drain's (each a rblnctl.plan.Plan)
NodeResult: TypeAlias = ModeResult | DrainResult


class NodeTask(Protocol):
    """One node's work: plan() reads, apply(plan) writes (a ModeSwitcher or a Drainer, bound to the node)."""

    def plan(self) -> NodePlan: ...

    def apply(self, plan: NodePlan) -> NodeResult: ...

    @property
    def evicted(self) -> list[PodRef]: ...  # the pods the last apply() evicted so far (a failed one's too)


TaskFactory = Callable[[str, NodeEvents, Stop], NodeTask]


def _noop(*_: object) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class PoolEvents:
    """Progress of a pool: each node's own NodeEvents (for_node builds them, so they know their node), and
    when a node starts and finishes."""

    for_node: Callable[[str], NodeEvents] = lambda node: NodeEvents()
    on_start: Callable[[str], None] = _noop
    on_finish: Callable[["PoolItem"], None] = _noop


@dataclass(frozen=True, kw_only=True)
class PoolItem:
    """One node's outcome, with the plan it ran (or was refused on), its result and its error."""

    node: str
    outcome: Outcome
    plan: NodePlan | None = None
    result: NodeResult | None = None
    error: RblnError | None = None
    duration_s: float = 0.0
    evicted: list[PodRef] = field(default_factory=list)  # every pod the node's run evicted, whatever its outcome


@dataclass(frozen=True, kw_only=True)
class PoolPlan:
    """Every node's plan; `errors` holds the nodes that could not be planned (unknown, not an NPU node...)."""

    operation: str  # "set-mode" or "drain"
    target: str | None  # set-mode: the label value of the mode
    nodes: list[str]
    selector: str | None
    max_unavailable: int
    continue_on_error: bool
    plans: dict[str, NodePlan] = field(default_factory=dict)
    errors: dict[str, RblnError] = field(default_factory=dict)
    pool_warnings: list[str | Remedy] = field(default_factory=list)  # about the pool as a whole (VMs left nowhere)

    def refusal(self, node: str) -> list[Blocker]:
        """Why `node` cannot run now ([] when it can)."""
        if node in self.errors:
            return [Blocker(str(self.errors[node]))]
        plan = self.plans.get(node)
        return list(plan.blockers) if plan is not None else []

    @property
    def refused(self) -> list[str]:
        return [n for n in self.nodes if self.refusal(n)]

    @property
    def blockers(self) -> list[Blocker]:
        """Every node's blockers, named; none when the pool goes on past refused nodes."""
        if self.continue_on_error:
            return []
        return [Blocker(f"node {n}: {b.message}", b.override) for n in self.nodes for b in self.refusal(n)]

    @property
    def warnings(self) -> list[str | Remedy]:
        """Every node's warnings, each said once: one the nodes share (the operator's version unknown...) names
        them all on one line."""
        shared: dict[str, list[str]] = {}
        skipped = set(self.refused) if self.continue_on_error else set()
        for n in self.nodes:
            if n in skipped:
                continue  # it will not run: its warnings would be about something that does not happen
            plan = self.plans.get(n)
            for w in plan.warnings if plan is not None else []:
                shared.setdefault(str(w), []).append(n)
        out = list(self.pool_warnings)
        out += [f"node {nodes[0]}: {w}" if len(nodes) == 1 else f"nodes {', '.join(nodes)}: {w}"
                for w, nodes in shared.items()]
        if self.continue_on_error:
            out += [f"node {n} is skipped: {'; '.join(b.message for b in self.refusal(n))}" for n in self.refused]
        return out

    @property
    def noop(self) -> bool:
        return not self.errors and all(p.noop for p in self.plans.values())

    @property
    def acting(self) -> list[str]:
        """The nodes that will change: neither refused (nor skipped) nor already where they should be."""
        return [n for n in self.nodes if not self.refusal(n) and not self._is_noop(n)]

    def _is_noop(self, node: str) -> bool:
        plan = self.plans.get(node)
        return plan is not None and plan.noop

    @property
    def resumes(self) -> list[str]:
        """Nodes an earlier run left mid-switch: they run first."""
        return [n for n in self.nodes if isinstance(p := self.plans.get(n), ModePlan) and p.resume]


@dataclass(frozen=True, kw_only=True)
class PoolResult:
    """Every node's outcome, in the order of the plan's nodes."""

    items: list[PoolItem]

    @property
    def failed(self) -> list[PoolItem]:
        return [i for i in self.items if i.outcome in FAILURES]

    def count(self, outcome: Outcome) -> int:
        return sum(1 for i in self.items if i.outcome == outcome)


class PoolFailed(Partial):
    """At least one node of a pool failed or was refused; `result` has every node's outcome (exit code: partial)."""

    def __init__(self, message: str, *, result: PoolResult) -> None:
        super().__init__(message, result=result)


def select_nodes(kube: Kube, *, names: Sequence[str] = (), selector: str | None = None) -> list[str]:
    """The pool: the nodes named (in order, once each) or the NPU nodes the label selector matches.

    A selector that matches no NPU node is NotFound naming it; names are checked before any request.
    """
    if names and selector:
        raise InvalidInput("name nodes or give a label selector, not both")
    if names:
        return list(dict.fromkeys(validate_name(n) for n in names))
    if not selector:
        raise InvalidInput("name at least one node, or give a label selector")
    found = [n["metadata"]["name"] for n in list_npu_node_objects(kube, selector=selector)]
    if not found:
        raise NotFound(f"no NPU node matches the label selector {selector!r}")
    return found


@dataclass(kw_only=True)
class PoolRunner:
    """Plan and run one node task per node of a pool, at most options.max_unavailable at once."""

    operation: str
    target: str | None
    task: TaskFactory
    options: PoolOptions = field(default_factory=PoolOptions)
    events: PoolEvents = field(default_factory=PoolEvents)
    clock: Clock = SYSTEM_CLOCK
    stop: Stop = field(default_factory=Stop)  # set it to interrupt the pool (Ctrl-C, a signal)
    precheck: Callable[[], object] = _noop  # a read that refuses the whole pool at once (e.g. no policy)
    # Warnings about the pool as a whole, from the nodes it will run and their plans (read once, not per node).
    consequences: Callable[[list[str], dict[str, NodePlan]], list[str | Remedy]] = lambda nodes, plans: []
    items: dict[str, PoolItem] = field(default_factory=dict, init=False)  # outcomes so far (live)

    @classmethod
    def for_mode(cls, kube: Kube, target: str, options: ModeOptions, *, pool: PoolOptions | None = None,
                 events: PoolEvents | None = None, clock: Clock = SYSTEM_CLOCK,
                 audit: Auditor | None = None) -> PoolRunner:
        """A pool of mode switches to `target` (vm, container, vm-passthrough), each node a ModeSwitcher (each
        recording its own Events on its node through `audit`)."""
        mode = parse_mode(target)

        def task(node: str, node_events: NodeEvents, stop: Stop) -> NodeTask:
            return _ModeTask(ModeSwitcher(kube=kube, options=options, events=node_events, clock=clock, stop=stop,
                                          check_stranded_vms=False, audit=audit), node, mode)

        def consequences(nodes: list[str], plans: dict[str, NodePlan]) -> list[str | Remedy]:
            policy = ModeSwitcher(kube=kube, options=options).operator().policy
            if mode == C.MODE_CONTAINER:
                stranded = stranded_vms(kube, policy, nodes)
            else:
                evicted = [e for n in nodes if isinstance(p := plans.get(n), ModePlan) and p.drain is not None
                           for e in p.drain.evict]
                stranded = stranded_pods(kube, policy, nodes, evicted)
            return [stranded] if stranded else []

        return cls(operation="set-mode", target=mode, task=task, options=pool or PoolOptions(),
                   events=events or PoolEvents(), clock=clock,
                   precheck=lambda: ModeSwitcher(kube=kube, options=options).operator(fresh=True),
                   consequences=consequences)

    @classmethod
    def for_drain(cls, kube: Kube, options: DrainOptions, *, pool: PoolOptions | None = None,
                  events: PoolEvents | None = None, clock: Clock = SYSTEM_CLOCK,
                  audit: Auditor | None = None) -> PoolRunner:
        """A pool of drains, each node a Drainer (each recording its own Events on its node through `audit`)."""

        def task(node: str, node_events: NodeEvents, stop: Stop) -> NodeTask:
            return _DrainTask(Drainer(kube=kube, options=options, events=node_events, clock=clock, stop=stop,
                                      audit=audit), node)

        return cls(operation="drain", target=None, task=task, options=pool or PoolOptions(),
                   events=events or PoolEvents(), clock=clock)

    # -- plan ------------------------------------------------------------------------------------------

    def plan(self, nodes: Sequence[str], *, selector: str | None = None) -> PoolPlan:
        """Plan every node (reads only, PLAN_PARALLEL at once). A node that cannot be planned (unknown, not an
        NPU node, another switch in progress) is recorded with its error; other errors are raised."""
        self.precheck()
        nodes = list(nodes)
        plans: dict[str, NodePlan] = {}
        errors: dict[str, RblnError] = {}

        def one(node: str) -> None:
            try:
                plans[node] = self.task(node, NodeEvents(), self.stop).plan()
            except (Refused, NotFound) as e:
                errors[node] = e

        with ThreadPoolExecutor(max_workers=max(1, min(PLAN_PARALLEL, len(nodes))),
                                thread_name_prefix="rblnctl-plan") as ex:
            for fut in [ex.submit(one, n) for n in nodes]:
                result_of(fut)
        running = [n for n in nodes if n in plans and not plans[n].noop]
        return PoolPlan(operation=self.operation, target=self.target, nodes=nodes, selector=selector,
                        max_unavailable=self.options.max_unavailable.resolve(len(nodes)),
                        continue_on_error=self.options.continue_on_error, plans=plans, errors=errors,
                        pool_warnings=self.consequences(running, plans) if running else [])

    # -- apply -----------------------------------------------------------------------------------------

    def apply(self, plan: PoolPlan) -> PoolResult:
        """Run the nodes, at most plan.max_unavailable at once; return every node's outcome.

        Each node is planned again right before it starts (the pool plan may be minutes old) and
        runs as the single-node command would. Refused nodes are reported and skipped only when
        the pool goes on past errors (otherwise the plan's blockers refuse the whole pool, with
        nothing written). Ctrl-C or a signal in the calling thread sets `stop`: each node stops
        before its next write and gives its lock back, the exception is re-raised, and `items`
        says which nodes were interrupted.
        """
        if plan.blockers:
            raise Refused(f"refusing to {self._what(plan)}", blockers=plan.blockers)
        self.items = {}
        waiting: deque[str] = deque()
        for node in [*plan.resumes, *(n for n in plan.nodes if n not in plan.resumes)]:
            if plan.refusal(node):
                self._finish(PoolItem(node=node, outcome=Outcome.REFUSED, plan=plan.plans.get(node),
                                      error=plan.errors.get(node) or Refused(
                                          f"refusing to {self._what(plan, node)}", blockers=plan.refusal(node))))
            else:
                waiting.append(node)
        failed = False
        running: dict[Future[PoolItem], str] = {}
        ex = ThreadPoolExecutor(max_workers=plan.max_unavailable, thread_name_prefix="rblnctl-pool")
        try:
            while waiting or running:
                while waiting and len(running) < plan.max_unavailable and not self.stop.is_set() and not (
                        failed and not plan.continue_on_error):
                    node = waiting.popleft()
                    running[ex.submit(self._run, node)] = node
                if not running:
                    break
                done = first_done(running)  # in slices: a Ctrl-C is run at once, never after a node's end
                for fut in done:
                    del running[fut]
                    failed = failed or fut.result().outcome in FAILURES
        except BaseException:
            # Ctrl-C or a signal: every node stops before its next write and gives its lock back; wait for
            # that (moments: a write in flight, a lock DELETE), then hand the interrupt on.
            self.stop.set()
            wait(running)
            ex.shutdown(wait=True)
            self._skip(waiting)
            raise
        ex.shutdown(wait=True)
        self._skip(waiting)
        return PoolResult(items=[self.items[n] for n in plan.nodes])

    def _skip(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            self._finish(PoolItem(node=node, outcome=Outcome.SKIPPED))

    def _finish(self, item: PoolItem) -> PoolItem:
        self.items[item.node] = item
        self.events.on_finish(item)
        return item

    def _run(self, node: str) -> PoolItem:
        """One node, from a fresh plan to its outcome (never raises an RblnError: it is the outcome)."""
        started = self.clock.monotonic()
        self.events.on_start(node)
        task = self.task(node, self.events.for_node(node), self.stop)
        plan = None
        error: RblnError | None
        try:
            plan = task.plan()
            if plan.blockers:
                raise Refused(f"refusing to {self._what(None, node)}", blockers=list(plan.blockers))
            result: NodeResult | None = task.apply(plan)
            outcome, error = (Outcome.UNCHANGED if plan.noop else Outcome.DONE), None
        except Stopped:
            result, outcome, error = None, Outcome.INTERRUPTED, None
        except Refused as e:
            result, outcome, error = None, Outcome.REFUSED, e
        except RblnError as e:
            log.debug("node %s failed: %s", node, e)
            result, outcome, error = None, Outcome.FAILED, e
        return self._finish(PoolItem(node=node, outcome=outcome, plan=plan, result=result, error=error,
                                     duration_s=round(self.clock.monotonic() - started, 3),
                                     evicted=list(task.evicted)))

    def _what(self, plan: PoolPlan | None, node: str | None = None) -> str:
        where = f"node {node}" if node else f"{len(plan.nodes) if plan else 0} node(s)"
        if self.operation == "set-mode" and self.target:
            return f"switch {where} to {short_mode(self.target)}"
        return f"drain {where}"


@dataclass(frozen=True)
class _ModeTask:
    switcher: ModeSwitcher
    node: str
    target: str

    def plan(self) -> NodePlan:
        return self.switcher.plan(self.node, self.target)

    def apply(self, plan: NodePlan) -> NodeResult:
        assert isinstance(plan, ModePlan), plan
        return self.switcher.apply(plan)

    @property
    def evicted(self) -> list[PodRef]:
        return self.switcher.evicted


@dataclass(frozen=True)
class _DrainTask:
    drainer: Drainer
    node: str

    def plan(self) -> NodePlan:
        return self.drainer.plan(self.node)

    def apply(self, plan: NodePlan) -> NodeResult:
        assert isinstance(plan, DrainPlan), plan
        return self.drainer.apply(plan)

    @property
    def evicted(self) -> list[PodRef]:
        return self.drainer.evicted
