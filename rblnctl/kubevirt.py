"""Read the KubeVirt CR; build and apply conflict-safe featureGates / permittedHostDevices JSON Patches.

Both lists this module edits are atomic (a merge patch replaces them whole), so a read-modify-write
can silently drop an entry another admin or an operator added in between. Every write here is a
JSON Patch whose first ops `test` the exact old value of each list the plan was computed from (or
`metadata.resourceVersion` when a list does not exist yet, since JSON Patch cannot test for
absence). When a test fails the API server rejects the whole patch (422), so nothing is lost: the
editor re-reads the CR, re-plans from the fresh object and tries again, a bounded number of times.
Model: virtctl `adm log-verbosity` (kubevirt/kubevirt pkg/virtctl/adm/logverbosity).
"""

from __future__ import annotations

import copy
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rblnctl import constants as C
from rblnctl.errors import ClusterError, ConfigError, Conflict, InvalidInput, NotFound, Refused
from rblnctl.kube import KUBEVIRTS, PATCH_TYPES, Kube
from rblnctl.versions import format_version, parse_version

log = logging.getLogger(__name__)

# Where the KubeVirt CR keeps what this module edits (JSON Pointer segments from the object root).
JsonPath = tuple[str, ...]
DEV_CONFIG = ("spec", "configuration", "developerConfiguration")
FEATURE_GATES = (*DEV_CONFIG, "featureGates")
DISABLED_GATES = (*DEV_CONFIG, "disabledFeatureGates")
PCI_HOST_DEVICES = ("spec", "configuration", "permittedHostDevices", "pciHostDevices")
RESOURCE_VERSION = ("metadata", "resourceVersion")

PATCH_CONTENT_TYPE = PATCH_TYPES["json"]
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RETRY_BACKOFF_S = 0.2  # doubled after each conflict: 0.2, 0.4, 0.8, 1.6 s

# Sandbox device plugin resources: rebellions.ai/RBLN-<MODEL>_<PF|VF>.
RBLN_RESOURCE_PREFIX = C.RESOURCE_PREFIX + "RBLN-"
_RBLN_RESOURCE = re.compile(r"rebellions\.ai/RBLN-([A-Za-z0-9]+)_(PF|VF)")
_SELECTOR = re.compile(r"([0-9A-Fa-f]{4}):([0-9A-Fa-f]{4})")
_GATE = re.compile(C.GATE_NAME_PATTERN)
# A failed JSON Patch `test` op: the API server answers 422 with the generic "rejected our request"
# message and puts evanphx/json-patch's "testing value /x failed: test failed" in details.causes;
# k8s.io/apiserver pkg/endpoints/handlers/patch.go (applyJSPatch -> NewGenericServerResponse).
# The generic message alone also counts: every op after our `test` ops targets a path the tests
# (or the resourceVersion test) pinned, so a patch that no longer applies means the CR changed.
# Webhook and schema rejections carry their own 422 messages and are not retried.
_TEST_FAILED = re.compile(
    r"test(ing value .* failed| failed| operation)|unable to test|"
    r"the server rejected our request due to an error in our request",
    re.IGNORECASE,
)


def _noop(*_: Any) -> None:
    pass


# -- finding the CR ----------------------------------------------------------------------------


