"""`rblnctl preflight`: cluster readiness through the API (--hosts: and every NPU node's host), or --local."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rblnctl.cli import completion
from rblnctl.cli.options import examples

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.options import output_option, SelectorOpt, timeout_s
from rblnctl.cli.output import COMMON_FORMATS, FORMATS_HELP, Format, OutputSpec
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.preflight.hosts import HostChecks
    from rblnctl.preflight.model import PreflightReport, Status


class Method(str, enum.Enum):
    """--method values."""

    auto = "auto"
    sandbox = "sandbox"
    dra = "dra"


MethodOpt = Annotated[
    Method,
    typer.Option("--method", help="Allocation method to check: sandbox (Sandbox Device Plugin), dra, or auto "
                 "(from the RBLNClusterPolicy).", case_sensitive=False),
]
LocalOpt = Annotated[
    bool, typer.Option("--local", help="Check this host (a worker node) instead of the cluster: reads /proc and /sys, "
                       "needs no cluster and no root.")
]
RootOpt = Annotated[
    Path | None,
    typer.Option("--root", metavar="DIR", help="With --local: directory holding the host's proc/, sys/, dev/ and "
                 f"lib/modules/ (a captured tree) [default: {C.HOST_ROOT}].", show_default=False),
]
NodeOpt = Annotated[str | None, typer.Option("--node", metavar="NODE", help="Check only this NPU node.",
                                             show_default=False, autocompletion=completion.complete_npu_nodes)]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Fail (exit 1) on WARN findings too.")]
PreflightOutputOpt = Annotated[
    OutputSpec, output_option((*COMMON_FORMATS, Format.junit), f"{FORMATS_HELP}; junit (JUnit XML, for CI)")
]
HostsOpt = Annotated[
    bool, typer.Option("--hosts", help="Also run the host checks of --local on every NPU node, each in a short-lived "
                       "read-only pod in -n NAMESPACE [default: the operator's namespace, "
                       f"{C.OPERATOR_NAMESPACE}]; pods are always deleted unless --keep.")
]
ImageOpt = Annotated[
    str | None, typer.Option("--image", metavar="IMAGE", help="With --hosts: the rblnctl image the pods run "
                             f"[default: {C.HOST_POD_IMAGE_REPOSITORY}:<this version>; see docs/preflight.md].",
                             show_default=False)
]
MaxParallelOpt = Annotated[
    int | None, typer.Option("--max-parallel", metavar="N", help="With --hosts: at most N pods at once [default: 20].",
                             show_default=False)
]
KeepOpt = Annotated[bool, typer.Option("--keep", help="With --hosts: leave the pods in place (to read them with "
                                       "kubectl); the report says how to delete them.")]
PodTimeoutOpt = Annotated[
    str | None, typer.Option("--timeout", metavar="DURATION", help="With --hosts: how long each pod may take from "
                             "its creation: seconds or a duration like 90s, 5m [default: 2m].", show_default=False)
]


def preflight(
    ctx: typer.Context,
    method: MethodOpt = Method.auto,
    local: LocalOpt = False,
    root: RootOpt = None,
    node: NodeOpt = None,
    selector: SelectorOpt = None,
    strict: StrictOpt = False,
    output: PreflightOutputOpt = "table",
    hosts: HostsOpt = False,
    image: ImageOpt = None,
    max_parallel: MaxParallelOpt = None,
    keep: KeepOpt = False,
    timeout: PodTimeoutOpt = None,
) -> None:
    """Check that the cluster (or, with --local, this host) is ready for RBLN NPUs in KubeVirt VMs."""
    from rblnctl.cli.output import emit
    from rblnctl.errors import InvalidInput, PreflightFailed

    pod_flags = [f for f, given in (("--image", image is not None), ("--max-parallel", max_parallel is not None),
                                    ("--keep", keep), ("--timeout", timeout is not None)) if given]
    if pod_flags and not hosts:
        raise InvalidInput(f"{', '.join(pod_flags)} only apply to --hosts")
    if local:
        if node or selector:
            raise InvalidInput("--node and --selector pick cluster nodes; --local checks the host it runs on")
        if hosts:
            raise InvalidInput("--hosts checks every NPU node through the cluster; --local checks the host it runs on")
        from rblnctl.preflight.host import HostPreflight  # no kubernetes import on this path

        at = {"root": root} if root is not None else {}  # the library's default root otherwise
        report = HostPreflight(**at, method=method.value, strict=strict).run()
    else:
        if root is not None:
            raise InvalidInput("--root needs --local")
        import dataclasses

        from rblnctl.cli.console import waiting
        from rblnctl.preflight.cluster import ClusterPreflight

        pods = _host_checks(ctx, image, max_parallel, keep, timeout) if hosts else None
        what = "running host pods on the NPU nodes, reading the cluster" if hosts else \
            "reading the cluster (nodes, NodeFeatures, KubeVirt, operator)"
        with waiting(f"{what}...") as spin:
            report = ClusterPreflight(
                # with host pods it writes, and reads back the pods it made: consistent reads then
                kube=state(ctx).kube(from_cache=not hosts), method=method.value, node=node, selector=selector,
                strict=strict, hosts=pods if pods is None else dataclasses.replace(pods, on_retry=spin.retrying)
            ).run()
    emit(report_view(report, ctx), output)
    failing = report.failed_ids()
    if failing:
        what = "failed or warned" if strict else "failed"
        err = PreflightFailed(f"preflight: {len(failing)} check(s) {what}: {', '.join(failing)}", failed=failing)
        if "hosts.pods" in failing:
            # Some NPU nodes were not checked (their pod did not run, or was not attempted): the same command,
            # every flag kept, checks them once what host.pod names is fixed.
            from rblnctl.cli.rerun import command_line

            err.with_details([f"rerun (every node again): {command_line(ctx)}"])
        raise err


def _host_checks(ctx: typer.Context, image: str | None, max_parallel: int | None, keep: bool,
                 timeout: str | None) -> HostChecks:
    """--hosts flags bound to the library's HostChecks; pods that could not be deleted are named on stderr."""
    from rblnctl.cli.console import warn
    from rblnctl.preflight.hosts import HostChecks

    namespace = state(ctx).namespace or C.OPERATOR_NAMESPACE
    given: dict[str, Any] = {k: v for k, v in (("image", image), ("max_parallel", max_parallel)) if v is not None}
    if timeout is not None:
        given["timeout_s"] = timeout_s(timeout)

    def left_behind(pods: list[str]) -> None:
        warn(f"could not delete {len(pods)} host pod(s); delete them with: kubectl delete pod -n {namespace} "
             + " ".join(pods))

    return HostChecks(namespace=namespace, keep=keep, on_left_behind=left_behind, **given)


