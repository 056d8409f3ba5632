"""`rblnctl vfio status`: NPUs' drivers, IOMMU groups and holders, of this host (or with --node of a cluster node).

No kubernetes import on the host path (tests/test_startup.py): the cluster is touched only for --node."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.options import HostReadRootOpt, OutputOpt, examples
from rblnctl.cli.output import Column, joined
from rblnctl.cli.state import state
from rblnctl.cli.vfio.common import BdfArgs, app

if TYPE_CHECKING:
    from collections.abc import Callable

    from rblnctl.cli.output import View
    from rblnctl.host.vfio.model import VfioStatus


@app.command("status", short_help="Show NPUs' drivers, IOMMU groups, holders.", epilog=examples(
    "rblnctl vfio status",
    "rblnctl vfio status --all-vendors -o wide",
    "rblnctl vfio status --root /host -o json      # from a debug pod with the host at /host",
    "rblnctl vfio status --node npu-node-1         # a cluster node's NPUs, from a pod on it",
))
def status(
    ctx: typer.Context,
    bdfs: BdfArgs = None,
    all_vendors: Annotated[bool, typer.Option("--all-vendors", help="List every PCI function, not only NPUs.")] = False,
    output: OutputOpt = "table",
    root: HostReadRootOpt = Path(C.HOST_ROOT),
    node: Annotated[
        str | None,
        typer.Option("--node", metavar="NODE", help="Show the NPUs of this cluster node instead: runs this command in "
                     "a short-lived read-only pod on it, in -n NAMESPACE [default: the operator's namespace, "
                     f"{C.OPERATOR_NAMESPACE}] (docs/preflight.md, host pods).", show_default=False),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option("--image", metavar="IMAGE", help="With --node: the rblnctl image the pod runs "
                     f"[default: {C.HOST_POD_IMAGE_REPOSITORY}:<this version>].", show_default=False),
    ] = None,
) -> None:
    """Show NPUs' drivers, IOMMU groups and holders (of this host, or with --node of a cluster node)."""
    from rblnctl.cli.console import info, warn
    from rblnctl.cli.output import emit
    from rblnctl.errors import InvalidInput

    if node is None:
        if image is not None:
            raise InvalidInput("--image only applies to --node")
        from rblnctl.host.vfio import vfio_status  # no kubernetes import on this path

        st = vfio_status(root=root, bdfs=bdfs or (), all_vendors=all_vendors)
    else:
        if root != Path(C.HOST_ROOT):
            raise InvalidInput("--root reads a host tree here; with --node the pod reads the node's own")
        from rblnctl.cli.console import waiting
        from rblnctl.hostpods.spec import default_image
        from rblnctl.hostpods.vfio import RemoteVfioStatus

        run = state(ctx)
        with waiting(f"running vfio status in a pod on {node}...") as spin:
            remote = RemoteVfioStatus(kube=run.kube(), node=node, namespace=run.namespace or C.OPERATOR_NAMESPACE,
                                      image=default_image() if image is None else image, on_retry=spin.retrying)
            st = remote.run(bdfs or (), all_vendors=all_vendors)
    for w in st.warnings:
        warn(w)
    if not st.devices:
        if all_vendors:
            info(f"no PCI function under {st.searched}")
        else:
            info(f"no RBLN NPU (vendor {C.PCI_VENDOR_RBLN:04x}, class {C.PCI_CLASS_NPU >> 8:04x}xx) under "
                 f"{st.searched}; --all-vendors lists every PCI function")
        if output.is_table:
            return  # a header with no rows says less than the line above
    emit(_status_view(st), output)


def _model(d: dict) -> str:
    model = f"{d['model']}-{d['function']}" if d["model"] and d["function"] else d["model"] or d["ids"]
    return model.replace(" ", "-")


def _members(d: dict) -> str:
    return joined(f"{m['bdf']}({m['driver'] or 'none'}{',bridge' if m['bridge'] else ''}"
                  f"{',blocks-group' if m['blocksGroup'] else ''})" for m in d["groupMembers"])


def _unknown_or(key: str) -> Callable[[dict], str]:
    """A cell that says `<unknown>`, not `<none>` (which reads as "no override", "no driver"), when the override could
    not be read: an unbind pending or the kernel holding the device (driverOverrideKnown false; then the kernel has
    removed the driver link while the unbind waits, so a missing driver is not known either)."""
    def cell(d: dict) -> str:
        if d[key] is None and d.get("driverOverrideKnown") is False:
            return "<unknown>"
        return d[key] or "<none>"
    return cell


_STATUS_COLUMNS = (
    Column("BDF"), Column("MODEL", value=_model), Column("DRIVER", value=_unknown_or("driver")),
    Column("OVERRIDE", value=_unknown_or("driverOverride")),
    Column("GROUP", value="iommuGroup"), Column("OTHER-MEMBERS", value=_members), Column("NUMA", value="numaNode"),
    Column("VFIO-DEV", value=lambda d: ("yes" if d["vfioDevicePresent"] else "no") if d["iommuGroup"] else "<none>"),
    Column("HOLDERS", value=lambda d: joined(f"{h['pid']}/{h['command']}" for h in d["holders"])))


def _status_view(st: VfioStatus) -> View:
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import VFIO_STATUS

    doc = VFIO_STATUS(st)
    return View(kind="VfioStatus", body=doc, tables=[rows(doc["devices"], *_STATUS_COLUMNS)],
                names=[f"pci/{d['bdf']}" for d in doc["devices"]])