def _ref(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def find_kubevirt(kube: Kube, *, name: str | None = None, namespace: str | None = None) -> dict:
    """Return the one KubeVirt CR that name/namespace select; with neither, the only one in the cluster.

    Raises NotFound when none matches (or the KubeVirt CRD is absent) and InvalidInput when several
    match; that message lists them so the user can pick one with --name/--namespace.
    """
    if name and namespace:
        obj = kube.get_optional(KUBEVIRTS, name, namespace=namespace)
        if obj is None:
            raise NotFound(f'KubeVirt "{name}" not found in namespace "{namespace}"')
        return obj
    try:
        items = kube.list(KUBEVIRTS, namespace=namespace)
    except NotFound as e:  # the kubevirts.kubevirt.io CRD is not installed
        raise NotFound("no KubeVirt installation found (the kubevirts.kubevirt.io CRD is not installed)") from e
    if name:
        items = [i for i in items if (i.get("metadata") or {}).get("name") == name]
    if not items:
        where = f'in namespace "{namespace}"' if namespace else "in any namespace"
        what = f'named "{name}" ' if name else ""
        raise NotFound(f"no KubeVirt installation found (no KubeVirt CR {what}{where})")
    if len(items) > 1:
        found = ", ".join(sorted(_ref(i) for i in items))
        raise InvalidInput(f"found {len(items)} KubeVirt CRs ({found}); pick one with --name and --namespace")
    return items[0]


# -- JSON Patch building -------------------------------------------------------------------------


def _lookup(obj: Any, path: Sequence[str]) -> tuple[bool, Any]:
    """(present, value) of the member at path; present is False when any segment is missing."""
    cur = obj
    for seg in path:
        if not isinstance(cur, dict) or seg not in cur:
            return False, None
        cur = cur[seg]
    return True, cur


def _pointer(path: Sequence[str]) -> str:
    """RFC 6901 JSON Pointer for path segments."""
    return "".join("/" + seg.replace("~", "~0").replace("/", "~1") for seg in path)


def _guarded_patch(obj: dict, writes: Sequence[tuple[JsonPath, Any]], depends: Sequence[JsonPath]) -> list[dict]:
    """Build a JSON Patch that sets each write path, guarded by `test` ops on every path the plan read.

    A path that exists is tested by value (so unrelated edits to the CR never conflict); a missing
    one cannot be tested in JSON Patch, so metadata.resourceVersion is tested instead. Missing
    parents are created with `add {}` ops, outermost first (an `add` needs its parent).
    """
    tests: list[dict] = []
    need_rv = False
    seen: set[JsonPath] = set()
    for path in [*depends, *(p for p, _ in writes)]:
        if path in seen:
            continue
        seen.add(path)
        present, value = _lookup(obj, path)
        if present:
            tests.append({"op": "test", "path": _pointer(path), "value": value})
        else:
            need_rv = True
    if need_rv:
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if not rv:
            raise ClusterError(f"KubeVirt {_ref(obj)} has no metadata.resourceVersion; cannot write it safely")
        tests.insert(0, {"op": "test", "path": _pointer(RESOURCE_VERSION), "value": rv})
    ops: list[dict] = []
    created: set[JsonPath] = set()
    for path, value in writes:
        present, _ = _lookup(obj, path)
        if present:
            ops.append({"op": "replace", "path": _pointer(path), "value": value})
            continue
        for i in range(1, len(path)):
            parent = tuple(path[:i])
            if parent in created:
                continue
            p_present, p_value = _lookup(obj, parent)
            if not p_present:
                ops.append({"op": "add", "path": _pointer(parent), "value": {}})
                created.add(parent)
            elif p_value is None:  # `configuration: null`: an object must be there before adding into it
                ops.append({"op": "replace", "path": _pointer(parent), "value": {}})
                created.add(parent)
            elif not isinstance(p_value, dict):
                raise Refused(
                    f"KubeVirt {_ref(obj)}: {'.'.join(parent)} is a {type(p_value).__name__}, not an object; "
                    "fix the CR by hand"
                )
        ops.append({"op": "add", "path": _pointer(path), "value": value})
    return tests + ops


def _version_of(obj: dict) -> str | None:
    return (obj.get("status") or {}).get("observedKubeVirtVersion") or None


def _deletion_blockers(obj: dict) -> list[str]:
    ts = (obj.get("metadata") or {}).get("deletionTimestamp")
    if ts:
        return [f"KubeVirt {_ref(obj)} is being deleted (deletionTimestamp {ts}); refusing to edit it"]
    return []


def _floor_problem(what: str, floor: tuple[int, int, int], obj: dict) -> str | None:
    """A sentence when the CR's version is below floor or unknown; None when it is at least floor."""
    version = _version_of(obj)
    parsed = parse_version(version)
    if parsed is not None and parsed >= floor:
        return None
    found = (
        f"reports {version}"
        if parsed is not None
        else "does not report its version (status.observedKubeVirtVersion is empty; is virt-operator running?)"
    )
    return f"{what} needs KubeVirt >= {format_version(floor)}; KubeVirt {_ref(obj)} {found}"


# -- feature gates -------------------------------------------------------------------------------


def validate_gates(gates: Sequence[str]) -> list[str]:
    """Return gates without duplicates (first wins); raise InvalidInput for a malformed name.

    A gate name is letters and digits only. Unknown but well-formed names pass: see gate_warnings().
    """
    out: list[str] = []
    for g in gates:
        if not isinstance(g, str) or not _GATE.fullmatch(g):
            raise InvalidInput(
                f"malformed feature gate name {g!r}: a KubeVirt gate is letters and digits only, "
                f"e.g. {C.GATE_HOST_DEVICES}"
            )
        if g not in out:
            out.append(g)
    return out


def gate_warnings(gates: Sequence[str]) -> list[str]:
    """Return one warning per gate rblnctl does not know (KubeVirt adds gates; unknown is not refused)."""
    by_lower = {k.lower(): k for k in C.KUBEVIRT_KNOWN_GATES}
    out = []
    for g in gates:
        if g in C.KUBEVIRT_KNOWN_GATES:
            continue
        hint = by_lower.get(g.lower())
        out.append(
            f"unknown feature gate {g}: " + (f"did you mean {hint}? (gate names are case-sensitive)" if hint
                                             else "not a gate rblnctl knows; adding it anyway")
        )
    return out


def rbln_gates(*, dra: bool = False) -> list[str]:
    """The gates RBLN NPU passthrough needs: HostDevices, plus HostDevicesWithDRA for DRA."""
    return [C.GATE_HOST_DEVICES, C.GATE_HOST_DEVICES_DRA] if dra else [C.GATE_HOST_DEVICES]


@dataclass(frozen=True, kw_only=True)
class GatePlan:
    """What enable/disable would change in one KubeVirt CR's gate lists, and the exact patch to send.

    `noop` means both lists already say what was asked: nothing is sent. A plan with `blockers` is
    refused by apply().
    """

    name: str
    namespace: str
    version: str | None  # status.observedKubeVirtVersion
    enable: list[str]  # gates asked to be in featureGates
    disable: list[str]  # gates asked to leave featureGates
    add_to_disabled: bool  # also list `disable` in disabledFeatureGates
    feature_gates_before: list[str]
    feature_gates_after: list[str]
    disabled_gates_before: list[str]
    disabled_gates_after: list[str]
    added: list[str]  # appended to featureGates
    removed: list[str]  # dropped from featureGates
    undisabled: list[str]  # dropped from disabledFeatureGates (asked to enable)
    newly_disabled: list[str]  # appended to disabledFeatureGates
    patch: list[dict]  # JSON Patch (application/json-patch+json); [] when noop
    noop: bool
    warnings: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)


