"""`vm manifest` output is valid against KubeVirt v1.9.0's OpenAPI, without a real API server.

The schema is the one the real tier serves (tests/envtest/crds/kubevirt-v1.9.0.json, derived from
kubevirt/kubevirt v1.9.0 api/openapi-spec/swagger.json), judged by jsonschema as kube-apiserver judges a
structural schema with strict field validation (tests.envtest.crds.json_schema). The real-server twin of these
tests is tests/envtest/test_vm_objects.py::test_vm_manifest_flags_apply_on_the_real_server.
"""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml

from tests.envtest.crds import json_schema, kubevirt_schema
from tests.helpers import cli, closed_port_url

CA22 = "rebellions.ai/RBLN-CA22_PF"
SANDBOX = ("--method", "sandbox", "--resource", CA22)
DRA = ("--method", "dra")

# Each new flag of `vm manifest`, alone and together; both methods (offline: nothing connects).
CASES = {
    "cpu-memory": (*SANDBOX, "--cpu", "8", "--memory", "32Gi"),
    "instancetype": (*SANDBOX, "--instancetype", "u1.xlarge"),
    "namespaced-instancetype-preference": (*SANDBOX, "--instancetype", "virtualmachineinstancetype/npu-large",
                                           "--preference", "virtualmachinepreference/ubuntu"),
    "preference-alone": (*SANDBOX, "--preference", "ubuntu"),
    "pvc": (*SANDBOX, "--pvc", "my-root"),
    "datavolume-url": (*SANDBOX, "--datavolume-source", "https://example.com/jammy.img", "--disk-size", "40Gi"),
    "datavolume-registry": (*DRA, "--datavolume-source", "docker://quay.io/containerdisks/ubuntu:24.04",
                            "--disk-size", "20Gi"),
    "datavolume-pvc": (*SANDBOX, "--datavolume-source", "golden/ubuntu-2404"),
    "node-product": (*SANDBOX, "--node-product", "RBLN-CA22"),
    "dra-everything": (*DRA, "--npus", "2", "--instancetype", "u1.xlarge", "--preference", "ubuntu",
                       "--datavolume-source", "base-image", "--disk-size", "50Gi", "--node-product", "ca25"),
}


def manifest(*args: str) -> list[dict]:
    r = cli("vm", "manifest", "my-vm", "-n", "vms", *args, server=closed_port_url())
    assert r.exit_code == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def vm_of(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "VirtualMachine")


@pytest.fixture(scope="module")
def vm_schema():
    schema = json_schema(kubevirt_schema("VirtualMachine"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("case", CASES)
def test_every_new_flag_writes_a_vm_valid_against_kubevirts_openapi(vm_schema, case):
    vm = vm_of(manifest(*CASES[case]))
    errors = sorted(vm_schema.iter_errors(vm), key=str)
    assert errors == [], [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


@pytest.mark.parametrize(("break_it", "path"), [
    (lambda vm: vm["spec"]["dataVolumeTemplates"][0].pop("spec"), "spec.dataVolumeTemplates.0"),
    (lambda vm: vm["spec"]["dataVolumeTemplates"][0]["spec"]["source"]["http"].pop("url"),
     "spec.dataVolumeTemplates.0.spec.source.http"),
    (lambda vm: vm["spec"].__setitem__("instanceType", vm["spec"].pop("instancetype")), "spec"),
    (lambda vm: vm["spec"]["template"]["spec"]["domain"].__setitem__("memory", {"guest": "8GB"}),
     "spec.template.spec.domain.memory.guest"),
    (lambda vm: vm["spec"]["template"]["spec"]["volumes"][0]["dataVolume"].pop("name"),
     "spec.template.spec.volumes.0.dataVolume"),
    (lambda vm: vm["spec"]["template"]["spec"].__setitem__("nodeSelector", {"rebellions.ai/npu.product": 22}),
     "spec.template.spec.nodeSelector.rebellions.ai/npu.product"),
])
def test_the_schema_bites(vm_schema, break_it, path):
    """What the server would refuse, the check refuses too: a passing manifest above means something."""
    vm = copy.deepcopy(vm_of(manifest(*SANDBOX, "--instancetype", "u1.xlarge", "--node-product", "ca22",
                                      "--datavolume-source", "https://example.com/x.img", "--disk-size", "1Gi")))
    assert list(vm_schema.iter_errors(vm)) == []
    break_it(vm)
    assert path in {".".join(map(str, e.absolute_path)) for e in vm_schema.iter_errors(vm)}
