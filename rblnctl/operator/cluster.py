"""Read what the operator model needs from the API server: policies, the operator's namespace, a node's
component pods and DRA ResourceSlices. Each read is one request (paged lists)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import NotFound
from rblnctl.kube import CLUSTER_POLICIES, PODS, RESOURCE_SLICES, Kube
from rblnctl.operator.components import component_of_pod
from rblnctl.operator.policy import Policy, PolicyChoice, choose_active
from rblnctl.operator.release import operator_deployments

log = logging.getLogger(__name__)


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
    try:
        items = kube.list(CLUSTER_POLICIES)
        crd = True
    except NotFound:
        items, crd = [], False
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
    try:
        return kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node},spec.driver={driver}")
    except NotFound:
        return []
