"""Read what the operator model needs from the API server: policies, the operator's namespace, a node's
component pods and DRA ResourceSlices. Each read is one request (paged lists)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import RblnError
from rblnctl.kube import CLUSTER_POLICIES, PODS, RESOURCE_SLICES, Kube
from rblnctl.kube.optional import ERROR, optional
from rblnctl.operator.components import InitHold, component_of_pod
from rblnctl.operator.policy import Policy, PolicyChoice, choose_active
from rblnctl.operator.release import operator_deployments

log = logging.getLogger(__name__)
# A held pod's log line is a best-effort read: one try, and no longer than this (a kubelet that does not answer
# must not stall the command that asked).
INIT_LOG_TIMEOUT_S = 5.0


@dataclass(frozen=True, kw_only=True)
class OperatorView:
    """The cluster's RBLNClusterPolicies, the active one, and the namespace its components run in."""

    choice: PolicyChoice
    crd_installed: bool
    namespace: str
    namespace_source: str  # how the namespace was found, for messages
    notes: tuple[str, ...] = field(default=())
    # The operator Deployments, when finding the namespace listed them (None: not listed); reused by
    # rblnctl.operator.release.read_release so the same LIST is not sent twice.
    deployments: tuple[dict, ...] | None = None

    @property
    def policy(self) -> Policy | None:
        """The policy the operator acts on (None: no policy, or no CRD)."""
        return self.choice.active

    @property
    def base_names(self) -> tuple[str, ...]:
        """DaemonSet prefixes component pods may carry: the policy's spec.name and the constant later releases use."""
        names = [self.policy.base_name] if self.policy else []
        return tuple(dict.fromkeys([*names, C.OPERATOR_BASE_NAME]))


def read_operator(kube: Kube, *, namespace: str | None = None) -> OperatorView:
    """List the policies and find the operator's namespace: `namespace` (given), the policy's
    spec.namespace (or status.namespace), the namespace of the operator Deployment
    (app.kubernetes.io/name=rbln-npu-operator, as every chart labels it), else rbln-system."""
    read = optional(lambda: kube.list(CLUSTER_POLICIES), what="list RBLNClusterPolicies", absent=[],
                    on_forbidden=ERROR)  # without the policy no command knows the modes: a 403 stops it
    items, crd = read.value, not read.absent
    choice = choose_active(items)
    notes = list(choice.notes)
    deployments: tuple[dict, ...] | None = None
    if namespace:
        ns, source = namespace, "given"
    elif choice.active is not None and choice.active.namespace:
        ns, source = operator_namespace(choice.active, [])
    else:
        deployments = tuple(operator_deployments(kube))
        ns, source = operator_namespace(None, list(deployments))
    return OperatorView(choice=choice, crd_installed=crd, namespace=ns, namespace_source=source, notes=tuple(notes),
                        deployments=deployments)


def operator_namespace(policy: Policy | None, deployments: list[dict]) -> tuple[str, str]:
    """(namespace, why) of the operator's components: the policy's spec.namespace, else the one namespace
    of the operator Deployments, else rbln-system (the chart's default)."""
    if policy is not None and policy.namespace:
        return policy.namespace, f"RBLNClusterPolicy {policy.name}"
    namespaces = sorted({(d.get("metadata") or {}).get("namespace", "") for d in deployments} - {""})
    if len(namespaces) == 1:
        return namespaces[0], f"operator Deployment in {namespaces[0]}"
    return C.OPERATOR_NAMESPACE, "default"


def component_pods(kube: Kube, view: OperatorView, node: str) -> list[tuple[str, dict]]:
    """The operator component pods on `node` as (component, pod): one LIST in the operator's namespace."""
    return components_among(kube.list(PODS, namespace=view.namespace, field_selector=f"spec.nodeName={node}"), view)


def components_among(pods: Iterable[dict], view: OperatorView) -> list[tuple[str, dict]]:
    """The operator component pods among `pods` (from the operator's namespace) as (component, pod)."""
    out = []
    for p in pods:
        comp = component_of_pod(p, base_names=view.base_names)
        if comp is not None:
            out.append((comp, p))
    return out


def node_slices(kube: Kube, node: str, driver: str) -> list[Mapping]:
    """The ResourceSlices `driver` publishes for `node` (one LIST; [] when the DRA API is not served)."""
    return optional(lambda: kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node},spec.driver={driver}"),
                    what="list ResourceSlices", absent=[], on_forbidden=ERROR).value


def init_log_line(kube: Kube, hold: InitHold) -> str | None:
    """The last line the init container holding a component pod logged (`kubectl logs POD -c CONTAINER
    --tail=1`), or None when it cannot be read: the API server reaches the log through the node's kubelet, which
    may not answer, and RBAC may not grant pods/log. Tried once, never retried, within INIT_LOG_TIMEOUT_S."""
    return init_log(kube, hold)[0]


def init_log(kube: Kube, hold: InitHold) -> tuple[str | None, str | None]:
    """(init_log_line, why it could not be read): `RBAC does not let you get pods/log in NS` for a 403, else the
    error's first line; (None, None) for an empty log."""
    from rblnctl.errors import Forbidden

    once = kube.one_try(INIT_LOG_TIMEOUT_S)
    try:
        text = once.request("GET", PODS.path(hold.pod, namespace=hold.namespace, sub="log"),
                            query={"container": hold.container, "tailLines": 1}, text=True)
    except RblnError as e:
        log.debug("cannot read the log of %s -c %s: %s", hold.ref, hold.container, e)
        if isinstance(e, Forbidden):
            return None, f"RBAC does not let you get pods/log in {hold.namespace}"
        status = getattr(e, "status", 0)
        if status >= 500:  # the API server reaches the log through the node's kubelet, which did not answer
            return None, f"the API server could not reach the kubelet on the pod's node ({status})"
        return None, f"the API server answered {status}" if status else "no answer from the API server"
    finally:
        kube.request_count += once.request_count
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return (lines[-1][:200] if lines else None), None


def with_init_logs(kube: Kube, holds: Sequence[InitHold]) -> list[InitHold]:
    """`holds`, each with its init container's last log line where it can be read (one GET each)."""
    return [dataclasses.replace(h, log=init_log_line(kube, h)) if h.log is None else h for h in holds]
