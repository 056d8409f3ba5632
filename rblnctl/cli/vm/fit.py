"""`rblnctl vm fit`: how many VMs of N NPUs fit now, and where."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.options import OutputOpt, examples
from rblnctl.cli.output import Cell, Column
from rblnctl.cli.vm.common import MethodOpt, ProductOpt, ResourceOpt, app

FIT_EXAMPLES = examples(
    "rblnctl vm fit --npus 2                          # how many 2-NPU VMs fit now, and where",
    "rblnctl vm fit --npus 2 --count 4                # exit 1 unless four fit",
    "rblnctl vm fit --npus 4 --product RBLN-CA22 -o wide",
    "rblnctl vm fit --npus 1 -o json | jq '.nodes[] | select(.fits > 0) | .name'",
)


# -- fit ------------------------------------------------------------------------------------------------------


def _unknown(value: Any) -> str:
    return "<unknown>" if value is None else str(value)


_FIT_COLUMNS = (Column("NODE", value="name"), Column("MODE"), Column("NPUS", value="allocatable"),
                Column("ALLOCATED", value=lambda n: _unknown(n["allocated"])),
                Column("FREE", value=lambda n: _unknown(n["free"])),
                Column("FITS", value=lambda n: Cell(str(n["fits"]), "green" if n["fits"] else "")),
                Column("HELD BY", wide=True, value=lambda n: ",".join(n["holders"]) or "<none>"),
                Column("REASON", value=lambda n: n["reason"] or ""))


def _fit_view(ctx: typer.Context, f: Any) -> Any:
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
    from rblnctl.vm.fit import FitOptions, VmFitFailed
    from rblnctl.vm.fit import fit as answer

    if resource and product:
        raise InvalidInput("--resource and --product cannot be combined")
    options = FitOptions(npus=npus, count=count, method=method.value if method else None, resource=resource,
                         product=product)  # bad input fails before connecting
    with waiting("reading the NPU nodes..."):
        f = answer(ctx.obj.kube(from_cache=True), options)
    emit(_fit_view(ctx, f), output)
    if not f.ok:
        raise VmFitFailed(f.summary())
