"""`rblnctl vm attach | detach`: the shared change flow (plan, view, run) of a VM's NPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli.console import Progress
from rblnctl.cli.options import Mutating, OutputOpt, examples, grouped, timeout_s
from rblnctl.cli.rerun import spell
from rblnctl.cli.vm.common import MethodOpt, ProductOpt, ResourceOpt, VmArg, _namespace, _source, app
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.vm.attach import AttachPlanner, VmNpuPlan, VmNpuResult
    from rblnctl.vm.model import VmRef

RestartOpt = Annotated[
    bool, typer.Option("--restart", help="Change a running VM too: stop it, change it, start it, wait until Ready "
                       "(asks first unless --yes).")
]
NextRestartOpt = Annotated[
    bool, typer.Option("--next-restart", help="Change a running VM's spec only and leave it running: the change "
                       "applies when it next restarts (`vm restart`); KubeVirt marks it RestartRequired until then. "
                       "Not with --restart.")
]
TimeoutOpt = Annotated[
    str, typer.Option("--timeout", metavar="DURATION", help="With --restart: how long to wait for the VM to stop and "
                      "to be Ready again (seconds or 90s, 5m).")
]

ATTACH_EXAMPLES = examples(
    "rblnctl vm attach my-vm -n vms                  # 1 NPU; method and resource from the cluster",
    "rblnctl vm attach my-vm -n vms --npus 2 --product RBLN-CA22",
    "rblnctl vm attach my-vm -n vms --method dra --convert --restart",
    "rblnctl vm attach my-vm -n vms --npus 4 --next-restart   # running: applies at its next restart",
    "rblnctl vm attach my-vm -n vms --npus 4 --dry-run=server",
)
DETACH_EXAMPLES = examples(
    "rblnctl vm detach my-vm -n vms",
    "rblnctl vm detach my-vm -n vms --device npu1 --restart",
    "rblnctl vm detach my-vm -n vms --next-restart",
)


def _restart_now(ctx: typer.Context, ref: VmRef) -> str:
    """`vm restart NAME -n NS --wait` as this user types it (their program name and connection flags)."""
    from rblnctl.cli.rerun import render
    from rblnctl.vm.pending import restart_command

    return render(ctx, restart_command(ref))


def _phrased(plan: VmNpuPlan, ctx: typer.Context) -> VmNpuPlan:
    """The plan with each blocker's remedy phrased into its message (blockers the CLI prints)."""
    import dataclasses

    from rblnctl.cli.rerun import remedy_text
    from rblnctl.plan import Blocker

    blockers = []
    for b in plan.blockers:
        remedy = getattr(b, "remedy", None)
        text = f"{b.message}; {remedy_text(ctx, remedy)}" if remedy is not None else b.message
        override = b.override
        if b.override == "restart" and hasattr(plan, "next_restart"):  # vm attach|detach offer both, --restart first
            text += ("; pass --restart to stop it, change it and start it now (waiting until it is Ready), or "
                     "--next-restart to change its spec only, for its next restart")
            override = None  # named above, with what it does
        blockers.append(Blocker(text, override=override))
    return dataclasses.replace(plan, blockers=blockers)


# -- documents and views ----------------------------------------------------------------------------------


