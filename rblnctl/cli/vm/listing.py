"""`rblnctl vm list`: the VMs and VMIs that hold or request NPUs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl import constants as C
from rblnctl.cli.options import OutputOpt, WatchOpt, examples, sort_by_option
from rblnctl.cli.output import Column, joined
from rblnctl.cli.rerun import spell
from rblnctl.cli.vm.common import _namespace, _source, app
from rblnctl.cli.state import state
from rblnctl.documents import restart_marker

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.vm.listing import VmNpuListing

LIST_EXAMPLES = examples(
    "rblnctl vm list -A",
    "rblnctl vm list -n vms -o wide                  # every hostDevices entry",
    "rblnctl vm list -A --watch                      # then every change, until Ctrl-C",
    "rblnctl vm list -A --sort-by=.node -o custom-columns=VM:.name,NODE:.node",
    "rblnctl vm list -A -o jsonpath='{.items[?(@.node==\"n1\")].name}'",
)


# -- list ---------------------------------------------------------------------------------------------------


def compact_devices(devices: Iterable[dict]) -> str:
    """A VM's NPUs in a few characters: `8x RBLN-CA22_PF`, `2x claim/rbln-npu` (each entry: -o wide); `devices`:
    the devices of a VmNpuList item's document."""
    counts: dict[str, int] = {}
    for d in devices:
        key = d["resource"].removeprefix(C.RESOURCE_PREFIX) if d["resource"] else f"claim/{d['claim']}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n}x {k}" for k, n in counts.items()) or "<none>"


def _vm_status(i: dict) -> str:
    marker = restart_marker(i)
    return i["status"] + (f",{marker}" if marker else "") + (",ClaimCollision" if i["claimCollisions"] else "")


def _vm_npus(i: dict) -> str:
    """NPUS: a change staged for the next restart shows what the VMI passes now -> what the VM asks for."""
    held = i["runningNpus"]
    return f"{held}->{i['npus']}" if i["restartPending"] and held != i["npus"] else str(i["npus"])


# DEVICES (the compact form, spaces in it) comes last, so awk's fields before it stay put; every hostDevices
# entry (npu0=rebellions.ai/RBLN-CA22_PF,...) is in -o wide.
_VM_COLUMNS = (Column("NAME"), Column("STATUS", value=_vm_status), Column("NODE"), Column("NPUS", value=_vm_npus),
               Column("METHOD"), Column("KIND", wide=True), Column("HELD", wide=True, value="runningNpus"),
               Column("HOST DEVICES", wide=True,
                      value=lambda i: joined(f"{d['name']}={_source(d)}" for d in i["devices"])),
               Column("DEVICES", value=lambda i: compact_devices(i["devices"])))


def _list_view(listing: VmNpuListing, sort_by: str | None = None) -> View:
    from rblnctl.cli.output import View, rows, sort_order
    from rblnctl.documents import VM_NPU_LIST, body

    every = listing.namespace is None
    doc = body(VM_NPU_LIST, spell, listing=listing, items=listing.items)
    doc["items"] = [doc["items"][i] for i in sort_order(doc["items"], sort_by)]  # sorted as printed
    t = rows(doc["items"], *([Column("NAMESPACE")] if every else []), *_VM_COLUMNS)
    where = "any namespace" if every else f"namespace {listing.namespace}"
    notes = list(listing.notes) + ([] if listing.items else [f"No VM with NPUs found in {where}."])
    notes += [f"warning: VM {e.ref} on {e.node} has a DRA claim of the same name as {', '.join(e.collisions)}: the "
              "RBLN DRA driver prepares one claim of a name per node, so one of them cannot start; give each its own "
              f"name with `rblnctl vm attach {e.ref.name} -n {e.ref.namespace} --restart`" for e in listing.collisions]
    return View(kind="VmNpuList", body=doc, tables=[t] if listing.items else [], notes=notes,
                names=[f"{i['kind'].lower()}.kubevirt.io/{i['name']}" for i in doc["items"]])


@app.command("list", short_help="List VMs that hold or request NPUs.", epilog=LIST_EXAMPLES)
def list_vms(
    ctx: typer.Context,
    watch: WatchOpt = False,
    sort_by: Annotated[str | None, sort_by_option("'{.npus}' or .node")] = None,
    selector: Annotated[str | None, typer.Option("--selector", "-l", metavar="SELECTOR", show_default=False,
                                                 help="Only VMs whose labels match, as kubectl get vm -l (and "
                                                 "standalone VMIs whose own labels match), e.g. -l team=ml.")] = None,
    output: OutputOpt = "table",
) -> None:
    """List VMs and VMIs that hold or request NPUs."""
    from rblnctl.cli.output import check_sort_by, emit
    from rblnctl.vm.listing import list_vm_npus

    check_sort_by(sort_by)  # bad input fails before connecting
    namespace = None if state(ctx).all_namespaces else _namespace(ctx)
    if watch:
        from rblnctl.cli.status import follow, warn_retrying
        from rblnctl.vm.listing import vm_changes, watch_vm_npus

        follow(watch_vm_npus(state(ctx).kube(), namespace=namespace, selector=selector, on_retry=warn_retrying),
               view_of=lambda listing: _list_view(listing, sort_by), changes_of=vm_changes, output=output)
        return
    emit(_list_view(list_vm_npus(state(ctx).kube(from_cache=True), namespace=namespace, selector=selector), sort_by),
         output)
