"""KubeVirt's aggregated API ``subresources.kubevirt.io/v1`` (virt-api), and an optional
virt-controller that makes VirtualMachineInstances follow their VirtualMachine.

``PUT /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachines/NAME/{start,stop,restart}``
(body optional: Start/Stop/RestartOptions, ``dryRun`` honoured) answer 202 with an empty body, as
pkg/virt-api/rest/lifecycle.go does. Routes are chosen as go-restful chooses them (github.com/emicklei/go-restful/v3
jsr311.go detectRoute, as vendored by kubevirt/kubevirt@v1.9.0): path, then method, then Accept, each failure
plain text, not a Status (measured on v1.9.0 through kube-apiserver's aggregator): ``404: Page Not Found`` for a
path no route has, ``405: Method Not Allowed`` (``Allow: PUT``), and, because these routes declare no
``Produces`` (pkg/virt-api/api.go), ``406: Not Acceptable\n\nAvailable representations: `` to an Accept header
without ``*/*`` (route.go matchesAccept; an absent Accept counts as ``*/*``), before the VM is even looked up.
Then the handler, with its 404 (``virtualmachine.kubevirt.io "NAME" not found``)
and 409s (``VM is already running``, ``VM is not running``, ``Always does not support manual
start requests``, ``RerunOnFailure does not support starting VM from failed state``...). ``start``/``stop``
on a VM whose run strategy is Always or Halted set ``spec.runStrategy`` (or ``spec.running`` when the VM
uses it); Manual and RerunOnFailure VMs, and ``restart``, get ``status.stateChangeRequests`` as virt-api
writes them (a start after a finished VMI: a Stop of it, then a Start). The group is served
(discovery: name and namespaced only, as virt-api lists it) while ``virtualmachines.kubevirt.io`` is.

With ``simulate=True`` (``FakeApiServer(simulate_kubevirt=True)``) a VM a client creates (a POST, as kubectl apply;
not one a test seeds with ``FakeApiServer.add`` or the harness's client, which stands for a VM virt-controller
has already handled) is started when its run strategy runs it (Always, RerunOnFailure, Once), else shown
``printableStatus: Stopped`` (v1.9.0 pkg/virt-controller/watch/vm/vm.go syncRunStrategy). A VM whose run strategy
changes to Halted loses its VMI (same name) and shows ``printableStatus: Stopped``, ``ready: false`` (and, in a
write of its own 50 ms later, as virt-controller's writes follow a stop, ``created: false``); one
that changes to Always gets a VMI (phase Running on the node named by the VM annotation
``fake.rblnctl.io/node``, else Scheduling with no node) and ``printableStatus: Running`` and
``ready: true`` (``Starting``/false while Scheduling), ``status.runStrategy`` following the spec; a
change to Manual leaves the VMI as it is.
State change requests are carried out and cleared; deleting a VM deletes its VMI (garbage
collection). Without it nothing reacts: the test observes the VM object.

While a VMI it started runs, a change of the VM's template in a field virt-controller cannot update live (anything
but CPU sockets, guest memory, nodeSelector, affinity and tolerations: v1.9.0 pkg/virt-controller/watch/vm/vm.go
syncRestartRequired under the default LiveUpdate rollout) sets the VM condition ``RestartRequired`` exactly as the
real one writes it (status True, no reason, ``lastProbeTime: null``, the message below, measured on the real stack);
putting the template back, stopping the VMI or starting a new one removes it. The spec a VMI started from is kept
as virt-controller keeps it in a ControllerRevision: a VMI a test seeds by hand has none, so (as for real) it never
gets the condition.

A VMI started on a node gets its virt-launcher pod there, as virt-controller renders it
(kubevirt/kubevirt@v1.9.0 pkg/virt-controller/services/template.go podLabels, renderresources.go):
labels ``kubevirt.io=virt-launcher``, ``kubevirt.io/created-by=<VMI uid>``, ``vm.kubevirt.io/name``,
a controller ownerReference to the VMI, the nodeSelector ``kubevirt.io/schedulable=true`` merged with the VMI's
(nodeselectorrenderer.go), one request and limit per sandbox host device
(``deviceName``), for each DRA host device a compute-container ``resources.claims`` entry (its claimName and
requestName: renderresources.go WithHostDevicesDRA), and the VMI's ``resourceClaims`` as pod claims
(template.go: every one of them), each made into a
ResourceClaim owned by the pod and allocated (as the scheduler would) from the free devices of the node's
ResourceSlices, a device whose NoSchedule/NoExecute taint the request does not tolerate left alone (the
scheduler's allocator_stable.go taintPreventsAllocation): ``status.resourceClaimStatuses`` names it. No
scheduler runs: the pod goes to the node the VM's annotation names whatever its labels.
``launcher_delay_s`` keeps the pod Pending (and the VM not ready) that long first, and makes a stop take that
long too: the VMI is marked for deletion (the VM ``Stopping``), then goes with its pod and claims (a start asked
meanwhile follows it), and the VM says ``Stopped`` in a write of its own 50 ms later, as virt-controller writes it
once it sees the VMI gone; state change requests (restart) wait half as long before they are carried out. Without
it, stopping deletes the pod and its claims with the VMI at once.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

from tests.fakes.apiserver.config import VM_NODE_ANNOTATION
from tests.fakes.apiserver.discovery import ExtraGroup
from tests.fakes.apiserver.errors import GroupResource, PlainError, conflict, internal_error, not_found
from tests.fakes.apiserver.meta import ts
from tests.fakes.apiserver.store import Event, Store

GROUP = "subresources.kubevirt.io"
VM_ID = "virtualmachines.kubevirt.io"
VMI_ID = "virtualmachineinstances.kubevirt.io"
_VM = GroupResource("kubevirt.io", "virtualmachine")  # v1.Resource("virtualmachine") in virt-api
_PREFIX = f"/apis/{GROUP}/v1/namespaces/"
_PATH = re.compile(r"/apis/subresources\.kubevirt\.io/v1/namespaces/([^/]+)/virtualmachines/([^/]+)/([^/]+)/?")
_ACTIONS = ("start", "stop", "restart")
# virt-api's refusal of a start (ManualRecoveryRequired) and a restart (VolumesChange) while a VM's volumes are
# inconsistent (kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/subresource.go volumeMigrationManualRecoveryRequiredErr).
RECOVERY_REQUIRED = ("VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent "
                     "targets; manual intervention is needed to reassign them to their original volumes.")


def _condition_true(vm: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (vm.get("status") or {}).get("conditions") or [])
# go-restful's answers when no route fits (measured on virt-api v1.9.0; jsr311.go detectRoute, container.go)
PAGE_NOT_FOUND = "404: Page Not Found"
METHOD_NOT_ALLOWED = "405: Method Not Allowed"
NOT_ACCEPTABLE = "406: Not Acceptable\n\nAvailable representations: "
_RUNNING = ("Always", "RerunOnFailure", "Once")
RESTART_REQUIRED = "RestartRequired"
VM_GENERATION_ANNOTATION = "kubevirt.io/vm-generation"  # the VM generation a VMI started from (v1.9.0 types.go)
RESTART_REQUIRED_MESSAGE = "a non-live-updatable field was changed in the template spec"  # setRestartRequired's words


# ---- virt-operator's KubeVirt-CR update webhook: its warnings -------------------------------------------------
#
# kubevirt/kubevirt@v1.9.0 pkg/virt-operator/webhooks/kubevirt-update-admitter.go: when the gate lists changed
# (featureGatesChanged: featureGates or disabledFeatureGates differ, in order; no developerConfiguration before and
# one now), one warning per gate in featureGates that is registered with a message (warnDeprecatedFeatureGates:
# featuregate.FeatureGateInfo(gate).Message; Alpha and Beta gates have none, an empty warning kube-apiserver drops);
# then, on every update, the deprecated mediatedDevicesTypes fields and the ppc64le architecture. The messages are
# pkg/virt-config/featuregate/inactive.go init()'s: GA gates get feature-gates.go WarningPattern, the deprecated and
# discontinued ones their own text. Checked against the real webhook (../shared/kubevirt, kubectl and raw replies).
KUBEVIRT_ID = "kubevirts.kubevirt.io"
_GA_PATTERN = ('feature gate {} is deprecated (feature state is "General Availability"), therefore it can be safely '
               "removed and is redundant. For more info, please look at: "
               "https://github.com/kubevirt/kubevirt/blob/main/docs/deprecation.md")
GA_GATES = (
    "LiveMigration", "SRIOVLiveMigration", "NonRoot", "PSA", "CPUNodeDiscovery", "NUMA",
    "CommonInstancetypesDeploymentGate", "GPU", "HotplugNICs", "BochsDisplayForEFIGuests", "VMLiveUpdateFeatures",
    "NetworkBindingPlugins", "DynamicPodInterfaceNaming", "VolumesUpdateStrategy", "VolumeMigration",
    "DisableCustomSELinuxPolicy", "AutoResourceLimitsGate", "ClusterProfiler", "VMPersistentState", "VMExport",
    "PersistentReservation", "InstancetypeReferencePolicy", "EnableVirtioFsConfigVolumes", "ExpandDisks",
    "PanicDevices", "LiveUpdateNADRef", "VideoConfig", "SecureExecution", "MigrationPriorityQueue",
)
GATE_WARNINGS: dict[str, str] = {
    **{g: _GA_PATTERN.format(g) for g in GA_GATES},
    "DockerSELinuxMCSWorkaround": "DockerSELinuxMCSWorkaround has been deprecated since v1.4.",
    "MultiArchitecture": "MultiArchitecture has been deprecated since v1.8.0",
    "DisableMDEVConfiguration": "DisableMDEVConfiguration has been deprecated since v1.8.0",
    "HotplugVolumes": "HotplugVolumes has been deprecated since v1.9.0 and has been replaced by "
                      "DeclarativeHotplugVolumes",
    "ExperimentalVirtiofsSupport": "Virtiofs ExperimentalVirtiofsSupport feature gate is discontinued since v1.7. "
                                   "Please use EnableVirtioFsConfigVolumes or EnableVirtioFsPVC feature gates instead",
    "Passt": "Passt network binding is discontinued since v1.3. Please refer to Kubevirt user guide for alternatives.",
    "Macvtap": "Macvtap network binding is discontinued since v1.3. Please refer to Kubevirt user guide for "
               "alternatives.",
    "PasstIPStackMigration": "Seamless migration with passt network binding plugin is no longer supported since "
                             "KubeVirt v1.8. Please use the passt core binding instead.",
}
_MDEV_WARNING = "{} is deprecated, use mediatedDeviceTypes"


def kubevirt_update_warnings(old: dict, new: dict) -> list[str]:
    """What virt-operator's KubeVirt-CR update webhook (v1.9.0) warns about for this update, in its order."""
    def dev(obj: dict) -> dict | None:
        value = (((obj.get("spec") or {}).get("configuration") or {}).get("developerConfiguration"))
        return value if isinstance(value, dict) else None

    out: list[str] = []
    before, after = dev(old), dev(new)
    if after is not None and (before is None or any(
            list(before.get(k) or []) != list(after.get(k) or []) for k in ("featureGates", "disabledFeatureGates"))):
        out += [GATE_WARNINGS[g] for g in after.get("featureGates") or [] if g in GATE_WARNINGS]
    config = (new.get("spec") or {}).get("configuration") or {}
    mdev = config.get("mediatedDevicesConfiguration")
    if isinstance(mdev, dict):
        where = "spec.configuration.mediatedDevicesConfiguration"
        if mdev.get("mediatedDevicesTypes") is not None:
            out.append(_MDEV_WARNING.format(f"{where}.mediatedDevicesTypes"))
        for i, node in enumerate(mdev.get("nodeMediatedDeviceTypes") or []):
            if isinstance(node, dict) and node.get("mediatedDevicesTypes") is not None:
                out.append(_MDEV_WARNING.format(f"{where}.nodeMediatedDeviceTypes[{i}].mediatedDevicesTypes"))
    if ((config.get("architectureConfiguration") or {}).get("ppc64le")) is not None:
        out.append("spec.configuration.architectureConfiguration.ppc64le is deprecated and no longer supported.")
    return out


