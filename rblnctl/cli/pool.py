"""Pool runs of `node set-mode` and `node drain` on the terminal: live per-node progress, the plan, the final table.

On a terminal the progress is a rich Live table on stderr (one row per node, redrawn in place; NODE and
STATE never cut, DETAIL takes what is left of the width); piped, it is one line each time a node's
state or detail changes, each starting with the node's name. The result goes to stdout: a table
(NODE, FROM, TO, RESULT, DURATION, EVICTED) or a ModeSwitchList / NodeDrainList document whose
items are the single-node ModeSwitch / NodeDrain documents.
"""

from __future__ import annotations

from rblnctl.errors import one_line

import threading
import time
from typing import TYPE_CHECKING

from rblnctl.cli.output import Cell, Table, View
from rblnctl.cli.rerun import spell
from rblnctl.cli.waits import human_duration

if TYPE_CHECKING:  # for the checker only: rich and the library are imported when a pool runs, never at --help
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from rblnctl.node.events import NodeEvents
    from rblnctl.node.pool import PoolEvents, PoolItem, PoolPlan, PoolResult

_STYLE = {"done": "green", "unchanged": "", "refused": "red", "failed": "red", "interrupted": "yellow",
          "skipped": "yellow"}
_FINISHED = ("done", "unchanged", "refused", "failed", "interrupted", "skipped")


class _Row:
    def __init__(self) -> None:
        self.state = "queued"
        self.detail = ""
        self.evicted = 0
        self.started: float | None = None
        self.ended: float | None = None
        self.printed: tuple[str, str] | None = None  # piped: the last (state, text) line written for the node


_HEADERS = ("NODE", "STATE", "EVICTED", "ELAPSED", "DETAIL")
_GAP = 2  # spaces between the live table's columns
_MIN_DETAIL = 12  # below this, EVICTED and ELAPSED give their room to DETAIL


def progress_lines(title: str, rows: list[tuple[str, _Row]], width: int, now: float) -> list[Text]:
    """The live progress at `width` columns: one rich Text per line (the title, the header, a row per node).

    NODE and STATE are never cut: they are as wide as their longest value. EVICTED and ELAPSED keep
    their width while DETAIL has at least _MIN_DETAIL columns, else they go. DETAIL takes what is left,
    on one line, cut with an ellipsis. Only when a node's name and state alone are wider than the
    terminal does a row wrap; they are still shown whole.
    """
    from rich.text import Text

    from rblnctl.cli.sanitize import visible

    cells = []
    for node, r in rows:
        elapsed = "" if r.started is None else human_duration((r.ended or now) - r.started)
        cells.append((visible(node), r.state, str(r.evicted), elapsed, " ".join(visible(r.detail).split()),
                      r.state))
    widths = [max([len(_HEADERS[i])] + [len(c[i]) for c in cells]) for i in range(4)]
    keep = [0, 1, 2, 3]
    detail_w = width - sum(widths) - _GAP * len(keep)
    if detail_w < _MIN_DETAIL:
        keep = [0, 1]
        detail_w = width - widths[0] - widths[1] - _GAP * len(keep)
    show_detail = detail_w >= 1

    def line(values: list[str], styles: list[str], detail: str, detail_style: str = "") -> Text:
        text = Text(no_wrap=False)
        for n, i in enumerate(keep):
            last = n == len(keep) - 1 and not show_detail
            text.append(values[i] if last else values[i].ljust(widths[i]), style=styles[i])
            if not last:
                text.append(" " * _GAP)
        if show_detail:
            text.append(_cut(detail, detail_w), style=detail_style)
        return text

    out = [Text(_cut(title, width), no_wrap=False)]
    out.append(line(list(_HEADERS[:4]), ["bold"] * 4, "DETAIL" if show_detail else "", "bold"))
    for node, state, evicted, elapsed, detail, raw in cells:
        style = _STYLE.get(raw, "cyan" if raw != "queued" else "dim")
        out.append(line([node, state, evicted, elapsed], ["", style, "", ""], detail))
    for t in out:
        t.rstrip()
    return out


