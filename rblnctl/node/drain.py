"""Drainer: drain one node of the pods that use its NPUs (or every pod), the way kubectl's pkg/drain does it.

`plan()` reads the node and its pods and classifies each through the filters (rblnctl.node.filters);
`apply(plan)` locks the node (rblnctl.node.lock), cordons it, then lists its pods again and evicts
what that fresh list says, in rounds, until no pod it must evict is left: kubectl cordons before it
lists, so nothing scheduled in between is missed, and rblnctl also catches NPU pods that land while
it evicts. The composition, like kubectl's RunNodeDrain, is here; the pieces are one concern a file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.audit import DONE, Auditor, Regarding, one_line, outcome_of
from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop
from rblnctl.errors import RblnError, Refused
from rblnctl.kube import NODES, PODS, Kube, validate_name
from rblnctl.node.cordon import set_unschedulable
from rblnctl.node.defaults import DEFAULT_EVICT_ROUNDS
from rblnctl.node.events import NodeEvents, Step
from rblnctl.node.evict import Evictor, dry_run_refused, timeout_error
from rblnctl.node.filters import PodFilter, classify, drain_filters, facts_of
from rblnctl.node.lock import NodeLock, default_identity
from rblnctl.node.options import DrainOptions
from rblnctl.node.pods import Action, LauncherVmis, NpuUse, PodEntry, PodRef
from rblnctl.operator.cluster import OperatorView, read_operator
from rblnctl.plan import Blocker

log = logging.getLogger(__name__)

SCOPE_NPU = "npu"
SCOPE_ALL = "all"


@dataclass(frozen=True, kw_only=True)
class DrainPlan:
    """What a drain of `node` would do; `blockers` non-empty means apply() refuses and touches nothing."""

    node: str
    scope: str  # "npu": NPU consumers only; "all": every pod not managed by a DaemonSet
    cordon: bool  # apply() cordons the node (it is schedulable now)
    unschedulable: bool  # the node was already cordoned when planned
    evict: list[PodEntry] = field(default_factory=list)  # as listed now; apply() lists again after the cordon
    ignored: list[PodEntry] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    uid: str = ""  # the node's uid as planned (its audit Events name it)

    @property
    def noop(self) -> bool:
        """Cordoned already and nothing to evict."""
        return not self.cordon and not self.evict


@dataclass(frozen=True, kw_only=True)
class DrainResult:
    """What apply() did."""

    node: str
    cordoned: bool  # this run cordoned the node (it was schedulable before)
    evicted: list[PodRef] = field(default_factory=list)
    rounds: int = 0  # list-and-evict rounds (more than one: pods landed while it evicted)
    server_dry_run: bool = False


@dataclass(frozen=True, kw_only=True)
class Survey:
    """One classification of a node's pods."""

    evict: list[PodEntry]
    ignored: list[PodEntry]

    @property
    def blockers(self) -> list[Blocker]:
        return [b for e in self.ignored for b in e.blockers]


def evicted_before(evicted: Sequence[PodRef]) -> str:
    """` after evicting N pod(s)` for the audit note of a run that did not finish ('' when it evicted none)."""
    return f" after evicting {len(evicted)} pod(s)" if evicted else ""


