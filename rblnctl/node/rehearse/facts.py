"""What a rehearsal is computed from, read once (reads only: not a single write, not even the lock).

`gather` plans the pool exactly as the real run does (PoolRunner.plan: each node's ModeSwitcher.plan, the
pool's own warnings; the operator's policy read once, by the pool's precheck), then `read_facts` lists every
Node, every unfinished pod, every PodDisruptionBudget and the Events rblnctl wrote on Nodes: four LISTs
whatever the pool's size. What cannot be read (no permission to list PDBs
or Events) is said in `notes` and left out of the prediction, never guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from rblnctl import constants as C
from rblnctl.kube import EVENTS_V1, NODES, PDBS, PODS, Kube
from rblnctl.kube.optional import OnForbidden, optional
from rblnctl.node.history import HistoryEntry, entries_from_events
from rblnctl.node.mode import ModePlan, parse_mode, read_view
from rblnctl.node.options import ModeOptions
from rblnctl.node.pods import PodRef, controller
from rblnctl.node.pool import PoolOptions, PoolPlan, PoolRunner
from rblnctl.operator import resources as R
from rblnctl.operator.capacity import NON_TERMINATED, pod_requests, served_by_dra
from rblnctl.operator.policy import Policy
from rblnctl.vm import devices as D
from rblnctl.vm.placement import Placement

DEFAULT_GRACE_S = 30  # a pod's terminationGracePeriodSeconds when its spec leaves it out (the API server's default)


@dataclass(frozen=True, kw_only=True)
class PodFacts:
    """One unfinished pod bound to a node: what the rehearsal needs to move it."""

    pod: PodRef  # a replacement the rehearsal places: its controller's new pod, no uid yet
    node: str
    labels: dict[str, str]
    owner: str | None  # `Kind/name` of its controller (None: nothing recreates it)
    placement: Placement  # its nodeSelector, required node affinity and tolerations
    requests: tuple[tuple[str, int], ...]  # NPU resources it asks of a node (not those DRA serves)
    grace_s: int  # terminationGracePeriodSeconds (DEFAULT_GRACE_S when unset)


@dataclass(frozen=True, kw_only=True)
class BudgetFacts:
    """One PodDisruptionBudget as its status says now; `ref` is namespace/name."""

    ref: str
    namespace: str
    selector: dict  # spec.selector (a label selector; {} selects every pod of the namespace)
    allowed: int | None  # status.disruptionsAllowed (None: the disruption controller has not written it yet)
    desired_healthy: int | None
    current_healthy: int | None


@dataclass(frozen=True, kw_only=True)
class RehearsalFacts:
    """Everything the rehearsal is a function of."""

    pool: PoolPlan  # every node's plan, as the real run plans it
    cluster: tuple[dict, ...]  # every Node
    pods: tuple[PodFacts, ...]  # every unfinished pod bound to a node
    budgets: tuple[BudgetFacts, ...] | None  # None: they could not be read
    history: dict[str, tuple[HistoryEntry, ...]]  # node -> its switches that finished done (node history)
    old_resources: frozenset[str]  # NPU resources the switched nodes stop offering (the old mode's)
    uncordon: bool = True
    grace_period_s: int | None = None  # --grace-period (None: each pod's own)
    timeout_s: float = 600.0
    notes: tuple[str, ...] = ()  # what could not be read
    plans: dict[str, ModePlan] = field(default_factory=dict)  # pool.plans, typed


def pod_facts(pod: Mapping) -> PodFacts | None:
    """A pod's facts (None: not bound to a node)."""
    md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return None
    owner = controller(dict(pod))
    by_dra = served_by_dra(pod)
    grace = spec.get("terminationGracePeriodSeconds")
    return PodFacts(pod=PodRef(namespace=str(md.get("namespace") or ""), name=str(md.get("name") or ""),
                               uid=str(md.get("uid") or "")), node=str(node), labels=dict(md.get("labels") or {}),
                    owner=f"{owner.get('kind')}/{owner.get('name')}" if owner else None,
                    # a pod's placement: no KubeVirt labels (those are a virt-launcher's, in its own nodeSelector)
                    placement=Placement(node_selector=D.node_selector(spec), terms=tuple(D.required_node_terms(spec)),
                                        tolerations=tuple(D.tolerations(spec)), kubevirt_selector={}),
                    requests=tuple(sorted((k, v) for k, v in pod_requests(pod).items() if k not in by_dra)),
                    grace_s=int(grace) if isinstance(grace, int) else DEFAULT_GRACE_S)


