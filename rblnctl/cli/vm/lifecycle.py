"""`rblnctl vm start | stop | restart`: run a VM through virt-api, --wait until its NPUs are attached."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from rblnctl.cli.console import Progress
from rblnctl.cli.options import Mutating, OutputOpt, Waiting, examples, grouped
from rblnctl.cli.output import Column
from rblnctl.cli.rerun import spell
from rblnctl.cli.vm.common import VmArg, _namespace, app
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.vm.lifecycle import LifecyclePlan, LifecycleResult, VmState

START_EXAMPLES = examples(
    "rblnctl vm start my-vm -n vms                   # ask virt-api; a running VM: nothing to do",
    "rblnctl vm start my-vm -n vms --wait            # until Ready with its NPUs attached (5m at most)",
    "rblnctl vm start my-vm -n vms --wait --timeout 10m -o json",
)
STOP_EXAMPLES = examples(
    "rblnctl vm stop my-vm -n vms --yes              # a stopped VM: nothing to do, exit 0",
    "rblnctl vm stop my-vm -n vms --yes --wait       # until its VMI and virt-launcher are gone",
    "rblnctl vm stop my-vm -n vms --dry-run          # what would be asked; nothing is sent",
)
RESTART_EXAMPLES = examples(
    "rblnctl vm restart my-vm -n vms --yes --wait    # a new VMI, Ready with its NPUs attached",
    "rblnctl vm restart my-vm -n vms --dry-run=server",
)


# -- start / stop / restart -------------------------------------------------------------------------------------

_LIFECYCLE_COLUMNS = (  # a row: the VM's name and its state's document (VmLifecycle before, or result.state)
    Column("NAME"), Column("STATUS", value="printableStatus"), Column("RUNSTRATEGY", value="runStrategy"),
    Column("VMI", value="vmi.phase"), Column("NODE", value="vmi.node"),
    Column("NPUS", value=lambda st: "<none>" if st["npus"] is None else f"{st['npus']['held']}/{st['npus']['wanted']}"),
    Column("ATTACHED", value=lambda st: "<none>" if st["npus"] is None else "yes" if st["npus"]["attached"] else "no"))


def _lifecycle_view(plan: LifecyclePlan, result: LifecycleResult | None = None) -> View:
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import VM_LIFECYCLE, body

    doc = body(VM_LIFECYCLE, spell, plan=plan, result=result)
    state = doc["result"]["state"] if result is not None else doc["before"]
    t = rows([{"name": doc["vm"]["name"], **state}], *_LIFECYCLE_COLUMNS)
    what = plan.why if plan.send else f"nothing to ask: {plan.why}" if plan.why else "refused"
    if result is not None and result.waited and not plan.send:  # the why described the VM before the wait
        what = "nothing to ask"
    head = [f"VirtualMachine {plan.vm}: {plan.action}: {what}"]
    live = (result.state if result is not None else plan.before).live
    a = state["npus"]
    tail = [f"waiting for: {'; '.join(a['missing'])}"] if a is not None and a["missing"] and live else []
    return View(kind="VmLifecycle", body=doc, preamble=head, tables=[t],
                epilogue=tail, names=[f"virtualmachine.kubevirt.io/{plan.vm.name}"])


def _lifecycle(ctx: typer.Context, action: str, vm: str, *, waiting: Waiting, mutation: Mutating,
               output: OutputSpec) -> None:
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.kube import validate_name
    from rblnctl.vm.lifecycle import VmLifecycle

    validate_name(vm, kind="VirtualMachine")  # bad input fails before connecting
    seconds = waiting.timeout_s
    namespace = _namespace(ctx)
    how = mutation.how
    progress = Progress(server_dry_run=mutation.server)
    life = VmLifecycle(kube=state(ctx).kube(), timeout_s=seconds, server_dry_run=mutation.server,
                       on_step=progress.say, on_state=progress.vm_state)
    plan = life.plan(action, vm, namespace, wait=waiting.wait)
    ref = plan.vm

    def verdict(st: VmState) -> str:  # from the state the wait returned: one final read (rblnctl.vm.lifecycle)
        if action == "stop":
            return "stopped: its NPUs are free"
        a = st.attachment
        return f"Ready on {st.node} with {a.held if a else 0} NPU(s) attached"

    def done(result: LifecycleResult) -> str:
        if result.overtaken:  # refused, and the VM got there anyway: no request of ours did it
            return (f"VM {ref}: virt-api refused the {action} ({result.overtaken}): the VM got there meanwhile"
                    + (f"; it is {verdict(result.state)}" if result.waited else ""))
        if result.waited:
            return f"VM {ref} {'is ' if action != 'stop' else ''}{verdict(result.state)}"
        return f"VM {ref}: {action} requested ({plan.why})"

    def noop(result: LifecycleResult | None) -> str:
        if result is not None and result.waited:  # said of the state waited for, not of the one planned from
            from rblnctl.vm.lifecycle import decide

            why = decide(action, result.state)[1] or plan.why
            return f"VM {ref}: {why}; nothing to ask; it is {verdict(result.state)}"
        return f"VM {ref}: {plan.why}; nothing to ask"

    def interrupted() -> None:
        from rblnctl.cli.console import warn
        from rblnctl.cli.rerun import render
        from rblnctl.remedy import Command

        # a start of a starting VM (a stop of a stopping one) asks nothing more and follows it again; it keeps
        # every flag given (--context, --kubeconfig, --timeout): the hint acts on the same cluster
        follow = Command.own("vm", "stop" if action == "stop" else "start", ref.name, again=True,
                             namespace=ref.namespace, wait=True)
        again = f"`{render(ctx, follow)}`"
        listing = f"`{render(ctx, Command.own('vm', 'list', namespace=ref.namespace))}`"
        if life.made is not None:
            warn(f"the {life.made} request for VM {ref} was made and KubeVirt carries it out without rblnctl; "
                 f"{again} follows it again")
        elif life.asked is not None:
            from rblnctl.cli.rerun import command_line

            seen = life.settle_asked(ref)  # read back once
            if seen:
                warn(f"the {life.asked} request for VM {ref} was made (read back) and KubeVirt carries it out without "
                     f"rblnctl; {again} follows it again")
            elif seen is False and life.asked == "restart":  # a start or stop asked again is idempotent, a restart not
                warn(f"the restart request for VM {ref} had not taken effect when rblnctl stopped (its VMI is the one "
                     f"it had): `{command_line(ctx)}` asks again (a request still in "
                     f"flight could land first: {listing} shows whether the VMI is new)")
            else:
                warn(f"the {life.asked} request for VM {ref} may have been made; {listing} "
                     f"shows where it is, {again} follows it")
        elif plan.send is not None:
            warn(f"no {plan.send} was asked for VM {ref}" + (
                f": it was still stopping and ends stopped; "
                f"`{render(ctx, Command.own('vm', 'start', ref.name, namespace=ref.namespace))}` starts "
                "it" if plan.before.stopping else ""))

    run(Mutation(
        plan=plan, apply=life.apply, refusal=f"refusing to {action} VM {ref}",
        question=f"{action.capitalize()} VM {ref} (its guest shuts down)?", disruptive=action in ("stop", "restart"),
        dry_run=how, yes=mutation.yes, output=output, plan_view=_lifecycle_view,
        result_view=lambda r: _lifecycle_view(r.plan, r),
        noop_message=noop,
        done_message=done, on_interrupt=interrupted, progress=progress,
    ))


@app.command("start", short_help="Start a VM; --wait until its NPUs are attached.", epilog=START_EXAMPLES)
@grouped
def start(ctx: typer.Context, vm: VmArg, waiting: Waiting = Waiting.options(),
          mutation: Mutating = Mutating.options(yes=True), output: OutputOpt = "table") -> None:
    """Start a VirtualMachine through virt-api (idempotent: a running VM is left as it is, exit 0).

    A VM still stopping (its VMI shutting down) is started once it has stopped (bounded by --timeout).
    """
    _lifecycle(ctx, "start", vm, waiting=waiting, mutation=mutation, output=output)


@app.command("stop", short_help="Stop a VM (its NPUs are freed).", epilog=STOP_EXAMPLES)
@grouped
def stop(ctx: typer.Context, vm: VmArg, waiting: Waiting = Waiting.options(), mutation: Mutating = Mutating.options(),
         output: OutputOpt = "table") -> None:
    """Stop a VirtualMachine through virt-api (idempotent: a stopped VM is left as it is, exit 0); asks first."""
    _lifecycle(ctx, "stop", vm, waiting=waiting, mutation=mutation, output=output)


@app.command("restart", short_help="Restart a VM; --wait until its NPUs are attached again.",
             epilog=RESTART_EXAMPLES)
@grouped
def restart(ctx: typer.Context, vm: VmArg, waiting: Waiting = Waiting.options(),
            mutation: Mutating = Mutating.options(), output: OutputOpt = "table") -> None:
    """Restart a VirtualMachine through virt-api: a new VMI (a stopped VM is started); asks first."""
    _lifecycle(ctx, "restart", vm, waiting=waiting, mutation=mutation, output=output)
