"""The links of vm diagnose: pure functions of the facts read once (rblnctl.vm.diagnose.facts), walked in order
up to the first broken one (judge).
"""


from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import one_line
from rblnctl.operator import resources as R
from rblnctl.operator.install import install_remedy
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.vm import devices as D
from rblnctl.vm.cluster import (
    Check,
    VmCluster,
    check_advertised,
    check_device_class,
    check_kubevirt,
    check_gates,
    check_permitted,
    check_slices,
    check_vm_nodes,
    set_mode_remedy,
)
from rblnctl.vm.fit import shared_warning, shared_with
from rblnctl.remedy import Command, Remedy
from rblnctl.vm.diagnose.facts import DRA_ENUMERATION_FAILED, PENDING_NODES, Facts
from rblnctl.vm.diagnose.model import FAILURES, Link, LinkName, LinkStatus, VmDiagnosis
from rblnctl.vm.model import VmNpus, VmRef
from rblnctl.vm.pending import RestartRequired, differ, restart_command, restart_required, staged_words
from rblnctl.vm.placement import launcher_placement, not_schedulable_for_vms, placement_of
from rblnctl.vm.lifecycle import run_strategy



LIST_VMS = Command.own("vm", "list", all_namespaces=True)  # which VMs hold NPUs: the remedy when none is free

DRA_RESCAN_S = 30  # the RBLN DRA plugin's default --vfio-rescan-interval (cmd/npu-kubelet-plugin/main.go)


@dataclass(frozen=True, kw_only=True)
class SchedulingFailure:
    """kube-scheduler's FailedScheduling message, parsed: `0/5 nodes are available: 3 Insufficient x, 2 ...`."""

    message: str
    available: int | None
    total: int | None
    reasons: tuple[tuple[int, str], ...]  # (node count, reason)


_AVAILABLE = re.compile(r"^\s*(\d+)/(\d+) nodes are available:\s*(.*)$", re.S)
_REASON = re.compile(r"^(\d+)\s+(.+)$")


def parse_failed_scheduling(message: str) -> SchedulingFailure:
    """Split kube-scheduler's message (k8s.io/kubernetes pkg/scheduler/framework FitError.Error) into reasons.

    The reasons follow "N/M nodes are available:" as "count reason" joined by ", ", sorted, ending
    with "." (FitError.Error's SeparatorFormat " %v."); what the PostFilter plugins say follows as a sentence of
    its own ("preemption: ...", or on 1.36 "no new claims to deallocate, preemption: ..." and "still not
    schedulable, preemption: ..."), and is not a reason. A reason holds no ". " (resource names such as
    rebellions.ai/X hold a dot without a space). Anything else is kept whole as one reason.
    """
    m = _AVAILABLE.match(message)
    if not m:
        return SchedulingFailure(message=message, available=None, total=None, reasons=((0, message.strip()),))
    rest = re.split(r"\.(?:\s+|$)", m.group(3).strip(), maxsplit=1)[0].strip()
    reasons = []
    for part in (p.strip() for p in rest.split(", ")):
        r = _REASON.match(part)
        if r:
            reasons.append((int(r.group(1)), r.group(2).strip()))
        elif part:
            reasons.append((0, part))
    return SchedulingFailure(message=message, available=int(m.group(1)), total=int(m.group(2)), reasons=tuple(reasons))



class _Chain:
    """Links so far; add() says whether to go on."""

    def __init__(self) -> None:
        self.links: list[Link] = []

    def add(self, name: LinkName, ok: bool, evidence: Sequence[str], remedy: Remedy | None = None, *,
            failure: str | None = None) -> bool:
        self.links.append(Link(name=name, status=LinkStatus.PASS if ok else LinkStatus.FAIL, evidence=tuple(evidence),
                               remedy=None if ok else remedy, failure=None if ok else failure or FAILURES[name]))
        return ok

    def check(self, name: LinkName, check: Check, extra: Sequence[str] = (), *, failure: str | None = None) -> bool:
        return self.add(name, check.ok, [*check.evidence, *([] if check.ok else extra)], check.remedy,
                        failure=failure)




