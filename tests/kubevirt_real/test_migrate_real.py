"""`kubevirt migrate-resources` and `policy set-method --convert-vms` over VMs real KubeVirt v1.9.0 runs.

migrate-resources: after an operator upgrade renamed the sandbox resource (chart v0.3.0's `ATOM_PT` -> the
per-product `RBLN-CA22_PF`), the KubeVirt CR and every VM are renamed; a running VM is renamed, not restarted
(its VMI and launcher pod stay; virt-controller marks it RestartRequired), and takes the new name at its next start.

set-method --convert-vms: on the operator v0.3.0 + KubeVirt stack, a stopped VM written for DRA is rewritten for
the sandbox method the policy runs, and real KubeVirt admits and starts what rblnctl wrote.
"""

from __future__ import annotations

import json

from tests.kubevirt_real.helpers import DRA_NODE, SANDBOX_NODE, dra_vm
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm

OLD = "rebellions.ai/ATOM_PT"  # chart v0.3.0's resourceList name


def set_allocatable(kv, node, resource, count):
    """The node's kubelet reports `resource` (None: no longer) in capacity and allocatable."""
    value = None if count is None else str(count)
    kv.api.patch("Node", node, {"status": {"capacity": {resource: value}, "allocatable": {resource: value}}},
                  sub="status")


