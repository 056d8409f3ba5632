"""vm start|stop|restart through real KubeVirt v1.9.0's virt-api, per runStrategy, with its real 409 refusals."""

from __future__ import annotations

from tests.kubevirt_real.vms import vm


def test_vm_start_of_a_halted_vm_is_served_by_the_real_virt_api(kv):
    kv.api.create(vm(kv.namespace, "halted"))
    r = kv.rblnctl("vm", "start", "halted", "-n", kv.namespace)
    assert r.exit_code == 0, r.stderr
    assert kv.vm("halted")["spec"]["runStrategy"] == "Always"
    kv.wait_vmi_phase("halted", "Running")
