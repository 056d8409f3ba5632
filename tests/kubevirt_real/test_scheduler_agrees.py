"""`vm fit`, `node list`'s FREE and `vm diagnose` beside the real kube-scheduler (v1.36.2) placing the virt-launcher
pods real KubeVirt v1.9.0 renders: where KubeVirt or DRA add a rule of their own, rblnctl weighs it too.

- every virt-launcher's nodeSelector holds ``kubevirt.io/schedulable=true`` (kubevirt/kubevirt@v1.9.0
  pkg/virt-controller/services/nodeselectorrenderer.go), so a node without it takes no VM;
- a DRA device with a NoSchedule taint (ResourceSlice ``spec.devices[].taints``, DRADeviceTaints on in 1.36) is
  allocated to no claim whose request does not tolerate it.

Each test counts the pods the scheduler binds (and the devices it allocates) and compares them with what rblnctl
said before they were created.
"""

from __future__ import annotations

import json
from typing import Any

from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm
from rblnctl.constants import (
    KUBEVIRT_SCHEDULABLE_LABEL as SCHEDULABLE,
    DRA_DRIVER as DRIVER,
    DRA_DEVICECLASS_VM as VFIO_CLASS,
)

TAINT = {"key": "rebellions.ai/unhealthy", "value": "true", "effect": "NoSchedule"}


# -- the cluster a test sets up, as an administrator would ----------------------------------------------------------


def _permit_sandbox(kv: Any) -> None:
    """HostDevices on and the sandbox resource permitted with an external provider (what `kubevirt enable-gates` and
    `permit-devices` write), so KubeVirt renders launchers that request it."""
    def edit(o: dict) -> None:
        config = o["spec"].setdefault("configuration", {})
        config.setdefault("developerConfiguration", {})["featureGates"] = ["HostDevices"]
        config["permittedHostDevices"] = {"pciHostDevices": [
            {"pciVendorSelector": "1EFF:1220", "resourceName": SANDBOX_RESOURCE, "externalResourceProvider": True}]}
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", edit)


def _label(kv: Any, node: str, value: str | None) -> None:
    kv.api.patch("Node", node, {"metadata": {"labels": {SCHEDULABLE: value}}})


def _vfio(n: int, *, taint: dict | None = None) -> dict:
    d: dict = {"name": f"vfio-0000-{n:02x}-00-0", "attributes": {"type": {"string": "vfio"}}}
    if taint:
        d["taints"] = [taint]
    return d


def _dra_node(kv: Any, devices: list[dict], node: str = "npu-node-2") -> None:
    """The passthrough DeviceClass and the node's ResourceSlice as the RBLN DRA plugin publishes vfio NPUs
    (RBLN-SW/rbln-k8s-dra-driver deviceclass-vfio-npu.yaml, cmd/npu-kubelet-plugin/vfio.go)."""
    kv.set_gates(["HostDevices"])
    kv.api.create({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": VFIO_CLASS},
                   "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    kv.api.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-npu"},
                   "spec": {"driver": DRIVER, "nodeName": node,
                            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})


def _dra_vm(kv: Any, name: str, npus: int, *, tolerations: list[dict] | None = None) -> None:
    """A VM with `npus` DRA host devices: a ResourceClaimTemplate of one request per device (KubeVirt resolves each
    claimName/requestName to one device) and the VM's resourceClaims naming it."""
    exactly: dict = {"deviceClassName": VFIO_CLASS, "allocationMode": "ExactCount", "count": 1}
    if tolerations:
        exactly["tolerations"] = tolerations
    kv.api.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                   "metadata": {"name": f"{name}-npus", "namespace": kv.namespace},
                   "spec": {"spec": {"devices": {"requests": [{"name": f"npu{i}", "exactly": dict(exactly)}
                                                              for i in range(npus)]}}}})
    body = vm(kv.namespace, name, run_strategy="Always")
    spec = body["spec"]["template"]["spec"]
    spec["domain"]["devices"]["hostDevices"] = [{"name": f"npu{i}", "claimName": "npus", "requestName": f"npu{i}"}
                                                for i in range(npus)]
    spec["resourceClaims"] = [{"name": "npus", "resourceClaimTemplateName": f"{name}-npus"}]
    kv.api.create(body)


# -- what the scheduler did --------------------------------------------------------------------------------------


