"""`rblnctl vm ...` against the fake API server: flags, exit codes, stdout vs stderr, zero-write guarantees."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli, closed_port_url
from tests.vm.support import CA22, CA25, NS, NVIDIA, dra_cluster, host_devices, sandbox_cluster

def vm_cli(apiserver, *args, input=None):
    return cli(*args, server=apiserver.url, input=input)


# -- attach ---------------------------------------------------------------------------------------------------


def test_attach_sandbox(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[NVIDIA]))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["kind"], doc["apiVersion"]) == ("VmNpuChange", "rblnctl.rebellions.ai/v1alpha1")
    plan = doc["plan"]
    assert (plan["method"], plan["resource"], plan["npusBefore"], plan["npusAfter"]) == ("sandbox", CA22, 0, 2)
    assert doc["result"]["changed"] is True and plan["added"] == ["npu0", "npu1"]
    assert "VM vms/v1: 0 -> 2 NPU(s)" in r.stderr
    assert [d["name"] for d in host_devices(apiserver)] == ["gpu0", "npu0", "npu1"]


def test_attach_table_shows_each_device(apiserver):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[NVIDIA]))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "VirtualMachine vms/v1: 0 -> 2 NPU(s) (dra, rbln-npu-2)"
    assert lines[2].split() == ["DEVICE", "METHOD", "SOURCE", "CHANGE"]
    assert lines[3].split() == ["npu0", "dra", f"{o.vm_claim(NS, 'v1')}/npu0", "added"]
    assert "ResourceClaimTemplate vms/rbln-npu-2: create" in r.stdout
    assert "other host devices kept: gpu0" in r.stderr


def test_attach_rerun_is_a_noop(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    apiserver.clear_requests()
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS)
    assert r.exit_code == 0 and "already has 1 NPU(s)" in r.stderr and apiserver.writes() == []


def test_attach_ambiguous_lists_the_choices(apiserver):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    apiserver.add(o.vm(NS, "v1", running=False))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS)
    assert r.exit_code == 2
    assert CA22 in r.stderr and CA25 in r.stderr and "(pass --product)" in r.stderr  # issue 39: the product
    assert apiserver.writes() == []
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--product", "RBLN-CA25")
    assert r.exit_code == 0, r.stderr
    assert host_devices(apiserver) == [{"name": "npu0", "deviceName": CA25}]


def test_attach_client_dry_run_writes_nothing(apiserver):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    apiserver.clear_requests()
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == []
    assert "patch (application/json-patch+json):" in r.stdout and "dry run: nothing was sent" in r.stderr


def test_attach_server_dry_run(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False))
    apiserver.clear_requests()
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--dry-run=server", "-o", "json")
    assert r.exit_code == 0, r.stderr
    (w,) = apiserver.writes()
    assert w.query["dryRun"] == ["All"] and host_devices(apiserver) == []
    assert json.loads(r.stdout)["result"]["serverDryRun"] is True


def test_attach_refusal_names_the_fixing_command(apiserver):
    sandbox_cluster(apiserver, gates=())
    apiserver.add(o.vm(NS, "v1", running=False))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS)
    assert r.exit_code == 1
    assert "refusing to change the NPUs of VM vms/v1" in r.stderr
    # the connection kept, the VM's -n not (to kubevirt, -n names the KubeVirt CR's namespace): issue 29
    assert f"`rblnctl --server {apiserver.url} kubevirt enable-gates`" in r.stderr and apiserver.writes() == []


def test_attach_running_vm_is_refused_without_restart(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1"), o.vmi(NS, "v1", "n1"))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS)
    assert r.exit_code == 1 and "is running" in r.stderr and "; pass --restart to stop it" in r.stderr
    assert apiserver.writes() == []


def test_attach_restart_asks_first(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1"), o.vmi(NS, "v1", "n1"))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--restart")
    assert r.exit_code == 2 and "pass --yes" in r.stderr and apiserver.writes() == []


def test_attach_restart_on_a_simulated_vm(apiserver):
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", node="n1"), o.vmi(NS, "v1", "n1"))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--restart", "--yes", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plan"]["restart"] is True and doc["result"]["restarted"] is True and doc["result"]["ready"] is True
    for step in ("stopping VM vms/v1", "patching VM vms/v1", "starting VM vms/v1", "restarted and Ready"):
        assert step in r.stderr
    vmi = apiserver.get("VirtualMachineInstance", "v1", NS)
    assert vmi["spec"]["domain"]["devices"]["hostDevices"] == [{"name": "npu0", "deviceName": CA22}]


@pytest.mark.parametrize("args", [["vm", "attach", "Bad_VM"], ["vm", "attach", "v1", "--resource", "a",
                                                                 "--product", "b"],
                                  ["vm", "attach", "v1", "--method", "dra", "--resource", "x"],
                                  ["vm", "attach", "v1", "--npus", "65"], ["vm", "attach", "v1", "--method", "pci"],
                                  ["vm", "detach", "v1", "--all", "--device", "npu0"],
                                  ["vm", "attach", "v1", "--restart", "--timeout", "soon"],
                                  ["vm", "diagnose", "v1", "-n", "Bad_NS"]])
def test_bad_input_fails_before_connecting(apiserver, args):
    r = vm_cli(apiserver, *args)
    assert r.exit_code == 2, r.stderr
    assert apiserver.requests == []


# -- detach ------------------------------------------------------------------------------------------------------


def test_detach(apiserver):
    dra_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[NVIDIA]))
    assert vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2").exit_code == 0
    r = vm_cli(apiserver, "vm", "detach", "v1", "-n", NS, "-o", "yaml")
    assert r.exit_code == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert doc["plan"]["npusAfter"] == 0 and doc["result"]["templatesDeleted"] == ["rbln-npu-2"]
    assert host_devices(apiserver) == [NVIDIA] and apiserver.list("ResourceClaimTemplate", NS) == []
    assert "deleting ResourceClaimTemplate vms/rbln-npu-2 (no VM uses it any more)" in r.stderr


def test_detach_one_device(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, CA22]))
    r = vm_cli(apiserver, "vm", "detach", "v1", "-n", NS, "--device", "npu1")
    assert r.exit_code == 0, r.stderr
    assert "npu1" in r.stdout and "removed" in r.stdout
    assert host_devices(apiserver) == [{"name": "npu0", "deviceName": CA22}]
    r = vm_cli(apiserver, "vm", "detach", "v1", "-n", NS, "--device", "npu1")  # again: it is gone, nothing to do
    assert r.exit_code == 0 and "no host device 'npu1' (its NPU devices: npu0): nothing to detach" in r.stderr
    # issue 39 (9): a name no detach removed (npu7 beside npu0) is not found, as kubectl delete
    r = vm_cli(apiserver, "vm", "detach", "v1", "-n", NS, "--device", "npu7")
    assert r.exit_code == 1 and "no host device 'npu7' (its NPU devices: npu0); nothing was detached" in r.stderr
    assert "as asked" not in r.stderr + r.stdout
    assert host_devices(apiserver) == [{"name": "npu0", "deviceName": CA22}]


# -- manifest ----------------------------------------------------------------------------------------------------


def test_manifest_offline_needs_no_cluster():
    """Every choice given: a cluster that cannot be reached only costs the warnings (and says what to do with a
    template a refused VM would leave, since it could not tell)."""
    r = cli("vm", "manifest", "v1", "--method", "dra", "--npus", "2", server=closed_port_url())
    assert r.exit_code == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    assert [d["kind"] for d in docs] == ["ResourceClaimTemplate", "VirtualMachine"]
    assert "kubectl delete resourceclaimtemplate rbln-npu-2" in r.stderr


def test_manifest_warns_of_the_gates_that_will_refuse_the_vm_and_the_template_left_behind(apiserver):
    """Issue 27 (finding 5): KubeVirt refuses the VM while HostDevices is off (and, for DRA, HostDevicesWithDRA is in
    disabledFeatureGates), and `kubectl apply` has created the template by then. Before, `vm manifest --method dra`
    read nothing and said nothing."""
    dra_cluster(apiserver, gates=(), disabled=("HostDevicesWithDRA",))
    r = vm_cli(apiserver, "vm", "manifest", "v1", "-n", NS, "--method", "dra")
    assert r.exit_code == 0, r.stderr
    assert "KubeVirt will refuse this VM: HostDevices: off" in r.stderr
    assert "HostDevicesWithDRA: off (in disabledFeatureGates)" in r.stderr
    assert f"`rblnctl --server {apiserver.url} kubevirt enable-gates --dra`" in r.stderr
    assert f"kubectl delete resourceclaimtemplate rbln-npu-1 -n {NS}" in r.stderr
    assert apiserver.writes() == [] and list(yaml.safe_load_all(r.stdout))[-1]["kind"] == "VirtualMachine"
    sandbox = vm_cli(apiserver, "vm", "manifest", "v2", "-n", NS, "--method", "sandbox", "--resource", CA22)
    assert "KubeVirt will refuse this VM: HostDevices: off" in sandbox.stderr
    assert "resourceclaimtemplate" not in sandbox.stderr  # no template to leave behind


def test_manifest_warns_when_the_dra_deviceclass_does_not_exist(apiserver):
    """On operator v0.3.0 there is no vfio- class: the VM is admitted and its launcher pod stays Pending."""
    dra_cluster(apiserver, device_class=False)
    r = vm_cli(apiserver, "vm", "manifest", "v1", "-n", NS, "--method", "dra")
    assert r.exit_code == 0, r.stderr
    assert "DeviceClass vfio-npu.rebellions.ai not found: KubeVirt admits the VM, but its virt-launcher pod stays " \
           "Pending" in r.stderr
    assert "will refuse" not in r.stderr and "resourceclaimtemplate" not in r.stderr  # admitted: nothing left behind


def test_manifest_without_namespace_says_which_namespace_its_claim_name_belongs_to(apiserver):
    dra_cluster(apiserver)
    r = vm_cli(apiserver, "vm", "manifest", "v1", "--method", "dra")
    assert r.exit_code == 0, r.stderr
    claim = o.vm_claim("default", "v1")
    assert f"the pod-level claim name {claim} in this VM is derived from namespace default" in r.stderr
    assert claim in r.stdout
    r = vm_cli(apiserver, "vm", "manifest", "v1", "-n", NS, "--method", "dra")
    assert r.exit_code == 0 and "pod-level claim name" not in r.stderr and r.stderr == "", r.stderr


def test_manifest_picks_the_resource_from_the_cluster(apiserver):
    sandbox_cluster(apiserver)
    r = vm_cli(apiserver, "vm", "manifest", "v1", "-n", NS, "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "List"
    (vm,) = doc["items"]
    assert vm["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"] == [{"name": "npu0", "deviceName": CA22}]
    assert apiserver.writes() == []


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize("method", ["sandbox", "dra"])
def test_manifest_is_accepted_by_kubectl(apiserver, kubeconfig, tmp_path, method):
    """Real kubectl applies the manifest: client-side (no request body leaves kubectl), then server-side
    against the fake (every write dryRun=All). The fake serves no OpenAPI, hence --validate=false."""
    args = ["vm", "manifest", "v1", "-n", NS, "--method", method, "--npus", "2"]
    if method == "sandbox":
        args += ["--resource", CA22]
    r = vm_cli(apiserver, *args)
    assert r.exit_code == 0, r.stderr
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    base = ["kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'cache'}", "apply",
            "--validate=false", "-f", "-"]
    client = subprocess.run([*base, "--dry-run=client"], input=r.stdout, capture_output=True, text=True, timeout=60,
                            env=env)
    assert client.returncode == 0, client.stderr
    assert "virtualmachine.kubevirt.io/v1 created (dry run)" in client.stdout
    apiserver.clear_requests()
    server = subprocess.run([*base, "--dry-run=server"], input=r.stdout, capture_output=True, text=True,
                            timeout=60, env=env)
    assert server.returncode == 0, server.stderr
    posts = [w for w in apiserver.writes() if w.method == "POST"]
    assert posts and all(w.query.get("dryRun") == ["All"] for w in posts)
    assert {w.body["kind"] for w in posts} == ({"VirtualMachine", "ResourceClaimTemplate"} if method == "dra"
                                               else {"VirtualMachine"})
    assert apiserver.list("VirtualMachine", NS) == []


# -- list ----------------------------------------------------------------------------------------------------------


def test_list_all_namespaces(apiserver):
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22, CA22]), o.vmi(NS, "v1", "n1", [CA22, CA22]),
                  o.vm("team", "v2", running=False, host_devices=[CA22]), o.vm(NS, "plain"))
    r = vm_cli(apiserver, "vm", "list", "-A")
    assert r.exit_code == 0, r.stderr
    lines = [line.split() for line in r.stdout.splitlines()]
    assert lines[0] == ["NAMESPACE", "NAME", "STATUS", "NODE", "NPUS", "METHOD", "DEVICES"]
    # issue 21: devices are compact in the table (`2x RBLN-CA22_PF`), every entry in -o wide
    assert lines[1] == ["team", "v2", "Stopped", "<none>", "1", "sandbox", "1x", "RBLN-CA22_PF"]
    assert lines[2] == [NS, "v1", "Running", "n1", "2", "sandbox", "2x", "RBLN-CA22_PF"]
    wide = [line.split() for line in vm_cli(apiserver, "vm", "list", "-A", "-o", "wide").stdout.splitlines()]
    assert wide[0][-5:] == ["KIND", "HELD", "HOST", "DEVICES", "DEVICES"]
    assert wide[2][-5:] == ["VirtualMachine", "2", f"npu0={CA22},npu1={CA22}", "2x", "RBLN-CA22_PF"]
    r = vm_cli(apiserver, "vm", "list", "-n", NS, "-o", "json")
    doc = json.loads(r.stdout)
    assert doc["kind"] == "VmNpuList" and [i["name"] for i in doc["items"]] == ["v1"]
    assert doc["items"][0]["runningNpus"] == 2 and doc["items"][0]["devices"][0]["resource"] == CA22
    r = vm_cli(apiserver, "vm", "list", "-n", NS, "-o", "name")
    assert r.stdout == "virtualmachine.kubevirt.io/v1\n"


def test_list_nothing(apiserver):
    r = vm_cli(apiserver, "vm", "list")
    assert r.exit_code == 0 and r.stdout == "" and "No VM with NPUs found in namespace default" in r.stderr


# -- diagnose -------------------------------------------------------------------------------------------------------


def test_diagnose_healthy_exits_0(apiserver):
    sandbox_cluster(apiserver)
    with SimulatedOperator(apiserver) as op:
        op.wait_idle()
        apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", "n1", [CA22]),
                      o.virt_launcher(NS, "v1", "n1", resources={CA22: "1"}))
        r = vm_cli(apiserver, "vm", "diagnose", "v1", "-n", NS, "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "VmDiagnosis" and doc["ok"] is True and doc["broken"] is None
    assert all(link["status"] == "PASS" for link in doc["links"])


def test_diagnose_broken_link_exits_1_with_the_remedy(apiserver):
    sandbox_cluster(apiserver, permitted=False)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))
    r = vm_cli(apiserver, "vm", "diagnose", "v1", "-n", NS)
    assert r.exit_code == 1
    rows = [line.split(None, 2) for line in r.stdout.splitlines()[2:] if line and not line.startswith(
        ("broken", "remedy"))]
    assert [row[:2] for row in rows[1:]] == [["VirtualMachine", "PASS"], ["NpuRequest", "PASS"],
                                             ["FeatureGates", "PASS"], ["VmModeNodes", "PASS"],
                                             ["PermittedHostDevice", "FAIL"]]
    assert "broken link: PermittedHostDevice (KubeVirt does not permit its NPU resource)" in r.stdout
    assert (f"remedy: permit {CA22} as a KubeVirt host device: `rblnctl --server {apiserver.url} kubevirt "
            f"permit-devices --resource-name {CA22}`") in r.stdout
    assert r.stderr == ("error: VM vms/v1: KubeVirt does not permit its NPU resource "
                        "(broken link: PermittedHostDevice)\n")
    doc = json.loads(vm_cli(apiserver, "vm", "diagnose", "v1", "-n", NS, "-o", "json").stdout)
    fail = doc["links"][-1]
    assert fail["remedyCommand"] == ["rblnctl", "--server", apiserver.url, "kubevirt", "permit-devices",
                                     "--resource-name", CA22]
    assert fail["failure"] == "KubeVirt does not permit its NPU resource" and doc["links"][0]["failure"] is None


def test_diagnose_unknown_vm(apiserver):
    sandbox_cluster(apiserver)
    r = vm_cli(apiserver, "vm", "diagnose", "ghost", "-n", NS)
    assert r.exit_code == 1 and f"`rblnctl --server {apiserver.url} vm manifest ghost -n {NS} --npus 1`" in r.stdout
    # what is wrong, not the link's title (which reads as a fact), and no "no NPU requested" for a VM that is not there
    assert r.stdout.startswith("VM vms/ghost: not found\n")
    assert "broken link: VirtualMachine (VirtualMachine vms/ghost not found)" in r.stdout
    assert "exists" not in r.stdout + r.stderr
    assert r.stderr == "error: VirtualMachine vms/ghost not found\n"


# -- status ------------------------------------------------------------------------------------------------------------


def test_status_counts_vms_holding_npus_per_node(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", "n1", [CA22]),
                  o.vm(NS, "v2", host_devices=[CA22]), o.vmi(NS, "v2", "n1", [CA22]),
                  o.vm(NS, "off", running=False, host_devices=[CA22]))
    r = vm_cli(apiserver, "status")
    assert r.exit_code == 0, r.stderr
    table = [line.split() for line in r.stdout.splitlines() if line.startswith(("NAME", "n1 ", "n9 "))]
    header, n1, n9 = table
    assert header[:7] == ["NAME", "MODE", "STATUS", "NPUS", "ALLOCATED", "FREE", "VMS"]
    assert n1[6] == "2" and n9[6] == "0"
    wide = vm_cli(apiserver, "status", "-o", "wide").stdout
    assert f"{NS}/v1,{NS}/v2" in wide
    doc = json.loads(vm_cli(apiserver, "status", "-o", "json").stdout)
    assert doc["npuVms"] == {"n1": [f"{NS}/v1", f"{NS}/v2"]}


@pytest.mark.parametrize(("args", "message"), [
    (("--cpu", "4", "--instancetype", "u1.large"), "--cpu cannot be combined with --instancetype"),
    (("--memory", "16Gi", "--instancetype", "u1.large"), "--memory cannot be combined with --instancetype"),
    (("--memory", "16GB",), "invalid --memory '16GB'"),
    (("--instancetype", "vmi/x"), "unknown kind 'vmi'"),
    (("--pvc", "root", "--datavolume-source", "https://x/y.img"), "--pvc and --datavolume-source cannot be combined"),
    (("--image", "quay.io/x:1", "--pvc", "root"), "--image and --pvc cannot be combined"),
    (("--datavolume-source", "https://x/y.img"), "needs --disk-size"),
    (("--disk-size", "10Gi",), "--disk-size sizes the DataVolume of --datavolume-source"),
    (("--datavolume-source", "s3://bucket/x"), "give an http://, https:// or docker:// URL"),
    (("--product", "RBLN-CA22", "--node-product", "RBLN-CA25"), "name different products"),
    (("--node-product", "CA 22"), "invalid product"),
])
def test_manifest_flag_combinations_are_bad_input_before_connecting(args, message):
    """Exit 2 with one line before any connection: the server URL points at nothing (connecting would be exit 3)."""
    base = ("--method", "sandbox") + (() if "--product" in args else ("--resource", CA22))
    r = cli("vm", "manifest", "v1", *base, *args, server=closed_port_url())
    assert r.exit_code == 2, r.stderr
    assert message in r.stderr and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1


def test_manifest_node_product_warns_on_stderr_and_keeps_stdout_the_manifest(apiserver):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    r = vm_cli(apiserver, "vm", "manifest", "v1", "-n", NS, "--node-product", "ca25", "-o", "json")
    assert r.exit_code == 0, r.stderr
    (vm,) = json.loads(r.stdout)["items"]
    spec = vm["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"rebellions.ai/npu.product": "RBLN-CA25"}
    assert spec["domain"]["devices"]["hostDevices"] == [{"name": "npu0", "deviceName": CA25}]
    assert "warning: no vm-passthrough node is labelled rebellions.ai/npu.product=RBLN-CA25" in r.stderr
    assert apiserver.writes() == []


def test_absurd_npu_counts_are_bad_input_before_anything_is_built():
    """A typo such as --npus 20000 used to build a spec of that size (minutes, gigabytes); now exit 2 at once."""
    r = cli("vm", "manifest", "big", "--npus", "99999999999999")
    assert r.exit_code == 2 and "1 to 64 NPUs" in r.stderr


def test_list_flags_a_claim_collision_in_status_and_json(apiserver):
    claims = [o.template_claim("rbln-npu", "rbln-npu-1")]
    devices = [o.dra_host_device("npu0", claim="rbln-npu")]
    for ns in ("a", "b"):
        apiserver.add(o.vm(ns, "vm", host_devices=devices, resource_claims=claims),
                      o.vmi(ns, "vm", "n1", devices, resource_claims=claims))
    r = vm_cli(apiserver, "vm", "list", "-A")
    assert r.exit_code == 0, r.stderr
    assert all("Running,ClaimCollision" in line for line in r.stdout.splitlines()[1:])
    assert "has a DRA claim of the same name as b/vm" in r.stderr
    r = vm_cli(apiserver, "vm", "list", "-A", "-o", "json")
    items = json.loads(r.stdout)["items"]
    assert [i["claimCollisions"] for i in items] == [["b/vm"], ["a/vm"]]


def test_attach_npus_0_takes_every_npu_as_the_docs_say(apiserver):
    """Found by the hostile review: docs/vm.md says `attach` takes 0 too, the library does, the CLI refused it
    (`0 is not in the range x>=1`)."""
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22, CA22]))
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "0")
    assert r.exit_code == 0, r.stderr
    assert host_devices(apiserver) == []
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "65")
    assert r.exit_code == 2 and "must be 0 to 64" in r.stderr
