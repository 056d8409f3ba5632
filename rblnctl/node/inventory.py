"""List NPU nodes and summarise each with the operator model (read-only)."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.errors import ClusterError, InvalidInput
from rblnctl.kube import NODES, Kube
from rblnctl.operator.nodes import NpuNode, npu_node
from rblnctl.operator.policy import Policy


def list_npu_node_objects(kube: Kube, *, selector: str | None = None) -> list[dict]:
    """Return the raw Node objects that carry NPUs, optionally narrowed by a label selector.

    Label selectors cannot OR, so this lists once per marker label (bounded: three paged lists
    whatever the cluster size). Each list excludes the markers before it, so no node crosses the
    wire twice however many markers it carries. A selector the API server cannot parse is InvalidInput.
    """
    found: dict[str, dict] = {}
    markers = (*C.NFD_NPU_LABELS, C.NPU_PRESENT_LABEL)
    try:
        for i, marker in enumerate(markers):
            terms = [f"{marker}=true", *(f"{m}!=true" for m in markers[:i])]
            if selector:
                terms.append(selector)
            for node in kube.iter_list(NODES, label_selector=",".join(terms)):
                found.setdefault(node["metadata"]["name"], node)
    except ClusterError as e:
        if selector and e.status == 400:  # the API server could not parse -l
            raise InvalidInput(f"bad label selector {selector!r}: {e}") from e
        raise
    return [found[k] for k in sorted(found)]


def list_npu_nodes(kube: Kube, policy: Policy | None, *, selector: str | None = None) -> list[NpuNode]:
    """Return every NPU node, sorted by name, with its effective mode under `policy`."""
    return [npu_node(n, policy) for n in list_npu_node_objects(kube, selector=selector)]
