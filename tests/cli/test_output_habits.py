"""kubectl's output habits over rblnctl's flat documents (issue 30): a field no item has is an error naming the
fields there are, in kubectl's words (pkg/cmd/get/sorter.go), not an empty line or `<none>` with exit 0; and
`vm list -l` as `kubectl get vm -l`."""

from __future__ import annotations

import pytest

from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22

NS = "vms"


@pytest.fixture
def nodes(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("npu-a", mode="vm-passthrough"), o.npu_node("npu-b"))
    return apiserver


@pytest.mark.parametrize("args", [
    ("-o", "jsonpath={.items[*].metadata.name}"),
    ("-o", "jsonpath={range .items[*]}{.metadata.name}{'\\n'}{end}"),
    ("-o", "custom-columns=NAME:.metadata.name"),
    ("--sort-by=.metadata.name",),
])
def test_a_kubernetes_path_over_flat_items_fails_naming_the_fields(nodes, args):
    r = cli("node", "list", *args, server=nodes.url)
    assert r.exit_code == 2 and r.stdout == ""
    line = r.stderr.strip()
    assert line.startswith("error: couldn't find any field with path \"{")
    assert "no 'metadata' in the objects" in line and ".name, " in line and ".npuFree" in line
    assert "rblnctl's items are flat" in line and len(r.stderr.splitlines()) == 1


def test_a_misspelt_field_in_one_custom_column_fails_and_a_field_some_items_have_does_not(nodes):
    r = cli("node", "list", "-o", "custom-columns=NAME:.name,FREE:.npuFre", server=nodes.url)
    assert r.exit_code == 2 and "no 'npuFre' in the objects, which have .name," in r.stderr
    r = cli("node", "list", "-o", "custom-columns=NAME:.name,POOL:.labels.pool", server=nodes.url)
    assert r.exit_code == 0, r.stderr  # a label is data: missing on every node is an answer (<none>)
    assert r.stdout.split() == ["NAME", "POOL", "npu-a", "<none>", "npu-b", "<none>"]


def test_vm_list_takes_a_label_selector(apiserver):
    team = o.vm(NS, "ml-1", host_devices=[CA22], running=False)
    team["metadata"]["labels"] = {"team": "ml"}
    other = o.vm(NS, "web", host_devices=[CA22], running=False)
    lone = o.vmi(NS, "lone", "npu-a", [CA22], standalone=True)
    lone["metadata"]["labels"] = {"team": "ml"}
    stray = o.vmi(NS, "stray", "npu-a", [CA22], standalone=True)
    apiserver.add(team, other, lone, stray)
    r = cli("vm", "list", "-n", NS, "-l", "team=ml", "-o", "name", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert sorted(r.stdout.split()) == ["virtualmachine.kubevirt.io/ml-1", "virtualmachineinstance.kubevirt.io/lone"]
    r = cli("vm", "list", "-n", NS, "--selector", "team=nobody", server=apiserver.url)
    assert r.exit_code == 0 and r.stdout == "" and "No VM with NPUs found" in r.stderr
