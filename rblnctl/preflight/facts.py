"""What the cluster checks read: one Fetch per read, gathered once into ClusterFacts by a fixed set of requests.

A read the API server refuses (403) or fails (5xx) is kept as data (Fetch.error) for the checks to
report with the permission or the error; only an unreachable server or rejected credentials (401)
raise, since no later read could succeed either.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.kube import (
    CLUSTER_POLICIES,
    DAEMONSETS,
    DEPLOYMENTS,
    DEVICE_CLASSES,
    KUBEVIRTS,
    NODE_FEATURES,
    NODES,
    PODS,
    RESOURCE_SLICES,
    SELF_SUBJECT_RULES_REVIEWS,
    Kube,
    writes,
)
from rblnctl.kube.parallel import start
from rblnctl.kube.projections import POD
from rblnctl.operator.cluster import with_init_logs
from rblnctl.operator.components import InitHold, component_of_pod, held_in_init, init_holds
from rblnctl.operator.nodes import list_npu_node_objects, mode_of
from rblnctl.operator.policy import Policy, choose_active
from rblnctl.preflight.helm import HelmClient, HelmInfo
from rblnctl.operator.release import UNKNOWN, release_of
from rblnctl.preflight.fetch import Fetch, fetch
from rblnctl.preflight.method import choose_method
from rblnctl.preflight.model import METHOD_AUTO, Status

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ClusterFacts:
    """Everything the cluster checks read, each read once."""

    version: Fetch
    policies: Fetch
    method: str
    method_note: str
    method_status: Status
    method_remedy: str
    operator: Fetch  # Deployments that look like the operator
    kubevirts: Fetch
    nodes: Fetch  # raw NPU Node objects (or the one --node)
    node_features: Fetch
    helm: HelmInfo
    nfd_pods: Fetch | None = None  # read only when neither the NodeFeature API nor NFD labels show NFD
    daemonsets: Fetch | None = None  # DRA method only
    device_class: Fetch | None = None  # DRA method only: the passthrough DeviceClass the policy names
    device_class_name: str = C.DRA_DEVICECLASS_VM  # which one (vfio- + the policy's driverName)
    resource_slices: Fetch | None = None  # DRA method only: the ResourceSlices of the policy's driver
    access: Fetch | None = None  # a SelfSubjectRulesReview in the operator's namespace: what these credentials may do
    # The pods in the operator's namespace held in an init container (the others are read and dropped), read when
    # some NPU node is in vm-passthrough mode: `holds`, node -> its held component pods, a stuck one with its last
    # log line where readable
    component_pods: Fetch | None = None
    holds: dict[str, list[InitHold]] = field(default_factory=dict)
    node_name: str | None = None  # --node
    selector: str | None = None  # -l
    _modes: dict[str, str] | None = field(default=None, repr=False)

    @property
    def policy(self) -> Policy | None:
        """The RBLNClusterPolicy the operator acts on (rblnctl.operator.policy.choose_active)."""
        return choose_active(self.policies.value or []).active if self.policies.ok else None

    @property
    def operator_namespace(self) -> str:
        """Where the operator's components run (rblnctl.operator.cluster.operator_namespace)."""
        from rblnctl.operator.cluster import operator_namespace

        return operator_namespace(self.policy, (self.operator.value or []) if self.operator.ok else [])[0]

    @property
    def npu_nodes(self) -> list[dict]:
        """The NPU Node objects read ([] when they could not be read)."""
        return self.nodes.value if self.nodes.ok else []

    def effective_modes(self) -> dict[str, str]:
        """Node -> effective mode under the active policy (rblnctl.operator.nodes.mode_of); computed once."""
        if self._modes is None:
            policy = self.policy
            self._modes = {n["metadata"]["name"]: mode_of((n.get("metadata") or {}).get("labels") or {},
                                                          policy).effective
                           for n in self.npu_nodes}
        return self._modes

    def nodes_have_nfd_labels(self) -> bool:
        """Whether any NPU node carries a feature.node.kubernetes.io/* label (NFD at work without its API)."""
        return any(k.startswith(C.NFD_LABEL_PREFIX) for n in self.npu_nodes
                   for k in ((n.get("metadata") or {}).get("labels") or {}))


def _is_operator_deployment(dep: dict) -> bool:
    meta = dep.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(C.APP_NAME_LABEL) == C.OPERATOR_HELM_CHART:
        return True
    if str(labels.get(C.HELM_CHART_LABEL, "")).startswith(C.OPERATOR_HELM_CHART + "-"):
        return True
    return C.OPERATOR_HELM_CHART in str(meta.get("name", ""))


def find_operator(kube: Kube) -> Fetch:
    """Operator Deployments: by label across namespaces, else by name/chart label in OPERATOR_NAMESPACE."""
    by_label = fetch("list", DEPLOYMENTS, lambda: kube.list(DEPLOYMENTS, label_selector=C.OPERATOR_DEPLOYMENT_SELECTOR))
    if by_label.ok and by_label.value:
        return by_label
    in_ns = fetch("list", DEPLOYMENTS,
                  lambda: [d for d in kube.iter_list(DEPLOYMENTS, namespace=C.OPERATOR_NAMESPACE)
                           if _is_operator_deployment(d)],
                  namespace=C.OPERATOR_NAMESPACE)
    if in_ns.ok and in_ns.value:
        return in_ns
    for attempt in (by_label, in_ns):
        if attempt.error:
            return attempt  # not found where we could look, and one place we could not: say so, never guess
    return by_label


