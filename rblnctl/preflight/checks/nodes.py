"""Cluster-wide `nodes.vm-mode` and the per-node checks (scope = node name) from each node's NFD facts and labels."""

from __future__ import annotations

from rblnctl.host import iommu_advice as advice
from rblnctl import constants as C
from rblnctl.operator import resources as R
from rblnctl.operator.capacity import dra_devices
from rblnctl.operator.nodes import mode_of
from rblnctl.operator.release import UNKNOWN, release_of
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.nfd import NodeNfd, features_by_node, iommu_fact, node_nfd
from rblnctl.node.record import record_of, switch_command
from rblnctl.operator.nodes import node_product
from rblnctl.remedy import Command, Remedy

LOCAL_CHECK = Command.own("preflight", local=True, on_host=True)  # run on the node itself


def nfd_fact_remedy(source: str) -> Remedy:
    """The same words for every node (rows group): the host check on the node, or the NFD source that tells."""
    return Remedy(f"run {{command}} on that node, or enable NFD's {source} source", LOCAL_CHECK)


def short_mode(mode: str) -> str:
    """`vm` for vm-passthrough, as set-mode's first argument is usually typed."""
    return "vm" if mode == C.MODE_VM else mode


VM_NPUS_TITLE = "Offers NPUs to VMs"


def vm_offer(f: ClusterFacts, node: dict) -> list[str] | None:
    """What a node offers VMs now, as `name=count`: the VM resources it advertises (sandbox: allocatable > 0, named as
    the active policy's sandboxDevicePlugin.resourceList or the release's scheme) or the vfio devices the DRA
    driver's ResourceSlices publish for it (dra). None when that is unknown (the slices could not be read)."""
    name = node["metadata"]["name"]
    if f.method == C.METHOD_DRA:
        if f.resource_slices is None or not f.resource_slices.ok:
            return None
        mine = [s_ for s_ in f.resource_slices.value or [] if (s_.get("spec") or {}).get("nodeName") == name]
        vfio, _ = dra_devices(mine)
        return [f"{C.DRA_VFIO_DEVICE_PREFIX}* devices={len(vfio)}"] if vfio else []
    names = f.policy.vm_resources if f.policy else R.ResourceNames(mode=C.MODE_VM)
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return [f"{k}={v}" for k, v in sorted(alloc.items()) if names.matches(k) and R.positive(v)]


def check_nodes(f: ClusterFacts, out: Findings) -> None:
    """WARN when no NPU node is in vm-passthrough mode, FAIL when none of those offers NPUs to VMs; then every
    per-node check for each NPU node."""
    nodes = f.nodes.value if f.nodes.ok else []
    modes = f.effective_modes()
    vm = [n for n, m in modes.items() if m == C.MODE_VM]
    offers = {n["metadata"]["name"]: vm_offer(f, n) for n in nodes if modes.get(n["metadata"]["name"]) == C.MODE_VM}
    if nodes:
        idle = [n for n, o in offers.items() if o == []]
        if vm and len(idle) == len(vm):
            out.add("nodes.vm-mode", "NPU nodes in vm-passthrough mode", SCOPE_CLUSTER, Status.FAIL,
                    f"{len(vm)} of {len(nodes)} NPU nodes in {C.MODE_VM} mode, but none offers NPUs to VMs yet "
                    f"({', '.join(idle[:3])}{' ...' if len(idle) > 3 else ''}: see {VM_NPUS_TITLE!r} below)",
                    f"the per-node {VM_NPUS_TITLE!r} rows say what holds each node")
        elif vm:
            busy = len(vm) - len(idle)
            note = f"; {', '.join(idle[:3])} {'offers' if len(idle) == 1 else 'offer'} none yet" if idle else ""
            out.add("nodes.vm-mode", "NPU nodes in vm-passthrough mode", SCOPE_CLUSTER, Status.PASS,
                    f"{len(vm)} of {len(nodes)} NPU nodes in {C.MODE_VM} mode, {busy} offering NPUs to VMs{note}")
        else:
            out.add("nodes.vm-mode", "NPU nodes in vm-passthrough mode", SCOPE_CLUSTER, Status.WARN,
                    f"none of {len(nodes)} NPU nodes is in {C.MODE_VM} mode: no VM can get an NPU yet",
                    _first_switch(f, nodes))
    else:
        out.add("nodes.vm-mode", "NPU nodes in vm-passthrough mode", SCOPE_CLUSTER, Status.SKIP,
                "no NPU node to check (see nfd.npu-nodes)")
    by_node = features_by_node(f.node_features.value or []) if f.node_features.ok else {}
    features_note = None
    if not f.node_features.ok:
        features_note = ("NodeFeature objects could not be read (see nfd.installed)" if not f.node_features.absent
                         else "the NodeFeature API is not served")
    for node in nodes:
        name = node["metadata"]["name"]
        nfd = node_nfd(node, by_node.get(name, []))
        check_one_node(name, modes.get(name, C.DEFAULT_MODE), node, nfd, features_note, out)
        check_vm_npus(f, node, modes.get(name, C.DEFAULT_MODE), offers.get(name), out)