def plan_gates(
    obj: dict,
    *,
    enable: Sequence[str] = (),
    disable: Sequence[str] = (),
    add_to_disabled: bool = False,
    force: bool = False,
) -> GatePlan:
    """Plan a gate change against one KubeVirt CR object (pure: no I/O).

    Enabled gates are appended to featureGates in the order given, keeping every gate already there
    and its order; a gate being enabled is also dropped from disabledFeatureGates (the KubeVirt
    webhook rejects a gate in both lists). Disabled gates are dropped from featureGates and, with
    add_to_disabled, appended to disabledFeatureGates. A gate with a KubeVirt version floor
    (GATE_MIN_KUBEVIRT), or disabledFeatureGates itself (KubeVirt >= 1.9.0), on an older or unknown
    version is a blocker, or only a warning with force.
    """
    enable = validate_gates(enable)
    disable = validate_gates(disable)
    both = [g for g in enable if g in disable]
    if both:
        raise InvalidInput(f"cannot enable and disable {', '.join(both)} at once")
    meta = obj.get("metadata") or {}
    _, fg_raw = _lookup(obj, FEATURE_GATES)
    _, dis_raw = _lookup(obj, DISABLED_GATES)
    fg_before = [str(g) for g in fg_raw or []]
    dis_before = [str(g) for g in dis_raw or []]
    warnings = gate_warnings([*enable, *disable])
    blockers = _deletion_blockers(obj)

    added = [g for g in enable if g not in fg_before]
    removed = [g for g in disable if g in fg_before]
    fg_after = [g for g in fg_before if g not in disable] + added
    undisabled = [g for g in enable if g in dis_before]
    newly_disabled = [g for g in disable if g not in dis_before] if add_to_disabled else []
    dis_after = [g for g in dis_before if g not in enable] + newly_disabled

    # A floor guards a write: a gate already in featureGates (and not disabled) is only noted, so a
    # re-run stays an idempotent no-op whatever the version.
    floors = [(g, C.GATE_MIN_KUBEVIRT[g], g in added or g in undisabled)
              for g in enable if g in C.GATE_MIN_KUBEVIRT]
    if add_to_disabled and disable:
        floors.append(("disabledFeatureGates", C.DISABLED_GATES_SINCE, bool(newly_disabled)))
    for what, floor, writes_it in floors:
        problem = _floor_problem(what, floor, obj)
        if problem and not writes_it:
            warnings.append(problem + " (already set; nothing to change)")
        elif problem and force:
            warnings.append(problem + "; going ahead because of --force")
        elif problem:
            blockers.append(problem + "; pass --force to do it anyway")
    for g in undisabled:
        warnings.append(
            f"{g} is listed in disabledFeatureGates; removing it from there in the same patch "
            "(KubeVirt rejects a gate in both lists)"
        )
    version = _version_of(obj)
    parsed = parse_version(version)
    if not add_to_disabled:
        for g in disable:
            beta = C.GATE_BETA_SINCE.get(g)
            if beta and parsed is not None and parsed >= beta and g not in dis_before:
                warnings.append(
                    f"{g} stays on: it is Beta (on unless disabled) in KubeVirt {version}; "
                    "pass --add-to-disabled to list it in disabledFeatureGates"
                )

    writes: list[tuple[JsonPath, Any]] = []
    if fg_after != fg_before:
        writes.append((FEATURE_GATES, fg_after))
    if dis_after != dis_before:
        writes.append((DISABLED_GATES, dis_after))
    # The plan read featureGates, and disabledFeatureGates whenever its content decided something.
    depends = [FEATURE_GATES] + ([DISABLED_GATES] if enable or add_to_disabled else [])
    patch = _guarded_patch(obj, writes, depends) if writes and not blockers else []
    return GatePlan(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        version=version,
        enable=enable,
        disable=disable,
        add_to_disabled=add_to_disabled,
        feature_gates_before=fg_before,
        feature_gates_after=fg_after,
        disabled_gates_before=dis_before,
        disabled_gates_after=dis_after,
        added=added,
        removed=removed,
        undisabled=undisabled,
        newly_disabled=newly_disabled,
        patch=patch,
        noop=not writes,
        warnings=warnings,
        blockers=blockers,
    )


