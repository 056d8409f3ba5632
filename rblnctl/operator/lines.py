"""The release lines of the RBLN NPU Operator and of its DRA driver, as one table: what each deploys, what its
components wait for, how it names its resources, what rblnctl supports on it and how rblnctl tells it apart.

docs/operator.md "Release matrix" is generated from OPERATOR_LINES and DRA_DRIVER_LINES (render_matrix;
tests/operator/test_lines.py checks the doc against them), and `preflight` says, from identify(), what works on
the line the cluster runs (sandbox, DRA) and what does not, one line each. Sources (RBLN-SW/rbln-npu-operator =
op, RBLN-SW/rbln-k8s-dra-driver = dra) are cited in each row; a row's facts the public source does not pin are
named assumptions in docs/operator.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.operator.components import deploy_labels
from rblnctl.operator.dra import DRA_READY_INIT, is_dra_daemonset
from rblnctl.operator.partition import gate_component, partition_state

# Verdicts of a row: works, does not, or depends (on something named in its text).
WORKS, NO, DEPENDS = "works", "no", "depends"


@dataclass(frozen=True, kw_only=True)
class OperatorLine:
    """One line of operator releases."""

    key: str
    title: str
    versions: str
    source: str
    components: str  # per mode
    deploy_labels: str
    init_waits: str
    resources: str
    told_apart: str  # how rblnctl tells the line apart in a cluster
    sandbox: tuple[str, str]  # (WORKS/NO/DEPENDS, why)
    dra: tuple[str, str]


@dataclass(frozen=True, kw_only=True)
class DraDriverLine:
    """One line of RBLN DRA driver releases."""

    key: str
    title: str
    versions: str
    source: str
    devices: str
    told_apart: str
    passthrough: tuple[str, str]


_CONTAINER_V03 = "driver, device-plugin, dra-kubelet-plugin, metrics-exporter, rbln-daemon, npu-feature-discovery, " \
    "operator-validator, container-toolkit"

OPERATOR_LINES: tuple[OperatorLine, ...] = (
    OperatorLine(
        key="v0.1-v0.2", title="chart v0.1.0-v0.2.2", versions="tags v0.1.0, v0.2.0, v0.2.1, v0.2.2",
        source="op@v0.1.0..v0.2.2 internal/scope/", components=f"container: {_CONTAINER_V03}; vm: vfio-manager, "
        "sandbox-device-plugin (no DRA kubelet plugin before v0.3.0)",
        deploy_labels="`npu.deploy.<component>=true`, filled only where missing",
        init_waits="sandbox-device-plugin: `driver-ready` (from v0.2.1: waits for the driver pod's .driver-ctr-ready, "
        "never on a vm node), `vfio-bind-checker`",
        resources="`resourceList` names: `ATOM`, `REBEL` (container), `ATOM_PT`, `ATOM_MAX_PT`, `REBEL_PT` (vm)",
        told_apart="the operator Deployment's version < 0.3.0",
        sandbox=(NO, "below the documented minimum (0.4.4); from v0.2.1 the sandbox plugin never leaves Init on a "
                 "vm-passthrough node"),
        dra=(NO, "no DRA kubelet plugin at all")),
    OperatorLine(
        key="v0.3.0", title="chart v0.3.0 (public)", versions="tag v0.3.0 = cd771db",
        source="op@v0.3.0 internal/scope/cluster_policy.go, internal/scope/patch/*.go",
        components=f"container: {_CONTAINER_V03}; vm: vfio-manager, sandbox-device-plugin",
        deploy_labels="`npu.deploy.<component>=true`, filled only where missing; dra-kubelet-plugin on container "
        "nodes only",
        init_waits="sandbox-device-plugin: `driver-ready`, `vfio-bind-checker`; dra-kubelet-plugin and the container "
        "components: `toolkit-validation`; operator-validator: `driver-validation`, `toolkit-validation`",
        resources="`resourceList` names (as above); DRA: container devices only",
        told_apart="the operator Deployment's version 0.3.x (chart label `rbln-npu-operator-v0.3.0`)",
        sandbox=(NO, "the sandbox plugin's `driver-ready` init container waits for a file only the driver pod writes, "
                 "and vm-passthrough nodes get no driver pod"),
        dra=(NO, "its DRA kubelet plugin runs on container-mode nodes only, with a driver (v0.1.0) that has no vfio "
             "devices")),
    OperatorLine(
        key="vfio-dra", title="the vfio/DRA line (later main, untagged; documented as v0.4.4+ / v0.6.0+)",
        versions="no public tag; the documentation's v0.4.4+ (sandbox) and v0.6.0+ (DRA)",
        source="op later main internal/clusterpolicy/components/*.go, cmd/rbln-validator/draready.go@0282159",
        components="container: driver, device-plugin, dra-kubelet-plugin, metrics-exporter, rbln-smd, "
        "npu-feature-discovery, operator-validator, container-toolkit; vm: vfio-manager, sandbox-device-plugin, "
        "dra-kubelet-plugin",
        deploy_labels="`npu.deploy.<component>=true`; `paused-for-driver-upgrade` while the driver manager works; "
        "`npu.deploy.skip=true` strips them",
        init_waits="dra-kubelet-plugin: `dra-ready` (toolkit-ready on container nodes, the vfio-pci binding on vm "
        "nodes: no containerToolkit needed); sandbox-device-plugin: `vfio-bind-checker` / `vfio-pci-validation`",
        resources="`rebellions.ai/npu`, `npu-vf<N>` (container); `rebellions.ai/RBLN-<MODEL>_<PF|VF>` (vm); DRA "
        "`vfio-<pci address>` devices, DeviceClass `vfio-npu.rebellions.ai`",
        told_apart="the DRA DaemonSet starts with `dra-ready`, or the operator's version >= 0.4.4 without a sign of "
        "the partition line",
        sandbox=(WORKS, "the sandbox plugin waits only for the vfio-pci binding"),
        dra=(DEPENDS, "the operator deploys its DRA plugin on vm-passthrough nodes, but only a DRA driver >= 0.2.1 "
             "passes NPUs through, and no public driver release is one")),
    OperatorLine(
        key="partition", title="the partition line (later, untagged: op@74c5b08)",
        versions="no public tag",
        source="op@74c5b08 internal/clusterpolicy/components/partition_manager.go, cmd/rbln-validator/gate.go, "
        "internal/consts/consts.go; node_labels.go desiredComponentLabels; dra_kubelet_plugin_test.go@1a3a217",
        components="as the vfio/DRA line, plus partition-manager (DaemonSet `rbln-partition-manager`, image "
        "`rebellions/k8s-partition-manager`)",
        deploy_labels="as the vfio/DRA line, plus `npu.deploy.partition-manager`; `npu.deploy.driver=pre-installed` "
        "(a host driver: no driver pod, no `npu.deploy.rbln-daemon`); node labels `npu.partition[.<idx>]` = "
        "`vf1|vf4|none`",
        init_waits="device-plugin, dra-kubelet-plugin, metrics-exporter, npu-feature-discovery, rbln-daemon, "
        "partition-manager: `rbln-validator gate --component <c>` (toolkit-ready; device-plugin and "
        "dra-kubelet-plugin also partition-ready on partitioned nodes)",
        resources="as the vfio/DRA line; partitioned REBEL PFs as `rebellions.ai/npu-vf1` / `npu-vf4`",
        told_apart="the policy has `partitionManager`, a `rbln-partition-manager` DaemonSet, a node labelled "
        "`npu.deploy.partition-manager` or `npu.deploy.driver=pre-installed`, or a component DaemonSet with an "
        "`rbln-validator gate` init container",
        sandbox=(WORKS, "the sandbox plugin is not gated (componentWaitsForPartition does not list it)"),
        dra=(NO, "its DRA plugin waits in `rbln-validator gate` for toolkit-ready, which only container-mode nodes get "
             "(inferred from gate.go, not run), and it needs containerToolkit")),
)

DRA_DRIVER_LINES: tuple[DraDriverLine, ...] = (
    DraDriverLine(
        key="public-0.1", title="public releases v0.1.0-v0.1.2", versions="tags v0.1.0, v0.1.1, v0.1.2; main@dd9af1b",
        source="dra@v0.1.0..v0.1.2, main@dd9af1b (no file outside vendor/ mentions vfio)",
        devices="container devices only (`rbln<N>`), DeviceClass `npu.rebellions.ai`",
        told_apart="the DRA DaemonSet's image tag <= v0.1.2",
        passthrough=(NO, "no vfio devices: zero devices for VMs")),
    DraDriverLine(
        key="vfio-0.2", title=">= 0.2.1 (the documentation's floor, not published)", versions="not public",
        source="the documentation's prerequisites; rblnctl.constants DRA_* (`vfio-<pci address>` devices, type=vfio)",
        devices="`vfio-<pci address>` devices for NPUs bound to vfio-pci, DeviceClass `vfio-npu.rebellions.ai`",
        told_apart="the DRA DaemonSet's image tag >= 0.2.1, and vfio-* devices in its ResourceSlices",
        passthrough=(WORKS, "vfio devices for NPUs bound to vfio-pci (the cluster's ResourceSlices are the proof)")),
)

LINES_BY_KEY = {line.key: line for line in OPERATOR_LINES}


@dataclass(frozen=True, kw_only=True)
class LineFinding:
    """The line the cluster runs (None: cannot tell) and the evidence that decided it."""

    line: OperatorLine | None
    evidence: str


def _partition_signs(policy_obj: Mapping | None, daemonsets: Sequence[Mapping], nodes: Sequence[Mapping],
                     base_name: str) -> list[str]:
    signs = []
    spec = (policy_obj or {}).get("spec") or {}
    if isinstance(spec, Mapping) and C.COMPONENT_POLICY_KEYS[C.COMP_PARTITION_MANAGER] in spec:
        signs.append("the RBLNClusterPolicy has spec.partitionManager")
    for ds in daemonsets:
        meta = ds.get("metadata") or {}
        if meta.get("name") in (f"{base_name}-{C.COMP_PARTITION_MANAGER}",
                                f"{C.OPERATOR_BASE_NAME}-{C.COMP_PARTITION_MANAGER}"):
            signs.append(f"DaemonSet {meta.get('namespace', '')}/{meta.get('name')}")
        inits = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("initContainers") or []
        if any(gate_component(c) for c in inits):
            signs.append(f"DaemonSet {meta.get('namespace', '')}/{meta.get('name')} starts with rbln-validator gate")
    for n in nodes:
        meta = n.get("metadata") or {}
        labels = meta.get("labels") or {}
        deploy = deploy_labels(labels)
        if C.COMP_PARTITION_MANAGER in deploy.values:
            signs.append(f"node {meta.get('name')} has {C.DEPLOY_LABEL_PREFIX}{C.COMP_PARTITION_MANAGER}")
        if deploy.driver_preinstalled:
            signs.append(f"node {meta.get('name')} has {C.DEPLOY_LABEL_PREFIX}{C.COMP_DRIVER}="
                         f"{C.DEPLOY_PREINSTALLED}")
        if partition_state(labels).labelled:
            signs.append(f"node {meta.get('name')} has partition labels")
    return list(dict.fromkeys(signs))


def identify(version: tuple[int, int, int] | None, *, policy_obj: Mapping | None = None,
             daemonsets: Sequence[Mapping] = (), nodes: Sequence[Mapping] = (),
             base_name: str = C.OPERATOR_BASE_NAME) -> LineFinding:
    """Which line the cluster runs, from what it declares: signs of the partition line first (objects only it
    makes), then the DRA DaemonSet's `dra-ready`, then the operator's version."""
    signs = _partition_signs(policy_obj, daemonsets, nodes, base_name)
    if signs:
        return LineFinding(line=LINES_BY_KEY["partition"], evidence="; ".join(signs[:3]))
    for ds in daemonsets:
        if not is_dra_daemonset(dict(ds), base_name):
            continue
        inits = [str(c.get("name") or "") for c in
                 (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("initContainers") or []]
        if DRA_READY_INIT in inits:
            meta = ds.get("metadata") or {}
            return LineFinding(line=LINES_BY_KEY["vfio-dra"], evidence=(
                f"DaemonSet {meta.get('namespace', '')}/{meta.get('name')} starts with {DRA_READY_INIT}"))
    if version is None:
        return LineFinding(line=None, evidence="the operator's version is unknown and no object tells the line")
    text = ".".join(map(str, version))
    if version < (0, 3, 0):
        return LineFinding(line=LINES_BY_KEY["v0.1-v0.2"], evidence=f"operator {text}")
    if version < C.VM_ALLOCATOR_FROM[C.COMP_SANDBOX]:
        return LineFinding(line=LINES_BY_KEY["v0.3.0"], evidence=f"operator {text}")
    return LineFinding(line=LINES_BY_KEY["vfio-dra"], evidence=f"operator {text}, no sign of the partition line")


def driver_line(version: tuple[int, int, int] | None) -> DraDriverLine | None:
    """The DRA driver line of a driver version (None: unknown, or between the public releases and the floor)."""
    if version is None:
        return None
    if version <= C.DRA_DRIVER_PUBLIC_UP_TO:
        return DRA_DRIVER_LINES[0]
    return DRA_DRIVER_LINES[1] if version >= C.MIN_DRA_DRIVER else None


def verdicts(found: LineFinding, dra_driver: tuple[int, int, int] | None = None) -> dict[str, tuple[str | None, str]]:
    """Method -> (WORKS/NO/DEPENDS, or None: unknown line; one line of text) for `preflight`. `dra_driver`: the
    running DRA driver's version, which decides a line whose DRA depends on the driver."""
    line = found.line
    out: dict[str, tuple[str | None, str]] = {}
    for method in C.METHODS:
        if line is None:
            out[method] = (None, f"{method}: unknown ({found.evidence})")
            continue
        verdict, why = line.sandbox if method == C.METHOD_SANDBOX else line.dra
        driver = driver_line(dra_driver) if method == C.METHOD_DRA and verdict == DEPENDS else None
        if driver is not None:
            verdict = driver.passthrough[0]
            why = f"its DRA driver {'.'.join(map(str, dra_driver or ()))} is of the {driver.title}: " \
                  f"{driver.passthrough[1]}"
        word = {WORKS: "works", NO: "does not work", DEPENDS: "depends"}[verdict]
        out[method] = (verdict, f"{method} {word} on {line.title} ({found.evidence}): {why}")
    return out


