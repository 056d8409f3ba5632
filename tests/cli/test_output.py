"""Tables as kubectl prints them, the -o spellings kubectl users type, and JSONPath as kubectl evaluates it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from rblnctl.cli import jsonpath
from rblnctl.cli.output import Cell, Column, Format, Table, parse_output
from rblnctl.errors import InvalidInput
from tests.fakes import objects as o
from tests.helpers import cli

LONG = "gpu-worker-rack17-slot03-very-long-node-name"


@pytest.fixture
def nodes(apiserver):
    apiserver.add(o.cluster_policy(), o.npu_node(f"{LONG}-a", mode="vm-passthrough"),
                  o.npu_node(f"{LONG}-b", mode="vm-passthrough"), o.npu_node(f"{LONG}-c", mode="vm-passthrough"),
                  o.npu_node("short", mode="container"), o.node("cpu-only"))
    return apiserver


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A real process (no terminal): what `| grep` and `| awk` see."""
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "rblnctl", *args], capture_output=True, text=True, env=full,
                          timeout=60)


def test_a_narrow_terminal_never_folds_a_cell_so_grep_counts_every_row(nodes):
    r = _run("--server", nodes.url, "node", "list", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert sum("vm-passthrough" in line for line in r.stdout.splitlines()) == 3  # grep -c vm-passthrough
    assert all(len(line.split()) >= 5 for line in r.stdout.splitlines())  # every row whole, on one line
    assert max(len(line) for line in r.stdout.splitlines()) > 80  # the terminal wraps; the table does not


def test_the_first_line_is_the_header_and_awk_reads_the_rest(nodes):
    r = _run("--server", nodes.url, "node", "list")
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "MODE", "STATUS", "NPUS", "ALLOCATED", "FREE"]  # RESOURCES: -o wide
    assert [ln.split()[0] for ln in lines[1:]] == [f"{LONG}-a", f"{LONG}-b", f"{LONG}-c", "short"]
    assert not any(set(ln.strip()) <= set("─-━ ") for ln in lines)  # no rule, no blank line
    assert not lines[0].startswith(" ") and "\x1b[" not in r.stdout  # no indent, no colour in a pipe


def test_no_headers_wide_and_name(nodes):
    plain = cli("node", "list", "--no-headers", server=nodes.url).stdout.splitlines()
    assert [ln.split()[0] for ln in plain] == [f"{LONG}-a", f"{LONG}-b", f"{LONG}-c", "short"]
    wide = cli("node", "list", "-o", "wide", server=nodes.url).stdout.splitlines()
    assert wide[0].split() == ["NAME", "MODE", "STATUS", "NPUS", "ALLOCATED", "FREE", "RESOURCES", "PRODUCT",
                               "COMPONENTS"]
    assert cli("node", "list", "-o=name", server=nodes.url).stdout.splitlines()[-1] == "node/short"
    assert cli("node", "list", "--no-headers", "-o", "wide", server=nodes.url).stdout.splitlines()[0].startswith(LONG)


@pytest.mark.parametrize("spelling", [["-o", "json"], ["-o=json"], ["-ojson"], ["--output=json"],
                                      ["--output", "json"], ["-o", "JSON"]])
def test_every_kubectl_spelling_of_the_output_flag(nodes, spelling):
    r = cli("node", "list", *spelling, server=nodes.url)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "NpuNodeList"


def test_an_unknown_format_exits_2_before_reading_the_cluster(nodes):
    nodes.clear_requests()
    r = cli("node", "list", "-o", "xml", server=nodes.url)
    assert r.exit_code == 2 and "allowed formats are: table, wide, name, json, yaml, jsonpath=TEMPLATE" in r.stderr
    r = cli("node", "list", "-o", "jsonpath={.items[}", server=nodes.url)
    assert r.exit_code == 2 and "bad jsonpath template" in r.stderr
    assert nodes.requests == []


def test_jsonpath_output(nodes):
    r = cli("node", "list", "-o", 'jsonpath={range .items[?(@.mode=="vm-passthrough")]}{.name}{"\\n"}{end}',
            server=nodes.url)
    assert r.stdout.splitlines() == [f"{LONG}-a", f"{LONG}-b", f"{LONG}-c"]
    r = cli("node", "list", "-o", "jsonpath='{.items[*].name}'", server=nodes.url)  # quotes kept from a shell
    assert r.stdout == f"{LONG}-a {LONG}-b {LONG}-c short"