@dataclass(frozen=True, kw_only=True)
class GateResult:
    """The outcome of a gate change: the plan last computed and whether a write went through."""

    plan: GatePlan  # after conflicts, the re-plan that was finally sent (or found to be a no-op)
    changed: bool  # the API server accepted a patch (with dry_run "server": validated, not persisted)
    attempts: int  # patches sent; 0 when nothing needed changing
    dry_run: str | None = None  # None, "client" (nothing sent) or "server" (dryRun=All)


P = TypeVar("P", GatePlan, "DevicePlan")


def is_conflict(err: ClusterError) -> bool:
    """True for a lost optimistic-concurrency race: 409, or 422 from a failed JSON Patch `test` op."""
    if isinstance(err, Conflict) or err.status == 409:
        return True
    return err.status == 422 and bool(_TEST_FAILED.search(str(err)))


@dataclass(kw_only=True)
class _Writer:
    """Shared write loop: patch, and on a conflict re-read, re-plan and retry (bounded)."""

    kube: Kube
    name: str | None = None
    namespace: str | None = None
    force: bool = False
    server_dry_run: bool = False  # send dryRun=All: admission validates, nothing persists
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S  # first wait; doubles per conflict
    on_retry: Callable[[int, str], None] = _noop  # (attempt that conflicted, server message)
    sleep: Callable[[float], None] | None = None  # None: time.sleep

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("max_attempts must be at least 1")

    def _write(self, plan: P, replan: Callable[[dict], P]) -> tuple[P, bool, int]:
        attempts = 0
        while True:
            if plan.blockers:
                raise Refused(f"refusing to edit KubeVirt {plan.namespace}/{plan.name}", blockers=plan.blockers)
            if plan.noop:
                return plan, False, attempts
            attempts += 1
            try:
                self.kube.patch(
                    KUBEVIRTS,
                    plan.name,
                    plan.patch,
                    patch_type="json",
                    namespace=plan.namespace,
                    dry_run=self.server_dry_run,
                )
                return plan, True, attempts
            except ClusterError as e:
                if not is_conflict(e):
                    raise
                log.debug("conflict writing KubeVirt %s/%s (attempt %d): %s", plan.namespace, plan.name, attempts, e)
                if attempts >= self.max_attempts:
                    raise Conflict(
                        f"KubeVirt {plan.namespace}/{plan.name} kept changing while we wrote it: gave up after "
                        f"{attempts} attempts, nothing was changed; rerun once the other writer is done "
                        f"(last answer: {' '.join(str(e).split())})",
                        status=409,
                        reason="Conflict",
                    ) from e
                self.on_retry(attempts, str(e))
                (self.sleep or time.sleep)(self.retry_backoff_s * 2 ** (attempts - 1))
                fresh = self.kube.get(KUBEVIRTS, plan.name, namespace=plan.namespace)
                plan = replan(fresh)


@dataclass(kw_only=True)
class GateEditor(_Writer):
    """Enable or disable KubeVirt feature gates without losing anyone else's gates.

    plan_enable()/plan_disable() only read; apply() writes the plan's JSON Patch and, when the
    CR changed in between (a `test` op failed), re-reads, re-plans and retries up to max_attempts.
    """

    def plan_enable(self, gates: Sequence[str]) -> GatePlan:
        """Read the CR and plan adding gates to featureGates (and dropping them from disabledFeatureGates)."""
        gates = validate_gates(gates)  # bad input fails before any request
        obj = find_kubevirt(self.kube, name=self.name, namespace=self.namespace)
        return plan_gates(obj, enable=gates, force=self.force)

    def plan_disable(self, gates: Sequence[str], *, add_to_disabled: bool = False) -> GatePlan:
        """Read the CR and plan dropping gates from featureGates (and listing them in disabledFeatureGates)."""
        gates = validate_gates(gates)
        if not gates:
            raise InvalidInput("name at least one feature gate to disable")
        obj = find_kubevirt(self.kube, name=self.name, namespace=self.namespace)
        return plan_gates(obj, disable=gates, add_to_disabled=add_to_disabled, force=self.force)

    def apply(self, plan: GatePlan) -> GateResult:
        """Send the plan's patch; idempotent: a no-op plan sends nothing.

        Raises Refused for a plan with blockers, Conflict when the CR kept changing for
        max_attempts tries, and the API's own errors (Forbidden, ClusterError) unchanged.
        """

        def replan(obj: dict) -> GatePlan:
            return plan_gates(
                obj, enable=plan.enable, disable=plan.disable, add_to_disabled=plan.add_to_disabled, force=self.force
            )

        final, changed, attempts = self._write(plan, replan)
        return GateResult(
            plan=final, changed=changed, attempts=attempts, dry_run="server" if self.server_dry_run else None
        )


