"""vm start|stop|restart [--wait] and vm attach|detach [--restart] on real KubeVirt v1.9.0 (issues 27 and 28).

Per runStrategy, the real virt-api's 409 refusals with their texts (and the fake's, side by side), virt-controller's
own writes of a VM right after a stop (the guarded JSON patch never conflicts with them), and the stopped-mark rule
(docs/architecture.md, "VMs rblnctl stops") where a race or a signal strikes: the signal or the other admin comes
in through Kube.request, the one seam every request of rblnctl passes (`strike`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from rblnctl.errors import Interrupted
from rblnctl.kube.client import Kube
from tests.cluster.client import ApiFailure
from tests.kubevirt_real.vms import SANDBOX_RESOURCE, vm
from rblnctl.constants import VM_STOPPED_ANNOTATION as STOPPED

NODE = "npu-node-1"


# -- helpers --------------------------------------------------------------------------------------------------------


def npus_permitted(kv) -> None:
    """HostDevices on, RBLN-CA22_PF permitted (what npu-node-1 advertises), as an admin does it with rblnctl; and
    no start back-off the real virt-handler would not cause (KvBackend.no_start_backoff)."""
    kv.no_start_backoff()
    kv.set_gates(["HostDevices"])
    r = kv.rblnctl("kubevirt", "permit-devices", "--resource-name", SANDBOX_RESOURCE, "--yes")
    assert r.exit_code == 0, r.stderr


def create(kv, obj: dict) -> dict:
    """Create a VM; KubeVirt's webhook reads the CR from an informer, so a gate just set may take a moment."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return kv.api.create(obj)
        except ApiFailure as e:
            if e.status != 422 or "feature gate" not in str(e.body) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run(kv, *args: str) -> tuple[int, dict | None, str]:
    """rblnctl vm ARGS -n NS -o json: (exit code, the document, stderr)."""
    r = kv.rblnctl("vm", *args, "-n", kv.namespace, "-o", "json")
    doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else None
    return r.exit_code, doc, r.stderr


def vmi_uid(kv, name: str) -> str | None:
    vmi = kv.vmi(name)
    return None if vmi is None else vmi["metadata"]["uid"]


def strike(monkeypatch, match: Callable[[str, str, Any], bool], act: Callable[[Callable[[], Any]], Any]) -> None:
    """At the first request rblnctl sends that `match(method, path, body)` accepts, `act(send)` instead."""
    real = Kube.request
    armed = [True]

    def request(self: Kube, method: str, path: str, *args: Any, **kw: Any) -> Any:
        if armed[0] and match(method, path, kw.get("body")):
            armed[0] = False
            return act(lambda: real(self, method, path, *args, **kw))
        return real(self, method, path, *args, **kw)

    monkeypatch.setattr(Kube, "request", request)


def is_mark(method: str, path: str, body: Any) -> bool:
    """The mark's write: a JSON patch (testing the VM's uid first, issue 37) that adds or removes the annotation."""
    key = STOPPED.replace("/", "~1")
    return method == "PATCH" and isinstance(body, list) and any(
        isinstance(op, dict) and op.get("op") in ("add", "remove") and (
            str(op.get("path")).endswith(key) or STOPPED in (op.get("value") or {})) for op in body)


def is_npu_patch(method: str, path: str, body: Any) -> bool:
    """The VM's NPU change: a JSON patch of its template."""
    return method == "PATCH" and isinstance(body, list) and any(
        isinstance(op, dict) and str(op.get("path", "")).startswith("/spec/template/") for op in body)


def owner_stops(kv, name: str) -> None:
    status, body = kv.virtctl("stop", name)
    assert status == 202, body
    kv.api.wait_for(lambda: kv.vm(name)["spec"]["runStrategy"] == "Halted", timeout_s=10)


