"""NPU nodes as the operator sees them: which nodes carry NPUs, and each node's effective mode."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import ClusterError, InvalidInput
from rblnctl.kube import NODES, Kube
from rblnctl.kube.parallel import start
from rblnctl.kube.projections import NODE
from rblnctl.operator import resources as R
from rblnctl.operator.capacity import NodeCapacity
from rblnctl.operator.components import InitHold, deploy_labels
from rblnctl.operator.policy import Policy


def labels_of(node: Mapping) -> dict:
    """A Node's metadata.labels ({} when it has none)."""
    return dict(((node.get("metadata") or {}).get("labels")) or {})


def is_npu_node(node: Mapping) -> bool:
    """True when NFD (pci-1eff / pci-1200_1eff) or the operator (npu.present) marks the node as carrying NPUs.

    The operator sets npu.present from the same NFD labels (v0.3.0 internal/scope/cluster_policy.go).
    """
    labels = labels_of(node)
    return any(labels.get(k) == "true" for k in C.NFD_NPU_LABELS) or labels.get(C.NPU_PRESENT_LABEL) == "true"


def npu_node_selectors(selector: str | None = None) -> list[str]:
    """The label selectors that together select the nodes carrying NPUs, each node once: one per marker label,
    excluding the markers before it (label selectors cannot OR); each narrowed by `selector`."""
    markers = (*C.NFD_NPU_LABELS, C.NPU_PRESENT_LABEL)
    return [",".join([f"{marker}=true", *(f"{m}!=true" for m in markers[:i]), *([selector] if selector else [])])
            for i, marker in enumerate(markers)]


def list_npu_node_objects(kube: Kube, *, selector: str | None = None) -> list[dict]:
    """Return the raw Node objects that carry NPUs, optionally narrowed by a label selector.

    Label selectors cannot OR, so this lists once per marker label (bounded: three paged lists
    whatever the cluster size), the three at once (rblnctl.kube.parallel). Each list excludes the markers
    before it, so no node crosses the wire twice however many markers it carries. A selector the API server
    cannot parse is InvalidInput.
    """
    found: dict[str, dict] = {}
    def listing(terms: str) -> Callable[[], list[dict]]:
        # managedFields, images and the like are never read: NODE leaves them out (rblnctl.kube.projections)
        return lambda: list(kube.iter_list(NODES, label_selector=terms, projection=NODE))

    try:
        reads = [start(listing(terms)) for terms in npu_node_selectors(selector)]
        for read in reads:  # in marker order: the first error is the one the reads one by one met first
            for node in read.result():
                found.setdefault(node["metadata"]["name"], node)
    except ClusterError as e:
        if selector and e.status == 400:  # the API server could not parse -l
            raise InvalidInput(f"bad label selector {selector!r}: {e}") from e
        raise
    return [found[k] for k in sorted(found)]


@dataclass(frozen=True, kw_only=True)
class Mode:
    """A node's mode: the label when it is one the operator knows, else the policy's workloadType."""

    effective: str
    label: str | None  # raw rebellions.ai/npu.workload.config (None: unset)
    from_label: bool  # the label decided it

    @property
    def label_valid(self) -> bool:
        """Unset or one of the two modes (the operator ignores anything else)."""
        return self.label is None or self.label in C.WORKLOAD_MODES


def mode_of(labels: Mapping, policy: Policy | None) -> Mode:
    """The node's effective mode: the label if valid, else the policy's workloadType, else container.

    RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/cluster_policy.go: an unknown label value falls
    back to the policy default.
    """
    raw = labels.get(C.WORKLOAD_LABEL)
    if raw in C.WORKLOAD_MODES:
        return Mode(effective=raw, label=raw, from_label=True)
    default = policy.workload_type if policy is not None else C.DEFAULT_MODE
    return Mode(effective=default, label=None if raw is None else str(raw), from_label=False)