def judge(f: Facts) -> VmDiagnosis:
    """Walk the chain over facts already read (pure)."""
    ref = f.ref
    chain = _Chain()
    warnings: list[str | Remedy] = list(f.unread)

    def done(method: str | None = None, npus: int = 0) -> VmDiagnosis:
        return VmDiagnosis(vm=ref, method=method, npus=npus, links=tuple(chain.links), warnings=tuple(warnings))

    vm, vmi = f.vm, f.vmi
    if vm is None and vmi is None or f.cluster is None:
        from rblnctl.vm.where import elsewhere

        if f.elsewhere:  # forgot -n: say where it is, not "create it"
            other = f.elsewhere[0]
            remedy = Remedy(text=f"diagnose the one in namespace {other}: {{command}}",
                            command=Command.own("vm", "diagnose", ref.name, namespace=other))
        else:  # `vm manifest` only prints: say what creates it
            remedy = Remedy(text="create it with NPUs: {command} prints the VM, `kubectl apply -f -` creates it",
                            command=Command.own("vm", "manifest", ref.name, namespace=ref.namespace, npus=1))
        chain.add(LinkName.VM, False, [f"no VirtualMachine or VirtualMachineInstance {ref}"], remedy,
                  failure=f"VirtualMachine {ref} not found{elsewhere(list(f.elsewhere))}")
        return done()
    if vm is not None:
        st = vm.get("status") or {}
        chain.add(LinkName.VM, True, [f"VirtualMachine {ref}: status {st.get('printableStatus') or '<none>'}, "
                                      f"runStrategy {run_strategy(vm)}"])
    else:
        chain.add(LinkName.VM, True, [f"no VirtualMachine; a standalone VirtualMachineInstance {ref}"])
    cluster = f.cluster
    have, held = f.have, f.held
    if not _request(chain, ref, have, held, cluster, restart_required(vm)):
        return done(have.method, have.count)
    warnings += _staged(f)
    method = str(have.method)
    gates = check_gates(cluster, method)
    if gates.warning:
        warnings.append(gates.warning)
    if not chain.check(LinkName.GATES, gates,
                       failure=None if check_kubevirt(cluster).ok else "KubeVirt is not installed (no KubeVirt CR)"):
        return done(method, have.count)
    if not chain.check(LinkName.VM_NODES, check_vm_nodes(cluster)):
        return done(method, have.count)
    if method == C.METHOD_DRA:
        if not chain.check(LinkName.DEVICE_CLASS, check_device_class(cluster)):
            return done(method, have.count)
        if not _dra_plugin(chain, f):
            return done(method, have.count)
        slices = check_slices(cluster)
        if slices.warning:
            warnings.append(slices.warning)
        if not _slices(chain, f, slices):
            return done(method, have.count)
        warnings += _skipped_devices(f)
        if not _schedulable(chain, f):
            return done(method, have.count)
    else:
        checks = [check_permitted(cluster, r) for r in have.resources]
        # a check that holds with a warning may name the command that settles it (check_permitted: no list yet)
        warnings += [Remedy(text=c.warning, command=c.remedy.command) if c.remedy and c.remedy.command else c.warning
                     for c in checks if c.ok and c.warning]
        warnings += _shared_names(f)
        if not chain.add(LinkName.PERMITTED, all(c.ok for c in checks), [e for c in checks for e in c.evidence],
                         next((c.remedy for c in checks if not c.ok), None)):
            return done(method, have.count)
        checks = [check_advertised(cluster, r) for r in have.resources]
        bad = [c for c in checks if not c.ok]
        extra = _vm_node_pending(f) if bad else []
        if not chain.add(LinkName.ADVERTISED, not bad, [e for c in checks for e in c.evidence] + extra,
                         bad[0].remedy if bad else None):
            return done(method, have.count)
        if not _schedulable(chain, f):
            return done(method, have.count)
        if not _capacity(chain, f):
            return done(method, have.count)
    if not _instance(chain, f):
        return done(method, have.count)
    assert vmi is not None
    if method == C.METHOD_DRA and not _claims(chain, f):
        never = _never_fits(f, f.ref, vmi)
        if never is not None:  # no node has that many vfio NPUs at all: freeing some would not help
            broken = chain.links[-1]
            chain.links[-1] = dataclasses.replace(broken, evidence=(*broken.evidence, never[0]), remedy=never[1])
        return done(method, have.count)
    if not _scheduling(chain, f):
        return done(method, have.count)
    node = ((vmi.get("status") or {}).get("nodeName")) or ((f.pod or {}).get("spec") or {}).get("nodeName")
    if method == C.METHOD_DRA and not _claim_name(chain, f, str(node)):
        return done(method, have.count)
    if method == C.METHOD_DRA:
        warnings += _shared_claim_names(f)
    if not _node_components(chain, f, str(node)):
        return done(method, have.count)
    _ready(chain, ref, vmi, held)
    return done(method, have.count)


def _request(chain: _Chain, ref: VmRef, have: VmNpus, held: VmNpus | None, cluster: VmCluster,
             restart: RestartRequired | None = None) -> bool:
    kubevirt = [f"KubeVirt: {C.VM_RESTART_REQUIRED}: {restart.message}"] if restart is not None else []
    if not have.count:
        others = f" (host devices: {', '.join(have.other_devices)})" if have.other_devices else ""
        staged = [f"{staged_words(held.count, 0)} (a change staged for its next restart)", *kubevirt] \
            if held is not None and held.count else []
        return chain.add(LinkName.REQUEST, False, [f"the spec passes no NPU{others}", *staged],
                         Remedy(text="give it NPUs", command=_attach(ref)))
    listed = ", ".join(f"{d.name}={d.source}" for d in have.devices)
    if have.method == "mixed":
        method = cluster.policy.vm_method if cluster.policy and cluster.policy.vm_method else C.METHOD_SANDBOX
        return chain.add(LinkName.REQUEST, False, [f"{have.count} NPU(s) through both methods ({listed}): the "
                                                   "operator offers NPUs one way only"],
                         Remedy(text=f"express them all through {method}",
                                command=_attach(ref, method=method, convert=True, restart=True)),
                         failure="its spec passes NPUs through both methods")
    evidence = [f"{have.count} NPU(s) through {have.method}: {listed}"]
    if held is not None and differ(held.devices, have.devices):
        counts: dict[str, int] = {}
        for d in held.devices:
            counts[d.source] = counts.get(d.source, 0) + 1
        passes = f"its running VMI passes {held.count} ({', '.join(f'{n}x {k}' for k, n in counts.items()) or 'none'})"
        if held.count:  # it has NPUs, the ones it started with: the spec's are staged for its next restart
            return chain.add(LinkName.REQUEST, True, [*evidence, f"{passes} until it restarts: the VM was changed "
                                                      "after it started (a change staged for its next restart)",
                                                      *kubevirt])
        return chain.add(LinkName.REQUEST, False, [*evidence, f"but {passes}: the VM was changed after it started",
                                                   *kubevirt],
                         Remedy(text="restart the VM and wait until its NPUs are attached",
                                command=restart_command(ref)),
                         failure="its running VMI passes other NPUs than its spec")
    return chain.add(LinkName.REQUEST, True, evidence)


