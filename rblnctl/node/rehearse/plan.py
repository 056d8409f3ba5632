"""The rehearsal: a pure function of RehearsalFacts (no client, no clock), so it is tested without a server.

How it predicts, in the order the real pool runs (rblnctl.node.pool.PoolRunner.apply):

- Order and waves: nodes an earlier run left mid-switch first, then the pool's order; refused nodes run not at all
  (the whole pool is refused, nothing runs, unless --continue-on-error skips them). Waves are the runnable nodes
  taken `max_unavailable` at a time. (The real pool starts the next node as soon as one finishes, not wave by
  wave: the waves are its order and its limit, and their sum an upper bound of its duration.)
- Evictions: each node's plan lists the pods its drain evicts now (the drain's own filters); a replacement that
  an earlier wave's eviction placed on a node of a later wave is evicted again there.
- Placement of each evicted pod's replacement (only a pod a ReplicaSet, StatefulSet, Job or ReplicationController
  owns comes back): the nodes its nodeSelector, required node affinity and tolerations allow
  (rblnctl.vm.placement.why_not: the same rules `vm fit` applies), not cordoned at that point of the rollout, with
  the NPUs it asks for free (allocatable less the requests of the pods there, as rblnctl.operator.capacity
  counts them); a switched node no longer offers the old mode's NPU resources. Where kube-scheduler will put it
  among those is its scoring: `likely` is the node with the fewest pods of the same owner, then the fewest pods
  (its default spreading), and later waves are predicted from that choice.
- PodDisruptionBudgets: a budget allows `status.disruptionsAllowed` evictions at once among the pods it selects;
  in one wave the evictions beyond that wait until replacements are Ready; a budget that allows none refuses
  every eviction until more of its pods are healthy (the switch then times out: a predicted failure).
- Durations: a node's own past switches to the same mode (node history) when there are any (their mean), else the
  largest terminationGracePeriodSeconds of its evicted pods (or --grace-period), plus DEFAULT_READY_S per round
  a budget makes it wait, plus DEFAULT_ROLLOUT_S for the operator and DEFAULT_STEPS_S for rblnctl's own writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.node.mode import ModePlan, short_mode
from rblnctl.node.pods import PodRef
from rblnctl.node.rehearse.facts import BudgetFacts, PodFacts, RehearsalFacts, took
from rblnctl.operator import resources as R
from rblnctl.operator.components import canonical, exclusive_components
from rblnctl.plan import Blocker
from rblnctl.remedy import Remedy
from rblnctl.vm.placement import why_not

DEFAULT_ROLLOUT_S = 60.0  # the operator's rollout on a relabelled node: old components gone, new ones Ready
DEFAULT_READY_S = 30.0  # a replacement pod scheduled, started and Ready (what a budget waits for)
DEFAULT_STEPS_S = 5.0  # rblnctl's own requests: lock, record, cordon, relabel, uncordon
RECREATED = frozenset({"ReplicaSet", "StatefulSet", "Job", "ReplicationController"})

SWITCH = "switch"
UNCHANGED = "unchanged"
REFUSED = "refused"
FAILS = "fails"  # predicted to fail (a budget that allows no eviction: the switch times out)
SKIPPED = "skipped"  # not started: an earlier node failed (without --continue-on-error)


@dataclass(frozen=True, kw_only=True)
class Eviction:
    """One pod a node's drain evicts, and where its replacement could go."""

    pod: str  # namespace/name (a replacement placed by an earlier wave: `namespace/<new pod of Kind/name>`)
    owner: str | None
    node: str
    again: bool = False  # the replacement of a pod an earlier wave evicted
    recreated: bool = False  # its controller makes a new pod
    places: tuple[str, ...] = ()  # nodes the scheduler could place the new pod on at that point
    likely: str | None = None  # the one rblnctl predicts (see the module's text)
    nowhere: str | None = None  # why it has nowhere to go (it stays Pending)
    budgets: tuple[str, ...] = ()  # PodDisruptionBudgets that select it


