"""`rblnctl kubevirt permit-devices`: RBLN NPUs in KubeVirt's permittedHostDevices, through the one edit flow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli.kubevirt.common import app, edit, patch_lines, writer_args
from rblnctl.cli.options import KubeVirtNameOpt, Mutating, OutputOpt, examples, grouped
from rblnctl.cli.rerun import spell

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import View
    from rblnctl.kubevirt.devices import DevicePlan, DeviceResult


def _devices_view(plan: DevicePlan, result: DeviceResult | None) -> View:
    from rblnctl.cli.output import Table, View
    from rblnctl.documents import KUBEVIRT_EDIT, body

    doc = body(KUBEVIRT_EDIT, spell, plan=plan, result=result)
    p = doc["plan"]
    t = Table("RESOURCE", "PCI SELECTOR", "EXTERNAL PROVIDER", "CHANGE")
    for e in p["pciHostDevicesAfter"]:
        rn = str(e.get("resourceName") or "")
        change = ("added" if rn in p["added"] else "externalResourceProvider->true" if rn in p["fixed"]
                  else "needs-fix" if rn in p["needsFix"] else "kept")
        t.add_row(rn, str(e.get("pciVendorSelector") or ""), "true" if e.get("externalResourceProvider") else "false",
                  change)
    head = [f"KubeVirt {p['namespace']}/{p['name']} permittedHostDevices.pciHostDevices"
            + ("" if p["pciHostDevicesAfter"] else ": <none>")]
    return View(kind="KubeVirtDeviceChange", body=doc, preamble=head,
                tables=[t] if p["pciHostDevicesAfter"] else [], epilogue=patch_lines(plan, result),
                names=[f"kubevirt.kubevirt.io/{p['name']}"])


@app.command("permit-devices", short_help="Permit RBLN NPUs as KubeVirt host devices.", epilog=examples(
    "rblnctl kubevirt permit-devices                              # what vm-mode nodes advertise",
    "rblnctl kubevirt permit-devices --resource-name RBLN-CA22_PF",
    "rblnctl kubevirt permit-devices --fix --dry-run",
))
@grouped
def permit_devices(
    ctx: typer.Context,
    resource_name: Annotated[
        list[str] | None,
        typer.Option("--resource-name", help="Resource to permit, e.g. rebellions.ai/RBLN-CA22_PF (repeatable); "
                     "NAME=1EFF:DDDD gives the PCI ID of a product rblnctl does not know.", metavar="NAME",
                     show_default=False),
    ] = None,
    from_cluster: Annotated[
        bool, typer.Option("--from-cluster", help="Permit every VM resource NPU nodes advertise (the default when no "
                           "--resource-name is given).")
    ] = False,
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", help="With --from-cluster: only NPU nodes matching this label selector.",
                     metavar="SELECTOR", show_default=False),
    ] = None,
    fix: Annotated[
        bool, typer.Option("--fix", help="Set externalResourceProvider: true on RBLN entries that have it false.")
    ] = False,
    name: KubeVirtNameOpt = None,
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Permit RBLN NPUs as KubeVirt host devices (pciHostDevices), keeping every other entry."""
    from rblnctl.errors import ConfigError
    from rblnctl.kubevirt.devices import DevicePermitter, precheck_resource_name

    mode, yes = mutation.how, mutation.yes
    for n in resource_name or []:
        precheck_resource_name(n)  # bad input fails before connecting
    if selector and not from_cluster and (resource_name or fix):
        raise ConfigError("--selector picks the nodes whose resources are permitted: it needs --from-cluster")
    permitter = DevicePermitter(**writer_args(ctx, name, False, mode), fix=fix)
    plan = permitter.plan(resource_name or [], from_cluster=from_cluster or None, node_selector=selector)
    ref = f"{plan.namespace}/{plan.name}"

    def done(result: DeviceResult) -> str:
        final = result.plan
        changed = [f"added {', '.join(final.added)}"] if final.added else []
        changed += [f"fixed {', '.join(final.fixed)}"] if final.fixed else []
        return f"{'; '.join(changed)} on KubeVirt {ref}"

    edit(permitter.apply, plan, mode=mode, yes=yes, output=output, plan_view=lambda p: _devices_view(p, None),
         result_view=lambda r: _devices_view(r.plan, r), noop=f"already permitted on KubeVirt {ref}", done=done)
