"""Which pods a drain evicts: small filters in kubectl's PodFilter shape (kubernetes/kubectl pkg/drain/filters.go).

Each filter looks at one pod and either has no opinion (None), leaves the pod alone (`skip`, first
such filter wins), or blocks the drain (`blocker`; every blocking filter is heard, so all reasons
are reported at once). A pod no filter stops is evicted. Drain and set-mode build their lists
from the same functions; set-mode swaps drain's VM rule for its VM guard instead of re-implementing
the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.node.options import DrainOptions
from rblnctl.node.vms import stop_vm_hint
from rblnctl.node.pods import (
    Action,
    LauncherVmis,
    NpuUse,
    PodEntry,
    controller,
    is_finished,
    is_launcher,
    is_vmi_launcher,
    npu_resources,
)
from rblnctl.operator.cluster import OperatorView
from rblnctl.operator.components import component_of_pod
from rblnctl.plan import Blocker


@dataclass(frozen=True, kw_only=True)
class PodFacts:
    """What the filters read of one pod."""

    pod: dict
    namespace: str
    name: str
    uid: str
    owner: dict | None
    vmi: str | None  # for a virt-launcher pod: the VMI it runs
    npu: str | None  # why it counts as an NPU consumer (None: it does not)
    resources: tuple[str, ...] = ()  # the NPU resources it requests (empty for a DRA claim user)
    vmis: LauncherVmis | None = None  # reads the VMI of a virt-launcher pod when a filter needs it

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A filter's opinion: leave the pod alone (`skip`, with why), or block the drain (`blocker`)."""

    skip: str | None = None
    blocker: Blocker | None = None


PodFilter = Callable[[PodFacts], Verdict | None]


def facts_of(pod: dict, npu_use: NpuUse, vmis: LauncherVmis | None = None) -> PodFacts:
    """Read what the filters need of a pod (DRA claims through `npu_use`, VMIs through `vmis`: both cached)."""
    md = pod.get("metadata") or {}
    owner = controller(pod)
    vmi = ((owner or {}).get("name") or md["name"]) if is_launcher(pod) else None
    return PodFacts(pod=pod, namespace=md.get("namespace", ""), name=md["name"], uid=md.get("uid", ""), owner=owner,
                    vmi=vmi, npu=npu_use.reason(pod), resources=tuple(npu_resources(pod)), vmis=vmis)


def finished() -> PodFilter:
    """Succeeded and Failed pods hold nothing: leave them."""
    def f(p: PodFacts) -> Verdict | None:
        return Verdict(skip=f"finished ({(p.pod.get('status') or {}).get('phase')}): nothing to do") \
            if is_finished(p.pod) else None
    return f


def mirror() -> PodFilter:
    """Static pods belong to the kubelet (kubectl skips them too)."""
    def f(p: PodFacts) -> Verdict | None:
        annotations = (p.pod.get("metadata") or {}).get("annotations") or {}
        return Verdict(skip="mirror pod: a static pod the kubelet owns") if C.MIRROR_POD_ANNOTATION in annotations \
            else None
    return f


OPERATOR_COMPONENT = "RBLN operator component"  # how a plan's reason starts for the operator's own pods


def operator_components(view: OperatorView) -> PodFilter:
    """The operator's own component pods: it replaces them when the node's mode changes."""
    def f(p: PodFacts) -> Verdict | None:
        if p.namespace != view.namespace:
            return None
        comp = component_of_pod(p.pod, base_names=view.base_names)
        return Verdict(skip=f"{OPERATOR_COMPONENT} {comp}: the operator replaces it") if comp else None
    return f


def daemonsets(*, npu_consumers_block: bool = False, evict_npu_consumers: bool = False) -> PodFilter:
    """DaemonSet pods would come straight back: never evicted (kubectl's --ignore-daemonsets).

    A mode switch cannot leave one that uses the node's NPUs (`npu_consumers_block`): the VFIO Manager
    would rebind devices the pod holds open, or wait for it forever. It blocks, naming the DaemonSet;
    with `evict_npu_consumers` it is evicted like any NPU pod (the DaemonSet recreates it at once, still on the old
    mode's resource until the relabel; the round after the switch evicts it again, and its replacement
    then waits for a resource the node no longer advertises).
    """
    def f(p: PodFacts) -> Verdict | None:
        if p.owner is None or p.owner.get("kind") != "DaemonSet":
            return None
        name = p.owner.get("name")
        if npu_consumers_block and p.npu is not None:
            if evict_npu_consumers:
                return None
            return Verdict(blocker=Blocker(
                f"{p.ref} (DaemonSet {p.namespace}/{name}) uses the node's NPUs ({p.npu}) and would come straight "
                f"back: keep DaemonSet {name} off the node during the switch (its nodeSelector or affinity), or "
                "evict it anyway", override="evict_daemonsets"))
        return Verdict(skip=f"managed by DaemonSet {name}: never evicted")
    return f


