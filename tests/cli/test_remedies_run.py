"""Issue 39: every remedy a command prints is accepted by the command it names, checked by running it.

Generated over every scenario world of the suite's fakes: the crash-point explorer's worlds (tests/explore/worlds.py,
one per multi-step command) and the worlds of issue 39 (WORLDS below: the shared stack's three nodes of three
products, chart v0.3.0's policy, in container mode, with two products in vm mode, and with a switch to vm cut
short under a plugin stuck in `Init:0/2`). In each world every display command and every dry run of a write the
world offers (SURFACES, the world's own command too) is run, and each Remedy the CLI spells is recorded where it is
spelt (rblnctl.cli.rerun.command_words / render, rblnctl.remedy.Command.line: one path for all of them). Then, in
the same world (tests/remedy_check.py: the one mechanism, which the real tiers' worlds use too,
tests/envtest/test_remedies_run_real.py):

- each rblnctl command runs with `--dry-run` when it takes one (else as it is: a display); none may be refused
  (`error: refusing ...`), be bad input (exit 2), or, as a dry run, fail. A command run on a node's host
  (Command.on_host: `preflight --local`, `vfio ...`) is parsed only: this machine is not that host.
- each external command (kubectl, helm, virtctl) has its subcommand and every flag checked against that
  program's `--help`: kubectl's own (it is on PATH); helm's and virtctl's recorded (tests/remedy_check.py) with
  their source.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rblnctl.remedy import Command
from tests.explore import worlds as explore
from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.releases import V0_3_0
from tests.remedy_check import check_external, check_own, check_world, surfaces

# -- the worlds of issue 39: the shared stack (../shared/stack/README.md, nodes.yaml) on the fake -------------------

STACK = (("npu-node-1", "RBLN-CA12", 4), ("npu-node-2", "RBLN-CA25", 4), ("npu-node-3", "RBLN-CA22", 2))


def stack(server: FakeApiServer, modes: tuple[str, str, str] = ("container",) * 3) -> None:
    """Chart v0.3.0's policy (its sandbox resourceList names RBLN-CA12 ATOM_PT and RBLN-CA25 ATOM_MAX_PT, nothing
    for RBLN-CA22: RBLN-SW/rbln-npu-operator@v0.3.0 deployments/rbln-npu-operator/values.yaml lines 272-284, as
    tests/fakes/releases.py V03_SANDBOX_RESOURCES), KubeVirt v1.9.0 with HostDevices, the stack's three nodes."""
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True, device_plugin=True)
    server.add(policy, o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"), o.namespace("vms"))
    for (name, product, npus), mode in zip(STACK, modes, strict=True):
        server.add(o.npu_node(name, product=product, npus=npus, mode=mode, release=V0_3_0, policy=policy))


def stack_two_products_in_vm_mode(server: FakeApiServer) -> list[Callable[[], None]]:
    stack(server, ("vm-passthrough", "vm-passthrough", "container"))
    server.add(o.vm("vms", "v1", running=False, host_devices=[o.vm_resource_name("RBLN-CA12")]))
    return []


def stack_in_container_mode(server: FakeApiServer) -> list[Callable[[], None]]:
    stack(server)
    return []


def stack_with_a_known_v030_operator(server: FakeApiServer) -> list[Callable[[], None]]:
    """The stack with the operator's Deployment as chart v0.3.0 renders it: its version is known, and its sandbox
    plugin serves no VM, so `node set-mode vm` refuses every node (found by the real tier's remedy check,
    tests/envtest/test_remedies_run_real.py: preflight and `vm diagnose` named such a switch). A VM asks for
    RBLN-CA12's sandbox resource."""
    stack(server)
    server.add(V0_3_0.operator_deployment(), o.vm("vms", "v1", running=False, host_devices=["rebellions.ai/ATOM_PT"]))
    return []


def stack_switch_cut_short(server: FakeApiServer) -> list[Callable[[], None]]:
    """npu-node-1 relabelled to vm by a set-mode cut short (its record, the cordon), the simulated operator v0.3.0
    converging it: its sandbox plugin waits in `Init:0/2` (driver-ready) for a driver pod that never runs on a
    vm-passthrough node (RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/patch/sandbox-device-plugin.go), as on the
    shared stack. A VM asks for the node's product."""
    import json

    from tests.fakes.operator import SimulatedOperator

    stack(server)
    op = SimulatedOperator(server, release=V0_3_0, ready_delay_s=0.05).start()
    assert op.wait_idle()
    server.mutate("Node", "npu-node-1", None, fn=lambda n: (
        n["metadata"]["labels"].update({o.WORKLOAD_LABEL: o.MODE_VM}),
        n["metadata"].setdefault("annotations", {}).update({"rebellions.ai/rblnctl.set-mode": json.dumps(
            {"target": o.MODE_VM, "from": "container", "started": "2026-12-06T10:00:00Z",
             "cordoned_by_rblnctl": True, "step": "wait"})}),
        n["spec"].update(unschedulable=True)))
    assert op.wait_idle()
    server.add(o.vm("vms", "v1", running=False, host_devices=["rebellions.ai/ATOM_PT"]))  # v0.3.0's CA12 name
    return [op.stop]


WORLDS: dict[str, Callable[[FakeApiServer], list[Callable[[], None]]]] = {
    "stack-container": stack_in_container_mode,
    "stack-v030-known": stack_with_a_known_v030_operator,
    "stack-two-products-vm": stack_two_products_in_vm_mode,
    "stack-switch-cut-short": stack_switch_cut_short,
}
for _w in explore.WORLDS:  # one per builder (several commands share a world)
    if _w.build not in WORLDS.values():
        WORLDS[_w.name] = _w.build
COMMAND_OF = {w.name: w.argv for w in explore.WORLDS}  # the world's own command, as a dry run
# permit-devices with nothing advertised names a switch to vm: under a known v0.3.0, one set-mode refuses
COMMAND_OF["stack-v030-known"] = ["kubevirt", "permit-devices"]

# -- the test ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("world", sorted(WORLDS))
def test_every_remedy_printed_in_the_world_is_accepted_by_the_command_it_names(world, monkeypatch):
    server = FakeApiServer().start()
    stops: list[Callable[[], None]] = []
    try:
        stops = WORLDS[world](server)
        checked = check_world(world, ["--server", server.url], surfaces(server, COMMAND_OF.get(world)), monkeypatch)
        assert checked.problems == [], "\n".join(checked.problems)
    finally:
        for stop in stops:
            stop()
        server.stop()


def test_the_check_finds_a_remedy_the_named_command_refuses(monkeypatch):
    """The check itself can fail: issue 39 (1)'s hint, `node set-mode vm npu-node-3` of an RBLN-CA22 node under chart
    v0.3.0's policy, is refused by set-mode, and check_own says so."""
    server = FakeApiServer().start()
    try:
        stack(server)
        words = ("rblnctl", "--server", server.url, "node", "set-mode", "vm", "npu-node-3")
        why = check_own(words, Command.own("node", "set-mode", "vm", "npu-node-3"))
        assert why is not None and why.startswith("refused:") and "RBLN-CA22" in why
        assert check_external(("kubectl", "uncordon", "n1", "--no-such-flag")) == \
            "kubectl uncordon has no --no-such-flag"
        assert check_external(("kubectl", "uncordon", "n1")) is None
        assert check_external(("helm", "upgrade", "x", "y", "--reuse-valuez")) == "helm upgrade has no --reuse-valuez"
    finally:
        server.stop()
