"""`nfd.installed`, `nfd.npu-nodes`: Node Feature Discovery runs, and it labels the NPU nodes (or the --node)."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.operator.install import helm_hint, helm_upgrade
from rblnctl.preflight.checks.common import helm_release, unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status


def check_nfd(f: ClusterFacts, out: Findings) -> None:
    """NFD found by its API, its labels or its pods; NPU nodes labelled by it (FAIL when none)."""
    id_, title = "nfd.installed", "Node Feature Discovery installed"
    release = helm_release(f)
    remedy = (f"install NFD: `{helm_hint(release, ['nfd.enabled=true'])}` (the operator chart's NFD dependency), or "
              "`helm install nfd oci://registry.k8s.io/nfd/charts/node-feature-discovery -n node-feature-discovery "
              "--create-namespace`")
    nf = f.node_features
    if nf.ok:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"NodeFeature API served; {len(nf.value or [])} NodeFeature object(s) read")
    elif nf.error:
        # NFD may well be there, but its per-node facts cannot be read: say why, with the permission.
        unreadable(out, id_, title, nf)
    elif f.nodes_have_nfd_labels():
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"{C.NFD_LABEL_PREFIX}* labels on NPU nodes (NodeFeature API not served)")
    elif f.nfd_pods is not None and f.nfd_pods.ok and f.nfd_pods.value:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"{len(f.nfd_pods.value)} NFD pod(s) ({C.NFD_POD_SELECTOR}); NodeFeature API not served")
    else:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                "no NodeFeature API, no feature.node.kubernetes.io/* labels on nodes, no NFD pods", remedy,
                helm_upgrade(release, ["nfd.enabled=true"]) or "")

    id_, title = "nfd.npu-nodes", "NPU nodes discovered"
    if f.node_name:
        if f.nodes.absent:
            out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"node {f.node_name} not found",
                    "check the name with `kubectl get nodes`", "kubectl get nodes")
            return
        if not f.nodes.ok:
            unreadable(out, id_, title, f.nodes)
            return
        labels = (f.nodes.value[0].get("metadata") or {}).get("labels") or {}
        marks = [k for k in (*C.NFD_NPU_LABELS, C.NPU_PRESENT_LABEL) if labels.get(k) == "true"]
        if marks:
            out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"node {f.node_name}: {', '.join(marks)}")
        else:
            out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                    f"node {f.node_name} has none of {', '.join(C.NFD_NPU_LABELS)}",
                    "make sure NFD runs on it and its pci source reports class 12 (deviceClassWhitelist); check "
                    "`lspci -d 1eff:` on the node")
        return
    if not f.nodes.ok:
        unreadable(out, id_, title, f.nodes)
        return
    n = len(f.nodes.value)
    if n:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"{n} NPU node{'s' if n != 1 else ''} labelled by NFD")
    else:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                f"no node labelled {' or '.join(C.NFD_NPU_LABELS)}=true"
                + (f" matching {f.selector}" if f.selector else ""),
                "make sure NFD's worker runs on the NPU nodes and its pci source reports class 12; check "
                "`kubectl get nodes -L feature.node.kubernetes.io/pci-1200_1eff.present`",
                "kubectl get nodes -L feature.node.kubernetes.io/pci-1200_1eff.present")