_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def _nodes_text(scopes: list[str], total: int) -> str:
    if total > 1 and len(scopes) == total:
        return f"all-{total}"
    if len(scopes) <= 4:
        return ",".join(scopes)
    return f"{len(scopes)}:{','.join(scopes[:3])},..."


def report_view(report: PreflightReport, ctx: typer.Context | None = None) -> View:
    """The report (kind PreflightReport): scope-wide checks, per-node checks grouped, remedies, the verdict.

    One line per check in the tables (grep FAIL finds every failure); -o wide adds each check's id,
    and the remedies follow the tables, one line each, keyed by check id.
    """
    from rblnctl.cli.output import Cell, Column, Table, View
    from rblnctl.documents import CHECK_RESULT, PREFLIGHT_REPORT
    from rblnctl.preflight.junit import to_junit
    from rblnctl.preflight.model import SCOPE_CLUSTER, SCOPE_HOST, CheckResult, group_checks

    def status_cell(status: Status) -> Cell:
        return Cell(status.value, _STYLE.get(status.value, ""))

    from rblnctl.cli.rerun import Voice

    say = Voice(ctx) if ctx is not None else str  # the remedies' commands spelt for the program and flags run
    doc = PREFLIGHT_REPORT(report, say)  # the tables show the document's findings (read back as CheckResults)
    checks = [CheckResult.from_dict(c) for c in doc["checks"]]
    top = [c for c in checks if c.scope in (SCOPE_CLUSTER, SCOPE_HOST)]
    per_node = [c for c in checks if c.scope not in (SCOPE_CLUSTER, SCOPE_HOST)]
    remedies: list[str] = []
    tables = []
    first: dict[str, str] = {}  # remedy command -> the check whose remedy names it first

    def said_once(id_: str, remedy: str, command: str) -> str:
        """The remedy, or, when an earlier check's remedy already runs the same command (one policy change fixes
        operator.policy, dra.driver and dra.deviceclass), its own words and a pointer to that one: every command
        printed once per run."""
        if not command:
            return remedy
        if command not in first:
            first[command] = id_
            return remedy
        head = remedy.split("`", 1)[0].rstrip(" :;,")
        return f"{head}: the remedy of {first[command]} above" if head else f"the remedy of {first[command]} above"

    if top:
        t = Table("STATUS", "CHECK", "EVIDENCE", Column("ID", wide=True))
        for c in top:
            t.add_row(status_cell(c.status), c.title, c.evidence, c.id)
            if c.remedy:
                remedies.append(f"{c.status.value} {c.id}: {said_once(c.id, str(c.remedy), c.remedy_command)}")
        tables.append(t)
    if per_node:
        nt = Table("STATUS", "CHECK", "NODES", "EVIDENCE", Column("ID", wide=True))
        for g in group_checks(per_node):
            nodes = _nodes_text(g.scopes, doc["nodes"])
            nt.add_row(status_cell(g.status), g.title, nodes, g.evidence, g.id)
            if g.remedy:
                remedies.append(f"{g.status.value} {g.id} ({nodes}): {said_once(g.id, str(g.remedy), '')}")
        tables.append(nt)
    s = doc["summary"]
    verdict = "ready" if s["ok"] else "NOT ready"
    head = [f"method {doc['method']}: {doc['methodNote']}"]
    tail = ["remedies:", *[f"  {r}" for r in remedies], ""] if remedies else []
    tail.append(f"{s['total']} checks: {s['passed']} PASS, {s['warned']} WARN, {s['failed']} FAIL, {s['skipped']} "
                f"SKIP; method {s['method']}{'; strict' if s['strict'] else ''} -> {verdict}")
    return View(kind="PreflightReport", body=doc, preamble=head, tables=tables, epilogue=tail,
                junit=lambda: to_junit(report, lambda c: (lambda d: (d["remedy"], d["remedyCommand"]))(
                    CHECK_RESULT(c, say))))


def register(app: typer.Typer) -> None:
    """Mount `preflight` as a single command on the root app."""
    app.command("preflight", short_help="Check the cluster (or this host) is ready.", epilog=examples(
        "rblnctl preflight                          # the cluster, through the API server",
        "rblnctl preflight --method dra --strict    # fail on warnings too",
        "rblnctl preflight --local                  # this host: IOMMU, VFIO modules, NPUs",
        "rblnctl preflight --hosts --image REGISTRY/rblnctl:TAG   # and every NPU node's host, from pods",
        "rblnctl preflight --strict -o junit > preflight.xml      # a test report for CI",
        "rblnctl preflight -o json | jq '.checks[] | select(.status==\"FAIL\")'",
    ))(preflight)
