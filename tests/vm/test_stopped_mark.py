"""The stopped-by-rblnctl mark (rebellions.ai/rblnctl.stopped) is acted on only while the VM is stopped.

rblnctl marks a VM before it stops it and clears the mark once it has started it again; when it cannot start it,
the mark stays so that the next run does (tests/vm/test_restart.py). A VM that runs while it carries the mark was
started by someone else (`virtctl start`, as the error told them): it is not rblnctl's to start, stop or restart.
"""

from __future__ import annotations

from tests.fakes import objects as o
from tests.vm.support import CA22, NS, attacher, sandbox_cluster, vm_writes

STOPPED = "rebellions.ai/rblnctl.stopped"


def marked_but_started_by_hand(apiserver) -> None:
    """VM v1 carries the mark of a run that could not start it, and runs: someone started it since."""
    sandbox_cluster(apiserver)
    vm = o.vm(NS, "v1", host_devices=[CA22])
    vm["metadata"]["annotations"] = {STOPPED: "2026-01-01T00:00:00Z"}
    apiserver.add(vm, o.vmi(NS, "v1", "n1", [CA22]))


def test_a_running_vm_with_the_mark_is_not_started_again(apiserver, kube):
    marked_but_started_by_hand(apiserver)
    plan = attacher(kube, npus=1).plan("v1", NS)
    assert plan.noop and not plan.start and not plan.blockers
    assert not any("stopped by an earlier rblnctl run" in str(w) for w in plan.warnings)
    assert attacher(kube, npus=1).apply(plan).changed is False and vm_writes(apiserver) == []


def test_a_change_to_a_running_vm_with_the_mark_is_refused_as_running(apiserver, kube):
    marked_but_started_by_hand(apiserver)
    plan = attacher(kube, npus=2).plan("v1", NS)
    (b,) = plan.blockers
    assert b.override == "restart" and "is running" in b.message and not plan.start
