"""Documents: what each result says to programs (`-o json|yaml|jsonpath`, custom-columns, --sort-by), declared once.

One mechanism for the JSON contract (issue 29): a result's document is built either

- by a Shape declared here, its keys in the order docs/output.md lists them, each read from the result by an
  attribute path (`"ref.namespace"`), a function of the result, or a part: `Of(path, SHAPE)` (a nested object, null
  when the value is None), `Each(path, SHAPE)` (a list of them), `Said(path)` (library messages, a Remedy spelt
  for the command running now by the `say` the CLI passes); or
- generically (`to_data`): a result type with a Shape of its own (`_shaped`: VfioStatus, the preflight report and
  its parts) by that Shape, any other dataclass by its fields in camelCase.

Every value is made plain JSON by to_data (tuples as lists, enums as their values). The CLI's tables are derived from
these documents (rblnctl.cli.output.Column: a column is a path in the document, or a function of it), so a table and
the JSON cannot disagree. The library owns this module and it sits above every library package (below the CLI):
results are read by duck typing, and the few it must know by type (`_shaped`, and node records) are imported when
first needed, so importing it costs no package; no library package imports it (tests/test_layers.py).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import operator
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import one_line
from rblnctl.remedy import Remedy

Say = Callable[[Any], str]


def camel(name: str) -> str:
    """snake_case -> camelCase (`vfio_manager` -> `vfioManager`), as Kubernetes spells JSON keys."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def to_data(obj: Any) -> Any:
    """Plain JSON values: a result type's own Shape (`_shaped`) when it has one; dataclass fields in camelCase.

    Only field names are renamed: dictionary keys are data (labels, resource names) and stay as they are.
    """
    if obj is None or type(obj) in _PLAIN:  # most values: one test (a 1,000-node preflight has 35,000 of them)
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    shape = _shaped().get(type(obj))
    if shape is not None:
        return shape(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {camel(f.name): to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.name.startswith("_")}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_data(v) for v in obj]
    return obj


_PLAIN = (str, int, float, bool)


def attr(obj: Any, path: str) -> Any:
    """`a.b.c` of obj; None as soon as a step is None."""
    for step in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, step)
    return obj


class Part:
    """A key's value that is more than one attribute (subclasses: Of, Each, Said)."""

    def read(self, obj: Any, say: Say) -> Any:
        raise NotImplementedError


class Shape:
    """A document (or one object in it): its keys in order, each with where its value comes from."""

    def __init__(self, **keys: str | Callable[[Any], Any] | Part) -> None:
        self.keys = tuple(keys.items())
        self._read = tuple((key, _reader(getter)) for key, getter in self.keys)

    def __call__(self, obj: Any, say: Say = str) -> dict:
        return {key: read(obj, say) for key, read in self._read}

    def __or__(self, other: Shape) -> Shape:
        """This shape's keys, then the other's (one document that extends another)."""
        return Shape(**dict(self.keys + other.keys))


def _reader(getter: Any) -> Callable[[Any, Say], Any]:
    """How one key is read, decided once per Shape (a 1,000-node preflight reads 35,000 values)."""
    if isinstance(getter, Part):
        return getter.read
    get: Callable[[Any], Any]
    if isinstance(getter, str):
        get = operator.attrgetter(getter) if "." not in getter else lambda obj: attr(obj, getter)
    else:
        get = getter

    def read(obj: Any, say: Say) -> Any:
        value = get(obj)
        return value if value is None or type(value) in _PLAIN else to_data(value)

    return read


class Fields(Shape):
    """The generic document of a dataclass (to_data: its fields in camelCase, in their order), with some keys read
    otherwise (`warnings=Said("warnings")`): for a result whose fields are its contract, declared once."""

    def __call__(self, obj: Any, say: Say = str) -> dict:
        doc = to_data(obj)
        for key, read in self._read:
            doc[key] = read(obj, say)
        return doc