def _first_switch(f: ClusterFacts, nodes: list[dict]) -> Remedy:
    """Switch the nodes meant for VMs, naming the first one `node set-mode vm` accepts (the policy's switch
    blockers for its product and the operator's release: rblnctl.operator.policy.Policy.switch_blockers, the rules
    set-mode refuses by; a v0.3.0 operator's sandbox plugin serves no VM, so set-mode refuses every switch to vm)."""
    release = release_of(f.operator.value or []) if f.operator.ok else UNKNOWN
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        if f.policy is None or not f.policy.switch_blockers(C.MODE_VM, product=node_product(node), release=release):
            return Remedy("switch the nodes meant for VMs, one at a time or by label: {command} for one",
                          switch_command(node, C.MODE_VM))
    assert f.policy is not None  # every node blocked: by the policy's rules
    why = f.policy.switch_blockers(C.MODE_VM, product=node_product(nodes[0]), release=release)[0].message
    return Remedy(f"no NPU node's switch to vm mode would converge under the RBLNClusterPolicy ({why})")


def check_vm_npus(f: ClusterFacts, node: dict, mode: str, offer: list[str] | None, out: Findings) -> None:
    """`node.vm-npus`: a vm-passthrough node offers NPUs to VMs (FAIL when it offers none, naming what holds it: a
    component pod stuck in an init container, the cordon); WARN when it does but is cordoned; SKIP in container
    mode."""
    name = node["metadata"]["name"]
    id_ = "node.vm-npus"
    if mode != C.MODE_VM:
        out.add(id_, VM_NPUS_TITLE, name, Status.SKIP, "container mode: its NPUs go to containers")
        return
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    cordon = "cordoned (SchedulingDisabled)" if cordoned else ""
    holds = f.holds.get(name, [])
    if offer is None:
        out.add(id_, VM_NPUS_TITLE, name, Status.WARN if cordoned else Status.PASS,
                "unknown: the DRA driver's ResourceSlices could not be read (see dra.driver)"
                + (f"; {cordon}" if cordon else ""), _uncordon(node) if cordoned else "")
        return
    if offer:
        if cordoned:
            out.add(id_, VM_NPUS_TITLE, name, Status.WARN, f"{', '.join(offer)}, but {cordon}: no new VM is "
                    "placed here", _uncordon(node))
        else:
            out.add(id_, VM_NPUS_TITLE, name, Status.PASS, ", ".join(offer))
        return
    what = ("no vfio device in the DRA driver's ResourceSlices" if f.method == C.METHOD_DRA else
            f"no {(f.policy.vm_resources if f.policy else R.ResourceNames(mode=C.MODE_VM)).describe()} in allocatable")
    parts = [f"offers none ({what})"]
    if cordon:
        parts.append(cordon)
    parts += [h.describe() for h in holds]
    if not holds and f.component_pods is not None and not f.component_pods.ok:
        parts.append("its operator pods could not be read")
    out.add(id_, VM_NPUS_TITLE, name, Status.FAIL, "; ".join(parts), _vm_npus_remedy(f, node, holds))


def _uncordon(node: dict) -> Remedy:
    """A cordoned vm-passthrough node: the unfinished switch that left it so is finished by running it again
    (its record on the node says so); else kubectl uncordons it."""
    name = node["metadata"]["name"]
    uncordon = Command.external("kubectl", "uncordon", name)
    record = record_of(node)
    if record is not None and record.target == C.MODE_VM:
        return Remedy("an unfinished switch to vm left it cordoned: {command} finishes it", switch_command(node,
                                                                                                     C.MODE_VM))
    return Remedy("if cordoning it was not meant: {command}", uncordon)


