"""`rblnctl policy show | set-method`: the operator's RBLNClusterPolicy and how VMs get NPUs (sandbox or DRA)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli.console import Progress
from rblnctl.cli.options import GuardOverrideOpt, Mutating, OutputOpt, examples, grouped, timeout_s
from rblnctl.node.defaults import DEFAULT_TIMEOUT_S
from rblnctl.cli.rerun import spell
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.method.plan import MethodPlan, MethodResult
    from rblnctl.operator.report import PolicyReport

app = typer.Typer(
    help="Show the RBLN NPU Operator's policy and change how VMs get NPUs (sandbox device plugin or DRA).",
    no_args_is_help=True,
)

DEFAULT_TIMEOUT = f"{DEFAULT_TIMEOUT_S / 60:g}m"


class Method(str, enum.Enum):
    """set-method values (the constants' METHODS)."""

    sandbox = "sandbox"
    dra = "dra"


def _flag(value: bool) -> str:
    return "true" if value else "false"


# -- show ------------------------------------------------------------------------------------------


def _show_view(rep: PolicyReport) -> View:
    """The policy (kind ClusterPolicy): the active one, its method and components, the ignored ones."""
    from rblnctl.cli.output import Cell, Column, Table, View, joined, rows
    from rblnctl.documents import CLUSTER_POLICY

    doc = CLUSTER_POLICY(rep)

    p = rep.active
    head = []
    if p is not None:
        head = [f"Policy:      {p.name} ({p.status_summary(rep.modes)})",
                f"VM method:   {p.vm_method or '<none: neither sandboxDevicePlugin nor draKubeletPlugin is enabled>'}",
                f"Switches:    {p.switches()}",
                f"Components:  in namespace {rep.namespace} ({rep.namespace_source})",
                f"NPU nodes:   {', '.join(f'{m}={n}' for m, n in rep.modes.items()) or 'none'}"]
        head += [f"Problem:     {x}" for x in p.admission_problems()]
    tables = []
    if doc["components"]:
        t = Table("COMPONENT", "ENABLED", "DAEMONSET", "READY", "STATE", Column("POLICY-KEY", wide=True))
        for c in doc["components"]:
            ds = c["daemonSets"]
            ready = joined(f"{d['ready']}/{d['desired']}" for d in ds)
            ok = all(d["allReady"] for d in ds) if ds else None
            style = "" if not c["enabled"] else "green" if ok else "yellow"
            t.add_row(c["component"], "yes" if c["enabled"] else "no", joined(d["name"] for d in ds),
                      Cell(ready, style), c["state"] or "<none>", c["policyKey"] or "<always>")
        tables.append(t)
    if doc["ignored"]:
        tables.append(rows(doc["ignored"], Column("IGNORED POLICY", value="name"), Column("STATE"),
                           Column("VM-METHOD", value="vmMethod")))
    names = [f"rblnclusterpolicy.rebellions.ai/{q.name}" for q in ([p] if p else []) + list(rep.ignored)]
    return View(kind="ClusterPolicy", body=doc, preamble=head, tables=tables,
                notes=[f"note: {n}" for n in rep.notes], names=names)


@app.command("show", short_help="Show the policy, its VM method, components.", epilog=examples(
    "rblnctl policy show",
    "rblnctl policy show -o wide                     # with each component's policy key",
    "rblnctl policy show -o jsonpath='{.active.vmMethod}'",
))
def show(ctx: typer.Context, output: OutputOpt = "table") -> None:
    """Show the active policy, its VM method and components."""
    from rblnctl.cli.console import waiting
    from rblnctl.cli.output import emit
    from rblnctl.operator.report import policy_report

    with waiting("reading the operator's policy..."):
        rep = policy_report(state(ctx).kube())
    emit(_show_view(rep), output)


# -- set-method ------------------------------------------------------------------------------------




def _spelt(ctx: typer.Context, result: MethodResult) -> MethodResult:
    """The result with each conversion's remedy spelt into its reason (the command as this user types it)."""
    import dataclasses

    from rblnctl.cli.rerun import remedy_text

    said = [dataclasses.replace(o, reason=f"{o.reason}; {remedy_text(ctx, o.remedy)}", remedy=None) if o.remedy
            else o for o in result.conversions]
    return dataclasses.replace(result, conversions=said)


def _method_view(plan: MethodPlan, result: MethodResult | None = None) -> View:
    """A method change (kind MethodChange): the switches, the prerequisites, the nodes rolled."""
    from rblnctl.cli.output import Cell, Table, View, joined
    from rblnctl.documents import METHOD_CHANGE, body

    doc = body(METHOD_CHANGE, spell, plan=plan, result=result)
    p, r = doc["plan"], doc["result"]
    head = [f"RBLNClusterPolicy {doc['policy']}: VM method {p['from'] or '<none>'} -> {p['to']}"]
    if p["noop"]:
        head.append(f"the policy already selects {p['to']}: nothing to write")
    head.append(f"vm-passthrough nodes: {joined(p['vmPassthroughNodes'])}")
    tables = []
    if not p["noop"]:
        t = Table("SWITCH", "BEFORE", "AFTER")
        for k, before in p["switchesBefore"].items():
            after = p["switchesAfter"][k]
            t.add_row(f"{k}.enabled", _flag(before), Cell(_flag(after), "bold" if before != after else ""))
        tables.append(t)
    if p["conversions"]:
        old = "dra" if p["to"] == "sandbox" else "sandbox"
        t = Table("NAMESPACE", "VM", "NPUS", "FROM", "TO", "STATUS")
        fate = {(o["namespace"], o["name"]): o for o in r["conversions"]} if r is not None else {}
        styles = {"done": "green", "unchanged": "", "failed": "red", "not-attempted": "yellow"}
        for c in p["conversions"]:
            o = fate.get((c["namespace"], c["name"]))
            left = c.get("leftTemplate")  # converted already: only the old template an interrupted run left
            status = ("to-clean-up" if left else "to-convert") if o is None else o["state"] if o["state"] != "done" \
                else "old template deleted" if left else \
                "converted, started again" if o["reason"] else "converted"  # a VM rblnctl had stopped: not silently
            t.add_row(c["namespace"], c["name"], str(c["npus"]), p["to"] if left else old, p["to"],
                      Cell(status, styles.get(o["state"], "") if o is not None else ""))
        tables.append(t)
    if p["prerequisites"]:
        t = Table("PREREQUISITE", "OK", "DETAIL")
        for c in p["prerequisites"]:
            ok = "yes" if c["ok"] else "unknown" if c["ok"] is None else "no"
            t.add_row(c["name"], Cell(ok, "green" if c["ok"] else "yellow" if c["ok"] is None else "red"), c["detail"])
        tables.append(t)
    tail = []
    if r is not None:
        if r["serverDryRun"]:
            tail.append("server dry run: the API server accepted the patch; nothing was waited for")
        elif r["waited"]:
            t = Table("NODE", "METHOD", "STATUS")
            for n in r["converged"]:
                t.add_row(n, p["to"], Cell("rolled", "green"))
            if t.rows:
                tables.append(t)
            tail.append(f"the operator serves every vm-passthrough node with the {p['to']} method "
                        f"({r['elapsedSeconds']:g}s)" + (f"; {len(r['converted'])} VM(s) converted"
                                                         if r["converted"] else ""))
    return View(kind="MethodChange", body=doc, preamble=head, tables=tables,
                epilogue=tail, names=[f"rblnclusterpolicy.rebellions.ai/{doc['policy']}"])


@app.command("set-method", short_help="Switch how VMs get NPUs: sandbox or dra.", epilog=examples(
    "rblnctl policy set-method dra --dry-run          # what would change, and what stands in the way",
    "rblnctl policy set-method dra --yes --timeout 15m   # with every NPU VM stopped",
    "rblnctl policy set-method sandbox --convert-vms    # and rewrite every stopped VM's NPUs for it",
))
@grouped
def set_method(
    ctx: typer.Context,
    method: Annotated[Method, typer.Argument(help="sandbox (the Sandbox Device Plugin) or dra.", metavar="METHOD",
                                             show_default=False)],
    force: Annotated[
        bool, typer.Option("--force", help="Go ahead when a prerequisite cannot be read (an unknown version).")
    ] = False,
    timeout: Annotated[
        str, typer.Option("--timeout", help="How long to wait for the operator: seconds or a duration like 90s, 10m.",
                          metavar="DURATION")
    ] = DEFAULT_TIMEOUT,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until every vm-passthrough node is rolled.")
                    ] = True,
    convert_vms: Annotated[
        bool, typer.Option("--convert-vms", help="After the rollout, rewrite each stopped VM's NPUs for the new "
                           "method (as `rblnctl vm attach --convert`), keeping its count.")
    ] = False,
    evict_vms: GuardOverrideOpt = False,
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Switch how VMs get NPUs: sandbox or dra."""
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.cli.rerun import command_line
    from rblnctl.method import MethodChanger, MethodOptions, MethodStep, parse_method

    target = parse_method(method.value)  # bad input fails before connecting
    seconds = timeout_s(timeout)
    how, yes = mutation.how, mutation.yes
    progress = Progress(server_dry_run=mutation.server, wait_step=MethodStep.WAIT,
                        retried="the RBLNClusterPolicy changed while we were writing it (attempt {attempt}); "
                        "re-reading and retrying")
    options = MethodOptions(force=force, server_dry_run=mutation.server, wait=wait, timeout_s=seconds,
                            convert_vms=convert_vms, evict_vms=evict_vms)  # conflicting flags fail before connecting
    from rblnctl.audit import Auditor

    kube = state(ctx).kube()
    changer = MethodChanger(kube=kube, options=options, events=progress.method_events(), audit=Auditor(kube=kube))
    plan = changer.plan(target)

    # Hints repeat the command with every flag given (--convert-vms, --timeout, --force, the global ones...).
    again = command_line(ctx)

    def interrupted() -> None:
        back = plan.current or "sandbox"
        warn(f"RBLNClusterPolicy {plan.policy} may already select {target}, and the operator goes on rolling it; "
             f"`{again}` waits again" + (" and converts the VMs" if convert_vms else "") +
             f", `{command_line(ctx, override={'method': back})}` goes back")

    def done(result: MethodResult) -> str | None:
        return f"RBLNClusterPolicy {plan.policy} now selects {target}" if result.changed else None

    run(Mutation(
        plan=plan, apply=changer.apply, refusal=f"refusing to switch the VM allocation method to {target}",
        question=f"Switch every VM's NPU allocation to {target} (RBLNClusterPolicy {plan.policy})?",
        disruptive=True, dry_run=how, yes=yes, output=output, plan_view=_method_view,
        result_view=lambda r: _method_view(r.plan, _spelt(ctx, r)),
        noop_message=f"RBLNClusterPolicy {plan.policy} already selects {target}; nothing to write",
        done_message=done, on_interrupt=interrupted, progress=progress, rerun=again,
    ))