# -- start, stop, restart per runStrategy ----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["Always", "Halted", "Manual", "RerunOnFailure"])
def test_start_stop_restart_wait_per_run_strategy(kv, strategy):
    """Each --wait ends on the state waited for: its message, table and JSON come from one final read (issue 27.9:
    `vm stop --wait` said stopped over a table saying Stopping; `vm start --wait` of a starting VM said "already
    running (VMI Scheduled)" over a table saying Running)."""
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy=strategy, host_devices=[SANDBOX_RESOURCE]))
    runs_by_itself = strategy in ("Always", "RerunOnFailure")
    code, doc, err = run(kv, "start", "v", "--wait", "--timeout", "60s")
    assert code == 0, err
    state = doc["result"]["state"]
    assert state["printableStatus"] == "Running" and state["npus"]["attached"] and state["vmi"]["phase"] == "Running"
    assert f"Ready on {NODE} with 1 NPU(s) attached" in err
    assert doc["result"]["request"] == (None if runs_by_itself else "start")
    if runs_by_itself:
        assert "(VMI Running); nothing to ask; it is Ready" in err and "Scheduled" not in err.splitlines()[-1]
    assert kv.vm("v")["spec"]["runStrategy"] == ("Always" if strategy == "Halted" else strategy)

    before = vmi_uid(kv, "v")
    code, doc, err = run(kv, "restart", "v", "--wait", "--yes", "--timeout", "60s")
    assert code == 0, err
    assert doc["result"]["request"] == "restart" and doc["result"]["state"]["vmi"]["uid"] not in (None, before)
    assert doc["result"]["state"]["printableStatus"] == "Running"

    code, doc, err = run(kv, "stop", "v", "--wait", "--yes", "--timeout", "60s")
    assert code == 0, err
    state = doc["result"]["state"]
    # RerunOnFailure: virt-controller may say CrashLoopBackOff a moment (no_start_backoff), never Stopping
    assert state["printableStatus"] in (("Stopped", "CrashLoopBackOff") if strategy == "RerunOnFailure" else
                                        ("Stopped",)), state
    assert not state["ready"] and state["launchers"] == []
    assert state["vmi"] is None or state["vmi"]["phase"] in ("Succeeded", "Failed")
    assert "stopped: its NPUs are free" in err
    assert kv.vm("v")["spec"]["runStrategy"] == ("Halted" if strategy in ("Always", "Halted") else strategy)

    kv.mark()
    code, doc, err = run(kv, "stop", "v", "--yes")  # again: nothing to ask, nothing written
    assert code == 0 and "nothing to ask" in err and kv.writes() == [], err


# -- the real virt-api's refusals ----------------------------------------------------------------------------------

REFUSALS = [  # (VM, runStrategy, its VMI runs, action) -> virt-api's 409 text (v1.9.0 pkg/virt-api/rest/lifecycle.go)
    ("h", "Halted", False, "stop", "VM is not running"),
    ("h", "Halted", False, "restart", "RunStategy Halted does not support manual restart requests"),
    ("m", "Manual", False, "stop", "VM is not running"),
    ("m", "Manual", False, "restart", "VM is not running: Halted"),
    ("a", "Always", True, "start", "VM is already running"),
    ("r", "RerunOnFailure", True, "start", "VM is already running"),
]