def npu_consumers_only(all_pods: bool) -> PodFilter:
    """By default only NPU consumers go (NVIDIA's driver manager does the same for GPUs)."""
    def f(p: PodFacts) -> Verdict | None:
        return Verdict(skip="uses no NPU (evicting every pod is a separate choice)") \
            if p.npu is None and not all_pods else None
    return f


def vm_launchers(evict_vms: bool) -> PodFilter:
    """A virt-launcher pod holding NPUs runs a VM that cannot live-migrate: drain refuses unless told."""
    def f(p: PodFacts) -> Verdict | None:
        if p.vmi is None or p.npu is None or evict_vms:
            return None
        return Verdict(blocker=Blocker(f"{p.ref} runs KubeVirt VM {p.namespace}/{p.vmi} holding NPUs, which cannot "
                                       f"live-migrate (its NPUs are passed through): {stop_vm_hint(p.namespace, p.vmi)}"
                                       " (evicting it stops the VM unless it can restart elsewhere)",
                                       override="evict_vms"))
    return f


def kubevirt_refuses(disable_eviction: bool) -> PodFilter:
    """A virt-launcher pod KubeVirt's eviction webhook will not let go: its VMI's eviction strategy is LiveMigrate
    while it is not live-migratable. kubevirt/kubevirt v1.9.0
    pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go admitLauncherPod denies that
    eviction (429, "VMI NAME is configured with an eviction strategy but is not live-migratable") and starts no
    migration; a VMI is migratable only with its LiveMigratable condition True (staging/src/kubevirt.io/api/core/v1/
    types.go IsMigratable), which virt-controller never sets for a VMI passing a host device through. Refused in
    the plan, before any write (cordon, record, other pods' evictions), rather than half-way through. A DELETE
    (`disable_eviction`) does not pass the eviction webhook: it stops the VM as an allowed eviction would."""
    def f(p: PodFacts) -> Verdict | None:
        if p.vmi is None or p.vmis is None or disable_eviction:
            return None
        vmi = p.vmis.get(p.namespace, p.vmi)
        if isinstance(vmi, str) or p.vmis.eviction_strategy(vmi) != C.EVICTION_LIVE_MIGRATE or migratable(vmi):
            return None
        own = bool((vmi.get("spec") or {}).get("evictionStrategy"))
        where = "its VMI's spec.evictionStrategy" if own else "the KubeVirt CR's spec.configuration.evictionStrategy"
        return Verdict(blocker=Blocker(
            f"{p.ref} runs KubeVirt VM {p.namespace}/{p.vmi}, whose eviction strategy is LiveMigrate ({where}) but "
            f"which is not live-migratable ({_not_migratable(vmi)}): KubeVirt refuses evicting it and migrates "
            f"nothing; {stop_vm_hint(p.namespace, p.vmi)}, or set its evictionStrategy to None "
            "(spec.template.spec.evictionStrategy)", override="disable_eviction"))
    return f


def migratable(vmi: dict) -> bool:
    """KubeVirt's IsMigratable: the VMI's LiveMigratable condition is True."""
    return any(c.get("type") == "LiveMigratable" and str(c.get("status")) == "True"
               for c in ((vmi.get("status") or {}).get("conditions") or []) if isinstance(c, dict))


def _not_migratable(vmi: dict) -> str:
    """What KubeVirt says about it: the LiveMigratable condition's reason, or that it has none."""
    cond = next((c for c in ((vmi.get("status") or {}).get("conditions") or [])
                 if isinstance(c, dict) and c.get("type") == "LiveMigratable"), None)
    if cond is None:
        return "it has no LiveMigratable condition"
    return f"LiveMigratable {cond.get('status')}" + (f", {cond.get('reason')}" if cond.get("reason") else "")


def vm_guard_handles_launchers(evict_vms: bool) -> PodFilter:
    """set-mode's VM rule: its VM guard refuses per VM, so a launcher holding NPUs is left to it (or, with
    `evict_vms`, goes)."""
    def f(p: PodFacts) -> Verdict | None:
        if p.vmi is None or p.npu is None or evict_vms:
            return None
        return Verdict(skip=f"runs VM {p.namespace}/{p.vmi} holding NPUs (see the VM guard)")
    return f