def gather(kube: Kube, *, method: str = METHOD_AUTO, node: str | None = None, selector: str | None = None,
           helm: HelmClient | None = None) -> ClusterFacts:
    """Read every fact the checks need: a fixed set of reads, each one paged list or one GET.

    A selector the API server cannot parse raises InvalidInput (rblnctl.node.inventory).
    """
    # The independent reads at once (rblnctl.kube.parallel), collected in the order they were once made one by
    # one, so the first error raised (unreachable, 401, a bad selector) is the same.
    version_read = start(lambda: fetch("get", "/version", kube.server_version))
    policies_read = start(lambda: fetch("list", CLUSTER_POLICIES, lambda: kube.list(CLUSTER_POLICIES)))
    operator_read = start(lambda: find_operator(kube))
    kubevirts_read = start(lambda: fetch("list", KUBEVIRTS, lambda: kube.list(KUBEVIRTS)))
    if node:
        nodes_read = start(lambda: fetch("get", NODES, lambda: [kube.get(NODES, node)]))
        features_read = start(lambda: fetch("list", NODE_FEATURES, lambda: kube.list(
            NODE_FEATURES, label_selector=f"{C.NFD_NODE_NAME_LABEL}={node}")))
    else:
        nodes_read = start(lambda: fetch("list", NODES, lambda: list_npu_node_objects(kube, selector=selector)))
        features_read = start(lambda: fetch("list", NODE_FEATURES, lambda: kube.list(NODE_FEATURES)))
    version, policies, operator = version_read.result(), policies_read.result(), operator_read.result()
    release = release_of(operator.value or []) if operator.ok else UNKNOWN
    chosen, note, status, remedy = choose_method(method, policies, release)
    kubevirts, nodes, features = kubevirts_read.result(), nodes_read.result(), features_read.result()
    facts = ClusterFacts(
        version=version, policies=policies, method=chosen, method_note=note, method_status=status,
        method_remedy=remedy, operator=operator, kubevirts=kubevirts, nodes=nodes, node_features=features,
        helm=(helm or HelmClient()).version(), node_name=node, selector=selector,
    )
    if not features.ok and not facts.nodes_have_nfd_labels():
        facts.nfd_pods = fetch("list", PODS, lambda: kube.list(PODS, label_selector=C.NFD_POD_SELECTOR))
    facts.access = fetch("create", SELF_SUBJECT_RULES_REVIEWS, lambda: writes.review(kube, SELF_SUBJECT_RULES_REVIEWS, {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": facts.operator_namespace}}))
    if C.MODE_VM in facts.effective_modes().values():
        ns = facts.operator_namespace
        # Only the pods held in an init container are kept: the rest say nothing the checks read (a fleet's
        # operator namespace holds a few component pods a node, issue 31).
        facts.component_pods = fetch("list", PODS, lambda: [
            p for p in kube.iter_list(PODS, namespace=ns, projection=POD) if held_in_init(p)], namespace=ns)
        facts.holds = _holds(kube, facts)
    if chosen == C.METHOD_DRA:
        policy = facts.policy
        # The policy's draKubeletPlugin.driverName decides both (rblnctl.operator.policy.Policy.dra_device_class_vm);
        # the defaults only stand in when there is no policy to read.
        driver = policy.dra_driver if policy else C.DRA_DRIVER
        facts.device_class_name = policy.dra_device_class_vm if policy else C.DRA_DEVICECLASS_VM
        facts.daemonsets = fetch("list", DAEMONSETS, lambda: kube.list(DAEMONSETS))
        facts.device_class = fetch("get", DEVICE_CLASSES, lambda: kube.get(DEVICE_CLASSES, facts.device_class_name))
        facts.resource_slices = fetch("list", RESOURCE_SLICES, lambda: kube.list(
            RESOURCE_SLICES, field_selector=f"spec.driver={driver}"))
    return facts


def _holds(kube: Kube, facts: ClusterFacts) -> dict[str, list[InitHold]]:
    """Node -> the operator component pods on it held in an init container (rblnctl.operator.components.init_hold),
    a stuck one with its last log line where it can be read (one GET each, best effort)."""
    if facts.component_pods is None or not facts.component_pods.ok:
        return {}
    policy = facts.policy
    bases = tuple(dict.fromkeys([*([policy.base_name] if policy else []), C.OPERATOR_BASE_NAME]))
    modes = facts.effective_modes()
    by_node: dict[str, list[tuple[str, dict]]] = {}
    for p in facts.component_pods.value or []:
        node = str((p.get("spec") or {}).get("nodeName") or "")
        comp = component_of_pod(p, base_names=bases)
        if node in modes and comp is not None:
            by_node.setdefault(node, []).append((comp, p))
    out = {}
    for node, pods in sorted(by_node.items()):
        labels = next(((n.get("metadata") or {}).get("labels") or {} for n in facts.npu_nodes
                       if (n.get("metadata") or {}).get("name") == node), {})
        holds = init_holds(pods, vm_node=modes[node] == C.MODE_VM, node_labels=labels)
        if holds:
            out[node] = with_init_logs(kube, [h for h in holds if h.stuck]) + [h for h in holds if not h.stuck]
    return out
