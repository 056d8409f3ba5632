"""Issue 37, finding 5: a question is asked next to its verdict. Every `[y/N]` screen ends with the warnings that bear
on the answer (the plan above it may be a screen long: a VM's JSON patch is ~20 lines at 80 columns), and a change
whose result can never run (a restart onto more NPUs than any node offers) is refused without --force, not asked."""

from __future__ import annotations

from tests.fakes import objects as o
from tests.helpers import cli
from tests.terminal import on_terminal
from tests.vm.support import CA22, NS, sandbox_cluster

TOO_MANY = "5 NPUs: no vm-passthrough node offers that many (the most is 4, on n1)"


def _running(apiserver, *, npus: int = 1, node_npus: int = 4) -> None:
    """VM v1 running on n1 (of `node_npus` NPUs) with `npus` NPUs, its virt-launcher holding them."""
    apiserver.simulate_kubevirt = True
    sandbox_cluster(apiserver, npus=node_npus)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22] * npus, node="n1"), o.vmi(NS, "v1", "n1", [CA22] * npus))


def _vm_writes(apiserver) -> list:
    return [w for w in apiserver.writes() if "virtualmachines" in w.path]


def test_a_restart_onto_more_npus_than_any_node_offers_is_refused_without_force(apiserver):
    """Before: asked `Restart VM vms/v1 ...? [y/N]` (with --yes: did it), stopping a running VM that could never start
    again. Now: refused before any write, exit 1, naming the count that fits and --force."""
    _running(apiserver)
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "5", "--restart", "--yes", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    assert f"{TOO_MANY}; the VM will not be scheduled until one does: restarting stops VM {NS}/v1" in r.stderr
    assert "ask for at most 4 NPU(s)" in r.stderr and "--npus 4 --restart" in r.stderr
    assert "(pass --force to go ahead anyway)" in r.stderr
    assert _vm_writes(apiserver) == []
    forced = cli("vm", "attach", "v1", "-n", NS, "--npus", "5", "--restart", "--force", "--dry-run",
                 server=apiserver.url)
    assert forced.exit_code == 0, forced.stderr
    assert TOO_MANY in forced.stderr and f"restarting VM {NS}/v1 anyway (forced)" in forced.stderr


def test_a_stopped_vm_or_a_change_for_the_next_restart_still_only_warns(apiserver):
    """Nothing running is stopped there: the fit stays a warning (the VM is not started by the change)."""
    _running(apiserver)
    staged = cli("vm", "attach", "v1", "-n", NS, "--npus", "5", "--next-restart", "--dry-run", server=apiserver.url)
    assert staged.exit_code == 0, staged.stderr
    assert TOO_MANY in staged.stderr
    apiserver.add(o.vm(NS, "v2", running=False))
    stopped = cli("vm", "attach", "v2", "-n", NS, "--npus", "5", "--yes", server=apiserver.url)
    assert stopped.exit_code == 0, stopped.stderr
    assert TOO_MANY in stopped.stderr


def test_at_80x24_the_refusal_is_on_screen_and_nothing_is_asked(apiserver):
    _running(apiserver)
    screen = on_terminal(["--server", apiserver.url, "vm", "attach", "v1", "-n", NS, "--npus", "5", "--restart"],
                         answers=["y"])
    assert screen.code == 1, screen.text
    assert "[y/N]" not in screen.text
    assert "--force" in " ".join(screen.text.split())
    assert _vm_writes(apiserver) == []


def test_at_80x24_the_warnings_are_the_last_lines_before_the_question(apiserver):
    """A restart onto 3 NPUs while another VM's launcher holds 2 of n1's 4: it would not be scheduled now. Before,
    the warning came first and the ~20-line plan (its JSON patch) scrolled it off; now it is the last thing above
    `[y/N]`, and said once."""
    _running(apiserver)
    apiserver.add(o.virt_launcher("other", "busy", "n1", resources={CA22: "2"}))
    screen = on_terminal(["--server", apiserver.url, "vm", "attach", "v1", "-n", NS, "--npus", "3", "--restart"],
                         answers=["n"])
    assert screen.code == 1, screen.text
    flat = " ".join(screen.text.split())
    warning = ("warning: 3 NPUs: no node the VM may run on has that many free now (free: n1 2); it will not be "
               "scheduled until NPUs are freed (vm fit shows where they go)")
    question = f"Restart VM {NS}/v1 to change its NPUs (it stops, then starts again)? [y/N]"
    assert f"{warning} {question}" in flat, screen.text  # nothing between the verdict and the question
    assert flat.count("has that many free now") == 1
    assert flat.find("patch (application/json-patch+json)") < flat.find(warning)  # the plan is above it
    assert _vm_writes(apiserver) == []
