"""The namespace a namespaced command works in: -n, else the kubeconfig context's, else `default` (as kubectl).

Issue 21 item 1: with `namespace: vms` in the context, `vm list`, `vm diagnose` and `vm attach` act in
`vms`, and `vm diagnose <TAB>` completes the VMs there.
"""

from __future__ import annotations

import json

import pytest

from rblnctl.cli.app import State
from rblnctl.kube import KubeOptions, connect
from rblnctl.kube.connection import in_cluster_namespace
from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22, sandbox_cluster


@pytest.fixture
def vms_context(apiserver, tmp_path, monkeypatch):
    """A kubeconfig whose context names namespace `vms`, as $KUBECONFIG (no -n on any command line)."""
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig", namespace="vms")
    monkeypatch.setenv("KUBECONFIG", str(path))
    sandbox_cluster(apiserver)
    apiserver.add(o.namespace("vms"), o.vm("vms", "my-vm", running=False, host_devices=[CA22]),
                  o.vm("default", "other", running=False, host_devices=[CA22]))
    return path


def test_vm_list_uses_the_context_namespace(vms_context):
    r = cli("vm", "list", "-o", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["namespace"] == "vms"
    assert [(i["namespace"], i["name"]) for i in doc["items"]] == [("vms", "my-vm")]


def test_namespace_flag_wins_over_the_context(vms_context):
    r = cli("vm", "list", "-n", "default", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert [i["name"] for i in json.loads(r.stdout)["items"]] == ["other"]


def test_vm_diagnose_finds_the_vm_in_the_context_namespace(vms_context):
    r = cli("vm", "diagnose", "my-vm", "-o", "json")
    doc = json.loads(r.stdout)
    assert doc["vm"] == {"namespace": "vms", "name": "my-vm"}
    assert doc["links"][0]["name"] == "VirtualMachine" and doc["links"][0]["status"] == "PASS"


def test_vm_attach_writes_the_vm_in_the_context_namespace(vms_context, apiserver):
    apiserver.clear_requests()
    r = cli("vm", "attach", "my-vm", "--npus", "2", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["vm"] == {"namespace": "vms", "name": "my-vm"}
    paths = [w.path for w in apiserver.writes()]
    assert paths and all("/namespaces/vms/virtualmachines/my-vm" in p for p in paths), paths
    devices = apiserver.get("VirtualMachine", "my-vm", "vms")["spec"]["template"]["spec"]["domain"]["devices"]
    assert len(devices["hostDevices"]) == 2


def test_completion_offers_the_vms_of_the_context_namespace(vms_context):
    from rblnctl.cli.completion import complete_vms

    class Root:
        params: dict = {}

        def find_root(self):
            return self

    assert complete_vms(Root(), "") == ["my-vm"]


def test_context_without_a_namespace_means_default(apiserver, tmp_path, monkeypatch):
    path = apiserver.write_kubeconfig(tmp_path / "kc", namespace="")
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert connect(KubeOptions()).namespace == "default"
    assert State(connection={}).object_namespace() == "default"
    assert State(connection={}, namespace="vms").object_namespace() == "vms"


def test_server_flag_alone_means_default(apiserver):
    assert connect(KubeOptions(server=apiserver.url)).namespace == "default"


def test_in_cluster_namespace_order(monkeypatch, tmp_path):
    """client-go's inClusterClientConfig.Namespace: POD_NAMESPACE, then the service account's file, then default."""
    import rblnctl.kube.connection as conn

    ns_file = tmp_path / "namespace"
    monkeypatch.setattr(conn, "SA_NAMESPACE", ns_file)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert in_cluster_namespace() == "default"
    ns_file.write_text("team-a\n")
    assert in_cluster_namespace() == "team-a"
    monkeypatch.setenv("POD_NAMESPACE", "from-env")
    assert in_cluster_namespace() == "from-env"


def test_kubevirt_commands_still_search_every_namespace(vms_context):
    """The KubeVirt CR lives in KubeVirt's own namespace: a context pointed at `vms` must not hide it."""
    r = cli("kubevirt", "status", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["namespace"] == "kubevirt"
