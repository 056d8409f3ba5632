"""`rblnctl vm attach|detach --next-restart`, and the staged change in `vm list` and `vm diagnose`: flags, exit codes,
what is written (nothing with --dry-run), stdout vs stderr."""

from __future__ import annotations

import json

import pytest

from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22, NS, host_devices, sandbox_cluster

STAGED = "a non-live-updatable field was changed in the template spec"


def vm_cli(apiserver, *args):
    return cli(*args, server=apiserver.url)


def _running(apiserver, npus=1):
    """v1 started by the fake's virt-controller with `npus` NPUs on n1 (4 NPUs there)."""
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver, npus=4)
    apiserver.add(o.vm(NS, "v1", running=False, node="n1", host_devices=[CA22] * npus))
    r = vm_cli(apiserver, "vm", "start", "v1", "-n", NS)
    assert r.exit_code == 0, r.stderr
    apiserver.clear_requests()


@pytest.mark.parametrize("verb", ["attach", "detach"])
def test_restart_and_next_restart_together_are_bad_input(apiserver, verb):
    r = vm_cli(apiserver, "vm", verb, "v1", "-n", NS, "--restart", "--next-restart")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        "error: --restart and --next-restart cannot be combined: restart the VM now, or change its spec for its next "
        "restart"]
    assert apiserver.requests == []


def test_attach_next_restart_changes_the_spec_and_says_when_it_applies(apiserver):
    _running(apiserver)
    vmi = apiserver.get("VirtualMachineInstance", "v1", NS)
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2", "--next-restart", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plan"]["nextRestart"] is True and doc["plan"]["runningNpus"] == 1 and doc["plan"]["restart"] is False
    assert doc["result"]["changed"] is True and doc["result"]["restarted"] is False
    assert (f"VM {NS}/v1: 1 -> 2 NPU(s) at its next restart; it runs with 1 until then "
            f"(`rblnctl --server {apiserver.url} vm restart v1 -n {NS} --wait` restarts it now)") in r.stderr
    assert [w.method for w in apiserver.writes()] == ["PATCH"]  # no stop, no start: the VM runs on
    assert apiserver.get("VirtualMachineInstance", "v1", NS)["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert len(host_devices(apiserver)) == 2


def test_the_table_says_what_waits_for_the_restart(apiserver):
    _running(apiserver)
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2", "--next-restart")
    assert r.exit_code == 0, r.stderr
    assert (f"next restart: the VM keeps running with 1 NPU(s); the change applies when it restarts (KubeVirt marks "
            f"it RestartRequired): `rblnctl --server {apiserver.url} vm restart v1 -n {NS} --wait`") in r.stdout


def test_dry_run_sends_no_write_and_server_dry_run_persists_none(apiserver):
    _running(apiserver)
    before = apiserver.get("VirtualMachine", "v1", NS)
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2", "--next-restart", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert apiserver.writes() == [] and "next restart: the VM keeps running with 1 NPU(s)" in r.stdout
    r = vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2", "--next-restart", "--dry-run=server")
    assert r.exit_code == 0, r.stderr
    assert [w.query.get("dryRun") for w in apiserver.writes()] == [["All"]]
    assert apiserver.get("VirtualMachine", "v1", NS)["spec"] == before["spec"]


def test_the_refusal_of_a_running_vm_names_both_ways(apiserver):
    _running(apiserver)
    r = vm_cli(apiserver, "vm", "detach", "v1", "-n", NS)
    assert r.exit_code == 1 and apiserver.writes() == []
    assert ("restarts; pass --restart to stop it, change it and start it now (waiting until it is Ready), or "
            "--next-restart to change its spec only, for its next restart") in " ".join(r.stderr.split())


def test_list_shows_the_staged_change(apiserver):
    _running(apiserver)
    assert vm_cli(apiserver, "vm", "attach", "v1", "-n", NS, "--npus", "2", "--next-restart").exit_code == 0
    r = vm_cli(apiserver, "vm", "list", "-n", NS)
    assert r.exit_code == 0, r.stderr
    header, row = r.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "NODE", "NPUS", "METHOD", "DEVICES"]
    assert row.split()[:5] == ["v1", "Running,RestartPending", "n1", "1->2", "sandbox"]
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    item = json.loads(vm_cli(apiserver, "vm", "list", "-n", NS, "-o", "json").stdout)["items"][0]
    assert (item["npus"], item["runningNpus"], item["restartPending"]) == (2, 1, True)
    assert item["restartRequired"]["message"] == STAGED


def test_detach_next_restart_then_restart_applies_it(apiserver):
    _running(apiserver, npus=2)
    r = vm_cli(apiserver, "vm", "detach", "v1", "-n", NS, "--next-restart")
    assert r.exit_code == 0, r.stderr
    assert "VM vms/v1: 2 -> 0 NPU(s) at its next restart; it runs with 2 until then" in r.stderr
    r = vm_cli(apiserver, "vm", "restart", "v1", "-n", NS, "--yes", "--wait")
    assert r.exit_code == 0, r.stderr
    vmi = apiserver.get("VirtualMachineInstance", "v1", NS)
    assert vmi["spec"]["domain"]["devices"].get("hostDevices", []) == []
    vm = apiserver.get("VirtualMachine", "v1", NS)
    assert [c["type"] for c in vm["status"].get("conditions") or []] == []
