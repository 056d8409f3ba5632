"""`rblnctl kubevirt enable-gates | disable-gates | permit-devices | status | migrate-resources`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rblnctl.cli import completion
from rblnctl.cli.options import examples

from rblnctl.cli.options import GuardOverrideOpt, Mutating, OutputOpt, grouped
from rblnctl.cli.rerun import spell

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.kubevirt.devices import DevicePermitter, DevicePlan, DeviceResult
    from rblnctl.kubevirt.gates import GateEditor, GatePlan, GateResult
    from rblnctl.kubevirt.status import KubeVirtStatus
    from rblnctl.vm.resource_rename import MigrationPlan, MigrationResult

    EditPlan = GatePlan | DevicePlan
    EditResult = GateResult | DeviceResult

app = typer.Typer(
    help="Edit the KubeVirt CR for RBLN NPUs: feature gates and permitted host devices, conflict-safely. "
         "A CR the HyperConverged Cluster Operator manages is refused: edit its HyperConverged CR instead.",
    no_args_is_help=True,
)

NameOpt = Annotated[
    str | None,
    typer.Option("--name", metavar="NAME", help="Name of the KubeVirt CR [default: the only one in the cluster].",
                 show_default=False),
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Go ahead when the KubeVirt version is below what the change needs, or unknown."),
]
AllowUnknownOpt = Annotated[
    bool,
    typer.Option("--allow-unknown", help="Write gates no KubeVirt release rblnctl knows registers (for a KubeVirt "
                 "newer than rblnctl); without it such a name is refused as a typo, with the gate it most likely "
                 "meant."),
]


def _retry_line(what: str, attempt: int, message: str) -> str:
    from rblnctl.kubevirt.cr import LOST_REPLY

    if message.startswith(LOST_REPLY):  # a lost reply the read-back showed not applied
        return f"{message} (attempt {attempt}); retrying"
    return f"{what} changed while we were writing it (attempt {attempt}); re-reading and retrying"


def _on_retry(attempt: int, message: str) -> None:
    from rblnctl.cli.console import info

    info(_retry_line("the KubeVirt CR", attempt, message))


def _writer_args(ctx: typer.Context, name: str | None, force: bool, mode: str | None) -> dict:
    from rblnctl.kubevirt.cr import CrWriteOptions

    # -n/--namespace is global, as in kubectl; unset, the CR is looked for in every namespace.
    options = CrWriteOptions(name=name, namespace=ctx.obj.namespace, force=force, server_dry_run=mode == "server")
    return {"kube": ctx.obj.kube(), "options": options, "on_retry": _on_retry}


def _edit(writer: GateEditor | DevicePermitter, plan: EditPlan, *, mode: str | None, yes: bool, output: OutputSpec,
          view: Callable[[Any, Any], View], noop: str, done: Callable[[Any], str], disruptive: bool = False) -> None:
    """Run a KubeVirt CR edit through the one flow. An edit that only adds is reversible and never prompts; one
    that turns something off (`disruptive`: a gate) asks first, exit 2 without --yes when nobody can answer."""
    from rblnctl.cli.flow import Mutation, run

    ref = f"{plan.namespace}/{plan.name}"
    # a gate edit or a device permit: one of two (plan, result) pairs, which the union of writers cannot pair up
    run(Mutation[Any, Any](
        plan=plan, apply=writer.apply, refusal=f"refusing to edit KubeVirt {ref}", question=f"Patch KubeVirt {ref}?",
        disruptive=disruptive, dry_run=mode, yes=yes, output=output, plan_view=lambda p: view(p, None),
        result_view=lambda r: view(r.plan, r), noop_message=noop,
        done_message=lambda r: done(r.plan) if r.changed else f"{noop}; nothing to change",
    ))


def _patch_lines(plan: EditPlan, result: EditResult | None) -> list[str]:
    """A client dry run shows the JSON Patch it would send."""
    import json

    from rblnctl.kubevirt.cr import PATCH_CONTENT_TYPE

    if result is not None or plan.noop or not plan.patch:
        return []
    return [f"patch ({PATCH_CONTENT_TYPE}): {json.dumps(plan.patch, separators=(',', ':'))}"]


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
                epilogue=_patch_lines(plan, result), names=[f"kubevirt.kubevirt.io/{p['name']}"])


def _run_gates(editor: GateEditor, plan: GatePlan, *, mode: str | None, yes: bool, output: OutputSpec,
               verb: str) -> None:
    """The edit flow for enable-gates and disable-gates."""
    ref = f"{plan.namespace}/{plan.name}"
    asked = ", ".join(plan.enable or plan.disable)

    def done(final: Any) -> str:
        changed = final.added + final.undisabled if final.enable else final.removed + final.newly_disabled
        return f"{verb} {', '.join(dict.fromkeys(changed))} on KubeVirt {ref}"

    # Turning a gate off breaks what uses it at its next start: asked first (docs/kubevirt.md); adding one is not.
    _edit(editor, plan, mode=mode, yes=yes, output=output, view=_gates_view,
          noop=f"{asked}: already {verb} on KubeVirt {ref}", done=done, disruptive=bool(plan.turns_off))


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
    name: NameOpt = None,
    force: ForceOpt = False,
    allow_unknown: AllowUnknownOpt = False,
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Add HostDevices (and with --dra HostDevicesWithDRA) to KubeVirt's feature gates, keeping the others."""
    from rblnctl.kubevirt.gates import GateEditor, check_known, rbln_gates, validate_gates

    mode, yes = mutation.how, mutation.yes
    wanted = validate_gates([*rbln_gates(dra=dra), *(gates or [])])
    check_known(wanted, allow_unknown=allow_unknown)  # a typo is bad input before anything connects (exit 2)
    editor = GateEditor(**_writer_args(ctx, name, force, mode), allow_unknown=allow_unknown)
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
    name: NameOpt = None,
    force: ForceOpt = False,
    allow_unknown: AllowUnknownOpt = False,
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
    editor = GateEditor(**_writer_args(ctx, name, force, mode), allow_unknown=allow_unknown)
    plan = guard_gates(editor.kube, editor.plan(disable=gates, add_to_disabled=add_to_disabled), evict_vms=evict_vms)
    _run_gates(editor, plan, mode=mode, yes=yes, output=output, verb="disabled")