class Of(Part):
    """A nested object: `shape` of the value at `path` (or a function's), null when that is None."""

    def __init__(self, path: str | Callable[[Any], Any], shape: Shape) -> None:
        self.path, self.shape = path, shape

    def read(self, obj: Any, say: Say) -> Any:
        value = attr(obj, self.path) if isinstance(self.path, str) else self.path(obj)
        return None if value is None else self.shape(value, say)


class Each(Part):
    """A list of objects: `shape` of each item at `path` (an empty list for None)."""

    def __init__(self, path: str | Callable[[Any], Any], shape: Shape) -> None:
        self.path, self.shape = path, shape

    def read(self, obj: Any, say: Say) -> Any:
        items = attr(obj, self.path) if isinstance(self.path, str) else self.path(obj)
        return [self.shape(i, say) for i in items or ()]


class Said(Part):
    """Library messages (warnings that may be a Remedy naming a command): each as the CLI spells it (`say`)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self, obj: Any, say: Say) -> Any:
        return [say(m) for m in attr(obj, self.path) or ()]


class Spelt(Part):
    """One library message (a Remedy, or None: null), as the CLI spells it (`say`)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self, obj: Any, say: Say) -> Any:
        value = attr(obj, self.path)
        return None if value is None else say(value)


class Argv(Part):
    """A Remedy's command as the argv to run (`say.argv`, the CLI's spelling of it); null without a command, for
    another program's (kubectl, helm: their words say it), or when the caller spells no commands."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self, obj: Any, say: Say) -> Any:
        command = attr(obj, self.path)
        argv = getattr(say, "argv", None)
        return None if command is None or command.program is not None or argv is None else argv(command)


class ArgvEnv(Argv):
    """Beside an Argv: the placeholders of secrets in that argv (`$(TOKEN)`), each with what it stands for
    (`{"TOKEN": "your --token"}`, `say.env`); {} when it has none, null when there is no argv."""

    def read(self, obj: Any, say: Say) -> Any:
        command = attr(obj, self.path)
        env = getattr(say, "env", None)
        return None if command is None or command.program is not None or env is None else env(command)


def body(shape: Shape, say: Say = str, **parts: Any) -> dict:
    """A document body from several results (`plan=`, `result=`): `shape` over them as one object."""
    return shape(SimpleNamespace(**parts), say)


# -- shared pieces ---------------------------------------------------------------------------------------------

class _BlockerMessage(Part):
    """A blocker's message and, when it names one, its remedy as the CLI spells it (`say`): a document keeps what the
    refusal said to do."""

    def read(self, obj: Any, say: Say) -> Any:
        remedy = getattr(obj, "remedy", None)
        return obj.message if remedy is None else f"{obj.message}; {say(remedy)}"


BLOCKER = Shape(message=_BlockerMessage(), override="override")
REF = Shape(namespace="namespace", name="name")  # a VmRef
OBJECT_REF = Shape(namespace="namespace", name="name", uid="uid")  # an evicted pod
DEVICE = Shape(name="name", method="method", resource="resource", claim="claim", request="request")  # NpuDevice

# -- vm attach | detach: VmNpuChange ------------------------------------------------------------------------------

CHANGE_PLAN = Shape(
    action="target.action", method="method", resource="resource", deviceClass="device_class",
    npusBefore="npus_before", npusAfter="npus_after",
    devicesBefore=Each("devices_before", DEVICE), devicesAfter=Each("devices_after", DEVICE),
    added="added", removed="removed", template="template",
    templateCreate=lambda p: (p.template_create or {}).get("metadata", {}).get("name"),
    templatesDelete="templates_delete", templatesKept="templates_kept", running="running", node="node",
    restart="restart", nextRestart="next_restart", runningNpus="running_npus", start="start", patch="patch",
    noop="noop", warnings=Said("warnings"), blockers=Each("blockers", BLOCKER))
CHANGE_RESULT = Shape(
    changed="changed", attempts="attempts", templateCreated="template_created", templatesDeleted="templates_deleted",
    templatesKept="templates_kept", restarted="restarted", ready="ready", serverDryRun="server_dry_run",
    leftStopped="left_stopped", startCommand="start_command", notRestarted="not_restarted")
VM_NPU_CHANGE = Shape(vm=Of("plan.vm", REF), plan=Of("plan", CHANGE_PLAN), result=Of("result", CHANGE_RESULT))

# -- vm list: VmNpuList ------------------------------------------------------------------------------------------

VM_NPU_ITEM = Shape(
    namespace="ref.namespace", name="ref.name", kind="kind", status="status", node="node", method="method",
    npus="npus", devices=Each("devices", DEVICE),
    runningNpus=lambda e: e.holds if e.running_devices is not None else None,
    restartPending="restart_pending",
    restartRequired=Of("restart_required", Shape(message="message", since="since")),
    claims="claims", claimCollisions="collisions")
VM_NPU_LIST = Shape(namespace="listing.namespace", items=Each("items", VM_NPU_ITEM))


def restart_marker(item: dict) -> str | None:
    """What a VmNpuList item's STATUS adds (rblnctl.vm.listing.VmNpuEntry.restart_marker, from its document)."""
    if item["restartPending"]:
        return "RestartPending"
    return C.VM_RESTART_REQUIRED if item["restartRequired"] is not None else None


