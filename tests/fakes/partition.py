"""The operator's partition line (RBLN-SW/rbln-npu-operator op@74c5b08, untagged) as its code renders its objects.

Names are written out here, not imported from rblnctl, so a wrong constant cannot make its own tests pass.

- the partition manager's DaemonSet: internal/clusterpolicy/components/partition_manager.go (name rbln-partition-
  manager, nodeSelector npu.deploy.partition-manager=true, hostNetwork, one gate init container, the main container
  `rbln-partition-manager` running image rebellions/k8s-partition-manager with args [reconcile-partition-state];
  partition_manager_test.go TestPartitionManagerPatch pins image v0.1.0);
- the gate init container: `rbln-validator gate --component <c>` (cmd/rbln-validator/gate.go newGateCommand). Its
  container NAME is not in the indexed source (buildGateInitContainer): GATE_INIT_NAME is a stand-in, and rblnctl
  must not depend on it;
- node labels: gate_test.go cases (IndexOverrideAloneMakesNodePartitioned: npu.partition=none +
  npu.partition.6=vf1), node_labels_test.go "excludes rbln-daemon on pre-installed driver nodes".
"""

from __future__ import annotations

NS = "rbln-system"
GATE_INIT_NAME = "gate-stand-in"  # not the operator's (unpublished) name: see the module doc


def gate_init(component: str) -> dict:
    return {"name": GATE_INIT_NAME, "image": "docker.io/rebellions/rbln-npu-operator-validator:v0.6.0",
            "command": ["rbln-validator"], "args": ["gate", "--component", component],
            "volumeMounts": [{"name": "run-rbln-validations", "mountPath": "/run/rbln/validations"}]}


def partition_manager_daemonset() -> dict:
    sel = {"app.kubernetes.io/name": "rbln-npu-operator", "app.kubernetes.io/component": "partition-manager"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "rbln-partition-manager", "namespace": NS, "labels": dict(sel)},
            "spec": {"selector": {"matchLabels": sel}, "template": {"metadata": {"labels": dict(sel)}, "spec": {
                "serviceAccountName": "rbln-partition-manager", "hostNetwork": True,
                "nodeSelector": {"rebellions.ai/npu.deploy.partition-manager": "true"},
                "initContainers": [gate_init("partition-manager")],
                "containers": [{"name": "rbln-partition-manager",
                                "image": "docker.io/rebellions/k8s-partition-manager:v0.1.0",
                                "args": ["reconcile-partition-state"],
                                "env": [{"name": "NODE_NAME",
                                         "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                                        {"name": "OPERATOR_NAMESPACE",
                                         "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}],
                "volumes": [{"name": "run-rbln-validations",
                             "hostPath": {"path": "/run/rbln/validations", "type": "DirectoryOrCreate"}}]}}},
            "status": {"desiredNumberScheduled": 1, "numberReady": 1, "numberUnavailable": 0}}


def gated_pod(component: str, node: str, *, daemonset: str | None = None) -> dict:
    """A component pod held in its gate init container (running), as the kubelet reports it."""
    ds = daemonset or f"rbln-{component}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{ds}-x7k2p", "namespace": NS,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds,
                                              "controller": True, "uid": "u"}]},
            "spec": {"nodeName": node, "initContainers": [gate_init(component)],
                     "containers": [{"name": ds, "image": "x"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": GATE_INIT_NAME, "ready": False, "restartCount": 0,
                 "state": {"running": {"startedAt": "2026-12-06T10:00:00Z"}}}]}}


# gate_test.go / consts.go: the admin's partition labels
PARTITIONED_BY_INDEX = {"rebellions.ai/npu.partition": "none", "rebellions.ai/npu.partition.6": "vf1"}
PARTITIONED_ALL = {"rebellions.ai/npu.partition": "vf4"}
NOT_PARTITIONED = {"rebellions.ai/npu.partition": "none"}
INVALID_VALUE = {"rebellions.ai/npu.partition": "vf2"}
INVALID_INDEX = {"rebellions.ai/npu.partition.x": "vf1"}
# node_labels_test.go "excludes rbln-daemon on pre-installed driver nodes": what the operator leaves on the node
PREINSTALLED_NODE_LABELS = {"feature.node.kubernetes.io/pci-1eff.present": "true", "rebellions.ai/npu.present": "true",
                            "rebellions.ai/npu.deploy.driver": "pre-installed",
                            "rebellions.ai/npu.deploy.device-plugin": "true",
                            "rebellions.ai/npu.deploy.container-toolkit": "true"}