# -- permitted host devices ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PciHostDevice:
    """One permittedHostDevices.pciHostDevices entry rblnctl wants."""

    resource_name: str  # rebellions.ai/RBLN-CA22_PF
    pci_vendor_selector: str  # 1EFF:1220
    external_resource_provider: bool = True  # the RBLN sandbox device plugin advertises it, not KubeVirt

    def entry(self) -> dict:
        """The entry as KubeVirt spells it."""
        return {
            "pciVendorSelector": self.pci_vendor_selector,
            "resourceName": self.resource_name,
            "externalResourceProvider": self.external_resource_provider,
        }


def _device_ids() -> dict[tuple[str, str], int]:
    return {(model, kind): dev for dev, (model, kind) in C.PCI_DEVICE_MODELS.items()}


def known_resource_names() -> list[str]:
    """Every sandbox resource name rblnctl can map to a PCI ID, with its selector (`NAME (1EFF:1220)`)."""
    return [
        f"{RBLN_RESOURCE_PREFIX}{model}_{kind} ({C.PCI_VENDOR_RBLN:04X}:{dev:04X})"
        for dev, (model, kind) in sorted(C.PCI_DEVICE_MODELS.items())
    ]


def device_for_resource(spec: str) -> PciHostDevice:
    """Parse `rebellions.ai/RBLN-<MODEL>_<PF|VF>` (prefix optional) or `NAME=VVVV:DDDD` into an entry.

    The PCI device ID comes from the device table (constants.PCI_DEVICE_MODELS); `=VVVV:DDDD`
    supplies it for a product the table does not know. Raises InvalidInput naming the known models.
    """
    text = spec.strip()
    name, sep, selector = text.partition("=")
    name = name.strip()
    if not name or any(c.isspace() for c in name):
        raise InvalidInput(f"malformed resource name {spec!r}")
    if "/" not in name:
        name = C.RESOURCE_PREFIX + name
    if sep:
        m = _SELECTOR.fullmatch(selector.strip())
        if not m:
            raise InvalidInput(
                f"malformed PCI selector {selector!r} in {spec!r}: expected VENDOR:DEVICE in hex, e.g. 1EFF:1220"
            )
        if not name.startswith(C.RESOURCE_PREFIX):
            raise InvalidInput(f"{name} is not a Rebellions resource (expected the {C.RESOURCE_PREFIX} prefix)")
        return PciHostDevice(resource_name=name, pci_vendor_selector=f"{m.group(1)}:{m.group(2)}".upper())
    m = _RBLN_RESOURCE.fullmatch(name)
    known = "; ".join(known_resource_names())
    if not m:
        raise InvalidInput(
            f"{name} is not an RBLN sandbox resource name ({RBLN_RESOURCE_PREFIX}<MODEL>_<PF|VF>); known: {known}"
        )
    dev = _device_ids().get((m.group(1).upper(), m.group(2)))
    if dev is None:
        raise InvalidInput(
            f"unknown NPU model {m.group(1)} in {name}; known: {known}; for another product give its PCI ID as "
            f"{name}=1EFF:<device>"
        )
    return PciHostDevice(resource_name=name, pci_vendor_selector=f"{C.PCI_VENDOR_RBLN:04X}:{dev:04X}")


