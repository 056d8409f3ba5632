"""Real kubectl against the fake API server: discovery, label, cordon, json patch, drain, CRs, leases,
retries, lost replies, auth can-i, logs and describe, KubeVirt subresources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.fakes import objects as o

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


@pytest.fixture
def kubectl(kubeconfig, tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig)}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = ["kubectl", f"--kubeconfig={kubeconfig}", "--request-timeout=10s",
               f"--cache-dir={tmp_path / 'kube-cache'}", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


def test_get_nodes_by_label(apiserver, kubectl):
    apiserver.add(o.npu_node("npu-1"), o.npu_node("npu-2", mode="vm-passthrough"), o.node("cpu-1"))
    out = kubectl("get", "nodes", "-l", "rebellions.ai/npu.workload.config=vm-passthrough", "-o", "name").stdout
    assert out.split() == ["node/npu-2"]
    out = kubectl("get", "nodes", "-l", "rebellions.ai/npu.present", "-o", "name").stdout
    assert out.split() == ["node/npu-1", "node/npu-2"]
    lists = [r for r in apiserver.requests if r.path == "/api/v1/nodes"]
    assert lists[-1].query["labelSelector"] == ["rebellions.ai/npu.present"]


def test_label_node_then_read_back(apiserver, kubectl):
    apiserver.add(o.node("n1"))
    assert "node/n1 labeled" in kubectl("label", "node", "n1", "foo=bar").stdout
    assert apiserver.get("Node", "n1")["metadata"]["labels"]["foo"] == "bar"
    assert kubectl("get", "node", "n1", "-o", "jsonpath={.metadata.labels.foo}").stdout == "bar"
    patch = [r for r in apiserver.writes() if r.method == "PATCH"][-1]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {"metadata": {"labels": {"foo": "bar"}}}
    kubectl("label", "node", "n1", "foo-")
    assert "foo" not in apiserver.get("Node", "n1")["metadata"]["labels"]


def test_cordon_sets_unschedulable(apiserver, kubectl):
    apiserver.add(o.node("n1"))
    assert "node/n1 cordoned" in kubectl("cordon", "n1").stdout
    assert apiserver.get("Node", "n1")["spec"]["unschedulable"] is True
    patch = apiserver.writes()[-1]
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert patch.body == {"spec": {"unschedulable": True}}
    kubectl("uncordon", "n1")
    assert not apiserver.get("Node", "n1")["spec"].get("unschedulable")


def test_json_patch_node(apiserver, kubectl):
    apiserver.add(o.npu_node("n1"))
    ops = [{"op": "replace", "path": "/metadata/labels/rebellions.ai~1npu.workload.config", "value": "vm-passthrough"},
           {"op": "add", "path": "/metadata/annotations/note", "value": "x"}]
    kubectl("patch", "node", "n1", "--type=json", "-p", json.dumps(ops))
    md = apiserver.get("Node", "n1")["metadata"]
    assert md["labels"]["rebellions.ai/npu.workload.config"] == "vm-passthrough" and md["annotations"]["note"] == "x"
    bad = kubectl("patch", "node", "n1", "--type=json", "-p",
                  json.dumps([{"op": "test", "path": "/metadata/labels/rebellions.ai~1npu.workload.config",
                               "value": "container"}]), check=False)
    assert bad.returncode != 0 and "test failed" in bad.stderr


def test_drain_evicts_replicaset_pod_and_keeps_daemonset_pod(apiserver, kubectl):
    apiserver.add(
        o.node("n1"), o.node("n2"),
        o.daemonset("kube-system", "cni"),
        o.pod("kube-system", "cni-n1", node="n1", owner_kind="DaemonSet", owner_name="cni"),
        o.replicaset("default", "web-6d4b", labels={"app": "web"}),
        o.pod("default", "web-6d4b-abcde", node="n1", owner_kind="ReplicaSet", owner_name="web-6d4b",
              labels={"app": "web"}, volumes=[{"name": "scratch", "emptyDir": {}}]),
        o.pod("default", "elsewhere", node="n2", owner_kind="ReplicaSet", owner_name="web-6d4b"),
    )
    proc = kubectl("drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=30s")
    assert "node/n1 drained" in proc.stdout and "pod/web-6d4b-abcde evicted" in proc.stdout
    assert "ignoring DaemonSet-managed Pods: kube-system/cni-n1" in proc.stderr
    assert apiserver.get("Node", "n1")["spec"]["unschedulable"] is True
    assert apiserver.get("Pod", "web-6d4b-abcde", "default") is None
    assert apiserver.get("Pod", "cni-n1", "kube-system") is not None
    assert apiserver.get("Pod", "elsewhere", "default") is not None
    evictions = [r for r in apiserver.writes() if r.path.endswith("/eviction")]
    assert [r.path for r in evictions] == ["/api/v1/namespaces/default/pods/web-6d4b-abcde/eviction"]
    assert evictions[0].body["kind"] == "Eviction" and evictions[0].body["apiVersion"] == "policy/v1"
    listing = next(r for r in apiserver.requests if r.path == "/api/v1/pods")
    assert listing.query["fieldSelector"] == ["spec.nodeName=n1"]


def test_drain_waits_for_graceful_deletion_and_honours_server_dry_run(apiserver, kubectl):
    apiserver.deletion_delay_s = 0.5
    apiserver.add(
        o.node("n1"),
        o.replicaset("default", "db", labels={"app": "db"}),
        o.pod("default", "db-1", node="n1", owner_kind="ReplicaSet", owner_name="db", labels={"app": "db"}),
        o.replicaset("default", "web", labels={"app": "web"}),
        o.pod("default", "web-1", node="n1", owner_kind="ReplicaSet", owner_name="web", labels={"app": "web"}),
    )
    dry = kubectl("drain", "n1", "--pod-selector=app=db", "--dry-run=server", "--timeout=20s")
    assert "evicting pod default/db-1 (server dry run)" in dry.stdout and "drained (server dry run)" in dry.stdout
    assert apiserver.get("Pod", "db-1", "default")["metadata"].get("deletionTimestamp") is None
    assert not apiserver.get("Node", "n1")["spec"].get("unschedulable")
    assert all(r.dry_run for r in apiserver.writes()) and apiserver.writes()

    proc = kubectl("drain", "n1", "--pod-selector=app=web", "--timeout=20s")
    assert "pod/web-1 evicted" in proc.stdout
    assert apiserver.get("Pod", "web-1", "default") is None  # drain returned after the deletion finished
    polls = [r for r in apiserver.requests if r.method == "GET" and r.path.endswith("/pods/web-1")]
    assert polls[-1].status == 404
    assert apiserver.get("Pod", "db-1", "default") is not None


def test_get_kubevirt_all_namespaces_jsonpath(apiserver, kubectl):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"], version="v1.9.0"))
    out = kubectl("get", "kubevirt", "-A", "-o",
                  "jsonpath={.items[0].metadata.namespace}/{.items[0].status.observedKubeVirtVersion}:"
                  "{.items[0].spec.configuration.developerConfiguration.featureGates[*]}").stdout
    assert out == "kubevirt/v1.9.0:HostDevices HostDevicesWithDRA"
    assert kubectl("get", "kv", "-n", "kubevirt", "-o", "name").stdout.split() == ["kubevirt.kubevirt.io/kubevirt"]


def test_merge_patch_and_get_cluster_policy(apiserver, kubectl):
    apiserver.add(o.cluster_policy())
    kubectl("patch", "rblnclusterpolicy", "rbln-cluster-policy", "--type=merge",
            "-p", '{"spec":{"sandboxDevicePlugin":{"enabled":false}}}')
    policy = apiserver.get("RBLNClusterPolicy", "rbln-cluster-policy")
    assert policy["spec"]["sandboxDevicePlugin"] == {"enabled": False}
    out = kubectl("get", "rcp", "-o", "jsonpath={.items[*].spec.workloadType}").stdout
    assert out == "container"


def test_forbidden_and_not_found_messages_reach_kubectl(apiserver, kubectl):
    missing = kubectl("get", "node", "ghost", check=False)
    assert missing.returncode == 1 and 'nodes "ghost" not found' in missing.stderr
    apiserver.forbid("list", "nodes")
    denied = kubectl("get", "nodes", check=False)
    assert denied.returncode == 1
    assert ('nodes is forbidden: User "fake-user" cannot list resource "nodes" in API group "" at the cluster scope'
            in denied.stderr)


def test_version_reports_the_configured_server_version(apiserver, kubectl):
    apiserver.set_version("v1.33.2")
    out = json.loads(kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"] == "v1.33.2" and out["serverVersion"]["minor"] == "33"


def test_wait_for_delete_uses_watch(apiserver, kubectl):
    """kubectl wait --for=delete lists the pod, then watches it from that list: the pod goes when the watch
    arrives (a pod gone after a fixed 0.4 s was gone before a loaded machine's kubectl listed it: no watch)."""
    apiserver.deletion_delay_s = 60
    apiserver.add(o.pod("default", "p1", node="n1"))
    apiserver.delete("Pod", "p1", "default")  # graceful: terminating until the watch comes
    assert apiserver.get("Pod", "p1", "default")["metadata"]["deletionTimestamp"]

    def gone_when_watched(req):
        if req.query.get("watch") == ["true"] and apiserver.get("Pod", "p1", "default"):
            apiserver.delete_now("Pod", "p1", "default")  # the watch replays it: it starts at the list's version

    apiserver.on_request(gone_when_watched)
    kubectl("wait", "--for=delete", "pod/p1", "-n", "default", "--timeout=10s")
    assert apiserver.get("Pod", "p1", "default") is None
    watches = [r for r in apiserver.requests if r.query.get("watch") == ["true"]]
    assert watches and watches[0].query["fieldSelector"] == ["metadata.name=p1"]


def test_lost_reply_leaves_kubectl_unsure_but_the_label_applied(apiserver, kubectl):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="PATCH", lose_reply=True)
    lost = kubectl("label", "node", "n1", "a=b", check=False)
    assert lost.returncode == 1 and "EOF" in lost.stderr  # client-go does not retry a PATCH
    assert apiserver.get("Node", "n1")["metadata"]["labels"]["a"] == "b"
    assert "node/n1 not labeled" in kubectl("label", "node", "n1", "a=b").stdout  # the retry finds it done