def host_device_names(obj):
    return [d["deviceName"] for d in obj["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]]


def before_upgrade(kv):
    """The KubeVirt CR as chart v0.3.0 left it: HostDevices on, the old name permitted."""
    def permit_old(o):
        conf = o["spec"].setdefault("configuration", {})
        conf["developerConfiguration"] = {"featureGates": ["HostDevices"]}
        conf["permittedHostDevices"] = {"pciHostDevices": [{"pciVendorSelector": "1EFF:1220", "resourceName": OLD,
                                                            "externalResourceProvider": True}]}
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", permit_old)


def test_migrate_resources_renames_the_cr_and_every_vm_and_leaves_a_running_vm_running(kv):
    before_upgrade(kv)
    set_allocatable(kv, DRA_NODE, OLD, 2)  # before the upgrade, npu-node-2's plugin advertised the old name
    ns = kv.namespace
    kv.api.seed(vm(ns, "run", run_strategy="Always", host_devices=[OLD] * 2), vm(ns, "halt", host_devices=[OLD]))
    vmi = kv.wait_vmi_phase("run", "Running")
    assert vmi["status"]["nodeName"] == DRA_NODE
    (pod,) = kv.launcher_pods("run")
    set_allocatable(kv, DRA_NODE, OLD, None)  # the upgrade: the plugin now advertises the per-product name only

    kv.mark()
    dry = kv.rblnctl("kubevirt", "migrate-resources", "--dry-run=server", "-y")
    assert dry.exit_code == 0, dry.stderr
    assert {(w.verb, w.dry_run) for w in kv.writes()} == {("patch", True)} and len(kv.writes()) == 3
    assert host_device_names(kv.vm("halt")) == [OLD]

    kv.mark()
    r = kv.rblnctl("kubevirt", "migrate-resources", "-y")
    assert r.exit_code == 0, r.stderr
    assert sorted((w.verb, w.path.rsplit("/", 1)[-1], w.code) for w in kv.writes()) == [
        ("patch", "halt", 200), ("patch", "kubevirt", 200), ("patch", "run", 200)]
    assert host_device_names(kv.vm("run")) == [SANDBOX_RESOURCE] * 2
    assert host_device_names(kv.vm("halt")) == [SANDBOX_RESOURCE]
    assert [e["resourceName"] for e in kv.kubevirt_cr()["spec"]["configuration"]["permittedHostDevices"][
        "pciHostDevices"]] == [SANDBOX_RESOURCE]
    said = " ".join((r.stdout + r.stderr).split())
    assert f"1 running VM(s) need a restart to take effect: {ns}/run" in said
    assert "restart it when convenient: `rblnctl vm restart NAME -n NAMESPACE --wait`" in said

    # Not restarted: the same VMI and launcher pod; real virt-controller marks the VM RestartRequired.
    assert kv.vmi("run")["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert [p["metadata"]["uid"] for p in kv.launcher_pods("run")] == [pod["metadata"]["uid"]]
    kv.api.wait_for(lambda: any(c["type"] == "RestartRequired" and c["status"] == "True"
                                for c in kv.vm("run")["status"].get("conditions") or []),
                    timeout_s=30, message="VM run RestartRequired")
    listed = json.loads(kv.rblnctl("vm", "list", "-n", ns, "-o", "json").stdout)
    assert {i["name"]: i["restartPending"] for i in listed["items"]} == {"run": True, "halt": False}

    # Its next start takes the new name, which npu-node-1 advertises. (A stop and a start, not `vm restart`: the
    # stack's stand-in virt-handler records no Running phase transition, so virt-controller takes a restarted
    # VMI for one that failed early and backs off 10-15 s before the new one; the real virt-handler records it,
    # pkg/virt-handler/vm.go SetVMIPhaseTransitionTimestamp.)
    for step in (("stop", "-y"), ("start",)):
        again = kv.rblnctl("vm", step[0], "run", "-n", ns, "--wait", *step[1:])
        assert again.exit_code == 0, again.stderr
    (new_pod,) = kv.launcher_pods("run")
    compute = next(c for c in new_pod["spec"]["containers"] if c["name"] == "compute")
    assert new_pod["spec"]["nodeName"] == SANDBOX_NODE and compute["resources"]["requests"][SANDBOX_RESOURCE] == "2"


def test_a_rerun_of_migrate_resources_finds_nothing_to_rename(kv):
    kv.set_gates(["HostDevices"])
    kv.api.seed(vm(kv.namespace, "cur", host_devices=[SANDBOX_RESOURCE]))
    kv.mark()
    r = kv.rblnctl("kubevirt", "migrate-resources", "-y")
    assert r.exit_code == 0, r.stderr
    assert "nothing to rename" in r.stderr and kv.writes() == []


def test_set_method_convert_vms_rewrites_a_dra_vm_for_the_sandbox_plugin_and_kubevirt_runs_it(kv_stack):
    kv = kv_stack
    node = "npu-node-1"  # an RBLN-CA12: chart v0.3.0's sandbox plugin advertises it as rebellions.ai/ATOM_PT
    ns = kv.namespace
    kv.set_gates(["HostDevices"])  # KubeVirt admits no VM with host devices without it
    kv.api.seed(*dra_vm(ns, "conv", 2, run_strategy="Halted"))
    switched = kv.rblnctl("node", "set-mode", "vm", node, "-y")
    assert switched.exit_code == 0, switched.stderr
    try:
        permitted = kv.rblnctl("kubevirt", "permit-devices", "-y")  # what npu-node-1 now advertises: ATOM_PT
        assert permitted.exit_code == 0, permitted.stderr
        kv.mark()
        r = kv.rblnctl("policy", "set-method", "sandbox", "--convert-vms", "-y", "--timeout", "60s")
        assert r.exit_code == 0, r.stdout + "\n" + r.stderr
        writes = [(w.verb, w.path.rsplit("/", 2)[-2:], w.code) for w in kv.writes()
                  if "/virtualmachines/" in w.path or "/rblnclusterpolicies/" in w.path]
        assert writes == [("patch", ["virtualmachines", "conv"], 200)]  # the policy already runs sandbox
        converted = kv.vm("conv")
        assert host_device_names(converted) == [OLD] * 2
        assert not converted["spec"]["template"]["spec"].get("resourceClaims")

        # What rblnctl wrote is what KubeVirt admits and runs.
        started = kv.rblnctl("vm", "start", "conv", "-n", ns, "--wait", "--timeout", "60s")
        assert started.exit_code == 0, started.stderr
        (pod,) = kv.launcher_pods("conv")
        compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
        assert pod["spec"]["nodeName"] == node and compute["resources"]["requests"][OLD] == "2"
    finally:
        kv.rblnctl("vm", "stop", "conv", "-n", ns, "--wait", "-y")
        kv.rblnctl("node", "set-mode", "container", node, "-y")  # the operator converged back for the next test


def test_a_vm_re_created_before_its_rename_is_reported_and_left_as_its_owner_made_it_real(kv, monkeypatch):
    """Issue 37: the owner deletes and re-creates VM `gone` (same manifest, another uid) between rblnctl's read and
    its patch; real kube-apiserver refuses the patch's uid test (422), the run says the VM was re-created (exit 6:
    one object of several failed) and the new VM keeps the names its owner gave it."""
    from tests.kubevirt_real.test_restart import strike

    before_upgrade(kv)
    ns = kv.namespace
    kv.api.seed(vm(ns, "gone", host_devices=[OLD]), vm(ns, "kept", host_devices=[OLD]))
    uid = kv.vm("gone")["metadata"]["uid"]

    def is_rename_of_gone(method, path, body):
        return method == "PATCH" and path.endswith("/virtualmachines/gone") and isinstance(body, list)

    def recreate(send):
        kv.api.delete("VirtualMachine", "gone", ns)
        kv.api.wait_for(lambda: kv.vm("gone") is None, timeout_s=30, interval_s=0.2)
        kv.api.seed(vm(ns, "gone", host_devices=[OLD]))
        return send()

    strike(monkeypatch, is_rename_of_gone, recreate)
    kv.mark()
    r = kv.rblnctl("kubevirt", "migrate-resources", "-y")
    assert r.exit_code == 6, r.stderr
    said = " ".join(r.stderr.split())
    assert f"VM {ns}/gone was deleted and re-created while rblnctl renamed its NPU resources" in said
    now = kv.vm("gone")
    assert now["metadata"]["uid"] != uid and host_device_names(now) == [OLD]
    assert host_device_names(kv.vm("kept")) == [SANDBOX_RESOURCE]
    assert [w.code for w in kv.writes() if w.verb == "patch" and w.path.endswith("/gone")] == [422]