def devices_from_cluster(kube: Kube, *, selector: str | None = None) -> tuple[list[PciHostDevice], list[str]]:
    """Return the entries for every rebellions.ai/RBLN-* resource NPU nodes advertise, and warnings.

    Reads allocatable on the NPU nodes (inventory.list_npu_node_objects). A resource without a
    known device ID, or a legacy name (rebellions.ai/ATOM_CA22_PT), is a warning, not an entry.
    """
    from rblnctl.node.inventory import list_npu_node_objects

    advertised: dict[str, list[str]] = {}
    legacy: dict[str, list[str]] = {}
    for node in list_npu_node_objects(kube, selector=selector):
        node_name = node.get("metadata", {}).get("name", "")
        for key in (node.get("status") or {}).get("allocatable") or {}:
            if key.startswith(RBLN_RESOURCE_PREFIX):
                advertised.setdefault(key, []).append(node_name)
            elif key.startswith(C.VM_RESOURCE_PREFIXES):
                legacy.setdefault(key, []).append(node_name)
    devices: list[PciHostDevice] = []
    warnings: list[str] = []
    for key in sorted(advertised):
        try:
            devices.append(device_for_resource(key))
        except InvalidInput:
            warnings.append(
                f"{key} (on {', '.join(advertised[key])}) has no known PCI device ID; permit it explicitly with "
                f"--resource-name {key}=1EFF:<device>"
            )
    for key in sorted(legacy):
        warnings.append(
            f"{key} (on {', '.join(legacy[key])}) is a legacy sandbox resource name; not permitted automatically "
            f"(current plugins advertise {RBLN_RESOURCE_PREFIX}<MODEL>_<PF|VF>)"
        )
    return devices, warnings


def _is_rbln_entry(e: dict) -> bool:
    return str(e.get("resourceName") or "").startswith(C.RESOURCE_PREFIX) or str(
        e.get("pciVendorSelector") or ""
    ).upper().startswith(f"{C.PCI_VENDOR_RBLN:04X}:")


@dataclass(frozen=True, kw_only=True)
class DevicePlan:
    """What permit-devices would change in permittedHostDevices.pciHostDevices, and the exact patch."""

    name: str
    namespace: str
    version: str | None
    fix: bool
    requested: list[PciHostDevice]
    pci_host_devices_before: list[dict]
    pci_host_devices_after: list[dict]
    added: list[str]  # resource names appended
    already_permitted: list[str]  # requested and already there with the same selector
    fixed: list[str]  # RBLN entries whose externalResourceProvider is set to true (--fix)
    needs_fix: list[str]  # RBLN entries with externalResourceProvider false, left alone (no --fix)
    skipped: list[str]  # requested but clashing with an existing entry (see warnings)
    patch: list[dict]
    noop: bool
    warnings: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)


def plan_devices(
    obj: dict, requested: Sequence[PciHostDevice], *, fix: bool = False, notes: Sequence[str] = ()
) -> DevicePlan:
    """Plan adding entries to one KubeVirt CR's pciHostDevices (pure: no I/O).

    Every existing entry (any vendor) is kept in place. A requested entry is not added when an
    entry with the same resourceName or the same pciVendorSelector exists; a clash (same name,
    other selector, or the reverse) is a warning. RBLN entries with externalResourceProvider
    false or unset make KubeVirt start its own device plugin for that resource: reported, and set
    to true only with fix.
    """
    meta = obj.get("metadata") or {}
    _, raw = _lookup(obj, PCI_HOST_DEVICES)
    before = [copy.deepcopy(e) for e in raw or [] if isinstance(e, dict)]
    after = copy.deepcopy(before)
    warnings = list(notes)
    added: list[str] = []
    already: list[str] = []
    fixed: list[str] = []
    needs_fix: list[str] = []
    skipped: list[str] = []

    for e in after:
        if _is_rbln_entry(e) and not e.get("externalResourceProvider"):
            label = f"{e.get('resourceName')} ({e.get('pciVendorSelector')})"
            if fix:
                e["externalResourceProvider"] = True
                fixed.append(str(e.get("resourceName")))
            else:
                needs_fix.append(str(e.get("resourceName")))
                warnings.append(
                    f"{label} is permitted with externalResourceProvider false: KubeVirt would run its own device "
                    "plugin for it next to the RBLN sandbox device plugin; rerun with --fix to set it to true"
                )

    for d in requested:
        sel = d.pci_vendor_selector.upper()
        same_name = [e for e in after if e.get("resourceName") == d.resource_name]
        same_sel = [e for e in after if str(e.get("pciVendorSelector") or "").upper() == sel]
        if any(str(e.get("pciVendorSelector") or "").upper() == sel for e in same_name):
            if d.resource_name not in added:
                already.append(d.resource_name)
        elif same_name:
            skipped.append(d.resource_name)
            warnings.append(
                f"{d.resource_name} is already permitted with selector {same_name[0].get('pciVendorSelector')}, "
                f"not {sel}; left as is (edit permittedHostDevices by hand if the device ID is wrong)"
            )
        elif same_sel:
            skipped.append(d.resource_name)
            warnings.append(
                f"{sel} is already permitted as {same_sel[0].get('resourceName')}; not adding {d.resource_name} "
                "(a legacy name? rename it in permittedHostDevices and in every VM's hostDevices by hand)"
            )
        else:
            after.append(d.entry())
            added.append(d.resource_name)

    writes = [(PCI_HOST_DEVICES, after)] if after != before else []
    blockers = _deletion_blockers(obj)
    patch = _guarded_patch(obj, writes, [PCI_HOST_DEVICES]) if writes and not blockers else []
    return DevicePlan(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        version=_version_of(obj),
        fix=fix,
        requested=list(requested),
        pci_host_devices_before=before,
        pci_host_devices_after=after,
        added=added,
        already_permitted=already,
        fixed=fixed,
        needs_fix=needs_fix,
        skipped=skipped,
        patch=patch,
        noop=not writes,
        warnings=warnings,
        blockers=blockers,
    )