def _shared_names(f: Facts) -> list[str | Remedy]:
    """A warning per sandbox resource of the VM that container-mode nodes advertise too (a name both plugins
    advertise, rblnctl.vm.fit.shared_with): the scheduler may place the VM there, on NPUs no vfio-pci holds."""
    assert f.cluster is not None
    out: list[str | Remedy] = []
    for r in f.have.resources:
        nodes = shared_with(f.cluster, C.METHOD_SANDBOX, r)
        if nodes:
            out.append(shared_warning(f.cluster, r, nodes))
    return out


def _staged(f: Facts) -> list[str | Remedy]:
    """The warnings for a running VM whose spec asks for other NPUs than its VMI passes (a change staged for its next
    restart): what a restart brings, and whether that would be scheduled now (its own NPUs counted free)."""
    held, have = f.held, f.have
    if held is None or not held.count or not differ(held.devices, have.devices):
        return []
    out: list[str | Remedy] = [Remedy(text=f"VM {f.ref}: {staged_words(held.count, have.count)}; {{command}} "
                                           "applies the change", command=restart_command(f.ref))]
    for fit in f.fits.values():
        why = fit.warning()
        if why:
            out.append(f"VM {f.ref} after its restart: {why}")
    return out


def _vm_node_pending(f: Facts, limit: int = PENDING_NODES) -> list[str]:
    """What the operator has not done yet on the vm-mode nodes (evidence for a resource nobody offers)."""
    assert f.cluster is not None
    if f.cluster.policy is None:
        return ["no RBLNClusterPolicy: the operator deploys nothing"]
    out = []
    for name in list(f.cluster.vm_nodes)[:limit]:
        if name not in f.pending:
            continue
        missing = list(f.pending[name])
        out.append(f"{name}: " + ("; ".join(missing[:3]) if missing else "operator components ready"))
    return out


def _dra_plugin(chain: _Chain, f: Facts) -> bool:
    """The RBLN DRA plugin runs (ready) on some vm-mode node: else why not, per node, from its pod and log."""
    assert f.cluster is not None
    plugins = [f.dra_plugins[n] for n in f.cluster.vm_nodes if n in f.dra_plugins]
    if not plugins:  # its pods could not be read (RBAC): the ResourceSlices tell the rest
        return chain.add(LinkName.DRA_PLUGIN, True, ["the DRA plugin's pods were not read"])
    ready = [p for p in plugins if p.ready]
    evidence = []
    for p in plugins:
        if p.pod is None:
            evidence.append(f"{p.node}: no DRA plugin pod")
        elif p.crash_looping:
            why = (f" ({DRA_ENUMERATION_FAILED!r} in its log: it finds neither an rbln-smi NPU nor a vfio-pci one)"
                   if p.enumeration_failed else "")
            evidence.append(f"{p.node}: DRA plugin pod {p.pod} crash-looping, {p.restarts} restart(s){why}")
        else:
            evidence.append(f"{p.node}: DRA plugin pod {p.pod} " + ("ready" if p.ready else "not ready"))
    offered = {n: d for n, d in (f.cluster.dra.vfio if f.cluster.dra else {}).items() if n in f.cluster.vm_nodes}
    if ready or offered:  # slices that offer vfio NPUs were published by a plugin that ran
        return chain.add(LinkName.DRA_PLUGIN, True, evidence)
    looping = [p for p in plugins if p.crash_looping]
    if looping:
        nodes = ", ".join(p.node for p in looping)
        remedy = Remedy(text=(
            f"the RBLN DRA plugin exits at start while no NPU is bound to vfio-pci on {nodes} (state.go "
            "NewDeviceState), and starts once vfio-manager has bound them: see what vfio-manager has not done "
            "({more0})"), command=Command.own("node", "list"),
            more=(Command.own("vfio", "status", node=looping[0].node),))
        return chain.add(LinkName.DRA_PLUGIN, False, [*evidence, *_vm_node_pending(f)], remedy,
                         failure="the RBLN DRA plugin crash-loops on every vm-mode node (no NPU bound to vfio-pci "
                                 "yet)")
    return chain.add(LinkName.DRA_PLUGIN, False, [*evidence, *_vm_node_pending(f)],
                     Remedy(text="the operator deploys the DRA plugin on vm-mode nodes once draKubeletPlugin is "
                                 "enabled; see what is missing", command=Command.own("node", "list")))


