"""What list commands print, as kubectl users expect (issues 21 item 8 and 30): -o custom-columns, --sort-by,
--show-labels, node list NAME..., vm list -l and --watch, compact device columns; a Kubernetes path over rblnctl's
flat items is an error naming the fields there are, in kubectl's words (pkg/cmd/get/sorter.go), not an empty line
or `<none>` with exit 0."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_status_watch import _printed, _wait_for, watch_cli
from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22, CA25

NS = "vms"


@pytest.fixture
def nodes(apiserver):
    apiserver.add(o.cluster_policy(workload_type="container"),
                  o.npu_node("n1", labels={"pool": "a"}, npus=4),
                  o.npu_node("n2", mode="vm-passthrough", product="RBLN-CA22", npus=2),
                  o.npu_node("n3", labels={"pool": "b"}, npus=8),
                  o.node("cpu"))
    apiserver.clear_requests()
    return apiserver


# -- custom-columns ---------------------------------------------------------------------------------------------


def test_custom_columns_over_the_documented_json(nodes):
    r = cli("node", "list", "-o", "custom-columns=NAME:.name,MODE:.mode,POOL:.labels.pool,NPUS:{.npuCount}",
            server=nodes.url)
    assert r.exit_code == 0, r.stderr
    assert [line.split() for line in r.stdout.splitlines()] == [
        ["NAME", "MODE", "POOL", "NPUS"], ["n1", "container", "a", "4"], ["n2", "vm-passthrough", "<none>", "2"],
        ["n3", "container", "b", "8"]]
    r = cli("node", "list", "-o=custom-columns=NAME:name", "--no-headers", server=nodes.url)
    assert r.stdout.split() == ["n1", "n2", "n3"]


def test_custom_columns_file(nodes, tmp_path):
    spec = tmp_path / "cols"
    spec.write_text("NODE   COMPONENTS\n.name  .components[*]\n")
    r = cli("node", "list", "-o", f"custom-columns-file={spec}", server=nodes.url)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0].split() == ["NODE", "COMPONENTS"]
    assert r.stdout.splitlines()[1].startswith("n1 ")


def test_custom_columns_of_a_document_that_is_no_list(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"]))
    r = cli("kubevirt", "status", "-o", "custom-columns=NAME:.name,GATES:.featureGates[*]", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [line.split() for line in r.stdout.splitlines()] == [["NAME", "GATES"], ["kubevirt", "HostDevices"]]


@pytest.mark.parametrize("spec, message", [
    ("custom-columns=", "no custom columns given"),
    ("custom-columns=NAME", "expected <header>:<json-path-expr>"),
    ("custom-columns=NAME:.a[", "bad jsonpath template"),
    ("custom-columns=NAME:{{.a}}", "unexpected path string"),
])
def test_a_bad_custom_columns_spec_is_bad_input_before_any_request(nodes, spec, message):
    r = cli("node", "list", "-o", spec, server=nodes.url)
    assert r.exit_code == 2 and message in r.stderr and nodes.requests == []


# -- --sort-by --------------------------------------------------------------------------------------------------


def test_sort_by_a_field_of_each_item(nodes):
    r = cli("node", "list", "--sort-by", "{.npuCount}", "-o", "name", server=nodes.url)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == ["node/n2", "node/n1", "node/n3"]  # 2, 4, 8: numbers sort as numbers
    r = cli("node", "list", "--sort-by=.mode", server=nodes.url)
    assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["n1", "n3", "n2"]  # stable within a mode
    doc = json.loads(cli("node", "list", "--sort-by=.labels.pool", "-o", "json", server=nodes.url).stdout)
    assert [i["name"] for i in doc["items"]] == ["n2", "n1", "n3"]  # missing first, then a, b


def test_a_bad_sort_by_is_bad_input_before_any_request(nodes):
    r = cli("node", "list", "--sort-by", "{.items[", server=nodes.url)
    assert r.exit_code == 2 and nodes.requests == []


# -- --show-labels, NAME... ---------------------------------------------------------------------------------------


def test_show_labels_adds_a_labels_column(nodes):
    r = cli("node", "list", "--show-labels", server=nodes.url)
    assert r.exit_code == 0, r.stderr
    header, n1 = r.stdout.splitlines()[:2]
    assert header.split()[-1] == "LABELS"
    assert "pool=a" in n1.split()[-1].split(",") and "rebellions.ai/npu.present=true" in n1.split()[-1]
    assert "LABELS" not in cli("node", "list", server=nodes.url).stdout


def test_node_list_names_like_kubectl_get_node_name(nodes):
    r = cli("node", "list", "n3", "n1", "-o", "name", server=nodes.url)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == ["node/n3", "node/n1"]  # the order given
    assert [req.path for req in nodes.requests if req.path.startswith("/api/v1/nodes")] == [
        "/api/v1/nodes/n3", "/api/v1/nodes/n1"]  # a GET each, as kubectl get node NAME


def test_node_list_names_not_there_print_the_rest_then_fail(nodes):
    r = cli("node", "list", "n1", "nosuch", "cpu", server=nodes.url)
    assert r.exit_code == 1
    assert [line.split()[0] for line in r.stdout.splitlines()] == ["NAME", "n1"]
    assert 'error: nodes "nosuch" not found' in r.stderr and "node cpu has no Rebellions NPU" in r.stderr


def test_node_list_names_and_a_selector_is_bad_input(nodes):
    r = cli("node", "list", "n1", "-l", "pool=a", server=nodes.url)
    assert r.exit_code == 2 and "not both" in r.stderr and nodes.requests == []


# -- vm list: compact devices, --sort-by, --watch -----------------------------------------------------------------


def test_an_8_npu_vm_row_stays_short(apiserver):
    """A vm list row for an 8-NPU VM was 316 characters (eight `npuN=rebellions.ai/RBLN-CA22_PF`)."""
    apiserver.add(o.vm(NS, "big", running=False, host_devices=[CA22] * 8),
                  o.vm(NS, "mixed", running=False, host_devices=[CA22, CA25, CA22]))
    r = cli("vm", "list", "-n", NS, server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    rows = r.stdout.splitlines()
    assert rows[1].split() == ["big", "Stopped", "<none>", "8", "sandbox", "8x", "RBLN-CA22_PF"]
    assert rows[2].endswith("2x RBLN-CA22_PF, 1x RBLN-CA25_PF")
    assert max(len(row) for row in rows) < 80
    wide = cli("vm", "list", "-n", NS, "-o", "wide", server=apiserver.url).stdout
    assert ",".join(f"npu{i}={CA22}" for i in range(8)) in wide


def test_vm_list_sort_by(apiserver):
    apiserver.add(o.vm(NS, "a", running=False, host_devices=[CA22] * 3),
                  o.vm(NS, "b", running=False, host_devices=[CA22]),
                  o.vm(NS, "c", running=False, host_devices=[CA22] * 2))
    r = cli("vm", "list", "-n", NS, "--sort-by", ".npus", "-o", "custom-columns=VM:.name,NPUS:.npus",
            server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert [line.split() for line in r.stdout.splitlines()] == [["VM", "NPUS"], ["b", "1"], ["c", "2"], ["a", "3"]]


def test_vm_list_watch_prints_each_change_as_a_line(apiserver):
    apiserver.add(o.vm(NS, "v1", running=False, host_devices=[CA22]))

    def script():
        _wait_for(lambda: "NAME" in _printed() and apiserver.open_watches == 2, "the first table and the watches")
        apiserver.add(o.vmi(NS, "v1", "n1", [CA22]))
        _wait_for(lambda: "node <none> -> n1" in _printed(), "the VMI")
        apiserver.add(o.vm(NS, "v2", running=False, host_devices=[CA22, CA22]))
        _wait_for(lambda: "virtualmachine/vms/v2 added" in _printed(), "the new VM")

    r = watch_cli(apiserver, "vm", "list", "-n", NS, "-w", script=script)
    assert r.exit_code == 130, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATUS"] and lines[1].split()[0] == "v1"
    assert "virtualmachine/vms/v1 node <none> -> n1" in lines
    assert "virtualmachine/vms/v2 added (2 NPU(s))" in lines


@pytest.fixture
def two_nodes(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node("npu-a", mode="vm-passthrough"), o.npu_node("npu-b"))
    return apiserver


@pytest.mark.parametrize("args", [
    ("-o", "jsonpath={.items[*].metadata.name}"),
    ("-o", "jsonpath={range .items[*]}{.metadata.name}{'\\n'}{end}"),
    ("-o", "custom-columns=NAME:.metadata.name"),
    ("--sort-by=.metadata.name",),
])
def test_a_kubernetes_path_over_flat_items_fails_naming_the_fields(two_nodes, args):
    r = cli("node", "list", *args, server=two_nodes.url)
    assert r.exit_code == 2 and r.stdout == ""
    line = r.stderr.strip()
    assert line.startswith("error: couldn't find any field with path \"{")
    assert "no 'metadata' in the objects" in line and ".name, " in line and ".npuFree" in line
    assert "rblnctl's items are flat" in line and len(r.stderr.splitlines()) == 1


def test_a_misspelt_field_in_one_custom_column_fails_and_a_field_some_items_have_does_not(two_nodes):
    r = cli("node", "list", "-o", "custom-columns=NAME:.name,FREE:.npuFre", server=two_nodes.url)
    assert r.exit_code == 2 and "no 'npuFre' in the objects, which have .name," in r.stderr
    r = cli("node", "list", "-o", "custom-columns=NAME:.name,POOL:.labels.pool", server=two_nodes.url)
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
