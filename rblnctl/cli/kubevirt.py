"""`rblnctl kubevirt enable-gates | disable-gates | permit-devices | status`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rblnctl.cli.options import DryRunOpt, OutputOpt, ServerDryRunOpt, YesOpt, dry_run_mode
from rblnctl.cli.output import Output

app = typer.Typer(
    help="Edit the KubeVirt CR for RBLN NPUs: feature gates and permitted host devices, conflict-safely.",
    no_args_is_help=True,
)

NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="Name of the KubeVirt CR [default: the only one in the cluster].", show_default=False),
]
KubeVirtNamespaceOpt = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="Namespace of the KubeVirt CR [default: search every namespace].",
                 show_default=False),
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Go ahead when the KubeVirt version is below what the change needs, or unknown."),
]


def _on_retry(attempt: int, message: str) -> None:
    from rblnctl.cli.console import info

    info(f"the KubeVirt CR changed while we were writing it (attempt {attempt}); re-reading and retrying")


def _writer_args(ctx: typer.Context, name: str | None, namespace: str | None, force: bool, mode: str | None) -> dict:
    from rblnctl.kubevirt.cr import CrWriteOptions

    return {
        "kube": ctx.obj.kube(),
        "options": CrWriteOptions(name=name, namespace=namespace, force=force, server_dry_run=mode == "server"),
        "on_retry": _on_retry,
    }


# -- gates -----------------------------------------------------------------------------------------


def _run_edit(
    writer: Any,
    plan: Any,
    *,
    result_cls: type,
    mode: str | None,
    yes: bool,
    output: Output,
    table: Any,
    noop_message: str,
    done_message: Any,
) -> None:
    """Warn, stop at a dry run, refuse on blockers, confirm, apply, report, render.

    The one flow behind enable-gates, disable-gates and permit-devices. `table(plan, show_patch)`
    renders a plan; `done_message(final_plan)` says what changed.
    """
    from rblnctl.cli.console import confirm, info, warn
    from rblnctl.cli.output import emit
    from rblnctl.errors import Refused

    ref = f"{plan.namespace}/{plan.name}"
    for w in plan.warnings:
        warn(w)
    if mode == "client":
        emit(result_cls(plan=plan, changed=False, attempts=0), output,
             lambda: table(plan, show_patch=True))
        if plan.blockers:
            raise Refused(f"refusing to edit KubeVirt {ref}", blockers=plan.blockers)
        info("dry run: nothing was sent" if not plan.noop else noop_message)
        return
    if plan.blockers:
        raise Refused(f"refusing to edit KubeVirt {ref}", blockers=plan.blockers)
    if not plan.noop:
        confirm(f"Patch KubeVirt {ref}?", yes=yes, show=table(plan, show_patch=False))
    from rblnctl.cli.console import waiting

    with waiting(f"patching KubeVirt {ref}..."):
        result = writer.apply(plan)
    final = result.plan
    if not result.changed:
        info(f"{noop_message}; nothing to change")
    elif mode == "server":
        info(f"server dry run: the API server accepted the patch to KubeVirt {ref}; nothing was persisted")
    else:
        info(done_message(final))
    emit(result, output, lambda: table(final, show_patch=False))


def _run_gates(editor: Any, plan: Any, *, mode: str | None, yes: bool, output: Output, verb: str) -> None:
    """The edit flow for enable-gates and disable-gates."""
    from rblnctl.kubevirt.gates import GateResult

    ref = f"{plan.namespace}/{plan.name}"
    asked = ", ".join(plan.enable or plan.disable)

    def done(final: Any) -> str:
        changed = final.added + final.undisabled if final.enable else final.removed + final.newly_disabled
        return f"{verb} {', '.join(dict.fromkeys(changed))} on KubeVirt {ref}"

    _run_edit(editor, plan, result_cls=GateResult, mode=mode, yes=yes, output=output, table=_gates_table,
              noop_message=f"{asked}: already {verb} on KubeVirt {ref}", done_message=done)


def _gates_table(plan: Any, *, show_patch: bool) -> Any:
    import json

    from rich.console import Group
    from rich.markup import escape
    from rich.text import Text

    from rblnctl.cli.output import make_table
    from rblnctl.kubevirt.cr import PATCH_CONTENT_TYPE

    t = make_table("LIST", "BEFORE", "AFTER",
                   title=f"KubeVirt {plan.namespace}/{plan.name} ({plan.version or 'version unknown'})")
    t.add_row("featureGates", escape(", ".join(plan.feature_gates_before) or "-"),
              escape(", ".join(plan.feature_gates_after) or "-"))
    if plan.disabled_gates_before or plan.disabled_gates_after:
        t.add_row("disabledFeatureGates", escape(", ".join(plan.disabled_gates_before) or "-"),
                  escape(", ".join(plan.disabled_gates_after) or "-"))
    parts: list[Any] = [t]
    if show_patch:
        if plan.noop:
            parts.append(Text("no patch: nothing to change"))
        elif plan.patch:
            parts.append(Text(f"patch ({PATCH_CONTENT_TYPE}):"))
            parts.append(Text(json.dumps(plan.patch, indent=2)))
    return Group(*parts)


@app.command("enable-gates")
def enable_gates(
    ctx: typer.Context,
    gates: Annotated[
        list[str] | None,
        typer.Argument(help="More gates to enable along with HostDevices (letters and digits).", metavar="GATE",
                       show_default=False),
    ] = None,
    dra: Annotated[
        bool, typer.Option("--dra", help="Also enable HostDevicesWithDRA, for DRA (needs KubeVirt >= 1.9.0).")
    ] = False,
    name: NameOpt = None,
    namespace: KubeVirtNamespaceOpt = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
    server_dry_run: ServerDryRunOpt = False,
    yes: YesOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Add HostDevices (and with --dra HostDevicesWithDRA) to KubeVirt's feature gates, keeping the others."""
    from rblnctl.kubevirt.gates import GateEditor, rbln_gates, validate_gates

    mode = dry_run_mode(dry_run, server_dry_run)
    wanted = validate_gates([*rbln_gates(dra=dra), *(gates or [])])
    editor = GateEditor(**_writer_args(ctx, name, namespace, force, mode))
    plan = editor.plan(enable=wanted)
    _run_gates(editor, plan, mode=mode, yes=yes, output=output, verb="enabled")