def test_kubectl_waits_out_retry_after_on_429(apiserver, kubectl):
    apiserver.add(o.node("n1"))
    apiserver.inject_fault(method="GET", path="^/api/v1/nodes/n1$", status=429, retry_after_s=1, times=2,
                           message="Too many requests, please try again later.")
    assert kubectl("get", "node", "n1", "-o", "name").stdout.split() == ["node/n1"]
    gets = apiserver.requests_matching("GET", "^/api/v1/nodes/n1$")
    assert [r.status for r in gets] == [429, 429, 200]
    assert all(later.at - earlier.at >= 0.9 for earlier, later in zip(gets, gets[1:]))  # client-go slept 1 s each


def test_get_leases_in_a_namespace(apiserver, kubectl):
    apiserver.add(o.lease("kube-node-lease", "n1", holder="n1"), o.lease("kube-node-lease", "n2", holder="n2"),
                  o.lease("kube-system", "elsewhere"))
    out = kubectl("get", "lease", "-n", "kube-node-lease").stdout.splitlines()
    assert out[0].split() == ["NAME", "AGE"] and [line.split()[0] for line in out[1:]] == ["n1", "n2"]
    holder = kubectl("get", "leases.coordination.k8s.io", "n1", "-n", "kube-node-lease", "-o",
                     "jsonpath={.spec.holderIdentity}").stdout
    assert holder == "n1"


