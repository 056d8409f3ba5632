"""Issue 39, findings 1-4 and 8: remedies the named command refused, and a cluster of several NPU products in vm
mode treated as first-class. The world is the shared stack's (../shared/stack/README.md): npu-node-1 RBLN-CA12 x4,
npu-node-2 RBLN-CA25 x4, npu-node-3 RBLN-CA22 x2 under chart v0.3.0's policy, whose sandbox resourceList names
ATOM_PT (CA12) and ATOM_MAX_PT (CA25) and nothing for CA22 (tests/cli/test_remedies_run.py, stack). Finding 9 is
tests/vm/test_detach.py::test_detach_of_a_device_the_vm_does_not_have_is_not_found."""

from __future__ import annotations


from tests.cli.test_remedies_run import stack, stack_switch_cut_short, stack_two_products_in_vm_mode
from tests.fakes import objects as o
from tests.helpers import cli, vm_fit_per_product

ATOM_PT, ATOM_MAX_PT = "rebellions.ai/ATOM_PT", "rebellions.ai/ATOM_MAX_PT"


def rows(stdout: str) -> dict[str, str]:
    return {line.split()[0]: line for line in stdout.splitlines() if line.startswith("npu-node-")}


def test_vm_fit_names_a_switch_only_where_set_mode_accepts_it_and_the_product_is_the_vms(apiserver):
    """(1) Before: every container node said `node set-mode vm NODE`, npu-node-3 too (set-mode refuses it: no
    sandbox resource for RBLN-CA22), and a CA25 question told the user to switch the CA12 node."""
    stack(apiserver)
    r = cli("vm", "fit", "--npus", "2", "--product", "RBLN-CA12", server=apiserver.url)
    assert r.exit_code == 1
    row = rows(r.stdout)
    assert "node set-mode vm npu-node-1" in row["npu-node-1"]
    assert "set-mode" not in row["npu-node-2"].replace("`node set-mode vm` refuses", "") and \
        "they are RBLN-CA25, not RBLN-CA12" in row["npu-node-2"]
    assert "node set-mode vm npu-node-3`" not in row["npu-node-3"] and "none of them for RBLN-CA22" in row["npu-node-3"]
    r = cli("vm", "fit", "--npus", "2", server=apiserver.url)  # no product asked: the two switchable nodes
    assert [n for n, line in rows(r.stdout).items() if f"node set-mode vm {n}`" in line] == ["npu-node-1", "npu-node-2"]
    # and set-mode accepts what is named, refuses what is not (the rule it was computed from)
    assert cli("node", "set-mode", "vm", "npu-node-1", "--dry-run", server=apiserver.url).exit_code == 0
    assert cli("node", "set-mode", "vm", "npu-node-3", "--dry-run", server=apiserver.url).exit_code == 1


def test_preflight_goes_back_from_a_switch_cut_short_with_reverse(apiserver):
    """(2) Before: `node set-mode container npu-node-1` for a node mid-switch to vm; set-mode refuses it without
    --reverse."""
    stops = stack_switch_cut_short(apiserver)
    try:
        r = cli("preflight", server=apiserver.url)
        line = next(x for x in r.stdout.splitlines() if "node.vm-npus (npu-node-1)" in x)
        assert "node set-mode container npu-node-1 --reverse`" in line, line
        assert cli("node", "set-mode", "container", "npu-node-1", "--reverse", "--dry-run",
                   server=apiserver.url).exit_code == 0
    finally:
        for stop in stops:
            stop()


