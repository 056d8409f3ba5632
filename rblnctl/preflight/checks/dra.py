"""`dra.driver`, `dra.deviceclass`: the RBLN DRA kubelet plugin runs and offers vfio NPUs, and the policy's VM
DeviceClass exists."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.operator.capacity import dra_devices
from rblnctl.preflight.checks.common import policy_remedy, runnable, unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.operator.dra import dra_driver_version, is_dra_daemonset, public_driver_gap  # shared with set-method
from rblnctl.versions import format_version, strict_version


def _vfio_evidence(f: ClusterFacts) -> tuple[bool | None, str]:
    """(whether the driver's ResourceSlices offer vfio-* devices on vm-passthrough nodes, what was seen).

    None: no evidence either way (slices unreadable, or no node is in vm-passthrough mode to show it).
    The RBLN DRA driver publishes a node's NPUs bound to vfio-pci as `vfio-<pci address>` devices
    (RBLN-SW/rbln-k8s-dra-driver cmd/npu-kubelet-plugin/vfio.go; rblnctl.operator.convergence.dra_devices).
    """
    slices = f.resource_slices
    if slices is None or not slices.ok:
        why = "not served" if slices is not None and slices.absent else "unreadable"
        return None, f"ResourceSlices {why}"
    vm_nodes = {n for n, m in f.effective_modes().items() if m == C.MODE_VM}
    per_node: dict[str, list[str]] = {}
    for s_ in slices.value or []:
        node = str((s_.get("spec") or {}).get("nodeName") or "")
        vfio, _ = dra_devices([s_])
        if node and vfio:
            per_node.setdefault(node, []).extend(vfio)
    offered = sum(len(v) for v in per_node.values())
    if offered:
        return True, f"ResourceSlices offer {offered} vfio device(s) on {len(per_node)} node(s)"
    if not vm_nodes:
        return None, "no node is in vm-passthrough mode, so no ResourceSlice can show vfio devices yet"
    return False, (f"no ResourceSlice offers a {C.DRA_VFIO_DEVICE_PREFIX}* device on the {len(vm_nodes)} "
                   "vm-passthrough node(s)")


def check_dra(f: ClusterFacts, out: Findings) -> None:
    """DRA method only (SKIP for sandbox): the driver DaemonSet's version, readiness and vfio devices, and the
    policy's passthrough DeviceClass.

    The driver version floor (0.2.1, the documentation's) only warns: whether DRA can hand NPUs to VMs is
    decided by the cluster's own evidence, vfio-* devices in the driver's ResourceSlices. A driver below
    the floor FAILs only when it is ready on vm-passthrough nodes and still offers no vfio device.
    """
    dc_name = f.device_class_name
    t_drv, t_dc = "RBLN DRA driver present, version", f"DeviceClass {dc_name}"
    if f.method != C.METHOD_DRA:
        out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.SKIP, "the sandbox method does not use the DRA driver")
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.SKIP, "the sandbox method does not use DRA")
        return
    floor = C.MIN_DRA_DRIVER
    changes = f.policy.method_changes(C.METHOD_DRA) if f.policy else {"draKubeletPlugin": True}
    changes = changes or {"draKubeletPlugin": True}
    fix = policy_remedy(f, changes)
    enable = f"enable it (driver >= {format_version(floor)}): {fix.text}"
    ds_fetch = f.daemonsets
    if ds_fetch is None or not ds_fetch.ok:
        if ds_fetch is not None and not ds_fetch.absent:
            unreadable(out, "dra.driver", t_drv, ds_fetch)
        else:
            out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL, "no DaemonSets API", enable, runnable(fix))
    else:
        base = f.policy.base_name if f.policy else C.OPERATOR_BASE_NAME
        found = [d for d in ds_fetch.value or [] if is_dra_daemonset(d, base)]
        if not found:
            out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL,
                    f"no RBLN DRA kubelet plugin DaemonSet ({base}-{C.COMP_DRA}) found", enable, runnable(fix))
        else:
            ds = found[0]
            meta = ds.get("metadata") or {}
            where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            st = ds.get("status") or {}
            desired, ready = int(st.get("desiredNumberScheduled") or 0), int(st.get("numberReady") or 0)
            unavailable = int(st.get("numberUnavailable") or 0)
            readiness = f"{ready}/{desired} ready"
            serving = desired > 0 and ready >= desired and not unavailable
            ver = dra_driver_version(ds)
            parsed = strict_version(ver[0]) if ver is not None else None  # dra_driver_version finds strict ones only
            vfio, seen = _vfio_evidence(f)
            pods = f"kubectl get pods -n {meta.get('namespace', '')} -o wide"
            if ver is None or parsed is None:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                        f"{where} found ({readiness}), version unknown (no versioned image tag or version label); "
                        f"{seen}",
                        f"check the image of {where}; the DRA method is documented from driver "
                        f">= {format_version(floor)}")
            elif parsed < floor:
                low = f"{where} {ver[0]} < {format_version(floor)}, the documented floor (from {ver[1]})"
                gap = public_driver_gap(parsed)
                low += f": {gap}" if gap else ""
                upgrade = ("upgrade the RBLN DRA driver (the operator's draKubeletPlugin image) to "
                           f"{format_version(floor)} or later")
                if vfio is False and serving:
                    out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL,
                            f"{low}; {readiness}, yet {seen}: this driver does not hand NPUs to VMs", upgrade)
                elif vfio:
                    out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                            f"{low}; {seen}, so passthrough works with it", upgrade)
                else:
                    out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                            f"{low}; {readiness}; {seen}: whether it passes NPUs through is not shown yet",
                            f"{upgrade}, or label an NPU node vm-passthrough and rerun to see its vfio devices")
            elif not serving:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                        f"{where} {ver[0]} >= {format_version(floor)} but {readiness}",
                        f"label NPU nodes vm-passthrough so the plugin is scheduled; check its pods with `{pods}`",
                        pods)
            else:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.PASS,
                        f"{where} {ver[0]} >= {format_version(floor)} ({readiness}, from {ver[1]}); {seen}")
    dc = f.device_class
    named = (f"the name RBLNClusterPolicy {f.policy.name} gives it (vfio- + draKubeletPlugin.driverName)"
             if f.policy else "the default name (no RBLNClusterPolicy to read)")
    if dc is None or dc.absent:
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.FAIL,
                f"DeviceClass {dc_name}, {named}, not found (resource.k8s.io/{C.DRA_VERSION} needs Kubernetes "
                ">= 1.34)", f"the operator creates it while draKubeletPlugin is enabled: {enable}", runnable(fix))
    elif not dc.ok:
        unreadable(out, "dra.deviceclass", t_dc, dc)
    else:
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.PASS, f"DeviceClass {dc_name} exists ({named})")