def test_auth_can_i_answers_from_the_enforced_roles(apiserver, kubectl):
    assert kubectl("auth", "can-i", "list", "nodes").stdout.strip() == "yes"  # no enforcement: all allowed
    apiserver.enforce_rbac([o.cluster_role("pod-reader", o.policy_rule(["get", "list"], ["pods"])),
                            o.role("ns1", "evictor", o.policy_rule(["create"], ["pods/eviction"]))])
    no = kubectl("auth", "can-i", "list", "nodes", check=False)
    assert no.returncode == 1 and no.stdout.strip() == "no"
    assert kubectl("auth", "can-i", "list", "pods", "-A").stdout.strip() == "yes"
    evict = ("auth", "can-i", "create", "pods", "--subresource=eviction")  # "pods/eviction" would be TYPE/NAME
    assert kubectl(*evict, "-n", "ns1").stdout.strip() == "yes"
    assert kubectl(*evict, "-n", "ns2", check=False).returncode == 1
    review = apiserver.requests_matching("POST", "/selfsubjectaccessreviews$")[-1]
    assert review.content_type == "application/vnd.kubernetes.protobuf"  # client-go's typed client; decoded
    assert review.body["spec"]["resourceAttributes"] == {"namespace": "ns2", "verb": "create", "resource": "pods",
                                                         "subresource": "eviction"}
    denied = kubectl("get", "nodes", check=False)  # discovery still works, the list does not
    assert denied.returncode == 1 and 'User "fake-user" cannot list resource "nodes"' in denied.stderr