def _slices(chain: _Chain, f: Facts, slices: Check) -> bool:
    """check_slices, with what the DRA plugin's state says when no vm-mode node's slices offer vfio devices."""
    if slices.ok:
        return chain.check(LinkName.SLICES, slices)
    assert f.cluster is not None
    extra = []
    remedy = slices.remedy
    failure = None
    for p in (f.dra_plugins[n] for n in f.cluster.vm_nodes if n in f.dra_plugins):
        if not p.ready:
            continue
        skipped = p.skipped_no_iommu
        if skipped:
            extra.append(f"{p.node}: the DRA plugin skipped {len(skipped)} vfio-pci NPU(s) without an IOMMU group "
                         f"({skipped[-1][:160]})")
            remedy = Remedy(text=f"the RBLN DRA plugin publishes no vfio-pci NPU without an IOMMU group (vfio.go): "
                                 f"turn the IOMMU on for {p.node} (the host checks say how)",
                            command=Command.own("preflight", hosts=True, node=p.node))
            failure = "its vm-mode nodes' NPUs have no IOMMU group, so the DRA plugin publishes none"
        elif p.started is not None and f.now is not None and (f.now - p.started).total_seconds() < 2 * DRA_RESCAN_S:
            extra.append(f"{p.node}: the DRA plugin started {int((f.now - p.started).total_seconds())}s ago; it "
                         f"publishes vfio-pci NPUs at start and rescans every {DRA_RESCAN_S}s")
            remedy = Remedy(text=f"wait {DRA_RESCAN_S}s: the RBLN DRA plugin rescans vfio-pci NPUs every "
                                 f"{DRA_RESCAN_S}s (--vfio-rescan-interval), then run this again")
        else:
            extra.append(f"{p.node}: the DRA plugin has run for over {2 * DRA_RESCAN_S}s and publishes no vfio-pci "
                         "NPU")
    extra += _vm_node_pending(f)
    return chain.add(LinkName.SLICES, False, [*slices.evidence, *extra], remedy, failure=failure)


def _skipped_devices(f: Facts) -> list[str]:
    """Warnings for vfio-pci NPUs a working DRA plugin skipped (no IOMMU group): the VM may get fewer."""
    out = []
    for p in f.dra_plugins.values():
        if p.ready and p.skipped_no_iommu:
            out.append(f"the DRA plugin on {p.node} skipped {len(p.skipped_no_iommu)} vfio-pci NPU(s) without an "
                       "IOMMU group: they are offered to no VM")
    return out


def _schedulable(chain: _Chain, f: Facts) -> bool:
    """Some node that offers the VM's NPUs carries the kubevirt.io/schedulable=true KubeVirt puts into every
    virt-launcher's nodeSelector (rblnctl.constants.KUBEVIRT_SCHEDULABLE_LABEL: virt-handler keeps it on the node
    it runs on). Nodes that offer them without it are named either way; a VM running on a node passes."""
    assert f.cluster is not None
    cluster = f.cluster
    key = C.KUBEVIRT_SCHEDULABLE_LABEL
    st = ((f.vmi if f.running else None) or {}).get("status") or {}
    if st.get("phase") == "Running" and st.get("nodeName"):
        return chain.add(LinkName.SCHEDULABLE, True, [f"runs on {st['nodeName']}"])
    if f.method == C.METHOD_DRA:
        offering = sorted(n for n in (cluster.dra.vfio if cluster.dra else {}) if n in cluster.vm_nodes)
        what = "vfio NPUs"
    else:
        offering = sorted({n for r in f.have.resources for n in cluster.advertised.get(r, [])})
        what = ", ".join(f.have.resources)
    if not offering:  # what offers them could not be read (the links before said so)
        return chain.add(LinkName.SCHEDULABLE, True, [f"no node known to offer {what}: not judged"])
    spec = D.vm_spec(f.vm) if f.vm is not None else D.vmi_spec(f.vmi or {})
    placement = launcher_placement(placement_of(spec), cluster.kubevirt)
    schedulable, excluded = [], []
    for name in offering:
        why = not_schedulable_for_vms(labels_of(cluster.node(name) or {}), placement)
        if why is None:
            schedulable.append(name)
        else:
            excluded.append(f"{name} offers {what} but is excluded by {why}")
    if schedulable:
        return chain.add(LinkName.SCHEDULABLE, True, [f"{key}=true on {', '.join(schedulable)}", *excluded])
    namespace = str(((cluster.kubevirt or {}).get("metadata") or {}).get("namespace") or "kubevirt")
    # virt-handler's pods: label kubevirt.io=virt-handler, placed by the KubeVirt CR's spec.workloads
    # (kubevirt/kubevirt@v1.9.0 pkg/virt-operator/resource/generate/components/daemonsets.go, apply/apps.go).
    return chain.add(LinkName.SCHEDULABLE, False, excluded, Remedy(
        text=f"virt-handler labels its node {key}=true while it runs there with its device plugins up: see whether "
             f"its pod runs and is ready on {', '.join(offering[:3])} (`kubectl -n {namespace} get pods -l "
             "kubevirt.io=virt-handler -o wide`); where it does not run, the KubeVirt CR's spec.workloads placement "
             "leaves the node out"))


