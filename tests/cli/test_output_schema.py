"""Every command's -o json validates against the schema of its kind in docs/output.md, and every kind there is run.

The schemas are the YAML blocks of docs/output.md that start with `# schema: <Kind>`; `# schema: $defs`
holds the shared definitions. A scenario sets up the fake API server (or a simulated host), runs one
command with `-o json`, and names the kind it must print.
"""

from __future__ import annotations

import json
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pytest
import yaml

import rblnctl.host.vfio.writer as vfio_writer
from rblnctl.host import pci
from tests.fakes import objects as o
from tests.fakes import sysfs as ht
from tests.fakes.sysfs import guard_real_host, npu_node
from tests.helpers import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "output.md"
BLOCK = re.compile(r"```yaml\n# schema: (\S+)\n(.*?)```", re.S)
A, B = "0000:3b:00.0", "0000:3c:00.0"


@functools.cache
def schemas() -> dict[str, dict]:
    """Kind -> JSON schema (with the shared $defs), from docs/output.md; checked once per session."""
    blocks = {kind: yaml.safe_load(body) for kind, body in BLOCK.findall(DOC.read_text())}
    defs = blocks.pop("$defs")
    out = {}
    for kind, schema in blocks.items():
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "$defs": defs}
        jsonschema.Draft202012Validator.check_schema(schema)
        out[kind] = schema
    return out


@dataclass(frozen=True)
class Scenario:
    kind: str
    args: tuple[str, ...]
    cluster: bool = True  # against the fake API server with an operator; else on a simulated host
    exit_code: int = 0
    setup: Callable | None = field(default=None, compare=False)


def _shared_group(kern):
    """A PCIe port and a NIC on a host driver in the first NPU's IOMMU group (groupMembers filled, one blocking)."""
    group = pci.iommu_group_of(kern.sys, "0000:3b:00.0")
    kern.add_pci_function("0000:3a:00.0", vendor=0x10B5, device=0x8747, class_code=0x060400, driver="pcieport",
                          iommu_group=group)
    kern.add_pci_function("0000:3b:00.1", vendor=0x8086, device=0x1572, class_code=0x020000, driver="i40e",
                          iommu_group=group)


def _vm_pod(apiserver):
    apiserver.add(o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web",
                        requests={"rebellions.ai/npu": "1"}))


def _old_names(apiserver):
    entry = {"pciVendorSelector": "1EFF:1220", "resourceName": "rebellions.ai/ATOM_CA22_PT",
             "externalResourceProvider": True}
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["spec"]["configuration"].update(
        {"permittedHostDevices": {"pciHostDevices": [entry]}}))
    apiserver.add(o.vm("default", "vm1", host_devices=["rebellions.ai/ATOM_CA22_PT"]),
                  o.vmi("default", "vm1", "n1", host_devices=["rebellions.ai/ATOM_CA22_PT"]))


def _ready_for_dra(apiserver):
    from tests.fakes.releases import NEWER

    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(
        {"rebellions.ai/npu.workload.config": "vm-passthrough"}))
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["spec"]["configuration"][
        "developerConfiguration"].update({"featureGates": ["HostDevices", "HostDevicesWithDRA"]}))
    apiserver.add(NEWER.operator_deployment(), o.vm("default", "on-sandbox", running=False,
                                                    host_devices=["rebellions.ai/RBLN-CA22_PF"]))


def _vm(apiserver):
    """A vm-mode node n2, HostDevices on and its resource permitted, and a stopped VM vms/v1."""
    kv = apiserver.get("KubeVirt", "kubevirt", "kubevirt")
    kv["spec"]["configuration"]["developerConfiguration"]["featureGates"] = ["HostDevices"]
    kv["spec"]["configuration"]["permittedHostDevices"] = {"pciHostDevices": [
        {"pciVendorSelector": "1EFF:1220", "resourceName": "rebellions.ai/RBLN-CA22_PF",
         "externalResourceProvider": True}]}
    apiserver.update(kv)
    apiserver.add(o.npu_node("n2", mode="vm-passthrough"), o.vm("vms", "v1", running=False))


def _vm_to_run(apiserver):
    """_vm, the simulated virt-controller, and v3 with an NPU, stopped, running on n2 once started."""
    _vm(apiserver)
    apiserver.simulate_kubevirt = True
    apiserver.add(o.vm("vms", "v3", running=False, host_devices=["rebellions.ai/RBLN-CA22_PF"], node="n2"))


def _pool(apiserver):
    """n2 beside n1, both labelled pool=a; n2 runs an NPU pod."""
    node = o.npu_node("n2", labels={"pool": "a"})
    apiserver.add(node, o.pod("default", "npu-2", node="n2", owner_kind="ReplicaSet", owner_name="web",
                              requests={"rebellions.ai/npu": "1"}))
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(pool="a"))


