"""What several `rblnctl node` verbs share: the group's Typer app they register on, the NODE... argument and its
checks, the node's cordon read back after an interruption, the note on --force, and the pods table of a drain's
and a switch's plan."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli import completion

if TYPE_CHECKING:
    from rblnctl.cli.output import Table
    from rblnctl.errors import RblnError

app = typer.Typer(
    help="Inspect NPU nodes, switch their workload mode (container or vm-passthrough), drain their NPU pods, "
    "and show who did so (history).",
    no_args_is_help=True,
)

SelectionArg = Annotated[list[str] | None, typer.Argument(help="The nodes (or -l SELECTOR).", metavar="[NODE]...",
                                                          show_default=False,
                                                          autocompletion=completion.complete_npu_nodes)]


def selection(nodes: list[str], selector: str | None) -> None:
    """One node, several, or a selector: never both, never neither (exit 2, before connecting)."""
    from rblnctl.errors import InvalidInput
    from rblnctl.kube import validate_name

    if nodes and selector:
        raise InvalidInput("name the nodes or give -l SELECTOR, not both")
    if not nodes and not selector:
        raise InvalidInput("name at least one node, or select nodes with -l SELECTOR")
    for n in nodes:
        validate_name(n)


def cordon_state(ctx: typer.Context, node: str) -> str:
    """After an interruption, what is true of the node's cordon, read back once: `is cordoned`, `is not cordoned`,
    or (the read failed) `may be left cordoned`."""
    from rblnctl.cli.state import state
    from rblnctl.errors import RblnError
    from rblnctl.kube import NODES

    try:
        obj = state(ctx).kube().get(NODES, node)
    except (RblnError, KeyboardInterrupt):
        return "may be left cordoned"
    return "is cordoned" if (obj.get("spec") or {}).get("unschedulable") else "is not cordoned"


# Overrides that --force used to include (before it meant only kubectl's): named when a refusal needs one.
OLD_FORCE_OVERRIDES = frozenset({"evict_vms", "evict_daemonsets", "skip_iommu_check", "skip_release_check",
                                 "take_over", "reverse"})


def _explain_force(err: RblnError, force: bool) -> None:
    """A refusal that an override --force used to include would lift: say that --force now means only kubectl's."""
    blockers = list(getattr(err, "blockers", None) or [])
    wanted = {getattr(b, "override", None) for b in blockers} | set(getattr(err, "options", ()) or ())
    if force and wanted & OLD_FORCE_OVERRIDES:
        err.details = [*err.details, "note: --force means only what kubectl drain's does (pods without a "
                       "controller); each other override is its own flag, named above (docs/node.md, Overrides)"]


@contextmanager
def force_explained(force: bool) -> Iterator[None]:
    """Around a drain or a switch (one node, a pool, a rehearsal): a refusal --force used to lift says what --force
    means now."""
    from rblnctl.errors import RblnError

    try:
        yield
    except RblnError as err:
        _explain_force(err, force)
        raise


def pods_table(pods: list[dict]) -> Table:
    """One row per pod on the node (the `pods` of a NodeDrain or ModeSwitch plan's document): what the drain does
    with it and why."""
    from rblnctl.cli.output import Cell, Table
    from rblnctl.node.filters import OPERATOR_COMPONENT

    t = Table("NAMESPACE", "NAME", "ACTION", "NPU", "REASON")
    operator: dict[str, int] = {}
    for e in pods:
        blocked = bool(e["blockers"])
        # The operator's own pods (one per component, seven or more) are left alone on every switch: the default
        # table counts them in one row, so the pods that matter and the prompt stay on an 80x24 screen; -o wide
        # (and -o json) lists them.
        mine = not blocked and e["action"] == "ignore" and e["reason"].startswith(OPERATOR_COMPONENT)
        if mine:
            operator[e["namespace"]] = operator.get(e["namespace"], 0) + 1
        t.add_row(e["namespace"], e["name"], Cell("blocked" if blocked else e["action"], "red" if blocked else ""),
                  "yes" if e["npu"] else "no", e["reason"], only="wide" if mine else None)
    for ns, n in operator.items():
        t.add_row(ns, f"({n} operator pods)", "ignore", "no", "RBLN operator components: the operator replaces "
                  "them (-o wide lists them)", only="table")
    return t
