"""`rblnctl kubevirt migrate-resources`: old NPU resource names renamed in the KubeVirt CR and every VM
(rblnctl.vm.resource_rename)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli.kubevirt.common import app, retry_line
from rblnctl.cli.options import KubeVirtNameOpt, Mutating, OutputOpt, examples, grouped
from rblnctl.cli.rerun import spell
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.vm.resource_rename import MigrationPlan, MigrationResult


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
    name: KubeVirtNameOpt = None,
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
    run_state = state(ctx)
    migrator = ResourceMigrator(
        kube=run_state.kube(),
        options=MigrateOptions(mapping=pairs, force=force, kubevirt_name=name, kubevirt_namespace=run_state.namespace,
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

    info(retry_line(what, attempt, message))