@dataclass(frozen=True, kw_only=True)
class NpuNode:
    """One node that carries Rebellions NPUs, summarised from its Node object."""

    name: str
    mode: str  # effective mode
    mode_label: str | None  # raw rebellions.ai/npu.workload.config, None when unset
    mode_label_valid: bool
    schedulable: bool
    ready: bool
    deploy_skip: bool
    components: list[str] = field(default_factory=list)  # deploy labels set to "true"
    paused: list[str] = field(default_factory=list)  # deploy labels paused by the driver manager
    resources: dict[str, int] = field(default_factory=dict)  # allocatable rebellions.ai/* (integers)
    product: str | None = None  # npu.product; on a vm-passthrough node without it, the product its VM resources name
    count: int | None = None  # npu.count; on a vm-passthrough node without it, the VM resources it advertises
    family: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # every label of the node (node list --show-labels)
    capacity: NodeCapacity | None = None  # its NPUs allocatable, allocated and free (None: not read)
    # operator component pods on it held in an init container (rblnctl.operator.components.init_hold; () when its
    # pods were not read)
    holds: tuple[InitHold, ...] = ()
    # the switch record rblnctl keeps on a node from a set-mode's first write to its last (the annotation's JSON,
    # rblnctl.node.record parses it): a switch that runs now, or was interrupted (Ctrl-C, a crash); None: none
    switch_record: str | None = None


def _vm_hardware(status: Mapping, policy: Policy | None) -> tuple[str | None, int | None]:
    """The product and NPU count of a vm-passthrough node, read from the VM resources it advertises.

    NPU feature discovery, which writes npu.product and npu.count, is a container-mode component, so a
    vm-passthrough node usually has neither label. A VM resource is one the policy's resourceList names or
    one named as every release names them (R.classify_generic), so a policy carrying a resourceList the
    later plugins ignore does not hide their `RBLN-<MODEL>_PF`. Product: the one card its VM resources stand for (None
    when they stand for several or none that is known). Count: the sum of those resources, as `node list`'s
    NPUS column counts them; None when the node advertises no VM resource.
    """
    names = policy.vm_resources if policy is not None else R.ResourceNames(mode=C.MODE_VM)
    alloc = status.get("allocatable") or {}
    held = {k: R.count(v) for k, v in alloc.items()
            if (names.matches(k) or R.classify_generic(k) == C.MODE_VM) and R.count(v) > 0}
    if not held:
        return None, None
    products = {R.vm_product(k, names) for k in held}
    return (products.pop() if len(products) == 1 else None), sum(held.values())


def npu_node(node: Mapping, policy: Policy | None) -> NpuNode:
    """Summarise one Node object with the active policy (for the mode of unlabelled nodes)."""
    meta = node.get("metadata") or {}
    labels = labels_of(node)
    status = node.get("status") or {}
    mode = mode_of(labels, policy)
    deploy = deploy_labels(labels)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    count = labels.get(C.NPU_COUNT_LABEL)
    product = labels.get(C.NPU_PRODUCT_LABEL)
    npus = R.count(count) if count is not None else None
    if mode.effective == C.MODE_VM and (product is None or npus is None):
        vm_product, vm_count = _vm_hardware(status, policy)
        product = product if product is not None else vm_product
        npus = npus if npus is not None else vm_count
    return NpuNode(
        name=str(meta.get("name") or ""),
        mode=mode.effective,
        mode_label=mode.label,
        mode_label_valid=mode.label_valid,
        schedulable=not (node.get("spec") or {}).get("unschedulable", False),
        ready=ready,
        deploy_skip=deploy.skip,
        components=deploy.set_components(),
        paused=deploy.paused(),
        resources={k: R.count(v) for k, v in sorted((status.get("allocatable") or {}).items())
                   if k.startswith(C.RESOURCE_PREFIX)},
        product=product,
        count=npus,
        family=labels.get(C.NPU_FAMILY_LABEL),
        labels={str(k): str(v) for k, v in sorted(labels.items())},
        switch_record=(meta.get("annotations") or {}).get(C.SET_MODE_ANNOTATION),
    )


def node_product(node: Mapping) -> str | None:
    """The node's NPU product (`RBLN-CA22`) from NPU feature discovery's label, when it is there."""
    return labels_of(node).get(C.NPU_PRODUCT_LABEL) or None