def _vm_npus_remedy(f: ClusterFacts, node: dict, holds: list) -> Remedy:
    """The way out for a vm-passthrough node that offers nothing: the operator release that fixes a plugin stuck on
    something that never comes on a vm-passthrough node (and switching back, `reverse` while a switch to vm is
    unfinished: what set-mode accepts, record.switch_command), else what set-mode and node list say."""
    name = node["metadata"]["name"]
    release = release_of(f.operator.value or []) if f.operator.ok else UNKNOWN
    for h in holds:
        if h.stuck and h.component in (C.COMP_SANDBOX, C.COMP_DRA) and h.waits_for:
            return Remedy(f"the operator's {h.component} cannot start on a vm-passthrough node as this release "
                          f"builds it: {release.remedy(h.component)}; or switch the node back, {{command}}",
                          switch_command(node, C.MODE_CONTAINER))
    return Remedy("{command} waits for the operator and names what is missing; {more0} shows its components",
                  switch_command(node, C.MODE_VM), more=(Command.own("node", "list", name, output="wide"),))


def check_one_node(name: str, mode: str, node: dict, nfd: NodeNfd, features_note: str | None,
                   out: Findings) -> None:
    """IOMMU, VFIO modules, vIOMMU, mode label and deploy-skip of one node: FAIL in vm mode, WARN in container mode."""
    vm_mode = mode == C.MODE_VM
    bad = Status.FAIL if vm_mode else Status.WARN
    later = "" if vm_mode else " (this node is in container mode: it matters once it switches to vm-passthrough)"

    iommu, iommu_ev = iommu_fact(nfd)
    if features_note and iommu is None:
        iommu_ev = features_note
    if iommu is True:
        out.add("node.iommu", "IOMMU enabled", name, Status.PASS, iommu_ev)
    elif iommu is False:
        out.add("node.iommu", "IOMMU enabled", name, bad, iommu_ev + later,
                Remedy(f"turn the IOMMU on: {advice.enable_in_firmware(None)}; {advice.cmdline_fix(None)}; "
                       "{command} on the node names what applies to its CPU", LOCAL_CHECK))
    else:
        out.add("node.iommu", "IOMMU enabled", name, Status.WARN, f"unknown: {iommu_ev}",
                Remedy(nfd_fact_remedy("pci").text + " (NFD >= v0.10 publishes iommu_group/type)", LOCAL_CHECK))

    check_node_modules(name, vm_mode, nfd, features_note, out)

    cpuid = nfd.elements(C.NFD_FEATURE_CPUID)
    dmi = nfd.attributes.get(C.NFD_FEATURE_DMI) or {}
    dmi_text = " ".join(x for x in (dmi.get("sys_vendor"), dmi.get("product_name")) if x)
    title = "Bare metal, or VM with a vIOMMU"
    if cpuid is not None:
        is_vm: bool | None = C.NFD_CPUID_HYPERVISOR in cpuid
        how = f"{C.NFD_FEATURE_CPUID} {'has' if is_vm else 'lacks'} {C.NFD_CPUID_HYPERVISOR}"
    elif nfd.labels.get(C.NFD_HYPERVISOR_LABEL) == "true":
        is_vm, how = True, f"label {C.NFD_HYPERVISOR_LABEL}=true"
    else:
        is_vm, how = None, features_note or (f"NFD publishes no {C.NFD_FEATURE_CPUID} features for this node"
                                             if nfd.objects else "no NodeFeature object for this node")
    if dmi_text:
        how += f"; DMI {dmi_text}"
    if is_vm is None:
        out.add("node.viommu", title, name, Status.WARN, f"unknown: {how}", nfd_fact_remedy("cpu"))
    elif not is_vm:
        out.add("node.viommu", title, name, Status.PASS, f"bare metal ({how})")
    elif iommu is True:
        out.add("node.viommu", title, name, Status.PASS, f"VM with a vIOMMU ({how}; {iommu_ev})")
    elif iommu is False:
        out.add("node.viommu", title, name, bad, f"VM without a vIOMMU ({how}; {iommu_ev}){later}",
                f"{advice.viommu(None)}, and boot it with {advice.guest_param((), None)}")
    else:
        out.add("node.viommu", title, name, Status.WARN, f"VM ({how}); whether it has a vIOMMU is unknown: {iommu_ev}",
                nfd_fact_remedy("pci"))

    labels = (node.get("metadata") or {}).get("labels") or {}
    raw = mode_of(labels, None).label
    title = "Workload mode label valid"
    if raw is None:
        out.add("node.mode-label", title, name, Status.PASS, f"unset: the policy's workloadType applies ({mode})")
    elif mode_of(labels, None).label_valid:
        out.add("node.mode-label", title, name, Status.PASS, f"{C.WORKLOAD_LABEL}={raw}")
    else:
        # A value that is a mode in another spelling (`vm`, `VM`, `Container`) says which mode was meant;
        # set-mode takes `MODE NODE` and relabels safely (cordon, drain, wait for the operator).
        meant = C.MODE_ALIASES.get(str(raw).strip().lower())
        out.add("node.mode-label", title, name, Status.FAIL,
                f"{C.WORKLOAD_LABEL}={raw!r} is not container or vm-passthrough: the operator ignores it and uses "
                f"the policy default ({mode})", _mode_label_remedy(str(raw), meant))

    skip = labels.get(C.DEPLOY_SKIP_LABEL)
    title = "Operator manages the node (npu.deploy.skip)"
    if skip == "true":
        out.add("node.deploy-skip", title, name, Status.WARN,
                f"{C.DEPLOY_SKIP_LABEL}=true: the operator deploys nothing here (no vfio-manager, no device plugin)",
                f"if not intended: `kubectl label node NODE {C.DEPLOY_SKIP_LABEL}-`",
                f"kubectl label node {name} {C.DEPLOY_SKIP_LABEL}-")
    elif skip is not None:
        out.add("node.deploy-skip", title, name, Status.PASS,
                f"{C.DEPLOY_SKIP_LABEL}={skip!r} is not exactly \"true\", so the operator ignores it")
    else:
        out.add("node.deploy-skip", title, name, Status.PASS, f"{C.DEPLOY_SKIP_LABEL} not set")