# -- vm fit: VmFit -----------------------------------------------------------------------------------------------

FIT_NODE = Shape(name="node", mode="mode", eligible="eligible", allocatable="allocatable", allocated="allocated",
                 free="free", fits="fits", reason=Spelt("reason"), holders="holders", tainted="tainted")
VM_FIT = Shape(npus="npus", count="count", method="method", resource="kind", fits="fits", ok="ok", never="never",
               most=lambda f: {"npus": f.most[0], "node": f.most[1]} if f.most else None,
               nodes=Each("nodes", FIT_NODE), warnings=Said("warnings"), notes="notes")

# -- vm start | stop | restart: VmLifecycle -------------------------------------------------------------------------

VM_STATE = Shape(
    printableStatus="printable_status", runStrategy="run_strategy", ready="ready",
    vmi=lambda st: None if st.vmi_phase is None else {"uid": st.vmi_uid, "phase": st.vmi_phase or None,
                                                      "node": st.node, "ready": st.vmi_ready},
    stateChangeRequests="requests", launchers="launchers",
    npus=Of("attachment", Shape(wanted="wanted", held="held", launcherPod="launcher", attached="attached",
                                missing="missing", pendingChange="pending_change")))
VM_LIFECYCLE = Shape(
    vm=Of("plan.vm", REF), action="plan.action",
    plan=Of("plan", Shape(request="send", why="why", noop="noop", wait="wait", warnings=Said("warnings"),
                          blockers=Each("blockers", BLOCKER))),
    before=Of("plan.before", VM_STATE),
    result=Of("result", Shape(request="sent", changed="changed", waited="waited", serverDryRun="server_dry_run",
                              state=Of("state", VM_STATE), overtaken="overtaken")))

# -- node drain | set-mode: NodeDrain, ModeSwitch (one node, and each item of a pool's list) -----------------------

POD = Shape(namespace="namespace", name="name", uid="uid", action=lambda e: str(e.action), reason="reason",
            npu="npu", vmi="vmi", blockers=Each("blockers", BLOCKER))
DRAIN_PLAN = Shape(node="node", scope="scope", cordon="cordon", unschedulable="unschedulable",
                   pods=Each(lambda p: list(p.evict) + list(p.ignored), POD),
                   blockers=Each("blockers", BLOCKER), warnings=Said("warnings"))
DRAIN_RESULT = Shape(cordoned="cordoned", evicted=Each("evicted", OBJECT_REF), rounds="rounds",
                     serverDryRun="server_dry_run")
NODE_DRAIN = Shape(node="plan.node", plan=Of("plan", DRAIN_PLAN), result=Of("result", DRAIN_RESULT))
MODE_PLAN = Shape(
    node="node", target="target", currentMode="current_mode", fromMode="from_mode", modeLabel="mode_label",
    noop="noop", resume="resume", converged="converged", unschedulable="unschedulable", started="started",
    steps=Each("steps", Shape(step=lambda s: str(s.step), detail="detail")), vms="vms",
    pods=Each(lambda p: [] if p.drain is None else list(p.drain.evict) + list(p.drain.ignored), POD),
    pending="pending", blockers=Each("blockers", BLOCKER), warnings=Said("warnings"))
