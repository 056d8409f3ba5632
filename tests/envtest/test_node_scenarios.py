"""The node half of rblnctl (set-mode, drain) on the fake and on a real kube-apiserver alike.

Each scenario runs twice through the ``backend`` fixture: on the project's fake API server and on a real
kube-apiserver v1.36.2 with kube-controller-manager's disruption controller (tests/envtest). What a cluster
would do around rblnctl is simulated over HTTP on both: the RBLN NPU operator of one release layout
(tests/fakes/operator.py), the kubelet of the nodes (tests/cluster/kubelet.py: pods Running/Ready through
pods/status, graceful deletions confirmed). rblnctl runs in-process through its CLI with the backend's kubeconfig;
what it wrote is what the server saw (the fake's request log, the real server's audit log).
"""

from __future__ import annotations

import json

import pytest

from tests.cluster.client import ApiFailure
from tests.envtest.crds import later_policy_crd
from tests.fakes import objects as o
from tests.fakes.releases import NEWER, V0_3_0

MODE = "rebellions.ai/npu.workload.config"
RECORD = "rebellions.ai/rblnctl.set-mode"
NS = "team-a"
HYBRID = {"vfio_manager": True, "sandbox": True, "device_plugin": True}
PRODUCT = "RBLN-CA25"


# ---- the cluster around rblnctl -------------------------------------------------------------------------------


@pytest.fixture
def policy_crd(request):
    """The RBLNClusterPolicy CRD of the release under test on a real server: v0.3.0's chart CRD is installed for the
    session; a later release's policy (no rblnDaemon, which v0.3.0 requires) needs the later operator's CRD
    (tests/envtest/crds.later_policy_crd), swapped in for the test and back after it."""
    backend, release = request.getfixturevalue("backend"), request.getfixturevalue("release")
    if backend.name != "real" or release is V0_3_0:
        yield
        return
    api = backend.api
    v030 = api.get("CustomResourceDefinition", "rblnclusterpolicies.rebellions.ai")
    _swap_crd(api, later_crd(v030), accepts=True)
    try:
        yield
    finally:
        _swap_crd(api, v030, accepts=False)


def later_crd(v030: dict) -> dict:
    """later_policy_crd (v0.3.0's schema with the later admission rules) made to store a later release's policy as
    that release's CRD does: its device plugins take no resourceList, so v0.3.0's defaulted
    ``resourceList: [ATOM ...]`` must not appear in the stored policy (rblnctl would read the plugin's names from
    it); ``driver.enabled`` and ``devicePlugin.useGenericResourceName`` (default true) exist. Source:
    ../shared/reference/rbln-operator.md "Resources" and "Releases differ" (the later sandbox plugin no longer takes
    sandboxDevicePlugin.resourceList; newer CRD useGenericResourceName, default true), the layout
    tests/fakes/releases.NEWER models. Assumption: the later CRD's other defaults match v0.3.0's."""
    crd = later_policy_crd(v030)
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for plugin in ("devicePlugin", "sandboxDevicePlugin"):
        props[plugin]["properties"].pop("resourceList", None)
    props["devicePlugin"]["properties"]["useGenericResourceName"] = {"type": "boolean", "default": True}
    props["driver"]["properties"]["enabled"] = {"type": "boolean"}
    return crd


def _swap_crd(api, crd: dict, *, accepts: bool) -> None:
    """Replace the CRD's spec, then wait until the server validates with it (a dry-run create of a later release's
    policy is accepted by the later CRD, refused by v0.3.0's)."""
    api.mutate("CustomResourceDefinition", crd["metadata"]["name"], None,
               lambda c: c.update(spec=crd["spec"]))
    probe = NEWER.policy("crd-probe")
    probe.pop("status")

    def validating() -> bool:
        try:
            api.create(probe, dry_run=True)
            return accepts
        except ApiFailure as e:
            return not accepts and e.status == 422

    api.wait_for(validating, timeout_s=30, message="the swapped RBLNClusterPolicy CRD to validate")


def npu_cluster(backend, release, *, policy: dict | None = None, nodes=("n1",), workload=True, **op_kw):
    """The release's operator Deployment and a policy, NPU nodes (RBLN-CA25, which both layouts' resource names
    cover) in container mode as the release's operator leaves them, a ReplicaSet's NPU pod on the first node; a
    kubelet for the nodes and the release's operator, converged."""
    policy = policy or release.policy(**HYBRID)
    backend.api.seed(release.operator_deployment(), policy,
                     *[o.npu_node(n, release=release, policy=policy, product=PRODUCT) for n in nodes])
    if workload:
        backend.api.seed(o.replicaset(NS, "web", labels={"app": "web"}, replicas=1))
        backend.api.seed(o.pod(NS, "npu-app", node=nodes[0], labels={"app": "web"}, owner_kind="ReplicaSet",
                               owner_name="web", requests={release.container_resource(policy, PRODUCT): "1"}))
    kubelet = backend.kubelet(nodes)
    op = backend.operator(release=release, **op_kw)
    assert op.wait_idle(15), op.errors
    return kubelet, op


def node(backend, name="n1") -> dict:
    return backend.api.get("Node", name)


def run(backend, *args, **kw):
    r = backend.rblnctl(*args, **kw)
    assert "Traceback" not in r.stderr, r.stderr
    return r


# ---- set-mode -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", [NEWER, V0_3_0], ids=lambda r: r.name)
def test_set_mode_vm_and_back(backend, release, policy_crd):
    """NEWER: to vm and back, converging each way (the NPU pod evicted first, the node uncordoned last). V0_3_0:
    to vm is refused before any write (its sandbox plugin never leaves Init on a vm node); forced, the wait times out
    with the plugin stuck; back to container converges."""
    kubelet, op = npu_cluster(backend, release)
    backend.mark()
    if release is NEWER:
        r = run(backend, "node", "set-mode", "vm", "n1", "--yes", "--timeout", "60s", "-o", "json")
        assert r.exit_code == 0, r.stderr
        res = json.loads(r.stdout)["result"]
        assert res["changed"] and res["cordoned"] and res["uncordoned"]
        assert [p["name"] for p in res["evicted"]] == ["npu-app"]
        n = node(backend)
        assert n["metadata"]["labels"][MODE] == "vm-passthrough" and not n["spec"].get("unschedulable")
        assert n["status"]["allocatable"].get("rebellions.ai/RBLN-CA25_PF") == "2"
        assert backend.api.get("Pod", "npu-app", NS) is None  # evicted, and the kubelet confirmed it
    else:
        r = run(backend, "node", "set-mode", "vm", "n1", "--yes", "--timeout", "60s")
        assert r.exit_code == 1 and "upgrade the operator" in r.stderr, r.stderr
        assert backend.writes() == []
        r = run(backend, "node", "set-mode", "vm", "n1", "--yes", "--force", "--timeout", "3s")
        assert r.exit_code == 5, r.stderr
        assert "sandbox-device-plugin" in r.stderr, r.stderr
        assert op.stuck_in_init
    r = run(backend, "node", "set-mode", "container", "n1", "--yes", "--force", "--timeout", "60s", "-o", "json")
    assert r.exit_code == 0, r.stderr
    n = node(backend)
    assert n["metadata"]["labels"][MODE] == "container" and not n["spec"].get("unschedulable")
    assert RECORD not in (n["metadata"].get("annotations") or {})
    resource = release.container_resource(release.policy(**HYBRID), PRODUCT)
    assert n["status"]["allocatable"].get(resource) == "2"
    assert not [k for k in n["status"]["allocatable"] if k.endswith(("_PF", "_PT"))]
    assert kubelet.errors == [] and op.errors == []