def emptydir(delete_emptydir_data: bool, *, vm_override: bool = False) -> PodFilter:
    """emptyDir data is lost with the pod (kubectl's --delete-emptydir-data).

    Every virt-launcher pod has emptyDirs of KubeVirt's own (C.KUBEVIRT_LAUNCHER_EMPTYDIRS): runtime
    state, not user data. Once the user said the VM may go (`vm_override`: `evict_vms`), those do not
    block; what still does is the user's data: a VMI emptyDisk (it lives in the `libvirt-runtime`
    emptyDir) or an emptyDir KubeVirt did not put there. A VM holding NPUs is judged the same way
    without the override (the VM rule already stops it, and naming KubeVirt's emptyDirs would only
    send the user after the wrong flag); a VM without NPUs (--all-pods) keeps kubectl's rule until
    the override is given. A VMI that cannot be read cannot be judged: the pod keeps its blocker.
    """
    def f(p: PodFacts) -> Verdict | None:
        volumes = (p.pod.get("spec") or {}).get("volumes") or []
        names = [str(v.get("name")) for v in volumes if "emptyDir" in v]
        if delete_emptydir_data or not names:
            return None
        why = "has emptyDir volumes whose data would be lost"
        if (vm_override or p.npu is not None) and p.vmi is not None and is_vmi_launcher(p.pod):
            user = _launcher_user_data(p, names)
            if not user:
                return None
            why = user
        return Verdict(blocker=Blocker(f"{p.ref} {why}", override="delete_emptydir_data"))
    return f


def _launcher_user_data(p: PodFacts, names: list[str]) -> str | None:
    """What user data a VMI's virt-launcher pod would lose with its emptyDirs (None: only KubeVirt's own)."""
    assert p.vmi is not None
    vmi = p.vmis.get(p.namespace, p.vmi) if p.vmis is not None else "it was not read"
    if isinstance(vmi, str):
        return (f"has emptyDir volumes, and its VMI {p.namespace}/{p.vmi} cannot be read to tell KubeVirt's own from "
                f"an emptyDisk's data ({vmi})")
    vmi_volumes = (vmi.get("spec") or {}).get("volumes") or []
    metrics = {str(v.get("name")) for v in vmi_volumes if "downwardMetrics" in v}
    foreign = [n for n in names if n not in C.KUBEVIRT_LAUNCHER_EMPTYDIRS and n not in metrics]
    disks = [str(v.get("name")) for v in vmi_volumes if "emptyDisk" in v]
    parts = []
    if disks and C.KUBEVIRT_EMPTYDISK_EMPTYDIR in names:
        parts.append(f"VMI {p.namespace}/{p.vmi} has emptyDisk volume(s) {', '.join(disks)} whose data "
                     f"(in emptyDir {C.KUBEVIRT_EMPTYDISK_EMPTYDIR}) would be lost")
    if foreign:
        parts.append(f"emptyDir volume(s) {', '.join(foreign)} that KubeVirt did not add would lose their data")
    return ("runs " + "; ".join(parts)) if parts else None


def unmanaged(force: bool) -> PodFilter:
    """A pod without a controller is not recreated anywhere (kubectl's --force)."""
    def f(p: PodFacts) -> Verdict | None:
        if force or p.owner is not None:
            return None
        return Verdict(blocker=Blocker(f"{p.ref} is not managed by a controller and would not come back",
                                       override="force"))
    return f


def new_mode_consumers(belongs_to_new_mode: Callable[[str], bool], *, claims_are_new: bool) -> PodFilter:
    """After a switch: a pod whose NPUs are all the new mode's may stay (it is the new mode's workload).

    A DRA claim user counts as the new mode's when `claims_are_new` (the DRA devices of the mode
    being switched to; pods outside VMs use container devices).
    """
    def f(p: PodFacts) -> Verdict | None:
        if p.npu is None:
            return None
        new = all(belongs_to_new_mode(r) for r in p.resources) if p.resources else claims_are_new
        return Verdict(skip="uses the new mode's NPUs") if new else None
    return f


def drain_filters(options: DrainOptions, view: OperatorView) -> list[PodFilter]:
    """`node drain`'s filters, in order."""
    return [finished(), mirror(), operator_components(view), daemonsets(), npu_consumers_only(options.all_pods),
            vm_launchers(options.evict_vms), kubevirt_refuses(options.disable_eviction),
            emptydir(options.delete_emptydir_data, vm_override=options.evict_vms), unmanaged(options.force)]


def classify(p: PodFacts, filters: Sequence[PodFilter]) -> PodEntry:
    """Run the filters over one pod: the first skip wins; otherwise every blocker counts; otherwise evict."""
    blockers: list[Blocker] = []
    for f in filters:
        v = f(p)
        if v is None:
            continue
        if v.skip is not None and not blockers:
            return PodEntry(namespace=p.namespace, name=p.name, uid=p.uid, action=Action.IGNORE, reason=v.skip,
                            npu=p.npu is not None, vmi=p.vmi)
        if v.blocker is not None:
            blockers.append(v.blocker)
    if blockers:
        return PodEntry(namespace=p.namespace, name=p.name, uid=p.uid, action=Action.IGNORE,
                        reason="blocked: " + "; ".join(b.message for b in blockers), npu=p.npu is not None,
                        vmi=p.vmi, blockers=blockers)
    reason = f"uses NPUs ({p.npu})" if p.npu is not None else "every pod"
    return PodEntry(namespace=p.namespace, name=p.name, uid=p.uid, action=Action.EVICT, reason=reason,
                    npu=p.npu is not None, vmi=p.vmi)
