"""The seed's procedure end to end on the real operator v0.3.0 and the real KubeVirt v1.9.0 (../shared/stack,
DRIVER_READY=1: the sandbox plugin's driver-ready marker exists): set-mode vm, enable-gates, permit-devices
--from-cluster, vm manifest | kubectl apply, vm start --wait, vm diagnose, and set-mode container refused while the
VM runs; preflight's verdict before and after; and what stops a DRA manifest on this release (issue 27).

Stack nodes: npu-node-1 RBLN-CA12 x4 (sandbox resource ATOM_PT), npu-node-2 RBLN-CA25 x4 (ATOM_MAX_PT), npu-node-3
RBLN-CA22 x2 (no sandbox resourceList entry). Each test switches back what it switched (KvBackend.reset restores
labels, but the operator must converge the node back before the next test reads it).
"""

from __future__ import annotations

import json
import subprocess

import yaml

NODE = "npu-node-1"
ATOM_PT = "rebellions.ai/ATOM_PT"


def kubectl_apply(kv, manifest: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", f"--kubeconfig={kv.kubeconfig}", "apply", "-f", "-"], input=manifest,
                          capture_output=True, text=True, timeout=60)


def preflight(kv) -> tuple[int, dict]:
    r = kv.rblnctl("preflight", "-o", "json")
    return r.exit_code, {(c["id"], c["scope"]): c for c in json.loads(r.stdout)["checks"]}


def back_to_container(kv) -> None:
    r = kv.rblnctl("node", "set-mode", "container", NODE, "--yes", "--timeout", "60s")
    assert r.exit_code == 0, r.stderr


def test_preflight_names_the_releases_resources_before_any_switch(kv_stack):
    """Finding 8: chart v0.3.0 advertises its policy's resourceList names; before, the remedy named RBLN-CA22_PF."""
    kv = kv_stack
    code, checks = preflight(kv)
    permitted = checks[("kubevirt.permitted-devices", "cluster")]
    assert "RBLN-CA22_PF" not in permitted["remedy"] + permitted["evidence"]
    # npu-node-1's RBLN-CA12, the first product listed, in a whole command with the user's flags
    assert f"permit-devices --resource-name {ATOM_PT}`" in permitted["remedy"]
    assert checks[("nodes.vm-mode", "cluster")]["status"] == "WARN"
    assert {checks[("node.vm-npus", n)]["status"] for n in ("npu-node-1", "npu-node-2", "npu-node-3")} == {"SKIP"}


