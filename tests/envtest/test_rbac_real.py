"""`rblnctl rbac`'s roles on a real RBAC authorizer: the commands run as a least-privilege account.

Each role is bound to a ServiceAccount (ClusterRoleBinding, RoleBinding in the operator's namespace) and
rblnctl runs with that account's token: the read role runs every read command, the operate role every
command (changes for real where no operator is needed, with --dry-run=server where one would be: a
server-side dry run is authorized exactly as the write). The server's audit log must show no 403; taking
one rule away must bring the 403 rblnctl names (verb, resource). Every decision the real authorizer made is
also the decision of the fake's authorizer (tests/fakes/apiserver/rbac.py) for the same roles, so the
default tier's exhaustive rbac test (tests/test_rbac.py) judges as the real server does.
"""

from __future__ import annotations

import copy
import threading
from urllib.parse import parse_qs, urlsplit

import pytest

from rblnctl import rbac
from tests.fakes import objects as o
from tests.fakes.apiserver.config import Settings
from tests.fakes.apiserver.rbac import Authorizer, request_info
from tests.fakes.releases import NEWER
from rblnctl.constants import OPERATOR_NAMESPACE as NS

CA22 = "rebellions.ai/RBLN-CA22_PF"
OLD = "rebellions.ai/ATOM_CA22_PT"
_METHOD = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
           "delete": "DELETE", "deletecollection": "DELETE"}


def world(real, *, vm_ready: bool = False) -> None:
    """`vm_ready`: KubeVirt already permits the NPUs (so vm attach gets as far as its patch)."""
    gates, permitted = (["HostDevices"], [("1EFF:1220", CA22)]) if vm_ready else (["Snapshot"], [("1EFF:1220", OLD)])
    real.api.seed(
        o.npu_node("c1"), o.npu_node("v1", mode="vm-passthrough"), o.node_feature("c1"), o.node_feature("v1"),
        NEWER.policy(vfio_manager=True, sandbox=True), NEWER.operator_deployment(),
        o.kubevirt(feature_gates=gates, version="v1.9.0", permitted_pci=permitted),
        o.vm("vms", "old", host_devices=[OLD], running=False), o.vm("vms", "fresh", running=False),
        o.replicaset("default", "web"),
        o.pod("default", "web-1", node="c1", owner_kind="ReplicaSet", owner_name="web",
              requests={"rebellions.ai/npu": "1"}))


READ = [
    ("status",), ("node", "list"), ("kubevirt", "status"), ("preflight",), ("vm", "list", "-A"),
    ("vm", "diagnose", "old", "-n", "vms"), ("vm", "manifest", "x"), ("policy", "show"), ("version",),
]
OPERATE = [
    ("kubevirt", "enable-gates"),
    ("kubevirt", "disable-gates", "Snapshot", "--yes"),
    ("kubevirt", "migrate-resources", "--map", f"{OLD}={CA22}", "--yes"),
    ("kubevirt", "permit-devices", "--resource-name", "RBLN-CA25_PF"),
    ("vm", "attach", "fresh", "-n", "vms", "--npus", "1"),
    ("vm", "detach", "fresh", "-n", "vms"),
    ("node", "drain", "c1", "--yes", "--timeout", "60s"),
    ("node", "set-mode", "vm", "c1", "--yes", "--dry-run=server"),
    ("policy", "set-method", "dra", "--yes", "--dry-run=server"),
]


def user_events(real, since: int) -> list:
    return [e for e in real.audit.events(since) if e.user.startswith("system:serviceaccount:default:rblnctl-user-")]


def fake_agrees(roles: list[dict], events: list) -> list[str]:
    """Decisions of the real authorizer the fake's authorizer would not make, one line each."""
    authz = Authorizer(threading.RLock(), Settings())
    authz.enforce(roles)
    out = []
    for e in events:
        parts = urlsplit(e.uri)
        info = request_info(_METHOD.get(e.verb, e.verb.upper()), parts.path, parse_qs(parts.query))
        if authz.decide(info).allowed != (e.code != 403):
            out.append(f"{e.verb} {e.uri}: real {e.code}")
    return out


@pytest.mark.parametrize("role", ["read", "operate"])
def test_every_command_runs_as_the_role_with_no_403(later_policy_crd_installed, real, role):
    world(real)
    roles = rbac.rbac_objects(role, NS)
    kubeconfig = real.user_kubeconfig(roles)
    kubelet = real.kubelet(["c1", "v1"])  # confirms the evicted pod's deletion
    since = real.audit.mark()
    for args in READ + (OPERATE if role == "operate" else []):
        r = real.rblnctl(*args, kubeconfig=kubeconfig)
        assert r.exit_code not in (4, 70), (args, r.stderr)
    kubelet.wait_idle()
    events = user_events(real, since)
    assert events, "the commands ran as the ServiceAccount"
    assert [f"{e.verb} {e.uri}" for e in events if e.code == 403] == []
    assert fake_agrees(roles, events) == []
    if role == "operate":  # the changes really happened as that account
        vm = real.api.get("VirtualMachine", "old", "vms")
        assert CA22 in str(vm["spec"]) and OLD not in str(vm["spec"])
        assert real.api.get("Pod", "web-1", "default") is None


def _without(roles: list[dict], resource: str, verb: str) -> list[dict]:
    out = copy.deepcopy(roles)
    for role in out:
        for rule in role["rules"]:
            if resource in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        role["rules"] = [r for r in role["rules"] if r["verbs"]]
    return out


@pytest.mark.parametrize(("resource", "verb", "args", "named"), [
    ("pods/eviction", "create", ("node", "drain", "c1", "--yes"), "create on pods/eviction"),
    ("kubevirts", "patch", ("kubevirt", "enable-gates"), "patch on kubevirts.kubevirt.io"),
    ("virtualmachines", "patch", ("vm", "attach", "fresh", "-n", "vms", "--npus", "1"),
     "patch on virtualmachines.kubevirt.io"),
])
def test_taking_a_rule_away_brings_the_403_rblnctl_names(later_policy_crd_installed, real, resource, verb, args,
                                                         named):
    world(real, vm_ready=args[0] == "vm")
    roles = _without(rbac.rbac_objects(rbac.ROLE_OPERATE, NS), resource, verb)
    kubeconfig = real.user_kubeconfig(roles)
    since = real.audit.mark()
    r = real.rblnctl(*args, kubeconfig=kubeconfig)
    assert r.exit_code == 4, r.stderr
    assert f"forbidden: RBAC does not allow {named}" in r.stderr and "Traceback" not in r.stderr
    events = user_events(real, since)
    assert [e.code for e in events if e.code == 403] == [403]
    assert fake_agrees(roles, events) == []
