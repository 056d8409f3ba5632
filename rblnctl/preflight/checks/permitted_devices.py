"""`kubevirt.permitted-devices`: KubeVirt permits each RBLN resource the sandbox plugin advertises, as external."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.kubevirt.cr import hco_remedy
from rblnctl.kubevirt.devices import names_checked
from rblnctl.kubevirt.status import status_of
from rblnctl.operator import resources as R
from rblnctl.preflight.checks.common import pick
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.remedy import Command, Remedy


def advertised_vm_resources(f: ClusterFacts) -> dict[str, list[str]]:
    """VM resources NPU nodes advertise (by the active policy's names) -> the nodes advertising them."""
    names = f.policy.vm_resources if f.policy else R.ResourceNames(mode=C.MODE_VM)
    return R.advertised(f.nodes.value, names) if f.nodes.ok else {}


def node_products(f: ClusterFacts) -> list[str]:
    """The NPU products of the NPU nodes read (NPU feature discovery's label), in node order, once each."""
    from rblnctl.operator.nodes import node_product

    return list(dict.fromkeys(p for n in f.npu_nodes if (p := node_product(n))))


def check_permitted_devices(f: ClusterFacts, kv: dict | None, out: Findings) -> None:
    """FAIL for an advertised resource not permitted or an RBLN entry without externalResourceProvider; DRA: SKIP."""
    id_, title = "kubevirt.permitted-devices", "KubeVirt permits the RBLN NPUs"
    if f.method != C.METHOD_SANDBOX:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP,
                "DRA allocates NPUs through ResourceClaims; permittedHostDevices is for the sandbox method")
        return
    if kv is None:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP, "no KubeVirt CR to read (see kubevirt.installed)")
        return
    st = status_of(kv)
    permitted = {d.resource_name: d for d in st.permitted_devices}
    in_use = advertised_vm_resources(f)
    no_erp = [d.resource_name for d in st.permitted_devices if not d.external_resource_provider]
    missing = {r: ns for r, ns in in_use.items() if r not in permitted}
    names = ", ".join(f"{d.resource_name} ({d.pci_vendor_selector})" for d in st.permitted_devices) or "none"
    problems = []
    fixes = []
    # Without any permittedHostDevices KubeVirt checks no name (rblnctl.kubevirt.devices.names_checked): what is
    # missing then runs, and only breaks once someone adds the list, so it warns.
    unchecked = bool(missing) and not no_erp and not names_checked(kv)
    if missing:
        problems.append("advertised but not permitted: " + ", ".join(
            f"{r} ({len(ns)} node{'s' if len(ns) != 1 else ''})" for r, ns in missing.items()) + (
            " (KubeVirt has no permittedHostDevices, so it checks no name now; once the list exists it refuses "
            "every name the list does not hold)" if unchecked else ""))
        fixes.append(Command.own("kubevirt", "permit-devices", from_cluster=True, **pick(f, st)))
    if no_erp:
        problems.append(f"externalResourceProvider is not true for {', '.join(no_erp)}: KubeVirt would start its "
                        "own device plugin beside the RBLN sandbox device plugin")
        fixes.append(Command.own("kubevirt", "permit-devices", fix=True, **pick(f, st)))
    # HCO reverts edits of a KubeVirt CR it manages, and permit-devices refuses one: name the HyperConverged CR.
    hco = hco_remedy(kv, "devices")
    if problems:
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN if unchecked else Status.FAIL,
                f"permitted: {names}; " + "; ".join(problems),
                hco or Remedy("{command}" + "".join(f" and {{more{i}}}" for i in range(len(fixes) - 1)), fixes[0],
                              more=tuple(fixes[1:])))
        return
    nodes_unknown = "NPU nodes could not be read (see nfd.npu-nodes), so what they advertise is unknown"
    if not permitted:
        # Name the resources as the installed release does: the policy's sandboxDevicePlugin.resourceList (chart
        # v0.3.0: ATOM_PT, ATOM_MAX_PT, REBEL_PT) or the per-product scheme of later releases (RBLN-CA22_PF).
        resources = f.policy.vm_resources if f.policy else R.ResourceNames(mode=C.MODE_VM)
        seen = ("" if in_use else f"no node advertises a VM resource ({resources.describe()}) yet" if f.nodes.ok
                else nodes_unknown)
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN,
                f"no RBLN entry in permittedHostDevices.pciHostDevices; {seen}".rstrip("; "),
                Remedy("once the sandbox device plugin runs on a vm-passthrough node: " + hco) if hco else Remedy(
                    # what works now: naming the resource (reading it from the cluster needs a node advertising it)
                    "name the resource now, {command}, or, once the sandbox device plugin runs on a vm-passthrough "
                    "node, let permit-devices read it from the cluster",
                    Command.own("kubevirt", "permit-devices", resource_name=(resources.example(node_products(f)),),
                                **pick(f, st))))
        return
    if not in_use:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"permitted: {names}, externalResourceProvider true "
                f"({'no node advertises one yet' if f.nodes.ok else nodes_unknown})")
        return
    stale = [r for r in permitted if r not in in_use]
    note = f"; permitted but not advertised by any node: {', '.join(stale)}" if stale else ""
    out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
            f"every advertised resource is permitted with externalResourceProvider true: "
            f"{', '.join(in_use)}{note}")
