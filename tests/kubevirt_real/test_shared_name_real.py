"""A resource name both the device plugin and the sandbox plugin advertise, beside the real kube-scheduler (v1.36.2)
placing the virt-launcher real KubeVirt v1.9.0 renders, under the real chart v0.3.0 RBLNClusterPolicy CRD (which
defaults a left-out sandboxDevicePlugin.resourceList to the device plugin's `rebellions.ai/ATOM`:
RBLN-SW/rbln-npu-operator@v0.3.0 api/v1beta1/rblnclusterpolicy_types.go).

npu-node-2 is put in container mode, advertising `rebellions.ai/ATOM` as the device plugin would; npu-node-1 stays
in vm-passthrough mode without it. `permit-devices --from-cluster` permits nothing for npu-node-2 (exit 1, saying
why); `vm fit` counts no node for it but names npu-node-2; and a VM asking for the name is bound by the scheduler to
npu-node-2: the warning is true.

(The kubevirt stack, not the operator stack: the operator stack's kubelet stand-in writes each plugin's resources
from its own list, so under one shared name the two plugins' entries overwrite each other every second.)
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from rblnctl import constants as C
from tests.envtest.crds import operator_crds_v030
from tests.envtest.fixtures import install_crds
from tests.fakes.releases import V0_3_0
from tests.kubevirt_real.helpers import DRA_NODE as CONTAINER_NODE
from tests.kubevirt_real.vms import vm

ATOM = "rebellions.ai/ATOM"


def test_the_container_node_offering_the_shared_name_is_named_and_the_scheduler_uses_it(kv):
    crds = operator_crds_v030(Path(os.environ["KUBEBUILDER_ASSETS"]))
    if not crds:
        pytest.skip("the envtest bundle has no operator chart CRDs")
    install_crds(kv.api, crds)
    policy = copy.deepcopy(V0_3_0.policy(vfio_manager=True, sandbox=True))
    del policy["spec"]["sandboxDevicePlugin"]["resourceList"]
    try:
        kv.api.create(policy)
        name = policy["metadata"]["name"]
        defaulted = kv.api.get("RBLNClusterPolicy", name)["spec"]["sandboxDevicePlugin"]["resourceList"]
        assert [f"{e['resourcePrefix']}/{e['resourceName']}" for e in defaulted] == [ATOM]  # the real CRD's default
        kv.api.patch("Node", CONTAINER_NODE, {"metadata": {"labels": {C.WORKLOAD_LABEL: C.MODE_CONTAINER}}})
        kv.api.patch("Node", CONTAINER_NODE, {"status": {"capacity": {ATOM: "4"}, "allocatable": {ATOM: "4"}}},
                     sub="status")

        refused = kv.rblnctl("kubevirt", "permit-devices", "--from-cluster", "--dry-run")
        said = " ".join(refused.stderr.split())
        assert refused.exit_code == 1, refused.stdout + refused.stderr
        assert f"not permitted: only container-mode nodes advertise it ({CONTAINER_NODE})" in said, said
        assert f"`kubectl edit rblnclusterpolicy {name}`" in said

        answer = kv.rblnctl("vm", "fit", "--npus", "1", "--resource", ATOM, "-o", "json")
        doc = json.loads(answer.stdout)
        assert answer.exit_code == 1 and doc["fits"] == 0, answer.stdout + answer.stderr
        assert any(f"container-mode node(s) offering it ({CONTAINER_NODE})" in w for w in doc["warnings"]), doc

        # permitted by hand (KubeVirt renders no launcher for an unpermitted name), as an administrator might
        kv.set_gates(["HostDevices"])
        kv.api.mutate("KubeVirt", "kubevirt", "kubevirt", lambda o: o["spec"]["configuration"].__setitem__(
            "permittedHostDevices", {"pciHostDevices": [
                {"pciVendorSelector": "1EFF:1120", "resourceName": ATOM, "externalResourceProvider": True}]}))
        kv.api.create(vm(kv.namespace, "shared", run_strategy="Always", host_devices=[ATOM]))
        node = kv.api.wait_for(lambda: next((p["spec"].get("nodeName") for p in kv.launcher_pods("shared")
                                             if p["spec"].get("nodeName")), None),
                               timeout_s=60, interval_s=0.2, message="the launcher bound")
        assert node == CONTAINER_NODE  # where the warning said the scheduler may put it
    finally:
        for p in kv.api.list("RBLNClusterPolicy"):
            kv.api.delete("RBLNClusterPolicy", p["metadata"]["name"])
        for crd in crds:  # the other tests of this stack run without the operator's CRDs
            kv.api.delete("CustomResourceDefinition", crd["metadata"]["name"])