def test_junit_is_refused_outside_preflight():
    with pytest.raises(InvalidInput, match="cannot print -o junit"):
        parse_output("junit")
    assert parse_output("junit", allowed=(Format.table, Format.junit)).format == Format.junit


# -- Table ---------------------------------------------------------------------------------------


def test_table_pads_with_three_spaces_and_strips_the_last_column():
    t = Table("NAME", "MODE", Column("EXTRA", wide=True))
    t.add_row("n1", "vm-passthrough", "x")
    t.add_row("node-two", "container", "")
    assert t.render() == "NAME       MODE\nn1         vm-passthrough\nnode-two   container\n"
    assert t.render(wide=True, headers=False).splitlines()[0] == "n1         vm-passthrough   x"


def test_a_newline_inside_a_cell_stays_on_its_row():
    t = Table("A", "B")
    t.add_row("x", "two\nlines")
    assert t.render().splitlines() == ["A   B", "x   two lines"]


def test_json_and_wide_give_a_vm_node_the_npus_and_product_the_table_counts(nodes):
    """A vm-passthrough node has no npu.count/npu.product labels (NPU feature discovery is container-only):
    -o json and -o wide read them from its VM resources, so they agree with the NPUS column."""
    table = cli("node", "list", "--no-headers", server=nodes.url).stdout.splitlines()
    assert table[0].split()[3] == "2" and "RBLN-CA22_PF=2" not in table[0]  # RESOURCES is a wide column
    assert "RBLN-CA22_PF=2" in cli("node", "list", "--no-headers", "-o", "wide", server=nodes.url).stdout
    item = json.loads(cli("node", "list", "-o", "json", server=nodes.url).stdout)["items"][0]
    assert (item["mode"], item["npuCount"], item["product"]) == ("vm-passthrough", 2, "RBLN-CA22")
    wide = cli("node", "list", "--no-headers", "-o", "wide", server=nodes.url).stdout.splitlines()
    assert "RBLN-CA22 " in wide[0] and "<unknown>" not in wide[0]
    picked = cli("node", "list", "-o", "jsonpath={.items[?(@.npuCount>1)].name}", server=nodes.url).stdout
    assert picked.split() == [f"{LONG}-a", f"{LONG}-b", f"{LONG}-c", "short"]


def test_colour_is_painted_after_padding_so_columns_still_line_up():
    t = Table("STATUS", "N")
    t.add_row(Cell("FAIL", "bold red"), "1")
    t.add_row("PASS", "2")
    coloured = t.render(color=True).splitlines()
    assert coloured[1] == "\x1b[1;31mFAIL\x1b[0m     1"
    assert t.render().splitlines()[1] == "FAIL     1"


# -- JSONPath ------------------------------------------------------------------------------------

DOC = {"kind": "NpuNodeList", "items": [
    {"name": "a", "mode": "vm-passthrough", "npuCount": 4, "resources": {"rebellions.ai/RBLN-CA22_PF": 4},
     "components": ["vfio-manager", "sandbox-device-plugin"]},
    {"name": "b", "mode": "container", "npuCount": 2, "resources": {}, "components": []},
]}


@pytest.mark.parametrize(("template", "expected"), [
    ("{.kind}", "NpuNodeList"),
    ("{.items[*].name}", "a b"),
    ("{.items[0].name}", "a"),
    ("{.items[-1].name}", "b"),
    ("{.items[0:1].name}", "a"),
    ("{..name}", "a b"),
    ("{.items[?(@.npuCount>2)].name}", "a"),
    ("{.items[?(@.mode!='container')].name}", "a"),
    ("{.items[?(@.components[0])].name}", "a"),
    ("{.items[0].resources['rebellions.ai/RBLN-CA22_PF']}", "4"),
    ("{.items[0].resources.rebellions\\.ai/RBLN-CA22_PF}", "4"),
    ("{.items[0].components}", '["vfio-manager","sandbox-device-plugin"]'),
    ("{.items[1].resources}", "{}"),
    ("{.items[0].name,.items[1].name}", "a b"),
    ("{range .items[*]}{.name}={.mode}{'\\n'}{end}", "a=vm-passthrough\nb=container\n"),
    ("names: {.items[*].name}", "names: a b"),
])
def test_jsonpath_cases(template, expected):
    assert jsonpath.render(template, DOC) == expected


