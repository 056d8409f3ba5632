"""`rblnctl vm diagnose`: why a VM has no NPU, link by link."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from rblnctl.cli.options import OutputOpt, examples
from rblnctl.cli.output import Cell, Column
from rblnctl.cli.vm.common import VmArg, _namespace, app
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.vm.diagnose.model import VmDiagnosis

DIAGNOSE_EXAMPLES = examples(
    "rblnctl vm diagnose my-vm -n vms",
    "rblnctl vm diagnose my-vm -o json | jq '.links[] | select(.status==\"FAIL\")'",
)


# -- diagnose -------------------------------------------------------------------------------------------------


_LINK_COLUMNS = (Column("LINK", value="name"),
                 Column("STATUS", value=lambda link: Cell(link["status"], "green" if link["status"] == "PASS"
                                                          else "red")),
                 Column("EVIDENCE", value=lambda link: "; ".join(link["evidence"])))


def _diagnosis_view(d: VmDiagnosis, ctx: typer.Context) -> View:
    from rblnctl.cli.output import View, rows
    from rblnctl.cli.rerun import Voice
    from rblnctl.documents import VM_DIAGNOSIS

    doc = VM_DIAGNOSIS(d, Voice(ctx))
    head = [f"VM {d.vm}: " + ("not found" if not d.found else f"{doc['npus']} NPU(s) through {doc['method']}"
                              if doc["npus"] else "no NPU requested")]
    broken = next((link for link in doc["links"] if link["name"] == doc["broken"]), None)
    if broken is None:
        tail = ["every link holds: the VM has its NPUs"]
    else:
        tail = [f"broken link: {broken['name']} ({broken['failure']})"]
        if broken["remedy"] is not None:
            tail.append(f"remedy: {broken['remedy']}")
    return View(kind="VmDiagnosis", body=doc, preamble=head, tables=[rows(doc["links"], *_LINK_COLUMNS)],
                epilogue=tail, notes=[f"warning: {w}" for w in doc["warnings"]],
                names=[f"virtualmachine.kubevirt.io/{d.vm.name}"])


@app.command("diagnose", short_help="Say why a VM has no NPU.", epilog=DIAGNOSE_EXAMPLES)
def diagnose(ctx: typer.Context, vm: VmArg, output: OutputOpt = "table") -> None:
    """Say why a VM has no NPU, link by link, with remedies."""
    from rblnctl.cli.console import waiting
    from rblnctl.cli.output import emit
    from rblnctl.kube import validate_name
    from rblnctl.vm.diagnose import diagnose as walk
    from rblnctl.vm.model import VmDiagnosisFailed

    validate_name(vm, kind="VirtualMachine")
    namespace = _namespace(ctx)
    with waiting(f"diagnosing VM {namespace}/{vm}..."):
        d = walk(state(ctx).kube(), vm, namespace)
    emit(_diagnosis_view(d, ctx), output)
    if d.broken is not None:
        raise VmDiagnosisFailed(str(d.summary()))
