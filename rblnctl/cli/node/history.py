"""`rblnctl node history NODE`: who switched or drained the node, when, and how each run ended."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli import completion
from rblnctl.cli.node.common import app
from rblnctl.cli.options import examples, output_option
from rblnctl.cli.output import Cell, Column, Format, OutputSpec
from rblnctl.cli.state import state

if TYPE_CHECKING:
    from rblnctl.cli.output import View
    from rblnctl.node.history import NodeHistory

HISTORY_FORMATS = (Format.table, Format.wide, Format.json, Format.yaml, Format.jsonpath)


@app.command("history", short_help="Who switched or drained a node, when, and how it ended.", epilog=examples(
    "rblnctl node history npu-a01",
    "rblnctl node history npu-a01 -o wide                 # with when each run ended, and its message",
    "rblnctl node history n1 -o json | jq '.items[] | select(.result != \"done\")'",
))
def history(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="The node.", metavar="NODE", show_default=False,
                                        autocompletion=completion.complete_npu_nodes)],
    output: Annotated[OutputSpec, output_option(HISTORY_FORMATS, "table, wide, json, yaml or jsonpath=TEMPLATE")
                      ] = "table",
) -> None:
    """Show the mode switches and drains of NODE: who ran them, when, from, to, and the result.

    Read from the Events rblnctl writes on the node (kept for the API server's --event-ttl, 1h by default)
    and the progress record an unfinished switch leaves on it.
    """
    from rblnctl.cli.output import emit
    from rblnctl.kube import validate_name
    from rblnctl.node.history import read_history

    validate_name(node)  # bad input fails before connecting
    emit(history_view(read_history(state(ctx).kube(), node)), output)


_HISTORY_STYLES = {"done": "green", "failed": "red", "interrupted": "yellow", "in-progress": "yellow"}


def _action(e: dict) -> str:
    """A run as the command that ran it (`set-mode vm`, `set-mode container`, `drain`): its target in the words the
    user types, so the default table fits 80 columns (issue 39: with FROM and TO as label values it was 87 wide and
    folded a column under every row); FROM and TO, as the label says them, are -o wide's."""
    from rblnctl.node.mode import short_mode

    return f"{e['action']} {short_mode(e['to'])}" if e["action"] == "set-mode" and e["to"] else str(e["action"])


# The default table: STARTED (20) ACTION (at most 18) RESULT (at most 11) and USER, who gets 22 columns of 80 (a
# longer name goes under its row, Table.render's rule); -o wide adds what the run went from and to, when it ended,
# where the row was read and its last message.
_HISTORY_COLUMNS = (
    Column("STARTED"), Column("ACTION", value=_action),
    Column("RESULT", value=lambda e: Cell(e["result"], _HISTORY_STYLES.get(e["result"], ""))),
    Column("USER", value=lambda e: e["user"] or "<unknown>"),
    Column("FROM", wide=True, value=lambda e: e["from"] or "-"),
    Column("TO", wide=True, value=lambda e: e["to"] or "-"),
    Column("FINISHED", wide=True, value=lambda e: e["finished"] or "-"),
    Column("SOURCE", wide=True), Column("MESSAGE", wide=True, value=lambda e: e["message"]))


def history_view(h: NodeHistory) -> View:
    """The NodeHistory view: a row per run, oldest first; a note when nothing is on record, saying why."""
    from rblnctl import constants as C
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import NODE_HISTORY

    doc = NODE_HISTORY(h)
    t = rows(doc["items"], *_HISTORY_COLUMNS)
    notes = list(h.notes)
    if not h.entries:
        notes.append(f"No switch or drain of node {h.node} on record: rblnctl's Events expire after the API server's "
                     f"--event-ttl ({C.DEFAULT_EVENT_TTL} by default), and no unfinished switch left its record on "
                     "the node.")
    return View(kind="NodeHistory", body=doc, tables=[t] if doc["items"] else [], notes=notes)
