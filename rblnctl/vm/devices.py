"""The VirtualMachine spec as rblnctl reads and writes it: the one module that knows its shape.

Paths (kubevirt/kubevirt@v1.9.0, staging/src/kubevirt.io/api/core/v1):
- `spec.template.spec` of a VM is a VMI spec (types.go VirtualMachineSpec.Template); a VMI has it at `spec`.
- `domain.devices.hostDevices[]`: `{name, deviceName}` for a device plugin's resource (sandbox), or
  `{name, claimName, requestName}` for DRA (schema.go HostDevice, ClaimRequest inlined; a DRA entry
  has no deviceName: pkg/dra/utils.go IsHostDeviceDRA).
- `resourceClaims[]`: `{name, resourceClaimTemplateName | resourceClaimName}` (types.go
  VirtualMachineInstanceResourceClaim); every claimName must name one (pkg/dra/admitter).
- placement: `nodeSelector`, `affinity.nodeAffinity`, `tolerations` (copied to the virt-launcher pod).

The ResourceClaimTemplate rblnctl writes for N NPUs (resource.k8s.io/v1, as in
RBLN-SW/rbln-k8s-dra-driver examples/kubevirt-vm-passthrough.md) has N requests of one device each:
KubeVirt resolves each (claimName, requestName) pair to exactly one device and fails a request with
more ("count > 1 is not supported", v1.9.0 pkg/dra/utils.go resolveDevice), and its admission
rejects two host devices on the same pair (pkg/dra/admitter/dra_admitter.go).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rblnctl import constants as C
from rblnctl.operator import resources as R
from rblnctl.vm.model import NpuDevice, VmNpus

VM_SPEC = ("spec", "template", "spec")
VMI_SPEC = ("spec",)
HOST_DEVICES = ("domain", "devices", "hostDevices")
RESOURCE_CLAIMS = ("resourceClaims",)
TEMPLATE_API_VERSION = f"{C.DRA_GROUP}/{C.DRA_VERSION}"

# Is this resourceClaims entry a claim for NPUs? (rblnctl's own always is; others need the claim's class.)
ClaimTest = Callable[[Mapping], bool]


def _get(obj: Any, path: Iterable[str]) -> Any:
    cur = obj
    for seg in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(seg)
    return cur


def vm_spec(vm: Mapping) -> dict:
    """A VirtualMachine's template spec (a VMI spec); {} when absent."""
    spec = _get(vm, VM_SPEC)
    return spec if isinstance(spec, dict) else {}


def vmi_spec(vmi: Mapping) -> dict:
    """A VirtualMachineInstance's spec; {} when absent."""
    spec = _get(vmi, VMI_SPEC)
    return spec if isinstance(spec, dict) else {}


