"""`rblnctl status --watch` and `rblnctl node list --watch`, piped: the first table, then one line per change;
a stream the server closes is reopened; Ctrl-C ends the watch with exit 0."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time

from tests.fakes import objects as o
from tests.helpers import cli
from rblnctl.constants import WORKLOAD_LABEL as MODE

# nodes, policies, and for the NPUs they hold: unfinished pods, ResourceSlices, ResourceClaims
WATCHES = 5


def _printed() -> str:
    """What the command running under CliRunner has written to stdout so far (it flushes each line)."""
    buffer = getattr(sys.stdout, "buffer", None)
    return buffer.getvalue().decode() if hasattr(buffer, "getvalue") else ""


def _wait_for(predicate, what):
    deadline = time.monotonic() + 5  # a bound for a slow machine, not the expected time
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def watch_cli(apiserver, *args, script):
    """Run `rblnctl ARGS` (a --watch) while `script()` drives the cluster on a thread, then press Ctrl-C."""
    failures: list[BaseException] = []
    returned = threading.Event()

    def driver():
        try:
            script()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            failures.append(e)
        finally:
            # Ctrl-C; again if the command is still running 10 s later (twice seen on a loaded machine: the run
            # then hung in the watch's queue, and a whole suite with it; a second Ctrl-C makes it a failure here)
            for _ in range(3):
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                if returned.wait(10):
                    break
                failures.append(AssertionError("the command was still running 10 s after Ctrl-C"))

    threading.Thread(target=driver, daemon=True).start()
    try:
        result = cli(*args, server=apiserver.url)
    finally:
        returned.set()
    if failures:
        raise failures[0]
    return result


def _seed(apiserver):
    apiserver.add(o.cluster_policy(workload_type="container"), o.kubevirt(feature_gates=["HostDevices"]),
                  o.npu_node("n1", mode="container"), o.npu_node("n2", mode="container"))


def test_status_watch_prints_changes_as_lines_and_ctrl_c_exits_130(apiserver):
    _seed(apiserver)

    def script():
        _wait_for(lambda: "NAME" in _printed() and apiserver.open_watches == WATCHES, "the first table and the watches")
        apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
        _wait_for(lambda: "node/n1 mode" in _printed(), "the first change")
        assert apiserver.close_watches() == WATCHES  # the server ends the streams (its watch timeout)
        _wait_for(lambda: apiserver.open_watches == WATCHES, "the watches to be reopened")
        apiserver.mutate("Node", "n2", fn=lambda n: n["spec"].update(unschedulable=True))
        _wait_for(lambda: "node/n2" in _printed(), "the second change")
        apiserver.mutate("RBLNClusterPolicy", "rbln-cluster-policy",
                         fn=lambda p: p["spec"].update(workloadType="vm-passthrough"))
        _wait_for(lambda: "rblnclusterpolicy/" in _printed(), "the policy change")

    r = watch_cli(apiserver, "status", "--watch", script=script)
    assert r.exit_code == 130, r.stderr
    assert r.stdout.startswith("Kubernetes:  v1.34.1\nPolicy:      rbln-cluster-policy")
    assert "\nn1     container" in r.stdout  # the first table, once
    changes = [line for line in r.stdout.splitlines() if line.startswith(("node/", "rblnclusterpolicy"))]
    assert changes == [
        "node/n1 mode container -> vm-passthrough",
        "node/n2 schedulable yes -> no",
        "rblnclusterpolicy/rbln-cluster-policy workloadType container -> vm-passthrough",
    ]


def test_node_list_watch_lines_for_added_and_removed_nodes(apiserver):
    _seed(apiserver)

    def script():
        _wait_for(lambda: "NAME" in _printed() and apiserver.open_watches == WATCHES, "the first table and the watches")
        apiserver.add(o.npu_node("n3", mode="vm-passthrough"), o.node("cpu"))
        apiserver.delete_now("Node", "n2")
        _wait_for(lambda: "node/n2 removed" in _printed(), "the removal")

    r = watch_cli(apiserver, "node", "list", "-w", script=script)
    assert r.exit_code == 130, r.stderr
    assert r.stdout.splitlines()[-2:] == ["node/n3 added (vm-passthrough)", "node/n2 removed"]
    assert "cpu" not in r.stdout


def test_watch_with_json_prints_a_document_per_change(apiserver):
    _seed(apiserver)

    def script():
        _wait_for(lambda: _printed().count('"kind": "NpuNodeList"') == 1 and apiserver.open_watches == WATCHES,
                  "the list")
        apiserver.mutate("Node", "n1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
        _wait_for(lambda: _printed().count('"kind": "NpuNodeList"') == 2, "the second document")

    r = watch_cli(apiserver, "node", "list", "--watch", "-o", "json", script=script)
    assert r.exit_code == 130, r.stderr
    decoder, docs, text = json.JSONDecoder(), [], r.stdout.strip()
    while text:
        doc, end = decoder.raw_decode(text)
        docs.append(doc)
        text = text[end:].strip()
    assert [[n["mode"] for n in d["items"]] for d in docs] == [["container", "container"],
                                                                ["vm-passthrough", "container"]]


def test_status_watch_piped_prints_a_note_that_appears_meanwhile_once(apiserver):
    """Issue 39, finding 11: the watch kept only its first notes. A plugin that gets stuck while it watches (operator
    v0.3.0's sandbox plugin in driver-ready, once the node is labelled vm-passthrough) is said on stderr, once,
    though its time so far changes on every update."""
    from tests.fakes.operator import stack_v030

    op = stack_v030(apiserver)

    def errors() -> str:
        buffer = getattr(sys.stderr, "buffer", None)
        return buffer.getvalue().decode() if hasattr(buffer, "getvalue") else ""

    def script():
        _wait_for(lambda: "NAME" in _printed(), "the first table")
        apiserver.mutate("Node", "npu-node-1", fn=lambda n: n["metadata"]["labels"].update({MODE: "vm-passthrough"}))
        _wait_for(lambda: "is stuck in its init container driver-ready" in errors(), "the new note")
        time.sleep(0.3)  # more updates come (pods, times): the note is not said again

    try:
        r = watch_cli(apiserver, "status", "--watch", script=script)
    finally:
        op.stop()
    assert r.exit_code == 130, r.stderr
    assert r.stderr.count("is stuck in its init container driver-ready") == 1, r.stderr
