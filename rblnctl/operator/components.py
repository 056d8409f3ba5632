"""Operator components: what each mode deploys, which component a deploy label or a pod belongs to, and whether a
component pod is held in one of its init containers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from rblnctl import constants as C
from rblnctl.operator.partition import gate_component, gate_wait

# rbln-daemon (chart v0.2.1-v0.3.0) was renamed rbln-smd; for "which components run here" they are one.
_CANONICAL = {C.COMP_SMD: C.COMP_DAEMON}


def canonical(component: str) -> str:
    """One name per component whatever the release calls it (`rbln-smd` -> `rbln-daemon`)."""
    return _CANONICAL.get(component, component)


def mode_components(mode: str) -> tuple[str, ...]:
    """The components whose deploy labels the operator sets on a node in `mode` (any release)."""
    return C.VM_COMPONENTS if mode == C.MODE_VM else C.CONTAINER_COMPONENTS


def exclusive_components(mode: str) -> tuple[str, ...]:
    """Components of `mode` that the other mode never deploys (their labels and pods must go on a switch)."""
    other = set(mode_components(C.MODE_CONTAINER if mode == C.MODE_VM else C.MODE_VM))
    return tuple(c for c in mode_components(mode) if c not in other)


def deploy_label(component: str) -> str:
    """`rebellions.ai/npu.deploy.<component>`."""
    return C.DEPLOY_LABEL_PREFIX + component


@dataclass(frozen=True, kw_only=True)
class DeployLabels:
    """A node's `rebellions.ai/npu.deploy.*` labels, read as the operator reads them."""

    values: dict[str, str]  # component -> raw value (deploy.skip excluded)
    skip: bool  # rebellions.ai/npu.deploy.skip=true: the operator deploys nothing here

    def is_set(self, component: str) -> bool:
        """Only the value `true` selects the component's DaemonSet (its nodeSelector requires it)."""
        return any(self.values.get(c) == C.DEPLOY_TRUE for c in _names(component))

    def opted_out(self, component: str) -> bool:
        """The node carries the component's label with `false`: the user keeps it off this node."""
        return any(self.values.get(c) == C.DEPLOY_OPT_OUT for c in _names(component))

    def paused(self) -> list[str]:
        """Components k8s-driver-manager has paused (`paused-for-driver-upgrade`): the operator is mid-work."""
        return sorted(c for c, v in self.values.items() if v == C.DEPLOY_PAUSED)

    @property
    def driver_preinstalled(self) -> bool:
        """`npu.deploy.driver=pre-installed` (the partition line): the host's own driver, no driver pod here."""
        return self.values.get(C.COMP_DRIVER) == C.DEPLOY_PREINSTALLED

    def set_components(self) -> list[str]:
        """Components whose label is `true`, in canonical names, sorted."""
        return sorted({canonical(c) for c, v in self.values.items() if v == C.DEPLOY_TRUE})


def _names(component: str) -> tuple[str, ...]:
    component = canonical(component)
    return (component, C.COMP_SMD) if component == C.COMP_DAEMON else (component,)


def deploy_labels(labels: dict) -> DeployLabels:
    """Read the deploy labels of a node's metadata.labels."""
    values = {k[len(C.DEPLOY_LABEL_PREFIX):]: str(v) for k, v in (labels or {}).items()
              if k.startswith(C.DEPLOY_LABEL_PREFIX) and k != C.DEPLOY_SKIP_LABEL}
    return DeployLabels(values=values, skip=(labels or {}).get(C.DEPLOY_SKIP_LABEL) == "true")


def _controller(pod: Mapping) -> dict | None:
    return next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


def daemonset_pod(pod: Mapping) -> bool:
    """Whether a DaemonSet controls the pod (every operator component's pod; component_of_pod's first test)."""
    owner = _controller(pod)
    return owner is not None and owner.get("kind") == "DaemonSet"


