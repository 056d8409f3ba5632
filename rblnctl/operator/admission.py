"""The RBLNClusterPolicy admission rules (the CRD's CEL rules) as the installed release enforces them.

The operator's releases do not agree (RBLN-SW/rbln-npu-operator, read at the commits named):

- none: tag v0.3.0, in both `config/crd/bases/` and the chart's `deployments/rbln-npu-operator/crds/`;
- CHART (vfio-for-vm, sandbox-for-vm): the chart's crds/ in later main (op@0bd46b31);
- BASES (sandbox-xor-dra, device-plugin-xor-dra, vfio-for-vm, allocator-for-vm): `config/crd/bases/` and
  `api/v1beta1/rblnclusterpolicy_types.go` at op@02a4d9a7.

A cluster enforces the rules of the CRD it has installed, so rblnctl reads them from the CRD itself
(`customresourcedefinitions/rblnclusterpolicies.rebellions.ai`, the served version's spec-level
`x-kubernetes-validations`) and judges each rule it recognises by its CEL text. When the CRD cannot be
read (RBAC), it chooses by the operator's release, an assumption it names (docs/operator.md
"Admission rules"): below 0.4.4 none (v0.3.0 has none); from 0.4.4 below 0.6.0 CHART (the chart's
crds/, which asks for the sandbox plugin on vm-passthrough: those releases hand VMs NPUs only through
it); from 0.6.0, and when the version is unknown too, BASES (the only set that admits DRA passthrough,
which 0.6.0 brought). A rule of the installed CRD that rblnctl does not know is reported, not judged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rblnctl import constants as C
from rblnctl.versions import format_version

if TYPE_CHECKING:
    from rblnctl.operator.release import OperatorRelease

# rblnctl.operator.policy.Policy (typed loosely: policy.py imports this module, never the reverse)
Policy = Any


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One CEL rule of the policy CRD, and the same judgement in Python (True: the policy breaks it)."""

    id: str
    cel: str  # as the CRD writes it (whitespace aside)
    message: str  # the CRD's message: what kube-apiserver answers when the rule fails
    short: str  # rblnctl's one phrase for it
    broken: Callable[[Policy], bool]


def _vm(p: Policy) -> bool:
    return p.workload_type_raw == C.MODE_VM


def _on(p: Policy, comp: str) -> bool:
    return p.is_enabled(comp)


RULES: dict[str, Rule] = {r.id: r for r in (
    Rule(id="vfio-for-vm", cel="self.workloadType != 'vm-passthrough' || self.vfioManager.enabled",
         message="vfioManager.enabled must be true when workloadType is vm-passthrough",
         short="vfioManager is disabled (workloadType is vm-passthrough)",
         broken=lambda p: _vm(p) and not _on(p, C.COMP_VFIO_MANAGER)),
    Rule(id="allocator-for-vm",
         cel="self.workloadType != 'vm-passthrough' || self.sandboxDevicePlugin.enabled || "
             "(has(self.draKubeletPlugin) && self.draKubeletPlugin.enabled)",
         message="either sandboxDevicePlugin.enabled or draKubeletPlugin.enabled must be true when workloadType is "
                 "vm-passthrough",
         short="vm-passthrough is in use but neither sandboxDevicePlugin nor draKubeletPlugin is enabled",
         broken=lambda p: _vm(p) and not _on(p, C.COMP_SANDBOX) and not _on(p, C.COMP_DRA)),
    Rule(id="sandbox-for-vm", cel="self.workloadType != 'vm-passthrough' || self.sandboxDevicePlugin.enabled",
         message="sandboxDevicePlugin.enabled must be true when workloadType is vm-passthrough",
         short="sandboxDevicePlugin is disabled (workloadType is vm-passthrough, and this CRD admits no other VM "
               "allocator)",
         broken=lambda p: _vm(p) and not _on(p, C.COMP_SANDBOX)),
    Rule(id="sandbox-xor-dra",
         cel="!(has(self.draKubeletPlugin) && self.draKubeletPlugin.enabled && self.sandboxDevicePlugin.enabled)",
         message="sandboxDevicePlugin.enabled and draKubeletPlugin.enabled are mutually exclusive: both advertise "
                 "the same vfio-pci NPUs on vm-passthrough nodes",
         short="sandboxDevicePlugin and draKubeletPlugin are both enabled (mutually exclusive)",
         broken=lambda p: _on(p, C.COMP_SANDBOX) and _on(p, C.COMP_DRA)),
    Rule(id="device-plugin-xor-dra",
         cel="!(has(self.draKubeletPlugin) && self.draKubeletPlugin.enabled && self.devicePlugin.enabled)",
         message="devicePlugin.enabled and draKubeletPlugin.enabled are mutually exclusive: both advertise the same "
                 "NPUs as rebellions.ai/npu on container nodes",
         short="devicePlugin and draKubeletPlugin are both enabled (mutually exclusive)",
         broken=lambda p: _on(p, C.COMP_DEVICE_PLUGIN) and _on(p, C.COMP_DRA)),
)}
NONE: tuple[str, ...] = ()
CHART = ("vfio-for-vm", "sandbox-for-vm")
BASES = ("sandbox-xor-dra", "device-plugin-xor-dra", "vfio-for-vm", "allocator-for-vm")
CHART_FROM = (0, 4, 4)  # the first release rblnctl assumes carries CHART (sandbox passthrough works from here)
BASES_FROM = C.VM_ALLOCATOR_FROM[C.COMP_DRA]  # 0.6.0: DRA passthrough, which CHART would refuse