def _blocking_taint(device: dict, tolerations: list) -> bool:
    """Whether a NoSchedule/NoExecute taint of the device is tolerated by none of the request's tolerations
    (k8s.io/dynamic-resource-allocation resourceclaim/devicetoleration.go ToleratesTaint, written out here: the
    fake does not use the code under test)."""
    def tolerated(t: dict, taint: dict) -> bool:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            return False
        if t.get("key") and t["key"] != taint.get("key"):
            return False
        op = t.get("operator") or "Equal"
        return op == "Exists" or (op == "Equal" and (t.get("value") or "") == (taint.get("value") or ""))
    return any(taint.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerated(t, taint) for t in tolerations)
               for taint in device.get("taints") or [])


def run_strategy(vm: dict) -> str:
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    return "Always" if spec.get("running") else "Halted"


def accepts_any(accept: str | None) -> bool:
    """go-restful's Route.matchesAccept for a route without Produces: only ``*/*`` (parameters ignored) matches;
    an empty Accept header is ``*/*``."""
    if not accept:
        return True
    return any(part.split(";")[0].strip() == "*/*" for part in accept.split(","))


def _final(vmi: dict | None) -> bool:
    return vmi is not None and (vmi.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _semantic(value: Any) -> Any:
    """A spec as equality.Semantic.DeepEqual compares it after decoding into Go types: an empty list is a nil one
    (k8s.io/apimachinery third_party/forked/golang/reflect deep_equal.go), a null is an absent field."""
    if isinstance(value, dict):
        return {k: _semantic(v) for k, v in value.items() if v is not None and v != []}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _handler_conditions(spec: dict) -> list[dict]:
    """What virt-handler adds to a running VMI's conditions that rblnctl may meet: LiveMigratable False for one with
    host devices (v1.9.0 pkg/virt-handler/vm.go vmiContainsNonMigratablePCIHostDevices, reason
    HostDeviceNotLiveMigratable), which every VM with NPUs is."""
    if not ((spec.get("domain") or {}).get("devices") or {}).get("hostDevices"):
        return []
    return [{"type": "LiveMigratable", "status": "False", "reason": "HostDeviceNotLiveMigratable",
             "message": "VMI specifies non-migratable generic PCI host device", "lastProbeTime": None,
             "lastTransitionTime": ts()}]


class KubeVirt:
    def __init__(self, store: Store, simulate: bool = False, through_api: Any = None):
        self.store = store
        self.simulate = simulate
        # Whether the change being reacted to came from a client's request (not the test seeding the store).
        self._through_api = through_api or (lambda: False)
        self.launcher_delay_s = 0.0  # a started VMI's virt-launcher pod stays Pending this long (a stop takes as long)
        self._start_after_stop: set[tuple[str, str]] = set()  # VMs asked to start while their VMI was going
        self._started: dict[tuple[str, str], tuple[str, dict]] = {}  # (ns, VM) -> (VMI uid, the template it started)
        store.reactions.append(self._react)

    def served(self) -> bool:
        return self.store.table.get(VM_ID) is not None

    def admit_update(self, res: Any, old: dict, new: dict) -> list[str]:
        """virt-operator's validating webhook on updates of the KubeVirt CR: its warnings (kubevirt_update_warnings)."""
        return kubevirt_update_warnings(old, new) if res.id == KUBEVIRT_ID else []

    def discovery_groups(self) -> list[ExtraGroup]:
        if not self.served():
            return []
        return [(GROUP, "v1", [{"name": f"virtualmachines/{a}", "singularName": "", "namespaced": True, "kind": "",
                                "verbs": None} for a in _ACTIONS])]

    # ---- virt-api --------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: Any, accept: str | None = None) -> tuple[int, bytes] | None:
        """The answer to a subresources.kubevirt.io request, or None when ``path`` is not one."""
        if not path.startswith(_PREFIX):
            return None
        m = _PATH.fullmatch(path)
        if not self.served() or m is None or m.group(3) not in _ACTIONS:
            raise PlainError(404, PAGE_NOT_FOUND)
        if method != "PUT":
            raise PlainError(405, METHOD_NOT_ALLOWED, {"Allow": "PUT"})
        if not accepts_any(accept):
            raise PlainError(406, NOT_ACCEPTABLE)
        ns, name, action = m.groups()
        options = body if isinstance(body, dict) else {}
        vm = self.store.get("VirtualMachine", name, ns)
        if vm is None:
            raise not_found(_VM, name)
        vmi = self.store.get("VirtualMachineInstance", name, ns)
        getattr(self, f"_{action}")(vm, vmi, "All" in (options.get("dryRun") or []), options)
        return 202, b""

    def _start(self, vm: dict, vmi: dict | None, dry_run: bool, options: dict) -> None:
        name, rs = vm["metadata"]["name"], run_strategy(vm)
        if vmi is not None and not _final(vmi) and (vmi.get("status") or {}).get("phase") not in (None, "", "Unknown"):
            raise conflict(_VM, name, "VM is already running")
        if _condition_true(vm, "ManualRecoveryRequired"):  # v1.9.0 StartVMRequestHandler, after "already running"
            raise conflict(_VM, name, RECOVERY_REQUIRED)
        if rs == "Halted":
            self._set_running(vm, True, dry_run)
        elif rs in ("RerunOnFailure", "Manual"):
            phase = (vmi or {}).get("status", {}).get("phase")
            if rs == "RerunOnFailure" and phase == "Failed":
                raise conflict(_VM, name, "RerunOnFailure does not support starting VM from failed state")
            if vmi is not None and (phase == "Succeeded" or (rs == "Manual" and _final(vmi))):
                # needsRestart: the finished VMI is stopped first
                self._request(vm, [{"action": "Stop", "uid": vmi["metadata"].get("uid")}, {"action": "Start"}],
                              dry_run)
            else:
                self._request(vm, [{"action": "Start"}], dry_run)
        else:
            raise conflict(_VM, name, f"{rs} does not support manual start requests")

    def _stop(self, vm: dict, vmi: dict | None, dry_run: bool, options: dict) -> None:
        name, rs = vm["metadata"]["name"], run_strategy(vm)
        if rs in ("Always", "Once"):
            self._set_running(vm, False, dry_run)
            return
        if vmi is None or _final(vmi):
            raise conflict(_VM, name, "VM is not running")
        if rs == "Halted" and options.get("gracePeriod") is None:
            raise conflict(_VM, name, "Halted only supports manual stop requests with a shorter graceperiod")
        self._request(vm, [{"action": "Stop", "uid": vmi["metadata"].get("uid")}], dry_run)

    def _restart(self, vm: dict, vmi: dict | None, dry_run: bool, options: dict) -> None:
        name, rs = vm["metadata"]["name"], run_strategy(vm)
        if _condition_true(vm, "VolumesChange"):  # v1.9.0 RestartVMRequestHandler: before the runStrategy
            raise conflict(_VM, name, RECOVERY_REQUIRED)
        if rs in ("Halted", "Once"):
            raise conflict(_VM, name, f"RunStategy {rs} does not support manual restart requests")  # sic
        if vmi is None:
            raise conflict(_VM, name, "VM is not running: Halted")
        self._request(vm, [{"action": "Stop", "uid": vmi["metadata"].get("uid")}, {"action": "Start"}], dry_run)

    def _set_running(self, vm: dict, running: bool, dry_run: bool) -> None:
        if dry_run:
            return

        def edit(v: dict) -> None:
            if "runStrategy" in (v.get("spec") or {}) or "running" not in (v.get("spec") or {}):
                v.setdefault("spec", {})["runStrategy"] = "Always" if running else "Halted"
            else:
                v["spec"]["running"] = running

        self.store.mutate("VirtualMachine", vm["metadata"]["name"], vm["metadata"]["namespace"], edit)

    def _request(self, vm: dict, changes: list[dict], dry_run: bool) -> None:
        """getChangeRequestJson: add the requests; a lone Stop replaces pending ones, others conflict."""
        pending = (vm.get("status") or {}).get("stateChangeRequests") or []
        if pending and not (len(changes) == 1 and changes[0]["action"] == "Stop"):
            raise internal_error("unable to complete request: stop/start already underway")
        if not dry_run:
            self.store.mutate("VirtualMachine", vm["metadata"]["name"], vm["metadata"]["namespace"],
                              lambda v: v.setdefault("status", {}).__setitem__("stateChangeRequests", changes))

    # ---- virt-controller (simulate=True) -----------------------------------------------------------

    def _react(self, ev: Event) -> None:
        if not self.simulate or ev.res_id != VM_ID:
            return
        try:
            self._react_to_vm(ev)
        finally:
            if ev.type == "DELETED":
                self._started.pop((ev.obj["metadata"]["namespace"], ev.obj["metadata"]["name"]), None)
            else:
                self._sync_restart_required(ev.obj["metadata"]["name"], ev.obj["metadata"]["namespace"])

    def _react_to_vm(self, ev: Event) -> None:
        md = ev.obj["metadata"]
        if ev.type == "ADDED":
            if self._through_api():
                if run_strategy(ev.obj) in _RUNNING:
                    self._start_vmi(ev.obj)
                else:
                    self._set_status(md["name"], md["namespace"], printableStatus="Stopped")
            return
        if ev.type == "DELETED":
            vmi = self.store.get("VirtualMachineInstance", md["name"], md["namespace"])
            if vmi is not None:
                self._delete_launchers(vmi)
                self.store.delete_now("VirtualMachineInstance", md["name"], md["namespace"])
            return
        requests = (ev.obj.get("status") or {}).get("stateChangeRequests") or []
        if requests:
            if self.launcher_delay_s > 0:  # a slow virt-controller: the VM shows the request a while first
                if (ev.old or {}).get("status", {}).get("stateChangeRequests") != requests:
                    self.store.schedule(self.launcher_delay_s / 2, self._carry_out, md["name"], md["namespace"])
            else:
                self._carry_out(md["name"], md["namespace"])
        elif ev.type == "MODIFIED" and ev.old is not None and run_strategy(ev.obj) != "Manual":
            # Manual: the controller starts or stops the VMI only on a state change request (v1.9.0
            # pkg/virt-controller/watch/vm/vm.go syncRunStrategy), so a VM changed to Manual keeps what it has.
            running = run_strategy(ev.obj) in _RUNNING
            if running != (run_strategy(ev.old) in _RUNNING):
                if running:
                    self._start_vmi(ev.obj)
                else:
                    self._stop_vmi(ev.obj)

    def _carry_out(self, name: str, ns: str) -> None:
        """Carry out the VM's state change requests, taken off the VM first (the writes below do not see them)."""
        vm = self.store.get("VirtualMachine", name, ns)
        requests = ((vm or {}).get("status") or {}).get("stateChangeRequests") or []
        if not requests:
            return
        self.store.mutate("VirtualMachine", name, ns, lambda v: v["status"].pop("stateChangeRequests", None))
        for r in requests:
            if r.get("action") == "Stop":
                self._stop_vmi(vm)
            else:
                self._start_vmi(vm)

    def _stop_vmi(self, vm: dict) -> None:
        name, ns = vm["metadata"]["name"], vm["metadata"]["namespace"]
        vmi = self.store.get("VirtualMachineInstance", name, ns)
        if vmi is not None and self.launcher_delay_s > 0:
            if not vmi["metadata"].get("deletionTimestamp"):
                def terminating(v: dict) -> None:  # virt-controller's finalizer holds it until the guest is down
                    v["metadata"].update(deletionTimestamp=ts(), finalizers=["foregroundDeleteVirtualMachine"])
                self.store.mutate("VirtualMachineInstance", name, ns, terminating)
                self.store.schedule(self.launcher_delay_s, self._stopped, name, ns, vmi["metadata"]["uid"])
            self._set_status(name, ns, printableStatus="Stopping", ready=False, runStrategy=run_strategy(vm))
            return
        if vmi is not None:
            self._delete_launchers(vmi)
            self.store.delete_now("VirtualMachineInstance", name, ns)
        self._set_status(name, ns, printableStatus="Stopped", ready=False, runStrategy=run_strategy(vm))
        self._settled_later(name, ns)

    def _stopped(self, name: str, ns: str, uid: str) -> None:
        """The end of a slow stop: the guest is down, its pod, claims and VMI go; a start asked meanwhile follows."""
        vmi = self.store.get("VirtualMachineInstance", name, ns)
        if vmi is not None and vmi["metadata"].get("uid") == uid:
            self._delete_launchers(vmi)
            self.store.delete_now("VirtualMachineInstance", name, ns)
        vm = self.store.get("VirtualMachine", name, ns)
        if vm is None:
            return
        if (ns, name) in self._start_after_stop:
            self._start_after_stop.discard((ns, name))
            self._start_vmi(vm)
        else:  # virt-controller sees the VMI gone, then writes the VM's status: a write of its own, a moment later
            def stopped_status() -> None:
                now = self.store.get("VirtualMachine", name, ns)
                if now is not None and self.store.get("VirtualMachineInstance", name, ns) is None:
                    self._set_status(name, ns, printableStatus="Stopped", ready=False, runStrategy=run_strategy(now))
                    self._settled_later(name, ns)
            self.store.schedule(0.05, stopped_status)

    def _settled_later(self, name: str, ns: str) -> None:
        """virt-controller's last write of a stopped VM comes after the stop was answered, in a write of its own
        (`created: false`; on the real v1.9.0, five status writes follow a stop over about a second): a client
        holding the VM's resourceVersion from before sees it change once more."""
        def settle() -> None:
            vm = self.store.get("VirtualMachine", name, ns)
            vmi = self.store.get("VirtualMachineInstance", name, ns)
            if vm is not None and vmi is None and (vm.get("status") or {}).get("created") is not False:
                self._set_status(name, ns, created=False)
        self.store.schedule(0.05, settle)

    def _start_vmi(self, vm: dict) -> None:
        name, ns = vm["metadata"]["name"], vm["metadata"]["namespace"]
        node = (vm["metadata"].get("annotations") or {}).get(VM_NODE_ANNOTATION)
        pending = bool(node) and self.launcher_delay_s > 0
        going = self.store.get("VirtualMachineInstance", name, ns)
        if going is not None and going["metadata"].get("deletionTimestamp"):
            self._start_after_stop.add((ns, name))  # started once the old VMI is gone (_stopped)
            self._set_status(name, ns, printableStatus="Starting", ready=False, runStrategy=run_strategy(vm))
            return
        if self.store.get("VirtualMachineInstance", name, ns) is None:
            tpl = (vm.get("spec") or {}).get("template") or {}
            labels = {**((tpl.get("metadata") or {}).get("labels") or {}),
                      **({"kubevirt.io/nodeName": node} if node else {})}
            running = bool(node) and not pending
            status: dict[str, Any] = {"phase": "Running" if running else "Scheduling" if not node else "Scheduled",
                                      "conditions": [{"type": "Ready", "status": "True" if running else "False",
                                                      "lastProbeTime": None, "lastTransitionTime": ts()}]}
            if running:
                status["conditions"] += _handler_conditions(tpl.get("spec") or {})
            if node:
                status["nodeName"] = node
            self.store.add({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name, "namespace": ns, "labels": labels,
                             "annotations": {VM_GENERATION_ANNOTATION: str(vm["metadata"].get("generation") or 1)},
                             "ownerReferences": [
                    {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name,
                     "uid": vm["metadata"].get("uid"), "controller": True, "blockOwnerDeletion": True}]},
                "spec": copy.deepcopy(tpl.get("spec") or {}), "status": status})
            vmi = self.store.get("VirtualMachineInstance", name, ns)
            if vmi is not None:  # startVMI: the spec it starts from (a ControllerRevision); the condition goes
                self._started[(ns, name)] = (vmi["metadata"]["uid"], copy.deepcopy(tpl.get("spec") or {}))
            if node and vmi is not None:
                self._add_launcher(vmi, node, running=not pending)
                if pending:
                    self.store.schedule(self.launcher_delay_s, self._launcher_running, name, ns,
                                        vmi["metadata"]["uid"])
        ready = bool(node) and not pending
        # syncGenerationInfo: observedGeneration is the generation the VMI started from (its annotation), kept after
        # the VMI is gone; desiredGeneration the VM's (v1.9.0 pkg/virt-controller/watch/vm/vm.go)
        vmi = self.store.get("VirtualMachineInstance", name, ns)
        started_from = int(((vmi or {}).get("metadata", {}).get("annotations") or {}).get(
            VM_GENERATION_ANNOTATION) or vm["metadata"].get("generation") or 1)
        self._set_status(name, ns, printableStatus="Running" if ready else "Starting", ready=ready, created=True,
                         runStrategy=run_strategy(vm), observedGeneration=started_from,
                         desiredGeneration=vm["metadata"].get("generation") or 1)

    # ---- the virt-launcher pod ----------------------------------------------------------------------

    def _add_launcher(self, vmi: dict, node: str, *, running: bool) -> None:
        md, spec = vmi["metadata"], vmi.get("spec") or {}
        name, ns, uid = md["name"], md["namespace"], md["uid"]
        pod_name = f"virt-launcher-{name}-{uuid.uuid4().hex[:5]}"
        pod_uid = str(uuid.uuid4())
        devices = ((spec.get("domain") or {}).get("devices") or {}).get("hostDevices") or []
        amounts: dict[str, int] = {}
        for d in devices:
            if d.get("deviceName") and not d.get("claimName"):
                amounts[d["deviceName"]] = amounts.get(d["deviceName"], 0) + 1
        resources: dict[str, Any] = {}
        if amounts:
            amount = {k: str(v) for k, v in amounts.items()}
            resources.update(requests=dict(amount), limits=dict(amount))
        dra = [{"name": d["claimName"], "request": d.get("requestName")} for d in devices if d.get("claimName")]
        if dra:
            resources["claims"] = [{k: v for k, v in c.items() if v} for c in dra]
        claims = list(spec.get("resourceClaims") or [])
        statuses = [{"name": c["name"], "resourceClaimName": self._make_claim(ns, pod_name, pod_uid, node, c)}
                    for c in claims]
        phase = "Running" if running else "Pending"
        self.store.add({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": ns, "uid": pod_uid,
                         "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid,
                                    "vm.kubevirt.io/name": name},
                         "annotations": {"kubevirt.io/domain": name},
                         "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                              "name": name, "uid": uid, "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node, "restartPolicy": "Never", "schedulerName": "default-scheduler",
                     "nodeSelector": {"kubevirt.io/schedulable": "true", **(spec.get("nodeSelector") or {})},
                     "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                                     "resources": resources}],
                     **({"resourceClaims": [{"name": c["name"], **{k: v for k, v in c.items() if k != "name"}}
                                            for c in claims]} if claims else {})},
            "status": {"phase": phase, "qosClass": "BestEffort",
                       "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts()},
                                      {"type": "Ready", "status": "True" if running else "False",
                                       "lastTransitionTime": ts()}],
                       "containerStatuses": [{"name": "compute", "ready": running, "restartCount": 0,
                                              "image": "quay.io/kubevirt/virt-launcher:v1.9.0", "imageID": "",
                                              "state": {"running": {"startedAt": ts()}} if running else
                                              {"waiting": {"reason": "ContainerCreating"}}}],
                       **({"resourceClaimStatuses": statuses} if statuses else {})},
        })

    def _make_claim(self, ns: str, pod: str, pod_uid: str, node: str, entry: dict) -> str | None:
        """The ResourceClaim the resourceclaim controller makes for a pod's claim from its template (allocated as
        the scheduler would, from the node's free devices of the template's driver); None for a claim named
        directly (it exists already)."""
        if entry.get("resourceClaimName"):
            return entry["resourceClaimName"]
        tpl = self.store.get("ResourceClaimTemplate", str(entry.get("resourceClaimTemplateName")), ns)
        if tpl is None:
            return None
        requests = (((tpl.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
        taken = {(r.get("driver"), r.get("pool"), r.get("device")) for c in self.store.list("ResourceClaim")
                 for r in ((((c.get("status") or {}).get("allocation") or {}).get("devices") or {})
                           .get("results") or [])}
        slices = [s for s in self.store.list("ResourceSlice") if (s.get("spec") or {}).get("nodeName") == node]
        devices = [((s["spec"]["driver"], (s["spec"].get("pool") or {}).get("name"), d["name"]), d)
                   for s in slices for d in (s.get("spec") or {}).get("devices") or []]
        free = [key for key, _ in devices if key not in taken]
        name = f"{pod}-{entry['name']}-{uuid.uuid4().hex[:5]}"
        results: list[tuple[dict, tuple]] = []
        allocated = True
        for r in requests:
            tolerations = (r.get("exactly") or {}).get("tolerations") or []
            usable = [key for key, d in devices if key in free and key not in {k for _, k in results}
                      and not _blocking_taint(d, tolerations)]
            if not usable:
                allocated = False
                break
            results.append((r, usable[0]))
        claim: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"resource.kubernetes.io/pod-claim-name": entry["name"]},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy((tpl.get("spec") or {}).get("spec") or {})}
        if allocated:
            claim["status"] = {
                "allocation": {"devices": {"results": [
                    {"request": r.get("name"), "driver": d, "pool": p, "device": dev}
                    for r, (d, p, dev) in results]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}]}
        self.store.add(claim)
        return name

    def _launcher_running(self, name: str, ns: str, vmi_uid: str) -> None:
        vmi = self.store.get("VirtualMachineInstance", name, ns)
        if vmi is None or vmi["metadata"].get("uid") != vmi_uid:
            return
        for p in self._launchers(vmi):
            def run(pod: dict) -> None:
                pod["status"]["phase"] = "Running"
                for c in pod["status"]["conditions"]:
                    c["status"] = "True"
                for cs in pod["status"]["containerStatuses"]:
                    cs.update(ready=True, state={"running": {"startedAt": ts()}})
            self.store.mutate("Pod", p["metadata"]["name"], ns, run)

        def up(v: dict) -> None:
            v["status"]["phase"] = "Running"
            v["status"]["conditions"][0]["status"] = "True"
            v["status"]["conditions"] += _handler_conditions(v.get("spec") or {})
        self.store.mutate("VirtualMachineInstance", name, ns, up)
        self._set_status(name, ns, printableStatus="Running", ready=True)

    def _launchers(self, vmi: dict) -> list[dict]:
        uid = vmi["metadata"].get("uid")
        return [p for p in self.store.list("Pod", vmi["metadata"]["namespace"])
                if (p["metadata"].get("labels") or {}).get("kubevirt.io/created-by") == uid]

    def _delete_launchers(self, vmi: dict) -> None:
        for p in self._launchers(vmi):
            ns, pod_uid = p["metadata"]["namespace"], p["metadata"].get("uid")
            for c in self.store.list("ResourceClaim", ns):
                if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or []):
                    self.store.delete_now("ResourceClaim", c["metadata"]["name"], ns)
            self.store.delete_now("Pod", p["metadata"]["name"], ns)

    def _sync_restart_required(self, name: str, ns: str) -> None:
        """syncRestartRequired: the condition while a live VMI's start spec differs from the VM's template outside
        the fields updated live; none without a live VMI this controller started."""
        vm = self.store.get("VirtualMachine", name, ns)
        vmi = self.store.get("VirtualMachineInstance", name, ns)
        if vm is None:
            return
        started = self._started.get((ns, name))
        want = False
        if vmi is not None and not _final(vmi) and not vmi["metadata"].get("deletionTimestamp") and \
                started is not None and started[0] == vmi["metadata"].get("uid"):  # stopVMI drops it at the delete
            now = copy.deepcopy(((vm.get("spec") or {}).get("template") or {}).get("spec") or {})
            then = copy.deepcopy(started[1])
            for spec in (now, then):
                for key in ("nodeSelector", "affinity", "tolerations"):
                    spec.pop(key, None)
                domain = spec.get("domain") or {}
                (domain.get("cpu") or {}).pop("sockets", None)
                (domain.get("memory") or {}).pop("guest", None)
            want = _semantic(now) != _semantic(then)
        conditions = (vm.get("status") or {}).get("conditions") or []
        have = any(c.get("type") == RESTART_REQUIRED for c in conditions)
        if want == have:
            return

        def edit(v: dict) -> None:
            kept = [c for c in (v.get("status") or {}).get("conditions") or [] if c.get("type") != RESTART_REQUIRED]
            if want:
                kept.append({"lastProbeTime": None, "lastTransitionTime": ts(), "message": RESTART_REQUIRED_MESSAGE,
                             "status": "True", "type": RESTART_REQUIRED})
            v.setdefault("status", {})["conditions"] = kept
        self.store.mutate("VirtualMachine", name, ns, edit)

    def _set_status(self, name: str, ns: str, **fields: Any) -> None:
        self.store.mutate("VirtualMachine", name, ns, lambda v: v.setdefault("status", {}).update(fields))