@app.command("disable-gates")
def disable_gates(
    ctx: typer.Context,
    gates: Annotated[
        list[str],
        typer.Argument(help="Gates to remove from featureGates, e.g. HostDevicesWithDRA.", metavar="GATE",
                       show_default=False),
    ],
    add_to_disabled: Annotated[
        bool,
        typer.Option("--add-to-disabled", help="Also list the gates in disabledFeatureGates (KubeVirt >= 1.9.0), "
                     "which turns off a Beta gate that is on by default."),
    ] = False,
    name: NameOpt = None,
    namespace: KubeVirtNamespaceOpt = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
    server_dry_run: ServerDryRunOpt = False,
    yes: YesOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Remove gates from KubeVirt's feature gates (rollback), keeping the others."""
    from rblnctl.kubevirt.gates import GateEditor

    mode = dry_run_mode(dry_run, server_dry_run)
    editor = GateEditor(**_writer_args(ctx, name, namespace, force, mode))
    plan = editor.plan(disable=gates, add_to_disabled=add_to_disabled)
    _run_gates(editor, plan, mode=mode, yes=yes, output=output, verb="disabled")


# -- permitted host devices ------------------------------------------------------------------------


def _devices_table(plan: Any, *, show_patch: bool) -> Any:
    import json

    from rich.console import Group
    from rich.markup import escape
    from rich.text import Text

    from rblnctl.cli.output import make_table
    from rblnctl.kubevirt.cr import PATCH_CONTENT_TYPE

    t = make_table("RESOURCE NAME", "PCI SELECTOR", "EXTERNAL PROVIDER", "CHANGE",
                   title=f"KubeVirt {plan.namespace}/{plan.name} permittedHostDevices.pciHostDevices")
    for e in plan.pci_host_devices_after:
        rn = str(e.get("resourceName") or "")
        change = ("added" if rn in plan.added else "externalResourceProvider -> true" if rn in plan.fixed
                  else "needs --fix" if rn in plan.needs_fix else "kept")
        t.add_row(escape(rn), escape(str(e.get("pciVendorSelector") or "")),
                  "true" if e.get("externalResourceProvider") else "false", change)
    if not plan.pci_host_devices_after:
        t.caption = "no entries"
    parts: list[Any] = [t]
    if show_patch:
        if plan.noop:
            parts.append(Text("no patch: nothing to change"))
        elif plan.patch:
            parts.append(Text(f"patch ({PATCH_CONTENT_TYPE}):"))
            parts.append(Text(json.dumps(plan.patch, indent=2)))
    return Group(*parts)


@app.command("permit-devices")
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
    namespace: KubeVirtNamespaceOpt = None,
    dry_run: DryRunOpt = False,
    server_dry_run: ServerDryRunOpt = False,
    yes: YesOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Permit RBLN NPUs as KubeVirt host devices (pciHostDevices), keeping every other entry."""
    from rblnctl.errors import ConfigError
    from rblnctl.kubevirt.devices import DevicePermitter, DeviceResult, precheck_resource_name

    mode = dry_run_mode(dry_run, server_dry_run)
    for n in resource_name or []:
        precheck_resource_name(n)  # bad input fails before connecting
    if selector and not from_cluster and (resource_name or fix):
        raise ConfigError("--selector picks the nodes whose resources are permitted: it needs --from-cluster")
    permitter = DevicePermitter(**_writer_args(ctx, name, namespace, False, mode), fix=fix)
    plan = permitter.plan(resource_name or [], from_cluster=from_cluster or None, node_selector=selector)
    ref = f"{plan.namespace}/{plan.name}"

    def done(final: Any) -> str:
        changed = [f"added {', '.join(final.added)}"] if final.added else []
        changed += [f"fixed {', '.join(final.fixed)}"] if final.fixed else []
        return f"{'; '.join(changed)} on KubeVirt {ref}"

    _run_edit(permitter, plan, result_cls=DeviceResult, mode=mode, yes=yes, output=output, table=_devices_table,
              noop_message=f"already permitted on KubeVirt {ref}", done_message=done)


# -- status ----------------------------------------------------------------------------------------


def _status_table(st: Any) -> Any:
    from rich.console import Group
    from rich.markup import escape
    from rich.text import Text

    from rblnctl.cli.output import make_table

    head = [
        Text(f"KubeVirt {st.namespace}/{st.name}: phase {st.phase or '?'}, version {st.version or 'unknown'}"
             + (" (being deleted)" if st.deleting else "")),
        Text(f"featureGates: {', '.join(st.feature_gates) or '-'}"),
    ]
    if st.disabled_feature_gates:
        head.append(Text(f"disabledFeatureGates: {', '.join(st.disabled_feature_gates)}"))
    gates = make_table("GATE", "EFFECTIVE", "WHY")
    for g in st.gates:
        on = "on" if g.effective else "unknown" if g.effective is None else "OFF"
        gates.add_row(escape(g.name), on, escape(g.reason))
    devices = make_table("PERMITTED RBLN DEVICE", "PCI SELECTOR", "MODEL", "EXTERNAL PROVIDER")
    for d in st.permitted_devices:
        devices.add_row(escape(d.resource_name), escape(d.pci_vendor_selector), escape(d.model or "?"),
                        "true" if d.external_resource_provider else "FALSE")
    if not st.permitted_devices:
        devices.caption = "none"
    if st.other_permitted_devices:
        n = st.other_permitted_devices
        other = f"{n} {'entry' if n == 1 else 'entries'} for other devices not shown"
        devices.caption = f"{devices.caption}; {other}" if devices.caption else other
    notes = [Text.from_markup(f"[yellow]note:[/] {escape(n)}") for n in st.notes]
    return Group(*head, gates, devices, *notes)


@app.command("status")
def status(
    ctx: typer.Context,
    name: NameOpt = None,
    namespace: KubeVirtNamespaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Show the KubeVirt CR's phase, version, gates (effective or not) and permitted RBLN devices."""
    from rblnctl.cli.output import emit
    from rblnctl.kubevirt.status import kubevirt_status

    st = kubevirt_status(ctx.obj.kube(), name=name, namespace=namespace)
    emit(st, output, lambda: _status_table(st))