def _refused_pool(apiserver):
    """_pool, and on n2 a pod nothing recreates (refused without --force)."""
    _pool(apiserver)
    apiserver.add(o.pod("default", "bare", node="n2", requests={"rebellions.ai/npu": "1"}))


def _vm_with_npu(apiserver):
    _vm(apiserver)
    apiserver.add(o.vm("vms", "v2", running=False, host_devices=["rebellions.ai/RBLN-CA22_PF"]))


def _vm_staged(apiserver):
    """_vm, and v4 running with 1 NPU on n2 while its spec asks for 2: KubeVirt's RestartRequired on it."""
    _vm(apiserver)
    vm = o.vm("vms", "v4", host_devices=["rebellions.ai/RBLN-CA22_PF"] * 2)
    vm["status"]["conditions"] = [{"type": "RestartRequired", "status": "True", "lastProbeTime": None,
                                   "lastTransitionTime": "2026-12-04T07:04:05Z",
                                   "message": "a non-live-updatable field was changed in the template spec"}]
    apiserver.add(vm, o.vmi("vms", "v4", "n2", ["rebellions.ai/RBLN-CA22_PF"]))


def _switched(apiserver):
    """n1 switched to vm (Events on it), then an unfinished switch's record on it that no Event tells of."""
    r = cli("node", "set-mode", "vm", "n1", "--yes", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    record = {"target": "container", "from": "vm-passthrough", "started": "2026-12-02T10:00:00Z",
              "cordoned_by_rblnctl": False, "step": "evict"}
    apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"].setdefault("annotations", {}).update(
        {"rebellions.ai/rblnctl.set-mode": json.dumps(record)}))


SCENARIOS = [
    Scenario("ClusterStatus", ("status",)),
    Scenario("VmNpuChange", ("vm", "attach", "v1", "-n", "vms", "--npus", "2", "--dry-run"), setup=_vm),
    Scenario("VmNpuChange", ("vm", "attach", "v1", "-n", "vms", "--npus", "2"), setup=_vm),
    Scenario("VmNpuChange", ("vm", "detach", "v2", "-n", "vms"), setup=_vm_with_npu),
    Scenario("VmNpuList", ("vm", "list", "-A"), setup=_vm_with_npu),
    Scenario("VmNpuList", ("vm", "list", "-A"), setup=_vm_staged),
    Scenario("VmNpuChange", ("vm", "attach", "v4", "-n", "vms", "--npus", "3", "--next-restart"), setup=_vm_staged),
    Scenario("VmDiagnosis", ("vm", "diagnose", "v2", "-n", "vms"), setup=_vm_with_npu, exit_code=1),
    Scenario("NpuNodeList", ("node", "list")),
    Scenario("VmFit", ("vm", "fit", "--npus", "1"), setup=_vm),
    Scenario("VmLifecycle", ("vm", "start", "v3", "-n", "vms", "--dry-run"), setup=_vm_to_run),
    Scenario("VmLifecycle", ("vm", "start", "v3", "-n", "vms", "--wait"), setup=_vm_to_run),
    Scenario("VmLifecycle", ("vm", "stop", "v3", "-n", "vms", "--yes"), setup=_vm_to_run),  # stopped: a no-op
    Scenario("VmFit", ("vm", "fit", "--npus", "2", "--count", "2"), setup=_vm, exit_code=1),
    Scenario("NodeHistory", ("node", "history", "n1"), setup=_switched),
    Scenario("NodeHistory", ("node", "history", "n1")),  # nothing on record
    Scenario("ModeSwitch", ("node", "set-mode", "vm", "n1", "--dry-run"), setup=_vm_pod),
    Scenario("ModeSwitch", ("node", "set-mode", "vm", "n1", "--yes"), setup=_vm_pod),
    Scenario("ModeSwitch", ("node", "set-mode", "container", "n1", "--yes")),  # already there: a no-op
    Scenario("NodeDrain", ("node", "drain", "n1", "--dry-run"), setup=_vm_pod),
    Scenario("NodeDrain", ("node", "drain", "n1", "--yes"), setup=_vm_pod),
    Scenario("ModeSwitchList", ("node", "set-mode", "vm", "-l", "pool=a", "--dry-run"), setup=_pool),
    Scenario("ModeSwitchList", ("node", "set-mode", "vm", "n1", "n2", "--max-unavailable", "2", "--yes"),
             setup=_pool),
    Scenario("ModeSwitchList", ("node", "set-mode", "vm", "n1", "ghost", "--continue-on-error", "--yes"),
             exit_code=6),  # ghost cannot be planned: plan null, refused; n1 switched: partial
    Scenario("ModeRehearsal", ("node", "set-mode", "vm", "-l", "pool=a", "--rehearse"), setup=_pool),
    Scenario("ModeRehearsal", ("node", "set-mode", "vm", "n1", "n2", "--rehearse"), setup=_refused_pool,
             exit_code=1),
    Scenario("NodeDrainList", ("node", "drain", "-l", "pool=a", "--dry-run"), setup=_pool),
    Scenario("NodeDrainList", ("node", "drain", "n1", "n2", "--yes"), setup=_pool),
    Scenario("KubeVirtStatus", ("kubevirt", "status")),
    Scenario("KubeVirtGateChange", ("kubevirt", "enable-gates", "--dra", "--dry-run")),
    Scenario("KubeVirtGateChange", ("kubevirt", "enable-gates", "--dra")),
    Scenario("KubeVirtGateChange", ("kubevirt", "disable-gates", "HostDevicesWithDRA", "--add-to-disabled", "--yes")),
    Scenario("KubeVirtDeviceChange", ("kubevirt", "permit-devices", "--resource-name", "RBLN-CA22_PF", "--dry-run")),
    Scenario("KubeVirtDeviceChange", ("kubevirt", "permit-devices", "--resource-name", "RBLN-CA22_PF")),
    Scenario("ResourceMigration", ("kubevirt", "migrate-resources", "--dry-run"), setup=_old_names),
    Scenario("ResourceMigration", ("kubevirt", "migrate-resources"), setup=_old_names),
    Scenario("ClusterPolicy", ("policy", "show")),
    Scenario("MethodChange", ("policy", "set-method", "dra", "--dry-run"), exit_code=1),  # devicePlugin serves n1
    Scenario("MethodChange", ("policy", "set-method", "dra", "--yes", "--timeout", "30s", "--convert-vms"),
             setup=_ready_for_dra),
    Scenario("MethodChange", ("policy", "set-method", "sandbox", "--yes")),  # already sandbox: no write
    Scenario("PreflightReport", ("preflight",), exit_code=1),
    Scenario("Version", ("version",)),
    Scenario("Version", ("version", "--client")),
    Scenario("PreflightReport", ("preflight", "--local"), cluster=False),
    Scenario("VfioStatus", ("vfio", "status"), cluster=False),
    Scenario("VfioStatus", ("vfio", "status", "--all-vendors"), cluster=False, setup=lambda k: _shared_group(k)),
    Scenario("VfioChange", ("vfio", "bind", "--all", "--dry-run"), cluster=False),
    Scenario("VfioChange", ("vfio", "bind", "--all", "--yes"), cluster=False),
    Scenario("VfioChange", ("vfio", "unbind", A, "--yes"), cluster=False),
    Scenario("VfioChange", ("vfio", "recover", "--all", "--yes"), cluster=False),
]


