"""`rblnctl node set-mode | drain` through the CLI: flags, exit codes, -o json, stdout vs stderr, zero writes."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli
from rblnctl.constants import SET_MODE_ANNOTATION as ANN, WORKLOAD_LABEL as MODE
from rblnctl.node.events import Step
from rblnctl.node.record import SwitchRecord
from tests.fakes.objects import ONE_NPU as NPU

PF = "rebellions.ai/RBLN-CA22_PF"


@pytest.fixture
def cluster(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"), o.replicaset("default", "web"),
                  o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU),
                  o.pod("default", "cpu-app", node="n1", owner_kind="ReplicaSet", owner_name="web"))
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    apiserver.clear_requests()
    yield apiserver
    op.stop()


def test_set_mode_json_result_and_progress_on_stderr(cluster):
    r = cli("node", "set-mode", "n1", "vm", "--yes", "-o", "json", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)  # stdout is the result alone
    assert list(data) == ["apiVersion", "kind", "node", "plan", "result"] and data["kind"] == "ModeSwitch"
    res = data["result"]
    assert (data["node"], res["previousMode"], res["mode"], res["changed"]) == ("n1", "container", "vm-passthrough",
                                                                                True)
    assert res["cordoned"] is True and res["uncordoned"] is True
    assert res["evicted"] == [{"namespace": "default", "name": "npu-app", "uid": res["evicted"][0]["uid"]}]
    assert [s["step"] for s in data["plan"]["steps"]] == ["lock", "record", "cordon", "evict", "relabel", "wait",
                                                         "uncordon"]
    assert [p["name"] for p in data["plan"]["pods"] if p["action"] == "evict"] == ["npu-app"]
    assert "evicted default/npu-app" in r.stderr and "cordon" in r.stderr and "uncordon" in r.stderr
    node = cluster.get("Node", "n1")
    assert node["metadata"]["labels"][MODE] == "vm-passthrough" and not node["spec"].get("unschedulable")


def test_set_mode_noop_exits_0_without_yes(cluster):
    r = cli("node", "set-mode", "n1", "container", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "already in container mode" in r.stderr and cluster.writes() == []


def test_bad_mode_exits_2_before_connecting(apiserver):
    r = cli("node", "set-mode", "n1", "gpu", "--yes", server=apiserver.url)
    assert r.exit_code == 2
    # issue 21: in either order, neither word is taken for "the" mode when no word looks like one
    assert "neither 'n1' nor 'gpu' is a mode" in r.stderr and r.stdout == ""
    assert apiserver.requests == []


@pytest.mark.parametrize("args", [["vmm", "npu-0000"], ["npu-0000", "vmm"]])
def test_a_misspelt_mode_is_named_in_either_order(apiserver, args):
    """issue 21: `set-mode vmm npu-0000` said `unknown mode 'npu-0000' (nor is 'vmm' one)`."""
    r = cli("node", "set-mode", *args, "--yes", server=apiserver.url)
    assert r.exit_code == 2 and apiserver.requests == []
    assert "unknown mode 'vmm' (did you mean vm?)" in r.stderr
    assert "rblnctl node set-mode vm npu-0000" in r.stderr and "'npu-0000' (" not in r.stderr


def test_refused_by_vm_guard_exits_1(cluster):
    cluster.add(o.vmi("vms", "vm1", "n1", host_devices=[PF]))
    r = cli("node", "set-mode", "n1", "vm", "--yes", server=cluster.url)
    assert r.exit_code == 1
    assert "refusing to switch node n1" in r.stderr and "vms/vm1" in r.stderr
    # issue 21: passthrough VMs cannot live-migrate: the refusal says how to stop one, and the one flag that evicts
    assert "cannot live-migrate" in r.stderr and "`virtctl stop vm1 -n vms`" in r.stderr
    assert "(pass --evict-vms to go ahead anyway)" in r.stderr and "migrate these VMs" not in r.stderr
    assert cluster.writes() == []


def test_unknown_node_exits_1(apiserver):
    r = cli("node", "set-mode", "nope", "vm", "--yes", server=apiserver.url)
    assert r.exit_code == 1 and "nope" in r.stderr


def test_timeout_exits_5_and_says_how_to_resume(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"))  # a policy but no operator running: nothing converges
    r = cli("node", "set-mode", "n1", "vm", "--yes", "--timeout", "0.3", server=apiserver.url)
    assert r.exit_code == 5
    run = f"rblnctl --server {apiserver.url} node set-mode"  # every flag of the run kept (issue 29)
    assert "in progress" in r.stderr and f"resume:  {run} vm n1 --timeout 0.3 --yes" in r.stderr
    assert f"go back: {run} container n1 --reverse --timeout 0.3 --yes" in r.stderr  # issue 21: the narrowest flag
    assert r.stderr.count("\nerror: ") + r.stderr.startswith("error: ") == 1
    assert apiserver.get("Node", "n1")["spec"]["unschedulable"] is True


def test_yes_is_required_without_a_tty(cluster):
    r = cli("node", "set-mode", "n1", "vm", server=cluster.url)
    assert r.exit_code == 2
    assert "--yes" in r.stderr and cluster.writes() == []


def test_confirmation_on_a_tty(cluster, monkeypatch):
    import rblnctl.cli.console

    monkeypatch.setattr(rblnctl.cli.console, "stdin_is_tty", lambda: True)
    r = cli("node", "set-mode", "n1", "vm", server=cluster.url, input="n\n")
    assert r.exit_code == 1 and cluster.writes() == []
    assert "Switch node n1 to vm mode?" in r.stderr and "default/npu-app" in r.stderr
    assert "STEP" in r.stderr and "STEP" not in r.stdout  # the plan is shown on stderr, stdout stays clean
    r = cli("node", "set-mode", "n1", "vm", server=cluster.url, input="y\n")
    assert r.exit_code == 0, r.stderr
    assert cluster.get("Node", "n1")["metadata"]["labels"][MODE] == "vm-passthrough"


def test_dry_run_prints_the_plan_and_writes_nothing(cluster):
    r = cli("node", "set-mode", "n1", "vm", "--dry-run", "-o", "json", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["result"] is None and data["plan"]["target"] == "vm-passthrough"
    assert "dry run: nothing was sent" in r.stderr
    assert cluster.writes() == []
    r = cli("node", "set-mode", "n1", "vm", "--dry-run", server=cluster.url)  # table
    assert r.exit_code == 0 and "npu.workload.config=vm-passthrough" in r.stdout and cluster.writes() == []


def test_dry_run_server_sends_dry_run_all(cluster):
    r = cli("node", "set-mode", "n1", "vm", "--dry-run=server", "--yes", "-o", "json", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["result"]["serverDryRun"] is True
    assert "(server dry run)" in r.stderr  # progress lines say so, as kubectl's
    writes = cluster.writes()
    assert writes and all(w.dry_run for w in writes)
    assert cluster.get("Node", "n1")["metadata"]["labels"][MODE] == "container"


def test_the_old_server_dry_run_spelling_still_works(cluster):
    r = cli("node", "set-mode", "n1", "vm", "--server-dry-run", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert cluster.writes() and all(w.dry_run for w in cluster.writes())


def test_set_mode_dry_run_that_would_be_refused_exits_1(cluster):
    cluster.add(o.vmi("vms", "vm1", "n1", host_devices=[PF]))
    r = cli("node", "set-mode", "n1", "vm", "--dry-run", "-o", "json", server=cluster.url)
    assert r.exit_code == 1
    assert any("vms/vm1" in b["message"] for b in json.loads(r.stdout)["plan"]["blockers"])
    assert "refusing to switch node n1" in r.stderr and cluster.writes() == []


def test_drain_dry_run_that_would_be_refused_exits_1(cluster):
    cluster.add(o.pod("default", "bare", node="n1"))
    r = cli("node", "drain", "n1", "--all-pods", "--dry-run", server=cluster.url)
    assert r.exit_code == 1
    assert "cannot drain node n1" in r.stderr and "default/bare is not managed by a controller" in r.stderr
    assert "bare" in r.stdout and cluster.writes() == []


def test_drain_cordons_evicts_and_leaves_cordoned(cluster):
    r = cli("node", "drain", "n1", "--yes", "-o", "json", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["result"]["cordoned"] is True and [p["name"] for p in data["result"]["evicted"]] == ["npu-app"]
    assert "kubectl uncordon n1" in r.stderr and "cordon: cordoning node n1" in r.stderr
    assert cluster.get("Node", "n1")["spec"]["unschedulable"] is True
    assert cluster.get("Pod", "cpu-app", "default") is not None


def test_drain_all_pods_and_blockers(cluster):
    cluster.add(o.pod("default", "bare", node="n1"))
    r = cli("node", "drain", "n1", "--all-pods", "--yes", server=cluster.url)
    assert r.exit_code == 1 and "default/bare is not managed by a controller" in r.stderr
    assert "(pass --force to go ahead anyway)" in r.stderr
    assert cluster.writes() == []
    r = cli("node", "drain", "n1", "--all-pods", "--force", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert cluster.get("Pod", "cpu-app", "default") is None and cluster.get("Pod", "bare", "default") is None


def test_drain_dry_run_zero_writes(cluster):
    r = cli("node", "drain", "n1", "--dry-run", server=cluster.url)
    assert r.exit_code == 0 and "npu-app" in r.stdout and cluster.writes() == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_sees_the_switched_labels(cluster, kubeconfig):
    r = cli("node", "set-mode", "n1", "vm", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", "node", "n1", "-o",
                          "jsonpath={.metadata.labels}"], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    labels = json.loads(out.stdout)
    assert labels[MODE] == "vm-passthrough"
    assert labels["rebellions.ai/npu.deploy.vfio-manager"] == "true"
    assert "rebellions.ai/npu.deploy.device-plugin" not in labels


def test_ctrl_c_during_set_mode_says_how_to_resume(cluster, mocker):
    mocker.patch("rblnctl.node.mode.ModeSwitcher.apply", side_effect=KeyboardInterrupt)
    r = cli("node", "set-mode", "n1", "vm", "--yes", "-o", "json", server=cluster.url)
    assert r.exit_code == 130 and r.stdout == ""
    assert "interrupted" in r.stderr
    assert "node set-mode vm n1" in r.stderr and "node set-mode container n1 --reverse" in r.stderr


def test_ctrl_c_during_drain_says_the_node_stays_cordoned(cluster, mocker):
    mocker.patch("rblnctl.node.drain.Drainer.apply", side_effect=KeyboardInterrupt)
    r = cli("node", "drain", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 130 and "kubectl uncordon n1" in r.stderr


def test_closed_stdin_counts_as_no_terminal(monkeypatch):
    import sys

    import rblnctl.cli.console

    monkeypatch.setattr(sys, "stdin", None)  # `rblnctl node drain n1 <&-`, as some automation runs it
    assert rblnctl.cli.console.stdin_is_tty() is False


@pytest.mark.parametrize("name", ["./npu-0000", "x/../npu-0000", "npu-0000?", "..", "NPU-0000"])
def test_node_names_are_checked_before_connecting(apiserver, name):
    for args in (("node", "set-mode", "vm", name), ("node", "drain", name)):
        r = cli(*args, "--yes", server=apiserver.url)
        assert r.exit_code == 2 and "invalid node name" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert apiserver.requests == []


def test_mode_first_is_the_documented_order(cluster):
    r = cli("node", "set-mode", "vm", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert cluster.get("Node", "n1")["metadata"]["labels"][MODE] == "vm-passthrough"


def test_sigterm_during_set_mode_exits_143_and_says_how_to_resume(cluster, mocker):
    import signal

    from rblnctl.errors import Interrupted

    mocker.patch("rblnctl.node.mode.ModeSwitcher.apply", side_effect=Interrupted(signal.SIGTERM))
    r = cli("node", "set-mode", "vm", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 143
    assert "terminated by signal 15" in r.stderr and f"rblnctl --server {cluster.url} node set-mode vm n1" in r.stderr


def test_kubeconfig_without_a_server_is_exit_2_in_one_line(tmp_path):
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {}\ncontexts:\n- name: x\n"
                  "  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n")
    r = cli("--kubeconfig", str(kc), "node", "list")
    assert r.exit_code == 2 and "has no server URL" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_a_locked_node_is_refused_naming_the_holder(cluster):
    from datetime import UTC, datetime

    lease = o.lease("rbln-system", "rblnctl-node-n1", holder="rblnctl@ops-1 pid 99: set-mode n1 vm", duration_s=60)
    lease["spec"]["renewTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.add(lease)
    r = cli("node", "drain", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 1 and "locked by rblnctl@ops-1 pid 99" in r.stderr
    assert [w for w in cluster.writes() if "/leases" not in w.path] == []


def test_a_grace_period_beyond_int64_exits_2_before_connecting(apiserver):
    """DeleteOptions.gracePeriodSeconds is an int64: the API server would refuse it after the cordon."""
    r = cli("node", "drain", "n1", "--grace-period", "99999999999999999999999", "--yes", server=apiserver.url)
    assert r.exit_code == 2 and "--grace-period" in r.stderr
    assert apiserver.requests == []


def _malformed_vmis():
    """VMIs a hand edit or a preserve-unknown-fields schema could leave: fields that are not lists of objects."""
    out = []
    for i, (path, value) in enumerate([(("domain", "devices", "hostDevices"), "npu0"),
                                       (("domain", "devices", "hostDevices"), [1, "x", None]),
                                       (("resourceClaims",), {"name": "c"}),
                                       (("resourceClaims",), 7),
                                       (("domain",), ["devices"])]):
        v = o.vmi("vms", f"odd{i}", "n1")
        spec = v["spec"]
        for key in path[:-1]:
            spec = spec.setdefault(key, {})
        spec[path[-1]] = value
        out.append(v)
    return out


def test_malformed_vmis_are_judged_not_a_crash_even_under_dry_run(cluster):
    """Before: `hostDevices: npu0` and friends raised AttributeError/TypeError in the VM guard: exit 70."""
    cluster.add(*_malformed_vmis())
    r = cli("node", "set-mode", "n1", "vm", "--dry-run", "-o", "json", server=cluster.url)
    assert r.exit_code == 1, r.stderr  # refused by the VM guard, which cannot read those VMIs
    assert "unexpected" not in r.stderr
    blockers = [b["message"] for b in json.loads(r.stdout)["plan"]["blockers"]]
    assert any("vms/odd0" in b and "hostDevices is not a list of objects" in b for b in blockers)
    assert any("vms/odd3" in b and "resourceClaims is not a list of objects" in b for b in blockers)
    assert cluster.writes() == []
    r = cli("policy", "set-method", "sandbox", "--dry-run", server=cluster.url)
    assert r.exit_code in (0, 1) and "unexpected" not in r.stderr, r.stderr
    assert cluster.writes() == []


# -- the audit trail and node history ----------------------------------------------------------------------------


def test_a_set_mode_leaves_events_that_node_history_reads_back(cluster):
    r = cli("node", "set-mode", "vm", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    r = cli("node", "drain", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    r = cli("node", "history", "n1", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    header, switch, drain = r.stdout.splitlines()
    assert header.split() == ["STARTED", "ACTION", "RESULT", "USER"]  # FROM and TO: -o wide (80 columns)
    assert switch.split()[1:] == ["set-mode", "vm", "done", "fake-user"]
    assert drain.split()[1:] == ["drain", "done", "fake-user"]
    doc = json.loads(cli("node", "history", "n1", "-o", "json", server=cluster.url).stdout)
    assert (doc["kind"], doc["node"], doc["record"]) == ("NodeHistory", "n1", None)
    item = doc["items"][0]
    assert {k: item[k] for k in ("action", "user", "from", "to", "result", "source")} == {
        "action": "set-mode", "user": "fake-user", "from": "container", "to": "vm-passthrough", "result": "done",
        "source": "events"}
    assert item["message"].startswith("switched node n1 from container to vm-passthrough in ")
    wide = cli("node", "history", "n1", "-o", "wide", server=cluster.url).stdout
    assert wide.splitlines()[0].split()[-5:] == ["FROM", "TO", "FINISHED", "SOURCE", "MESSAGE"]


def test_dry_runs_write_no_event(cluster):
    """Neither a dry run nor a server dry run (single node, drain, pool) records an Event or asks who runs it."""
    cluster.add(o.npu_node("n1b"))
    for how in ("--dry-run", "--dry-run=server"):
        for args in (("set-mode", "vm", "n1"), ("drain", "n1"), ("set-mode", "vm", "n1", "n1b")):
            r = cli("node", *args, "--yes", how, server=cluster.url)
            assert r.exit_code == 0, (args, r.stderr)
    assert [w for w in cluster.writes() if not w.dry_run] == []
    assert cluster.list("events.events.k8s.io") == []
    assert not [q for q in cluster.requests if "/events" in q.path or "selfsubjectreviews" in q.path]


def test_an_event_that_cannot_be_written_is_a_warning_not_a_failure(cluster):
    cluster.forbid("create", "events.events.k8s.io")
    r = cli("node", "set-mode", "vm", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "could not record Event ModeSwitchStarted (started) on Node n1" in r.stderr
    assert cluster.get("Node", "n1")["metadata"]["labels"][MODE] == "vm-passthrough"


def test_node_history_of_a_node_with_none_says_why(cluster):
    r = cli("node", "history", "n1", server=cluster.url)
    assert r.exit_code == 0 and r.stdout == ""
    assert "No switch or drain of node n1 on record" in r.stderr and "--event-ttl (1h by default)" in r.stderr


def test_node_history_bad_input_and_unknown_nodes(apiserver):
    r = cli("node", "history", "N_1", server=apiserver.url)
    assert r.exit_code == 2 and apiserver.requests == []
    r = cli("node", "history", "nosuch", server=apiserver.url)
    assert r.exit_code == 1 and 'nodes "nosuch" not found' in r.stderr
    assert cli("node", "history", "n1", "-o", "name", server=apiserver.url).exit_code == 2


def test_already_in_the_mode_is_said_once(cluster):
    r = cli("node", "set-mode", "n1", "container", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("nothing to do") == 1, r.stderr


def test_ctrl_c_before_the_cordon_says_the_node_is_not_cordoned(cluster, mocker):
    mocker.patch("rblnctl.node.mode.ModeSwitcher.apply", side_effect=KeyboardInterrupt)
    r = cli("node", "set-mode", "n1", "vm", "--yes", server=cluster.url)
    assert r.exit_code == 130
    assert "node n1 is not cordoned, with its progress record, mid-switch" in r.stderr
    assert "may be" not in r.stderr


def test_ctrl_c_after_the_cordon_says_the_node_is_cordoned(cluster, mocker):
    def cordon_then_ctrl_c(self, plan):
        cluster.mutate("Node", "n1", None, lambda n: n["spec"].update(unschedulable=True))
        raise KeyboardInterrupt

    mocker.patch("rblnctl.node.drain.Drainer.apply", cordon_then_ctrl_c)
    r = cli("node", "drain", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 130 and "node n1 is cordoned and may be partly drained" in r.stderr


def test_a_resumed_switch_reports_the_mode_it_really_started_from(apiserver):
    """After Ctrl-C past the relabel, the re-run said `vm-passthrough -> vm-passthrough`."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
                  o.npu_node("n1", mode="vm-passthrough"))
    node = apiserver.get("Node", "n1")
    node["spec"]["unschedulable"] = True
    node["metadata"].setdefault("annotations", {})[ANN] = SwitchRecord(
        target="vm-passthrough", from_mode="container", started="2026-12-03T00:00:00Z", cordoned_by_rblnctl=True,
        step=Step.RELABEL).to_json()
    apiserver.update(node)
    op = SimulatedOperator(apiserver).start()
    try:
        assert op.wait_idle()
        r = cli("node", "set-mode", "vm", "n1", "--yes", "-o", "json", server=apiserver.url)
    finally:
        op.stop()
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plan"]["resume"] is True and doc["plan"]["currentMode"] == "vm-passthrough"
    assert doc["plan"]["fromMode"] == "container"
    assert (doc["result"]["previousMode"], doc["result"]["mode"]) == ("container", "vm-passthrough")
    assert ANN not in (apiserver.get("Node", "n1")["metadata"].get("annotations") or {})


def test_the_record_written_on_resume_keeps_its_from(apiserver):
    """The record is the only memory of where the switch started: a resumed run must not overwrite it."""
    apiserver.add(o.cluster_policy(vfio_manager=True, sandbox=True, device_plugin=True),
                  o.npu_node("n1", mode="vm-passthrough"))
    node = apiserver.get("Node", "n1")
    node["metadata"].setdefault("annotations", {})[ANN] = SwitchRecord(
        target="vm-passthrough", from_mode="container", started="2026-12-03T00:00:00Z", cordoned_by_rblnctl=False,
        step=Step.RELABEL).to_json()
    apiserver.update(node)
    apiserver.clear_requests()
    # No operator: the wait times out, and the record on the node still says where the switch started.
    r = cli("node", "set-mode", "vm", "n1", "--yes", "--timeout", "0.5", server=apiserver.url)
    assert r.exit_code == 5, r.stderr
    record = json.loads(apiserver.get("Node", "n1")["metadata"]["annotations"][ANN])
    assert record["from"] == "container"
    # every flag of the run, the connection first (issue 29)
    assert (f"go back: rblnctl --server {apiserver.url} node set-mode container n1 --reverse --timeout 0.5 --yes"
            in r.stderr)
