"""`rblnctl rbac`'s rules are exactly what the commands use.

Every scenario runs one command against the fake API server with the operate role's ClusterRole and
Role enforced (tests/fakes/apiserver/rbac.py matches rules as kube-apiserver's RBAC authorizer):
no request may be refused. Then each verb of each rule is taken away in turn, and the requests the
commands made are judged again: at least one must be refused, so no rule or verb is unneeded.
(Up to the first refused request a command's requests are the same, so judging the recorded
requests is judging a run with the smaller role.)
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import yaml

from rblnctl import rbac
from tests.fakes import objects as o
from tests.fakes.apiserver.config import Settings
from tests.fakes.apiserver.rbac import Authorizer, request_info
from tests.fakes.operator import SimulatedOperator
from tests.helpers import cli
from rblnctl.constants import OPERATOR_NAMESPACE as NS
from tests.fakes.objects import ONE_NPU as NPU



@dataclass(frozen=True)
class Scenario:
    command: str  # the key in rblnctl.rbac.COMMANDS
    args: tuple[str, ...]
    setup: Callable | None = field(default=None, compare=False)
    exit_code: int = 0


def _npu_pod(api, name="npu-app", claims=None):
    p = o.pod("default", name, node="n1", owner_kind="ReplicaSet", owner_name="web", requests=None if claims else NPU)
    if claims:
        p["spec"]["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    api.add(p)


def _expired_lock(api):
    api.add(o.lease(NS, "rblnctl-node-n1", holder="someone-else", duration_s=1))  # renewed in 2025: expired


def _dra(api):
    api.add(o.deviceclass("vfio-npu.rebellions.ai"), o.daemonset(NS, "rbln-dra-kubelet-plugin"))
    _npu_pod(api, "claimer", claims=["npu-claim"])


def _old_names(api):
    """A VM naming a resource the sandbox plugin no longer advertises, and an edit racing its patch."""
    entry = {"pciVendorSelector": "1EFF:1220", "resourceName": "rebellions.ai/ATOM_CA22_PT",
             "externalResourceProvider": True}
    api.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["spec"]["configuration"].update(
        {"permittedHostDevices": {"pciHostDevices": [entry]}}))
    api.add(o.vm("default", "vm1", host_devices=["rebellions.ai/ATOM_CA22_PT"], running=False))
    api.inject_fault(method="PATCH", path="virtualmachines/vm1$", status=409, reason="Conflict",
                     message="the object has been modified")


def _vm_for_dra(api):
    """n1 in vm-passthrough mode, KubeVirt with both gates, an operator release that rolls DRA on vm nodes, and a
    stopped VM on the sandbox method for --convert-vms."""
    from tests.fakes.releases import NEWER

    api.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update(
        {"rebellions.ai/npu.workload.config": "vm-passthrough"}))
    api.mutate("KubeVirt", "kubevirt", "kubevirt", fn=lambda k: k["spec"]["configuration"]["developerConfiguration"]
               .update({"featureGates": ["HostDevices", "HostDevicesWithDRA"]}))
    api.add(NEWER.operator_deployment(), o.vm("default", "vm-on-sandbox", running=False,
                                              host_devices=["rebellions.ai/RBLN-CA22_PF"]))


CA22 = "rebellions.ai/RBLN-CA22_PF"


def _vms(api):
    """VMs in every state the vm commands read: a running sandbox VM on vm-mode node n2 (simulated KubeVirt),
    a stopped one without NPUs, a DRA VM with hand-made claims too, a running DRA VM holding an allocated
    claim, and one whose virt-launcher pod the scheduler could not place."""
    api.simulate_kubevirt = True
    kv = api.get("KubeVirt", "kubevirt", "kubevirt")
    kv["spec"]["configuration"]["developerConfiguration"]["featureGates"] = ["HostDevices", "HostDevicesWithDRA"]
    kv["spec"]["configuration"]["permittedHostDevices"] = {"pciHostDevices": [
        {"pciVendorSelector": "1EFF:1220", "resourceName": CA22, "externalResourceProvider": True}]}
    api.update(kv)
    vfio = {"name": "vfio-0000-3b-00-0", "attributes": {"type": {"string": "vfio"}}}
    api.add(o.npu_node("n2", mode="vm-passthrough"), o.deviceclass("vfio-npu.rebellions.ai"),
            o.resource_slice("n2", devices=[vfio]))
    api.add(o.vm("vms", "running", host_devices=[CA22], node="n2"), o.vmi("vms", "running", "n2", [CA22]),
            o.vm("vms", "fresh", running=False))
    mine = o.template_claim("rbln-npu", "rbln-npu-1")
    gpu = {"name": "gpu", "resourceClaimName": "gpu-claim"}
    theirs = o.template_claim("accel", "accel-template")
    api.add(o.resource_claim_template("vms", "rbln-npu-1"),
            o.resource_claim_template("vms", "accel-template", managed=False),
            o.vm("vms", "dra-vm", running=False, resource_claims=[mine, gpu, theirs],
                 host_devices=[o.dra_host_device("npu0"), o.dra_host_device("gpu0", claim="gpu", request="g"),
                               o.dra_host_device("acc0", claim="accel", request="npu0")]))
    held = o.template_claim("rbln-npu", "rbln-npu-4")
    dra_dev = [o.dra_host_device("npu0")]
    api.add(o.vm("vms", "dra-running", host_devices=dra_dev, resource_claims=[held]),
            o.vmi("vms", "dra-running", "n2", dra_dev, resource_claims=[held]))
    launcher = o.virt_launcher("vms", "dra-running", "n2", claims={"rbln-npu": "dra-running-rbln-npu-x"})
    api.add(launcher, o.resource_claim("vms", "dra-running-rbln-npu-x", allocated=[("n2", "vfio-0000-3b-00-0")],
                                       pod=launcher))
    api.add(o.vm("vms", "pending", host_devices=[CA22]), o.vmi("vms", "pending", None, [CA22], phase="Scheduling"))
    pending = o.virt_launcher("vms", "pending", None, resources={CA22: "1"})
    api.add(pending, o.failed_scheduling(pending, f"0/2 nodes are available: 2 Insufficient {CA22}."))
    # the DRA plugin on n2 restarting (diagnose reads its log: the crash's reason is only in there)
    plugin = o.pod("rbln-system", "rbln-dra-kubelet-plugin-n2", node="n2",
                   labels={"app.kubernetes.io/component": "dra-kubelet-plugin"})
    plugin["metadata"]["ownerReferences"] = [o.owner_ref("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")]
    plugin["status"]["containerStatuses"][0].update(
        ready=False, restartCount=3, state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 1, "reason": "Error"}})
    api.add(plugin)
def _lifecycle(api):
    """_vms, and a stopped DRA VM on n2 whose claim the simulated scheduler can allocate (a second vfio NPU there)."""
    _vms(api)
    api.add(o.resource_slice("n2", name="n2-more", devices=[{"name": "vfio-0000-3c-00-0", "attributes": {
        "type": {"string": "vfio"}}}]))
    entry = o.template_claim("rbln-npu", "rbln-npu-1")
    api.add(o.vm("vms", "dra-life", host_devices=[o.dra_host_device("npu0")], resource_claims=[entry],
                 running=False, node="n2"))


def _evacuated_vm(api):
    """A migratable VM on n1 that KubeVirt's eviction webhook evacuates to n2 (drain --all-pods --evict-vms)."""
    import threading

    api.kubevirt_eviction_webhook = True
    api.add(o.npu_node("n2"), o.vmi("vms", "mig", "n1", eviction_strategy="LiveMigrate"),
            o.virt_launcher("vms", "mig", "n1"))

    def migrate(event, obj):
        if obj.get("kind") == "VirtualMachineInstance" and (obj.get("status") or {}).get("evacuationNodeName"):
            def move(v):
                v["status"].update(nodeName="n2", evacuationNodeName="")
                v["metadata"]["labels"]["kubevirt.io/nodeName"] = "n2"
            threading.Timer(0.2, lambda: (api.mutate("VirtualMachineInstance", "mig", "vms", fn=move),
                                          api.set_pod_phase("vms", "virt-launcher-mig-abcde", "Succeeded"))).start()

    api.on_change(migrate)


