"""Find the KubeVirt CR and write it conflict-safely: guarded JSON Patches and the re-read/re-plan retry loop.

The lists rblnctl edits in the CR are atomic (a merge patch replaces them whole), so a
read-modify-write can silently drop an entry another admin or an operator added in between. Every
write is a JSON Patch whose first ops `test` the exact old value of each list the plan was computed
from (or `metadata.resourceVersion` when a list does not exist yet: JSON Patch cannot test for
absence). When a test fails the API server rejects the whole patch (422), nothing is lost, and the
editor re-reads the CR, re-plans from the fresh object and tries again, a bounded number of times.
A reply lost in transit (rblnctl.kube.outcome_unknown: the patch may or may not have landed) is
settled the same way: the re-read CR shows whether the change holds (done) or not (re-plan and
retry, which the `test` ops make safe); only when that read fails too is the outcome unknown.
Model: virtctl `adm log-verbosity` (kubevirt/kubevirt pkg/virtctl/adm/logverbosity).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import Ambiguous, ClusterError, ConfigError, Conflict, NotFound, RblnError, Refused, one_line
from rblnctl.kube import KUBEVIRTS, PATCH_TYPES, Kube, writes
from rblnctl.plan import Blocker
from rblnctl.versions import format_version, parse_version

log = logging.getLogger(__name__)

# A member of the CR as JSON Pointer segments from the object root.
JsonPath = tuple[str, ...]
RESOURCE_VERSION = ("metadata", "resourceVersion")
PATCH_CONTENT_TYPE = PATCH_TYPES["json"]
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RETRY_BACKOFF_S = 0.2  # doubled after each conflict: 0.2, 0.4, 0.8, 1.6 s
# How CrWriter's on_retry message starts when the reply to a patch was lost and the CR read back
# does not hold the change (as opposed to a conflict, whose message is the server's answer).
LOST_REPLY = "the reply to the patch was lost"

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


def ref(obj: dict) -> str:
    """`namespace/name` of an object."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def find_kubevirt(kube: Kube, *, name: str | None = None, namespace: str | None = None) -> dict:
    """Return the one KubeVirt CR that name/namespace select; with neither, the only one in the cluster.

    Raises NotFound when none matches (or the KubeVirt CRD is absent) and Ambiguous when several
    match, listing them so the caller can name one.
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
        found = sorted(ref(i) for i in items)
        raise Ambiguous(f"found {len(items)} KubeVirt CRs ({', '.join(found)}); name the one to use",
                        choices=found, options=("name", "namespace"))
    return items[0]


def hco_owner(obj: dict) -> tuple[str, str] | None:
    """(namespace, name) of the HyperConverged CR that manages this KubeVirt CR; None when HCO does not.

    HCO labels the KubeVirt CR it deploys app.kubernetes.io/managed-by=hco-operator and app=<its
    HyperConverged's name>, in the HyperConverged's namespace (rblnctl.constants, HCO_*); an owner
    reference of kind HyperConverged says the same and names it.
    """
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == C.HCO_KIND), None)
    if owner is None and labels.get(C.MANAGED_BY_LABEL) != C.HCO_MANAGED_BY_VALUE:
        return None
    name = (owner or {}).get("name") or labels.get(C.HCO_APP_LABEL) or C.HCO_DEFAULT_NAME
    return str(meta.get("namespace") or ""), str(name)


def hco_remedy(obj: dict, what: str) -> str | None:
    """Where `what` (gates | devices) is changed when HCO manages this KubeVirt CR; None when it does not."""
    owner = hco_owner(obj)
    if owner is None:
        return None
    ns, name = owner
    where = f"HyperConverged {name} (`kubectl edit {C.HCO_RESOURCE} {name} -n {ns}`)"
    if what == "devices":
        return (f"permit the devices in {where}: {C.HCO_PERMITTED_DEVICES_FIELD}[] with pciDeviceSelector, "
                "resourceName and externalResourceProvider: true")
    return (f"set KubeVirt feature gates through {where}: HCO always enables HostDevices; any other gate only via "
            f"its {C.HCO_JSONPATCH_ANNOTATION} annotation")


def refuse_hco_managed(obj: dict, what: str) -> None:
    """Raise Refused when HCO manages the KubeVirt CR: it would put its own spec back over our edit."""
    fix = hco_remedy(obj, what)
    if fix is not None:
        raise Refused(f"KubeVirt {ref(obj)} is managed by the HyperConverged Cluster Operator, which reverts "
                      f"edits to it; {fix}")


def lookup(obj: Any, path: Sequence[str]) -> tuple[bool, Any]:
    """(present, value) of the member at path; present is False when any segment is missing."""
    cur = obj
    for seg in path:
        if not isinstance(cur, dict) or seg not in cur:
            return False, None
        cur = cur[seg]
    return True, cur


def pointer(path: Sequence[str]) -> str:
    """RFC 6901 JSON Pointer for path segments."""
    return "".join("/" + seg.replace("~", "~0").replace("/", "~1") for seg in path)


def value_tests(obj: Any, paths: Sequence[JsonPath]) -> list[dict]:
    """JSON Patch `test` ops that hold while each path has the value it had in `obj`: a member that is there by its
    value; one that is absent by a `test` of `null` on its first missing member (kube-apiserver's JSON Patch passes a
    `test` of null on a member its object lacks: gopkg.in/evanphx/json-patch.v4 patch.go `test`, vendored by
    k8s.io/apiserver), once per member. The patch then fails (422) only when someone changed one of them."""
    tests: list[dict] = []
    for path in paths:
        present, value = lookup(obj, path)
        if present:
            tests.append({"op": "test", "path": pointer(path), "value": value})
            continue
        depth = next(i for i in range(1, len(path) + 1) if not lookup(obj, path[:i])[0])  # first missing member
        test = {"op": "test", "path": pointer(path[:depth]), "value": None}
        if test not in tests:
            tests.append(test)
    return tests


def identity_test(obj: Mapping) -> list[dict]:
    """The JSON Patch `test` of the object's /metadata/uid (none when it has no uid): the write then applies only
    to the object rblnctl read and decided on, never to one deleted and re-created under the same name since (422:
    the caller re-reads and sees another uid). The one way every JSON patch of rblnctl carries its identity."""
    uid = (obj.get("metadata") or {}).get("uid")
    return [{"op": "test", "path": "/metadata/uid", "value": uid}] if uid else []


def guarded_patch(obj: dict, writes: Sequence[tuple[JsonPath, Any]], depends: Sequence[JsonPath], *,
                  identity: bool = False) -> list[dict]:
    """Build a JSON Patch that sets each write path, guarded by `test` ops on every path the plan read (and, with
    `identity`, first on the object's uid: identity_test; a VM's patch carries it).

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
        present, value = lookup(obj, path)
        if present:
            tests.append({"op": "test", "path": pointer(path), "value": value})
        else:
            need_rv = True
    if need_rv:
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if not rv:
            raise ClusterError(f"KubeVirt {ref(obj)} has no metadata.resourceVersion; cannot write it safely")
        tests.insert(0, {"op": "test", "path": pointer(RESOURCE_VERSION), "value": rv})
    if identity:
        tests = identity_test(obj) + tests
    ops: list[dict] = []
    created: set[JsonPath] = set()
    for path, value in writes:
        present, _ = lookup(obj, path)
        if present:
            ops.append({"op": "replace", "path": pointer(path), "value": value})
            continue
        for i in range(1, len(path)):
            parent = tuple(path[:i])
            if parent in created:
                continue
            p_present, p_value = lookup(obj, parent)
            if not p_present:
                ops.append({"op": "add", "path": pointer(parent), "value": {}})
                created.add(parent)
            elif p_value is None:  # `configuration: null`: an object must be there before adding into it
                ops.append({"op": "replace", "path": pointer(parent), "value": {}})
                created.add(parent)
            elif not isinstance(p_value, dict):
                raise Refused(
                    f"KubeVirt {ref(obj)}: {'.'.join(parent)} is a {type(p_value).__name__}, not an object; "
                    "fix the CR by hand"
                )
        ops.append({"op": "add", "path": pointer(path), "value": value})
    return tests + ops