@dataclass(frozen=True, kw_only=True)
class BudgetPace:
    """One PodDisruptionBudget in one wave."""

    budget: str  # namespace/name
    allowed: int | None  # evictions it allows at once now (None: its status is not written yet)
    evicting: int  # pods of this wave it selects
    waiting: int  # evictions beyond `allowed`: they wait for replacements to be Ready
    blocks: bool  # it allows none: every eviction is refused until more of its pods are healthy
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """What the operator does on the node once relabelled."""

    removes: tuple[str, ...]  # the old mode's components (their deploy labels and pods go)
    deploys: tuple[str, ...]  # the target mode's own components
    pending: tuple[str, ...]  # what convergence on the target still misses now (the operator must bring it)


@dataclass(frozen=True, kw_only=True)
class NodeRehearsal:
    """One node of the pool."""

    node: str
    outcome: str  # switch, unchanged, refused, fails, skipped
    from_mode: str | None
    evictions: tuple[Eviction, ...] = ()
    vms: tuple[str, ...] = ()  # VMs holding its NPUs
    blockers: tuple[str, ...] = ()  # why it is refused (or predicted to fail)
    rollout: Rollout | None = None
    estimate_seconds: float = 0.0
    basis: str = ""  # where the estimate comes from


@dataclass(frozen=True, kw_only=True)
class Wave:
    number: int
    nodes: tuple[NodeRehearsal, ...]
    budgets: tuple[BudgetPace, ...] = ()

    @property
    def estimate_s(self) -> float:
        """The wave's nodes run at once: its longest node."""
        return max((n.estimate_seconds for n in self.nodes), default=0.0)