def test_the_real_virt_api_refuses_as_the_fake_does(kv, apiserver):
    """Issue 27.6: the texts and the order of virt-api v1.9.0's checks (runStrategy before the VMI for a restart),
    asked of the real virt-api and of the fake's, the same requests on the same VMs."""
    import urllib3

    from tests.fakes import objects as o

    ns = kv.namespace
    apiserver.add(o.namespace(ns))
    for name, strategy, running, *_ in dict.fromkeys((r[0], r[1], r[2]) for r in REFUSALS):
        kv.api.create(vm(ns, name, run_strategy=strategy))
        apiserver.add(o.vm(ns, name, run_strategy=strategy, running=running),
                      *([o.vmi(ns, name, NODE)] if running else []))
    for name, _, running, *_ in dict.fromkeys((r[0], r[1], r[2]) for r in REFUSALS):
        if running:
            kv.wait_vmi_phase(name, "Running")
    pool = urllib3.PoolManager()
    for name, strategy, _, action, text in REFUSALS:
        status, real = kv.virtctl(action, name)
        resp = pool.request("PUT", f"{apiserver.url}/apis/subresources.kubevirt.io/v1/namespaces/{ns}/"
                            f"virtualmachines/{name}/{action}", body=b"{}",
                            headers={"Content-Type": "application/json", "Accept": "application/json, */*"})
        fake = json.loads(resp.data)
        want = f'Operation cannot be fulfilled on virtualmachine.kubevirt.io "{name}": {text}'
        assert (status, real["message"], real["reason"]) == (409, want, "Conflict"), (strategy, action, real)
        assert (resp.status, fake["message"], fake["reason"], fake["details"]) == \
            (409, want, "Conflict", real["details"]), (strategy, action, fake)


def test_a_restart_the_real_virt_api_refuses_is_an_error(kv, monkeypatch):
    """Issue 28.3: another admin stops the VM just before rblnctl's restart reaches virt-api. Before: exit 0
    "restart requested"; with --wait, the whole timeout."""
    kv.no_start_backoff()
    create(kv, vm(kv.namespace, "v", run_strategy="Always"))
    kv.wait_vmi_phase("v", "Running")
    strike(monkeypatch, lambda m, p, _b: m == "PUT" and p.endswith("/v/restart"),
           lambda send: (owner_stops(kv, "v"), send())[1])
    started = time.monotonic()
    code, _, err = run(kv, "restart", "v", "--yes", "--wait", "--timeout", "60s")
    assert code == 1, err
    assert "virt-api refused to restart VM" in err and "RunStategy Halted does not support manual restart requests" \
        in err
    assert time.monotonic() - started < 30 and "did not become Ready" not in err  # no wait for what was refused


# -- attach / detach -------------------------------------------------------------------------------------------------


