"""Node Feature Discovery facts per node: NodeFeature objects merged with the node's labels, and the IOMMU fact."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C


@dataclass(frozen=True, kw_only=True)
class NodeNfd:
    """The NFD facts of one node, merged from its NodeFeature object(s) and its labels."""

    objects: int
    sets: dict[str, set[str]] = field(default_factory=dict)  # flag/attribute feature -> element names
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    instances: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def elements(self, feature: str) -> set[str] | None:
        """Element names of a flag or attribute feature; None when NFD did not publish it."""
        return self.sets.get(feature)


def features_by_node(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Group NodeFeature objects by the node they describe (label nfd.node.kubernetes.io/node-name, else name)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for nf in items:
        meta = nf.get("metadata") or {}
        node = (meta.get("labels") or {}).get(C.NFD_NODE_NAME_LABEL) or meta.get("name", "")
        out.setdefault(node, []).append(nf)
    return out


def node_nfd(node: dict[str, Any], features: list[dict[str, Any]]) -> NodeNfd:
    """Merge a node's NodeFeature objects (spec.features flags, attributes, instances) with its labels."""
    sets: dict[str, set[str]] = {}
    attrs: dict[str, dict[str, str]] = {}
    inst: dict[str, list[dict[str, str]]] = {}
    for nf in features:
        feats = (nf.get("spec") or {}).get("features") or {}
        for kind in ("flags", "attributes"):
            for name, body in (feats.get(kind) or {}).items():
                elements = (body or {}).get("elements") or {}
                sets.setdefault(name, set()).update(elements)
                if kind == "attributes":
                    attrs.setdefault(name, {}).update({k: str(v) for k, v in elements.items()})
        for name, body in (feats.get("instances") or {}).items():
            for el in (body or {}).get("elements") or []:
                inst.setdefault(name, []).append({k: str(v) for k, v in ((el or {}).get("attributes") or {}).items()})
    # NodeFeature spec.labels are the labels NFD asks nfd-master to put on the node; read both.
    labels: dict[str, str] = {}
    for nf in features:
        labels.update({k: str(v) for k, v in ((nf.get("spec") or {}).get("labels") or {}).items()})
    labels.update((node.get("metadata") or {}).get("labels") or {})
    return NodeNfd(objects=len(features), sets=sets, attributes=attrs, instances=inst, labels=labels)


def _is_rbln_pci(attrs: dict[str, str]) -> bool:
    return attrs.get("vendor", "").lower().removeprefix("0x") == f"{C.PCI_VENDOR_RBLN:04x}"


def iommu_fact(nfd: NodeNfd) -> tuple[bool | None, str]:
    """(IOMMU on for the NPUs?, evidence): True/False when NFD publishes it, None when it does not."""
    if nfd.labels.get(C.NFD_IOMMU_LABEL) == "true":
        return True, f"label {C.NFD_IOMMU_LABEL}=true"
    devices = nfd.instances.get(C.NFD_FEATURE_PCI)
    if not nfd.objects:
        return None, "no NodeFeature object for this node"
    if devices is None:
        return None, f"NFD publishes no {C.NFD_FEATURE_PCI} features for this node"
    npus = [d for d in devices if _is_rbln_pci(d)]
    with_group = [d for d in devices if d.get(C.NFD_PCI_IOMMU_ATTR)]
    if npus and all(d.get(C.NFD_PCI_IOMMU_ATTR) for d in npus):
        types = sorted({d[C.NFD_PCI_IOMMU_ATTR] for d in npus})
        kinds = ", ".join(types)
        return True, f"NFD {C.NFD_FEATURE_PCI}: the NPUs are in IOMMU groups ({C.NFD_PCI_IOMMU_ATTR} {kinds})"
    if npus and with_group:
        # NFD reads iommu_group/type for every device; others have it, so the NPUs really have no group.
        return False, f"NFD {C.NFD_FEATURE_PCI}: other devices have {C.NFD_PCI_IOMMU_ATTR}, the NPUs have none"
    if not npus:
        return None, f"NFD {C.NFD_FEATURE_PCI} lists no vendor {C.PCI_VENDOR_RBLN:04x} device"
    return None, (f"NFD {C.NFD_FEATURE_PCI} has no {C.NFD_PCI_IOMMU_ATTR} on any device: the IOMMU is off, "
                  "or NFD is older than v0.10")