# -- permitted host devices ------------------------------------------------------------------------


def _devices_view(plan: DevicePlan, result: DeviceResult | None) -> View:
    from rblnctl.cli.output import Table, View
    from rblnctl.documents import KUBEVIRT_EDIT, body

    doc = body(KUBEVIRT_EDIT, spell, plan=plan, result=result)
    p = doc["plan"]
    t = Table("RESOURCE", "PCI SELECTOR", "EXTERNAL PROVIDER", "CHANGE")
    for e in p["pciHostDevicesAfter"]:
        rn = str(e.get("resourceName") or "")
        change = ("added" if rn in p["added"] else "externalResourceProvider->true" if rn in p["fixed"]
                  else "needs-fix" if rn in p["needsFix"] else "kept")
        t.add_row(rn, str(e.get("pciVendorSelector") or ""), "true" if e.get("externalResourceProvider") else "false",
                  change)
    head = [f"KubeVirt {p['namespace']}/{p['name']} permittedHostDevices.pciHostDevices"
            + ("" if p["pciHostDevicesAfter"] else ": <none>")]
    return View(kind="KubeVirtDeviceChange", body=doc, preamble=head,
                tables=[t] if p["pciHostDevicesAfter"] else [], epilogue=_patch_lines(plan, result),
                names=[f"kubevirt.kubevirt.io/{p['name']}"])