def version_of(obj: dict) -> str | None:
    """The installed KubeVirt version: `status.observedKubeVirtVersion` (None when virt-operator has not said)."""
    return (obj.get("status") or {}).get("observedKubeVirtVersion") or None


def deletion_blockers(obj: dict) -> list[Blocker]:
    """A blocker when the CR is being deleted (KubeVirt is being uninstalled): nothing overrides it."""
    ts = (obj.get("metadata") or {}).get("deletionTimestamp")
    if ts:
        return [Blocker(f"KubeVirt {ref(obj)} is being deleted (deletionTimestamp {ts}); refusing to edit it")]
    return []


def floor_problem(what: str, floor: tuple[int, int, int], obj: dict) -> str | None:
    """A sentence when the CR's version is below floor or unknown; None when it is at least floor."""
    version = version_of(obj)
    parsed = parse_version(version)
    if parsed is not None and parsed >= floor:
        return None
    found = (
        f"reports {version}"
        if parsed is not None
        else "does not report its version (status.observedKubeVirtVersion is empty; is virt-operator running?)"
    )
    return f"{what} needs KubeVirt >= {format_version(floor)}; KubeVirt {ref(obj)} {found}"


def is_conflict(err: ClusterError) -> bool:
    """True for a lost optimistic-concurrency race: 409, or 422 from a failed JSON Patch `test` op."""
    if isinstance(err, Conflict) or err.status == 409:
        return True
    return err.status == 422 and bool(_TEST_FAILED.search(str(err)))