def _normal(cel: str) -> str:
    return re.sub(r"\s+", " ", str(cel)).strip()


_BY_CEL = {_normal(r.cel): r for r in RULES.values()}


@dataclass(frozen=True, kw_only=True)
class AdmissionRules:
    """The rules a cluster's API server applies to an RBLNClusterPolicy, and how rblnctl knows them."""

    rules: tuple[Rule, ...]
    source: str  # "the installed CRD", or the assumption made (for messages and `policy set-method` output)
    assumed: bool = False  # chosen by release (the CRD could not be read), not read
    unknown: tuple[str, ...] = field(default=())  # CEL rules of the installed CRD rblnctl cannot judge

    @property
    def ids(self) -> list[str]:
        """The ids of the rules judged."""
        return [r.id for r in self.rules]

    def broken(self, policy: Policy) -> list[Rule]:
        """The rules `policy` breaks, in order."""
        return [r for r in self.rules if r.broken(policy)]

    def problems(self, policy: Policy) -> list[str]:
        """The rules `policy` breaks, one phrase each."""
        return [r.short for r in self.broken(policy)]


def _pick(ids: Sequence[str], source: str, *, assumed: bool, unknown: Sequence[str] = ()) -> AdmissionRules:
    return AdmissionRules(rules=tuple(RULES[i] for i in ids), source=source, assumed=assumed, unknown=tuple(unknown))


DEFAULT = _pick(BASES, "the later releases' CRD (config/crd/bases)", assumed=True)


def from_crd(crd: Mapping) -> AdmissionRules:
    """The rules of an installed RBLNClusterPolicy CRD (its storage version's spec-level x-kubernetes-validations)."""
    versions = [v for v in (crd.get("spec") or {}).get("versions") or [] if isinstance(v, Mapping)]
    version = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
    spec = (((version.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}).get("spec") or {}
    ids: list[str] = []
    unknown: list[str] = []
    for v in spec.get("x-kubernetes-validations") or []:
        rule = _BY_CEL.get(_normal((v or {}).get("rule") or ""))
        if rule is None:
            unknown.append(_normal((v or {}).get("rule") or ""))
        elif rule.id not in ids:
            ids.append(rule.id)
    name = str((crd.get("metadata") or {}).get("name") or f"{C.CLUSTER_POLICY_PLURAL}.{C.CLUSTER_POLICY_GROUP}")
    return _pick(ids, f"the installed CRD {name} ({len(ids) + len(unknown)} rule(s))", assumed=False,
                 unknown=unknown)


def for_release(release: OperatorRelease | None) -> AdmissionRules:
    """The rules rblnctl assumes a release enforces when its CRD cannot be read (see the module docstring)."""
    version = release.version if release is not None else None
    if release is None or version is None:
        return _pick(BASES, "assumed: the operator's version and its CRD are unknown, so the later releases' rules "
                            "(config/crd/bases)", assumed=True)
    if version < CHART_FROM:
        return _pick(NONE, f"assumed for {release.describe()}: chart v0.3.0 and earlier have no admission rules",
                     assumed=True)
    if version < BASES_FROM:
        return _pick(CHART, f"assumed for {release.describe()} < {format_version(BASES_FROM)}: the chart's crds/ "
                            "rules", assumed=True)
    return _pick(BASES, f"assumed for {release.describe()} >= {format_version(BASES_FROM)}: the CRD's "
                        "config/crd/bases rules", assumed=True)


def installed(crd: Mapping | None, release: OperatorRelease | None) -> AdmissionRules:
    """The installed CRD's rules when it was read, else the release's assumed ones."""
    return from_crd(crd) if crd is not None else for_release(release)