@app.command("permit-devices", short_help="Permit RBLN NPUs as KubeVirt host devices.", epilog=examples(
    "rblnctl kubevirt permit-devices                              # what vm-mode nodes advertise",
    "rblnctl kubevirt permit-devices --resource-name RBLN-CA22_PF",
    "rblnctl kubevirt permit-devices --fix --dry-run",
))
@grouped
def permit_devices(
    ctx: typer.Context,
    resource_name: Annotated[
        list[str] | None,
        typer.Option("--resource-name", help="Resource to permit, e.g. rebellions.ai/RBLN-CA22_PF (repeatable); "
                     "NAME=1EFF:DDDD gives the PCI ID of a product rblnctl does not know.", metavar="NAME",
                     show_default=False),
    ] = None,
    from_cluster: Annotated[
        bool, typer.Option("--from-cluster", help="Permit every VM resource NPU nodes advertise (the default when no "
                           "--resource-name is given).")
    ] = False,
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", help="With --from-cluster: only NPU nodes matching this label selector.",
                     metavar="SELECTOR", show_default=False),
    ] = None,
    fix: Annotated[
        bool, typer.Option("--fix", help="Set externalResourceProvider: true on RBLN entries that have it false.")
    ] = False,
    name: NameOpt = None,
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Permit RBLN NPUs as KubeVirt host devices (pciHostDevices), keeping every other entry."""
    from rblnctl.errors import ConfigError
    from rblnctl.kubevirt.devices import DevicePermitter, precheck_resource_name

    mode, yes = mutation.how, mutation.yes
    for n in resource_name or []:
        precheck_resource_name(n)  # bad input fails before connecting
    if selector and not from_cluster and (resource_name or fix):
        raise ConfigError("--selector picks the nodes whose resources are permitted: it needs --from-cluster")
    permitter = DevicePermitter(**_writer_args(ctx, name, False, mode), fix=fix)
    plan = permitter.plan(resource_name or [], from_cluster=from_cluster or None, node_selector=selector)
    ref = f"{plan.namespace}/{plan.name}"

    def done(final: Any) -> str:
        changed = [f"added {', '.join(final.added)}"] if final.added else []
        changed += [f"fixed {', '.join(final.fixed)}"] if final.fixed else []
        return f"{'; '.join(changed)} on KubeVirt {ref}"

    _edit(permitter, plan, mode=mode, yes=yes, output=output, view=_devices_view,
          noop=f"already permitted on KubeVirt {ref}", done=done)


# -- status ----------------------------------------------------------------------------------------


def _spelt_notes(ctx: typer.Context, st: KubeVirtStatus) -> KubeVirtStatus:
    """The status with each note that names a command (a Remedy) spelt for this user (rblnctl.cli.rerun)."""
    import dataclasses

    from rblnctl.cli.rerun import remedy_text
    from rblnctl.remedy import Remedy

    return dataclasses.replace(st, notes=[remedy_text(ctx, n) if isinstance(n, Remedy) else n for n in st.notes])


def _status_view(st: KubeVirtStatus) -> View:
    from rblnctl.cli.output import Cell, Table, View, joined
    from rblnctl.documents import KUBEVIRT_STATUS

    doc = KUBEVIRT_STATUS(st)
    head = [f"KubeVirt:              {doc['namespace']}/{doc['name']}",
            f"Phase:                 {doc['phase'] or '<unknown>'}" + (" (being deleted)" if doc["deleting"] else ""),
            f"Version:               {doc['version'] or '<unknown>'}",
            f"featureGates:          {joined(doc['featureGates'])}"]
    if doc["disabledFeatureGates"]:
        head.append(f"disabledFeatureGates:  {joined(doc['disabledFeatureGates'])}")
    gates = Table("GATE", "EFFECTIVE", "WHY")
    for g in doc["gates"]:
        on = Cell("on", "green") if g["effective"] else Cell("unknown", "yellow") if g["effective"] is None \
            else Cell("off", "red")
        gates.add_row(g["name"], on, g["reason"])
    tables = [gates]
    if doc["permittedDevices"]:
        devices = Table("PERMITTED RBLN DEVICE", "PCI SELECTOR", "MODEL", "EXTERNAL PROVIDER")
        for d in doc["permittedDevices"]:
            devices.add_row(d["resourceName"], d["pciVendorSelector"], (d["model"] or "<unknown>").replace(" ", "-"),
                            Cell("true") if d["externalResourceProvider"] else Cell("false", "red"))
        tables.append(devices)
    notes = []  # no RBLN device permitted: the library's note says so, with the command that permits them
    if doc["otherPermittedDevices"]:
        n = doc["otherPermittedDevices"]
        notes.append(f"note: {n} permittedHostDevices {'entry' if n == 1 else 'entries'} for other devices not shown")
    notes += [f"note: {n}" for n in doc["notes"]]
    return View(kind="KubeVirtStatus", body=doc, preamble=head, tables=tables, epilogue=notes,
                names=[f"kubevirt.kubevirt.io/{doc['name']}"])


@app.command("status", short_help="Show KubeVirt's gates and permitted NPUs.", epilog=examples(
    "rblnctl kubevirt status",
    "rblnctl kubevirt status -o jsonpath='{.gates[?(@.effective==false)].name}'",
))
def status(
    ctx: typer.Context,
    name: NameOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Show the KubeVirt CR's phase, version, gates (effective or not) and permitted RBLN devices."""
    from rblnctl.cli.output import emit
    from rblnctl.kubevirt.status import kubevirt_status

    st = kubevirt_status(ctx.obj.kube(), name=name, namespace=ctx.obj.namespace)
    emit(_status_view(_spelt_notes(ctx, st)), output)