# -- the generated part of docs/operator.md ------------------------------------------------------------------------

MATRIX_BEGIN = "<!-- release-matrix: generated from rblnctl/operator/lines.py; do not edit by hand -->"
MATRIX_END = "<!-- end release-matrix -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_matrix() -> str:
    """The release matrix of docs/operator.md, between its markers."""
    rows = [MATRIX_BEGIN, "",
            "| line | versions | components | deploy labels | init waits | resources | sandbox | DRA | "
            "how rblnctl tells it apart | source |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for ln in OPERATOR_LINES:
        rows.append("| " + " | ".join(_cell(c) for c in (
            f"**{ln.title}**", ln.versions, ln.components, ln.deploy_labels, ln.init_waits, ln.resources,
            f"{ln.sandbox[0]}: {ln.sandbox[1]}", f"{ln.dra[0]}: {ln.dra[1]}", ln.told_apart, f"`{ln.source}`")) + " |")
    rows += ["", "| DRA driver line | versions | devices | VFIO passthrough | how rblnctl tells it apart | source |",
             "|---|---|---|---|---|---|"]
    for d in DRA_DRIVER_LINES:
        rows.append("| " + " | ".join(_cell(c) for c in (
            f"**{d.title}**", d.versions, d.devices, f"{d.passthrough[0]}: {d.passthrough[1]}", d.told_apart,
            f"`{d.source}`")) + " |")
    rows += ["", MATRIX_END]
    return "\n".join(rows)


def write_matrix(path: str) -> bool:
    """Rewrite the release matrix between its markers in the doc at `path`; whether it changed."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    start, end = text.index(MATRIX_BEGIN), text.index(MATRIX_END) + len(MATRIX_END)
    new = text[:start] + render_matrix() + text[end:]
    if new != text:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(new)
    return new != text


if __name__ == "__main__":  # python -m rblnctl.operator.lines [docs/operator.md]
    import sys

    write_matrix(sys.argv[1] if len(sys.argv) > 1 else "docs/operator.md")
