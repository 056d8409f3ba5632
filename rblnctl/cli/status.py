"""`rblnctl status`: one-screen overview of the operator policy, KubeVirt and NPU nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

import typer

from rblnctl.cli.options import OutputOpt, SelectorOpt, WatchOpt, examples
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rich.live import Live

    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.kube import Change
    from rblnctl.status import ClusterStatus

T = TypeVar("T")  # what a watch yields: a ClusterStatus, a VmNpuListing, a NodesSnapshot

EXAMPLES = examples(
    "rblnctl status",
    "rblnctl status -o wide",
    "rblnctl status --watch",
    "rblnctl status -o jsonpath='{.nodes[?(@.mode==\"vm-passthrough\")].name}'",
)


def status(ctx: typer.Context, selector: SelectorOpt = None, watch: WatchOpt = False, output: OutputOpt = "table"
           ) -> None:
    """Show the operator policy, KubeVirt gates and every NPU node's mode at a glance."""
    from rblnctl.cli.console import waiting
    from rblnctl.cli.output import emit
    from rblnctl.status import cluster_status, status_changes, watch_cluster_status

    if watch:
        follow(watch_cluster_status(state(ctx).kube(), selector=selector, on_retry=warn_retrying), view_of=view,
               changes_of=status_changes, output=output)
        return
    with waiting("reading the cluster..."):
        st = cluster_status(state(ctx).kube(from_cache=True), selector=selector)
    emit(view(st), output)


def warn_retrying(err: Exception) -> None:
    from rblnctl.cli.console import warn

    warn(f"watching the cluster failed ({err}); trying again")


def follow(updates: Iterator[T], *, view_of: Callable[[T], View], changes_of: Callable[[T, T], list[Change]],
           output: OutputSpec) -> None:
    """Show the first update, then every change until Ctrl-C (exit 130, as every command: docs/exit-codes.md).

    On a terminal, table output is redrawn in place; piped, the first table is printed once and
    each change follows as a line (`node/n1 mode container -> vm-passthrough`). Documents (-o json,
    yaml, jsonpath) are printed again, whole, after each change. SIGTERM and SIGHUP keep their exit codes.
    """
    import sys

    from rblnctl.cli.console import stdout
    from rblnctl.cli.fold import cut
    from rblnctl.cli.output import emit, render_tables, terminal_width
    from rblnctl.cli.sanitize import visible

    from rblnctl.cli.console import info

    live: Live | None = None
    last: T | None = None
    said: set[str] = set()  # piped: the notes printed, each once (issue 39: the watch keeps them)
    try:
        for current in updates:
            if not output.is_table:
                emit(view_of(current), output)
            elif sys.stdout.isatty():
                from rich.text import Text

                shown = view_of(current)
                width = terminal_width()
                # the notes are redrawn under the tables, not dropped (issue 39): a line each, cut to the width, so
                # the screen still fits the terminal (`rblnctl status` prints them whole)
                notes = "".join(f"{cut(visible(n), width)}\n" for n in shown.notes)
                text = Text(render_tables(shown, wide=output.format == "wide", headers=not output.no_headers,
                                          width=width) + ("\n" + notes if notes else ""))
                if live is None:
                    from rich.live import Live

                    live = Live(text, console=stdout(), auto_refresh=False, redirect_stdout=False,
                                redirect_stderr=False)
                    live.start()
                live.update(text, refresh=True)
            elif last is None:
                first = view_of(current)
                said = {_note_key(n) for n in first.notes}
                emit(first, output)
            else:
                for change in changes_of(last, current):
                    sys.stdout.write(visible(change_line(change)) + "\n")
                sys.stdout.flush()
                for note in view_of(current).notes:  # a note that is new (not its times or counts): on stderr
                    if _note_key(note) not in said:
                        said.add(_note_key(note))
                        info(note)
            last = current
    finally:  # Ctrl-C, SIGTERM, SIGHUP: 130, 143, 129 as everywhere (it exited 0, but 130 from `vm list -w | cat`)
        if live is not None:
            live.stop()


def _note_key(note: str) -> str:
    """What a note says, without its numbers (a held pod's time so far, a count of Ready pods): piped, a note is
    printed again only when this changes, as the waits print a line per change of state, not of its times."""
    import re

    return re.sub(r"\d+", "#", note)


def change_line(change: Change) -> str:
    """`node/n1 mode container -> vm-passthrough`, `node/n4 added (container)`."""
    if change.what == "added":
        return f"{change.subject} added" + (f" ({change.new})" if change.new else "")
    if change.what == "removed":
        return f"{change.subject} removed"
    return f"{change.subject} {change.what} {change.old} -> {change.new}"


def view(st: ClusterStatus) -> View:
    """The overview in every format (kind ClusterStatus)."""
    from rblnctl.cli.output import View
    from rblnctl.cli.render import capacity_notes, hold_notes, npu_nodes_table, switch_notes
    from rblnctl.clock import SYSTEM_CLOCK
    from rblnctl.documents import CLUSTER_STATUS

    doc = CLUSTER_STATUS(st)
    lines = [f"Kubernetes:  {st.server_version}"]
    p = st.policy
    lines.append(f"Policy:      {p.name} {p.switches()} (components in {st.operator_namespace})" if p
                 else "Policy:      <none>")
    for kv in st.kubevirt:
        gates = ",".join(kv.feature_gates) or "<none>"
        line = f"KubeVirt:    {kv.namespace}/{kv.name} {kv.phase or '<unknown>'} {kv.version or ''} gates={gates}"
        if kv.disabled_feature_gates:
            line += f" disabled={','.join(kv.disabled_feature_gates)}"
        lines.append(" ".join(line.split(" ")))
    modes = ", ".join(f"{m}={n}" for m, n in st.modes.items()) or "none"
    lines.append(f"NPU nodes:   {len(st.nodes)} ({modes})")
    tables = [npu_nodes_table(doc["nodes"], doc["npuVms"])] if st.nodes else []
    return View(kind="ClusterStatus", body=doc, preamble=lines, tables=tables,
                notes=[f"note: {n}" for n in st.notes] + switch_notes(st.nodes) + capacity_notes(st.nodes)
                + hold_notes(st.nodes, now=SYSTEM_CLOCK.now()),
                names=[f"node/{n.name}" for n in st.nodes])


def register(app: typer.Typer) -> None:
    """Mount the command on the root app."""
    app.command("status", short_help="Overview: policy, KubeVirt, NPU nodes.", epilog=EXAMPLES)(status)