@dataclass(kw_only=True)
class Drainer:
    """Drain one node; `filters` replaces the default filter list (set-mode swaps in its VM guard)."""

    kube: Kube
    options: DrainOptions = field(default_factory=DrainOptions)
    events: NodeEvents = field(default_factory=NodeEvents)
    clock: Clock = SYSTEM_CLOCK
    operator: OperatorView | None = None  # the operator's namespace and DRA driver; None: read when needed
    filters: Sequence[PodFilter] | None = None
    identity: str | None = None  # who holds the node's lock (None: this host and process)
    stop: Stop | None = None  # set when the run is interrupted: no write after it, waits end (rblnctl.clock.Stopped)
    audit: Auditor | None = None  # writes the drain's Events on the node (None: none; never in a server dry run)
    # Every pod the last apply() evicted, kept as it goes: a failed or interrupted drain reports them too.
    evicted: list[PodRef] = field(default_factory=list, init=False, repr=False)

    def view(self) -> OperatorView:
        """The operator's namespace, policy and base names (read once)."""
        if self.operator is None:
            self.operator = read_operator(self.kube)
        return self.operator

    def _filters(self) -> Sequence[PodFilter]:
        return self.filters if self.filters is not None else drain_filters(self.options, self.view())

    def lock(self, node: str, what: str) -> NodeLock:
        """The node's lock, for this run."""
        return NodeLock(kube=self.kube, node=node, namespace=self.options.lock_namespace or self.view().namespace,
                        identity=self.identity or default_identity(what), duration_s=self.options.lock_duration_s,
                        clock=self.clock, server_dry_run=self.options.server_dry_run, stop=self.stop)

    # -- reading ---------------------------------------------------------------------------------------

    def survey(self, node: str, extra: Sequence[PodFilter] = ()) -> Survey:
        """List the node's pods (one paged LIST) and classify each (`extra` filters run first)."""
        policy = self.view().policy
        npu = NpuUse(kube=self.kube, dra_driver=policy.dra_driver if policy else C.DRA_DRIVER)
        vmis = LauncherVmis(kube=self.kube)
        filters = [*extra, *self._filters()]
        evict: list[PodEntry] = []
        ignored: list[PodEntry] = []
        pods = self.kube.list(PODS, field_selector=f"spec.nodeName={node}")
        for pod in sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"])):
            entry = classify(facts_of(pod, npu, vmis), filters)
            (evict if entry.action == Action.EVICT else ignored).append(entry)
        return Survey(evict=evict, ignored=ignored)

    def plan(self, node: str, *, node_obj: dict | None = None) -> DrainPlan:
        """Read the node and its pods (no writes). Raises InvalidInput for a bad name, NotFound for an unknown node."""
        validate_name(node)
        if node_obj is None:
            node_obj = self.kube.get(NODES, node)
        unschedulable = bool((node_obj.get("spec") or {}).get("unschedulable"))
        s = self.survey(node)
        lock_blockers = [] if self.options.server_dry_run else \
            self.lock(node, f"drain {node}").check(take_over=self.options.take_over)
        return DrainPlan(node=node, scope=SCOPE_ALL if self.options.all_pods else SCOPE_NPU, cordon=not unschedulable,
                         unschedulable=unschedulable, evict=s.evict, ignored=s.ignored,
                         blockers=[*lock_blockers, *s.blockers],
                         uid=str((node_obj.get("metadata") or {}).get("uid") or ""))

    # -- writing ---------------------------------------------------------------------------------------

    def apply(self, plan: DrainPlan) -> DrainResult:
        """Lock, cordon, then list and evict in rounds until no pod to evict is left; release the lock.

        Raises Refused when the plan (or the list taken after the cordon) has blockers: a cordon
        this run made is then undone and nothing is evicted. WaitTimeout names the pods still
        there at the deadline; other refusals of an eviction are raised as they are. The node stays
        cordoned after a drain (as kubectl leaves it).
        """
        if plan.blockers:
            raise Refused(f"cannot drain node {plan.node}", blockers=plan.blockers)
        deadline = self.clock.monotonic() + self.options.timeout_s
        lock = self.lock(plan.node, f"drain {plan.node}")
        self.events.on_step(Step.LOCK, f"locking node {plan.node} ({lock.namespace}/{lock.name})")
        try:  # the acquire too: a Lease whose create an interrupt cut short is given back if it landed
            lock.acquire(take_over=self.options.take_over)
            lock.start_renewing()
            run = None
            if self.audit is not None and not self.options.server_dry_run:
                run = self.audit.run(Regarding.node(plan.node, plan.uid), C.AUDIT_DRAIN,
                                     on_failed=self.events.on_warning)
                run.start(f"draining node {plan.node} ({'every pod' if self.options.all_pods else 'its NPU pods'})")
            try:
                result = self._drain(plan, deadline, lock)
            except BaseException as err:
                if run is not None:
                    run.finish(outcome_of(err), f"drain of node {plan.node} {outcome_of(err)}"
                               f"{evicted_before(self.evicted)}: {one_line(err)}")
                if isinstance(err, RblnError) and self.evicted:
                    err.details = [*err.details, f"evicted from node {plan.node} before that: "
                                   + ", ".join(str(r) for r in self.evicted)]
                raise
            if run is not None:
                run.finish(DONE, f"drained node {plan.node}: {len(result.evicted)} pod(s) evicted in {result.rounds} "
                           f"round(s){', cordoned' if result.cordoned else ''}")
            return result
        finally:
            lock.release()

    def _drain(self, plan: DrainPlan, deadline: float, lock: NodeLock) -> DrainResult:
        node_obj = self.kube.get(NODES, plan.node)
        cordoned = False
        if not (node_obj.get("spec") or {}).get("unschedulable"):
            lock.ensure_held()
            self.events.on_step(Step.CORDON, f"cordoning node {plan.node}")
            set_unschedulable(self.kube, plan.node, True, dry_run=self.options.server_dry_run, uid=plan.uid)
            cordoned = True
        evicted = self.evicted = []
        try:
            rounds = self.evict_rounds(plan.node, deadline, evicted, lock)
        except Refused:
            if cordoned and not evicted:
                self.events.on_step(Step.ROLLBACK, f"uncordoning node {plan.node}: nothing was evicted")
                set_unschedulable(self.kube, plan.node, False, dry_run=self.options.server_dry_run,
                                  uid=plan.uid)
            raise
        return DrainResult(node=plan.node, cordoned=cordoned, evicted=evicted, rounds=rounds,
                           server_dry_run=self.options.server_dry_run)

    def evict_rounds(self, node: str, deadline: float, evicted: list[PodRef], lock: NodeLock | None = None,
                     extra: Sequence[PodFilter] = ()) -> int:
        """List the (cordoned) node's pods and evict what must go, round after round, until none is left.

        Appends every pod evicted to `evicted` (so a caller knows what happened even when this
        raises) and returns the number of rounds. Raises Refused when a list has blockers (in the
        first round nothing was evicted yet) or when pods keep arriving for DEFAULT_EVICT_ROUNDS
        rounds; WaitTimeout at the deadline.
        """
        evictor = Evictor(kube=self.kube, options=self.options, events=self.events, clock=self.clock, stop=self.stop)
        for rounds in range(DEFAULT_EVICT_ROUNDS + 1):
            s = self.survey(node, extra)
            if s.blockers:
                what = "after the cordon" if rounds == 0 else "among pods that arrived while rblnctl evicted"
                raise Refused(f"cannot drain node {node}: pods {what} block it", blockers=s.blockers)
            if not s.evict:
                return rounds
            if rounds == DEFAULT_EVICT_ROUNDS:
                break
            if lock is not None:
                lock.ensure_held()
            refs = [e.ref for e in s.evict]
            self.events.on_step(Step.EVICT, f"evicting {len(refs)} pod(s)" if rounds == 0 else
                                f"evicting {len(refs)} pod(s) that arrived meanwhile")
            outcome = evictor.evict(refs, deadline, vmis={str(e.ref): e.vmi for e in s.evict if e.vmi})
            evicted += outcome.evicted + [v.pod for v in outcome.evacuating]
            if not self.options.server_dry_run:
                evictor.wait_gone(node, outcome.evicted, deadline)
                evictor.wait_evacuated(node, outcome.evacuating, deadline)
            if outcome.budget_refused:
                if self.options.server_dry_run:
                    raise dry_run_refused(self.options.timeout_s, outcome.budget_refused)
                raise timeout_error(self.options.timeout_s, [], outcome.budget_refused)
            if self.options.server_dry_run:
                return rounds + 1  # nothing left for real: listing again would find the same pods
        left = ", ".join(str(e.ref) for e in self.survey(node, extra).evict)
        raise Refused(f"pods that must leave node {node} keep arriving after {DEFAULT_EVICT_ROUNDS} rounds of "
                      f"evictions ({left}): is something binding pods to it directly?")