def _host_pods(api):
    """The fake kubelet runs rblnctl's host pods on one simulated healthy host (shared by every node)."""
    import shutil
    import tempfile
    import weakref
    from pathlib import Path

    from tests.fakes import sysfs as ht
    from tests.fakes.hostkubelet import HostKubelet

    tmp = tempfile.mkdtemp(prefix="rbac-host-")
    weakref.finalize(api, shutil.rmtree, tmp, True)  # the tree goes with the server
    HostKubelet(api, default=ht.build_host(Path(tmp) / "h", ht.intel_bare_metal()).root).start()


SCENARIOS = [
    Scenario("status", ("status",)),
    Scenario("version", ("version",)),
    Scenario("vm list", ("vm", "list", "-A"), _vms),
    Scenario("vm manifest", ("vm", "manifest", "v9"), _vms),
    Scenario("vm fit", ("vm", "fit", "--npus", "1"), _vms),
    Scenario("vm fit", ("vm", "fit", "--npus", "1", "--method", "dra"), _vms, exit_code=1),  # its one vfio NPU is held
    Scenario("vm diagnose", ("vm", "diagnose", "pending", "-n", "vms"), _vms, exit_code=1),
    Scenario("vm diagnose", ("vm", "diagnose", "dra-running", "-n", "vms"), _vms),
    Scenario("vm attach", ("vm", "attach", "running", "-n", "vms", "--npus", "2", "--restart", "--yes"), _vms),
    Scenario("vm attach", ("vm", "attach", "fresh", "-n", "vms", "--method", "dra", "--npus", "2"), _vms),
    Scenario("vm detach", ("vm", "detach", "dra-vm", "-n", "vms"), _vms),
    Scenario("vm start", ("vm", "start", "dra-life", "-n", "vms", "--wait", "--timeout", "30s"), _lifecycle),
    Scenario("vm stop", ("vm", "stop", "running", "-n", "vms", "--wait", "--yes", "--timeout", "30s"), _lifecycle),
    Scenario("vm restart", ("vm", "restart", "running", "-n", "vms", "--wait", "--yes", "--timeout", "30s"),
             _lifecycle),
    Scenario("vm restart", ("vm", "restart", "fresh", "-n", "vms", "--yes"), _lifecycle),  # stopped: started
    Scenario("node list", ("node", "list")),
    Scenario("node history", ("node", "history", "n1")),
    Scenario("kubevirt status", ("kubevirt", "status")),
    Scenario("kubevirt status", ("kubevirt", "status", "--name", "kubevirt", "-n", "kubevirt")),
    Scenario("preflight", ("preflight",), _dra, exit_code=1),
    Scenario("preflight", ("preflight", "--node", "n1"), exit_code=1),
    Scenario("node drain", ("node", "drain", "n1", "--yes"), _npu_pod),
    Scenario("node drain", ("node", "drain", "n1", "--yes", "--disable-eviction", "--take-over"),
             lambda api: (_npu_pod(api), _expired_lock(api))),
    Scenario("node drain", ("node", "drain", "n1", "--yes", "--all-pods", "--evict-vms"), _evacuated_vm),
    Scenario("node set-mode", ("node", "set-mode", "vm", "n1", "--yes"), lambda api: (_npu_pod(api), _dra(api))),
    # a pool: the NPU nodes a selector matches, each switched (drained) as one node is
    Scenario("node set-mode", ("node", "set-mode", "vm", "-l", "rebellions.ai/npu.present=true", "--yes"),
             _npu_pod),
    Scenario("node drain", ("node", "drain", "-l", "rebellions.ai/npu.present=true", "--yes"), _npu_pod),
    Scenario("kubevirt enable-gates", ("kubevirt", "enable-gates")),
    Scenario("kubevirt disable-gates", ("kubevirt", "disable-gates", "Snapshot", "--yes")),
    Scenario("kubevirt disable-gates", ("kubevirt", "disable-gates", "HostDevices", "--yes")),  # the guard's VMIs
    Scenario("kubevirt permit-devices", ("kubevirt", "permit-devices", "--resource-name", "RBLN-CA22_PF")),
    Scenario("preflight --hosts", ("preflight", "--hosts"), _host_pods, exit_code=1),
    Scenario("vfio status --node", ("vfio", "status", "--node", "n1"), _host_pods),
    Scenario("kubevirt migrate-resources", ("kubevirt", "migrate-resources"), _old_names),
    Scenario("policy show", ("policy", "show")),
    Scenario("policy set-method", ("policy", "set-method", "dra", "--yes", "--timeout", "30s", "--convert-vms"),
             _vm_for_dra),
]