def _mode_label_remedy(raw: str, meant: str | None) -> Remedy:
    """Relabel the safe way (cordon, drain, wait for the operator) every node that carries this value: set-mode to
    the mode the value meant (`vm`), else to either mode. By label, so the rows of those nodes stay one group."""
    pick = f"{C.WORKLOAD_LABEL}={raw}"
    if meant:
        return Remedy("set it the safe way (cordon, drain, wait for the operator) on every node so labelled",
                      Command.own("node", "set-mode", short_mode(meant), selector=pick))
    return Remedy("set a valid mode the safe way on every node so labelled: {command} (or `container` in place of "
                  "`vm`)", Command.own("node", "set-mode", "vm", selector=pick))


def check_node_modules(name: str, vm_mode: bool, nfd: NodeNfd, features_note: str | None, out: Findings) -> None:
    """`node.vfio-modules` from NFD's kernel.enabledmodule (loaded + built-in), else kernel.loadedmodule."""
    title = "VFIO kernel modules loaded"
    enabled = nfd.elements(C.NFD_FEATURE_ENABLED_MODULES)
    loaded = nfd.elements(C.NFD_FEATURE_LOADED_MODULES)
    fix = Remedy("`modprobe vfio_pci` on the node (the operator's vfio-manager does it on vm-passthrough nodes); "
                 "{command} there shows the details", LOCAL_CHECK)
    if enabled is None and loaded is None:
        why = features_note or (f"NFD publishes no {C.NFD_FEATURE_LOADED_MODULES} features for this node"
                                if nfd.objects else "no NodeFeature object for this node")
        if vm_mode:
            out.add("node.vfio-modules", title, name, Status.WARN, f"unknown: {why}",
                    nfd_fact_remedy("kernel"))
        else:
            out.add("node.vfio-modules", title, name, Status.SKIP,
                    f"unknown ({why}); only vm-passthrough nodes need them")
        return
    have = (enabled or set()) | (loaded or set())
    missing = [m for m in C.VFIO_MODULES if m not in have]
    source = C.NFD_FEATURE_ENABLED_MODULES if enabled is not None else C.NFD_FEATURE_LOADED_MODULES
    if not missing:
        out.add("node.vfio-modules", title, name, Status.PASS, f"{', '.join(C.VFIO_MODULES)} (NFD {source})")
        return
    if not vm_mode:
        out.add("node.vfio-modules", title, name, Status.SKIP,
                f"{', '.join(missing)} not loaded (NFD {source}); container mode: the operator's vfio-manager loads "
                "them when the node switches to vm-passthrough")
        return
    if enabled is None:
        # kernel.loadedmodule lists loadable modules only: a built-in vfio would be missing from it.
        out.add("node.vfio-modules", title, name, Status.WARN,
                f"{', '.join(missing)} not in NFD {C.NFD_FEATURE_LOADED_MODULES} (built-in modules are not listed "
                f"there; NFD publishes no {C.NFD_FEATURE_ENABLED_MODULES})", fix)
    else:
        out.add("node.vfio-modules", title, name, Status.FAIL,
                f"{', '.join(missing)} neither loaded nor built in (NFD {C.NFD_FEATURE_ENABLED_MODULES})", fix)