def test_every_documented_kind_is_run_by_a_scenario():
    assert {s.kind for s in SCENARIOS} == set(schemas())


@pytest.fixture
def cluster(operated):
    return operated[0]


@pytest.fixture
def host(tmp_path, monkeypatch, mocker):
    guard_real_host(monkeypatch)
    kern = npu_node(tmp_path, 2)
    monkeypatch.setattr(vfio_writer, "default_writer", lambda: kern.writer)
    mocker.patch("os.geteuid", return_value=0)
    return kern


def run(scenario, request, tmp_path, *, settle=None) -> str:
    """Set the scenario's world up, run its command with -o json; its stdout (the exit code checked). `settle(world)`
    runs after the setup (waits for the simulated operator, where a document must be the same on every run)."""
    if scenario.cluster:
        apiserver = request.getfixturevalue("cluster")
        if scenario.setup:
            scenario.setup(apiserver)
        if settle:
            settle(apiserver)
        r = cli(*scenario.args, "-o", "json", server=apiserver.url)
    else:
        kern = request.getfixturevalue("host")
        if scenario.setup:
            scenario.setup(kern)
        extra = ["--root", str(kern.root)]
        if scenario.args[0] == "preflight":
            extra = ["--root", str(ht.build_host(tmp_path / "h", ht.intel_bare_metal()).root)]
        elif scenario.args[1] != "status":
            extra += ["--state-file", str(kern.root / "state.json")]
        r = cli(*scenario.args, *extra, "-o", "json")
    assert r.exit_code == scenario.exit_code, r.stderr
    return r.stdout


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: " ".join(s.args))
def test_json_output_matches_the_documented_schema(scenario, request, tmp_path):
    doc = json.loads(run(scenario, request, tmp_path))
    assert doc["kind"] == scenario.kind
    jsonschema.Draft202012Validator(schemas()[scenario.kind]).validate(doc)  # the schema was checked in schemas()


def test_a_field_the_schema_does_not_list_fails_validation():
    """The schemas are closed: an undocumented field is caught, not silently accepted."""
    doc = {"apiVersion": "rblnctl.rebellions.ai/v1alpha1", "kind": "NpuNodeList", "items": [], "extra": 1}
    with pytest.raises(jsonschema.ValidationError, match="extra"):
        jsonschema.Draft202012Validator(schemas()["NpuNodeList"]).validate(doc)