# -- migrate-resources -----------------------------------------------------------------------------

def _short(name: str) -> str:
    return name.removeprefix("rebellions.ai/")


def _notes(change: dict, *, detail: str, restart: bool = False) -> list[str]:
    """The NOTE cell's tokens of one rewritten field (its document)."""
    notes = [detail] if detail else []
    if change["kept"]:
        notes.append("already-there")
    if restart:
        notes.append("restart-needed")
    return notes


def _migration_view(plan: MigrationPlan, result: MigrationResult | None) -> View:
    """A resource migration (kind ResourceMigration): the mapping, every field it rewrites, the running VMs."""
    from rblnctl.cli.output import Cell, Table, View, joined
    from rblnctl.documents import RESOURCE_MIGRATION, body

    head = [f"{r.old} -> {r.new} ({r.source}{': ' + r.evidence if r.evidence else ''})" for r in plan.renames]
    head += [f"{u.name} -> ? (cannot map: {u.reason})" for u in plan.unmapped]
    if not head:
        head.append("no NPU resource name needs renaming")
    head.append(f"read {plan.scanned_vms} VirtualMachine(s) and {plan.scanned_instances} running instance(s) in "
                "all namespaces")
    doc = body(RESOURCE_MIGRATION, spell, plan=plan, result=result)
    p, kv = doc["plan"], doc["kubevirt"]
    changes = Table("KIND", "NAMESPACE", "NAME", "FIELD", "OLD", "NEW", "NOTE")
    for c in p["kubevirtChanges"]:
        changes.add_row("KubeVirt", kv["namespace"], kv["name"], c["field"], _short(c["old"]), _short(c["new"]),
                        joined(_notes(c, detail=c["detail"] or ""), empty=""))
    for v in p["virtualMachines"]:
        for c in v["changes"]:
            notes = _notes(c, detail=f"quantity={c['detail']}" if c["detail"] else "", restart=v["running"])
            changes.add_row("VirtualMachine", v["namespace"], v["name"], c["field"], _short(c["old"]),
                            _short(c["new"]), Cell(joined(notes, empty=""), "yellow" if v["running"] else ""))
    tables = [changes] if changes.rows else []
    if p["instances"]:
        running = Table("NAMESPACE", "INSTANCE", "NODE", "OLD NAMES", "VM")
        for i in p["instances"]:
            running.add_row(i["namespace"], i["name"], i["node"] or "<none>", joined(_short(n) for n in i["names"]),
                            i["virtualMachine"] or "<standalone>")
        tables.append(running)
    tail = []
    if plan.instances:
        tail.append("running instances keep the NPUs they started with; each VM takes the new names at its next "
                    "start (restart it when convenient: `rblnctl vm restart NAME -n NAMESPACE --wait`)")
    if result is not None and not plan.noop:
        done = f"renamed in {len(result.changed)} VirtualMachine(s)" + \
            (" and the KubeVirt CR" if result.kubevirt_changed else "")
        if result.gone:
            done += f"; {len(result.gone)} deleted meanwhile ({joined(result.gone)})"
        if result.restart_needed:
            done += f"; {len(result.restart_needed)} running VM(s) need a restart to take effect: " \
                    f"{joined(result.restart_needed)}"
        tail.append(done)
    if doc["result"] is not None and doc["result"]["objects"]:
        fates = Table("KIND", "NAMESPACE", "NAME", "RESULT", "REASON")
        styles = {"done": "green", "unchanged": "", "failed": "red", "not-attempted": "yellow"}
        for x in doc["result"]["objects"]:
            fates.add_row(x["kind"], x["namespace"], x["name"], Cell(x["state"], styles[x["state"]]), x["reason"] or "")
        tables.append(fates)
    names = [] if plan.kubevirt.noop else [f"kubevirt.kubevirt.io/{kv['name']}"]
    names += [f"virtualmachine.kubevirt.io/{v.name}" for v in plan.vms if not v.noop]
    return View(kind="ResourceMigration", body=doc, preamble=head, tables=tables,
                epilogue=tail, names=names)


