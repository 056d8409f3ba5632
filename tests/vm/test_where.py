"""Not found, and where it is (issue 30): a VM asked for in the wrong namespace names the namespace that holds one
(`-n vms`) from one cluster-wide list by field selector; a 403 on that list is no hint, never an error."""

from __future__ import annotations

from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22


def test_attach_in_the_wrong_namespace_names_the_one_that_holds_it(apiserver):
    apiserver.add(o.npu_node("npu-node-1", mode="vm-passthrough"), o.vm("vms", "plain", running=False))
    r = cli("vm", "attach", "plain", "--npus", "1", server=apiserver.url)
    assert r.exit_code == 1
    assert ('error: VirtualMachine "plain" not found in namespace "default"; it exists in namespace vms (-n vms)'
            in r.stderr)
    lists = [q for q in apiserver.requests if q.method == "GET" and q.path == "/apis/kubevirt.io/v1/virtualmachines"]
    assert len(lists) == 1 and "metadata.name=plain" in str(lists[0].query)


def test_start_names_every_namespace_holding_one(apiserver):
    apiserver.add(o.vm("a", "v", running=False), o.vm("b", "v", running=False))
    r = cli("vm", "start", "v", "-n", "c", server=apiserver.url)
    assert r.exit_code == 1 and "one of that name exists in namespaces a, b (-n a)" in r.stderr


def test_diagnose_without_n_says_where_it_is_not_create_it(apiserver):
    apiserver.add(o.npu_node("npu-node-1", mode="vm-passthrough"), o.vm("vms", "my-vm", host_devices=[CA22]))
    r = cli("vm", "diagnose", "my-vm", server=apiserver.url)
    assert r.exit_code == 1
    assert "not found; it exists in namespace vms (-n vms)" in r.stderr + r.stdout
    assert f"rblnctl --server {apiserver.url} vm diagnose my-vm -n vms" in r.stdout + r.stderr
    assert "create it" not in r.stdout + r.stderr


def test_diagnose_of_a_vm_nowhere_says_what_creates_it(apiserver):
    r = cli("vm", "diagnose", "ghost", "-n", "vms", server=apiserver.url)
    out = r.stdout + r.stderr
    assert r.exit_code == 1 and "`kubectl apply -f -` creates it" in out
    assert f"rblnctl --server {apiserver.url} vm manifest ghost -n vms --npus 1" in out


def test_a_forbidden_cluster_wide_list_is_no_hint_and_no_error(apiserver):
    apiserver.add(o.vm("vms", "plain", running=False))
    apiserver.forbid("list", "virtualmachines", namespace=None)
    r = cli("vm", "attach", "plain", "--npus", "1", server=apiserver.url)
    assert r.exit_code == 1 and r.stderr.strip() == 'error: VirtualMachine "plain" not found in namespace "default"'