@dataclass(frozen=True, kw_only=True)
class Rehearsal:
    """What `set-mode --rehearse` predicts; a Plan (rblnctl.plan.Plan): nothing to apply, ever."""

    target: str
    selector: str | None
    max_unavailable: int
    continue_on_error: bool
    waves: tuple[Wave, ...]
    refused: tuple[NodeRehearsal, ...]  # nodes that will not run, and why
    pool_refused: bool  # a refused node refuses the whole pool: nothing runs
    pool_blockers: tuple[Blocker, ...] = ()
    pool_warnings: tuple[str | Remedy, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be read
    assumptions: tuple[str, ...] = ()

    @property
    def estimate_s(self) -> float:
        return sum(w.estimate_s for w in self.waves)

    @property
    def blockers(self) -> list[Blocker]:
        return list(self.pool_blockers)

    @property
    def warnings(self) -> list[str | Remedy]:
        return list(self.pool_warnings)

    @property
    def noop(self) -> bool:
        return all(n.outcome == UNCHANGED for w in self.waves for n in w.nodes) and not self.refused

    def evictions(self) -> dict[str, list[Eviction]]:
        """Every node's evictions, by node."""
        return {n.node: list(n.evictions) for w in self.waves for n in w.nodes}


ASSUMPTIONS = (
    "waves: the pool's order taken --max-unavailable nodes at a time (the real pool starts a node as soon as "
    "one finishes; the total is an upper bound)",
    "placement: nodeSelector, required node affinity, taints, cordons and free NPUs; CPU, memory, pod affinity "
    "and topology spread are not weighed; `likely` is the node with the fewest pods of the same owner",
    "a switched node stops offering the old mode's NPU resources; the new mode's count is not assumed",
    f"defaults: {DEFAULT_STEPS_S:g}s rblnctl's writes, {DEFAULT_ROLLOUT_S:g}s the operator's rollout, "
    f"{DEFAULT_READY_S:g}s per round a PodDisruptionBudget waits for a replacement to be Ready",
)


def selects(selector: Mapping, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects `labels`; {} selects everything."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), [str(v) for v in e.get("values") or []]
        have = labels.get(str(key))
        ok = {"In": have is not None and have in values, "NotIn": have is None or have not in values,
              "Exists": have is not None, "DoesNotExist": have is None}.get(str(op), False)
        if not ok:
            return False
    return True


def _budgets_of(pod: PodFacts, budgets: Sequence[BudgetFacts]) -> tuple[BudgetFacts, ...]:
    return tuple(b for b in budgets if b.namespace == pod.pod.namespace and selects(b.selector, pod.labels))


@dataclass
class _Cluster:
    """The cluster as the rollout changes it: cordons, switched nodes, free NPUs, where pods are."""

    nodes: dict[str, dict]
    unschedulable: dict[str, bool]
    free: dict[str, dict[str, int]]
    residents: dict[str, list[PodFacts]]
    switched: set[str] = field(default_factory=set)
    old: frozenset[str] = frozenset()

    @classmethod
    def of(cls, f: RehearsalFacts) -> _Cluster:
        nodes = {str(n["metadata"]["name"]): n for n in f.cluster}
        free: dict[str, dict[str, int]] = {}
        residents: dict[str, list[PodFacts]] = {n: [] for n in nodes}
        for name, n in nodes.items():
            free[name] = {k: R.count(v) for k, v in ((n.get("status") or {}).get("allocatable") or {}).items()
                          if R.is_npu_resource(k)}
        for p in f.pods:
            residents.setdefault(p.node, []).append(p)
            for k, v in p.requests:
                free.setdefault(p.node, {})[k] = free.get(p.node, {}).get(k, 0) - v
        return cls(nodes=nodes, unschedulable={k: bool((v.get("spec") or {}).get("unschedulable"))
                                               for k, v in nodes.items()},
                   free=free, residents=residents, old=f.old_resources)

    def offers(self, node: str, resource: str, count: int, cordoned: set[str]) -> bool:
        if resource in self.old and (node in self.switched or node in cordoned):
            return False
        return self.free.get(node, {}).get(resource, 0) >= count

    def places(self, pod: PodFacts, cordoned: set[str]) -> tuple[tuple[str, ...], str | None]:
        """The nodes pod's replacement could land on now, and why none (None when some)."""
        out: list[str] = []
        why: dict[str, list[str]] = {}
        for name in sorted(self.nodes):
            obj = self.nodes[name]
            unsched = name in cordoned or self.unschedulable.get(name, False)
            spec = {**(obj.get("spec") or {}), "unschedulable": unsched}
            reason = why_not({**obj, "spec": spec}, pod.placement)
            if reason is None:
                short = [f"{k} x{v}" for k, v in pod.requests if not self.offers(name, k, v, cordoned)]
                reason = f"no free {', '.join(short)}" if short else None
            if reason is None:
                out.append(name)
            else:
                why.setdefault(reason, []).append(name)
        if out:
            return tuple(out), None
        return (), "; ".join(f"{', '.join(ns)}: {r}" for r, ns in why.items()) or "no node"

    def likely(self, pod: PodFacts, places: Sequence[str]) -> str:
        def key(n: str) -> tuple[int, int, str]:
            here = self.residents.get(n, [])
            return sum(1 for r in here if r.owner == pod.owner), len(here), n

        return min(places, key=key)

    def move(self, pod: PodFacts, to: str) -> PodFacts:
        """Take the pod off its node (its NPUs freed) and put a replacement on `to`."""
        here = self.residents.get(pod.node, [])
        if pod in here:
            here.remove(pod)
        for k, v in pod.requests:
            self.free.setdefault(pod.node, {})[k] = self.free.get(pod.node, {}).get(k, 0) + v
        new = dataclasses.replace(pod, pod=PodRef(namespace=pod.pod.namespace, name=f"<new pod of {pod.owner}>"),
                                  node=to)
        self.residents.setdefault(to, []).append(new)
        for k, v in pod.requests:
            self.free.setdefault(to, {})[k] = self.free.get(to, {}).get(k, 0) - v
        return new

    def gone(self, pod: PodFacts) -> None:
        here = self.residents.get(pod.node, [])
        if pod in here:
            here.remove(pod)
        for k, v in pod.requests:
            self.free.setdefault(pod.node, {})[k] = self.free.get(pod.node, {}).get(k, 0) + v


def _estimate(f: RehearsalFacts, node: str, pods: Sequence[PodFacts], rounds: int, *, converged: bool = False
              ) -> tuple[float, str]:
    past = [s for e in f.history.get(node, ()) if e.to_mode == f.pool.target and (s := took(e)) is not None]
    if past:
        mean = sum(past) / len(past)
        return round(mean, 1), (f"node history: mean of {len(past)} past switch(es) to "
                                f"{short_mode(f.pool.target or '')} ({', '.join(f'{s:g}s' for s in past[-3:])})")
    if f.grace_period_s is not None:
        grace, said = float(f.grace_period_s), f"{f.grace_period_s}s --grace-period"
    elif pods:
        grace = float(max(p.grace_s for p in pods))
        said = f"{grace:g}s the longest terminationGracePeriodSeconds of {len(pods)} evicted pod(s)"
    else:
        grace, said = 0.0, "no pod to evict"
    rollout = 0.0 if converged else DEFAULT_ROLLOUT_S
    total = DEFAULT_STEPS_S + grace + rounds * DEFAULT_READY_S + rollout
    paced = f" + {rounds} x {DEFAULT_READY_S:g}s PodDisruptionBudget round(s)" if rounds else ""
    waits = " (converged already: no rollout)" if converged else f" + {DEFAULT_ROLLOUT_S:g}s operator rollout"
    return total, f"defaults: {DEFAULT_STEPS_S:g}s writes + {said}{paced}{waits} (no past switch on record)"


def _order(f: RehearsalFacts) -> list[str]:
    pool = f.pool
    return [*pool.resumes, *(n for n in pool.nodes if n not in pool.resumes)]


def _refused(f: RehearsalFacts, node: str) -> NodeRehearsal:
    plan = f.plans.get(node)
    return NodeRehearsal(node=node, outcome=REFUSED, from_mode=plan.from_mode if plan else None,
                         vms=tuple(plan.vms) if plan else (), blockers=tuple(b.message for b in f.pool.refusal(node)))


def rehearse(f: RehearsalFacts) -> Rehearsal:
    """Predict the pool's run from its facts (pure)."""
    pool = f.pool
    target = pool.target or C.MODE_VM
    order = _order(f)
    refused = tuple(_refused(f, n) for n in order if pool.refusal(n))
    head = dict(target=target, selector=pool.selector, max_unavailable=pool.max_unavailable,
                continue_on_error=pool.continue_on_error, refused=refused, pool_warnings=tuple(pool.warnings),
                notes=f.notes, assumptions=ASSUMPTIONS)
    if pool.blockers:  # the real run refuses the whole pool before any write
        return Rehearsal(waves=(), pool_refused=True, pool_blockers=tuple(pool.blockers), **head)  # type: ignore[arg-type]
    runnable = [n for n in order if not pool.refusal(n)]
    cluster = _Cluster.of(f)
    by_uid = {p.pod.uid: p for p in f.pods if p.pod.uid}
    budgets = f.budgets or ()
    again: dict[str, list[PodFacts]] = {}  # node -> replacements placed there by an earlier wave
    waves: list[Wave] = []
    failed = False
    size = max(1, pool.max_unavailable)
    for i in range(0, len(runnable), size):
        names = runnable[i:i + size]
        cordoned = set(names)
        rows: dict[str, dict] = {}
        paces: dict[str, list[tuple[str, PodFacts]]] = {}
        for node in names:
            plan = f.plans[node]
            if failed and not pool.continue_on_error:
                rows[node] = dict(node=node, outcome=SKIPPED, from_mode=plan.from_mode,
                                  blockers=("not started: an earlier node is predicted to fail",))
                continue
            if plan.noop:
                rows[node] = dict(node=node, outcome=UNCHANGED, from_mode=plan.from_mode,
                                  basis="already in the mode: nothing to do")
                continue
            pods = [by_uid[e.uid] for e in (plan.drain.evict if plan.drain else []) if e.uid in by_uid]
            pods += [p for p in again.pop(node, []) if p in cluster.residents.get(node, [])]
            rows[node] = dict(node=node, outcome=SWITCH, from_mode=plan.from_mode, vms=tuple(plan.vms),
                              rollout=_rollout(plan), pods=pods)
            for p in pods:
                for b in _budgets_of(p, budgets):
                    paces.setdefault(b.ref, []).append((node, p))
        # where each evicted pod's replacement goes, with this wave's nodes cordoned
        evictions: dict[str, list[Eviction]] = {}
        for node in names:
            row = rows[node]
            for p in row.get("pods", []):
                recreated = (p.owner or "").split("/")[0] in RECREATED
                places, nowhere = cluster.places(p, cordoned) if recreated else ((), None)
                likely = cluster.likely(p, places) if places else None
                if likely is not None:
                    new = cluster.move(p, likely)
                    if likely in runnable[i + size:]:
                        again.setdefault(likely, []).append(new)
                else:
                    cluster.gone(p)
                evictions.setdefault(node, []).append(Eviction(
                    pod=str(p.pod), owner=p.owner, node=node, again=not p.pod.uid, recreated=recreated, places=places,
                    likely=likely, nowhere=nowhere, budgets=tuple(b.ref for b in _budgets_of(p, budgets))))
        pace_rows, rounds, blocks = _paces(budgets, paces)
        nodes_out = []
        for node in names:
            row = rows[node]
            pods = row.pop("pods", [])
            if row["outcome"] == SWITCH:
                blocking = blocks.get(node, [])
                if blocking:
                    row["outcome"] = FAILS
                    row["blockers"] = tuple(blocking)
                    failed = True
                est, basis = _estimate(f, node, pods, rounds.get(node, 0), converged=f.plans[node].converged)
                row.update(estimate_seconds=est, basis=basis, evictions=tuple(evictions.get(node, [])))
            nodes_out.append(NodeRehearsal(**row))
        for node in names:  # after the wave: switched, and uncordoned when rblnctl cordoned it
            plan = f.plans[node]
            if rows[node]["outcome"] in (SWITCH, UNCHANGED):
                cluster.switched.add(node)
                if f.uncordon and (not plan.unschedulable or plan.cordoned_by_rblnctl):
                    cluster.unschedulable[node] = False
        waves.append(Wave(number=len(waves) + 1, nodes=tuple(nodes_out), budgets=tuple(pace_rows)))
    return Rehearsal(waves=tuple(waves), pool_refused=False, **head)  # type: ignore[arg-type]


def _paces(budgets: Sequence[BudgetFacts], paces: Mapping[str, list[tuple[str, PodFacts]]]
           ) -> tuple[list[BudgetPace], dict[str, int], dict[str, list[str]]]:
    """Each budget of the wave; per node the rounds it waits and why it blocks."""
    by_ref = {b.ref: b for b in budgets}
    out: list[BudgetPace] = []
    rounds: dict[str, int] = {}
    blocks: dict[str, list[str]] = {}
    for ref, hits in sorted(paces.items()):
        b = by_ref[ref]
        nodes = tuple(dict.fromkeys(n for n, _ in hits))
        allowed = b.allowed
        waiting = max(0, len(hits) - (allowed or 0))
        block = allowed == 0
        out.append(BudgetPace(budget=ref, allowed=allowed, evicting=len(hits), waiting=waiting, blocks=block,
                              nodes=nodes))
        for n in nodes:
            if block:
                blocks.setdefault(n, []).append(
                    f"PodDisruptionBudget {ref} allows no eviction now ({b.current_healthy} healthy, "
                    f"{b.desired_healthy} needed): its pods' evictions are refused until the timeout")
            elif waiting:
                # an allowance of N lets N go per round; each further round waits for replacements to be Ready
                per = max(1, allowed or 1)
                rounds[n] = max(rounds.get(n, 0), -(-len(hits) // per) - 1)
    return out, rounds, blocks


def _rollout(plan: ModePlan) -> Rollout:
    def names(mode: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(canonical(c) for c in exclusive_components(mode)))

    if plan.converged:  # only an interrupted switch's leftovers (cordon, record) to clear: nothing to roll out
        return Rollout(removes=(), deploys=(), pending=())
    return Rollout(removes=names(plan.current_mode) if plan.current_mode != plan.target else (),
                   deploys=names(plan.target), pending=tuple(plan.pending))