def _objects(value: Any) -> list[dict]:
    """The objects of a list field (copies): [] when absent or not a list; entries that are not objects dropped."""
    return [copy.deepcopy(x) for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def host_devices(spec: Mapping) -> list[dict]:
    """`domain.devices.hostDevices` of a VMI spec (copies; entries that are not objects are dropped)."""
    return _objects(_get(spec, HOST_DEVICES))


def resource_claims(spec: Mapping) -> list[dict]:
    """`resourceClaims` of a VMI spec (copies; entries that are not objects are dropped)."""
    return _objects(_get(spec, RESOURCE_CLAIMS))


def malformed(spec: Mapping) -> list[str]:
    """The NPU-related fields of a VMI spec that are there but not lists of objects (what cannot be read)."""
    out = []
    for path, what in ((HOST_DEVICES, "domain.devices.hostDevices"), (RESOURCE_CLAIMS, "resourceClaims")):
        value = _get(spec, path)
        if value is not None and (not isinstance(value, list) or not all(isinstance(x, dict) for x in value)):
            out.append(f"{what} is not a list of objects")
    if not isinstance(spec, Mapping):
        out.append("the spec is not an object")
    return out


# rblnctl's pod-level claim name: one per VM (see claim_name).
_CLAIM_HASH = 10  # hex digits of sha256(namespace/name): rbln-npu- + 10 = 19 characters, well inside a DNS label
_MANAGED_CLAIM = re.compile(re.escape(C.VM_DRA_CLAIM) + r"(-[0-9a-f]{%d})?" % _CLAIM_HASH)


def claim_name(namespace: str, name: str) -> str:
    """rblnctl's pod-level claim name for the VM namespace/name: `rbln-npu-<10 hex digits>`, stable and unique.

    KubeVirt copies a VM's resourceClaims[].name into its virt-launcher pod as the pod-level claim name
    (kubevirt/kubevirt@v1.9.0 pkg/dra/resource_claims.go ToPodResourceClaims), and virt-launcher finds a
    device's PCI address under {base}/resourceclaimtemplates/<pod claim name>/<request>/*-metadata.json
    (pkg/dra/utils.go resolveClaimMetadata). The RBLN DRA driver publishes that file keyed by the
    pod-level claim name alone, a name "NOT unique on the node", and fails Prepare of a second claim of the
    same name on a node ("another claim with the same name is prepared on this node";
    RBLN-SW/rbln-k8s-dra-driver@37a656f cmd/npu-kubelet-plugin/kubevirt_metadata.go claimMetadataOwnership;
    driver versions before the owner marker overwrite each other's file instead). So every VM gets its
    own name: a DNS label (the pod's claim names must be) derived from the namespace and the name, the
    same on every run. docs/vm.md "Claim names".
    """
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:_CLAIM_HASH]
    return f"{C.VM_DRA_CLAIM}-{digest}"


def is_managed_claim_name(name: object) -> bool:
    """A resourceClaims entry name rblnctl writes: rbln-npu-<hash>, or the old fixed rbln-npu it renames."""
    return isinstance(name, str) and bool(_MANAGED_CLAIM.fullmatch(name))


def is_managed_claim(entry: Mapping) -> bool:
    """rblnctl's own resourceClaims entry (rbln-npu-<hash>; older runs wrote rbln-npu)."""
    return is_managed_claim_name(entry.get("name"))


def npus_of(spec: Mapping, *, npu_claim: ClaimTest = is_managed_claim) -> VmNpus:
    """Split a VMI spec's host devices into NPUs by method, and the rest.

    Sandbox: `deviceName` is a Rebellions resource (every release's names share the prefix). DRA: the
    entry names a claim that is rblnctl's, or one `npu_claim` says requests NPUs.
    """
    claims = {str(c.get("name")): c for c in resource_claims(spec)}
    sandbox: list[NpuDevice] = []
    dra: list[NpuDevice] = []
    other: list[str] = []
    for d in host_devices(spec):
        name = str(d.get("name") or "")
        device_name = d.get("deviceName")
        claim = d.get("claimName")
        if device_name:
            if R.is_npu_resource(str(device_name)):
                sandbox.append(NpuDevice(name=name, method=C.METHOD_SANDBOX, resource=str(device_name)))
            else:
                other.append(name)
        elif claim:
            entry = claims.get(str(claim))
            managed = is_managed_claim_name(claim)
            if managed or (entry is not None and npu_claim(entry)):
                dra.append(NpuDevice(name=name, method=C.METHOD_DRA, claim=str(claim),
                                     request=str(d.get("requestName") or ""), managed=managed))
            else:
                other.append(name)
        else:
            other.append(name)
    used = [d.claim for d in dra if d.managed]
    managed_entries = [c for n, c in claims.items() if is_managed_claim_name(n)]
    entry = next((claims[n] for n in used if n in claims), managed_entries[0] if managed_entries else None)
    return VmNpus(sandbox=tuple(sandbox), dra=tuple(dra), managed_claim=entry, other_devices=tuple(other))


# -- building entries ---------------------------------------------------------------------------------


