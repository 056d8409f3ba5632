"""The running-VM guard on real KubeVirt v1.9.0 (issue 28 finding 7; rblnctl/vm/guard.py).

`kubevirt disable-gates HostDevices` turned the gate off under a running VM holding NPUs. The guard refuses that,
naming the VM, and says why: KubeVirt admits host devices only while the gate is on. Both halves are checked
against the real virt-api: the refusal writes nothing (the apiserver's audit log), and once the override has
turned the gate off, the running VMI keeps its devices while KubeVirt refuses to run the VM again.
"""

from __future__ import annotations

from tests.cluster.client import ApiFailure
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm


def _permit(kv) -> None:
    kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", lambda o: o["spec"].setdefault("configuration", {}).__setitem__(
        "permittedHostDevices", {"pciHostDevices": [{"pciVendorSelector": "1EFF:1220", "resourceName": SANDBOX_RESOURCE,
                                                     "externalResourceProvider": True}]}))


def test_disable_gates_refuses_while_a_running_vm_needs_host_devices(kv):
    kv.set_gates(["HostDevices"])
    _permit(kv)
    kv.api.create(vm(kv.namespace, "npu", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    kv.wait_vmi_phase("npu", "Running")
    kv.mark()
    r = kv.rblnctl("kubevirt", "disable-gates", "HostDevices", "--yes")
    assert r.exit_code == 1, r.stderr
    assert f"VM {kv.namespace}/npu ({SANDBOX_RESOURCE}) runs with NPUs that need HostDevices" in r.stderr
    assert f"`virtctl stop npu -n {kv.namespace}`" in r.stderr and "--evict-vms" in r.stderr
    assert kv.writes() == []
    r = kv.rblnctl("kubevirt", "disable-gates", "HostDevices", "--yes", "--evict-vms")
    assert r.exit_code == 0, r.stderr
    assert "going ahead although 1 running VM(s) depend on it" in r.stderr
    assert kv.vmi("npu")["status"]["phase"] == "Running"  # the running VMI keeps its devices
    # What the refusal said: KubeVirt would not run it again with its NPUs (its admission refuses host devices).
    try:
        kv.api.create(vm(kv.namespace, "again", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    except ApiFailure as e:
        assert "Host Devices feature gate is not enabled" in str(e), e
    else:
        raise AssertionError("KubeVirt admitted a VM with host devices with HostDevices off")


def test_an_unschedulable_vm_holds_no_npu_and_blocks_nothing(kv):
    """Issue 37 finding 7: a VM whose launcher pod asks for more NPUs than any node has (5 of npu-node-1's 4) is
    ErrorUnschedulable; real KubeVirt keeps its VMI, on no node, with the pod's PodScheduled False/Unschedulable.
    It holds nothing, so the guard names no VM (before: "runs with NPUs that need HostDevices ... stop it")."""
    from rblnctl.vm import guard

    kv.set_gates(["HostDevices"])
    _permit(kv)
    kv.api.create(vm(kv.namespace, "big", run_strategy="Always", host_devices=[SANDBOX_RESOURCE] * 5))

    def unschedulable() -> dict | None:
        v = kv.vmi("big")
        return v if v is not None and guard.unschedulable(v) else None

    vmi = kv.api.wait_for(unschedulable, timeout_s=60, interval_s=0.2, message="VMI big PodScheduled False")
    assert not (vmi.get("status") or {}).get("nodeName") and guard.is_running(vmi)
    kv.api.wait_for(lambda: (kv.vm("big").get("status") or {}).get("printableStatus") == "ErrorUnschedulable",
                    timeout_s=30, message="VM big ErrorUnschedulable")
    assert guard.dependents([vmi], guard.holding_npus) == []
    r = kv.rblnctl("kubevirt", "disable-gates", "HostDevices", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert f"{kv.namespace}/big" not in r.stderr