def test_the_seed_procedure_end_to_end(kv_stack):
    kv = kv_stack
    ns = kv.namespace
    r = kv.rblnctl("node", "set-mode", "vm", NODE, "--yes", "--timeout", "60s", "-o", "json")
    assert r.exit_code == 0, r.stderr
    try:
        node = kv.api.get("Node", NODE)
        assert node["status"]["allocatable"][ATOM_PT] == "4" and not node["spec"].get("unschedulable")
        assert kv.rblnctl("kubevirt", "enable-gates", "--yes").exit_code == 0
        r = kv.rblnctl("kubevirt", "permit-devices", "--from-cluster", "--yes")
        assert r.exit_code == 0, r.stderr
        entries = kv.kubevirt_cr()["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
        assert entries == [{"pciVendorSelector": "1EFF:1120", "resourceName": ATOM_PT,
                            "externalResourceProvider": True}]
        code, checks = preflight(kv)
        assert code == 0 and checks[("node.vm-npus", NODE)]["status"] == "PASS"
        assert checks[("node.vm-npus", NODE)]["evidence"] == f"{ATOM_PT}=4"
        assert checks[("nodes.vm-mode", "cluster")]["status"] == "PASS"

        r = kv.rblnctl("vm", "manifest", "v1", "-n", ns, "--npus", "2")
        assert r.exit_code == 0 and r.stderr == "", r.stderr  # nothing will stop it: no warning
        vm = list(yaml.safe_load_all(r.stdout))[-1]
        assert [d["deviceName"] for d in vm["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]] == \
            [ATOM_PT, ATOM_PT]
        applied = kubectl_apply(kv, r.stdout)
        assert applied.returncode == 0, applied.stderr
        r = kv.rblnctl("vm", "start", "v1", "-n", ns, "--wait", "--timeout", "60s")
        assert r.exit_code == 0, r.stderr
        r = kv.rblnctl("vm", "diagnose", "v1", "-n", ns, "-o", "json")
        assert r.exit_code == 0, r.stderr
        links = json.loads(r.stdout)["links"]
        assert {link["status"] for link in links} == {"PASS"}, links

        r = kv.rblnctl("node", "set-mode", "container", NODE, "--yes", "--timeout", "30s")
        assert r.exit_code == 1 and f"VM {ns}/v1" in r.stderr, r.stderr
        assert kv.api.get("Node", NODE)["metadata"]["labels"]["rebellions.ai/npu.workload.config"] == "vm-passthrough"
        kv.api.delete("VirtualMachine", "v1", ns)
        kv.wait_no_vmi("v1")
        kv.api.wait_for(lambda: not kv.launcher_pods("v1"), timeout_s=60, message="the launcher pod of v1 gone")
    finally:
        back_to_container(kv)


def test_a_dra_manifest_on_v030_warns_of_its_class_and_of_the_template_a_refused_vm_leaves(kv_stack):
    """Finding 5 and the DeviceClass check on real KubeVirt: with HostDevices off virt-api refuses the VM after
    kubectl created its template; vm manifest said nothing before. Operator v0.3.0 creates no vfio- DeviceClass, so
    vm attach --method dra refuses naming it."""
    kv = kv_stack
    ns = kv.namespace
    kv.set_gates([])
    r = kv.rblnctl("vm", "manifest", "d1", "-n", ns, "--method", "dra")
    assert r.exit_code == 0, r.stderr
    assert "KubeVirt will refuse this VM: HostDevices: off" in r.stderr
    assert "DeviceClass vfio-npu.rebellions.ai not found" in r.stderr
    cleanup = f"kubectl delete resourceclaimtemplate rbln-npu-1 -n {ns}"
    assert cleanup in r.stderr
    applied = kubectl_apply(kv, r.stdout)
    assert applied.returncode != 0 and "Host Devices feature gate is not enabled" in applied.stderr
    assert kv.vm("d1") is None and [t["metadata"]["name"] for t in kv.api.list("ResourceClaimTemplate", ns)] == \
        ["rbln-npu-1"]  # what the warning said would happen
    gone = subprocess.run([*cleanup.split()[:1], f"--kubeconfig={kv.kubeconfig}", *cleanup.split()[1:]],
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 0 and kv.api.list("ResourceClaimTemplate", ns) == [], gone.stderr

    kv.set_gates(["HostDevices"])
    kv.api.create({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "plain",
                   "namespace": ns}, "spec": {"runStrategy": "Halted", "template": {"spec": {
                       "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}},
                       "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora"}}]}}}})
    kv.mark()
    r = kv.rblnctl("vm", "attach", "plain", "-n", ns, "--method", "dra", "--yes")
    assert r.exit_code == 1 and "DeviceClass vfio-npu.rebellions.ai not found" in r.stderr, r.stderr
    assert kv.writes() == []


def test_a_node_whose_product_no_sandbox_entry_covers_is_refused_before_any_write(kv_stack):
    """npu-node-3 carries RBLN-CA22, which chart v0.3.0's sandboxDevicePlugin.resourceList does not list: the operator
    would switch it, and no sandbox resource would ever appear."""
    kv = kv_stack
    kv.mark()
    r = kv.rblnctl("node", "set-mode", "vm", "npu-node-3", "--yes", "--timeout", "30s")
    assert r.exit_code == 1, r.stderr
    assert "RBLN-CA22" in r.stderr and "rebellions.ai/ATOM_PT" in r.stderr
    assert kv.writes() == []
