"""Find NPU nodes and read their mode, deploy labels and NPU resources (read-only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.kube import NODES, Kube


@dataclass(frozen=True, kw_only=True)
class NpuNode:
    """One node that carries Rebellions NPUs, as the API server describes it."""

    name: str
    mode: str  # effective mode: the label value when valid, else the default (container)
    mode_label: str | None  # raw value of rebellions.ai/npu.workload.config, None when unset
    mode_label_valid: bool
    schedulable: bool
    ready: bool
    deploy_skip: bool
    components: list[str] = field(default_factory=list)  # rebellions.ai/npu.deploy.<c>=true
    resources: dict[str, str] = field(default_factory=dict)  # allocatable rebellions.ai/*
    product: str | None = None
    count: str | None = None
    family: str | None = None


def is_npu_node(node: dict) -> bool:
    """True when NFD (or the operator) marks the node as carrying a Rebellions PCI device."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(labels.get(k) == "true" for k in C.NFD_NPU_LABELS) or labels.get(C.NPU_PRESENT_LABEL) == "true"


def npu_node_from(node: dict) -> NpuNode:
    """Summarise one Node object."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    raw_mode = labels.get(C.WORKLOAD_LABEL)
    valid = raw_mode in C.WORKLOAD_MODES
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    components = sorted(
        k[len(C.DEPLOY_LABEL_PREFIX):]
        for k, v in labels.items()
        if k.startswith(C.DEPLOY_LABEL_PREFIX) and k != C.DEPLOY_SKIP_LABEL and v == "true"
    )
    resources = {
        k: str(v) for k, v in sorted((status.get("allocatable") or {}).items()) if k.startswith(C.RESOURCE_PREFIX)
    }
    return NpuNode(
        name=meta.get("name", ""),
        mode=raw_mode if valid else C.DEFAULT_MODE,
        mode_label=raw_mode,
        mode_label_valid=valid or raw_mode is None,
        schedulable=not spec.get("unschedulable", False),
        ready=ready,
        deploy_skip=labels.get(C.DEPLOY_SKIP_LABEL) == "true",
        components=components,
        resources=resources,
        product=labels.get(C.NPU_PRODUCT_LABEL),
        count=labels.get(C.NPU_COUNT_LABEL),
        family=labels.get(C.NPU_FAMILY_LABEL),
    )


def list_npu_node_objects(kube: Kube, *, selector: str | None = None) -> list[dict]:
    """Return the raw Node objects that carry NPUs, optionally narrowed by a label selector.

    Label selectors cannot OR, so this lists once per marker label (bounded: three paged lists
    whatever the cluster size). Each list excludes the markers before it, so no node crosses the
    wire twice however many markers it carries.
    """
    found: dict[str, dict] = {}
    markers = (*C.NFD_NPU_LABELS, C.NPU_PRESENT_LABEL)
    for i, marker in enumerate(markers):
        terms = [f"{marker}=true", *(f"{m}!=true" for m in markers[:i])]
        if selector:
            terms.append(selector)
        for node in kube.iter_list(NODES, label_selector=",".join(terms)):
            found.setdefault(node["metadata"]["name"], node)
    return [found[k] for k in sorted(found)]


def list_npu_nodes(kube: Kube, *, selector: str | None = None) -> list[NpuNode]:
    """Return every NPU node, sorted by name."""
    return [npu_node_from(n) for n in list_npu_node_objects(kube, selector=selector)]