MODE_RESULT = Shape(previousMode="previous_mode", mode="mode", changed="changed", resumed="resumed",
                    cordoned="cordoned", uncordoned="uncordoned", evicted=Each("evicted", OBJECT_REF),
                    serverDryRun="server_dry_run", elapsedSeconds=lambda r: round(r.elapsed_s, 3))
MODE_SWITCH = Shape(node="plan.node", plan=Of("plan", MODE_PLAN), result=Of("result", MODE_RESULT))

# -- node set-mode | drain over a pool: ModeSwitchList, NodeDrainList ---------------------------------------------


def document(kind: str, body: Any) -> dict:
    """A versioned document: apiVersion and kind first, then the body's fields (a Shape's dict, or any result
    to_data makes a mapping of)."""
    data = to_data(body)
    if not isinstance(data, dict):
        raise TypeError(f"a {kind} document needs a mapping body, not {type(data).__name__}")
    return {"apiVersion": C.OUTPUT_API_VERSION, "kind": kind, **data}


def versioned(kind: str, shape: Shape) -> Shape:
    """A whole document: apiVersion and kind first, then the shape's keys (document() for a shape in a list)."""
    return Shape(apiVersion=lambda _: C.OUTPUT_API_VERSION, kind=lambda _: kind) | shape


def _pool_items(x: Any) -> list[SimpleNamespace]:
    """One item per node of a pool: its plan (None: it could not be planned), result, outcome and error."""
    done = {i.node: i for i in x.result.items} if x.result is not None else {}
    out = []
    for node in x.plan.nodes:
        item = done.get(node)
        plan = item.plan if item is not None and item.plan is not None else x.plan.plans.get(node)
        result = item.result if item is not None and plan is not None else None
        error = item.error if item is not None else x.plan.errors.get(node)
        out.append(SimpleNamespace(node=node, plan=plan, result=result, item=item, error=error))
    return out


# an item's outcome (`item`: the pool's ItemOutcome, None before it ran; `error`: what stopped the node)
POOL_OUTCOME = Shape(outcome=lambda x: None if x.item is None else str(x.item.outcome),
                     error=lambda x: None if x.error is None else one_line(x.error),
                     durationSeconds="item.duration_s", evicted=Each("item.evicted", OBJECT_REF))


def pool_list(operation: str) -> Shape:
    """The body of a ModeSwitchList (operation set-mode) or NodeDrainList: the pool's settings, then per node a
    ModeSwitch or NodeDrain document (plan and result null for a node that could not be planned) and its outcome."""
    kind, plan, result = ("ModeSwitch", MODE_PLAN, MODE_RESULT) if operation == "set-mode" else \
        ("NodeDrain", DRAIN_PLAN, DRAIN_RESULT)
    item = versioned(kind, Shape(node="node", plan=Of("plan", plan), result=Of("result", result)) | POOL_OUTCOME)
    return Shape(selector="plan.selector", maxUnavailable="plan.max_unavailable",
                 continueOnError="plan.continue_on_error", warnings=Said("plan.pool_warnings")) \
        | (Shape(target="plan.target") if operation == "set-mode" else Shape()) | Shape(items=Each(_pool_items, item))


# -- node set-mode --rehearse: ModeRehearsal (rblnctl.node.rehearse) -------------------------------------------------

REHEARSAL_WAVE = Fields(estimateSeconds="estimate_s")
MODE_REHEARSAL = Fields(waves=Each("waves", REHEARSAL_WAVE), poolBlockers=Each("pool_blockers", BLOCKER),
                        poolWarnings=Said("pool_warnings"), estimateSeconds="estimate_s")

# -- node history: NodeHistory --------------------------------------------------------------------------------------

HISTORY_RECORD = Shape(target="target", **{"from": lambda r: r.from_mode or None}, started="started",
                       step=lambda r: str(r.step), cordonedByRblnctl="cordoned_by_rblnctl", by="by")
