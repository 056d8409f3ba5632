"""`rblnctl vm fit`: how many VMs of N NPUs fit now, and where."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.options import OutputOpt, examples
from rblnctl.cli.output import Cell, Column, Table
from rblnctl.cli.vm.common import MethodOpt, ProductOpt, ResourceOpt, app
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.vm.fit import VmFit

FIT_EXAMPLES = examples(
    "rblnctl vm fit --npus 2                          # how many 2-NPU VMs fit now, and where",
    "rblnctl vm fit --npus 2 --count 4                # exit 1 unless four fit",
    "rblnctl vm fit --npus 4 --product RBLN-CA22 -o wide",
    "rblnctl vm fit --npus 1 -o json | jq '.nodes[] | select(.fits > 0) | .name'",
)


# -- fit ------------------------------------------------------------------------------------------------------


def _unknown(value: object) -> str:
    return "<unknown>" if value is None else str(value)


_FIT_COLUMNS = (Column("NODE", value="name"), Column("MODE"), Column("NPUS", value="allocatable"),
                Column("ALLOCATED", value=lambda n: _unknown(n["allocated"])),
                Column("FREE", value=lambda n: _unknown(n["free"])),
                Column("FITS", value=lambda n: Cell(str(n["fits"]), "green" if n["fits"] else "")),
                Column("HELD BY", wide=True, value=lambda n: ",".join(n["holders"]) or "<none>"),
                Column("REASON", value=lambda n: n["reason"] or ""))


def _fit_view(ctx: typer.Context, f: VmFit) -> View:
    from rblnctl.cli.output import View, rows
    from rblnctl.cli.rerun import Voice
    from rblnctl.documents import VM_FIT

    doc = VM_FIT(f, Voice(ctx))  # a warning that is a Remedy names its command
    t = rows(doc["nodes"], *_FIT_COLUMNS)
    tail = []
    if doc["never"]:
        most = doc["most"]
        tail.append(f"never: no node a VM may run on has {doc['npus']} {doc['resource']} at all (the most is "
                    f"{most['npus']}, on {most['node']}); freeing NPUs would not help")
    return View(kind="VmFit", body=doc, preamble=[f.summary()], tables=[t] if doc["nodes"] else [],
                epilogue=tail, notes=[f"warning: {w}" for w in doc["warnings"]] + [f"note: {n}" for n in doc["notes"]]
                + ([] if doc["nodes"] else ["No NPU nodes found."]),
                names=[f"node/{n['name']}" for n in doc["nodes"] if n["fits"]])


@app.command("fit", short_help="How many VMs of N NPUs fit now, and where.", epilog=FIT_EXAMPLES)
def fit(
    ctx: typer.Context,
    npus: Annotated[int, typer.Option("--npus", metavar="K", min=1, max=C.MAX_VM_NPUS,
                                      help="NPUs each VM asks for (all from one node).", show_default=False)],
    count: Annotated[int, typer.Option("--count", metavar="N", min=1,
                                       help="How many such VMs must fit (exit 1 when fewer do).")] = 1,
    resource: ResourceOpt = None,
    product: ProductOpt = None,
    method: MethodOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Say how many VMs of K NPUs fit now and on which nodes, counted as the scheduler counts.

    Each VM's NPUs come from one node: a node with F free NPUs of the VM's kind holds F // K of them. Only
    vm-passthrough nodes that advertise the VM's resource (DRA: offer vfio devices; one a NoSchedule/NoExecute
    device taint keeps away is not free) count, and only where a VM with no placement of its own may land
    (kubevirt.io/schedulable=true, which virt-handler sets; no cordon, no NoSchedule/NoExecute taint). Every
    other node says why. A resource container-mode nodes advertise too (a policy whose two plugins share a name)
    gets a warning: the scheduler may place the VM there.
    """
    from rblnctl.cli.console import waiting
    from rblnctl.cli.output import emit
    from rblnctl.errors import InvalidInput
    from rblnctl.vm.fit import FitOptions, VmFitFailed, fit_each

    if resource and product:
        raise InvalidInput("--resource and --product cannot be combined")
    options = FitOptions(npus=npus, count=count, method=method.value if method else None, resource=resource,
                         product=product)  # bad input fails before connecting
    with waiting("reading the NPU nodes..."):
        answers = fit_each(state(ctx).kube(from_cache=True), options)
    if len(answers) == 1:
        emit(_fit_view(ctx, answers[0]), output)
        if not answers[0].ok:
            raise VmFitFailed(answers[0].summary())
        return
    # vm-mode nodes of several products, none named: a VM asks for one, so one answer per product
    emit(_fits_view(ctx, answers), output)
    if not any(f.ok for f in answers):
        raise VmFitFailed("; ".join(f.summary() for f in answers))


def _fits_view(ctx: typer.Context, answers: list[VmFit]) -> View:
    """One VmFit per resource: in the human form each answer's summary and table in turn, as a document a
    VmFitList whose items are the VmFit documents."""
    from rblnctl.cli.output import View

    views = [_fit_view(ctx, f) for f in answers]
    blocks = [_Block(f.summary(), v.tables) for f, v in zip(answers, views, strict=True)]
    return View(kind="VmFitList", body={"items": [v.document() for v in views]},
                preamble=[f"vm-mode nodes offer {len(answers)} kinds of NPU; a VM asks for one (--product picks it):"],
                tables=blocks, epilogue=[line for v in views for line in v.epilogue],
                notes=list(dict.fromkeys(n for v in views for n in v.notes)),
                names=list(dict.fromkeys(n for v in views for n in v.names or ())))


class _Block(Table):
    """One answer of several: its summary line, then its table (rendered as Table.render is)."""

    def __init__(self, summary: str, tables: Iterable[Table]) -> None:
        super().__init__()
        self.summary = summary
        self.tables = list(tables)

    def render(self, *, wide: bool = False, headers: bool = True, color: bool = False, width: int | None = None
               ) -> str:
        from rblnctl.cli.output import prose

        return "\n".join([prose([self.summary], width), *(t.render(wide=wide, headers=headers, color=color,
                                                                   width=width) for t in self.tables)])
