"""KubeVirt's aggregated API ``subresources.kubevirt.io/v1`` (virt-api), and an optional
virt-controller that makes VirtualMachineInstances follow their VirtualMachine.

``PUT /apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachines/NAME/{start,stop,restart}``
(body optional: Start/Stop/RestartOptions, ``dryRun`` honoured) answer 202 with an empty body, as
pkg/virt-api/rest/lifecycle.go does, with its 404 (``virtualmachine.kubevirt.io "NAME" not found``)
and 409s (``VM is already running``, ``VM is not running``, ``Always does not support manual
start requests``, ``RerunOnFailure does not support starting VM from failed state``...). virt-api's
router (go-restful v3, vendored at v1.9.0: jsr311.go) answers in plain text before a handler runs: a path
no route has ``404: Page Not Found``, another method than PUT ``405: Method Not Allowed``, and an Accept
header that is neither empty nor lists ``*/*`` ``406: Not Acceptable`` (the routes declare no Produces,
route.go matchesAccept), as measured on the real one (tests/kubevirt_real/test_fake_agrees.py). ``start``/``stop``
on a VM whose run strategy is Always or Halted set ``spec.runStrategy`` (or ``spec.running`` when the VM
uses it); Manual and RerunOnFailure VMs, and ``restart``, get ``status.stateChangeRequests`` as virt-api
writes them (a start after a finished VMI: a Stop of it, then a Start). The group is served
(discovery: name and namespaced only, as virt-api lists it) while ``virtualmachines.kubevirt.io`` is.

With ``simulate=True`` (``FakeApiServer(simulate_kubevirt=True)``) a VM a client creates (a POST, as kubectl apply;
not one a test seeds with ``FakeApiServer.add`` or the harness's client, which stands for a VM virt-controller
has already handled) is started when its run strategy runs it (Always, RerunOnFailure, Once), else shown
``printableStatus: Stopped`` (v1.9.0 pkg/virt-controller/watch/vm/vm.go syncRunStrategy). A VM whose run strategy
changes to Halted loses its VMI (same name) and shows ``printableStatus: Stopped``, ``ready: false``; one
that changes to Always gets a VMI (phase Running on the node named by the VM annotation
``fake.rblnctl.io/node``, else Scheduling with no node) and ``printableStatus: Running`` and
``ready: true`` (``Starting``/false while Scheduling), ``status.runStrategy`` following the spec; a
change to Manual leaves the VMI as it is.
State change requests are carried out and cleared; deleting a VM deletes its VMI (garbage
collection). Without it nothing reacts: the test observes the VM object.

A VMI started on a node gets its virt-launcher pod there, as virt-controller renders it
(kubevirt/kubevirt@v1.9.0 pkg/virt-controller/services/template.go podLabels, renderresources.go):
labels ``kubevirt.io=virt-launcher``, ``kubevirt.io/created-by=<VMI uid>``, ``vm.kubevirt.io/name``,
a controller ownerReference to the VMI, one request and limit per sandbox host device
(``deviceName``), for each DRA host device a compute-container ``resources.claims`` entry (its claimName and
requestName: renderresources.go WithHostDevicesDRA), and the VMI's ``resourceClaims`` as pod claims
(template.go: every one of them), each made into a
ResourceClaim owned by the pod and allocated (as the scheduler would) from the free devices of the node's
ResourceSlices: ``status.resourceClaimStatuses`` names it. ``launcher_delay_s`` keeps the pod Pending
(and the VM not ready) that long first, and makes a stop take that long too: the VMI is marked for deletion
(the VM ``Stopping``), then goes with its pod and claims (a start asked meanwhile follows it); state change
requests (restart) wait half as long before they are carried out. Without it,
stopping deletes the pod and its claims with the VMI at once.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

from tests.fakes.apiserver.config import VM_NODE_ANNOTATION
from tests.fakes.apiserver.discovery import ExtraGroup
from tests.fakes.apiserver.errors import GroupResource, conflict, internal_error, not_found
from tests.fakes.apiserver.errors import unknown_path
from tests.fakes.apiserver.meta import ts
from tests.fakes.apiserver.store import Event, Store

GROUP = "subresources.kubevirt.io"
VM_ID = "virtualmachines.kubevirt.io"
VMI_ID = "virtualmachineinstances.kubevirt.io"
_VM = GroupResource("kubevirt.io", "virtualmachine")  # v1.Resource("virtualmachine") in virt-api
_PREFIX = f"/apis/{GROUP}/v1/namespaces/"
_PATH = re.compile(r"/apis/subresources\.kubevirt\.io/v1/namespaces/([^/]+)/virtualmachines/([^/]+)/([^/]+)/?")
_ACTIONS = ("start", "stop", "restart")
_RUNNING = ("Always", "RerunOnFailure", "Once")


def run_strategy(vm: dict) -> str:
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    return "Always" if spec.get("running") else "Halted"


def _final(vmi: dict | None) -> bool:
    return vmi is not None and (vmi.get("status") or {}).get("phase") in ("Succeeded", "Failed")


# go-restful's own answers (jsr311.go NewError: text/plain), before any virt-api handler runs.
NO_ROUTE = (404, "404: Page Not Found")
NOT_ALLOWED = (405, "405: Method Not Allowed")
NOT_ACCEPTABLE = (406, "406: Not Acceptable\n\nAvailable representations: ")


def _accepts_any(accept: str) -> bool:
    """Whether a route without Produces serves this Accept header (go-restful route.go matchesAccept: only an
    empty header, taken as */*, or one listing */*; quality parameters ignored)."""
    if not accept.strip():
        return True
    return any(part.split(";")[0].strip() == "*/*" for part in accept.split(","))


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
        store.reactions.append(self._react)

    def served(self) -> bool:
        return self.store.table.get(VM_ID) is not None

    def discovery_groups(self) -> list[ExtraGroup]:
        if not self.served():
            return []
        return [(GROUP, "v1", [{"name": f"virtualmachines/{a}", "singularName": "", "namespaced": True, "kind": "",
                                "verbs": None} for a in _ACTIONS])]

    # ---- virt-api --------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: Any, *, accept: str = "") -> tuple[int, bytes | str] | None:
        """The answer to a subresources.kubevirt.io request, or None when ``path`` is not one."""
        if not path.startswith(_PREFIX):
            return None
        if not self.served():
            raise unknown_path()
        m = _PATH.fullmatch(path)
        if m is None or m.group(3) not in _ACTIONS:
            return NO_ROUTE
        if method != "PUT":
            return NOT_ALLOWED
        if not _accepts_any(accept):
            return NOT_ACCEPTABLE
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
        self._set_status(name, ns, printableStatus="Stopped", ready=False, created=False, runStrategy=run_strategy(vm))

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
        else:
            self._set_status(name, ns, printableStatus="Stopped", ready=False, created=False,
                             runStrategy=run_strategy(vm))

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
                "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": [
                    {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name,
                     "uid": vm["metadata"].get("uid"), "controller": True, "blockOwnerDeletion": True}]},
                "spec": copy.deepcopy(tpl.get("spec") or {}), "status": status})
            vmi = self.store.get("VirtualMachineInstance", name, ns)
            if node and vmi is not None:
                self._add_launcher(vmi, node, running=not pending)
                if pending:
                    self.store.schedule(self.launcher_delay_s, self._launcher_running, name, ns,
                                        vmi["metadata"]["uid"])
        ready = bool(node) and not pending
        self._set_status(name, ns, printableStatus="Running" if ready else "Starting", ready=ready, created=True,
                         runStrategy=run_strategy(vm))

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
        free = [(s["spec"]["driver"], (s["spec"].get("pool") or {}).get("name"), d["name"])
                for s in self.store.list("ResourceSlice") if (s.get("spec") or {}).get("nodeName") == node
                for d in (s.get("spec") or {}).get("devices") or []]
        free = [f for f in free if f not in taken]
        name = f"{pod}-{entry['name']}-{uuid.uuid4().hex[:5]}"
        claim: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"resource.kubernetes.io/pod-claim-name": entry["name"]},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy((tpl.get("spec") or {}).get("spec") or {})}
        if len(free) >= len(requests):
            claim["status"] = {
                "allocation": {"devices": {"results": [
                    {"request": r.get("name"), "driver": d, "pool": p, "device": dev}
                    for r, (d, p, dev) in zip(requests, free)]},
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

    def _set_status(self, name: str, ns: str, **fields: Any) -> None:
        self.store.mutate("VirtualMachine", name, ns, lambda v: v.setdefault("status", {}).update(fields))
