"""`dra.driver`, `dra.deviceclass`: the RBLN DRA kubelet plugin runs at >= 0.2.1 and its VM DeviceClass exists."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.preflight.checks.common import helm_set, unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.operator.dra import dra_driver_version, is_dra_daemonset  # shared with policy set-method
from rblnctl.versions import format_version, strict_version


def check_dra(f: ClusterFacts, out: Findings) -> None:
    """DRA method only (SKIP for sandbox): the driver DaemonSet's version and readiness, and the DeviceClass."""
    t_drv, t_dc = "RBLN DRA driver present, version", f"DeviceClass {C.DRA_DEVICECLASS_VM}"
    if f.method != C.METHOD_DRA:
        out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.SKIP, "the sandbox method does not use the DRA driver")
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.SKIP, "the sandbox method does not use DRA")
        return
    floor = C.MIN_DRA_DRIVER
    enable = (f"enable it: helm upgrade rbln-npu-operator ... --set draKubeletPlugin.enabled=true "
              f"(driver >= {format_version(floor)})")
    enable_cmd = helm_set(f, "draKubeletPlugin.enabled=true")
    ds_fetch = f.daemonsets
    if ds_fetch is None or not ds_fetch.ok:
        if ds_fetch is not None and not ds_fetch.absent:
            unreadable(out, "dra.driver", t_drv, ds_fetch)
        else:
            out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL, "no DaemonSets API", enable, enable_cmd)
    else:
        base = f.policy.base_name if f.policy else C.OPERATOR_BASE_NAME
        found = [d for d in ds_fetch.value or [] if is_dra_daemonset(d, base)]
        if not found:
            out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL,
                    f"no RBLN DRA kubelet plugin DaemonSet ({C.OPERATOR_BASE_NAME}-{C.COMP_DRA}) found",
                    enable, enable_cmd)
        else:
            ds = found[0]
            meta = ds.get("metadata") or {}
            where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            st = ds.get("status") or {}
            desired, ready = int(st.get("desiredNumberScheduled") or 0), int(st.get("numberReady") or 0)
            unavailable = int(st.get("numberUnavailable") or 0)
            readiness = f"{ready}/{desired} ready"
            ver = dra_driver_version(ds)
            if ver is None:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                        f"{where} found ({readiness}), version unknown (no versioned image tag or version label)",
                        f"check the image of {where}; the DRA method needs driver >= {format_version(floor)}")
            elif strict_version(ver[0]) < floor:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL,
                        f"{where} {ver[0]} < {format_version(floor)} (from {ver[1]})",
                        f"upgrade the RBLN DRA driver to {format_version(floor)} or later (upgrade the operator)")
            elif desired == 0 or ready < desired or unavailable:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                        f"{where} {ver[0]} >= {format_version(floor)} but {readiness}",
                        "label NPU nodes vm-passthrough so the plugin is scheduled; check its pods with "
                        f"`kubectl get pods -n {meta.get('namespace', '')} -o wide`",
                        f"kubectl get pods -n {meta.get('namespace', '')} -o wide")
            else:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.PASS,
                        f"{where} {ver[0]} >= {format_version(floor)} ({readiness}, from {ver[1]})")
    dc = f.device_class
    if dc is None or dc.absent:
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.FAIL,
                f"DeviceClass {C.DRA_DEVICECLASS_VM} not found (resource.k8s.io/{C.DRA_VERSION} needs Kubernetes "
                ">= 1.34)", f"the RBLN DRA driver creates it: {enable}", enable_cmd)
    elif not dc.ok:
        unreadable(out, "dra.deviceclass", t_dc, dc)
    else:
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.PASS, f"DeviceClass {C.DRA_DEVICECLASS_VM} exists")