def _cut(text: str, width: int) -> str:
    """`text` in at most `width` columns, an ellipsis marking a cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "\u2026" if width > 0 else ""


class PoolProgress:
    """The pool's events on the stderr console: a live table on a terminal; piped, a line per change of a node's
    state or detail (a repeat of the node's last line is not printed again)."""

    def __init__(self, nodes: list[str], *, title: str, server_dry_run: bool = False) -> None:
        from rblnctl.cli.console import stderr

        self.console = stderr()
        self.title = title
        self.suffix = " (server dry run)" if server_dry_run else ""
        self.rows = {n: _Row() for n in nodes}
        self.lock = threading.RLock()  # the live display renders under it, from inside _ensure_live too
        self.live: Live | None = None
        self.closed = False

    # -- the library's events --------------------------------------------------------------------------

    def events(self) -> PoolEvents:
        from rblnctl.node.pool import PoolEvents

        return PoolEvents(for_node=self._node_events, on_start=self._start, on_finish=self._finish)

    def _node_events(self, node: str) -> NodeEvents:
        """A node's events: the one Progress's, its lines and its row drawn here."""
        from rblnctl.cli.console import Progress
        from rblnctl.node.events import Step

        return Progress(rollback_step=Step.ROLLBACK, pool=self, node=node).node_events()

    def _start(self, node: str) -> None:
        with self.lock:
            row = self.rows.setdefault(node, _Row())
            row.state, row.started = "planning", time.monotonic()
        self._ensure_live()
        self._line(node, "started")

    def _finish(self, item: PoolItem) -> None:
        outcome = str(item.outcome)
        with self.lock:
            row = self.rows.setdefault(item.node, _Row())
            row.state, row.ended = outcome, time.monotonic()
            row.detail = one_line(item.error) if item.error is not None else ""
        text = outcome + (f": {row.detail}" if row.detail else "")
        self._line(item.node, text, _STYLE.get(outcome, ""))

    # -- drawing ---------------------------------------------------------------------------------------

    def evicted(self, node: str) -> None:
        with self.lock:
            self.rows.setdefault(node, _Row()).evicted += 1

    def update(self, node: str, *, state: str | None = None, detail: str | None = None) -> None:
        self._update(node, state=state, detail=detail)

    def node_line(self, node: str, text: str, style: str = "") -> None:
        self._line(node, text, style)

    def _update(self, node: str, *, state: str | None = None, detail: str | None = None) -> None:
        with self.lock:
            row = self.rows.setdefault(node, _Row())
            if state is not None:
                row.state = state
            if detail is not None:
                row.detail = detail

    def _line(self, node: str, text: str, style: str = "") -> None:
        if self.console.is_terminal:
            return  # the live table shows it
        from rblnctl.cli.sanitize import plain

        with self.lock:
            row = self.rows.setdefault(node, _Row())
            key = (row.state, text)
            if key == row.printed:
                return  # nothing changed for this node since its last line
            row.printed = key
            msg = plain(f"{node}: {text}{self.suffix}")
            self.console.print(f"[{style}]{msg}[/]" if style else msg, soft_wrap=True)

    def _ensure_live(self) -> None:
        if not self.console.is_terminal:
            return
        with self.lock:
            if self.live is not None or self.closed:
                return
            from rich.live import Live

            self.live = Live(get_renderable=self._render, console=self.console, transient=True,
                             refresh_per_second=4, redirect_stdout=False, redirect_stderr=False)
            self.live.start()

    def _render(self) -> Group:
        from rich.console import Group

        now = time.monotonic()
        with self.lock:
            rows = list(self.rows.items())
        counts: dict[str, int] = {}
        for _, r in rows:
            key = r.state if r.state in _FINISHED or r.state == "queued" else "running"
            counts[key] = counts.get(key, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in counts.items())
        height = max(5, self.console.size.height - 4)
        shown = rows if len(rows) <= height else [(n, r) for n, r in rows if r.state not in ("queued", "done",
                                                                                             "unchanged")]
        return Group(*progress_lines(f"{self.title}: {summary}{self.suffix}", shown[:height],
                                     self.console.size.width, now))

    def stop(self) -> None:
        with self.lock:
            live, self.live, self.closed = self.live, None, True
        if live is not None:
            live.stop()


# -- views -----------------------------------------------------------------------------------------------


def pool_document(plan: PoolPlan, result: PoolResult | None = None) -> dict:
    """The body of a ModeSwitchList / NodeDrainList: the pool's settings and one item per node."""
    from rblnctl.documents import body, pool_list

    return body(pool_list(plan.operation), spell, plan=plan, result=result)


def _list_kind(plan: PoolPlan) -> str:
    return "ModeSwitchList" if plan.operation == "set-mode" else "NodeDrainList"


def _what(plan: PoolPlan) -> str:
    from rblnctl.node.mode import short_mode

    nodes = f"{len(plan.nodes)} node(s)"
    acting, refused = plan.acting, plan.refused
    if len(acting) != len(plan.nodes):  # say how many really change, and why the others do not
        unchanged = len(plan.nodes) - len(acting) - len(refused)
        why = [f"{unchanged} unchanged"] if unchanged else []
        why += [f"{len(refused)} {'skipped' if plan.continue_on_error else 'refused'}"] if refused else []
        nodes = f"{len(acting)} of {len(plan.nodes)} node(s) ({', '.join(why)})"
    # a switch's pool has its target mode, a drain's none (PoolRunner.for_mode, for_drain)
    doing = f"switch {nodes} to {short_mode(plan.target)}" if plan.target is not None else f"drain {nodes}"
    pace = f"at most {plan.max_unavailable} at once"
    where = f" (selector {plan.selector})" if plan.selector else ""
    return f"{doing}, {pace}{where}"


def pool_plan_view(plan: PoolPlan) -> View:
    """What each node of the pool would do (a dry run, and the confirmation), read from the list's document."""
    doc = pool_document(plan)
    switching = plan.operation == "set-mode"
    t = Table("NODE", "FROM", "TO", "PLAN", "EVICT") if switching else Table("NODE", "PLAN", "EVICT")
    for i in doc["items"]:
        p = i["plan"]
        evict = "0" if p is None else str(sum(1 for pod in p["pods"] if pod["action"] == "evict"))
        if p is None or i["error"] is not None or p["blockers"]:  # --continue-on-error goes on without it: skipped
            action: str | Cell = Cell("skipped", "yellow") if doc["continueOnError"] else Cell("refused", "red")
        elif p["noop"] if switching else not p["cordon"] and evict == "0":  # a drain: nothing to cordon or evict
            action = "unchanged"
        elif switching:
            action = "resume" if p["resume"] else "clear-leftovers" if p["converged"] else "switch"
        else:
            action = "cordon,evict" if p["cordon"] else "evict"
        if switching:
            t.add_row(i["node"], "<unknown>" if p is None else p["fromMode"], doc["target"], action, evict)
        else:
            t.add_row(i["node"], action, evict)
    # why a node is skipped; a refused pool's error lists the same blockers (with their flags): said there, once
    epilogue = [] if plan.blockers else [f"{node}: {b.message}" for node in plan.nodes for b in plan.refusal(node)]
    return View(kind=_list_kind(plan), body=doc, preamble=[_what(plan)], tables=[t],
                epilogue=epilogue, names=[f"node/{i['node']}" for i in doc["items"]])


def pool_result_view(plan: PoolPlan, result: PoolResult) -> View:
    """The final table: one row per node, its outcome, how long it took and how many pods it evicted."""
    doc = pool_document(plan, result)
    switching = plan.operation == "set-mode"
    if switching:
        t = Table("NODE", "FROM", "TO", "RESULT", "DURATION", "EVICTED")
    else:
        t = Table("NODE", "RESULT", "DURATION", "EVICTED", "CORDONED")
    items = {i["node"]: i for i in doc["items"]}
    for node in (x.node for x in result.items):  # in the order the nodes ran
        i = items[node]
        p, r = i["plan"], i["result"]
        outcome = "server-dry-run" if r is not None and r["serverDryRun"] else str(i["outcome"])
        cell = Cell(outcome, _STYLE.get(str(i["outcome"]), ""))
        evicted = str(len(i["evicted"]))  # a failed or interrupted node's evictions too (issue 28)
        duration = human_duration(i["durationSeconds"]) if i["durationSeconds"] else "-"
        if switching:
            t.add_row(node, p["fromMode"] if p is not None else "<unknown>", doc["target"], cell, duration, evicted)
        else:
            t.add_row(node, cell, duration, evicted, "yes" if r is not None and r["cordoned"] else "no")
    return View(kind=_list_kind(plan), body=doc, tables=[t], names=[f"node/{x.node}" for x in result.items])
