"""The extended resources the operator's device plugins advertise, per mode and per release.

Container mode: later device plugins advertise `rebellions.ai/npu` (and `rebellions.ai/npu-vf<N>`
for SR-IOV VFs); chart v0.3.0 advertises `<resourcePrefix>/<resourceName>` for each entry of the
policy's `devicePlugin.resourceList` (`rebellions.ai/ATOM`, `rebellions.ai/REBEL`).
VM mode: later sandbox device plugins advertise one resource per product and function,
`rebellions.ai/RBLN-<MODEL>_<PF|VF>`, named from pci.ids; chart v0.3.0 advertises the policy's
`sandboxDevicePlugin.resourceList` names (`ATOM_PT`, `ATOM_MAX_PT`, `REBEL_PT`). The alias-only plugin of
some later-main commits runs in single-alias mode and advertises every NPU as `rebellions.ai/npu_pt`
(RBLN_PT_ALIAS, constants SANDBOX_ALIAS_RESOURCE: RBLN-SW/rbln-npu-operator commit 981a5955
internal/clusterpolicy/components/sandbox_device_plugin_test.go); it is a VM resource under every release
(chart v0.3.0's plugin only ever advertises its resourceList names, so no v0.3.0 node shows it).
Sources: RBLN-SW/rbln-npu-operator@v0.3.0 api/v1beta1/rblnclusterpolicy_types.go
(RBLNDevicePluginResourceSpec), deployments/rbln-npu-operator/values.yaml; RBLN-SW/rbln-k8s-device-plugin
cmd/sriovdp/manager.go (resourcePrefix + "/" + resourceName); RBLN-SW/k8s-device-plugin pkg/consts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import InvalidInput

_SANDBOX = re.compile(r"rebellions\.ai/RBLN-([A-Za-z0-9]+)_(PF|VF)")
# An old sandbox name that carries its model, as the operator README spells one: `rebellions.ai/ATOM_CA25_PT`
# (RBLN-SW/rbln-npu-operator@v0.1.0..v0.3.0 README.md).
_LEGACY_WITH_MODEL = re.compile(r"rebellions\.ai/[A-Za-z0-9]+_((?:CA|CR)[0-9]+)_PT")
_VF = re.compile(re.escape(C.GENERIC_VF_RESOURCE_PREFIX) + r"\d+")


@dataclass(frozen=True, kw_only=True)
class ResourceEntry:
    """One resourceList entry of a chart v0.3.0 policy: the resource and the product cards it covers."""

    name: str  # rebellions.ai/ATOM_PT
    products: tuple[str, ...] = ()  # RBLN-CA12, ...


@dataclass(frozen=True, kw_only=True)
class ResourceNames:
    """The resources one mode's device plugin can advertise: exact names from the policy, or the release's patterns."""

    mode: str
    entries: tuple[ResourceEntry, ...] = ()  # from the policy's resourceList (chart v0.3.0)
    patterns: tuple[str, ...] = field(default=(), compare=False)  # described for people, matched by matches()

    def matches(self, name: str) -> bool:
        """Whether `name` is a resource of this mode.

        The single-alias name is a VM resource even beside a resourceList: the alias-only plugin ignores the
        CRD's resourceList, which later policies may still carry."""
        if self.entries:
            return any(e.name == name for e in self.entries) or (
                self.mode == C.MODE_VM and name == C.SANDBOX_ALIAS_RESOURCE)
        return classify_generic(name) == self.mode

    def products_of(self, name: str) -> tuple[str, ...]:
        """The product cards a resourceList entry covers; () when the names follow the generic scheme."""
        return next((e.products for e in self.entries if e.name == name), ())

    def covers(self, product: str) -> bool | None:
        """Whether some entry advertises `product` (RBLN-CA22); None when the plugin names resources itself."""
        if not self.entries:
            return None
        wanted = _product(product)
        return any(wanted in (_product(p) for p in e.products) for e in self.entries)

    def example(self, products: Iterable[str] = ()) -> str:
        """One resource name of this scheme for a remedy to show, as the installed release names them: the policy's
        resourceList entry covering the first of `products` (the cluster's cards, RBLN-CA12) that one covers, else
        its first entry; without a resourceList (later releases) the per-product `RBLN-<MODEL>_PF` of the first
        product pci.ids knows, else RBLN-CA22_PF."""
        wanted = [_product(p) for p in products if p]
        if self.entries:
            for w in wanted:
                for e in self.entries:
                    if w in (_product(p) for p in e.products):
                        return e.name
            return self.entries[0].name
        if self.mode != C.MODE_VM:
            return C.GENERIC_CONTAINER_RESOURCE
        for w in wanted:
            ids = product_device_ids(w)
            if ids:
                return sandbox_resource(ids[0]) or ""
        return f"{C.SANDBOX_RESOURCE_PREFIX}CA22_PF"

    def describe(self) -> str:
        """The names, or the pattern, for messages."""
        if self.entries:
            return ", ".join(e.name for e in self.entries)
        if self.mode == C.MODE_VM:
            return f"{C.SANDBOX_RESOURCE_PREFIX}<MODEL>_<PF|VF> (or {C.SANDBOX_ALIAS_RESOURCE})"
        return f"{C.GENERIC_CONTAINER_RESOURCE} (or {C.GENERIC_VF_RESOURCE_PREFIX}<N>)"


