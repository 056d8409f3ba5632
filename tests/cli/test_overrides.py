"""node set-mode / drain overrides: one flag, one meaning each (issue 21 item 3, docs/node.md "Overrides").

Each refusal names the one flag that lifts it; that flag lifts it and nothing else does, `--force` least
of all (it keeps kubectl drain's meaning: pods without a controller).
"""

from __future__ import annotations

import json

import pytest

from rblnctl.node.events import Step
from rblnctl.node.record import SwitchRecord
from tests.fakes import objects as o
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli
from rblnctl.constants import SET_MODE_ANNOTATION as ANN
from tests.fakes.objects import ONE_NPU as NPU

PF = "rebellions.ai/RBLN-CA22_PF"
EVERY_FLAG = ("--force", "--evict-vms", "--evict-daemonsets", "--skip-iommu-check", "--skip-release-check",
              "--take-over", "--reverse")


@pytest.fixture
def cluster(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"), o.replicaset("default", "web"),
                  o.pod("default", "npu-app", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU))
    op = SimulatedOperator(apiserver).start()
    assert op.wait_idle()
    apiserver.clear_requests()
    yield apiserver
    op.stop()


def plan(cluster, *args):
    """`node set-mode ... --dry-run -o json`: exit code, stderr, and the plan's blockers' overrides."""
    r = cli("node", *args, "--dry-run", "-o", "json", server=cluster.url)
    doc = json.loads(r.stdout) if r.stdout else {}
    overrides = {b["override"] for b in (doc.get("plan") or {}).get("blockers", [])}
    return r, overrides


def only_flag_lifts(cluster, args, flag, override):
    """The refusal names `flag`; every other flag leaves it; `flag` alone lifts it; nothing was written."""
    r, overrides = plan(cluster, *args)
    assert r.exit_code == 1 and override in overrides, r.stderr
    assert f"(pass {flag} to go ahead anyway)" in r.stderr
    for other in EVERY_FLAG:
        if other != flag:
            assert override in plan(cluster, *args, other)[1], other
    r, overrides = plan(cluster, *args, flag)
    assert override not in overrides, r.stderr
    assert cluster.writes() == []
    return r


def test_vm_guard_names_virtctl_stop_and_only_evict_vms_lifts_it(cluster):
    cluster.add(o.vmi("vms", "vm1", "n1", host_devices=[PF]))
    r, _ = plan(cluster, "set-mode", "vm", "n1")
    assert "VM vms/vm1" in r.stderr and "cannot live-migrate" in r.stderr
    assert "`virtctl stop vm1 -n vms`" in r.stderr and "migrate these VMs" not in r.stderr
    only_flag_lifts(cluster, ("set-mode", "vm", "n1"), "--evict-vms", "evict_vms")


def test_a_standalone_vmi_is_deleted_not_stopped(cluster):
    vmi = o.vmi("vms", "loose", "n1", host_devices=[PF])
    vmi["metadata"].pop("ownerReferences")
    cluster.add(vmi)
    r, _ = plan(cluster, "set-mode", "vm", "n1")
    assert "`kubectl delete vmi loose -n vms`" in r.stderr and "virtctl stop" not in r.stderr


def test_drain_vm_launchers_only_evict_vms(cluster):
    cluster.add(o.vmi("vms", "vm1", "n1", host_devices=[PF]), o.virt_launcher("vms", "vm1", "n1", resources={PF: "1"}))
    r = cli("node", "drain", "n1", "--dry-run", server=cluster.url)
    assert r.exit_code == 1 and "`virtctl stop vm1 -n vms`" in r.stderr and "pass --evict-vms" in r.stderr
    assert cli("node", "drain", "n1", "--force", "--dry-run", server=cluster.url).exit_code == 1
    assert cli("node", "drain", "n1", "--evict-vms", "--dry-run", server=cluster.url).exit_code == 0


def test_daemonset_npu_pods_only_evict_daemonsets(cluster):
    cluster.add(o.daemonset("monitoring", "npu-agent"),
                o.pod("monitoring", "npu-agent-n1", node="n1", owner_kind="DaemonSet", owner_name="npu-agent",
                      requests=NPU))
    only_flag_lifts(cluster, ("set-mode", "vm", "n1"), "--evict-daemonsets", "evict_daemonsets")


def test_nfd_iommu_off_only_skip_iommu_check(cluster):
    from tests.preflight.cluster_support import nfd_features

    devices = [{"vendor": "1eff", "device": "1220", "class": "1200"},
               {"vendor": "15b3", "device": "101d", "class": "0200", "iommu_group/type": "DMA"}]
    cluster.add(nfd_features("n1", iommu=False, pci_devices=devices))
    r = only_flag_lifts(cluster, ("set-mode", "vm", "n1"), "--skip-iommu-check", "skip_iommu_check")
    assert "check skipped: node n1's IOMMU is off" in r.stderr


def test_expired_lock_only_take_over(cluster):
    cluster.add(o.lease("rbln-system", "rblnctl-node-n1", holder="rblnctl@gone pid 1: set-mode n1 vm"))
    only_flag_lifts(cluster, ("set-mode", "vm", "n1"), "--take-over", "take_over")


def test_unfinished_switch_to_the_other_mode_only_reverse(cluster):
    record = SwitchRecord(target="vm-passthrough", from_mode="container", started="2026-12-03T00:00:00Z",
                          cordoned_by_rblnctl=True, step=Step.CORDON)
    node = cluster.get("Node", "n1")
    node["spec"]["unschedulable"] = True
    node["metadata"].setdefault("annotations", {})[ANN] = record.to_json()
    cluster.update(node)
    cluster.clear_requests()
    r = cli("node", "set-mode", "container", "n1", "--dry-run", server=cluster.url)
    assert r.exit_code == 1 and "unfinished" in r.stderr and "(pass --reverse)" in r.stderr
    assert f"go back: rblnctl --server {cluster.url} node set-mode container n1 --reverse" in r.stderr
    for other in EVERY_FLAG:
        if other != "--reverse":
            assert cli("node", "set-mode", "container", "n1", other, "--dry-run", server=cluster.url).exit_code == 1
    r = cli("node", "set-mode", "container", "n1", "--reverse", "--dry-run", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert "reversing an unfinished switch to vm" in r.stderr
    assert cluster.writes() == []


def test_force_keeps_kubectl_drain_meaning_and_says_so_when_another_flag_is_needed(cluster):
    cluster.add(o.pod("default", "bare", node="n1", requests=NPU), o.vmi("vms", "vm1", "n1", host_devices=[PF]))
    r, overrides = plan(cluster, "set-mode", "vm", "n1")
    assert overrides == {"force", "evict_vms"}
    r, overrides = plan(cluster, "set-mode", "vm", "n1", "--force")
    assert overrides == {"evict_vms"}  # the bare pod is covered; the VM is not
    assert "note: --force means only what kubectl drain's does" in r.stderr
    r, overrides = plan(cluster, "set-mode", "vm", "n1", "--force", "--evict-vms")
    assert r.exit_code == 0 and overrides == set(), r.stderr
    assert cluster.writes() == []
