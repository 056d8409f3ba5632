"""Which nodes a VM's virt-launcher pod may land on: nodeSelector, required node affinity, taints and tolerations.

The scheduler's rules, restricted to what decides NPU placement (k8s.io/component-helpers
scheduling/corev1/nodeaffinity: terms ORed, expressions ANDed, an empty term matches nothing;
Gt/Lt compare integers; matchFields supports metadata.name. Taints with effect NoSchedule or
NoExecute must be tolerated, as in k8s.io/api core/v1 Toleration.ToleratesTaint; PreferNoSchedule
never blocks). KubeVirt copies the VMI's nodeSelector, affinity and tolerations to the pod
(kubevirt/kubevirt@v1.9.0 pkg/virt-controller/services/template.go), and puts its own labels into the pod's
nodeSelector first: `kubevirt.io/schedulable=true` (which virt-handler keeps on its node) and the KubeVirt CR's
developerConfiguration.nodeSelectors, the VMI's own nodeSelector winning on the same key
(nodeselectorrenderer.go NewNodeSelectorRenderer; rblnctl.constants.KUBEVIRT_SCHEDULABLE_LABEL), with
kubernetes.io/arch between them, and after them the labels of the VMI's CPU: dedicated CPUs, model, required
features (constants.ARCH_LABEL, CPU_*). Other labels KubeVirt adds for some VMs (machine type, Hyper-V with
HypervStrictCheck, TSC, realtime, SEV/TDX) are not weighed (docs/vm.md, Assumptions).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.kubevirt.cr import lookup
from rblnctl.kubevirt.gates import NODE_SELECTORS
from rblnctl.operator.capacity import taint_text, tolerates
from rblnctl.vm import devices as D

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_INT = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a VMI spec lets its pod run."""

    node_selector: dict[str, str]
    terms: tuple[dict, ...]  # required nodeSelectorTerms (ORed); () means any node
    tolerations: tuple[dict, ...]
    # what KubeVirt puts into every virt-launcher's nodeSelector before the VMI's own (launcher_placement)
    kubevirt_selector: dict[str, str] = field(default_factory=lambda: {C.KUBEVIRT_SCHEDULABLE_LABEL: "true"})
    # what it adds after them from the VMI's CPU (dedicated CPUs, model, features: rendered_selector)
    rendered_selector: dict[str, str] = field(default_factory=dict)
    architecture: str | None = None  # the VM's spec.template.spec.architecture, when it names one

    @property
    def launcher_selector(self) -> dict[str, str]:
        """The nodeSelector the virt-launcher pod gets: KubeVirt's labels, the VMI's own overriding them, then the
        labels of its CPU (kubevirt/kubevirt@v1.9.0 nodeselectorrenderer.go Render)."""
        return {**self.kubevirt_selector, **self.node_selector, **self.rendered_selector}

    def describe(self) -> str:
        """One phrase for evidence lines (the VM's own constraints; KubeVirt's labels are said where they
        exclude a node)."""
        parts = []
        if self.node_selector:
            parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items())))
        if self.terms:
            parts.append(f"{len(self.terms)} required node affinity term(s)")
        if self.tolerations:
            parts.append(f"{len(self.tolerations)} toleration(s)")
        return "; ".join(parts) or "no placement constraints"


def placement_of(spec: Mapping) -> Placement:
    """Read a VMI spec's placement."""
    arch = spec.get("architecture")
    return Placement(node_selector=D.node_selector(spec), terms=tuple(D.required_node_terms(spec)),
                     tolerations=tuple(D.tolerations(spec)), rendered_selector=rendered_selector(spec),
                     architecture=str(arch).lower() if arch else None)


def rendered_selector(spec: Mapping) -> dict[str, str]:
    """The labels virt-controller v1.9.0 adds to a launcher's nodeSelector after the VMI's own, from its CPU:
    kubevirt.io/cpumanager for dedicated CPUs, the CPU model (not host-model/host-passthrough) and each required
    feature (nodeselectorrenderer.go Render, CPUFeatureLabelsFromCPUFeatures; template.go newNodeSelectorRenderer)."""
    cpu = ((spec.get("domain") or {}).get("cpu") or {}) if isinstance(spec.get("domain"), Mapping) else {}
    if not isinstance(cpu, Mapping):
        return {}
    out: dict[str, str] = {}
    if cpu.get("dedicatedCpuPlacement") is True:
        out[C.CPU_MANAGER_LABEL] = "true"
    model = str(cpu.get("model") or "")
    if model and model not in C.CPU_MODES_UNLABELLED:
        out[C.CPU_MODEL_LABEL_PREFIX + model] = "true"
    for feature in cpu.get("features") or []:
        if isinstance(feature, Mapping) and feature.get("name") and feature.get("policy") in (None, "", "require"):
            out[C.CPU_FEATURE_LABEL_PREFIX + str(feature["name"])] = "true"
    return out


