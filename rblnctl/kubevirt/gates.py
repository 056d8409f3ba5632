"""KubeVirt feature gates: which exist in which release, whether one is effectively on, and conflict-safe edits.

Facts (kubevirt/kubevirt at each release tag; constants.py has the tables):
- the registered gates per release (pkg/virt-config/featuregate/), so real gates are never "unknown";
- `disabledFeatureGates` exists from v1.8.0, and from then the update webhook rejects a gate in
  both lists (pkg/virt-operator/webhooks/kubevirt-update-admitter.go);
- `featuregate.IsEnabled` (v1.9.0): an unregistered gate is off; GA is on; an explicit enable wins
  over an explicit disable; Beta gates are on unless disabled only from v1.9.0 (v1.8 and earlier:
  every non-GA gate must be listed). HostDevicesWithDRA is Alpha in v1.6-v1.8 and Beta in v1.9.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import InvalidInput, UnknownName
from rblnctl.kube import Kube
from rblnctl.kubevirt.cr import (
    CrWriteOptions,
    CrWriter,
    JsonPath,
    deletion_blockers,
    refuse_hco_managed,
    floor_problem,
    guarded_patch,
    lookup,
    version_of,
)
from rblnctl.plan import Blocker
from rblnctl.remedy import Command, Remedy
from rblnctl.versions import format_version, parse_version

DEV_CONFIG = ("spec", "configuration", "developerConfiguration")
FEATURE_GATES = (*DEV_CONFIG, "featureGates")
DISABLED_GATES = (*DEV_CONFIG, "disabledFeatureGates")
# Labels KubeVirt adds to every virt-launcher's nodeSelector, cluster-wide (v1.9.0 pkg/virt-config/virt-config.go
# GetNodeSelectors; rblnctl.vm.placement.launcher_placement).
NODE_SELECTORS = (*DEV_CONFIG, "nodeSelectors")
_GATE = re.compile(C.GATE_NAME_PATTERN)

Version = tuple[int, int, int]


# -- the registry --------------------------------------------------------------------------------


def known_gates(version: Version | None) -> frozenset[str]:
    """Gates KubeVirt `version` registers (None, or newer than rblnctl's table: every gate it knows)."""
    if version is None or version > C.KUBEVIRT_GATES_CHECKED_UP_TO:
        return frozenset(C.KUBEVIRT_GATES)
    return frozenset(g for g, (since, removed) in C.KUBEVIRT_GATES.items()
                     if since <= version and (removed is None or version < removed))


def maturity(gate: str, version: Version) -> str | None:
    """`Alpha`/`Beta` of a gate rblnctl tracks (KUBEVIRT_GATE_STATES) in `version`; None before it existed."""
    state = None
    for since, name in C.KUBEVIRT_GATE_STATES.get(gate, ()):
        if version >= since:
            state = name
    return state


def _adding(gate: str) -> str:
    return "adding it anyway"


def gate_warnings(gates: Sequence[str], version_text: str | None = None, *,
                  doing: Callable[[str], str] = _adding) -> list[str]:
    """One warning per gate the installed KubeVirt (or, version unknown, any release rblnctl knows) lacks.

    `doing(gate)` says what the edit does with a gate no release registers ("adding it anyway" for
    an enable; a disable says what it removes, or that there is nothing to remove).
    """
    version = parse_version(version_text)
    known = known_gates(version)
    by_lower = {k.lower(): k for k in C.KUBEVIRT_GATES}
    out = []
    for g in gates:
        if g in known:
            continue
        if g in C.KUBEVIRT_GATES and version is not None:
            since, removed = C.KUBEVIRT_GATES[g]
            when = (f"it was removed in {format_version(removed)}" if removed and version >= removed
                    else f"it arrived in {format_version(since)}")
            out.append(f"KubeVirt {version_text} has no feature gate {g} ({when}): listing it changes nothing there")
            continue
        hint = by_lower.get(g.lower())
        upto = format_version(C.KUBEVIRT_GATES_CHECKED_UP_TO)
        out.append(f"unknown feature gate {g}: " + (
            f"did you mean {hint}? (gate names are case-sensitive)" if hint else
            f"KubeVirt up to {upto} registers no such gate; {doing(g)}"))
    return out


def suggest_gate(gate: str) -> str | None:
    """The registered gate a typo most likely meant: the same name in other case, else the closest spelling."""
    import difflib

    by_lower = {k.lower(): k for k in C.KUBEVIRT_GATES}
    if gate.lower() in by_lower:
        return by_lower[gate.lower()]
    close = difflib.get_close_matches(gate, list(C.KUBEVIRT_GATES), n=1, cutoff=0.75)
    if close:
        return close[0]
    close = difflib.get_close_matches(gate.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else None


def check_known(gates: Sequence[str], *, allow_unknown: bool = False, version_text: str | None = None) -> None:
    """Refuse (UnknownName, bad input) a gate no KubeVirt release rblnctl knows registers, unless `allow_unknown`.

    KubeVirt ignores an unregistered gate (featuregate.IsEnabled: off), so a typo such as `HostDevice`
    would be written beside `HostDevices` and change nothing: refused before any write, with the
    registered name it most likely meant. A KubeVirt newer than rblnctl's table (KUBEVIRT_GATES_CHECKED_UP_TO)
    may register gates rblnctl has never heard of: `allow_unknown` lets those through (with a warning).
    """
    if allow_unknown:
        return
    unknown = [g for g in gates if g not in C.KUBEVIRT_GATES]
    if not unknown:
        return
    upto = format_version(C.KUBEVIRT_GATES_CHECKED_UP_TO)
    version = parse_version(version_text)
    parts = []
    suggestions = []
    for g in unknown:
        hint = suggest_gate(g)
        if hint:
            suggestions.append(hint)
        parts.append(f"{g!r}" + (f" (did you mean {hint}?)" if hint else ""))
    newer = (f"; KubeVirt {version_text} is newer than that, so it may register it" if version is not None
             and version > C.KUBEVIRT_GATES_CHECKED_UP_TO else "")
    raise UnknownName(f"unknown KubeVirt feature gate{'s' if len(unknown) > 1 else ''} {', '.join(parts)}: no "
                      f"KubeVirt release up to {upto} registers {'them' if len(unknown) > 1 else 'it'}, and KubeVirt "
                      f"ignores a gate it does not register{newer}; to write it anyway", suggestions=suggestions,
                      options=("allow_unknown",))


def floor_detail(gate: str, version_text: str | None) -> str:
    """Why a gate with a version floor (GATE_MIN_KUBEVIRT) is refused below it though KubeVirt may have it.

    The gate exists from KUBEVIRT_GATES[gate][0] (HostDevicesWithDRA: 1.6.0, Alpha), but rblnctl's
    floor is the NPU setup guide's: DRA host devices for RBLN NPUs need KubeVirt >= 1.9.0 (the
    prerequisites table of the source page; see GATE_MIN_KUBEVIRT).
    """
    since = C.KUBEVIRT_GATES.get(gate, (None, None))[0]
    if since is None:
        return ""
    kind = maturity(gate, since)
    version = parse_version(version_text)
    floor = format_version(C.GATE_MIN_KUBEVIRT.get(gate, since))
    has = "" if version is None else (
        f", and {version_text} does not have it yet" if gate not in known_gates(version) else
        f", and in {version_text} it is {maturity(gate, version) or 'Alpha'}")
    return (f" (the gate exists since {format_version(since)}{f' as {kind}' if kind else ''}{has}; "
            f"DRA host devices for RBLN NPUs need {floor}, the setup guide's prerequisite)")


def enable_step(gates: Sequence[str], version_text: str | None, *, dra: bool) -> Remedy:
    """The remedy that gets `gates` listed by `kubevirt enable-gates` (`dra`: with HostDevicesWithDRA).

    enable-gates refuses a gate with a floor (GATE_MIN_KUBEVIRT) below it, or on an unknown
    version without force (plan_gates), so the remedy says to upgrade KubeVirt first (no command: the one
    that follows is refused until then), or forces it.
    """
    floors = [C.GATE_MIN_KUBEVIRT[g] for g in gates if g in C.GATE_MIN_KUBEVIRT]
    version = parse_version(version_text)
    if floors and version is None:
        return Remedy("enable it first, forced since the KubeVirt version is unknown",
                      Command.own("kubevirt", "enable-gates", dra=dra, force=True))
    if floors and version is not None and version < max(floors):
        named = ", ".join(g for g in gates if g in C.GATE_MIN_KUBEVIRT)
        return Remedy(f"upgrade KubeVirt to >= {format_version(max(floors))} first (enable-gates refuses {named} on "
                      f"KubeVirt {version_text}), then enable it with kubevirt enable-gates")
    return Remedy("enable it first", Command.own("kubevirt", "enable-gates", dra=dra))


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


def rbln_gates(*, dra: bool = False) -> list[str]:
    """The gates RBLN NPU passthrough needs: HostDevices, plus HostDevicesWithDRA for DRA.

    KubeVirt's VMI admission checks HostDevices for any hostDevices entry, DRA ones included, so
    DRA needs both (v1.9.0 pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go).
    """
    return [C.GATE_HOST_DEVICES, C.GATE_HOST_DEVICES_DRA] if dra else [C.GATE_HOST_DEVICES]


@dataclass(frozen=True, kw_only=True)
class GateState:
    """Whether one gate is effectively on in the installed KubeVirt, and why."""

    name: str
    listed: bool  # in featureGates
    disabled: bool  # in disabledFeatureGates
    effective: bool | None  # None: cannot tell (the version is unknown and the default depends on it)
    conflict: bool  # in both lists: the update webhook rejects changes to the gate lists until fixed
    reason: str


def gate_state(gate: str, feature_gates: Sequence[str], disabled: Sequence[str], version_text: str | None) -> GateState:
    """Apply KubeVirt's IsEnabled rule for the installed version to one gate."""
    listed, off = gate in feature_gates, gate in disabled
    version = parse_version(version_text)

    def state(effective: bool | None, reason: str, conflict: bool = False) -> GateState:
        return GateState(name=gate, listed=listed, disabled=off, effective=effective, conflict=conflict,
                         reason=reason)

    exists = version is None or gate in known_gates(version)
    if version is not None and not exists:
        since = C.KUBEVIRT_GATES.get(gate, ((0, 0, 0), None))[0]
        return state(False, f"KubeVirt {version_text} has no such gate (it arrived in {format_version(since)})")
    if listed and off:
        return state(True, "in both featureGates and disabledFeatureGates: on (an explicit enable wins), but "
                     "KubeVirt's update webhook rejects every change to the gate lists until it is in only one",
                     conflict=True)
    if listed:
        return state(True, "in featureGates")
    beta_default = C.BETA_ON_BY_DEFAULT_SINCE
    if off:
        if version is not None and version < C.DISABLED_GATES_SINCE:
            return state(False, f"in disabledFeatureGates, which KubeVirt {version_text} does not have; not listed")
        return state(False, "in disabledFeatureGates")
    if version is None:
        if any(name == "Beta" for _, name in C.KUBEVIRT_GATE_STATES.get(gate, ())):
            return state(None, f"not listed; Beta (on by default) only from KubeVirt {format_version(beta_default)} "
                         "and the version is unknown")
        return state(False, "not listed (off unless listed)")
    kind = maturity(gate, version)
    if kind == "Beta" and version >= beta_default:
        return state(True, f"not listed; Beta, on by default since KubeVirt {format_version(beta_default)}")
    if kind == "Beta":
        return state(False, f"not listed; Beta, but KubeVirt {version_text} turns Beta gates on only when listed")
    return state(False, f"not listed ({kind or 'Alpha'}: off unless listed)")


# -- editing -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GatePlan:
    """What a gate edit would change in one KubeVirt CR's gate lists, and the exact patch to send.

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
    blockers: list[Blocker] = field(default_factory=list)
    turns_off: list[str] = field(default_factory=list)  # gates on (or maybe on) now and off after the write
    vms: list[str] = field(default_factory=list)  # running VMs that need a gate turned off (rblnctl.vm.gates)


def turned_off(gates: Sequence[str], before: tuple[Sequence[str], Sequence[str]],
               after: tuple[Sequence[str], Sequence[str]], version_text: str | None) -> list[str]:
    """The gates KubeVirt's IsEnabled rule (gate_state) says on, or cannot say, with the lists `before` and off
    with the lists `after` (each (featureGates, disabledFeatureGates))."""
    out = []
    for g in gates:
        was = gate_state(g, before[0], before[1], version_text).effective
        now = gate_state(g, after[0], after[1], version_text).effective
        if was is not False and now is not True:
            out.append(g)
    return out


def plan_gates(obj: dict, *, enable: Sequence[str] = (), disable: Sequence[str] = (), add_to_disabled: bool = False,
               force: bool = False, allow_unknown: bool = False) -> GatePlan:
    """Plan a gate change against one KubeVirt CR object (pure: no I/O).

    Enabled gates are appended to featureGates in the order given, keeping every gate already there
    and its order; a gate being enabled is also dropped from disabledFeatureGates (the webhook
    rejects a gate in both lists). Disabled gates are dropped from featureGates and, with
    add_to_disabled, appended to disabledFeatureGates. A gate with a KubeVirt version floor
    (GATE_MIN_KUBEVIRT), or disabledFeatureGates itself (KubeVirt >= 1.8.0), on an older or unknown
    version is a blocker that `force` overrides (then a warning). A gate no release rblnctl knows
    registers is UnknownName (check_known) unless `allow_unknown`; disabling one that is listed in
    the CR is always allowed (removing a typo someone wrote is the cleanup).
    """
    enable = validate_gates(enable)
    disable = validate_gates(disable)
    both = [g for g in enable if g in disable]
    if both:
        raise InvalidInput(f"cannot enable and disable {', '.join(both)} at once")
    meta = obj.get("metadata") or {}
    version = version_of(obj)
    parsed = parse_version(version)
    _, fg_raw = lookup(obj, FEATURE_GATES)
    _, dis_raw = lookup(obj, DISABLED_GATES)
    fg_before = [str(g) for g in fg_raw or []]
    dis_before = [str(g) for g in dis_raw or []]
    listed = set(fg_before) | set(dis_before)
    check_known([*enable, *(g for g in disable if g not in listed)], allow_unknown=allow_unknown,
                version_text=version)
    blockers = deletion_blockers(obj)

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
    floor_notes: list[str] = []
    floored: set[str] = set()  # gates whose floor message below says all there is to say about them
    for what, floor, writes_it in floors:
        problem = floor_problem(what, floor, obj)
        if problem and writes_it and what in C.KUBEVIRT_GATES:
            problem += floor_detail(what, version)
            floored.add(what)
        if problem and not writes_it:
            floor_notes.append(problem + " (already set; nothing to change)")
        elif problem and force:
            floor_notes.append(problem + "; going ahead anyway (forced)")
        elif problem:
            blockers.append(Blocker(problem, override="force"))

    def doing(g: str) -> str:
        """What this edit does with a gate no KubeVirt release registers (for gate_warnings)."""
        if g in enable:
            return "adding it anyway"
        steps = (["removing it from featureGates"] if g in removed else []) + (
            ["adding it to disabledFeatureGates anyway"] if g in newly_disabled else [])
        return " and ".join(steps) if steps else "it is not in featureGates: nothing to remove"

    warnings = gate_warnings([g for g in [*enable, *disable] if g not in floored], version, doing=doing)
    warnings += floor_notes
    for g in undisabled:
        warnings.append(f"{g} is listed in disabledFeatureGates; removing it from there in the same patch "
                        "(KubeVirt rejects a gate in both lists)")
    conflicts = [g for g in fg_before if g in dis_before and g not in enable and g not in disable]
    if conflicts:
        warnings.append(f"{', '.join(conflicts)} {'is' if len(conflicts) == 1 else 'are'} in both featureGates and "
                        "disabledFeatureGates: KubeVirt's update webhook will reject this patch; enable or disable "
                        "it explicitly to fix the lists")
    if parsed is not None and add_to_disabled and newly_disabled and parsed < C.BETA_ON_BY_DEFAULT_SINCE:
        warnings.append(f"KubeVirt {version} turns no gate on by default, so listing "
                        f"{', '.join(newly_disabled)} in disabledFeatureGates changes nothing there")
    if not add_to_disabled:
        for g in disable:
            if parsed is not None and maturity(g, parsed) == "Beta" and parsed >= C.BETA_ON_BY_DEFAULT_SINCE \
                    and g not in dis_before:
                warnings.append(f"{g} stays on: it is Beta (on unless disabled) in KubeVirt {version}; "
                                "list it in disabledFeatureGates to turn it off")

    writes: list[tuple[JsonPath, Any]] = []
    if fg_after != fg_before:
        writes.append((FEATURE_GATES, fg_after))
    if dis_after != dis_before:
        writes.append((DISABLED_GATES, dis_after))
    # The plan read featureGates, and disabledFeatureGates whenever its content decided something.
    depends = [FEATURE_GATES] + ([DISABLED_GATES] if enable or add_to_disabled else [])
    patch = guarded_patch(obj, writes, depends) if writes and not blockers else []
    return GatePlan(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), version=version, enable=enable,
        disable=disable, add_to_disabled=add_to_disabled, feature_gates_before=fg_before, feature_gates_after=fg_after,
        disabled_gates_before=dis_before, disabled_gates_after=dis_after, added=added, removed=removed,
        undisabled=undisabled, newly_disabled=newly_disabled, patch=patch, noop=not writes, warnings=warnings,
        blockers=blockers,
        turns_off=turned_off(disable, (fg_before, dis_before), (fg_after, dis_after), version) if writes else [],
    )


@dataclass(frozen=True, kw_only=True)
class GateResult:
    """The outcome of a gate change: the plan last computed and whether a write went through."""

    plan: GatePlan  # after conflicts, the re-plan that was finally sent (or found to be a no-op)
    changed: bool  # the API server accepted a patch (with a server dry run: validated, not persisted)
    attempts: int  # patches sent; 0 when nothing needed changing
    server_dry_run: bool = False


def _noop(*_: Any) -> None:
    return None


@dataclass(kw_only=True)
class GateEditor:
    """Enable or disable KubeVirt feature gates without losing anyone else's gates.

    plan() only reads; apply() writes the plan's JSON Patch and, when the CR changed in between (a
    `test` op failed), re-reads, re-plans and retries up to options.max_attempts.
    """

    kube: Kube
    options: CrWriteOptions = CrWriteOptions()
    clock: Clock = SYSTEM_CLOCK
    on_retry: Callable[[int, str], None] = _noop
    allow_unknown: bool = False  # write gates no KubeVirt release rblnctl knows registers (a newer KubeVirt's)

    def _writer(self) -> CrWriter[GatePlan]:
        return CrWriter(kube=self.kube, options=self.options, clock=self.clock, on_retry=self.on_retry)

    def plan(self, *, enable: Sequence[str] = (), disable: Sequence[str] = (), add_to_disabled: bool = False
             ) -> GatePlan:
        """Read the CR and plan the change (reads only). Raises InvalidInput for bad names before any request."""
        enable, disable = validate_gates(enable), validate_gates(disable)
        if not enable and not disable:
            raise InvalidInput("name at least one feature gate")
        check_known(enable, allow_unknown=self.allow_unknown)  # a typo needs no request to be refused
        obj = self._writer().find()
        plan = plan_gates(obj, enable=enable, disable=disable, add_to_disabled=add_to_disabled,
                          force=self.options.force, allow_unknown=self.allow_unknown)
        if not plan.noop:
            refuse_hco_managed(obj, "gates")
        return plan

    def apply(self, plan: GatePlan) -> GateResult:
        """Send the plan's patch; idempotent: a no-op plan sends nothing.

        Raises Refused for a plan with blockers, Conflict when the CR kept changing for
        max_attempts tries, and the API's own errors (Forbidden, ClusterError) unchanged.
        """

        def replan(obj: dict) -> GatePlan:
            return plan_gates(obj, enable=plan.enable, disable=plan.disable, add_to_disabled=plan.add_to_disabled,
                              force=self.options.force, allow_unknown=self.allow_unknown)

        final, changed, attempts = self._writer().write(plan, replan)
        return GateResult(plan=final, changed=changed, attempts=attempts, server_dry_run=self.options.server_dry_run)
