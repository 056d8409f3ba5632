"""The KubeVirt tier's own ground: the stack is real KubeVirt v1.9.0, and the harness isolates tests."""

from __future__ import annotations

from tests.kubevirt_real.vms import vm


def test_a_running_vm_gets_a_vmi_and_a_launcher_pod_the_scheduler_places(kv):
    kv.api.create(vm(kv.namespace, "plain", run_strategy="Always"))
    vmi = kv.wait_vmi_phase("plain", "Running")
    pods = kv.launcher_pods("plain")
    assert len(pods) == 1 and pods[0]["spec"]["nodeName"] == vmi["status"]["nodeName"]
    kv_cr = kv.kubevirt_cr()
    assert kv_cr["status"]["observedKubeVirtVersion"] == "v1.9.0"
