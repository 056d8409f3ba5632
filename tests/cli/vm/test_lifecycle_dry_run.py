"""`rblnctl vm start|stop --dry-run` on a VM already there: the no-op line is words, not a Python function.

cli/flow.py printed Mutation.noop_message as it was on a client dry run, and vm start|stop|restart give a function
of the result there (what a wait found): `--dry-run` printed `<function ...noop at 0x...>` (found by mypy).
"""

from __future__ import annotations

from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22, NS, sandbox_cluster


def test_a_dry_run_start_of_a_running_vm_says_why_nothing_is_asked(apiserver):
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver, npus=4)
    apiserver.add(o.vm(NS, "v1", running=False, node="n1", host_devices=[CA22]))
    assert cli("vm", "start", "v1", "-n", NS, server=apiserver.url).exit_code == 0
    apiserver.clear_requests()
    r = cli("vm", "start", "v1", "-n", NS, "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "<function" not in r.stderr + r.stdout
    assert f"VM {NS}/v1: " in r.stderr and "nothing to ask" in r.stderr
    assert [q for q in apiserver.requests if q.method != "GET"] == []