def classify_generic(name: str) -> str | None:
    """The mode a resource name belongs to by the naming every release uses, without a policy; None: not an NPU.

    `rebellions.ai/npu`, `npu-vf<N>`, `ATOM`, `REBEL` -> container; `RBLN-<MODEL>_<PF|VF>`, the
    single-alias `npu_pt` and anything ending `_PT` -> vm.
    """
    if not name.startswith(C.RESOURCE_PREFIX):
        return None
    if _SANDBOX.fullmatch(name) or name.endswith(C.LEGACY_VM_RESOURCE_SUFFIX) or name == C.SANDBOX_ALIAS_RESOURCE:
        return C.MODE_VM
    if name == C.GENERIC_CONTAINER_RESOURCE or _VF.fullmatch(name) or name in C.LEGACY_CONTAINER_RESOURCES:
        return C.MODE_CONTAINER
    return None


def resource_list(spec: Mapping | None) -> tuple[ResourceEntry, ...]:
    """A component spec's `resourceList` as entries (`<resourcePrefix>/<resourceName>`); () when absent."""
    out = []
    for item in (spec or {}).get("resourceList") or []:
        if not isinstance(item, Mapping) or not item.get("resourceName"):
            continue
        prefix = str(item.get("resourcePrefix") or C.RESOURCE_PREFIX.rstrip("/"))
        products = tuple(str(p) for p in item.get("productCardNames") or [])
        out.append(ResourceEntry(name=f"{prefix}/{item['resourceName']}", products=products))
    return tuple(out)


def _product(text: str) -> str:
    """`RBLN-CA22`, `rbln-ca22`, `CA22` -> `CA22`."""
    t = text.strip().upper()
    return t[5:] if t.startswith("RBLN-") else t


def product_device_ids(product: str) -> list[int]:
    """PCI device IDs of a product card (`RBLN-CA12` -> [0x1120, 0x1121]), PF first; [] when pci.ids has none."""
    wanted = _product(product)
    ids = [dev for dev, (model, _) in sorted(C.PCI_DEVICE_MODELS.items()) if model == wanted]
    return sorted(ids, key=lambda d: C.PCI_DEVICE_MODELS[d][1] != "PF")


def sandbox_resource(device_id: int) -> str | None:
    """The per-product resource the sandbox device plugin advertises for a PCI device ID (`RBLN-CA22_PF`)."""
    found = C.PCI_DEVICE_MODELS.get(device_id)
    return f"{C.SANDBOX_RESOURCE_PREFIX}{found[0]}_{found[1]}" if found else None


def device_id_for(name: str, *, vm_resources: ResourceNames | None = None) -> int:
    """The PCI device ID a VM resource stands for: from its name (`RBLN-CA22_PF` -> 0x1220) or, for a
    resourceList name (`ATOM_PT`), the PF of the first product card its entry lists.

    Raises InvalidInput naming the known products for anything else.
    """
    m = _SANDBOX.fullmatch(name)
    if m:
        wanted = (m.group(1).upper(), m.group(2))
        for dev, model in C.PCI_DEVICE_MODELS.items():
            if model == wanted:
                return dev
        raise InvalidInput(f"unknown NPU model {m.group(1)} in {name}: pci.ids names "
                           f"{', '.join(sorted({mdl for mdl, _ in C.PCI_DEVICE_MODELS.values()}))}; for another "
                           f"product give its PCI ID as {name}=1EFF:<device>")
    products = vm_resources.products_of(name) if vm_resources is not None else ()
    for product in products:
        ids = product_device_ids(product)
        if ids:
            return ids[0]
    from rblnctl.suggest import did_you_mean

    # the names of the scheme this cluster uses, first: the policy's resourceList (chart v0.3.0: ATOM_PT...), not
    # 18 per-product names the policy's plugin never advertises (issue 30)
    own = [e.name for e in vm_resources.entries] if vm_resources is not None else []
    generic = [sandbox_resource(dev) or "" for dev in sorted(C.PCI_DEVICE_MODELS)]
    models = ", ".join(sorted({mdl for mdl, _ in C.PCI_DEVICE_MODELS.values()}))
    scheme = (f"this policy's resourceList names {', '.join(own)}" if own else
              f"{C.SANDBOX_RESOURCE_PREFIX}<MODEL>_<PF|VF> for models {models}")
    raise InvalidInput(f"{name} is not a sandbox device plugin resource rblnctl can map to a PCI ID"
                       f"{did_you_mean(name, own or generic)}: {scheme}; for another product give its PCI ID as "
                       f"{name}=1EFF:<device>")