def launcher_placement(placement: Placement, kubevirt: Mapping | None) -> Placement:
    """The placement with the labels KubeVirt adds to every virt-launcher's nodeSelector: kubevirt.io/schedulable
    =true, then the KubeVirt CR's developerConfiguration.nodeSelectors (`kubevirt`: the CR; None: not installed)."""
    _, configured = lookup(kubevirt or {}, NODE_SELECTORS)
    extra = {str(k): str(v) for k, v in configured.items()} if isinstance(configured, Mapping) else {}
    # kubernetes.io/arch: the VM's architecture, else the CR's default one (what KubeVirt's defaulting writes into
    # a new VM); neither -> not weighed (virt-controller's own GOARCH is not readable: docs/vm.md, Assumptions).
    _, default_arch = lookup(kubevirt or {}, ("spec", "configuration", "architectureConfiguration",
                                              "defaultArchitecture"))
    _, gates = lookup(kubevirt or {}, (*NODE_SELECTORS[:-1], "featureGates"))
    arch = placement.architecture or (str(default_arch).lower() if isinstance(default_arch, str) and default_arch
                                      else None)
    cross = isinstance(gates, list) and "CrossArchitectureVirtualization" in gates
    own = {C.ARCH_LABEL: arch} if arch and not cross else {}
    return dataclasses.replace(placement, kubevirt_selector={C.KUBEVIRT_SCHEDULABLE_LABEL: "true", **own, **extra})


def not_schedulable_for_vms(labels: Mapping, placement: Placement | None = None) -> str | None:
    """Why KubeVirt's own label keeps every VM off a node, as a phrase after "excluded by" (None: it does not):
    a fit row's reason, diagnose's evidence, a warning. `placement`: the VM's (its nodeSelector may set the label
    itself)."""
    key = C.KUBEVIRT_SCHEDULABLE_LABEL
    want = (placement.launcher_selector if placement is not None else {key: "true"}).get(key)
    have = labels.get(key)
    if want is None or have == want:
        return None
    if have is None:
        why = f"the node has no {key} label: virt-handler, which sets it on its node, does not run there"
    else:
        why = (f"the node has {key}={have}: virt-handler writes false until its device plugins are up, "
               "virt-controller when virt-handler stops answering")
    return f"KubeVirt's nodeSelector {key}={want} ({why})"


def why_not(node: Mapping, placement: Placement) -> str | None:
    """Why the pod cannot land on `node` (the first reason), or None when it can."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = str(meta.get("name") or "")
    kubevirt = not_schedulable_for_vms(labels, placement)
    if kubevirt is not None:
        return kubevirt
    for k, v in placement.launcher_selector.items():
        if labels.get(k) != v:
            have = labels.get(k)
            return f"nodeSelector {k}={v} (node has {k}={have})" if have is not None else \
                f"nodeSelector {k}={v} (node has no {k} label)"
    if placement.terms and not any(_term_matches(t, labels, name) for t in placement.terms):
        return "required node affinity"
    taints = list(((node.get("spec") or {}).get("taints")) or [])
    if (node.get("spec") or {}).get("unschedulable") and not any(
            t.get("key") == "node.kubernetes.io/unschedulable" for t in taints):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    for taint in taints:
        if taint.get("effect") in _BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in placement.tolerations):
            return f"untolerated taint {taint_text(taint)}"
    return None


def _term_matches(term: Mapping, labels: Mapping, name: str) -> bool:
    exprs: Sequence[Mapping] = term.get("matchExpressions") or []
    fields: Sequence[Mapping] = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_expr(e, labels) for e in exprs) and all(_expr(f, {"metadata.name": name}) for f in fields)


def _expr(expr: Mapping, labels: Mapping) -> bool:
    key, op = expr.get("key"), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    value = str(labels.get(key)) if present else None
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        # k8s.io/apimachinery pkg/labels/selector.go Requirement.Matches: strconv.ParseInt(v, 10, 64), else no
        # match (a sign is taken; Python's int() would also take `1_6` and spaces)
        if not (_INT.fullmatch(str(value)) and _INT.fullmatch(values[0])):
            return False
        have, want = int(str(value)), int(values[0])
        if not all(-(2 ** 63) <= n < 2 ** 63 for n in (have, want)):  # ParseInt's range error
            return False
        return have > want if op == "Gt" else have < want
    return False