@dataclass(frozen=True, kw_only=True)
class DeviceResult:
    """The outcome of permit-devices: the plan last computed and whether a write went through."""

    plan: DevicePlan
    changed: bool
    attempts: int
    dry_run: str | None = None


def _unique(devices: Sequence[PciHostDevice]) -> list[PciHostDevice]:
    out: dict[str, PciHostDevice] = {}
    for d in devices:
        prev = out.get(d.resource_name)
        if prev and prev.pci_vendor_selector != d.pci_vendor_selector:
            raise InvalidInput(
                f"{d.resource_name} given with two PCI selectors: "
                f"{prev.pci_vendor_selector} and {d.pci_vendor_selector}"
            )
        out.setdefault(d.resource_name, d)
    return list(out.values())


@dataclass(kw_only=True)
class DevicePermitter(_Writer):
    """Permit RBLN NPUs as KubeVirt host devices without losing anyone else's entries."""

    fix: bool = False  # set externalResourceProvider: true on RBLN entries that have it false

    def plan(
        self, resource_names: Sequence[str] = (), *, from_cluster: bool = False, node_selector: str | None = None
    ) -> DevicePlan:
        """Resolve the wanted entries (flags and/or what NPU nodes advertise), read the CR and plan.

        Raises InvalidInput for a bad or unknown resource name (before any request), and NotFound
        when from_cluster is the only source and no NPU node advertises a rebellions.ai/RBLN-* resource.
        """
        requested = [device_for_resource(n) for n in resource_names]
        if not requested and not from_cluster and not self.fix:
            raise InvalidInput("nothing to permit: pass --resource-name NAME or --from-cluster")
        notes: list[str] = []
        if from_cluster:
            found, notes = devices_from_cluster(self.kube, selector=node_selector)
            if not found:
                msg = (
                    f"no NPU node advertises a {RBLN_RESOURCE_PREFIX}* resource (are nodes in vm-passthrough mode with "
                    "the sandbox device plugin running? DRA setups need no permittedHostDevices)"
                )
                if not requested and not self.fix:
                    raise NotFound(msg + ("; " + "; ".join(notes) if notes else ""))
                notes.append(msg)
            requested += found
        requested = _unique(requested)
        obj = find_kubevirt(self.kube, name=self.name, namespace=self.namespace)
        return plan_devices(obj, requested, fix=self.fix, notes=notes)

    def apply(self, plan: DevicePlan) -> DeviceResult:
        """Send the plan's patch; idempotent. Same conflict handling and errors as GateEditor.apply()."""

        def replan(obj: dict) -> DevicePlan:
            return plan_devices(obj, plan.requested, fix=self.fix)

        final, changed, attempts = self._write(plan, replan)
        return DeviceResult(
            plan=final, changed=changed, attempts=attempts, dry_run="server" if self.server_dry_run else None
        )


# -- status --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GateState:
    """Whether one RBLN-relevant gate is effectively on, and why."""

    name: str
    listed: bool  # in featureGates
    disabled: bool  # in disabledFeatureGates
    effective: bool | None  # None: cannot tell (not listed, default depends on an unknown version)
    reason: str


@dataclass(frozen=True, kw_only=True)
class PermittedDevice:
    """One RBLN entry of permittedHostDevices.pciHostDevices."""

    resource_name: str
    pci_vendor_selector: str
    external_resource_provider: bool
    model: str | None  # "CA22 PF" from the device table; None when the ID is not in it


@dataclass(frozen=True, kw_only=True)
class KubeVirtStatus:
    """What `rblnctl kubevirt status` reports about the KubeVirt CR."""

    name: str
    namespace: str
    phase: str | None
    version: str | None
    deleting: bool
    feature_gates: list[str]
    disabled_feature_gates: list[str]
    gates: list[GateState]
    permitted_devices: list[PermittedDevice]  # RBLN entries only
    other_permitted_devices: int  # entries for other vendors (kept, not shown)
    notes: list[str] = field(default_factory=list)


