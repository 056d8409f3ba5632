"""When has the operator converged a node on a mode? Judged as the operator's consumers see it.

The operator swaps a node's deploy labels when its mode label changes, its DaemonSets follow the
labels, and the device plugins (or the DRA driver) then advertise the NPUs in the new form. A node
has converged on `target` when:
- its effective mode is `target`;
- the deploy labels the mode needs are `true`: vm: vfio-manager (when enabled) and one enabled VM
  allocator (sandbox-device-plugin or dra-kubelet-plugin); container: one enabled container
  allocator (device-plugin or dra-kubelet-plugin). A component the node opts out of
  (`...deploy.<component>=false`) is not required. A label paused by the driver manager
  (`paused-for-driver-upgrade`) means the operator is mid-work;
- no deploy label only the old mode uses is still set;
- no component pod of the old mode (or of a component whose label is gone) is on the node,
  terminating ones included; every component pod of the new mode there is Running and Ready and
  not terminating; a required vfio-manager has a pod;
- the allocators' output is there: the extended resource of the new mode (allocatable > 0) and
  none of the old mode's; with DRA, ResourceSlices of the policy's driver for the node offer vfio
  devices (vm) or only non-vfio devices (container) - the DRA plugin serves both modes, so its
  pod being Ready proves nothing.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from rblnctl import constants as C
from rblnctl.operator import components as K
from rblnctl.operator import resources as R
from rblnctl.operator.capacity import dra_devices
from rblnctl.operator.nodes import labels_of, mode_of
from rblnctl.operator.policy import Policy


class Missing(enum.StrEnum):
    """What kind of thing the operator has not done yet."""

    MODE = "mode"  # the node's effective mode is not the target
    DEPLOY = "deploy"  # a deploy label the target needs is not true
    PAUSED = "paused"  # the driver manager paused deploy labels: the operator is mid-work
    STALE = "stale"  # a deploy label of the old mode is still set
    POD = "pod"  # a component pod is missing, not ready, terminating, or of the old mode
    RESOURCE = "resource"  # the extended resources do not show the target mode yet
    SLICE = "slice"  # DRA ResourceSlices do not show the target mode yet


@dataclass(frozen=True, kw_only=True)
class Pending:
    """One thing still missing before the node has converged."""

    kind: Missing
    text: str
    hold: K.InitHold | None = None  # a component pod held in an init container (its log line can be added)

    def __str__(self) -> str:
        return self.text


def with_logs(items: Sequence[Pending], log_of: Callable[[K.InitHold], str | None],
              now: datetime | None = None) -> list[Pending]:
    """`items` with each held pod's last log line added (`log_of` reads it; None: unreadable, left out) and, with
    `now`, how long it has been held."""
    out = []
    for p in items:
        if p.hold is not None:
            hold = p.hold if p.hold.log is not None else dataclasses.replace(p.hold, log=log_of(p.hold))
            p = dataclasses.replace(p, hold=hold, text=hold.describe(now))
        out.append(p)
    return out


def required_components(policy: Policy, target: str, labels: Mapping) -> tuple[list[str], list[str]]:
    """(components that must each be deployed, allocators of which one must be) for `target` on this node."""
    deploy = K.deploy_labels(dict(labels))
    must = []
    if target == C.MODE_VM and policy.is_enabled(C.COMP_VFIO_MANAGER) and not deploy.opted_out(C.COMP_VFIO_MANAGER):
        must.append(C.COMP_VFIO_MANAGER)
    allocators = [c for c in policy.allocators(target) if not deploy.opted_out(c)]
    return must, allocators


def pending(node: Mapping, target: str, policy: Policy, pods: Sequence[tuple[str, dict]],
            slices: Sequence[Mapping] | None = None, *, now: datetime | None = None) -> list[Pending]:
    """What the operator has not done yet to converge `node` on `target` ([] when it has).

    `pods` are the node's operator component pods as (component, pod); `slices` the node's
    ResourceSlices of the policy's DRA driver, or None when they were not read (no DRA allocator).
    """
    name = (node.get("metadata") or {}).get("name", "")
    labels = labels_of(node)
    out: list[Pending] = []
    mode = mode_of(labels, policy)
    if mode.effective != target:
        out.append(Pending(kind=Missing.MODE, text=f"node {name} is in {mode.effective} mode, not {target}"))
    deploy = K.deploy_labels(labels)
    paused = deploy.paused()
    if paused:
        out.append(Pending(kind=Missing.PAUSED, text=(
            f"the operator's driver manager is at work on {name} (deploy labels {', '.join(paused)} are "
            f"{C.DEPLOY_PAUSED})")))
    must, allocators = required_components(policy, target, labels)
    for comp in must:
        if not deploy.is_set(comp) and comp not in paused:
            out.append(Pending(kind=Missing.DEPLOY, text=f"deploy label {K.deploy_label(comp)} not set yet"))
    if allocators and not any(deploy.is_set(c) for c in allocators) and not set(allocators) & set(paused):
        out.append(Pending(kind=Missing.DEPLOY, text=(
            f"deploy label {' or '.join(K.deploy_label(c) for c in allocators)} not set yet")))
    old = K.exclusive_components(C.MODE_CONTAINER if target == C.MODE_VM else C.MODE_VM)
    for comp in sorted({K.canonical(c) for c in old if deploy.is_set(c)}):
        out.append(Pending(kind=Missing.STALE, text=f"deploy label {K.deploy_label(comp)} of the old mode still set"))
    # Each deployed allocator needs its own Ready pod too: allocatable alone cannot say the new plugin runs (a name
    # both modes advertise, Policy.shared_resources, or one the kubelet has not zeroed yet since the last switch
    # stays positive while the new plugin's DaemonSet has no pod on the node: once seen as a switch to a v0.3.0
    # node's stuck sandbox plugin judged converged before its pod existed).
    out.extend(_pods(name, target, deploy, [*must, *(a for a in allocators if deploy.is_set(a))], pods, now, labels))
    out.extend(_allocation(node, target, policy, deploy, allocators, slices))
    return out


def method_pending(node: Mapping, method: str, policy: Policy, pods: Sequence[tuple[str, dict]],
                   slices: Sequence[Mapping]) -> list[Pending]:
    """What the operator has not done yet to serve a vm-passthrough `node` by `method` (sandbox or dra) ([] when done).

    `policy` is the one that selects `method`. Everything pending() requires of the vm mode under it
    (the new allocator's label, Ready pod and output), and the other method gone from the node: no pod
    of its plugin, terminating ones included, and none of its output - the sandbox plugin's extended
    resources (allocatable > 0; the kubelet zeroes them when the plugin goes) or the DRA plugin's vfio
    devices in the node's ResourceSlices of the policy's driver (`slices`).
    """
    name = (node.get("metadata") or {}).get("name", "")
    out = pending(node, C.MODE_VM, policy, pods, slices)
    old = C.COMP_DRA if method == C.METHOD_SANDBOX else C.COMP_SANDBOX
    for comp, p in sorted(pods, key=lambda cp: cp[1]["metadata"]["name"]):
        if comp == old:
            ref = f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
            out.append(Pending(kind=Missing.POD, text=f"{old} pod {ref} of the old method still on {name}"))
    if method == C.METHOD_DRA:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        for k in sorted(k for k, v in alloc.items() if policy.vm_resources.matches(k) and R.positive(v)):
            out.append(Pending(kind=Missing.RESOURCE, text=f"allocatable still offers the sandbox plugin's {k}"))
    else:
        vfio, _ = dra_devices(slices)
        if vfio:
            out.append(Pending(kind=Missing.SLICE, text=(
                f"ResourceSlices of {policy.dra_driver} still offer vfio devices ({', '.join(vfio[:3])})")))
    return out


def _pods(node: str, target: str, deploy: K.DeployLabels, must: list[str],
          pods: Sequence[tuple[str, dict]], now: datetime | None, labels: Mapping | None = None) -> list[Pending]:
    out = []
    old = set(K.exclusive_components(C.MODE_CONTAINER if target == C.MODE_VM else C.MODE_VM))
    seen = set()
    paused = set(deploy.paused())
    for comp, p in sorted(pods, key=lambda cp: (cp[0], cp[1]["metadata"]["name"])):
        seen.add(comp)
        ref = f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
        if comp in paused and comp not in old:
            continue  # its label is paused: the driver manager decides when it runs (reported as PAUSED)
        if comp in old or not deploy.is_set(comp):
            out.append(Pending(kind=Missing.POD, text=f"old-mode pod {ref} ({comp}) still on the node"))
        elif p["metadata"].get("deletionTimestamp"):
            out.append(Pending(kind=Missing.POD, text=f"pod {ref} ({comp}) is terminating"))
        elif not _ready(p):
            hold = K.init_hold(comp, p, vm_node=target == C.MODE_VM, node_labels=labels)
            out.append(Pending(kind=Missing.POD, hold=hold, text=hold.describe(now) if hold else
                               f"pod {ref} ({comp}) not Running and Ready yet"))
    for comp in must:
        if deploy.is_set(comp) and comp not in seen:
            out.append(Pending(kind=Missing.POD, text=f"no {comp} pod on {node} yet"))
    return out


def _allocation(node: Mapping, target: str, policy: Policy, deploy: K.DeployLabels, allocators: list[str],
                slices: Sequence[Mapping] | None) -> list[Pending]:
    out = []
    alloc = (node.get("status") or {}).get("allocatable") or {}
    plugin = C.COMP_SANDBOX if target == C.MODE_VM else C.COMP_DEVICE_PLUGIN
    new_names = policy.vm_resources if target == C.MODE_VM else policy.container_resources
    old_names = policy.container_resources if target == C.MODE_VM else policy.vm_resources
    if plugin in allocators and deploy.is_set(plugin):
        if not any(new_names.matches(k) and R.positive(v) for k, v in alloc.items()):
            out.append(Pending(kind=Missing.RESOURCE, text=f"allocatable has no {new_names.describe()} yet"))
    # A name both modes' plugins advertise (Policy.shared_resources) is not the old mode's: it stays on the node.
    for k in sorted(k for k, v in alloc.items() if old_names.matches(k) and not new_names.matches(k)
                    and R.positive(v)):
        out.append(Pending(kind=Missing.RESOURCE, text=f"allocatable still offers the old mode's {k}"))
    if C.COMP_DRA in allocators and deploy.is_set(C.COMP_DRA) and slices is not None:
        vfio, other = dra_devices(slices)
        if target == C.MODE_VM:
            if not vfio:
                out.append(Pending(kind=Missing.SLICE, text=(
                    f"no ResourceSlice of {policy.dra_driver} offers {C.DRA_VFIO_DEVICE_PREFIX}* devices yet")))
            if other:
                out.append(Pending(kind=Missing.SLICE, text=(
                    f"ResourceSlices of {policy.dra_driver} still offer container devices ({', '.join(other[:3])})")))
        else:
            if not other:
                out.append(Pending(kind=Missing.SLICE, text=(
                    f"no ResourceSlice of {policy.dra_driver} offers container devices yet")))
            if vfio:
                out.append(Pending(kind=Missing.SLICE, text=(
                    f"ResourceSlices of {policy.dra_driver} still offer vfio devices ({', '.join(vfio[:3])})")))
    return out


def _ready(pod: Mapping) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
