"""Drainer: plan() lists and classifies a node's pods; run() cordons (optionally) and evicts them.

Modelled on kubectl's pkg/drain (list with `spec.nodeName`, first-matching filter, policy/v1
Eviction, wait until each pod is gone by 404 or UID change), with what NVIDIA's driver manager
adds (by default only pods that use the accelerator are evicted) and what neither has: bounded
parallelism, exponential backoff on PodDisruptionBudget refusals reported live, and a refusal to
evict KubeVirt VMs that hold NPUs unless told to. The library never prints: progress goes through
the `on_*` callbacks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import (
    ClusterError,
    InvalidInput,
    NotFound,
    RblnError,
    Refused,
    WaitTimeout,
)
from rblnctl.kube import NODES, PODS, Kube, Resource
from rblnctl.operator.cluster import OperatorView, read_operator
from rblnctl.operator.components import component_of_pod
from rblnctl.operator.resources import is_npu_resource

log = logging.getLogger(__name__)

RESOURCE_CLAIMS = Resource(C.DRA_GROUP, C.DRA_VERSION, "resourceclaims", True, "ResourceClaim")

SCOPE_NPU = "npu"
SCOPE_ALL = "all"

# What plan() decided for a pod (PodEntry.action).
EVICT = "evict"
IGNORE = "ignore"

BACKOFF_START_S = 1.0
BACKOFF_CAP_S = 10.0


@dataclass(frozen=True, kw_only=True)
class PodRef:
    """One pod, by namespace, name and UID (the UID tells a replacement from the original)."""

    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class PodEntry:
    """A pod on the node and what the drain does with it (`evict` or `ignore`), and why."""

    namespace: str
    name: str
    uid: str
    action: str
    reason: str
    npu: bool = False  # the pod consumes NPUs (rebellions.ai/* resources or an NPU DRA claim)
    vmi: str | None = None  # for a KubeVirt virt-launcher pod: the VirtualMachineInstance it runs

    @property
    def ref(self) -> PodRef:
        return PodRef(namespace=self.namespace, name=self.name, uid=self.uid)


@dataclass(frozen=True, kw_only=True)
class DrainPlan:
    """What a drain of `node` would do; `blockers` non-empty means run() refuses and touches nothing."""

    node: str
    scope: str  # "npu": NPU consumers only; "all": every pod not managed by a DaemonSet
    cordon: bool  # run() cordons the node first (asked for and not yet unschedulable)
    unschedulable: bool  # the node was already cordoned when planned
    evict: list[PodEntry] = field(default_factory=list)
    ignored: list[PodEntry] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class DrainResult:
    """What run() did."""

    node: str
    cordoned: bool  # this run cordoned the node (it was schedulable before)
    evicted: list[PodRef] = field(default_factory=list)
    server_dry_run: bool = False


def _noop(*_: Any) -> None:
    return None


def _labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


def _controller(pod: dict) -> dict | None:
    return next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


def _npu_resources(pod: dict) -> list[str]:
    """rebellions.ai/* resources any container or init container requests or limits."""
    spec = pod.get("spec") or {}
    found: set[str] = set()
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            found.update(k for k in (res.get(part) or {}) if is_npu_resource(k))
    return sorted(found)


def cordon_patch(unschedulable: bool) -> dict:
    """The strategic merge patch kubectl cordon/uncordon sends."""
    return {"spec": {"unschedulable": unschedulable}}


def set_unschedulable(kube: Kube, node: str, unschedulable: bool, *, dry_run: bool = False) -> None:
    """Cordon (True) or uncordon (False) a node with kubectl's strategic merge patch."""
    kube.patch(NODES, node, cordon_patch(unschedulable), patch_type="strategic", dry_run=dry_run)


@dataclass(kw_only=True)
class Drainer:
    """Evict the pods on one node that use NPUs (or, with all_pods, every non-DaemonSet pod).

    Options mirror kubectl drain's flags; `None` grace period means each pod's own.
    """

    kube: Kube
    all_pods: bool = False  # evict every pod not managed by a DaemonSet, like kubectl drain
    force: bool = False  # evict pods without a controller (they are not recreated)
    delete_emptydir_data: bool = False  # evict pods with emptyDir volumes (their data is lost)
    evict_vms: bool = False  # evict KubeVirt virt-launcher pods that hold NPUs (stops or migrates the VM)
    disable_eviction: bool = False  # DELETE instead of the Eviction API: bypasses PodDisruptionBudgets
    grace_period_s: int | None = None  # None: each pod's own terminationGracePeriodSeconds
    timeout_s: float = 600.0  # for evictions (PDB retries included) and the wait for pods to go
    poll_s: float = 1.0
    max_parallel: int = 8
    cordon: bool = False  # run() cordons the node first (kubectl drain does; ModeSwitcher cordons itself)
    server_dry_run: bool = False  # send writes with dryRun=All; nothing persists
    operator: OperatorView | None = None  # the operator's namespace and DRA driver; None: read on plan()
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    on_cordoned: Callable[[str], None] = _noop
    on_evicted: Callable[[PodRef], None] = _noop
    on_deleted: Callable[[PodRef], None] = _noop
    on_pdb_blocked: Callable[[PodRef, str, int], None] = _noop

    def __post_init__(self) -> None:
        if self.max_parallel < 1:
            raise InvalidInput(f"max_parallel must be at least 1, not {self.max_parallel}")
        if self.grace_period_s is not None and self.grace_period_s < 0:
            raise InvalidInput(f"grace period must be 0 or more seconds, not {self.grace_period_s}")
        if self.timeout_s <= 0:
            raise InvalidInput(f"timeout must be more than 0 seconds, not {self.timeout_s:g}")

    def _view(self) -> OperatorView:
        if self.operator is None:
            self.operator = read_operator(self.kube)
        return self.operator

    # -- plan --------------------------------------------------------------------------------------

    def plan(self, node: str, *, node_obj: dict | None = None) -> DrainPlan:
        """List and classify the pods on `node` (reads only). Raises NotFound for an unknown node."""
        if node_obj is None:
            node_obj = self.kube.get(NODES, node)
        unschedulable = bool((node_obj.get("spec") or {}).get("unschedulable"))
        evict: list[PodEntry] = []
        ignored: list[PodEntry] = []
        blockers: list[str] = []
        claims: dict[tuple[str, str], dict | None] = {}
        pods = self.kube.list(PODS, field_selector=f"spec.nodeName={node}")
        for pod in sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"])):
            entry, blocker = self._classify(pod, claims)
            (evict if entry.action == EVICT else ignored).append(entry)
            if blocker:
                blockers.append(blocker)
        return DrainPlan(
            node=node,
            scope=SCOPE_ALL if self.all_pods else SCOPE_NPU,
            cordon=self.cordon and not unschedulable,
            unschedulable=unschedulable,
            evict=evict,  # what would go once the blockers are resolved; run() refuses while there are any
            ignored=ignored,
            blockers=blockers,
        )

    def _classify(self, pod: dict, claims: dict) -> tuple[PodEntry, str | None]:
        """Return the pod's entry and, when it blocks the drain, why. First matching rule wins."""
        md = pod.get("metadata") or {}
        ns, name = md.get("namespace", ""), md["name"]
        ref = f"{ns}/{name}"

        owner = _controller(pod)
        launcher = _labels(pod).get(C.VIRT_LAUNCHER_LABEL) == C.VIRT_LAUNCHER_VALUE
        vmi = ((owner or {}).get("name") or name) if launcher else None

        def entry(action: str, reason: str, npu: bool = False) -> PodEntry:
            return PodEntry(namespace=ns, name=name, uid=md.get("uid", ""), action=action, reason=reason, npu=npu,
                            vmi=vmi)

        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return entry(IGNORE, f"finished ({phase}): nothing to do"), None
        if C.MIRROR_POD_ANNOTATION in (md.get("annotations") or {}):
            return entry(IGNORE, "mirror pod: a static pod the kubelet owns"), None
        view = self._view()
        component = component_of_pod(pod, base_names=view.base_names) if ns == view.namespace else None
        if component is not None:
            return entry(IGNORE, f"RBLN operator component {component}: the operator replaces it"), None
        if owner is not None and owner.get("kind") == "DaemonSet":
            return entry(IGNORE, f"managed by DaemonSet {owner.get('name')}: never evicted"), None
        npu_reason = self._npu_use(pod, claims)
        npu = npu_reason is not None
        if not npu and not self.all_pods:
            return entry(IGNORE, "uses no NPU (pass --all-pods to evict it too)"), None
        reason = f"uses NPUs ({npu_reason})" if npu else "every pod (--all-pods)"
        problems: list[str] = []
        if npu and launcher and not self.evict_vms:
            problems.append(f"{ref} runs KubeVirt VM {ns}/{vmi} holding NPUs: stop or migrate it first "
                            "(--force evicts it, which stops the VM unless it can live-migrate)")
        if not self.delete_emptydir_data and any("emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or []):
            problems.append(f"{ref} has emptyDir volumes whose data would be lost (pass --delete-emptydir-data)")
        if owner is None and not self.force:
            problems.append(f"{ref} is not managed by a controller and would not come back (pass --force)")
        if problems:
            return entry(IGNORE, "blocked: " + "; ".join(problems), npu), "; ".join(problems)
        return entry(EVICT, reason, npu), None

    def _npu_use(self, pod: dict, claims: dict) -> str | None:
        """Why the pod counts as an NPU consumer, or None."""
        res = _npu_resources(pod)
        if res:
            return ", ".join(res)
        spec = pod.get("spec") or {}
        statuses = {s.get("name"): s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        ns = pod["metadata"].get("namespace", "")
        for rc in spec.get("resourceClaims") or []:
            claim_name = rc.get("resourceClaimName") or statuses.get(rc.get("name"))
            if not claim_name:
                # A claim from a template not generated yet: we cannot tell; a pod that asks for
                # devices on an NPU node is treated as an NPU consumer (evicting too much is safe,
                # leaving an NPU user behind is not).
                return f"resource claim {rc.get('name')} (not allocated yet)"
            key = (ns, claim_name)
            if key not in claims:
                claims[key] = self.kube.get_optional(RESOURCE_CLAIMS, claim_name, namespace=ns)
            claim = claims[key]
            if claim is None:
                return f"resource claim {claim_name} (not found)"
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
            driver = self._view().policy.dra_driver if self._view().policy else C.DRA_DRIVER
            if any(r.get("driver") == driver for r in results):
                return f"resource claim {claim_name} allocated by {driver}"
        return None

    # -- run ---------------------------------------------------------------------------------------

    def run(self, plan: DrainPlan) -> DrainResult:
        """Cordon (when planned), evict the planned pods and wait until they are gone.

        Raises Refused when the plan has blockers (nothing is written), WaitTimeout naming the pods
        still there after timeout_s, and the ClusterError of any eviction the server refused for a
        reason other than a disruption budget.
        """
        if plan.blockers:
            raise Refused(f"cannot drain node {plan.node}: {len(plan.blockers)} pod(s) block it",
                          blockers=plan.blockers)
        deadline = self.clock() + self.timeout_s
        cordoned = False
        if plan.cordon:
            set_unschedulable(self.kube, plan.node, True, dry_run=self.server_dry_run)
            cordoned = True
            self.on_cordoned(plan.node)
        evicted = self.evict([e.ref for e in plan.evict], deadline=deadline)
        return DrainResult(node=plan.node, cordoned=cordoned, evicted=evicted, server_dry_run=self.server_dry_run)

    def evict(self, pods: list[PodRef], *, deadline: float | None = None) -> list[PodRef]:
        """Evict (or delete) `pods` with at most max_parallel requests in flight, then wait for them to go."""
        if not pods:
            return []
        if deadline is None:
            deadline = self.clock() + self.timeout_s
        stop = threading.Event()
        blocked: dict[str, str] = {}
        errors: list[RblnError] = []
        done: list[PodRef] = []
        lock = threading.Lock()

        def work(p: PodRef) -> None:
            try:
                outcome = self._evict_one(p, deadline, stop)
            except RblnError as e:
                stop.set()
                with lock:
                    errors.append(e)
                return
            with lock:
                if isinstance(outcome, str):
                    blocked[str(p)] = outcome
                elif outcome:
                    done.append(p)

        ex = ThreadPoolExecutor(max_workers=min(self.max_parallel, len(pods)), thread_name_prefix="rblnctl-evict")
        try:
            list(ex.map(work, pods))
        except BaseException:
            # Ctrl-C (or any exit) while workers back off on a budget: send no eviction after it, and do
            # not sit out the timeout waiting for them (the `with` form would join them first).
            stop.set()
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown(wait=True)
        if errors:
            raise errors[0]
        order = {str(p): i for i, p in enumerate(pods)}
        done.sort(key=lambda p: order[str(p)])
        if not self.server_dry_run:
            self._wait_gone(done, deadline, blocked)
        elif blocked:
            raise self._timeout([], blocked)
        return done

    def _evict_one(self, p: PodRef, deadline: float, stop: threading.Event) -> bool | str:
        """True when evicted (or already gone), a str (the last PDB message) when a budget held until
        the deadline, False when stopped because another eviction failed."""
        delay = BACKOFF_START_S
        attempt = 0
        while not stop.is_set():
            try:
                self._send(p)
            except NotFound:
                log.debug("pod %s already gone", p)
                self.on_evicted(p)
                return True
            except ClusterError as e:
                if e.status != 429:
                    raise
                attempt += 1
                # Keep the server's words ("... needs 1 healthy pods and has 1 currently"), not our request line.
                message = str(e).split(f" {e.reason} ", 1)[-1] if e.reason else str(e)
                remaining = deadline - self.clock()
                if remaining <= 0:
                    return message
                self.on_pdb_blocked(p, message, attempt)
                # The last wait is cut to the deadline, so the final try happens at --timeout, not up to
                # one backoff before it.
                self._backoff(min(delay, remaining), stop)
                delay = min(delay * 2, BACKOFF_CAP_S)
                continue
            self.on_evicted(p)
            return True
        return False

    def _backoff(self, delay: float, stop: threading.Event) -> None:
        """Sleep between eviction retries; with the real clock, wake at once when `stop` is set."""
        if self.sleep is time.sleep:
            stop.wait(delay)
        else:
            self.sleep(delay)  # an injected clock (tests) decides how time passes

    def _send(self, p: PodRef) -> None:
        options: dict[str, Any] = {}
        if self.grace_period_s is not None:
            options["gracePeriodSeconds"] = self.grace_period_s
        if self.server_dry_run:
            options["dryRun"] = ["All"]
        if self.disable_eviction:
            self.kube.delete(PODS, p.name, namespace=p.namespace, body=options or None, dry_run=self.server_dry_run)
            return
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": p.name, "namespace": p.namespace}}
        if options:
            body["deleteOptions"] = options
        self.kube.create(PODS, body, namespace=p.namespace, sub_of=p.name, sub="eviction",
                         dry_run=self.server_dry_run)

    def _wait_gone(self, pods: list[PodRef], deadline: float, blocked: dict[str, str]) -> None:
        pending = list(pods)
        while True:
            still = []
            for p in pending:
                cur = self.kube.get_optional(PODS, p.name, namespace=p.namespace)
                if cur is None or (p.uid and cur["metadata"].get("uid") != p.uid):
                    self.on_deleted(p)
                else:
                    still.append(p)
            pending = still
            if not pending:
                break
            if self.clock() >= deadline:
                raise self._timeout(pending, blocked)
            self.sleep(min(self.poll_s, max(0.0, deadline - self.clock())))
        if blocked:
            raise self._timeout([], blocked)

    def _timeout(self, pending: list[PodRef], blocked: dict[str, str]) -> WaitTimeout:
        parts = []
        if blocked:
            parts.append("disruption budgets still refuse evicting " + ", ".join(sorted(blocked)))
        if pending:
            parts.append("still terminating: " + ", ".join(str(p) for p in pending))
        return WaitTimeout(f"pods did not leave within {self.timeout_s:g}s: " + "; ".join(parts))