def test_attach_restart_survives_virt_controller_every_time(kv):
    """Issue 27.4: virt-controller writes the VM right after the stop. Before: the resourceVersion-guarded patch got
    409 every time, the re-plan called the run's own stop "an earlier rblnctl run", "patching VM" came twice.
    Three runs: one patch each, accepted at once, no conflict, the VM Ready with its NPUs, no mark left."""
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    kv.wait_vmi_phase("v", "Running")
    for npus in (2, 3, 1):
        kv.mark()
        code, doc, err = run(kv, "attach", "v", "--npus", str(npus), "--restart", "--yes", "--timeout", "60s")
        assert code == 0, err
        assert err.count("patching VM") == 1 and "changed under us" not in err and "earlier rblnctl run" not in err
        assert doc["result"]["attempts"] == 1 and doc["result"]["ready"] is True and doc["plan"]["start"] is False
        spec_writes = [w for w in kv.writes() if w.verb == "patch" and w.path.endswith("/virtualmachines/v")]
        assert [w.code for w in spec_writes] == [200] * len(spec_writes) and len(spec_writes) == 4  # mark x3, NPUs
        assert len(kv.vm("v")["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == npus
        assert STOPPED not in (kv.vm("v")["metadata"].get("annotations") or {})
        assert kv.launcher_pods("v")[-1]["spec"]["containers"][0]["resources"]["requests"][SANDBOX_RESOURCE] == \
            str(npus)


def test_detach_restart_and_attach_without_restart(kv):
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Always", host_devices=[SANDBOX_RESOURCE, SANDBOX_RESOURCE]))
    kv.wait_vmi_phase("v", "Running")
    kv.mark()
    code, _, err = run(kv, "attach", "v", "--npus", "3")  # running, no --restart: refused, nothing written
    assert code == 1 and "--restart" in err and kv.writes() == [], err
    code, doc, err = run(kv, "detach", "v", "--device", "npu1", "--restart", "--yes", "--timeout", "60s")
    assert code == 0, err
    assert [d["name"] for d in kv.vm("v")["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]] == ["npu0"]
    assert doc["result"]["ready"] is True and kv.vm("v")["spec"]["runStrategy"] == "Always"
    code, _, err = run(kv, "stop", "v", "--yes", "--wait")
    assert code == 0, err
    kv.mark()
    code, doc, err = run(kv, "attach", "v", "--npus", "2")  # stopped: no --restart needed, and it stays stopped
    assert code == 0, err
    assert doc["result"]["restarted"] is False and kv.vm("v")["spec"]["runStrategy"] == "Halted"
    assert [w.verb for w in kv.writes()] == ["patch"]


def test_attach_convert_rewrites_dra_npus_as_sandbox(kv):
    """`--convert` on a VM whose NPUs come through rblnctl's DRA claim (as `vm attach --method dra` writes it):
    the real webhooks admit the rewrite, and the claim goes with it."""
    from rblnctl.vm.devices import claim_name

    npus_permitted(kv)
    claim = claim_name(kv.namespace, "v")
    obj = vm(kv.namespace, "v")
    spec = obj["spec"]["template"]["spec"]
    spec["domain"]["devices"]["hostDevices"] = [{"name": "npu0", "claimName": claim, "requestName": "npu0"}]
    spec["resourceClaims"] = [{"name": claim, "resourceClaimTemplateName": "rbln-npu-1"}]
    create(kv, obj)
    code, _, err = run(kv, "attach", "v", "--method", "sandbox")
    assert code == 1 and "--convert" in err, err
    code, doc, err = run(kv, "attach", "v", "--method", "sandbox", "--convert")
    assert code == 0, err
    spec = kv.vm("v")["spec"]["template"]["spec"]
    assert spec["domain"]["devices"]["hostDevices"] == [{"name": "npu0", "deviceName": SANDBOX_RESOURCE}]
    assert "resourceClaims" not in spec and doc["plan"]["method"] == "sandbox"


# -- the stopped mark under races and signals ------------------------------------------------------------------------


def test_a_vm_its_owner_stops_between_plan_and_stop_is_changed_and_left_stopped(kv, monkeypatch):
    """Issue 28.4: the owner's `virtctl stop` lands while rblnctl asks [y/N] (here: as it writes the mark). Before:
    rblnctl started the VM its owner had stopped."""
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    kv.wait_vmi_phase("v", "Running")
    strike(monkeypatch, is_mark, lambda send: (owner_stops(kv, "v"), send())[1])
    code, doc, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
    assert code == 0, err
    assert doc["result"]["restarted"] is False and "stopped by someone else" in doc["result"]["notRestarted"]
    assert kv.vm("v")["spec"]["runStrategy"] == "Halted"
    assert not [e for e in kv.requests() if e.verb == "update" and e.uri.endswith("/start")]
    assert STOPPED not in (kv.vm("v")["metadata"].get("annotations") or {})
    assert len(kv.vm("v")["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"]) == 2


def test_sigterm_as_the_mark_lands_leaves_no_mark_for_the_owners_stop(kv, monkeypatch):
    """Issue 28.1: SIGTERM after the mark landed, before its answer. Before: the mark stayed on the running VM; the
    owner stopped it, and the next `vm attach` with nothing to change started it."""
    def interrupted(send: Callable[[], Any]) -> Any:
        send()
        raise Interrupted(15)

    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    kv.wait_vmi_phase("v", "Running")
    strike(monkeypatch, is_mark, interrupted)
    code, doc, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes")
    assert code == 143, err
    assert f"VM {kv.namespace}/v was not stopped" in err and "(the same command) starts" not in err
    # the job is not done: the same command does it; -o json gets the document of what was done (nothing)
    assert f"(the same command) changes the NPUs of VM {kv.namespace}/v" in err
    assert doc is not None and (doc["result"]["changed"], doc["result"]["restarted"]) == (False, False), err
    assert STOPPED not in (kv.vm("v")["metadata"].get("annotations") or {})
    assert kv.vm("v")["spec"]["runStrategy"] == "Always"
    monkeypatch.undo()
    owner_stops(kv, "v")
    code, doc, err = run(kv, "attach", "v", "--npus", "1")  # nothing to change
    assert code == 0 and doc["plan"]["noop"] and not doc["plan"]["start"], err
    assert kv.vm("v")["spec"]["runStrategy"] == "Halted"


# -- issue 41.2: virt-api refuses a restart while the VM's VolumesChange condition is True -----------------------------

VOLUMES_CHANGE = {"type": "VolumesChange", "status": "True", "reason": "", "message": "volume migration in progress"}
RECOVERY = ("VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent targets; "
            "manual intervention is needed to reassign them to their original volumes.")


def _same_409_on_both(kv, apiserver, condition: dict, verb: str) -> None:
    """A Halted VM `h` with `condition` on the real KubeVirt and on the fake: virtctl's `verb` is refused with the same
    409 (message, reason, details) by both."""
    import urllib3

    from tests.fakes import objects as o

    ns = kv.namespace
    create(kv, vm(ns, "h", run_strategy="Halted"))
    kv.api.mutate("VirtualMachine", "h", ns, lambda v: v.setdefault("status", {}).setdefault(
        "conditions", []).append(dict(condition)), sub="status")
    status, real = kv.virtctl(verb, "h")
    want = f'Operation cannot be fulfilled on virtualmachine.kubevirt.io "h": {RECOVERY}'
    assert (status, real["message"], real["reason"]) == (409, want, "Conflict"), real
    apiserver.add(o.namespace(ns), o.vm(ns, "h", run_strategy="Halted"))
    apiserver.mutate("VirtualMachine", "h", ns, fn=lambda v: v.setdefault("status", {}).setdefault(
        "conditions", []).append(dict(condition)))
    resp = urllib3.PoolManager().request(
        "PUT", f"{apiserver.url}/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/h/{verb}",
        body=b"{}", headers={"Content-Type": "application/json", "Accept": "application/json, */*"})
    fake = json.loads(resp.data)
    assert (resp.status, fake["message"], fake["reason"], fake["details"]) == (409, want, "Conflict", real["details"])


def test_the_real_virt_api_refuses_a_restart_during_a_volume_change_as_the_fake_does(kv, apiserver):
    """kubevirt/kubevirt@v1.9.0 pkg/virt-api/rest/lifecycle.go RestartVMRequestHandler answers 409 "VM recovery
    required" while the VM's VolumesChange condition is True, before it looks at the runStrategy (a Halted VM gets
    that 409, not "RunStategy Halted does not support ..."); a start it allows, and rblnctl's `vm restart` of a
    stopped VM is a start (tests/vm/test_restart_races.py has the refusal of a running one, asked of the fake).
    The condition is written on a VM without a VMI: virt-controller mirrors a VMI's conditions onto its VM and drops
    the VM's others only while a VMI exists (v1.9.0 pkg/virt-controller/watch/vm/vm.go syncConditions), and a user's
    VMI status write does not stick."""
    kv.no_start_backoff()
    _same_409_on_both(kv, apiserver, VOLUMES_CHANGE, "restart")
    # rblnctl's restart of the stopped VM is a start, which virt-api allows during a volume change
    code, _, err = run(kv, "restart", "h", "--yes")
    assert code == 0, err
    assert kv.vm("h")["spec"]["runStrategy"] == "Always"


def test_the_real_virt_api_refuses_a_start_needing_manual_recovery_as_the_fake_does(kv, apiserver):
    """v1.9.0 StartVMRequestHandler: 409 "VM recovery required" while ManualRecoveryRequired is True (the fake's
    start, which did not refuse before issue 41, asked the same)."""
    recovery = {"type": "ManualRecoveryRequired", "status": "True", "reason": "VMI was removed or was final during "
                "the volume migration"}
    _same_409_on_both(kv, apiserver, recovery, "start")
