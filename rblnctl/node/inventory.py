"""List NPU nodes and summarise each with the operator model (read-only); watch them change."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.clock import Stop
from rblnctl.errors import ClusterError, InvalidInput, RblnError
from rblnctl.kube import CLUSTER_POLICIES, NODES, Kube, Mirror, WatchSpec, watch_many
from rblnctl.operator.nodes import NpuNode, is_npu_node, list_npu_node_objects, npu_node
from rblnctl.operator.policy import Policy, choose_active


def list_npu_nodes(kube: Kube, policy: Policy | None, *, selector: str | None = None) -> list[NpuNode]:
    """Return every NPU node, sorted by name, with its effective mode under `policy`."""
    return [npu_node(n, policy) for n in list_npu_node_objects(kube, selector=selector)]


def named_npu_nodes(kube: Kube, policy: Policy | None, names: list[str]) -> tuple[list[NpuNode], list[str]]:
    """The named NPU nodes, in the order given (once each), as `kubectl get node NAME...` reads them (a GET each);
    and one line for each name that is no node, or no NPU node."""
    found: list[NpuNode] = []
    errors: list[str] = []
    for name in dict.fromkeys(names):
        obj = kube.get_optional(NODES, name)
        if obj is None:
            errors.append(f'nodes "{name}" not found')
        elif not is_npu_node(obj):
            errors.append(f"node {name} has no Rebellions NPU (neither an NFD pci-1eff label nor "
                          f"{C.NPU_PRESENT_LABEL}=true)")
        else:
            found.append(npu_node(obj, policy))
    return found, errors


@dataclass(frozen=True, kw_only=True)
class NodesSnapshot:
    """The NPU nodes and the active policy at one moment of a watch."""

    policy: Policy | None
    nodes: list[NpuNode]
    policy_notes: tuple[str, ...] = ()  # which policy the operator acts on, when there are several


def watch_npu_nodes(kube: Kube, *, selector: str | None = None, stop: Stop | None = None,
                    timeout_s: float | None = None,
                    on_retry: Callable[[RblnError], None] | None = None) -> Iterator[NodesSnapshot]:
    """Yield the NPU nodes (and the active policy, which sets the mode of unlabelled nodes) now, then again after
    every change that alters them: one watch of the nodes (the label selector applied by the server, NPU
    nodes picked here) and one of the RBLNClusterPolicies, reopened whenever the server ends them.

    Runs until `stop` is set or `timeout_s` passes (None: for ever). A selector the API server cannot
    parse is InvalidInput.
    """
    specs = [WatchSpec(NODES, label_selector=selector), WatchSpec(CLUSTER_POLICIES, missing_ok=True)]
    nodes, policies = Mirror(), Mirror()
    last: NodesSnapshot | None = None
    try:
        for ev in watch_many(kube, specs, stop=stop, timeout_s=timeout_s, on_retry=on_retry):
            (nodes if ev.source == 0 else policies).apply(ev)
            if not (nodes.synced and policies.synced):
                continue
            choice = choose_active(policies.items())
            now = NodesSnapshot(policy=choice.active, policy_notes=choice.notes,
                                nodes=[npu_node(n, choice.active) for n in nodes.items() if is_npu_node(n)])
            if now != last:
                last = now
                yield now
    except ClusterError as e:
        if selector and e.status == 400:
            raise InvalidInput(f"bad label selector {selector!r}: {e}") from e
        raise


@dataclass(frozen=True, kw_only=True)
class Change:
    """One difference between two looks at the cluster: `subject` (`node/n1`) and what changed (`mode`), from `old`
    to `new` (empty for a subject that appeared or went: `what` is then `added` or `removed`)."""

    subject: str
    what: str
    old: str = ""
    new: str = ""


def _facts(n: NpuNode) -> dict[str, str]:
    return {
        "mode": n.mode if n.mode_label_valid else f"{n.mode}(label {n.mode_label!r} invalid)",
        "ready": "yes" if n.ready else "no",
        "schedulable": "yes" if n.schedulable else "no",
        "resources": ",".join(f"{k}={v}" for k, v in n.resources.items()) or "<none>",
        "components": ",".join(n.components) or "<none>",
        "paused": ",".join(n.paused) or "<none>",
        "deploy-skip": "yes" if n.deploy_skip else "no",
    }


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