HISTORY_ENTRY = Shape(run="run", action="action", user="user", started="started", finished="finished",
                      **{"from": "from_mode"}, to="to_mode", result="result", message="message", source="source")
NODE_HISTORY = Shape(node="node", nodeExists="node_exists", eventsRead="events_read",
                     record=Of("record", HISTORY_RECORD), items=Each("entries", HISTORY_ENTRY))

# -- node list, status, policy show: NpuNodeList, ClusterStatus, ClusterPolicy -------------------------------------


def unfinished_switch(n: Any) -> Any:
    """The unfinished mode switch recorded on NPU node `n` (rblnctl.node.record.SwitchRecord), or None."""
    from rblnctl.node.record import parse_record

    try:
        return parse_record(getattr(n, "switch_record", None))
    except ValueError:
        return None


def _uses(n: Any) -> list[SimpleNamespace]:
    """A node's NPU resources, each with whether the node's allocations could be counted."""
    c = n.capacity
    return [] if c is None else [SimpleNamespace(u=u, known=c.known) for u in c.resources]


NPU_USE = Shape(name="u.name", dra="u.dra", allocatable="u.allocatable",
                allocated=lambda x: x.u.allocated if x.known else None, free=lambda x: x.u.free if x.known else None,
                holders="u.holders", tainted=Each("u.tainted", Shape(device="device", taint="taint")))
INIT_HOLD = Shape(namespace="namespace", pod="pod", component="component", initContainer="container", state="state",
                  startedAt="started", status="status", restarts="restarts", stuck="stuck", waitsFor="waits_for",
                  lastLogLine="log")  # rblnctl.operator.components.InitHold
SWITCH = Shape(**{"from": lambda r: r.from_mode or None}, to="target", step=lambda r: str(r.step),
               started="started", user="by")  # as node history names the parts of a SwitchRecord
NPU_NODE = Shape(
    name="name", mode="mode", modeLabel="mode_label", modeLabelValid="mode_label_valid", ready="ready",
    schedulable="schedulable", deploySkip="deploy_skip", components="components", pausedComponents="paused",
    resources="resources", product="product", npuCount="count", npuAllocatable="capacity.allocatable",
    npuAllocated="capacity.allocated", npuFree="capacity.free", npuResources=Each(_uses, NPU_USE), family="family",
    labels="labels", initHeld=Each("holds", INIT_HOLD), switch=Of(unfinished_switch, SWITCH))
NPU_NODE_LIST = Shape(items=Each("nodes", NPU_NODE))

# a policy with the operator `release` it runs under: vmMethod counts only a VM allocator that release makes serve
# VMs (rblnctl.operator.release); without one, the policy's own say
POLICY = Shape(name="p.name", workloadType="p.workload_type", vmMethod=lambda x: x.p.vm_method_on(x.release),
               enabled=lambda x: {k: bool(v) for k, v in x.p.enabled.items()}, state="p.state")


def with_release(p: Any, release: Any = None) -> SimpleNamespace | None:
    """A policy (None: none) and the release POLICY reads it under."""
    return None if p is None else SimpleNamespace(p=p, release=release)


CLUSTER_STATUS = Shape(
    kubernetesVersion="server_version", operatorNamespace="operator_namespace",
    policy=Of(lambda st: with_release(st.policy, st.release), POLICY),
    kubevirt=Each("kubevirt", Shape(name="name", namespace="namespace", phase="phase", version="version",
                                    featureGates="feature_gates", disabledFeatureGates="disabled_feature_gates")),
    modes="modes", nodes=Each("nodes", NPU_NODE), npuVms="npu_vms", notes="notes")
CLUSTER_POLICY = Shape(
    crdInstalled="crd_installed", operatorNamespace="namespace", active=Of(lambda r: with_release(r.active), POLICY),
    problems=lambda r: r.active.admission_problems() if r.active else [],
    components=Each("components", Shape(
        component="component", policyKey="key", enabled="enabled", state="state", ready="ready",
        daemonSets=Each("daemonsets", Shape(namespace="namespace", name="name", desired="desired", ready="ready",
                                            unavailable="unavailable", allReady="ready_all")))),
    ignored=Each(lambda r: [with_release(p) for p in r.ignored], POLICY), nodeModes="modes", notes="notes")