def test_every_command_has_a_scenario():
    assert {s.command for s in SCENARIOS} == set(rbac.COMMANDS)


@pytest.fixture(scope="module")
def recorded():
    """Run every scenario with the operate role enforced; return the requests each made."""
    from tests.fakes.apiserver import FakeApiServer

    out = []
    for s in SCENARIOS:
        api = FakeApiServer().start()
        try:
            dra = s.command in ("preflight", "node set-mode")  # the DRA paths: claims, slices, DeviceClass
            api.add(o.cluster_policy(dra=dra, sandbox=not dra), o.npu_node("n1"), o.replicaset("default", "web"),
                    o.kubevirt(feature_gates=["Snapshot"], version="v1.9.0"))
            if s.setup:
                s.setup(api)
            op = SimulatedOperator(api).start()
            assert op.wait_idle()
            api.clear_requests()
            api.enforce_rbac(rbac.rbac_objects(rbac.ROLE_OPERATE, NS))
            r = cli(*s.args, server=api.url)
            op.stop()
            refused = [f"{q.method} {q.path}" for q in api.requests if q.status == 403]
            out.append((s, r, refused, [request_info(q.method, q.path, q.query) for q in api.requests]))
        finally:
            api.stop()
    return out


@pytest.mark.parametrize("index", range(len(SCENARIOS)), ids=lambda i: " ".join(SCENARIOS[i].args))
def test_with_the_rules_enforced_no_request_is_refused(recorded, index):
    s, r, refused, _ = recorded[index]
    assert refused == [], refused
    assert r.exit_code == s.exit_code, r.stderr


