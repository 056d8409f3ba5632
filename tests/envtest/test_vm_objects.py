"""What rblnctl writes into KubeVirt objects is valid against KubeVirt's schema, on a real API server.

The real control plane serves KubeVirt v1.9.0's CRDs with a schema derived from its published OpenAPI
(tests/envtest/crds): a VirtualMachine `vm manifest` prints must pass `kubectl apply --dry-run=server`, and
one `vm attach` patches must stay valid. The schema is checked to bite (a host device without its required
name is refused), so an accepted manifest means something.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.cluster.client import ApiFailure
from tests.fakes import objects as o
from tests.fakes.releases import NEWER
from tests.vm.test_manifest_schema import CASES

VFIO = [{"name": "vfio-0000-3b-00-0", "attributes": {"type": {"string": "vfio"}}}]


def world(real, *, dra: bool) -> None:
    gates = ["HostDevices", "HostDevicesWithDRA"] if dra else ["HostDevices"]
    real.api.seed(o.npu_node("v1", mode="vm-passthrough", dra=dra, npus=4), o.node_feature("v1"),
                  NEWER.policy(vfio_manager=True, sandbox=not dra, dra=dra, device_plugin=False),
                  NEWER.operator_deployment(),
                  o.kubevirt(feature_gates=gates, version="v1.9.0",
                             permitted_pci=[("1EFF:1220", "rebellions.ai/RBLN-CA22_PF")]))
    if dra:
        real.api.seed(o.deviceclass("vfio-npu.rebellions.ai"), o.resource_slice("v1", devices=VFIO))


def kubectl_apply(real, manifest: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", "--kubeconfig", str(real.kubeconfig), "apply", "-f", "-", *extra],
                          input=manifest, capture_output=True, text=True, timeout=60)


def test_the_schema_refuses_an_invalid_vm(real):
    vm = o.vm("vms", "broken", host_devices=["rebellions.ai/RBLN-CA22_PF"], running=False)
    del vm["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"][0]["name"]
    with pytest.raises(ApiFailure) as err:
        real.api.create(vm)
    assert err.value.status == 422 and "hostDevices[0].name: Required value" in str(err.value)


@pytest.mark.parametrize("method", ["sandbox", "dra"])
def test_vm_manifest_applies_on_the_real_server(later_policy_crd_installed, real, method):
    world(real, dra=method == "dra")
    r = real.rblnctl("vm", "manifest", "my-vm", "-n", "vms", "--npus", "2", "--method", method)
    assert r.exit_code == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    expected = ["ResourceClaimTemplate", "VirtualMachine"] if method == "dra" else ["VirtualMachine"]
    assert sorted(d["kind"] for d in docs) == expected
    done = kubectl_apply(real, r.stdout, "--dry-run=server")
    assert done.returncode == 0, done.stderr
    done = kubectl_apply(real, r.stdout)
    assert done.returncode == 0, done.stderr
    vm = real.api.get("VirtualMachine", "my-vm", "vms")
    assert len(vm["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == 2


@pytest.mark.parametrize("method", ["sandbox", "dra"])
def test_vm_attach_patches_a_vm_into_a_valid_one(later_policy_crd_installed, real, method):
    world(real, dra=method == "dra")
    real.api.seed(o.vm("vms", "plain", running=False))
    r = real.rblnctl("vm", "attach", "plain", "-n", "vms", "--npus", "2", "--method", method)
    assert r.exit_code == 0, r.stderr
    spec = real.api.get("VirtualMachine", "plain", "vms")["spec"]["template"]["spec"]
    assert len(spec["domain"]["devices"]["hostDevices"]) == 2
    if method == "dra":
        [claim] = spec["resourceClaims"]
        assert real.api.get("ResourceClaimTemplate", claim["resourceClaimTemplateName"], "vms") is not None
    r = real.rblnctl("vm", "detach", "plain", "-n", "vms")
    assert r.exit_code == 0, r.stderr
    spec = real.api.get("VirtualMachine", "plain", "vms")["spec"]["template"]["spec"]
    assert not spec["domain"]["devices"].get("hostDevices")


@pytest.mark.parametrize("case", list(CASES))
def test_vm_manifest_flags_apply_on_the_real_server(real, case):
    """Every new `vm manifest` flag (size, instancetype and preference, PVC and DataVolume root disks, the product
    node selector) writes a VM the real API server takes, with strict field validation (kubectl's default: an
    unknown field is an error), and stores as written: nothing pruned. The default tier checks the same manifests
    against the same schema with jsonschema (tests/vm/test_manifest_schema.py)."""
    r = real.rblnctl("vm", "manifest", "my-vm", "-n", "vms", *CASES[case])
    assert r.exit_code == 0, r.stderr
    done = kubectl_apply(real, r.stdout, "--dry-run=server")
    assert done.returncode == 0, done.stderr
    done = kubectl_apply(real, r.stdout)
    assert done.returncode == 0, done.stderr
    sent = next(d for d in yaml.safe_load_all(r.stdout) if d and d["kind"] == "VirtualMachine")
    stored = real.api.get("VirtualMachine", "my-vm", "vms")
    assert stored["spec"] == sent["spec"]


def test_the_schema_refuses_a_datavolume_template_without_its_spec(real):
    """The derived schema bites on the new shapes too: CDI's DataVolumeTemplateSpec requires spec."""
    r = real.rblnctl("vm", "manifest", "dv-vm", "-n", "vms", *CASES["datavolume-url"])
    vm = next(d for d in yaml.safe_load_all(r.stdout) if d and d["kind"] == "VirtualMachine")
    del vm["spec"]["dataVolumeTemplates"][0]["spec"]
    with pytest.raises(ApiFailure) as err:
        real.api.create(vm)
    assert err.value.status == 422 and "spec.dataVolumeTemplates[0].spec: Required value" in str(err.value)
