"""List NPU nodes and summarise each with the operator model and its NPU capacity (read-only); watch them change."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.clock import Stop
from rblnctl.errors import ClusterError, InvalidInput, RblnError
from rblnctl.kube import (
    CLUSTER_POLICIES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Change,
    Kube,
    Mirror,
    WatchSpec,
    watch_many,
)
from rblnctl.kube.optional import UNKNOWN, optional
from rblnctl.operator.capacity import NON_TERMINATED, CapacityFacts, PodsByNode, PodsRead, dra_in_use, read_facts
from rblnctl.kube.parallel import start
from rblnctl.operator.cluster import OperatorView, operator_namespace, read_operator, with_init_logs
from rblnctl.operator.components import InitHold, component_of_pod, init_holds
from rblnctl.operator.nodes import NpuNode, is_npu_node, list_npu_node_objects, npu_node
from rblnctl.operator.policy import Policy, choose_active


def held_pods(node: NpuNode, pods: Sequence[Mapping] | None, policy: Policy | None,
              namespace: str | None = None) -> tuple[InitHold, ...]:
    """The operator component pods among `pods` (a node's) held in an init container (rblnctl.operator.components
    .init_hold); `namespace`: the operator's (default: the policy's, else rbln-system)."""
    ns = namespace or operator_namespace(policy, [])[0]
    bases = tuple(dict.fromkeys([*([policy.base_name] if policy else []), C.OPERATOR_BASE_NAME]))
    comps = [(comp, dict(p)) for p in pods or [] if (p.get("metadata") or {}).get("namespace") == ns
             and (comp := component_of_pod(dict(p), base_names=bases)) is not None]
    return tuple(init_holds(comps, vm_node=node.mode == C.MODE_VM, node_labels=node.labels))


def with_capacity(kube: Kube, objects: Sequence[Mapping], policy: Policy | None, *, namespace: str | None = None,
                  logs: bool = True, pods_read: PodsRead | None = None) -> list[NpuNode]:
    """The NPU nodes of these Node objects, each with its capacity (rblnctl.operator.capacity: one read of the
    pods on them, `pods_read` when it was started already, and with DRA of the driver's slices and the claims)
    and its component pods held in an init container (with `logs`, a stuck one's last log line where it can be
    read: one GET each)."""
    facts = read_facts(kube, objects, policy, pods_read=pods_read)
    out = []
    for n in objects:
        node = npu_node(n, policy)
        name = node.name
        holds = held_pods(node, facts.held.get(name), policy, namespace)
        if logs:
            holds = tuple(with_init_logs(kube, [h for h in holds if h.stuck])) + tuple(h for h in holds if not h.stuck)
        out.append(dataclasses.replace(node, capacity=facts.capacity(n), holds=holds))
    return out


def list_npu_nodes(kube: Kube, policy: Policy | None, *, selector: str | None = None,
                   capacity: bool = True, namespace: str | None = None) -> list[NpuNode]:
    """Return every NPU node, sorted by name, with its effective mode under `policy` and (`capacity`) its NPUs
    allocatable, allocated and free, and its component pods held in an init container (`namespace`: the
    operator's)."""
    objects = list_npu_node_objects(kube, selector=selector)
    if capacity:
        return with_capacity(kube, objects, policy, namespace=namespace)
    return [npu_node(n, policy) for n in objects]


def read_npu_nodes(kube: Kube, *, selector: str | None = None) -> tuple[OperatorView, list[NpuNode]]:
    """The operator view (rblnctl.operator.cluster.read_operator) and every NPU node under its policy, with its
    capacity (list_npu_nodes): the policies, the Node lists and the pods read at once (rblnctl.kube.parallel).
    Errors as read one by one: the operator view's first."""
    view_read = start(lambda: read_operator(kube))
    objects_read = start(lambda: list_npu_node_objects(kube, selector=selector))
    pods_read = PodsRead(kube)
    try:
        view = view_read.result()
        objects = objects_read.result()
    except BaseException:
        pods_read.cancel()
        raise
    return view, with_capacity(kube, objects, view.policy, namespace=view.namespace, pods_read=pods_read)


def named_npu_nodes(kube: Kube, policy: Policy | None, names: list[str], *,
                    namespace: str | None = None) -> tuple[list[NpuNode], list[str]]:
    """The named NPU nodes, in the order given (once each), as `kubectl get node NAME...` reads them (a GET each),
    with their capacity; and one line for each name that is no node, or no NPU node."""
    found: list[dict] = []
    errors: list[str] = []
    for name in dict.fromkeys(names):
        obj = kube.get_optional(NODES, name)
        if obj is None:
            errors.append(f'nodes "{name}" not found')
        elif not is_npu_node(obj):
            errors.append(f"node {name} has no Rebellions NPU (neither an NFD pci-1eff label nor "
                          f"{C.NPU_PRESENT_LABEL}=true)")
        else:
            found.append(obj)
    return with_capacity(kube, found, policy, namespace=namespace), errors


@dataclass(frozen=True, kw_only=True)
class NodesSnapshot:
    """The NPU nodes and the active policy at one moment of a watch."""

    policy: Policy | None
    nodes: list[NpuNode]
    policy_notes: tuple[str, ...] = ()  # which policy the operator acts on, when there are several


def _readable(kube: Kube, res: object, field_selector: str | None = None) -> str | None:
    """None when the collection can be listed (or is not served: nothing to count); else why not (one LIST of at
    most one object)."""
    query = {"limit": 1, **({"fieldSelector": field_selector} if field_selector else {})}
    read = optional(lambda: kube.request("GET", res.path(), query=query),  # type: ignore[attr-defined]
                    what=f"list {res.plural}", on_forbidden=UNKNOWN)  # type: ignore[attr-defined]
    return None if read.known else f"cannot list {res.plural} ({read.forbidden})"  # type: ignore[attr-defined]


def _snapshot_facts(policy: Policy | None, pods: Mirror | None, slices: Mirror | None, claims: Mirror | None,
                    problems: Sequence[str]) -> CapacityFacts:
    """CapacityFacts from the mirrors of a watch."""
    by_node = PodsByNode()
    for p in pods.items() if pods is not None else ():
        by_node.add(p)
    driver = policy.dra_driver if policy is not None else C.DRA_DRIVER
    node_slices: dict[str, list[dict]] = {}
    for s in slices.items() if slices is not None else []:
        spec = s.get("spec") or {}
        if spec.get("driver") == driver:
            node_slices.setdefault(str(spec.get("nodeName") or ""), []).append(s)
    return CapacityFacts(uses=by_node.uses if pods is not None else None, held=by_node.held, slices=node_slices,
                         claims=claims.items() if claims is not None else
                         ([] if not node_slices else None), driver=driver,
                         vfio_class=policy.dra_device_class_vm if policy is not None else C.DRA_DEVICECLASS_VM,
                         slices_known=slices is not None or not dra_in_use(policy),
                         problems=tuple(problems))


def watch_npu_nodes(kube: Kube, *, selector: str | None = None, stop: Stop | None = None,
                    timeout_s: float | None = None,
                    on_retry: Callable[[RblnError], None] | None = None) -> Iterator[NodesSnapshot]:
    """Yield the NPU nodes (and the active policy, which sets the mode of unlabelled nodes) now, then again after
    every change that alters them: one watch of the nodes (the label selector applied by the server, NPU
    nodes picked here), one of the RBLNClusterPolicies, and for the capacity one of the unfinished pods and
    (where the DRA API is served) of the ResourceSlices and ResourceClaims, reopened whenever the server ends
    them. A collection rblnctl may not list is left out and the capacity it tells stays unknown.

    Runs until `stop` is set or `timeout_s` passes (None: for ever). A selector the API server cannot
    parse is InvalidInput.
    """
    specs = [WatchSpec(NODES, label_selector=selector), WatchSpec(CLUSTER_POLICIES, missing_ok=True)]
    problems = []
    mirrors: list[Mirror | None] = [Mirror(), Mirror(), None, None, None]
    for i, (res, fields) in enumerate(((PODS, NON_TERMINATED), (RESOURCE_SLICES, None), (RESOURCE_CLAIMS, None)),
                                      start=2):
        why = _readable(kube, res, fields)
        if why is not None:
            problems.append(why)
            continue
        mirrors[i] = Mirror()
        specs.append(WatchSpec(res, field_selector=fields, missing_ok=res is not PODS))
    watched = [m for m in mirrors if m is not None]
    nodes, policies = watched[0], watched[1]
    last: NodesSnapshot | None = None
    try:
        for ev in watch_many(kube, specs, stop=stop, timeout_s=timeout_s, on_retry=on_retry):
            watched[ev.source].apply(ev)
            if not all(m.synced for m in watched):
                continue
            choice = choose_active(policies.items())
            facts = _snapshot_facts(choice.active, mirrors[2], mirrors[3], mirrors[4], problems)
            listed = [(npu_node(n, choice.active), n) for n in nodes.items() if is_npu_node(n)]
            now = NodesSnapshot(policy=choice.active, policy_notes=choice.notes,
                                nodes=[dataclasses.replace(
                                    node, capacity=facts.capacity(n),
                                    holds=held_pods(node, facts.held.get(node.name), choice.active))
                                    for node, n in listed])
            if now != last:
                last = now
                yield now
    except ClusterError as e:
        if selector and e.status == 400:
            raise InvalidInput(f"bad label selector {selector!r}: {e}") from e
        raise


def _facts(n: NpuNode) -> dict[str, str]:
    return {
        "mode": n.mode if n.mode_label_valid else f"{n.mode}(label {n.mode_label!r} invalid)",
        "ready": "yes" if n.ready else "no",
        "schedulable": "yes" if n.schedulable else "no",
        "resources": ",".join(f"{k}={v}" for k, v in n.resources.items()) or "<none>",
        "components": ",".join(n.components) or "<none>",
        "paused": ",".join(n.paused) or "<none>",
        "init": ",".join(f"{h.component}({h.container} {h.status})" for h in n.holds) or "<none>",
        "deploy-skip": "yes" if n.deploy_skip else "no",
        "npus": _npus(n),
    }


def _npus(n: NpuNode) -> str:
    """`4 allocatable, 2 allocated, 2 free` (the change line of node list --watch)."""
    c = n.capacity
    if c is None:
        return "<unknown>"
    if not c.known:
        return f"{c.allocatable} allocatable, allocated unknown"
    return f"{c.allocatable} allocatable, {c.allocated} allocated, {c.free} free"


def node_changes(old: list[NpuNode], new: list[NpuNode]) -> list[Change]:
    """What changed between two lists of NPU nodes, node by node (sorted by name)."""
    before, after = {n.name: n for n in old}, {n.name: n for n in new}
    out: list[Change] = []
    for name in sorted(before.keys() | after.keys()):
        subject = f"node/{name}"
        if name not in before:
            out.append(Change(subject=subject, what="added", new=after[name].mode))
        elif name not in after:
            out.append(Change(subject=subject, what="removed", old=before[name].mode))
        else:
            a, b = _facts(before[name]), _facts(after[name])
            out += [Change(subject=subject, what=k, old=a[k], new=b[k]) for k in a if a[k] != b[k]]
    return out


def policy_changes(old: Policy | None, new: Policy | None) -> list[Change]:
    """What changed in the active policy: which one it is, its workloadType, its switches, its state."""
    if old is None and new is None:
        return []
    if old is None or new is None or old.name != new.name:
        return [Change(subject="rblnclusterpolicy", what="active", old=old.name if old else "<none>",
                       new=new.name if new else "<none>")]
    subject = f"rblnclusterpolicy/{new.name}"
    out = []
    def enabled(p: Policy) -> str:
        return ",".join(k for k, on in sorted(p.enabled.items()) if on) or "<none>"

    for what, a, b in (("workloadType", old.workload_type, new.workload_type), ("enabled", enabled(old), enabled(new)),
                       ("state", old.state or "<none>", new.state or "<none>")):
        if a != b:
            out.append(Change(subject=subject, what=what, old=a, new=b))
    return out