def _decided(pod: dict) -> bool:
    """The scheduler bound the pod, or said it cannot (PodScheduled False, reason Unschedulable)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _placed(kv: Any, names: list[str], *, timeout_s: float = 60) -> dict[str, str | None]:
    """VM name -> the node the scheduler bound its virt-launcher pod to (None: it said no), once it decided all."""
    def decided() -> dict[str, str | None] | None:
        out: dict[str, str | None] = {}
        for name in names:
            pods = [p for p in kv.launcher_pods(name) if not p["metadata"].get("deletionTimestamp")]
            if not pods or not _decided(pods[0]):
                return None
            out[name] = pods[0]["spec"].get("nodeName")
        return out
    return kv.api.wait_for(decided, timeout_s=timeout_s, interval_s=0.2,
                           message=f"the scheduler's decision on {', '.join(names)}")


def _json(r: Any) -> dict:
    assert r.stdout, r.stderr
    return json.loads(r.stdout)


def _row(doc: dict, node: str) -> dict:
    return next(n for n in doc["nodes"] if n["name"] == node)


def _node_list(kv: Any, node: str) -> dict:
    r = kv.rblnctl("node", "list", "-o", "json")
    assert r.exit_code == 0, r.stderr
    return next(n for n in _json(r)["items"] if n["name"] == node)


def _allocated_devices(kv: Any) -> dict[str, list[str]]:
    """VM name -> the devices the scheduler allocated to its launcher's claim."""
    out: dict[str, list[str]] = {}
    for c in kv.api.list("ResourceClaim", kv.namespace):
        results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        owner = (c["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
        vm_name = owner.removeprefix("virt-launcher-").rsplit("-", 1)[0]
        out[vm_name] = sorted(r["device"] for r in results)
    return out


# -- kubevirt.io/schedulable -----------------------------------------------------------------------------------


def test_vm_fit_says_what_the_scheduler_binds_while_every_node_is_schedulable(kv):
    """The baseline: npu-node-1 has 4 free; `vm fit --npus 2 --count 3` says 2 fit (exit 1); of three such VMs the
    scheduler binds two, and `node list` then counts 4 allocated, 0 free, as the bound pods ask."""
    _permit_sandbox(kv)
    r = kv.rblnctl("vm", "fit", "--npus", "2", "--count", "3", "-o", "json")
    predicted = _json(r)
    assert r.exit_code == 1 and predicted["fits"] == 2 and _row(predicted, "npu-node-1")["fits"] == 2
    names = ["a", "b", "c"]
    for name in names:
        kv.api.create(vm(kv.namespace, name, run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * 2))
    placed = _placed(kv, names)
    bound = [n for n, node in placed.items() if node]
    assert len(bound) == predicted["fits"] and {placed[n] for n in bound} == {"npu-node-1"}
    row = _node_list(kv, "npu-node-1")
    assert (row["npuAllocatable"], row["npuAllocated"], row["npuFree"]) == (4, 4, 0)
    after = _json(kv.rblnctl("vm", "fit", "--npus", "2", "-o", "json"))
    assert after["fits"] == 0 and not after["never"]


def test_no_vm_lands_on_a_node_without_kubevirt_schedulable_as_vm_fit_says(kv):
    """npu-node-1 loses kubevirt.io/schedulable (virt-handler gone): `vm fit` counts it no more (exit 1, the row
    names the label and virt-handler) and the scheduler binds none of the VMs; `node list` still counts its 4 NPUs
    free (no pod holds them). `vm diagnose` names the label as the broken link; `vm list` shows the VMs waiting.
    With the label back, the scheduler binds both, and `vm fit` and `node list` count their NPUs held."""
    _permit_sandbox(kv)
    _label(kv, "npu-node-1", None)
    r = kv.rblnctl("vm", "fit", "--npus", "2", "-o", "json")
    predicted = _json(r)
    assert r.exit_code == 1 and predicted["fits"] == 0
    row = _row(predicted, "npu-node-1")
    assert not row["eligible"] and f"KubeVirt's nodeSelector {SCHEDULABLE}=true" in row["reason"]
    assert "virt-handler" in row["reason"]
    for name in ("a", "b"):
        kv.api.create(vm(kv.namespace, name, run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * 2))
    placed = _placed(kv, ["a", "b"])
    assert placed == {"a": None, "b": None}
    (pod,) = kv.launcher_pods("a")
    assert pod["spec"]["nodeSelector"][SCHEDULABLE] == "true"  # what KubeVirt renders, and why
    assert _node_list(kv, "npu-node-1")["npuFree"] == 4

    d = kv.rblnctl("vm", "diagnose", "a", "-n", kv.namespace, "-o", "json")
    doc = _json(d)
    assert d.exit_code == 1 and doc["broken"] == "KubeVirtSchedulable", doc
    link = next(link for link in doc["links"] if link["name"] == "KubeVirtSchedulable")
    assert any("npu-node-1" in e and SCHEDULABLE in e for e in link["evidence"])
    assert "virt-handler" in link["remedy"]
    listed = kv.rblnctl("vm", "list", "-n", kv.namespace, "-o", "json")
    assert listed.exit_code == 0, listed.stderr
    assert sorted(i["name"] for i in _json(listed)["items"]) == ["a", "b"]

    _label(kv, "npu-node-1", "true")  # the scheduler binds both at once: the two agree again once it has
    kv.api.wait_for(lambda: sum(1 for n in ("a", "b") for p in kv.launcher_pods(n)
                                if p["spec"].get("nodeName") == "npu-node-1") == 2 or None,
                    timeout_s=60, interval_s=0.2, message="both launchers bound once the label is back")
    assert _json(kv.rblnctl("vm", "fit", "--npus", "1", "-o", "json"))["fits"] == 0
    assert _node_list(kv, "npu-node-1")["npuFree"] == 0


def test_a_false_label_is_no_label_for_the_scheduler_and_for_vm_fit(kv):
    """virt-handler writes false until its device plugins are up (heartbeat.go): the same exclusion, said as such."""
    _permit_sandbox(kv)
    _label(kv, "npu-node-1", "false")
    predicted = _json(kv.rblnctl("vm", "fit", "--npus", "1", "-o", "json"))
    assert predicted["fits"] == 0 and f"{SCHEDULABLE}=false" in _row(predicted, "npu-node-1")["reason"]
    kv.api.create(vm(kv.namespace, "a", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    assert _placed(kv, ["a"]) == {"a": None}
    m = kv.rblnctl("vm", "manifest", "v", "-n", kv.namespace, "--npus", "1")
    assert m.exit_code == 0 and "no node that offers" in m.stderr and SCHEDULABLE in m.stderr


# -- DRA device taints --------------------------------------------------------------------------------------------


def test_the_scheduler_leaves_a_tainted_device_alone_as_vm_fit_counts_it(kv):
    """npu-node-2 publishes 4 vfio devices, one tainted NoSchedule: `vm fit --method dra` counts 3 free, so one VM
    of 2 fits and not two; the scheduler allocates one claim, never the tainted device, and leaves the other
    unallocated. `vm diagnose` of the waiting VM names the taint as what is in the way."""
    _dra_node(kv, [_vfio(1), _vfio(2, taint=TAINT), _vfio(3), _vfio(4)])
    r = kv.rblnctl("vm", "fit", "--npus", "2", "--count", "2", "--method", "dra", "-o", "json")
    predicted = _json(r)
    row = _row(predicted, "npu-node-2")
    assert r.exit_code == 1 and predicted["fits"] == 1
    assert (row["allocatable"], row["free"], row["tainted"]) == (
        4, 3, ["vfio-0000-02-00-0 (rebellions.ai/unhealthy=true:NoSchedule)"])
    _dra_vm(kv, "a", 2)
    assert _placed(kv, ["a"]) == {"a": "npu-node-2"}
    _dra_vm(kv, "b", 2)
    assert _placed(kv, ["b"]) == {"b": None}
    allocated = _allocated_devices(kv)
    assert len(allocated["a"]) == 2 and "vfio-0000-02-00-0" not in allocated["a"] and allocated.get("b") == []

    d = kv.rblnctl("vm", "diagnose", "b", "-n", kv.namespace, "-o", "json")
    doc = _json(d)
    assert d.exit_code == 1 and doc["broken"] == "ClaimAllocated", doc
    link = next(link for link in doc["links"] if link["name"] == "ClaimAllocated")
    assert any("npu-node-2: 1 free of 4" in e and "1 tainted, not tolerated: vfio-0000-02-00-0" in e
               for e in link["evidence"]), link["evidence"]
    assert "device taint" in link["remedy"]
    after = _json(kv.rblnctl("vm", "fit", "--npus", "1", "--method", "dra", "-o", "json"))
    assert after["fits"] == 1  # the one untainted device left; the scheduler would allocate that one too


def test_a_request_that_tolerates_the_taint_gets_the_device_as_predicted(kv):
    """The same devices; a VM of 4 whose requests tolerate the taint: rblnctl's computation with those tolerations
    (what `vm diagnose` uses) says it fits, `vm fit` (requests without tolerations, as rblnctl writes them) says
    it does not, and the scheduler allocates all four, the tainted one included."""
    from rblnctl.kube import KubeOptions, connect
    from rblnctl.vm.fit import FitOptions, fit

    _dra_node(kv, [_vfio(1), _vfio(2, taint=TAINT), _vfio(3), _vfio(4)])
    kube = connect(KubeOptions(kubeconfig=str(kv.kubeconfig)))
    tolerate = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
    assert fit(kube, FitOptions(npus=4, method="dra", device_tolerations=((tolerate,),) * 4)).fits == 1
    assert _json(kv.rblnctl("vm", "fit", "--npus", "4", "--method", "dra", "-o", "json"))["fits"] == 0
    _dra_vm(kv, "tolerant", 4, tolerations=[tolerate])
    assert _placed(kv, ["tolerant"]) == {"tolerant": "npu-node-2"}
    assert _allocated_devices(kv)["tolerant"] == [f"vfio-0000-{n:02x}-00-0" for n in (1, 2, 3, 4)]
    kv.wait_vmi_phase("tolerant", "Running")
    d = kv.rblnctl("vm", "diagnose", "tolerant", "-n", kv.namespace, "-o", "json")
    doc = _json(d)
    claim = next(link for link in doc["links"] if link["name"] == "ClaimAllocated")
    assert claim["status"] == "PASS" and "vfio-0000-02-00-0" in " ".join(claim["evidence"])


def test_a_node_whose_devices_are_all_tainted_fits_no_dra_vm_and_gets_none(kv):
    _dra_node(kv, [_vfio(1, taint=TAINT), _vfio(2, taint={**TAINT, "effect": "NoExecute"})])
    predicted = _json(kv.rblnctl("vm", "fit", "--npus", "1", "--method", "dra", "-o", "json"))
    assert predicted["fits"] == 0 and _row(predicted, "npu-node-2")["free"] == 0
    _dra_vm(kv, "a", 1)
    assert _placed(kv, ["a"]) == {"a": None}
    assert _allocated_devices(kv).get("a") == []


# -- kubernetes.io/arch (issue 41.3) --------------------------------------------------------------------------------


def test_a_node_of_another_architecture_takes_no_vm_as_vm_fit_says(kv):
    """virt-controller v1.9.0 puts kubernetes.io/arch=<the VMI's architecture> into every launcher's nodeSelector
    (nodeselectorrenderer.go NewNodeSelectorRenderer); the VMI's architecture comes from the KubeVirt CR's
    architectureConfiguration.defaultArchitecture. npu-node-1 relabelled arm64 under an amd64 default: `vm fit`
    counts it no more and the scheduler binds no VM there; labelled amd64 again, both agree it fits."""
    _permit_sandbox(kv)
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", lambda o: o["spec"].setdefault("configuration", {}).update(
        architectureConfiguration={"defaultArchitecture": "amd64"}))
    kv.api.patch("Node", "npu-node-1", {"metadata": {"labels": {"kubernetes.io/arch": "arm64"}}})
    predicted = _json(kv.rblnctl("vm", "fit", "--npus", "2", "-o", "json"))
    row = _row(predicted, "npu-node-1")
    assert predicted["fits"] == 0 and not row["eligible"], predicted
    assert "kubernetes.io/arch=amd64 (node has kubernetes.io/arch=arm64)" in row["reason"]
    kv.api.create(vm(kv.namespace, "a", run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * 2))
    assert _placed(kv, ["a"]) == {"a": None}
    (pod,) = kv.launcher_pods("a")
    assert pod["spec"]["nodeSelector"]["kubernetes.io/arch"] == "amd64"  # what KubeVirt renders, and why
    kv.api.patch("Node", "npu-node-1", {"metadata": {"labels": {"kubernetes.io/arch": "amd64"}}})
    kv.api.wait_for(lambda: any(p["spec"].get("nodeName") == "npu-node-1" for p in kv.launcher_pods("a")) or None,
                    timeout_s=60, interval_s=0.2, message="the launcher bound once the node is amd64 again")
    assert _json(kv.rblnctl("vm", "fit", "--npus", "2", "-o", "json"))["fits"] == 1
