"""`rblnctl kubevirt status`: the KubeVirt CR's phase, version, gates (effective or not) and permitted NPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from rblnctl.cli.kubevirt.common import app
from rblnctl.cli.options import KubeVirtNameOpt, OutputOpt, examples
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.kubevirt.status import KubeVirtStatus


def _spelt_notes(ctx: typer.Context, st: KubeVirtStatus) -> KubeVirtStatus:
    """The status with each note that names a command (a Remedy) spelt for this user (rblnctl.cli.rerun)."""
    import dataclasses

    from rblnctl.cli.rerun import remedy_text
    from rblnctl.remedy import Remedy

    return dataclasses.replace(st, notes=[remedy_text(ctx, n) if isinstance(n, Remedy) else n for n in st.notes])


def _status_view(st: KubeVirtStatus) -> View:
    from rblnctl.cli.output import Cell, Table, View, joined
    from rblnctl.documents import KUBEVIRT_STATUS

    doc = KUBEVIRT_STATUS(st)
    head = [f"KubeVirt:              {doc['namespace']}/{doc['name']}",
            f"Phase:                 {doc['phase'] or '<unknown>'}" + (" (being deleted)" if doc["deleting"] else ""),
            f"Version:               {doc['version'] or '<unknown>'}",
            f"featureGates:          {joined(doc['featureGates'])}"]
    if doc["disabledFeatureGates"]:
        head.append(f"disabledFeatureGates:  {joined(doc['disabledFeatureGates'])}")
    gates = Table("GATE", "EFFECTIVE", "WHY")
    for g in doc["gates"]:
        on = Cell("on", "green") if g["effective"] else Cell("unknown", "yellow") if g["effective"] is None \
            else Cell("off", "red")
        gates.add_row(g["name"], on, g["reason"])
    tables = [gates]
    if doc["permittedDevices"]:
        devices = Table("PERMITTED RBLN DEVICE", "PCI SELECTOR", "MODEL", "EXTERNAL PROVIDER")
        for d in doc["permittedDevices"]:
            devices.add_row(d["resourceName"], d["pciVendorSelector"], (d["model"] or "<unknown>").replace(" ", "-"),
                            Cell("true") if d["externalResourceProvider"] else Cell("false", "red"))
        tables.append(devices)
    notes = []  # no RBLN device permitted: the library's note says so, with the command that permits them
    if doc["otherPermittedDevices"]:
        n = doc["otherPermittedDevices"]
        notes.append(f"note: {n} permittedHostDevices {'entry' if n == 1 else 'entries'} for other devices not shown")
    notes += [f"note: {n}" for n in doc["notes"]]
    return View(kind="KubeVirtStatus", body=doc, preamble=head, tables=tables, epilogue=notes,
                names=[f"kubevirt.kubevirt.io/{doc['name']}"])


@app.command("status", short_help="Show KubeVirt's gates and permitted NPUs.", epilog=examples(
    "rblnctl kubevirt status",
    "rblnctl kubevirt status -o jsonpath='{.gates[?(@.effective==false)].name}'",
))
def status(
    ctx: typer.Context,
    name: KubeVirtNameOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Show the KubeVirt CR's phase, version, gates (effective or not) and permitted RBLN devices."""
    from rblnctl.cli.output import emit
    from rblnctl.kubevirt.status import kubevirt_status

    run = state(ctx)
    st = kubevirt_status(run.kube(), name=name, namespace=run.namespace)
    emit(_status_view(_spelt_notes(ctx, st)), output)