def gate_state(gate: str, feature_gates: Sequence[str], disabled: Sequence[str], version: str | None) -> GateState:
    """Decide whether gate is on: listed, Beta-on-by-default for this version, or disabled."""
    listed = gate in feature_gates
    off = gate in disabled
    beta = C.GATE_BETA_SINCE.get(gate)
    parsed = parse_version(version)
    if listed and off:
        return GateState(name=gate, listed=True, disabled=True, effective=False,
                         reason="in both featureGates and disabledFeatureGates (KubeVirt rejects this)")
    if off:
        return GateState(name=gate, listed=False, disabled=True, effective=False, reason="in disabledFeatureGates")
    if listed:
        return GateState(name=gate, listed=True, disabled=False, effective=True, reason="in featureGates")
    if beta and parsed is None:
        return GateState(name=gate, listed=False, disabled=False, effective=None,
                         reason=f"not listed; Beta (on by default) only from KubeVirt {format_version(beta)} "
                         "and the version is unknown")
    if beta and parsed >= beta:
        return GateState(name=gate, listed=False, disabled=False, effective=True,
                         reason=f"not listed; Beta, on by default since KubeVirt {format_version(beta)}")
    return GateState(name=gate, listed=False, disabled=False, effective=False,
                     reason="not listed (Alpha: off unless listed)")


def _model_of(selector: str) -> str | None:
    m = _SELECTOR.fullmatch(selector or "")
    if not m or int(m.group(1), 16) != C.PCI_VENDOR_RBLN:
        return None
    found = C.PCI_DEVICE_MODELS.get(int(m.group(2), 16))
    return f"{found[0]} {found[1]}" if found else None


def kubevirt_status(kube: Kube, *, name: str | None = None, namespace: str | None = None) -> KubeVirtStatus:
    """Read the KubeVirt CR and report its gates and permitted RBLN devices (read-only)."""
    obj = find_kubevirt(kube, name=name, namespace=namespace)
    return status_of(obj)


def status_of(obj: dict) -> KubeVirtStatus:
    """Summarise one KubeVirt CR object (pure)."""
    meta = obj.get("metadata") or {}
    st = obj.get("status") or {}
    version = _version_of(obj)
    _, fg_raw = _lookup(obj, FEATURE_GATES)
    _, dis_raw = _lookup(obj, DISABLED_GATES)
    _, pci_raw = _lookup(obj, PCI_HOST_DEVICES)
    fg = [str(g) for g in fg_raw or []]
    dis = [str(g) for g in dis_raw or []]
    entries = [e for e in pci_raw or [] if isinstance(e, dict)]
    gates = [gate_state(g, fg, dis, version) for g in (C.GATE_HOST_DEVICES, C.GATE_HOST_DEVICES_DRA)]
    devices = [
        PermittedDevice(
            resource_name=str(e.get("resourceName") or ""),
            pci_vendor_selector=str(e.get("pciVendorSelector") or ""),
            external_resource_provider=bool(e.get("externalResourceProvider")),
            model=_model_of(str(e.get("pciVendorSelector") or "").upper()),
        )
        for e in entries
        if _is_rbln_entry(e)
    ]
    notes: list[str] = []
    ref = _ref(obj)
    if meta.get("deletionTimestamp"):
        notes.append(f"KubeVirt {ref} is being deleted (deletionTimestamp {meta['deletionTimestamp']})")
    phase = st.get("phase")
    if phase and phase != "Deployed":
        notes.append(f"phase is {phase}, not Deployed")
    if version is None:
        notes.append("status.observedKubeVirtVersion is empty: the installed version is unknown")
    hd, dra = gates
    if hd.effective is False:
        notes.append(f"{C.GATE_HOST_DEVICES} is off: VMs cannot use host devices; run `rblnctl kubevirt enable-gates`")
    if dra.disabled:
        notes.append(
            f"{C.GATE_HOST_DEVICES_DRA} is in disabledFeatureGates: DRA host devices are off; "
            "`rblnctl kubevirt enable-gates --dra` moves it to featureGates"
        )
    bad = [d.resource_name for d in devices if not d.external_resource_provider]
    if bad:
        notes.append(
            f"externalResourceProvider is false for {', '.join(bad)}: KubeVirt would run its own device plugin; "
            "run `rblnctl kubevirt permit-devices --fix`"
        )
    if not devices:
        notes.append(
            "no RBLN NPU in permittedHostDevices: VMs cannot request sandbox device plugin resources; run "
            "`rblnctl kubevirt permit-devices --from-cluster` (DRA setups do not need it)"
        )
    return KubeVirtStatus(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        phase=phase,
        version=version,
        deleting=bool(meta.get("deletionTimestamp")),
        feature_gates=fg,
        disabled_feature_gates=dis,
        gates=gates,
        permitted_devices=devices,
        other_permitted_devices=len(entries) - len(devices),
        notes=notes,
    )