def _capacity(chain: _Chain, f: Facts) -> bool:
    """Free NPUs on nodes the VM may land on (rblnctl.vm.fit: the scheduler's accounting, its own virt-launcher
    not counted).

    When no node it may land on has as many NPUs at all (allocatable, free or not), freeing some would
    never help: the remedy is to ask for fewer (or to switch a bigger node to vm mode), not to stop a VM.
    """
    assert f.cluster is not None
    ref = f.ref
    vmi = f.vmi if f.running else None
    if vmi is not None and (vmi.get("status") or {}).get("nodeName") and \
            (vmi.get("status") or {}).get("phase") == "Running":
        node = vmi["status"]["nodeName"]
        return chain.add(LinkName.CAPACITY, True, [f"runs on {node}, which holds its NPUs"])
    evidence: list[str] = []
    ok = True
    never: list[tuple[str, int, int, str]] = []  # (resource, wanted, the most any allowed node has, that node)
    for resource in f.have.resources:
        fit = f.fits.get(resource)
        if fit is None:
            continue
        wanted = fit.npus
        for row in fit.nodes:
            if row.allocatable <= 0:
                continue  # not a vm-mode node that advertises it
            if not row.eligible:
                evidence.append(f"{row.node}: {row.reason}")
                continue
            if row.free is None:
                evidence.append(f"{row.node}: {row.allocatable} {resource} allocatable, {row.reason}")
                continue
            holders = f" ({', '.join(row.holders[:3])}{' ...' if len(row.holders) > 3 else ''})" if row.holders \
                else ""
            evidence.append(f"{row.node}: {row.allocatable} {resource} allocatable, {row.allocated} in use{holders}, "
                            f"{row.free} free")
        if fit.shared_with:  # not counted above (rblnctl.vm.fit: a name both plugins advertise); the warning says why
            evidence.append(f"not counted: container-mode {', '.join(fit.shared_with[:3])}"
                            f"{' ...' if len(fit.shared_with) > 3 else ''} also advertise {resource}")
        if not fit.fits:
            if fit.known:
                ok = False
                evidence.insert(0, f"no node the VM may run on ({fit.placement.describe()}) has {wanted} free "
                                f"{resource}")
            else:  # what holds them could not be read: not judged (the scheduler's event will say)
                evidence.insert(0, f"cannot tell whether {wanted} {resource} are free: {'; '.join(fit.notes)}")
            most = fit.most
            if most is not None and fit.never:
                never.append((resource, wanted, *most))
        else:
            evidence.insert(0, f"{wanted} {resource} fit on {', '.join(n.node for n in fit.nodes if n.fits)}")
    if never:
        resource, wanted, largest, node = never[0]
        evidence.insert(0, f"{wanted} {resource} never fit: no node the VM may run on has that many at all (the most "
                        f"is {largest}, on {node})")
        command = _attach(ref, npus=str(largest)) if len(f.have.resources) == 1 \
            and largest > 0 else None
        return chain.add(LinkName.CAPACITY, False, evidence, Remedy(
            text=f"ask for at most {largest} NPU(s) (freeing NPUs would not help), or switch a node with {wanted} "
                 f"{resource} to vm mode", command=command),
            failure=f"no node it may run on has {wanted} {resource}, free or not")
    return chain.add(LinkName.CAPACITY, ok, evidence, Remedy(
        text="free NPUs on a node the VM may run on (stop a VM that holds them), widen the VM's nodeSelector, "
             "affinity or tolerations, or switch another node to vm mode; the VMs that hold NPUs",
        command=LIST_VMS))


def _attach(ref: VmRef, **options: Any) -> Command:
    """`vm attach` of this VM with `options`."""
    return Command.own("vm", "attach", ref.name, again=False, namespace=ref.namespace, **options)


def _creation_remedy(ref: VmRef, text: str) -> Remedy:
    """The fix a KubeVirt refusal to create or render names (gates, permitted devices), else `describe`."""
    m = re.search(r"HostDevice (\S+) is not permitted", text)
    if m:
        return Remedy(text=f"permit {m.group(1)}",
                      command=Command.own("kubevirt", "permit-devices", resource_name=m.group(1)))
    if re.search(r"DRA enabled HostDevices but feature gate is not enabled", text, re.I):
        return Remedy(text="enable the DRA host devices gate",
                      command=Command.own("kubevirt", "enable-gates", dra=True))
    if re.search(r"Host ?Devices feature gate is not enabled", text, re.I):
        return Remedy(text="enable the HostDevices gate", command=Command.own("kubevirt", "enable-gates"))
    return Remedy(text=f"see `kubectl describe vm {ref.name} -n {ref.namespace}`")