def test_logs_and_a_pending_pods_refusal(apiserver, kubectl):
    apiserver.add(o.pod("default", "web", node="n1"), o.pod("default", "starting", node="n1", phase="Pending"))
    apiserver.set_pod_log("default", "web", "one\ntwo\nthree\n")
    assert kubectl("logs", "web", "--tail=2").stdout == "two\nthree\n"
    apiserver.set_pod_phase("default", "starting", "Pending")
    refused = kubectl("logs", "starting", check=False)
    assert refused.returncode == 1 and refused.stderr.strip() == (
        'Error from server (BadRequest): container "main" in pod "starting" is waiting to start: ContainerCreating')


def test_describe_shows_the_schedulers_failure(apiserver, kubectl):
    apiserver.add(o.pod("default", "big", phase="Pending"))
    apiserver.mark_unschedulable("default", "big", "0/3 nodes are available: 3 Insufficient rebellions.ai/npu.")
    out = kubectl("describe", "pod", "big").stdout
    assert "PodScheduled                False" in out
    event = next(line.split() for line in out.splitlines() if "FailedScheduling" in line)
    assert event[:2] == ["Warning", "FailedScheduling"] and event[3] == "default-scheduler"
    assert " ".join(event[4:]) == "0/3 nodes are available: 3 Insufficient rebellions.ai/npu."


def test_stop_a_vm_through_the_kubevirt_subresource(apiserver, kubectl, tmp_path):
    apiserver.simulate_kubevirt = True
    vm = o.vm("default", "vm1")
    vm["metadata"]["annotations"] = {"fake.rblnctl.io/node": "n1"}
    apiserver.add(vm, o.vmi("default", "vm1", "n1"))
    body = tmp_path / "stop.json"
    body.write_text("{}")
    stop = "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm1/stop"
    assert kubectl("replace", "--raw", stop, "-f", str(body)).returncode == 0
    assert kubectl("get", "vm", "vm1", "-o", "jsonpath={.spec.runStrategy} {.status.printableStatus}").stdout == (
        "Halted Stopped")
    assert kubectl("get", "vmi", "-o", "name").stdout == ""
    again = kubectl("replace", "--raw", stop, "-f", str(body), check=False)
    assert again.returncode == 1 and again.stderr.strip() == (
        'Error from server (Conflict): Operation cannot be fulfilled on virtualmachine.kubevirt.io "vm1": '
        "VM is not running")