# -- policy set-method: MethodChange -----------------------------------------------------------------------------

METHOD_PLAN = Shape(
    **{"from": "current"}, to="target", switchesBefore="edit.before", switchesAfter="edit.after",
    patch=lambda p: p.edit.patch or None,
    prerequisites=Each("prerequisites", Shape(name="name", ok="ok", detail="detail")),
    vmsHoldingNpus=Each("holders", Shape(namespace="namespace", name="name", holds="holds")),
    vmPassthroughNodes="vm_nodes", deviceClass="device_class", convertVms="convert",
    conversions=Each("conversions", Shape(namespace="vm.namespace", name="vm.name", npus="npus", devices="devices",
                                          leftTemplate="left_template")),
    noop="noop",
    admissionRules=Of("rules", Shape(source="source", assumed="assumed", rules="ids", unknown="unknown")),
    blockers=Each("blockers", BLOCKER), warnings=Said("warnings"))
METHOD_RESULT = Shape(
    changed="changed", attempts="attempts", waited="waited", converged="converged", converted="converted",
    conversions=Each("conversions", Shape(namespace=lambda o: o.name.split("/", 1)[0],
                                          name=lambda o: o.name.split("/", 1)[1], state="state",
                                          reason=lambda o: o.reason or None)),
    elapsedSeconds="elapsed_s", serverDryRun="server_dry_run")
METHOD_CHANGE = Shape(policy="plan.policy", plan=Of("plan", METHOD_PLAN), result=Of("result", METHOD_RESULT))

# -- kubevirt status | enable-gates | disable-gates | permit-devices | migrate-resources ---------------------------

KUBEVIRT_STATUS = Fields()  # rblnctl.kubevirt.status.KubeVirtStatus, field by field (notes spelt by the CLI before)
KUBEVIRT_EDIT = Shape(  # KubeVirtGateChange, KubeVirtDeviceChange: the GatePlan or DevicePlan field by field
    kubevirt=Of("plan", Shape(name="name", namespace="namespace")), plan=Of("plan", Fields(warnings=Said("warnings"))),
    result=Of("result", Shape(changed="changed", attempts="attempts", serverDryRun="server_dry_run")))

FIELD_CHANGE = Shape(field="field", old="old", new="new", detail=lambda c: c.detail or None, kept="kept")
MIGRATION_PLAN = Shape(
    given="given",
    renames=Each("renames", Shape(old="old", new="new", source=lambda r: str(r.source), evidence="evidence",
                                  stillAdvertisedBy="still_advertised")),
    kubevirtChanges=Each("kubevirt.changes", FIELD_CHANGE), kubevirtPatch="kubevirt.patch",
    virtualMachines=Each("vms", Shape(namespace="namespace", name="name", running="running",
                                      changes=Each("changes", FIELD_CHANGE), patch="patch")),
    instances=Each("instances", Shape(namespace="namespace", name="name", node="node", names="names",
                                      virtualMachine="vm")),
    unmapped=Each("unmapped", Shape(name="name", reason="reason", users="users")),
    advertised="advertised", scannedVirtualMachines="scanned_vms", scannedInstances="scanned_instances",
    noop="noop", blockers=Each("blockers", BLOCKER), warnings=Said("warnings"))
MIGRATION_RESULT = Shape(
    kubevirtChanged="kubevirt_changed", changed="changed", gone="gone", restartNeeded="restart_needed",
    retries="retries", serverDryRun="server_dry_run",
    objects=Each("outcomes", Shape(kind="kind", namespace=lambda x: x.name.split("/", 1)[0],
                                   name=lambda x: x.name.split("/", 1)[1], state="state",
                                   reason=lambda x: x.reason or None)))
RESOURCE_MIGRATION = Shape(kubevirt=Of("plan.kubevirt", Shape(name="name", namespace="namespace")),
                           plan=Of("plan", MIGRATION_PLAN), result=Of("result", MIGRATION_RESULT))