def free_names(used: Iterable[str], count: int) -> list[str]:
    """`count` names npu0, npu1, ... that no host device uses yet."""
    taken = set(used)
    out: list[str] = []
    i = 0
    while len(out) < count:
        name = f"{C.VM_DEVICE_PREFIX}{i}"
        if name not in taken:
            out.append(name)
        i += 1
    return out


def sandbox_device(name: str, resource: str) -> dict:
    """A hostDevices entry for one NPU of a device plugin's resource."""
    return {"name": name, "deviceName": resource}


def request_name(index: int) -> str:
    """The request of the index-th NPU in rblnctl's ResourceClaimTemplate (npu0, npu1, ...)."""
    return f"{C.VM_DRA_REQUEST_PREFIX}{index}"


def dra_device(name: str, index: int, base: Mapping | None = None, *, claim: str) -> dict:
    """A hostDevices entry for the index-th NPU of rblnctl's claim `claim` (other keys of `base`, e.g. tag, kept)."""
    out = {k: copy.deepcopy(v) for k, v in (base or {}).items() if k not in ("deviceName", "claimName", "requestName")}
    out.update(name=name, claimName=claim, requestName=request_name(index))
    return out


def template_name(npus: int) -> str:
    """The ResourceClaimTemplate rblnctl uses for `npus` NPUs (rbln-npu-2)."""
    return f"{C.VM_DRA_TEMPLATE_PREFIX}{npus}"


def claim_entry(template: str, *, claim: str) -> dict:
    """rblnctl's resourceClaims entry `claim` (claim_name()), naming a ResourceClaimTemplate."""
    return {"name": claim, "resourceClaimTemplateName": template}