def component_of_pod(pod: dict, *, base_names: tuple[str, ...] = (C.OPERATOR_BASE_NAME,)) -> str | None:
    """The operator component a pod runs, or None when it is not an operator DaemonSet pod.

    Every release agrees on one thing: a component pod is controlled by the DaemonSet named
    `<spec.name>-<component>` (chart v0.3.0 internal/scope/patch/*.go; later releases always
    `rbln-<component>`), except chart v0.3.0's `rbln-daemon`. That is what is checked first. The
    labels are hints for what the name does not tell (later releases' rbln-smd and driver DaemonSets
    are named after their RBLNDriver): `app.kubernetes.io/component=<component>` (later releases),
    `app: <base>-<component>` (chart v0.3.0). A pod not controlled by a DaemonSet is never a component.
    The caller restricts the pods to the operator's namespace.
    """
    if not daemonset_pod(pod):
        return None
    owner = _controller(pod) or {}
    name = str(owner.get("name") or "")
    known = set(C.OPERATOR_COMPONENTS)
    if name in C.FIXED_DAEMONSET_NAMES:
        return canonical(C.FIXED_DAEMONSET_NAMES[name])
    for base in base_names:
        if name.startswith(base + "-") and name[len(base) + 1:] in known:
            return canonical(name[len(base) + 1:])
    labels = (pod.get("metadata") or {}).get("labels") or {}
    hint = labels.get(C.COMPONENT_LABEL)
    if hint == C.DRIVER_COMPONENT_LABEL_VALUE:
        return C.COMP_DRIVER
    if hint in known:
        return canonical(hint)
    app = str(labels.get(C.APP_LABEL) or "")
    for base in base_names:
        if app.startswith(base + "-") and app[len(base) + 1:] in known:
            return canonical(app[len(base) + 1:])
    return None


def component_of_daemonset(ds: dict, *, base_names: tuple[str, ...] = (C.OPERATOR_BASE_NAME,)) -> str | None:
    """The operator component a DaemonSet deploys (None: not one), by the rule component_of_pod applies to its pods."""
    meta = ds.get("metadata") or {}
    template = ((ds.get("spec") or {}).get("template") or {}).get("metadata") or {}
    pod = {"metadata": {"labels": template.get("labels") or meta.get("labels") or {},
                        "ownerReferences": [{"kind": "DaemonSet", "name": meta.get("name", ""), "controller": True}]}}
    return component_of_pod(pod, base_names=base_names)


@dataclass(frozen=True, kw_only=True)
class DaemonSetState:
    """A component DaemonSet's rollout as its status reports it."""

    namespace: str
    name: str
    desired: int
    ready: int
    unavailable: int

    @property
    def ready_all(self) -> bool:
        """The operator's rule: desired > 0, every pod ready, none unavailable (v0.3.0
        internal/scope/patch/vfio_manager.go; a DaemonSet with no pod scheduled is never ready)."""
        return self.desired > 0 and self.ready == self.desired and self.unavailable == 0


def daemonset_state(ds: dict) -> DaemonSetState:
    """Read a DaemonSet's status counts."""
    meta = ds.get("metadata") or {}
    st = ds.get("status") or {}
    return DaemonSetState(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                          desired=int(st.get("desiredNumberScheduled") or 0), ready=int(st.get("numberReady") or 0),
                          unavailable=int(st.get("numberUnavailable") or 0))


@dataclass(frozen=True, kw_only=True)
class InitHold:
    """A component pod that has not started its main container: it is held in one of its init containers.

    The one place that decides it (init_hold); set-mode's wait and its timeout, `node list`, `status` and
    `preflight` all ask it. `status` is the pod's STATUS as kubectl prints it (`Init:0/2`,
    `Init:CrashLoopBackOff`, `Init:Error`); `waits_for` what that init container waits for where the operator's
    source says (constants INIT_WAITS); `stuck` when it cannot finish as things are: it waits for something that
    never comes on this node's mode, or it failed.
    """

    namespace: str
    pod: str
    component: str
    container: str  # the init container it is in
    state: str  # running | waiting (<reason>) | terminated (<reason>, exit code N)
    started: str | None  # when that init container started (RFC 3339), if it runs
    status: str  # kubectl's STATUS column: Init:0/2
    restarts: int = 0
    waits_for: str | None = None
    stuck: bool = False
    log: str | None = None  # its last log line, when it could be read (rblnctl.operator.cluster.with_init_logs)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.pod}"

    def state_text(self, now: datetime | None = None) -> str:
        """`running for 3m12s`, `running since 2026-12-04T06:59:20Z`, `waiting (CrashLoopBackOff), 4 restarts`."""
        text = self.state
        if self.state == "running" and self.started:
            age = _age(self.started, now)
            text += f" for {age}" if age else f" since {self.started}"
        if self.restarts:
            text += f", {self.restarts} restart{'s' if self.restarts != 1 else ''}"
        return text

    def describe(self, now: datetime | None = None, *, pod: bool = True) -> str:
        """`pod rbln-system/x (sandbox-device-plugin) is stuck in its init container driver-ready (running for 3m,
        Init:0/2): it waits for ...; last log line: "..."` (`pod=False`: from `stuck in` on)."""
        where = "is stuck in" if self.stuck else "is still in"
        text = (f"{where} its init container {self.container} ({self.state_text(now)}, {self.status})"
                + (f": {self.waits_for}" if self.waits_for else ""))
        if self.log:
            text += f"; last log line: {self.log!r}"
        return f"pod {self.ref} ({self.component}) {text}" if pod else text