def _change_view(plan: VmNpuPlan, result: VmNpuResult | None = None, *, restart_now: str = "") -> View:
    """A VM NPU change in every format (kind VmNpuChange)."""
    import json

    from rblnctl.cli.output import Table, View
    from rblnctl.documents import VM_NPU_CHANGE, body

    doc = body(VM_NPU_CHANGE, spell, plan=plan, result=result)
    p = doc["plan"]
    before = {d["name"]: d for d in p["devicesBefore"]}
    t = Table("DEVICE", "METHOD", "SOURCE", "CHANGE")
    for d in p["devicesAfter"]:
        name = d["name"]
        replaced = name in p["added"] and name in p["removed"]
        t.add_row(name, d["method"], _source(d), "changed" if replaced or (name not in p["added"] and before.get(
            name) != d) else "added" if name in p["added"] else "kept")
    for name in p["removed"]:
        d = before.get(name)
        if d is not None and name not in p["added"]:
            t.add_row(name, d["method"], _source(d), "removed")
    what = f"{plan.method}" + (f", {plan.resource}" if plan.resource and plan.method == "sandbox" else "") + \
        (f", {plan.template}" if plan.template else "")
    # Where the VM is now: the plan's node until the run restarted it (a new VMI, maybe elsewhere) or left it stopped.
    where = (f"; running on {plan.node}" if plan.running and plan.node else "; running" if plan.running else "")
    if result is not None and result.started_by_others:
        where = "; started by someone else, not by rblnctl"
    elif result is not None and (result.not_restarted or result.left_stopped):
        where = "; stopped"
    elif result is not None and result.restarted:
        where = "; restarted"
    head = [f"VirtualMachine {plan.vm}: {plan.npus_before} -> {plan.npus_after} NPU(s)"
            + (f" ({what})" if plan.method else "") + where]
    tail: list[str] = []
    if plan.template_create:
        tail.append(f"ResourceClaimTemplate {plan.vm.namespace}/{plan.template_create['metadata']['name']}: "
                    "create (rblnctl's, shared by the namespace's VMs with as many NPUs)")
    tail += [f"ResourceClaimTemplate {plan.vm.namespace}/{n}: delete (no other VM uses it)"
             for n in (result.templates_deleted if result is not None else plan.templates_delete)]
    tail += list(result.templates_kept if result is not None else plan.templates_kept)
    if plan.start:
        tail.append("start: an earlier rblnctl run stopped this VM and could not start it again; it is started now")
    if result is not None and result.left_stopped:
        tail.append(f"left stopped: rblnctl could not start the VM again; start it with `{result.start_command}`")
    if result is not None and result.not_restarted:
        tail.append(f"not restarted: {result.not_restarted}")
    if plan.next_restart:
        tail.append(f"next restart: the VM keeps running with {plan.running_npus} NPU(s); the change applies when it "
                    f"restarts (KubeVirt marks it RestartRequired): `{restart_now}`")
    if plan.restart and not (result is not None and result.not_restarted):
        tail.append("restart: stop the VM, change it, start it, wait until Ready"
                    + ("" if result is None else f" (ready: {'yes' if result.ready else 'no'})" if result.restarted
                       else ""))
    if result is None and plan.patch and not plan.noop:
        tail.append(f"patch (application/json-patch+json): {json.dumps(plan.patch, separators=(',', ':'))}")
    others = [str(d.get("name")) for d in plan.host_devices_after if d.get("name") not in
              {x.name for x in plan.devices_after}]
    notes = [f"other host devices kept: {', '.join(others)}"] if others else []
    return View(kind="VmNpuChange", body=doc, preamble=head,
                tables=[t] if t.rows else [], epilogue=tail, notes=notes,
                names=[f"virtualmachine.kubevirt.io/{plan.vm.name}"])


def _run_change(ctx: typer.Context, planner: AttachPlanner, plan: VmNpuPlan, *, how: str | None, yes: bool,
                output: OutputSpec, progress: Progress, verb: str) -> None:
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.cli.rerun import command_line

    ref = plan.vm
    restart_now = _restart_now(ctx, ref)
    shown = _phrased(plan, ctx)

    def interrupted() -> None:  # what the library's clean-up left the VM as, in its words (rblnctl.vm.attach apply)
        for line in planner.recovery:
            warn(line)
        done = planner.interrupted
        if planner.left_stopped:
            warn(f"`{command_line(ctx)}` (the same command) starts VM {ref}: it carries rblnctl's mark")
        elif done is not None and not done.changed:  # the job is not done: the same command does it
            warn(f"`{command_line(ctx)}` (the same command) changes the NPUs of VM {ref}")

    def done(result: VmNpuResult) -> str:
        text = f"VM {ref}: {result.plan.npus_before} -> {result.plan.npus_after} NPU(s)"
        if result.not_restarted:
            return f"{text}; not restarted: {result.not_restarted}"
        if result.plan.next_restart:
            return (f"{text} at its next restart; it runs with {result.plan.running_npus} until then "
                    f"(`{restart_now}` restarts it now)")
        return text + (", restarted and Ready" if result.ready else "")

    run(Mutation(
        plan=shown, apply=lambda _: planner.apply(plan), refusal=f"refusing to {verb} NPUs of VM {ref}",
        question=f"Restart VM {ref} to change its NPUs (it stops, then starts again)?", disruptive=plan.restart,
        dry_run=how, yes=yes, output=output, plan_view=lambda p: _change_view(p, restart_now=restart_now),
        result_view=lambda r: _change_view(r.plan, r, restart_now=restart_now),
        noop_message=f"VM {ref} already has {plan.npus_after} NPU(s) as asked; nothing to do",
        done_message=done, on_interrupt=interrupted, interrupted_result=lambda: planner.interrupted,
    ))