def budget_facts(pdb: Mapping) -> BudgetFacts:
    md, spec, status = pdb.get("metadata") or {}, pdb.get("spec") or {}, pdb.get("status") or {}

    def num(key: str) -> int | None:
        value = status.get(key)
        return value if isinstance(value, int) else None

    # A status the disruption controller has not written for this generation allows nothing yet (the API
    # server answers 429 "still being processed": pkg/registry/core/pod/storage/eviction.go).
    generation, observed = md.get("generation"), status.get("observedGeneration")
    fresh = "disruptionsAllowed" in status and (
        not isinstance(generation, int) or (isinstance(observed, int) and observed >= generation))
    return BudgetFacts(ref=f"{md.get('namespace') or ''}/{md.get('name') or ''}",
                       namespace=str(md.get("namespace") or ""), selector=dict(spec.get("selector") or {}),
                       allowed=num("disruptionsAllowed") if fresh else None,
                       desired_healthy=num("desiredHealthy"), current_healthy=num("currentHealthy"))


def took(entry: HistoryEntry) -> float | None:
    """How long a finished run took, in seconds (None: it has no end, or its times do not parse)."""
    if not entry.finished:
        return None
    try:
        a = datetime.fromisoformat(entry.started.replace("Z", "+00:00"))
        b = datetime.fromisoformat(entry.finished.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (b - a).total_seconds())


def past_switches(events: Sequence[dict], nodes: Sequence[str]) -> dict[str, tuple[HistoryEntry, ...]]:
    """Each node's switches that finished done, from rblnctl's Events on the Nodes (rblnctl.node.history)."""
    by_node: dict[str, list[dict]] = {n: [] for n in nodes}
    for e in events:
        name = str((e.get("regarding") or {}).get("name") or "")
        if name in by_node:
            by_node[name].append(e)
    return {node: tuple(e for e in entries_from_events(evs, None) if e.action == C.AUDIT_SET_MODE
                        and e.result == "done" and e.to_mode and took(e) is not None)
            for node, evs in by_node.items()}


def old_mode_resources(policy: Policy | None, target: str, cluster: Sequence[Mapping]) -> frozenset[str]:
    """The NPU resources the nodes offer now that the target mode's device plugin does not: a switched node stops
    offering them."""
    if policy is None:
        return frozenset()
    old = policy.container_resources if target == C.MODE_VM else policy.vm_resources
    new = policy.vm_resources if target == C.MODE_VM else policy.container_resources
    names = {k for n in cluster for k in ((n.get("status") or {}).get("allocatable") or {}) if R.is_npu_resource(k)}
    return frozenset(k for k in names if old.matches(k) and not new.matches(k))


def read_facts(kube: Kube, pool: PoolPlan, policy: Policy | None, *, uncordon: bool = True,
               grace_period_s: int | None = None, timeout_s: float = 600.0) -> RehearsalFacts:
    """The rest of the facts beside the pool's plan: four LISTs, reads only."""
    notes: list[str] = []
    cluster = tuple(kube.list(NODES))
    pods = tuple(f for p in kube.list(PODS, field_selector=NON_TERMINATED) if (f := pod_facts(p)) is not None)
    read = optional(lambda: kube.list(PDBS), what="list PodDisruptionBudgets", on_forbidden=OnForbidden.UNKNOWN)
    budgets = tuple(budget_facts(b) for b in read.value) if read.known and not read.absent else None
    if budgets is None:
        notes.append(f"PodDisruptionBudgets could not be read ({read.forbidden or 'policy/v1 is not served'}): "
                     "evictions are predicted as if none limited them")
    events = optional(lambda: kube.list(EVENTS_V1, namespace=C.EVENT_NAMESPACE, field_selector=(
        f"regarding.kind=Node,reportingController={C.REPORTING_CONTROLLER}")),
        what="list events.k8s.io Events", on_forbidden=OnForbidden.UNKNOWN)
    if not events.known or events.absent:
        notes.append("rblnctl's Events could not be read: durations are estimated from the pods and defaults only")
    history = past_switches(events.value if events.known and not events.absent else [], pool.nodes)
    return RehearsalFacts(pool=pool, cluster=cluster, pods=pods, budgets=budgets, history=history,
                          old_resources=old_mode_resources(policy, pool.target or C.MODE_VM, cluster),
                          uncordon=uncordon, grace_period_s=grace_period_s, timeout_s=timeout_s, notes=tuple(notes),
                          plans={n: p for n, p in pool.plans.items() if isinstance(p, ModePlan)})


def gather(kube: Kube, target: str, names: Sequence[str], options: ModeOptions, *, selector: str | None = None,
           pool: PoolOptions | None = None) -> RehearsalFacts:
    """Plan the pool as the real run plans it, then read the rest: every request a GET or a LIST."""
    # The pool's precheck reads the operator's policy first (it refuses a cluster without one); its answer is the
    # rehearsal's policy too, rather than a second read of the same LISTs after the plan.
    target = parse_mode(target)  # a bad mode is bad input before any read, as the real run's plan says it
    view = read_view(kube, options)
    runner = dataclasses.replace(PoolRunner.for_mode(kube, target, options, pool=pool), precheck=lambda: view)
    planned = runner.plan(names, selector=selector)
    d = options.drain
    return read_facts(kube, planned, view.policy, uncordon=options.uncordon, grace_period_s=d.grace_period_s,
                      timeout_s=d.timeout_s)