def _age(started: str, now: datetime | None) -> str | None:
    """`3m12s` since `started` (RFC 3339) at `now`; None without `now` or an unreadable time."""
    if now is None:
        return None
    try:
        then = datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    secs = max(0, int((now - then).total_seconds()))
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    return (f"{h}h{m}m" if h else f"{m}m{s}s" if m else f"{s}s")


def kubectl_status(pod: Mapping) -> str:
    """The pod's STATUS as `kubectl get pods` prints it, as far as its init containers decide it (`Init:0/2`,
    `Init:CrashLoopBackOff`, `Init:Error`, `Init:ExitCode:1`); else its phase.

    kubernetes/kubernetes pkg/printers/internalversion/printers.go printPod: the init container statuses in
    order; one that terminated with exit code 0 is done, a started restartable (sidecar) one too; the first
    other one decides: terminated -> `Init:<reason>` (or `Init:Signal:N` / `Init:ExitCode:N`), waiting with a
    reason other than PodInitializing -> `Init:<reason>`, else `Init:<index>/<number of init containers>`.
    """
    st = pod.get("status") or {}
    spec = pod.get("spec") or {}
    restartable = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    for i, cs in enumerate(st.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and int(term.get("exitCode") or 0) == 0:
            continue
        if cs.get("name") in restartable and cs.get("started"):
            continue
        if term is not None:
            if term.get("reason"):
                return f"Init:{term['reason']}"
            if term.get("signal"):
                return f"Init:Signal:{term['signal']}"
            return f"Init:ExitCode:{term.get('exitCode')}"
        if wait is not None and wait.get("reason") and wait.get("reason") != "PodInitializing":
            return f"Init:{wait['reason']}"
        return f"Init:{i}/{len(spec.get('initContainers') or [])}"
    return str(st.get("phase") or "Unknown")


def init_hold(component: str, pod: Mapping, *, vm_node: bool, node_labels: Mapping | None = None
              ) -> InitHold | None:
    """The init container `pod` is held in (None when its init containers are done, or it has none).

    `vm_node`: the pod runs on a vm-passthrough node, where some waits never end (constants INIT_WAITS).
    The partition line's `rbln-validator gate` init container is recognised by its arguments
    (rblnctl.operator.partition.gate_wait; `node_labels`: the node's, for its partition labels).
    A pod whose status lists no init container yet (not started by the kubelet) is not held: it is pending.
    """
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return None
    st = pod.get("status") or {}
    spec = pod.get("spec") or {}
    restartable = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    for cs in st.get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        term, wait, run = state.get("terminated"), state.get("waiting"), state.get("running")
        if term is not None and int(term.get("exitCode") or 0) == 0:
            continue
        if cs.get("name") in restartable and cs.get("started"):
            continue
        name = str(cs.get("name") or "")
        if run is not None:
            text, failed = "running", False
        elif term is not None:
            text = f"terminated ({term.get('reason') or 'exit'}, exit code {term.get('exitCode')})"
            failed = True
        else:
            reason = str((wait or {}).get("reason") or "")
            text = f"waiting ({reason})" if reason else "waiting"
            failed = bool(reason) and reason not in ("PodInitializing", "ContainerCreating")
        gated = gate_component(next((c for c in spec.get("initContainers") or [] if c.get("name") == name), {}))
        if gated is not None:  # the partition line's gate, whatever its name: it says whether it can finish here
            waits: tuple[str, bool] | None = gate_wait(gated, node_labels, vm_node=vm_node)
            vm_node = True
        else:
            waits = C.INIT_WAITS.get((component, name))
        meta = pod.get("metadata") or {}
        return InitHold(namespace=str(meta.get("namespace") or ""), pod=str(meta.get("name") or ""),
                        component=component, container=name, state=text,
                        started=(run or {}).get("startedAt"), status=kubectl_status(pod),
                        restarts=int(cs.get("restartCount") or 0), waits_for=waits[0] if waits else None,
                        stuck=failed or (waits is not None and vm_node and not waits[1]))
    return None


def held_in_init(pod: Mapping) -> bool:
    """Whether init_hold finds `pod` held, for some component on some node (the component and the node's mode
    only decide whether the hold is stuck): what capacity keeps of a fleet's pods whole."""
    return init_hold("", pod, vm_node=True) is not None


def init_holds(pods: Iterable[tuple[str, Mapping]], *, vm_node: bool, node_labels: Mapping | None = None
               ) -> list[InitHold]:
    """The component pods (as (component, pod)) held in an init container, by pod name."""
    found = [h for comp, p in pods if (h := init_hold(comp, p, vm_node=vm_node, node_labels=node_labels)) is not None]
    return sorted(found, key=lambda h: (h.namespace, h.pod))