# -- attach / detach ---------------------------------------------------------------------------------------


def _restart_flags(restart: bool, next_restart: bool) -> None:
    """--restart and --next-restart exclude each other (bad input, before connecting)."""
    from rblnctl.errors import InvalidInput

    if restart and next_restart:
        raise InvalidInput("--restart and --next-restart cannot be combined: restart the VM now, or change its spec "
                           "for its next restart")


@app.command("attach", short_help="Give a VM N NPUs (sandbox or DRA).", epilog=ATTACH_EXAMPLES)
@grouped
def attach(
    ctx: typer.Context,
    vm: VmArg,
    npus: Annotated[
        int | None,
        typer.Option("--npus", metavar="N", min=0, help="How many NPUs the VM should have (a re-run with another N "
                     "adds or removes the difference; 0 takes every NPU, as `vm detach`) [default: as many as it has, "
                     "at least 1].", show_default=False),
    ] = None,
    resource: ResourceOpt = None,
    product: ProductOpt = None,
    method: MethodOpt = None,
    convert: Annotated[
        bool, typer.Option("--convert", help="Rewrite the NPUs the VM gets through the other method.")
    ] = False,
    restart: RestartOpt = False,
    next_restart: NextRestartOpt = False,
    timeout: TimeoutOpt = "5m",
    force: Annotated[
        bool, typer.Option("--force", help="With --restart: restart the VM even when no node it may run on has "
                           "that many NPUs at all (it will not start again until one does).")
    ] = False,
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Give a VirtualMachine N NPUs (sandbox or DRA)."""
    from rblnctl.kube import validate_name
    from rblnctl.vm.attach import AttachOptions, AttachPlanner

    validate_name(vm, kind="VirtualMachine")  # bad input fails before connecting
    _restart_flags(restart, next_restart)
    namespace = _namespace(ctx)
    options = AttachOptions(npus=npus, method=method.value if method else None, resource=resource, product=product,
                            convert=convert, restart=restart, next_restart=next_restart, force=force,
                            server_dry_run=mutation.server,
                            ready_timeout_s=timeout_s(timeout))
    progress = Progress(server_dry_run=mutation.server, retry_suffix=False)
    planner = AttachPlanner(kube=state(ctx).kube(), options=options, events=progress.vm_events())
    plan = planner.plan(vm, namespace)
    _run_change(ctx, planner, plan, how=mutation.how, yes=mutation.yes, output=output, progress=progress,
                verb="change the")


@app.command("detach", short_help="Take NPUs from a VM.", epilog=DETACH_EXAMPLES)
@grouped
def detach(
    ctx: typer.Context,
    vm: VmArg,
    all_npus: Annotated[bool, typer.Option("--all", help="Take every NPU (the default).")] = False,
    device: Annotated[
        str | None, typer.Option("--device", metavar="NAME", help="Take only this host device, e.g. npu1.",
                                 show_default=False)
    ] = None,
    restart: RestartOpt = False,
    next_restart: NextRestartOpt = False,
    timeout: TimeoutOpt = "5m",
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Take NPUs from a VirtualMachine (all, or one device)."""
    from rblnctl.errors import InvalidInput
    from rblnctl.kube import validate_name
    from rblnctl.vm.attach import DetachOptions, DetachPlanner

    validate_name(vm, kind="VirtualMachine")
    if all_npus and device:
        raise InvalidInput("--all and --device cannot be combined: take every NPU, or one device")
    _restart_flags(restart, next_restart)
    namespace = _namespace(ctx)
    options = DetachOptions(device=device, restart=restart, next_restart=next_restart,
                            server_dry_run=mutation.server, ready_timeout_s=timeout_s(timeout))
    progress = Progress(server_dry_run=mutation.server, retry_suffix=False)
    planner = DetachPlanner(kube=state(ctx).kube(), detach=options, events=progress.vm_events())
    plan = planner.plan(vm, namespace)
    _run_change(ctx, planner, plan, how=mutation.how, yes=mutation.yes, output=output, progress=progress,
                verb="take the")
