"""What the installed operator release really does for VMs: which VM allocators serve vm-passthrough nodes.

One rule, a function of the operator's version (constants VM_ALLOCATOR_FROM, sources cited there):

- the sandbox device plugin hands NPUs to VMs only from 0.4.4. Chart v0.2.1-v0.3.0 gate its
  DaemonSet on an init container `driver-ready` that waits for `/run/rbln/validations/.driver-ctr-ready`,
  a file only the driver pod writes, and the operator deploys no driver pod on a vm-passthrough node:
  the plugin stays in Init forever (RBLN-SW/rbln-npu-operator@v0.3.0
  internal/scope/patch/sandbox-device-plugin.go, driver_manager.go, cluster_policy.go);
- the DRA kubelet plugin hands NPUs to VMs only from 0.6.0: chart v0.3.0 deploys it on container-mode
  nodes only (v0.3.0 internal/scope/cluster_policy.go rblnComponentLabels) with a driver that has no
  vfio devices.

An unknown version (no operator Deployment found, or none carrying a version) is assumed to serve
VMs with whatever the policy enables; callers say so (`assumption`). `status`, `preflight`,
`node set-mode vm` and `policy set-method` all ask this module.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C
from rblnctl.kube import DEPLOYMENTS, Kube
from rblnctl.kube.optional import OnForbidden, optional
from rblnctl.versions import format_version, strict_version, version_from_images, version_from_labels

log = logging.getLogger(__name__)

# Why an allocator below its floor serves no VM, for messages: (from which release the cause holds, the cause).
# A release older than every cause's first one is below the documentation's minimum only (_BELOW_MINIMUM): chart
# v0.1.0/v0.2.0 have no `driver-ready` init container (it came with v0.2.1: RBLN-SW/rbln-npu-operator@v0.2.0 vs
# v0.2.1 internal/scope/patch/sandbox-device-plugin.go) and no DRA kubelet plugin at all (draKubeletPlugin came
# with v0.3.0: api/v1beta1/rblnclusterpolicy_types.go).
_WHY = {
    C.COMP_SANDBOX: ((0, 2, 1), "its sandbox device plugin never starts on a vm-passthrough node: the plugin's "
                     "`driver-ready` init container waits for /run/rbln/validations/.driver-ctr-ready, which only the "
                     "driver pod writes, and the operator deploys no driver pod on vm-passthrough nodes"),
    C.COMP_DRA: ((0, 3, 0), "its vm-passthrough nodes get no DRA kubelet plugin that serves VMs (chart v0.3.0 "
                 "deploys it on container-mode nodes only; the documentation's minimum for DRA passthrough is 0.6.0)"),
}
_BELOW_MINIMUM = {
    C.COMP_SANDBOX: ("the documentation's minimum for the sandbox method (docs.rbln.ai \"Sandboxed Workloads "
                     "(KubeVirt)\" prerequisites: NPU Operator v0.4.4+)"),
    C.COMP_DRA: ("the documentation's minimum for DRA passthrough, and this release has no DRA kubelet plugin at all "
                 "(draKubeletPlugin came with chart v0.3.0)"),
}
_METHOD_OF = {C.COMP_SANDBOX: C.METHOD_SANDBOX, C.COMP_DRA: C.METHOD_DRA}
# The assumption behind an unknown version, for messages (docs/operator.md "Assumptions").
ASSUMED = "rblnctl assumes the release's {allocator} serves vm-passthrough nodes, which holds from {floor}"


@dataclass(frozen=True, kw_only=True)
class OperatorRelease:
    """The operator release the cluster runs, as far as its Deployment tells."""

    version: tuple[int, int, int] | None  # None: unknown
    text: str | None = None  # as found: v0.3.0
    source: str | None = None  # where it was read (label, image tag)
    where: str = "the RBLN NPU Operator"  # namespace/name of its Deployment, for messages

    def describe(self) -> str:
        """`rbln-system/rbln-npu-operator-controller-manager v0.3.0`, or a phrase saying the version is unknown."""
        return f"{self.where} {self.text}" if self.version is not None else f"{self.where} (version unknown)"

    def serves_vm(self, allocator: str) -> bool | None:
        """Whether `allocator` (sandbox-device-plugin, dra-kubelet-plugin) hands NPUs to VMs on this release;
        None when the version is unknown."""
        if self.version is None:
            return None
        return self.version >= C.VM_ALLOCATOR_FROM[allocator]

    def why(self, allocator: str) -> str | None:
        """Why `allocator` serves no VM on this release; None when it does (or may)."""
        if self.serves_vm(allocator) is not False:
            return None
        since, cause = _WHY[allocator]
        assert self.version is not None
        if self.version < since:
            return f"{self.describe()} < {format_version(C.VM_ALLOCATOR_FROM[allocator])}, {_BELOW_MINIMUM[allocator]}"
        return f"{self.describe()} < {format_version(C.VM_ALLOCATOR_FROM[allocator])}: {cause}"

    def remedy(self, allocator: str) -> str:
        """The way out when `allocator` serves no VM here: the release that fixes it, or the other method
        when this release serves VMs through it."""
        other = C.COMP_DRA if allocator == C.COMP_SANDBOX else C.COMP_SANDBOX
        alt = (f", or use the {_METHOD_OF[other]} method (policy set-method {_METHOD_OF[other]})"
               if self.serves_vm(other) else "")
        return f"upgrade the operator to >= {format_version(C.VM_ALLOCATOR_FROM[allocator])}{alt}"

    def problem(self, allocator: str) -> str | None:
        """why() and remedy() in one line; None when `allocator` serves VMs (or may)."""
        why = self.why(allocator)
        return f"{why}; {self.remedy(allocator)}" if why else None

    def assumption(self, allocator: str) -> str | None:
        """What rblnctl assumes when the version is unknown (None when it is known)."""
        if self.version is not None:
            return None
        floor = format_version(C.VM_ALLOCATOR_FROM[allocator])
        return (f"the RBLN NPU Operator's version is unknown (no Deployment labelled {C.OPERATOR_DEPLOYMENT_SELECTOR} "
                f"with a version): " + ASSUMED.format(allocator=allocator, floor=floor))

    def vm_allocators(self, enabled: Sequence[str]) -> list[str]:
        """Of the enabled VM allocators, the ones this release makes serve VMs (all of them when unknown)."""
        return [c for c in enabled if self.serves_vm(c) is not False]


UNKNOWN = OperatorRelease(version=None)


def release_of(deployments: Sequence[dict]) -> OperatorRelease:
    """The release of the first operator Deployment that carries a version (UNKNOWN when none does)."""
    for dep in deployments:
        found = operator_version(dep)
        v = strict_version(found[0]) if found else None
        if found and v is not None:
            meta = dep.get("metadata") or {}
            return OperatorRelease(version=v, text=found[0], source=found[1],
                                   where=f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return UNKNOWN


def read_release(kube: Kube, deployments: Sequence[dict] | None = None) -> OperatorRelease:
    """The release of the operator Deployments (by chart label, all namespaces): `deployments` when already
    listed (rblnctl.operator.cluster.OperatorView.deployments), else one LIST; UNKNOWN when none or forbidden."""
    return release_of(list(deployments) if deployments is not None else operator_deployments(kube))


def unserved_notes(policy: Any, release: OperatorRelease) -> list[str]:
    """One line per VM allocator the policy enables that this release makes serve no VM (for status and
    `policy show`); [] when every enabled one serves VMs, or the version is unknown."""
    notes = []
    for comp in policy.allocators(C.MODE_VM):
        problem = release.problem(comp)
        if problem:
            notes.append(f"RBLNClusterPolicy {policy.name} enables {C.COMPONENT_POLICY_KEYS[comp]}, but {problem}")
    return notes


def operator_version(dep: dict) -> tuple[str, str] | None:
    """(version, source) of an operator Deployment: labels first, then the image tag; None when none is a version.

    The published charts label the Deployment `app.kubernetes.io/version: vX.Y.Z` and
    `helm.sh/chart: rbln-npu-operator-vX.Y.Z` (later `rbln-npu-operator-chart-X.Y.Z`, see constants);
    the image is `rebellions/rbln-npu-operator:<tag>`
    (RBLN-SW/rbln-npu-operator@v0.3.0 deployments/rbln-npu-operator/templates/_helpers.tpl, release.yaml).
    """
    return (version_from_labels(dep, *C.OPERATOR_HELM_CHARTS)
            or version_from_labels((dep.get("spec") or {}).get("template") or {}, *C.OPERATOR_HELM_CHARTS)
            or version_from_images(dep, prefer="operator"))


def operator_deployments(kube: Kube) -> list[dict]:
    """The operator Deployments found by their chart label across namespaces ([] when none, or when RBAC
    forbids listing Deployments: the caller says the version is unknown)."""
    return optional(lambda: kube.list(DEPLOYMENTS, label_selector=C.OPERATOR_DEPLOYMENT_SELECTOR), absent=[],
                    what="list the operator Deployments", on_forbidden=OnForbidden.UNKNOWN).value or []