@pytest.mark.parametrize(("template", "where"), [
    ("{.items[0].missing}", "no 'missing' in the objects at .items[0], which have .name, .mode, .npuCount, "
                            ".resources, .components"),
    ("{.items[0].missing[3]}", "no 'missing' in the objects at .items[0]"),
    ("{.items[*].metadata.name}", "no 'metadata' in the objects at .items[*], which have .name, .mode, .npuCount, "
                                  ".resources, .components (rblnctl's items are flat: .items[*].name, not "
                                  ".items[*].metadata.name; docs/output.md)"),
    ("{range .items[*]}{.metadata.name}{end}", "no 'metadata' in the objects, which have .name, .mode"),
    ("{.spec}", "no 'spec' in the objects, which have .kind, .items"),
])
def test_jsonpath_field_no_object_has_is_an_error_naming_the_fields_there_are(template, where):
    """kubectl prints nothing and exits 0 (--allow-missing-template-keys=true); rblnctl's items are flat, so a
    kubectl habit would pass silently: an error in kubectl's --sort-by words, naming the fields (issue 30)."""
    with pytest.raises(InvalidInput) as e:
        jsonpath.render(template, DOC)
    assert str(e.value).startswith(f"couldn't find any field with path \"{template}\" in the list of objects: {where}")
    assert jsonpath.render(template, DOC, allow_missing_keys=True) == ""


@pytest.mark.parametrize(("template", "expected"), [
    ("{.items[1].components[*].name}", ""),  # nothing to look in: no miss
    ("{.items[?(@.mode=='none')].metadata}", ""),  # a filter matching nothing: no miss
    ("{range .items[*]}{.resources.rebellions\\.ai/RBLN-CA22_PF}{end}", "4"),  # one item has it: enough
    ("{.items[*].resources.x}", ""),  # a map of resource names is data: ... but no item has x
])
def test_jsonpath_field_some_object_has_or_nothing_to_look_in_is_no_error(template, expected):
    assert jsonpath.render(template, DOC) == expected


@pytest.mark.parametrize("bad", ["{.items[}", "{range .items[*]}{.name}", "{end}", "{.items[?(@.x ~ 1)]}", "{}",
                                 "{.items[a:b]}"])
def test_jsonpath_bad_templates_are_one_line_errors(bad):
    with pytest.raises(InvalidInput, match="bad jsonpath template"):
        jsonpath.parse(bad)


@pytest.mark.parametrize(("template", "expected"), [
    ("{.items[2:2].name}", ""),  # no item asked for: empty, whatever the bounds
    ("{.items[9:9].name}", ""),
    ("{.items[-2:].name}", "a b"),
    ("{.items[:-1].name}", "a"),
    ("{.items[1,0].name}", "b a"),
    ("{.items[0].components[1,0]}", "sandbox-device-plugin vfio-manager"),
    ("{.items[*]['mode','name']}", "vm-passthrough container a b"),  # member by member, as evalUnion
    ("{.items[?(@.components[5])].name}", ""),  # an existence filter swallows the error
])
def test_jsonpath_bounds_that_hold(template, expected):
    assert jsonpath.render(template, DOC) == expected


@pytest.mark.parametrize(("template", "why"), [
    ("{.items[99].name}", "array index out of bounds: index 99, length 2"),
    ("{.items[2].name}", "array index out of bounds: index 2, length 2"),
    ("{.items[-3].name}", "array index out of bounds: index -1, length 2"),  # client-go reports index + length
    ("{.items[0:99].name}", "array index out of bounds: index 98, length 2"),  # slices are not clamped
    ("{.items[5:].name}", "array index out of bounds: index 5, length 2"),
    ("{.items[-9:1].name}", "array index out of bounds: index -7, length 2"),
    ("{.items[1:0].name}", "starting index 1 is greater than ending index 0"),
    ("{.items[0,9].name}", "array index out of bounds: index 9, length 2"),
    ("{range .items[*]}{.components[1]}{end}", "array index out of bounds: index 1, length 0"),
    ("{.items[?(@.components[5]=='x')].name}", "array index out of bounds: index 5, length 2"),
    ("{.items[0].name[0]}", "string is not array or slice"),
])
def test_jsonpath_out_of_range_is_an_error_as_in_client_go(template, why):
    with pytest.raises(InvalidInput) as e:
        jsonpath.render(template, DOC)
    assert str(e.value) == f"error executing jsonpath {template!r}: {why}"


