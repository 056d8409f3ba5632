"""`rblnctl kubevirt enable-gates | disable-gates`: KubeVirt's feature gates, through the one gate edit flow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli import completion
from rblnctl.cli.kubevirt.common import app, edit, patch_lines, writer_args
from rblnctl.cli.options import GateEdit, GuardOverrideOpt, Mutating, OutputOpt, examples, grouped
from rblnctl.cli.rerun import spell

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.kubevirt.gates import GateEditor, GatePlan, GateResult


def _gates_view(plan: GatePlan, result: GateResult | None) -> View:
    from rblnctl.cli.output import Table, View, joined
    from rblnctl.documents import KUBEVIRT_EDIT, body

    doc = body(KUBEVIRT_EDIT, spell, plan=plan, result=result)
    p = doc["plan"]
    t = Table("LIST", "BEFORE", "AFTER")
    t.add_row("featureGates", joined(p["featureGatesBefore"]), joined(p["featureGatesAfter"]))
    if p["disabledGatesBefore"] or p["disabledGatesAfter"]:
        t.add_row("disabledFeatureGates", joined(p["disabledGatesBefore"]), joined(p["disabledGatesAfter"]))
    head = [f"KubeVirt {p['namespace']}/{p['name']} ({p['version'] or 'version unknown'})"]
    return View(kind="KubeVirtGateChange", body=doc, preamble=head, tables=[t],
                epilogue=patch_lines(plan, result), names=[f"kubevirt.kubevirt.io/{p['name']}"])


def _run_gates(editor: GateEditor, plan: GatePlan, *, mode: str | None, yes: bool, output: OutputSpec,
               verb: str) -> None:
    """The edit flow for enable-gates and disable-gates."""
    ref = f"{plan.namespace}/{plan.name}"
    asked = ", ".join(plan.enable or plan.disable)

    def done(result: GateResult) -> str:
        final = result.plan
        changed = final.added + final.undisabled if final.enable else final.removed + final.newly_disabled
        return f"{verb} {', '.join(dict.fromkeys(changed))} on KubeVirt {ref}"

    # Turning a gate off breaks what uses it at its next start: asked first (docs/kubevirt.md); adding one is not.
    edit(editor.apply, plan, mode=mode, yes=yes, output=output, plan_view=lambda p: _gates_view(p, None),
         result_view=lambda r: _gates_view(r.plan, r), noop=f"{asked}: already {verb} on KubeVirt {ref}", done=done,
         disruptive=bool(plan.turns_off))



@app.command("enable-gates", short_help="Enable HostDevices (and DRA) gates.", epilog=examples(
    "rblnctl kubevirt enable-gates                 # HostDevices, for the sandbox device plugin",
    "rblnctl kubevirt enable-gates --dra           # and HostDevicesWithDRA (KubeVirt >= 1.9)",
    "rblnctl kubevirt enable-gates --dry-run       # the JSON Patch it would send",
))
@grouped
def enable_gates(
    ctx: typer.Context,
    gates: Annotated[
        list[str] | None,
        typer.Argument(help="More gates to enable along with HostDevices (letters and digits).", metavar="GATE",
                       autocompletion=completion.complete_gates,
                       show_default=False),
    ] = None,
    dra: Annotated[
        bool, typer.Option("--dra", help="Also enable HostDevicesWithDRA, for DRA (needs KubeVirt >= 1.9.0).")
    ] = False,
    target: GateEdit = GateEdit.options(),
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Add HostDevices (and with --dra HostDevicesWithDRA) to KubeVirt's feature gates, keeping the others."""
    from rblnctl.kubevirt.gates import GateEditor, check_known, rbln_gates, validate_gates

    mode, yes = mutation.how, mutation.yes
    wanted = validate_gates([*rbln_gates(dra=dra), *(gates or [])])
    check_known(wanted, allow_unknown=target.allow_unknown)  # a typo is bad input before anything connects (exit 2)
    editor = GateEditor(**writer_args(ctx, target.name, target.force, mode), allow_unknown=target.allow_unknown)
    plan = editor.plan(enable=wanted)
    _run_gates(editor, plan, mode=mode, yes=yes, output=output, verb="enabled")


@app.command("disable-gates", short_help="Remove KubeVirt feature gates.", epilog=examples(
    "rblnctl kubevirt disable-gates HostDevicesWithDRA",
    "rblnctl kubevirt disable-gates HostDevicesWithDRA --add-to-disabled   # a Beta gate on by default",
))
@grouped
def disable_gates(
    ctx: typer.Context,
    gates: Annotated[
        list[str],
        typer.Argument(help="Gates to remove from featureGates, e.g. HostDevicesWithDRA.", metavar="GATE",
                       autocompletion=completion.complete_gates,
                       show_default=False),
    ],
    add_to_disabled: Annotated[
        bool,
        typer.Option("--add-to-disabled", help="Also list the gates in disabledFeatureGates (KubeVirt >= 1.9.0), "
                     "which turns off a Beta gate that is on by default."),
    ] = False,
    target: GateEdit = GateEdit.options(),
    evict_vms: GuardOverrideOpt = False,
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Remove gates from KubeVirt's feature gates (rollback), keeping the others.

    Turning HostDevices or HostDevicesWithDRA off is refused while a running VM's NPUs need it (the refusal names
    each VM and `virtctl stop`; --evict-vms goes ahead); turning any gate off asks first (--yes skips)."""
    from rblnctl.kubevirt.gates import GateEditor
    from rblnctl.vm.gates import guard_gates

    mode, yes = mutation.how, mutation.yes
    editor = GateEditor(**writer_args(ctx, target.name, target.force, mode), allow_unknown=target.allow_unknown)
    plan = guard_gates(editor.kube, editor.plan(disable=gates, add_to_disabled=add_to_disabled), evict_vms=evict_vms)
    _run_gates(editor, plan, mode=mode, yes=yes, output=output, verb="disabled")