def test_diagnose_of_a_stuck_plugin_points_at_the_vm_node_and_suggests_no_other_products_resource(apiserver):
    """(3) Before: "switch a node with that product to vm mode" for npu-node-1, already in vm mode, and "did you
    mean rebellions.ai/ATOM_MAX_PT?", RBLN-CA25's resource, for a VM asking for RBLN-CA12's ATOM_PT."""
    stack(apiserver, ("vm-passthrough", "vm-passthrough", "container"))
    apiserver.mutate("Node", "npu-node-1", None, fn=lambda n: n["status"]["allocatable"].clear())  # plugin stuck
    apiserver.mutate("Node", "npu-node-1", None, fn=lambda n: n["metadata"]["labels"].update(
        {o.NPU_PRODUCT_LABEL: "RBLN-CA12"}))
    apiserver.add(o.vm("vms", "v1", running=False, host_devices=[ATOM_PT]))
    r = cli("vm", "diagnose", "v1", "-n", "vms", server=apiserver.url)
    assert "did you mean" not in r.stdout + r.stderr
    assert "switch a node with that product" not in r.stdout + r.stderr
    assert "npu-node-1 is in vm mode with that product" in r.stdout + r.stderr
    assert "node list npu-node-1 --output wide`" in r.stdout + r.stderr


def test_the_quick_start_on_two_products_in_vm_mode_names_the_product_flag_and_vm_fit_answers_each(apiserver):
    """(4) Before: README's `vm manifest my-vm -n vms --npus 2` said "pass --resource" (--product is what works,
    unnamed), `vm fit --npus 2` refused, and `vm manifest` with no vm node named no flag."""
    stack_two_products_in_vm_mode(apiserver)
    r = cli("vm", "manifest", "my-vm", "-n", "vms", "--npus", "2", server=apiserver.url)
    assert r.exit_code == 2
    (line,) = r.stderr.strip().splitlines()  # one line, naming the flag and each product's value
    assert "(pass --product)" in line and "RBLN-CA12 (rebellions.ai/ATOM_PT, on npu-node-1)" in line
    assert "RBLN-CA25 (rebellions.ai/ATOM_MAX_PT, on npu-node-2)" in line
    for product in ("RBLN-CA12", "RBLN-CA25"):  # what it names works
        assert cli("vm", "manifest", "my-vm", "-n", "vms", "--npus", "2", "--product", product,
                   server=apiserver.url).exit_code == 0
    items = vm_fit_per_product(apiserver.url, 2,
                               f"1 VM(s) of 2 NPU(s) ({ATOM_PT}): 1 fit now (2 could), on npu-node-1 (2)",
                               f"1 VM(s) of 2 NPU(s) ({ATOM_MAX_PT}): 1 fit now (2 could), on npu-node-2 (2)")
    assert [i["resource"] for i in items] == [ATOM_MAX_PT, ATOM_PT]


def test_manifest_with_no_vm_node_names_the_flag(apiserver):
    stack(apiserver)
    r = cli("vm", "manifest", "my-vm", "-n", "vms", "--npus", "2", server=apiserver.url)
    assert r.exit_code == 1 and "(pass --resource)" in r.stderr


def test_node_list_of_a_missing_name_does_not_say_there_are_no_npu_nodes(apiserver):
    """(8) Before: `node list npu-node-9` printed "No NPU nodes found (NFD labels ...)" though three exist."""
    stack(apiserver)
    r = cli("node", "list", "npu-node-9", server=apiserver.url)
    assert r.exit_code == 1 and "No NPU nodes found" not in r.stderr + r.stdout
    assert 'nodes "npu-node-9" not found' in r.stderr
    assert "No NPU nodes found" in cli("node", "list", "-l", "x=y", server=apiserver.url).stderr  # a selection


def test_preflight_remedies_name_the_program_run_and_keep_the_context(apiserver, tmp_path):
    """Preflight's remedies are Remedy data now: spelt for `kubectl rbln` with the --kubeconfig and --context given
    (a hint followed under --context acts on the same cluster); one run on a node's host gets no cluster flags."""
    from tests.cli.test_remedies import run

    stack(apiserver)
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    r = run("kubectl rbln", kubeconfig, "preflight")
    head = f"kubectl rbln --kubeconfig {kubeconfig} --context fake"
    assert f"`{head} node set-mode vm npu-node-1` for one" in r.stdout, r.stdout
    assert "`kubectl rbln preflight --local` on that node" in r.stdout  # the host's own check: no --context
    assert "rblnctl " not in r.stdout.replace("rblnctl.", "")