@app.command("migrate-resources", short_help="Rename old NPU resource names everywhere.", epilog=examples(
    "rblnctl kubevirt migrate-resources --dry-run    # what would be renamed, per object",
    "rblnctl kubevirt migrate-resources              # new names from the PCI device each old one stood for",
    "rblnctl kubevirt migrate-resources --map ATOM_PT=RBLN-CA22_PF   # (repeatable)",
))
@grouped
def migrate_resources(
    ctx: typer.Context,
    mapping: Annotated[
        list[str] | None,
        typer.Option("--map", help="Rename OLD to NEW (repeatable; the rebellions.ai/ prefix is optional) instead "
                     "of deriving the new names from the PCI devices. Both must be valid extended resource names "
                     "(as the API server checks them).", metavar="OLD=NEW", show_default=False),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rename a name some vm-passthrough node still advertises (KubeVirt keeps "
                           "permitting it too).")
    ] = False,
    name: NameOpt = None,
    chunk_size: Annotated[
        int, typer.Option("--chunk-size", help="VirtualMachines per LIST page (as kubectl get --chunk-size).",
                          min=1, metavar="N")
    ] = 500,
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Rename old NPU resource names in KubeVirt and all VMs."""
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.cli.rerun import command_line
    from rblnctl.vm.resource_rename import MigrateOptions, ResourceMigrator, parse_mapping

    mode, yes = mutation.how, mutation.yes
    pairs = parse_mapping(mapping or [])  # bad input fails before connecting
    migrator = ResourceMigrator(
        kube=ctx.obj.kube(),
        options=MigrateOptions(mapping=pairs, force=force, kubevirt_name=name, kubevirt_namespace=ctx.obj.namespace,
                               server_dry_run=mode == "server", page_size=chunk_size),
        on_retry=_on_migrate_retry)
    plan = migrator.plan()

    def done(result: MigrationResult) -> str | None:
        return None if result.plan.noop else "NPU resources renamed"

    run(Mutation(
        plan=plan, apply=migrator.apply, refusal="refusing to rename NPU resources",
        question="Rename NPU resources?", disruptive=False, dry_run=mode, yes=yes, output=output,
        plan_view=lambda p: _migration_view(p, None), result_view=lambda r: _migration_view(r.plan, r),
        noop_message="every NPU resource name in use is current; nothing to rename", done_message=done,
        rerun=command_line(ctx),  # every flag given (--map...): a re-run renames what is left, idempotently
    ))


def _on_migrate_retry(what: str, attempt: int, message: str) -> None:
    from rblnctl.cli.console import info

    info(_retry_line(what, attempt, message))
