"""Operator components: what each mode deploys, and which component a deploy label or a pod belongs to."""

from __future__ import annotations

from dataclasses import dataclass

from rblnctl import constants as C

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


def _controller(pod: dict) -> dict | None:
    return next((r for r in (pod.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


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
    owner = _controller(pod)
    if owner is None or owner.get("kind") != "DaemonSet":
        return None
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