def _verbs(objects):
    for i, obj in enumerate(objects):
        for j, rule in enumerate(obj["rules"]):
            for verb in rule["verbs"]:
                yield i, j, verb


OPERATE = rbac.rbac_objects(rbac.ROLE_OPERATE, NS)


@pytest.mark.parametrize(("i", "j", "verb"), list(_verbs(OPERATE)),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_taking_any_verb_away_refuses_some_request(recorded, i, j, verb):
    smaller = copy.deepcopy(OPERATE)
    rule = smaller[i]["rules"][j]
    rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    authz = Authorizer(threading.RLock(), Settings())
    authz.enforce(smaller)
    assert any(not authz.decide(info).allowed for _, _, _, infos in recorded for info in infos), (
        f"{verb} {rule['resources']} is granted but no command used it")


def test_read_role_is_a_subset_that_runs_the_read_commands():
    read = rbac.rbac_objects(rbac.ROLE_READ, NS)
    # no locks (read commands take none); the Role only reads the DRA plugin's log (vm diagnose)
    assert [o_["kind"] for o_ in read] == ["ClusterRole", "Role"]
    assert read[1]["rules"] == [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    assert not [r for o_ in read for r in o_["rules"] if writes & set(r["verbs"])]


def test_the_command_prints_applyable_yaml_and_a_v1_list():
    r = cli("rbac", "-n", "ops")
    assert r.exit_code == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("ClusterRole", "rblnctl-operate"),
                                                                   ("Role", "rblnctl-operate")]
    assert docs[1]["metadata"]["namespace"] == "ops" and "kubectl create clusterrolebinding" in r.stdout
    r = cli("rbac", "--role", "read", "-o", "json")
    assert r.exit_code == 0 and '"kind": "List"' in r.stdout
    assert cli("rbac", "--role", "admin").exit_code == 2