def _instance(chain: _Chain, f: Facts) -> bool:
    ref, vm = f.ref, f.vm
    vmi = f.vmi if f.running else None
    pod = f.pod
    start = Remedy(text="start it and wait until its NPUs are attached",
                   command=Command.own("vm", "start", ref.name, namespace=ref.namespace, wait=True))
    if vmi is None:
        st = (vm or {}).get("status") or {}
        status = st.get("printableStatus") or "Stopped"
        strategy = run_strategy(vm or {})
        failures = [c for c in st.get("conditions") or [] if c.get("type") == "Failure" and c.get("status") == "True"]
        should_run = strategy in ("Always", "RerunOnFailure") or status not in ("Stopped", "Stopping")
        if not should_run:
            return chain.add(LinkName.INSTANCE, False, [f"no running VMI: the VM is {status}, so nothing holds NPUs"],
                             start)
        # It should run and has no VMI: KubeVirt says why in the VM's status (kubevirt/kubevirt@v1.9.0
        # pkg/virt-controller/watch/vm/vm.go processFailureCondition: condition Failure, reason FailedCreate...;
        # printableStatus ErrorUnschedulable, CrashLoopBackOff...), not "Stopped".
        msgs = [f"{c.get('type')} {c.get('reason') or ''}: {c.get('message') or ''}".strip() for c in failures]
        evidence = [f"runStrategy {strategy} but no VMI: the VM is {status}", *msgs]
        if not msgs and status in ("Starting", "Provisioning", "WaitingForVolumeBinding"):
            return chain.add(LinkName.INSTANCE, False, evidence + ["KubeVirt is still creating its VMI"],
                             Remedy(text="wait, then run this again"), failure="its VMI is still being created")
        reason = failures[0].get("reason") if failures else status
        return chain.add(LinkName.INSTANCE, False, evidence, _creation_remedy(ref, " ".join(msgs)),
                         failure=f"KubeVirt did not create its VMI ({reason})")
    st = vmi.get("status") or {}
    phase = st.get("phase") or "Pending"
    failing = [c for c in st.get("conditions") or [] if c.get("status") == "False" and c.get("type") != "Ready"]
    if pod is None and f.pod_refused and phase in ("", "Pending", "Scheduling"):  # unknown, not "no pod"
        return chain.add(LinkName.INSTANCE, False, [f"VMI {ref} is {phase}", f.pod_refused],
                         Remedy(text=f"grant `list` on pods in namespace {ref.namespace} to this user (check with "
                                     f"`kubectl auth can-i list pods -n {ref.namespace}`), then run this again"),
                         failure="its virt-launcher pod cannot be read (forbidden)")
    if pod is None and phase in ("", "Pending", "Scheduling"):
        msgs = [f"{c.get('type')} {c.get('reason') or ''}: {c.get('message') or ''}".strip() for c in failing]
        evidence = [f"VMI {ref} is {phase} and KubeVirt made no virt-launcher pod for it", *msgs]
        remedy = _creation_remedy(ref, " ".join(msgs))
        if remedy.command is None:
            remedy = Remedy(text=f"see `kubectl describe vmi {ref.name} -n {ref.namespace}`")
        return chain.add(LinkName.INSTANCE, False, evidence, remedy,
                         failure="KubeVirt made no virt-launcher pod for its VMI")
    if phase == "Failed":
        return chain.add(LinkName.INSTANCE, False, [f"VMI {ref} failed"], start, failure="its VMI failed")
    where = f" on {st.get('nodeName')}" if st.get("nodeName") else ""
    return chain.add(LinkName.INSTANCE, True, [f"VMI {ref} is {phase}{where}"
                                               + (f"; virt-launcher pod {pod['metadata']['name']}" if pod else "")])