def test_jsonpath_index_out_of_range_exits_2_in_one_line_with_nothing_on_stdout(nodes):
    r = cli("node", "list", "-o", "jsonpath={.items[99].name}", server=nodes.url)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == ("error: error executing jsonpath '{.items[99].name}': array index out of bounds: "
                        "index 99, length 4\n")
    assert cli("node", "list", "-o", "jsonpath={.items[::0].name}", server=nodes.url).exit_code == 2


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")
@pytest.mark.parametrize("template", [
    "{.items[99].metadata.name}",
    "{.items[-5].metadata.name}",
    "{.items[0:99].metadata.name}",
    "{.items[:9].metadata.name}",
    "{.items[1:0].metadata.name}",
    "{.items[0,9].metadata.name}",
    "{range .items[*]}{.status.conditions[7].type}{end}",
    "{.items[0].metadata.name[0]}",
])
def test_jsonpath_errors_agree_with_real_kubectl(apiserver, kubeconfig, template):
    """kubectl fails (exit 1, nothing on stdout) with client-go's message inside its longer one; rblnctl gives
    the same message in one line (exit 2, bad input, as for a template it cannot parse)."""
    apiserver.add(*(o.npu_node(f"n{i}") for i in range(4)))
    theirs = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "-o",
                             f"jsonpath={template}"], capture_output=True, text=True, timeout=60)
    assert theirs.returncode == 1 and theirs.stdout == ""
    doc = {"items": apiserver.list("Node")}
    with pytest.raises(InvalidInput) as e:
        jsonpath.render(template, doc)
    why = str(e.value).split(": ", 1)[1]
    assert f"Error executing template: {why}. " in theirs.stderr


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")
@pytest.mark.parametrize("template", [
    "{.metadata.name}",
    "{.metadata.labels}",
    "{.metadata.labels.rebellions\\.ai/npu\\.workload\\.config}",
    "{.status.conditions[?(@.type==\"Ready\")].status}",
    "{range .status.conditions[*]}{.type}{\"\\t\"}{.status}{\"\\n\"}{end}",
    "{.status.allocatable}",
    "{.spec.missing}",
    "{.status.conditions[0:1].type}",
    "{.status.conditions[*]['type','status']}",
    "{.status.conditions[1,0].type}",
    "{.status.conditions[-1:].type}",
    "{.status.conditions[3:3].type}",
])
def test_jsonpath_agrees_with_real_kubectl(apiserver, kubeconfig, template):
    apiserver.add(o.npu_node("n1", mode="vm-passthrough"))
    node = apiserver.get("Node", "n1")
    theirs = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", "node", "n1", "-o",
                             f"jsonpath={template}"], capture_output=True, text=True, timeout=60)
    assert theirs.returncode == 0, theirs.stderr
    assert jsonpath.render(template, node, allow_missing_keys=True) == theirs.stdout


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")
def test_recursive_descent_finds_what_kubectl_finds(apiserver, kubeconfig):
    """`{..type}` walks Go maps, whose order kubectl randomises: the same values, in some order."""
    apiserver.add(o.npu_node("n1", mode="vm-passthrough"))
    theirs = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", "node", "n1", "-o",
                             "jsonpath={..type}"], capture_output=True, text=True, timeout=60)
    assert sorted(jsonpath.render("{..type}", apiserver.get("Node", "n1")).split()) == sorted(theirs.stdout.split())


@pytest.mark.parametrize("plain", [{"NO_COLOR": "1"}, {}])
def test_no_color_on_a_terminal_means_no_styling_at_all(plain):
    """NO_COLOR (and --no-color) leave no escape at all, not even bold; a terminal otherwise gets them."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"FORCE_COLOR": "1"} | plain
    r = subprocess.run([sys.executable, "-m", "rblnctl", "node", "list", "-s", "http://127.0.0.1:1"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 3 and r.stderr.startswith("\x1b[" if not plain else "error: ")
    if plain:
        assert "\x1b[" not in r.stderr
