"""`rblnctl policy show | set-method`: wiring, exit codes, stdout vs stderr, dry runs that write nothing."""

from __future__ import annotations

import json

import pytest

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.fakes.releases import NEWER
from tests.helpers import cli, closed_port_url
from rblnctl.constants import CLUSTER_POLICY_DEFAULT_NAME as POLICY


CA22 = "rebellions.ai/RBLN-CA22_PF"


def cluster(apiserver, *, method="sandbox"):
    apiserver.add(NEWER.policy(vfio_manager=True, sandbox=method == "sandbox", dra=method == "dra",
                               device_plugin=method == "sandbox"), NEWER.operator_deployment())
    apiserver.add(o.npu_node("vm0", mode=o.MODE_VM), o.npu_node("vm1", mode=o.MODE_VM))
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], permitted_pci=[("1EFF:1220", CA22)]))


@pytest.fixture
def operator(apiserver):
    op = SimulatedOperator(apiserver, release=NEWER)
    yield op
    op.stop()


def switches(apiserver):
    spec = apiserver.get("RBLNClusterPolicy", POLICY)["spec"]
    return {k: spec[k]["enabled"] for k in ("sandboxDevicePlugin", "draKubeletPlugin")}


def test_show_names_the_active_policy_its_method_components_and_the_ignored(apiserver, operator):
    cluster(apiserver)
    ignored = NEWER.policy("a-leftover", dra=True)
    ignored["status"] = {"state": "ignored"}
    apiserver.add(ignored)
    operator.start()
    assert operator.wait_idle()
    r = cli("policy", "show", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "Policy:      rbln-cluster-policy (ready)" in r.stdout and "VM method:   sandbox" in r.stdout
    rows = [line.split() for line in r.stdout.splitlines()]
    assert ["sandbox-device-plugin", "yes", "rbln-sandbox-device-plugin", "2/2", "<none>"] in rows
    assert ["dra-kubelet-plugin", "no", "<none>", "<none>", "<none>"] in rows
    assert ["a-leftover", "ignored", "dra"] in rows
    doc = json.loads(cli("policy", "show", "-o", "json", server=apiserver.url).stdout)
    assert doc["kind"] == "ClusterPolicy" and doc["active"]["vmMethod"] == "sandbox"
    assert [p["name"] for p in doc["ignored"]] == ["a-leftover"]
    vfio = next(c for c in doc["components"] if c["component"] == "vfio-manager")
    assert vfio["daemonSets"] == [{"namespace": "rbln-system", "name": "rbln-vfio-manager", "desired": 2, "ready": 2,
                                   "unavailable": 0, "allReady": True}]
    r = cli("policy", "show", "-o", "name", server=apiserver.url)
    assert r.stdout.split() == ["rblnclusterpolicy.rebellions.ai/rbln-cluster-policy",
                                "rblnclusterpolicy.rebellions.ai/a-leftover"]


def test_show_says_when_the_release_serves_no_vm_through_the_enabled_plugin(apiserver):
    from tests.fakes.releases import V0_3_0

    apiserver.add(V0_3_0.policy(vfio_manager=True, sandbox=True), V0_3_0.operator_deployment())
    r = cli("policy", "show", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "enables sandboxDevicePlugin, but" in r.stderr and "upgrade the operator to >= 0.4.4" in r.stderr


def test_show_without_the_operator_says_so(apiserver):
    r = cli("policy", "show", server=apiserver.url)
    assert r.exit_code == 0 and r.stdout == ""
    assert "note: no RBLNClusterPolicy: the operator deploys nothing" in r.stderr


def test_dry_run_shows_the_switches_and_writes_nothing(apiserver):
    cluster(apiserver)
    r = cli("policy", "set-method", "dra", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == []
    rows = [line.split() for line in r.stdout.splitlines()]
    assert ["sandboxDevicePlugin.enabled", "true", "false"] in rows
    assert ["draKubeletPlugin.enabled", "false", "true"] in rows
    assert ["kubevirt", "yes", "KubeVirt", "kubevirt/kubevirt", "v1.9.0", "for", "the", "dra", "method", ">=",
            "1.9.0"] in rows
    assert "dry run: nothing was sent" in r.stderr


@pytest.mark.parametrize(("version", "remedy"), [
    ("v1.5.0", "upgrade KubeVirt to >= 1.9.0 first (enable-gates refuses HostDevicesWithDRA on KubeVirt v1.5.0), "
               "then enable it with kubevirt enable-gates"),
    ("v1.8.2", "upgrade KubeVirt to >= 1.9.0 first"),
    ("", "enable it first, forced since the KubeVirt version is unknown: `rblnctl --server"),
])
def test_dra_gate_remedy_is_one_enable_gates_accepts(apiserver, version, remedy):
    cluster(apiserver)
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt", lambda kv: (
        kv["spec"]["configuration"]["developerConfiguration"].update(featureGates=["HostDevices"]),
        kv["status"].update(observedKubeVirtVersion=version)))
    r = cli("policy", "set-method", "dra", "--dry-run", server=apiserver.url)
    text = " ".join(r.stderr.split())
    assert r.exit_code == 1 and remedy in text, text
    if version:
        assert "enable it first" not in text
    # and the remedy's own command says the same thing: it refuses, naming the floor
    r = cli("kubevirt", "enable-gates", "--dra", "--dry-run", server=apiserver.url)
    assert r.exit_code == 1 and "needs KubeVirt >= 1.9.0" in " ".join(r.stderr.split())


def test_refused_while_a_vm_holds_an_npu(apiserver):
    cluster(apiserver)
    apiserver.add(o.vmi("team", "trainer", "vm0", host_devices=["rebellions.ai/RBLN-CA22_PF"]))
    r = cli("policy", "set-method", "dra", "--yes", server=apiserver.url)
    assert r.exit_code == 1
    assert "refusing to switch the VM allocation method to dra" in r.stderr
    assert "VM team/trainer (rebellions.ai/RBLN-CA22_PF) holds NPUs" in r.stderr
    assert apiserver.writes() == []


def test_disruptive_without_yes_and_no_terminal_is_exit_2(apiserver):
    cluster(apiserver)
    r = cli("policy", "set-method", "dra", server=apiserver.url)
    assert r.exit_code == 2 and "pass --yes" in r.stderr and apiserver.writes() == []


def test_applied_and_waited_for_both_ways(apiserver, operator):
    cluster(apiserver)
    operator.start()
    assert operator.wait_idle()
    r = cli("policy", "set-method", "dra", "--yes", "--timeout", "20s", "-o", "json", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "MethodChange" and doc["plan"]["from"] == "sandbox" and doc["plan"]["to"] == "dra"
    assert doc["result"]["converged"] == ["vm0", "vm1"] and doc["result"]["changed"] is True
    assert switches(apiserver) == {"sandboxDevicePlugin": False, "draKubeletPlugin": True}
    assert "now selects dra" in r.stderr
    r = cli("policy", "set-method", "sandbox", "--yes", "--timeout", "20s", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert switches(apiserver) == {"sandboxDevicePlugin": True, "draKubeletPlugin": False}
    assert "the operator serves every vm-passthrough node with the sandbox method" in r.stdout
    # already there: nothing is written, the rollout is only checked
    apiserver.clear_requests()
    r = cli("policy", "set-method", "sandbox", "--yes", server=apiserver.url)
    assert r.exit_code == 0 and apiserver.writes() == [] and "already selects sandbox" in r.stderr


def test_timeout_is_exit_5_with_what_is_pending(apiserver):
    cluster(apiserver)  # no operator runs: nothing ever rolls (the wait watches: real time has to pass)
    r = cli("policy", "set-method", "dra", "--yes", "--timeout", "1s", server=apiserver.url)
    assert r.exit_code == 5
    assert "within 1s" in r.stderr and "still missing: vm0:" in r.stderr and "still missing: vm1:" in r.stderr
    assert switches(apiserver)["draKubeletPlugin"] is True


def test_missing_prerequisite_is_refused(apiserver):
    cluster(apiserver)
    apiserver.mutate("KubeVirt", "kubevirt", "kubevirt",
                     fn=lambda k: k["status"].update({"observedKubeVirtVersion": "v1.8.1"}))
    r = cli("policy", "set-method", "dra", "--yes", server=apiserver.url)
    assert r.exit_code == 1 and "v1.8.1 for the dra method < 1.9.0" in r.stderr and apiserver.writes() == []


def test_server_dry_run_and_bad_input(apiserver):
    cluster(apiserver)
    r = cli("policy", "set-method", "dra", "--dry-run=server", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [w.dry_run for w in apiserver.writes()] == [True] and switches(apiserver)["sandboxDevicePlugin"] is True
    r = cli("policy", "set-method", "vfio", "--yes", server=closed_port_url())
    assert r.exit_code == 2 and "'vfio' is not one of 'sandbox', 'dra'" in r.stderr
    r = cli("policy", "set-method", "dra", "--timeout", "-3s", server=closed_port_url())
    assert r.exit_code == 2 and "--timeout" in r.stderr


def test_convert_vms_both_ways(apiserver, operator):
    cluster(apiserver)
    apiserver.add(o.vm("team", "stopped", running=False, host_devices=[CA22, CA22]))
    operator.start()
    assert operator.wait_idle()
    r = cli("policy", "set-method", "dra", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0 and "1 VM(s) name their NPUs through sandbox (team/stopped)" in r.stderr
    assert "(pass --convert-vms)" in r.stderr
    r = cli("policy", "set-method", "dra", "--dry-run", "--convert-vms", server=apiserver.url)
    rows = [line.split() for line in r.stdout.splitlines()]
    assert ["team", "stopped", "2", "sandbox", "dra", "to-convert"] in rows and apiserver.writes() == []
    r = cli("policy", "set-method", "dra", "--yes", "--convert-vms", "--timeout", "20s", "-o", "json",
            server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["result"]["converted"] == ["team/stopped"] and "convert: VM team/stopped" in r.stderr
    spec = apiserver.get("VirtualMachine", "stopped", "team")["spec"]["template"]["spec"]
    assert [d["claimName"] for d in spec["domain"]["devices"]["hostDevices"]] == [o.vm_claim("team", "stopped")] * 2
    r = cli("policy", "set-method", "sandbox", "--yes", "--convert-vms", "--timeout", "20s", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    devices = apiserver.get("VirtualMachine", "stopped", "team")["spec"]["template"]["spec"]["domain"]["devices"]
    assert [d["deviceName"] for d in devices["hostDevices"]] == [CA22, CA22]
    r = cli("policy", "set-method", "sandbox", "--convert-vms", "--no-wait", server=closed_port_url())
    assert r.exit_code == 2 and "needs the wait" in r.stderr


# -- DRA prerequisites the operator enforces ---------------------------------------------------------------


def test_set_method_dra_without_container_toolkit_refuses_before_any_write(apiserver):
    """The operator's DRA kubelet plugin patcher refuses without containerToolkit (v0.3.0, and main while its plugin
    waits in a toolkit-validation init container); before, set-method patched the policy and waited out its timeout
    for a rollout that never came."""
    cluster(apiserver)
    apiserver.add(_dra_plugin("toolkit-validation"))
    apiserver.mutate("RBLNClusterPolicy", POLICY, fn=lambda p: p["spec"]["containerToolkit"].update({"enabled": False}))
    apiserver.clear_requests()
    r = cli("policy", "set-method", "dra", "--yes", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    assert "does not enable containerToolkit" in r.stderr and "(pass --force to go ahead anyway)" in r.stderr
    assert ("kubectl patch rblnclusterpolicy rbln-cluster-policy --type merge -p "
            "'{\"spec\":{\"containerToolkit\":{\"enabled\":true}}}'") in r.stderr
    assert apiserver.writes() == []
    r = cli("policy", "set-method", "dra", "--dry-run", "-o", "json", server=apiserver.url)
    assert r.exit_code == 1 and apiserver.writes() == []
    r = cli("policy", "set-method", "dra", "--yes", "--force", "--no-wait", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "going ahead anyway (forced)" in r.stderr and switches(apiserver)["draKubeletPlugin"] is True


def _dra_plugin(init: str) -> dict:
    ds = o.daemonset("rbln-system", "rbln-dra-kubelet-plugin", desired=0, ready=0,
                     node_selector={"rebellions.ai/npu.deploy.dra-kubelet-plugin": "true"})
    ds["spec"]["template"]["spec"]["initContainers"] = [{"name": init, "image": "docker.io/rebellions/rbln-validator"}]
    return ds


@pytest.mark.parametrize("evidence, refused", [("dra-ready", False), ("toolkit-validation", True), (None, True)])
def test_the_toolkit_rule_is_what_the_cluster_runs(apiserver, evidence, refused):
    """Later operator code deploys its DRA plugin without containerToolkit (its dra-ready init container waits for
    the vfio-pci binding on vm nodes): the refusal is v0.3.0's, and the DRA DaemonSet's init containers, else the
    release, decide. Before, set-method refused every cluster without containerToolkit. When nothing tells (no DRA
    DaemonSet, the operator's version unknown: issue 41.6), v0.3.0 and the partition line refuse and only one untagged
    line does not: refused as when it is known, --force named (before: a warning, a write, and exit 5 at the wait)."""
    cluster(apiserver)
    if evidence:
        apiserver.add(_dra_plugin(evidence))
    apiserver.mutate("RBLNClusterPolicy", POLICY, fn=lambda p: p["spec"]["containerToolkit"].update({"enabled": False}))
    r = cli("policy", "set-method", "dra", "--dry-run", server=apiserver.url)
    assert (r.exit_code == 1) == refused, r.stderr
    if evidence == "dra-ready":  # not needed: no word of it (no container-mode node needs the toolkit either)
        assert "containerToolkit" not in r.stderr
        return
    assert "does not enable containerToolkit" in r.stderr
    if evidence is None:
        assert "may need containerToolkit" in r.stderr and "partition line" in r.stderr
        assert "(pass --force to go ahead anyway)" in r.stderr
    else:
        assert "not dra-ready" in r.stderr and "(pass --force to go ahead anyway)" in r.stderr
    assert apiserver.writes() == []


def _policy_crd(rules):
    crd = o.crd("rblnclusterpolicies", "rebellions.ai", "RBLNClusterPolicy", "Cluster", versions=("v1beta1",))
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = {
        "spec": {"type": "object", "x-kubernetes-validations": [{"rule": r, "message": "m"} for r in rules]}}
    return crd


CHART_RULES = ["self.workloadType != 'vm-passthrough' || self.vfioManager.enabled",
               "self.workloadType != 'vm-passthrough' ||\n  self.sandboxDevicePlugin.enabled"]


def test_the_installed_crds_admission_rules_decide_and_the_output_says_which(apiserver):
    """A CRD whose rules still ask for the sandbox plugin on vm-passthrough (the chart's crds/ in later main) would
    reject DRA-only: set-method refuses it up front, naming where the rules came from."""
    cluster(apiserver)
    apiserver.mutate("RBLNClusterPolicy", POLICY, fn=lambda p: p["spec"].update({"workloadType": "vm-passthrough"}))
    apiserver.add(_policy_crd(CHART_RULES))
    apiserver.clear_requests()
    r = cli("policy", "set-method", "dra", "--dry-run", "-o", "json", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plan"]["admissionRules"] == {
        "source": "the installed CRD rblnclusterpolicies.rebellions.ai (2 rule(s))", "assumed": False,
        "rules": ["vfio-for-vm", "sandbox-for-vm"], "unknown": []}
    assert any("admission rules (the installed CRD" in b["message"] and "sandboxDevicePlugin is disabled" in
               b["message"] for b in doc["plan"]["blockers"])
    assert apiserver.writes() == []


def test_without_the_crd_the_rules_are_chosen_by_release_and_said_to_be_assumed(apiserver):
    cluster(apiserver)
    apiserver.forbid("get", "customresourcedefinitions.apiextensions.k8s.io")
    r = cli("policy", "set-method", "dra", "--dry-run", "-o", "json", server=apiserver.url)
    rules = json.loads(r.stdout)["plan"]["admissionRules"]
    assert rules["assumed"] is True and "assumed for" in rules["source"] and ">= 0.6.0" in rules["source"]
    assert rules["rules"] == ["sandbox-xor-dra", "device-plugin-xor-dra", "vfio-for-vm", "allocator-for-vm"]


# -- --convert-vms: one outcome per VM, partial, hints that keep every flag ------------------------------------


def test_convert_vms_partial_exits_6_with_each_vms_fate_and_the_command_that_finishes(apiserver, operator):
    cluster(apiserver)
    operator.start()
    assert operator.wait_idle()
    apiserver.add(o.vm("a", "one", running=False, host_devices=[CA22, CA22]),
                  o.vm("b", "two", running=False, host_devices=[CA22]))
    apiserver.forbid("patch", "virtualmachines.kubevirt.io", "b")
    r = cli("--request-timeout", "20s", "policy", "set-method", "dra", "--convert-vms", "--yes", "--timeout", "20s",
            "-o", "json", server=apiserver.url)
    assert r.exit_code == 6, r.stderr
    doc = json.loads(r.stdout)  # the result is still printed: what was done, what failed and why
    fate = {(c["namespace"], c["name"]): c["state"] for c in doc["result"]["conversions"]}
    assert fate == {("a", "one"): "done", ("b", "two"): "failed"} and doc["result"]["converted"] == ["a/one"]
    assert "not every VM was converted: 1 done, 1 failed" in r.stderr
    assert "VirtualMachine b/two (failed):" in r.stderr
    (finish,) = [line for line in r.stderr.splitlines() if "finish the job:" in line]
    assert finish.split("finish the job: ")[1] == (
        f"rblnctl --server {apiserver.url} --request-timeout 20s policy set-method --timeout 20s --convert-vms "
        "--yes dra")  # every flag given, global ones first, in the command's own order


def test_the_finish_command_of_a_partial_convert_is_not_refused_by_a_converted_vm_started_again(apiserver, operator):
    """Issue 28 finding 5: every running VM holding NPUs refused the change, so once a VM the partial run converted
    was started again (its NPUs now through DRA, the target), the printed `finish the job` was refused."""
    import shlex

    cluster(apiserver)
    operator.start()
    assert operator.wait_idle()
    apiserver.add(o.vm("a", "one", running=False, host_devices=[CA22, CA22]),
                  o.vm("b", "two", running=False, host_devices=[CA22]))
    apiserver.forbid("patch", "virtualmachines.kubevirt.io", "b")
    r = cli("policy", "set-method", "dra", "--convert-vms", "--yes", "--timeout", "20s", server=apiserver.url)
    assert r.exit_code == 6, r.stderr
    (finish,) = [line.split("finish the job: ")[1] for line in r.stderr.splitlines() if "finish the job:" in line]
    apiserver.allow_all()
    # a/one's owner starts it again: its VMI runs with the claims the conversion wrote
    spec = apiserver.get("VirtualMachine", "one", "a")["spec"]["template"]["spec"]
    vmi = o.vmi("a", "one", "vm0")
    vmi["spec"] = spec
    apiserver.add(vmi)
    r = cli(*shlex.split(finish)[1:])
    assert r.exit_code == 0, r.stderr
    assert "holds NPUs" not in r.stderr
    assert [d.get("claimName") is not None for d in apiserver.get("VirtualMachine", "two", "b")["spec"]["template"][
        "spec"]["domain"]["devices"]["hostDevices"]] == [True]


def test_an_interrupted_set_method_says_how_to_wait_again_with_every_flag(apiserver, mocker):
    """Before: the hint dropped --convert-vms (and every other flag), so following it converted nothing."""
    cluster(apiserver)
    mocker.patch("rblnctl.method.changer.MethodChanger.apply", side_effect=KeyboardInterrupt)
    r = cli("policy", "set-method", "dra", "--convert-vms", "--timeout", "15m", "--force", "--yes",
            server=apiserver.url)
    assert r.exit_code == 130
    again = f"rblnctl --server {apiserver.url} policy set-method --force --timeout 15m --convert-vms --yes"
    assert f"`{again} dra` waits again and converts the VMs" in r.stderr
    assert f"`{again} sandbox` goes back" in r.stderr
