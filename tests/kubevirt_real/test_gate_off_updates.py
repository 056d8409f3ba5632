"""What real KubeVirt v1.9.0 refuses once HostDevices is off under a VM that keeps NPU host devices.

virt-api's VirtualMachine validator runs on CREATE and UPDATE (pkg/virt-operator/resource/generate/components/
webhooks.go, virtualmachine-validator.kubevirt.io) and validates the template as a VMI spec
(pkg/virt-api/webhooks/validating-webhook/admitters/vms-admitter.go ValidateVirtualMachineSpec ->
vmi-create-admitter.go validateHostDevicesWithPassthroughEnabled): with the gate off every write of such a VM's
spec is refused, a stop of a runStrategy Always VM (virt-api patches spec.runStrategy) included.
"""

from __future__ import annotations

from tests.cluster.client import ApiFailure
from tests.kubevirt_real.test_guard import _permit
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm


def test_with_host_devices_off_the_vm_cannot_even_be_stopped(kv):
    kv.set_gates(["HostDevices"])
    _permit(kv)
    kv.api.create(vm(kv.namespace, "npu", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    kv.wait_vmi_phase("npu", "Running")
    r = kv.rblnctl("kubevirt", "disable-gates", "HostDevices", "--yes", "--evict-vms")
    assert r.exit_code == 0, r.stderr
    # the warning says what KubeVirt will now refuse
    assert "refuses every change to their VMs that keeps those NPUs, a stop included" in r.stderr, r.stderr
    # a plain spec write of the VM is refused by virt-api's VM validator
    try:
        kv.api.patch("VirtualMachine", "npu", {"spec": {"runStrategy": "Halted"}}, kv.namespace)
    except ApiFailure as e:
        assert "Host Devices feature gate is not enabled" in str(e), e
    else:
        raise AssertionError("KubeVirt admitted a VM spec write with HostDevices off")
    # and so is virt-api's own stop, which patches spec.runStrategy
    r = kv.rblnctl("vm", "stop", "npu", "-n", kv.namespace, "--yes")
    assert r.exit_code != 0, r.stdout
    assert "Host Devices feature gate is not enabled" in r.stderr, r.stderr