# -- vfio status | bind | unbind | recover: VfioStatus, VfioChange -------------------------------------------------

VFIO_DEVICE = Shape(
    bdf="bdf", ids="ids", model="model", function="function", driver="driver", driverOverride="driver_override",
    driverOverrideKnown="driver_override_known", iommuGroup="iommu_group",
    groupMembers=Each("group_members", Shape(bdf="bdf", ids="ids", driver="driver", bridge="bridge",
                                             blocksGroup="blocks_group")),
    numaNode="numa_node", vfioDevice="vfio_device", vfioDevicePresent="vfio_device_present",
    holders=Each("holders", Shape(pid="pid", command="command", path="path", how="how", certain="certain")))
VFIO_STATUS = Shape(searched="searched", warnings="warnings", devices=Each("devices", VFIO_DEVICE))  # VfioStatus
VFIO_CHANGE = Shape(operation=lambda x: str(x.operation), devices=Each("results", Shape(
    bdf="bdf", action=lambda r: str(r.action), fromDriver="from_driver", toDriver="to_driver",
    status=lambda r: str(r.status), message="message")))

# -- preflight: PreflightReport ----------------------------------------------------------------------------------

class _CheckRemedy(Part):
    """A finding's remedy as the CLI spells it (`say`): its words with its command placed ("" when none)."""

    def read(self, obj: Any, say: Say) -> Any:
        return say(obj.remedy) if isinstance(obj.remedy, Remedy) else obj.remedy


class _CheckCommand(Part):
    """A finding's one command as a shell line, runnable as given: a Remedy's command as the CLI spells it
    (`say.line`; another program's as given), else the text remedy's `remedy_command` ("" when none)."""

    def read(self, obj: Any, say: Say) -> Any:
        remedy = obj.remedy
        if not isinstance(remedy, Remedy) or remedy.command is None:
            return obj.remedy_command
        if remedy.command.program is not None:
            return remedy.command.line
        line = getattr(say, "line", None)
        return line(remedy.command) if line is not None else ""


CHECK_RESULT = Shape(id="id", title="title", scope="scope", status="status", evidence="evidence",
                     remedy=_CheckRemedy(), remedyCommand=_CheckCommand())
PREFLIGHT_SUMMARY = Shape(total="total", passed="passed", warned="warned", failed="failed", skipped="skipped",
                          method="method", strict="strict", ok="ok")
PREFLIGHT_REPORT = Shape(target="target", method="method", methodNote="method_note",
                         checks=Each("checks", CHECK_RESULT), summary=Of("summary", PREFLIGHT_SUMMARY), nodes="nodes")

# -- version: Version ----------------------------------------------------------------------------------------------

VERSION = Shape(client=Of("me", Shape(version="version", commit="commit", python="python")),
                server=lambda x: None if x.components is None else {
                    c.name: {"version": c.version, "source": c.source, "note": c.note} for c in x.components})

# -- vm diagnose: VmDiagnosis --------------------------------------------------------------------------------------

DIAGNOSIS_LINK = Shape(name="name", title="title", status="status", failure="failure", evidence="evidence",
                       remedy=Spelt("remedy"), remedyCommand=Argv("remedy.command"),
                       remedyEnv=ArgvEnv("remedy.command"))
VM_DIAGNOSIS = Shape(vm=Of("vm", REF), method="method", npus="npus", ok="ok",
                     broken=lambda d: d.broken.name.value if d.broken else None,
                     links=Each("links", DIAGNOSIS_LINK), warnings=Said("warnings"))


@functools.cache
def _shaped() -> dict[type, Shape]:
    """The result types whose document is a Shape of theirs wherever they are met (inside another document too).
    Imported on first use: when such a value exists its module is loaded already."""
    from rblnctl.host.vfio.model import VfioStatus
    from rblnctl.preflight.model import CheckResult, PreflightReport, Summary

    return {VfioStatus: VFIO_STATUS, CheckResult: CHECK_RESULT, Summary: PREFLIGHT_SUMMARY,
            PreflightReport: PREFLIGHT_REPORT}