class CrPlan(Protocol):
    """What the write loop needs of a plan of an edit to the KubeVirt CR (read-only: the plans are frozen)."""

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def patch(self) -> list[dict]: ...

    @property
    def noop(self) -> bool: ...

    @property
    def blockers(self) -> Sequence[Blocker]: ...


P = TypeVar("P", bound=CrPlan)


def _noop(*_: Any) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class CrWriteOptions:
    """Where the CR is and how writes to it are made; shared by every editor of the CR."""

    name: str | None = None  # None: the only KubeVirt CR (in `namespace`, or in the cluster)
    namespace: str | None = None
    force: bool = False  # go ahead below a version floor, or on an unknown version
    server_dry_run: bool = False  # send dryRun=All: admission validates, nothing persists
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S  # first wait; doubles per conflict

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("max_attempts must be at least 1")


@dataclass(kw_only=True)
class CrWriter(Generic[P]):
    """The write loop: send a plan's patch; on a conflict re-read, re-plan and retry (bounded)."""

    kube: Kube
    options: CrWriteOptions = CrWriteOptions()
    clock: Clock = SYSTEM_CLOCK
    on_retry: Callable[[int, str], None] = _noop  # (attempt that conflicted, server message)

    def find(self) -> dict:
        """The CR the options name."""
        return find_kubevirt(self.kube, name=self.options.name, namespace=self.options.namespace)

    def write(self, plan: P, replan: Callable[[dict], P]) -> tuple[P, bool, int]:
        """Return (the plan finally sent or found a no-op, whether a patch went through, patches sent).

        A conflict (is_conflict) re-reads, re-plans and retries after a backoff. A lost reply
        (outcome_unknown) re-reads at once: when the re-plan has nothing left to do the patch is taken
        as applied and the plan that was sent is returned with changed=True; otherwise the re-plan is
        sent (its `test` ops pin what it read). Raises OutcomeUnknown when that read-back fails,
        Conflict after max_attempts patches, Refused when a (re-)plan has blockers. The loop is
        rblnctl.kube.writes.settle.
        """
        current = [plan]
        sent_plan = [plan]
        where = f"KubeVirt {plan.namespace}/{plan.name}"

        def next_write(obj: Any) -> writes.Write | None:
            if obj is not writes.UNREAD:
                if obj is None:
                    raise NotFound(f"{where} was deleted while rblnctl wrote it")
                current[0] = replan(obj)
            p = current[0]
            if p.blockers:
                raise Refused(f"refusing to edit KubeVirt {p.namespace}/{p.name}", blockers=p.blockers)
            if p.noop:
                return None
            sent_plan[0] = p
            return writes.patch(KUBEVIRTS, p.name, p.patch, patch_type="json", namespace=p.namespace)

        def gave_up(last: ClusterError, sent: int) -> RblnError:
            lost = writes.unknown(last)
            what = ("its last reply was lost and the CR read back does not hold the change" if lost
                    else "nothing was changed")
            why = (f"{LOST_REPLY} and the KubeVirt CR read back does not hold the change" if lost
                   else one_line(last))
            return Conflict(f"{where} kept changing while we wrote it: gave up after {sent} attempts, {what}; rerun "
                            f"once the other writer is done (last answer: {why})", status=409, reason="Conflict")

        done = writes.settle(self.kube, next_write, what=where, retry=is_conflict,
                             read=lambda: self.kube.get(KUBEVIRTS, plan.name, namespace=plan.namespace),
                             attempts=self.options.max_attempts, backoff_s=self.options.retry_backoff_s,
                             clock=self.clock, on_retry=self.on_retry, dry_run=self.options.server_dry_run,
                             exhausted=gave_up)
        if done.changed:  # a patch went through, or one whose reply was lost is found applied: the plan sent
            return sent_plan[0], True, done.sent
        return current[0], False, done.sent  # nothing to do (someone else may have made the change meanwhile)