def vm_product(name: str, names: ResourceNames) -> str | None:
    """The product card a VM resource stands for (`RBLN-CA22`), when the name or the policy says which one.

    `RBLN-CA22_PF`/`_VF` name it; a resourceList entry (`ATOM_PT`) stands for its product when it lists
    exactly one; an old name with the model in it (`ATOM_CA25_PT`) names it. None otherwise: the single alias
    `npu_pt`, an entry listing several cards, a chart-default name a site may have pointed elsewhere.
    """
    m = _SANDBOX.fullmatch(name)
    if m:
        return f"RBLN-{m.group(1).upper()}"
    products = {_product(p) for p in names.products_of(name)}
    if len(products) == 1:
        return f"RBLN-{products.pop()}"
    legacy = legacy_vm_product(name)
    return legacy[0] if legacy and legacy[1] == "name" else None


def advertised(nodes: Iterable[dict], names: ResourceNames) -> dict[str, list[str]]:
    """Resources of `names`' mode that nodes advertise (allocatable > 0) -> the nodes advertising them."""
    out: dict[str, list[str]] = {}
    for n in nodes:
        for key, value in ((n.get("status") or {}).get("allocatable") or {}).items():
            if names.matches(key) and positive(value):
                out.setdefault(key, []).append((n.get("metadata") or {}).get("name", ""))
    return dict(sorted(out.items()))


def positive(quantity: object) -> bool:
    """Whether a Kubernetes quantity (as allocatable shows it) is more than zero."""
    text = str(quantity).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", text)
    return m is not None and float(m.group(1)) > 0


def count(quantity: object) -> int:
    """A device count as allocatable or a request shows it (`2`); 0 for anything that is not a whole number."""
    try:
        return int(str(quantity).strip())
    except ValueError:
        return 0


def qualify(name: str) -> str:
    """`RBLN-CA22_PF` -> `rebellions.ai/RBLN-CA22_PF`: a name without a domain is a Rebellions resource."""
    return name if "/" in name else C.RESOURCE_PREFIX + name


# Kubernetes' own resource names (pkg/apis/core/types.go ResourceName constants; hugepages-<size>): a bare
# name the user types is qualified with rebellions.ai/ (qualify), unless it is one of these, which it
# surely did not mean as a Rebellions resource.
_KUBERNETES_RESOURCES = frozenset({"cpu", "memory", "storage", "ephemeral-storage", "pods", "services",
                                   "replicationcontrollers", "resourcequotas", "secrets", "configmaps",
                                   "persistentvolumeclaims"})


def parse_resource(text: str, *, what: str = "resource") -> str:
    """A resource name the user typed: `RBLN-CA22_PF` or `rebellions.ai/RBLN-CA22_PF` -> the qualified name.

    InvalidInput (before any request) unless it is a valid extended resource name as the API server
    judges one (rblnctl.kube.validate_resource_name) in the Rebellions domain: `rebellions.ai/`, `../x`,
    `-bad-`, `memory`, names over 63 (prefix 253) characters and non-ASCII (full-width digits too) are refused.
    """
    from rblnctl.kube import validate_resource_name

    name = str(text).strip()
    if "/" not in name and (name.lower() in _KUBERNETES_RESOURCES or name.lower().startswith("hugepages-")):
        raise InvalidInput(f"invalid {what} {text!r}: {name} is a Kubernetes resource, not a Rebellions one; name the "
                           f"resource the RBLN device plugins advertise ({C.RESOURCE_PREFIX}...)")
    full = validate_resource_name(qualify(name), what=what)
    if not is_npu_resource(full):
        raise InvalidInput(f"invalid {what} {text!r}: not a Rebellions resource (expected the {C.RESOURCE_PREFIX} "
                           "prefix)")
    return full


def is_npu_resource(name: str) -> bool:
    """Whether a container resource request is for RBLN NPUs: every release's names share the prefix."""
    return name.startswith(C.RESOURCE_PREFIX)


def is_per_product(name: str) -> bool:
    """Whether `name` follows the later sandbox plugins' scheme, one resource per product: RBLN-<MODEL>_<PF|VF>."""
    return bool(_SANDBOX.fullmatch(name))


def legacy_vm_product(name: str) -> tuple[str, str] | None:
    """The product card an old sandbox resource name stood for, judged by the name alone, and how it is known.

    `("RBLN-CA25", "name")` when the model is in the name (`ATOM_CA25_PT`); `("RBLN-CA25", "chart-default")`
    when the name is one of the chart's default resourceList names (ATOM_MAX_PT), which a site may have
    pointed at another product; None otherwise.
    """
    m = _LEGACY_WITH_MODEL.fullmatch(name)
    if m:
        return f"RBLN-{m.group(1).upper()}", "name"
    product = C.LEGACY_SANDBOX_DEFAULTS.get(name)
    return (product, "chart-default") if product else None


def selector_of(device_id: int) -> str:
    """The KubeVirt pciVendorSelector of an RBLN PCI device ID (`1EFF:1250`)."""
    return f"{C.PCI_VENDOR_RBLN:04X}:{device_id:04X}"