def _claims(chain: _Chain, f: Facts) -> bool:
    """The NPU claims of the virt-launcher pod are allocated (pod.status.resourceClaimStatuses names them)."""
    ref = f.ref
    evidence: list[str] = []
    ok = True
    for claim, (name, obj) in f.claims.items():
        if not name:
            ok = False
            evidence.append(f"no ResourceClaim made for {claim} yet (the virt-launcher pod's status names none)")
            continue
        if obj is None:
            ok = False
            evidence.append(f"ResourceClaim {ref.namespace}/{name} ({claim}) does not exist")
            continue
        results = (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        if not (obj.get("status") or {}).get("allocation"):
            ok = False
            evidence.append(f"ResourceClaim {ref.namespace}/{name} ({claim}) is not allocated")
            continue
        got = ", ".join(f"{r.get('request')}={r.get('pool')}/{r.get('device')}" for r in results)
        evidence.append(f"ResourceClaim {ref.namespace}/{name} ({claim}) allocated: {got or 'no devices'}")
    remedy = Remedy(text="the scheduler allocates a claim when a vm-mode node has enough free vfio NPUs: free one "
                         "(stop a VM that holds them) or switch another node to vm mode; the VMs that hold NPUs",
                    command=LIST_VMS)
    if not ok and f.pod is not None:
        failure = _failed_scheduling(f.pod_events)
        if failure:
            evidence.append(f"scheduler: {failure.message}")
    fit = f.fits.get(None)
    if not ok and fit is not None:
        evidence += [f"{n.node}: {n.reason or f'{n.free} free of {n.allocatable}'}" for n in fit.nodes
                     if n.allocatable > 0]
        tainted = [n for n in fit.nodes if n.eligible and n.tainted and n.free is not None
                   and n.free < fit.npus <= n.free + len(n.tainted)]
        if tainted and not fit.fits:  # untainted, they would do
            remedy = Remedy(text=(
                f"a device taint keeps vfio NPUs on {', '.join(n.node for n in tainted)} from its claim "
                "(ResourceSlice spec.devices[].taints, NoSchedule/NoExecute): clear the device's fault (its driver "
                "removes the taint) or, if the VM may use such a device, tolerate the taint in its "
                "ResourceClaimTemplate's requests (`tolerations`); the VMs that hold NPUs"), command=LIST_VMS)
    return chain.add(LinkName.CLAIM, ok, evidence, remedy)


def _failed_scheduling(events: Sequence[dict]) -> SchedulingFailure | None:
    """The newest FailedScheduling event among the pod's events, parsed (None: none)."""
    failed = [e for e in events if e.get("reason") == "FailedScheduling"]
    return parse_failed_scheduling(str(failed[-1].get("message") or "")) if failed else None


def _scheduling(chain: _Chain, f: Facts) -> bool:
    assert f.cluster is not None and f.vmi is not None
    ref, vmi, pod, cluster = f.ref, f.vmi, f.pod, f.cluster
    if pod is None:
        node = (vmi.get("status") or {}).get("nodeName")
        return chain.add(LinkName.SCHEDULING, bool(node), [f"VMI placed on {node}" if node else
                                                           f.pod_refused or "no virt-launcher pod found"],
                         failure="its VMI is on no node and has no virt-launcher pod")
    conds = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    node = (pod.get("spec") or {}).get("nodeName")
    scheduled = conds.get("PodScheduled") or {}
    if node or scheduled.get("status") == "True":
        return chain.add(LinkName.SCHEDULING, True, [f"virt-launcher pod {pod['metadata']['name']} is on {node}"])
    failure = _failed_scheduling(f.pod_events)
    evidence = [f"virt-launcher pod {pod['metadata']['name']} is Pending, not scheduled"]
    if failure is None:
        message = scheduled.get("message")
        if message:
            failure = parse_failed_scheduling(str(message))
    remedy = Remedy(text=f"see `kubectl describe pod {pod['metadata']['name']} -n {ref.namespace}`")
    if failure is not None:
        total = f" of {failure.total}" if failure.total is not None else ""
        evidence.append(f"FailedScheduling: {failure.available if failure.available is not None else '?'}"
                        f"{total} nodes available")
        evidence += [f"{n} node(s): {r}" if n else r for n, r in failure.reasons]
        text = " ".join(r for _, r in failure.reasons)
        never = _never_fits(f, ref, vmi) if re.search(r"Insufficient " + re.escape(C.RESOURCE_PREFIX), text) \
            or "claim" in text.lower() else None
        if never is not None:
            evidence.append(never[0])
            remedy = never[1]
        elif re.search(r"Insufficient " + re.escape(C.RESOURCE_PREFIX), text):
            remedy = Remedy(text="every node it may run on has its NPUs in use: free NPUs (stop a VM that holds "
                            "them) or switch another node to vm mode; the VMs that hold NPUs", command=LIST_VMS)
        elif "claim" in text.lower():
            remedy = Remedy(text="no vm-mode node can allocate its ResourceClaim: free a vfio NPU or switch another "
                            "node to vm mode; the VMs that hold NPUs", command=LIST_VMS)
        elif "affinity" in text or "selector" in text:
            remedy = Remedy(text="no node matches the VM's nodeSelector or affinity: widen them, or switch a node "
                            "that matches to vm mode")
        elif "taint" in text:
            remedy = Remedy(text="the NPU nodes carry taints the VM does not tolerate: add tolerations to the VM")
        elif not cluster.vm_nodes:
            remedy = set_mode_remedy(cluster)
    return chain.add(LinkName.SCHEDULING, False, evidence, remedy)


# The RBLN DRA driver's refusal of a second claim of one name on a node (kubevirt_metadata.go), as kubelet
# reports it on the pod (event FailedPrepareDynamicResources).
_SAME_NAME = "another claim with the same name is prepared on this node"


def _claim_name(chain: _Chain, f: Facts, node: str) -> bool:
    """No other running VMI on the VM's node holds a DRA claim under the same per-node key (docs/vm.md)."""
    ref = f.ref
    here = [n for n in f.neighbours if n.node and n.node == node]
    refused = [e for e in f.pod_events if _SAME_NAME in str(e.get("message") or "")]
    if not here and not refused:
        own = D.claim_name(ref.namespace, ref.name)
        names = sorted({str(d.claim) for d in f.have.dra if d.managed})
        return chain.add(LinkName.CLAIM_NAME, True, [f"no other VM on {node} has a claim named "
                                                     f"{', '.join(names) or own}"])
    evidence = [f"VM {n.vm} on {n.node} holds a claim under {n.key} too" for n in here]
    evidence += [f"event {e.get('reason')}: {one_line(e.get('message') or '')[:300]}"
                 for e in refused[-1:]]
    evidence.append("the RBLN DRA driver keys a claim's per-node metadata by its pod-level name and prepares one "
                    "claim of a name per node (RBLN-SW/rbln-k8s-dra-driver cmd/npu-kubelet-plugin/"
                    "kubevirt_metadata.go)")
    return chain.add(LinkName.CLAIM_NAME, False, evidence, Remedy(
        text="give this VM its own claim name (rbln-npu-<hash>, docs/vm.md: Claim names)",
        command=_attach(ref, restart=True)))


def _shared_claim_names(f: Facts) -> list[str | Remedy]:
    """A warning when VMs elsewhere share a claim name with this one: on one node, one of them would not start."""
    elsewhere = sorted({str(n.vm) for n in f.neighbours})
    if not elsewhere:
        return []
    return [Remedy(f"VM {f.ref} shares a DRA claim name with {', '.join(elsewhere[:5])} on other nodes: on one node, "
                   "one of them could not start; {command} gives it its own", _attach(f.ref, restart=True))]


def _never_fits(f: Facts, ref: VmRef, vmi: dict) -> tuple[str, Remedy] | None:
    """When the VMI asks more NPUs of one kind than any node it may land on has at all: the evidence and the
    remedy (ask for fewer), since freeing NPUs would never make it fit (rblnctl.vm.fit: VmFit.most)."""
    held = D.npus_of(D.vmi_spec(vmi), npu_claim=lambda _c: True)
    wanted: dict[str | None, int] = {}
    for d in held.devices:
        key = d.resource if d.method == C.METHOD_SANDBOX else None
        wanted[key] = wanted.get(key, 0) + 1
    for resource, n in wanted.items():
        fit = f.fits.get(resource)
        most = fit.most if fit is not None else None
        if most is not None and n > most[0]:
            what = resource or "vfio NPUs"
            return (f"{n} {what} never fit: no vm-passthrough node has that many at all (the most is {most[0]}, on "
                    f"{most[1]})",
                    Remedy(text=f"ask for at most {most[0]} NPU(s) (freeing NPUs would not help), or switch a node "
                                f"with {n} to vm mode; then restart the VM",
                           command=_attach(ref, npus=str(most[0]), restart=True)
                           if len(wanted) == 1 else None))
    return None


def _node_components(chain: _Chain, f: Facts, node_name: str) -> bool:
    assert f.cluster is not None
    cluster = f.cluster
    node = cluster.node(node_name)
    if node is None:
        return chain.add(LinkName.NODE, False, [f"{node_name} is not an NPU node"],
                         Remedy(text="the VM runs on a node without NPUs: fix its nodeSelector"),
                         failure=f"its node {node_name} has no NPUs")
    mode = mode_of(labels_of(node), cluster.policy)
    if mode.effective != C.MODE_VM:
        return chain.add(LinkName.NODE, False, [f"{node_name} is in {mode.effective} mode"],
                         Remedy(text=f"switch {node_name} to vm mode",
                                command=Command.own("node", "set-mode", "vm", node_name)),
                         failure=f"its node {node_name} is in {mode.effective} mode")
    missing = list(f.pending.get(node_name, ()))
    if missing and cluster.policy is None:
        # Nothing converges a node without an RBLNClusterPolicy: the operator is not installed (its chart renders
        # one) or the policy was deleted; "still converging" would send the user to watch for nothing.
        return chain.add(LinkName.NODE, False, [f"{node_name}: {m}" for m in missing[:5]],
                         install_remedy("no RBLNClusterPolicy: the RBLN NPU Operator is not installed (its chart "
                                        "renders the policy), so nothing runs its components; install it: {command}"),
                         failure="no RBLNClusterPolicy: nothing runs the operator's components on its node")
    if missing:
        return chain.add(LinkName.NODE, False, [f"{node_name}: {m}" for m in missing[:5]],
                         Remedy(text="the operator has not finished converging the node on vm mode (a stuck "
                                f"component: `kubectl -n {cluster.operator.namespace} describe pod`); watch it",
                                command=Command.own("node", "list")))
    alloc = ((node.get("status") or {}).get("allocatable") or {})
    what = ", ".join(f"{k}={v}" for k, v in sorted(alloc.items()) if R.is_npu_resource(k)) or "no NPU resources"
    return chain.add(LinkName.NODE, True, [f"{node_name}: vm mode, operator components ready ({what})"])


def _ready(chain: _Chain, ref: VmRef, vmi: dict, held: VmNpus | None) -> bool:
    st = vmi.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    if st.get("phase") == "Running" and ready:
        devices = ", ".join(d.name for d in held.devices) if held else ""
        return chain.add(LinkName.READY, True, [f"VMI {ref} Running and Ready on {st.get('nodeName')}"
                                                + (f" with {devices}" if devices else "")])
    why = [f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
           for c in st.get("conditions") or [] if c.get("status") == "False"]
    return chain.add(LinkName.READY, False, [f"VMI {ref} is {st.get('phase') or 'Pending'}, not Ready", *why],
                     Remedy(text=f"see `kubectl describe vmi {ref.name} -n {ref.namespace}`"))