def claim_template(npus: int, device_class: str, *, namespace: str | None = None) -> dict:
    """The ResourceClaimTemplate for `npus` NPUs of `device_class`: requests npu0.. of one device each."""
    meta: dict[str, Any] = {"name": template_name(npus)}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {C.MANAGED_BY_LABEL: C.MANAGED_BY}
    requests = [{"name": request_name(i), "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                                                       "count": 1}}
                for i in range(npus)]
    return {"apiVersion": TEMPLATE_API_VERSION, "kind": "ResourceClaimTemplate", "metadata": meta,
            "spec": {"spec": {"devices": {"requests": requests}}}}


def _claim_request_specs(obj: Mapping) -> list[tuple[str, Mapping]]:
    """(request name, what it asks) of a ResourceClaimTemplate (spec.spec) or a ResourceClaim (spec): its
    `exactly`, or for `firstAvailable` (a list of alternatives) the first alternative."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "ResourceClaimTemplate" or "spec" in spec:
        spec = spec.get("spec") or {}
    out = []
    for r in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(r, Mapping):
            continue
        exact = r.get("exactly") if isinstance(r.get("exactly"), Mapping) else None
        if exact is None:  # firstAvailable: a list of alternatives; the first names the class
            alternatives = [a for a in r.get("firstAvailable") or [] if isinstance(a, Mapping)]
            exact = alternatives[0] if alternatives else {}
        out.append((str(r.get("name") or ""), exact))
    return out


def claim_requests(obj: Mapping) -> list[tuple[str, str, int]]:
    """(request name, device class, device count) of a ResourceClaimTemplate (spec.spec) or a ResourceClaim (spec).

    A request with `allocationMode: All` counts as 0 (as many as there are); a missing count is 1
    (resource.k8s.io/v1 ExactDeviceRequest defaults).
    """
    return [(name, str(exact.get("deviceClassName") or ""),
             0 if exact.get("allocationMode") == "All" else int(exact.get("count") or 1))
            for name, exact in _claim_request_specs(obj)]


def request_tolerations(obj: Mapping, request: str) -> tuple[dict, ...]:
    """The device tolerations of one request of a ResourceClaimTemplate or ResourceClaim (resource.k8s.io/v1
    ExactDeviceRequest / DeviceSubRequest `tolerations`; the first alternative's for `firstAvailable`): what lets
    the scheduler allocate it a device with a NoSchedule or NoExecute taint."""
    for name, exact in _claim_request_specs(obj):
        if name == request:
            return tuple(copy.deepcopy(t) for t in exact.get("tolerations") or [] if isinstance(t, dict))
    return ()


def template_fits(obj: Mapping, npus: int, device_class: str) -> bool:
    """Whether an existing ResourceClaimTemplate asks for exactly what rblnctl's would: npus requests npu0..,
    one device of `device_class` each (selectors or config added by hand make it someone else's)."""
    spec = ((obj.get("spec") or {}).get("spec") or {}).get("devices") or {}
    if spec.get("constraints") or spec.get("config"):
        return False
    for r in spec.get("requests") or []:
        exact = r.get("exactly") if isinstance(r, Mapping) else None
        if not isinstance(exact, Mapping) or exact.get("selectors") or exact.get("adminAccess"):
            return False
    return claim_requests(obj) == [(request_name(i), device_class, 1) for i in range(npus)]


def is_managed(obj: Mapping) -> bool:
    """An object rblnctl created (labelled app.kubernetes.io/managed-by=rblnctl)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(C.MANAGED_BY_LABEL) == C.MANAGED_BY


def templates_used(spec: Mapping) -> set[str]:
    """The ResourceClaimTemplates a VMI spec's claims name."""
    return {str(c["resourceClaimTemplateName"]) for c in resource_claims(spec) if c.get("resourceClaimTemplateName")}


GPUS = ("domain", "devices", "gpus")


def guarded_patch(vm: Mapping, host_devices_after: list[dict], claims_after: list[dict]) -> list[dict]:
    """The JSON Patch (RFC 6902) that gives a VM these hostDevices and resourceClaims, guarded by `test` ops on
    exactly what the change was decided on: the two lists as read, and the gpus whose claims they may share.

    Each is tested by its value, or, absent, by `null` (kube-apiserver's JSON Patch passes a `test` of null on a
    member its object lacks: gopkg.in/evanphx/json-patch.v4 patch.go `test`, vendored by k8s.io/apiserver), so
    the patch fails (422) only when someone changed one of those, and never because of virt-controller's writes of
    the VM right after a stop (its status, the runStrategy virt-api sets): a resourceVersion guard lost that race
    every time on a real cluster. A list that does not change is not written; an empty one is removed.
    """
    from rblnctl.kubevirt.cr import identity_test, lookup, pointer, value_tests

    base = ("spec", "template", "spec")
    lists = [((*base, *HOST_DEVICES), host_devices(vm_spec(vm)), host_devices_after),
             ((*base, *RESOURCE_CLAIMS), resource_claims(vm_spec(vm)), claims_after)]
    # the VM read (not one re-created under its name since), and the lists as read
    tests: list[dict] = identity_test(vm) + value_tests(vm, [p for p, _, _ in lists] + [(*base, *GPUS)])
    ops: list[dict] = []
    made: set[tuple[str, ...]] = set()
    for path, before, after in lists:
        if after == before:
            continue
        present, _ = lookup(vm, path)
        if not after:
            if present:
                ops.append({"op": "remove", "path": pointer(path)})
            continue
        for i in range(len(base) + 1, len(path)):
            parent = path[:i]
            if parent not in made and not lookup(vm, parent)[0]:
                ops.append({"op": "add", "path": pointer(parent), "value": {}})
                made.add(parent)
        ops.append({"op": "add", "path": pointer(path), "value": after})
    return tests + ops


# -- placement ------------------------------------------------------------------------------------------


def node_selector(spec: Mapping) -> dict[str, str]:
    """`nodeSelector` of a VMI spec."""
    return {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}


def required_node_terms(spec: Mapping) -> list[dict]:
    """`affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms` (ORed)."""
    required = _get(spec, ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"))
    return [t for t in (required or {}).get("nodeSelectorTerms") or [] if isinstance(t, dict)] \
        if isinstance(required, Mapping) else []


def tolerations(spec: Mapping) -> list[dict]:
    """`tolerations` of a VMI spec."""
    return [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
