"""Issue 39, findings 11 and 12: what a screen says, said once, in the view that shows it, with the next step.

11: with operator v0.3.0's sandbox plugin stuck in `Init:0/2` (driver-ready), `node list` shows why NPUS is 0 in the
table (STATUS `,Init:0/2`), not only in a note on stderr; `status --watch` on a terminal keeps the notes; the
`--timeout` error says that waiting longer does not help. 12: `kubevirt status` says "no RBLN NPU permitted" once;
a refused pool's dry run names each refusal once; `preflight --hosts` blames an image pull only for a pod that is
not running; `vm attach` on a running VM names `--restart` right after the problem.
"""

from __future__ import annotations

from pathlib import Path

from tests.fakes import objects as o
from tests.fakes import sysfs as ht
from tests.fakes.operator import stack_v030
from tests.helpers import cli
from tests.preflight.cluster_support import seed
from tests.terminal import on_terminal
from tests.vm.support import CA22, NS, sandbox_cluster


# -- 11: a stuck plugin ---------------------------------------------------------------------------------------


def test_a_stuck_plugin_reaches_the_table_the_watch_and_the_timeout_error(apiserver):
    op = stack_v030(apiserver)
    try:
        r = cli("node", "set-mode", "vm", "npu-node-1", "--yes", "--timeout", "1", server=apiserver.url)
        assert r.exit_code == 5 and op.stuck_in_init, r.stderr
        assert "waiting longer does not help: sandbox-device-plugin cannot start" in " ".join(r.stderr.split())
        listed = cli("node", "list", server=apiserver.url)  # stdout alone: as `2>/dev/null` leaves it
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith("npu-node-1 ")]
        assert "Ready,SchedulingDisabled,Switching,Init:0/2" in row.split(), listed.stdout
        (other,) = [line for line in listed.stdout.splitlines() if line.startswith("npu-node-2 ")]
        assert "Init:" not in other
        watch = on_terminal(["--server", apiserver.url, "status", "--watch"], ctrl_c_after="note: node npu-node-1: "
                            "pod rbln-system/rbln-sandbox-device-plugin-npu-node-1", timeout=20)
    finally:
        op.stop()
    assert watch.code == 130, watch.text
    # the notes stay on the live screen, a line each (the screen fits 80x24)
    assert "note: node npu-node-1: pod rbln-system/rbln-sandbox-device-plugin-npu-node-1 (s" in watch.text, watch.raw
    assert max(len(line) for line in watch.lines) <= 80


# -- 12 -----------------------------------------------------------------------------------------------------------


def test_kubevirt_status_says_no_npu_is_permitted_once(apiserver):
    apiserver.add(o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
    r = cli("kubevirt", "status", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    said = (r.stdout + r.stderr).count("in permittedHostDevices")
    assert said == 1, r.stdout + r.stderr


def test_a_refused_pool_dry_run_names_each_refusal_once(apiserver):
    op = stack_v030(apiserver)
    try:
        for n in ("npu-node-1", "npu-node-2"):
            apiserver.mutate("Node", n, fn=lambda node: node["metadata"]["labels"].update(pool="a"))
        apiserver.add(o.pod("default", "bare", node="npu-node-1", requests={"rebellions.ai/ATOM": "1"}))
        r = cli("node", "set-mode", "vm", "-l", "pool=a", "--dry-run", server=apiserver.url)
    finally:
        op.stop()
    assert r.exit_code == 1, r.stderr
    assert (r.stdout + r.stderr).count("default/bare is not managed by a controller") == 1, r.stdout + r.stderr
    assert "refused" in r.stdout  # the plan's row still says which node


def test_preflight_hosts_does_not_blame_an_image_pull_for_a_running_pod(apiserver, tmp_path):
    from tests.fakes.hostkubelet import HostKubelet

    names = seed(apiserver, nodes=1)
    kubelet = HostKubelet(apiserver, default=ht.build_host(Path(tmp_path) / "h", ht.intel_bare_metal()).root).start()
    kubelet.hang.update(names)  # the pod runs and its check never ends
    try:
        r = cli("preflight", "--hosts", "--timeout", "1s", server=apiserver.url)
    finally:
        kubelet.stop()
    assert r.exit_code == 1, r.stderr
    out = " ".join(r.stdout.split())
    assert "not finished after 1s (Running)" in out, r.stdout
    assert "image pull" not in out and "kubectl logs -n" in out, r.stdout


def test_attach_to_a_running_vm_names_restart_right_after_the_problem(apiserver):
    sandbox_cluster(apiserver)
    apiserver.add(o.vm(NS, "v1", host_devices=[CA22]), o.vmi(NS, "v1", "n1", [CA22]))
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--dry-run", server=apiserver.url)
    assert r.exit_code == 1, r.stderr
    text = " ".join(r.stderr.split())
    assert "takes effect only when it restarts; pass --restart to stop it, change it and start it now" in text, \
        r.stderr
    assert "restarting stops it" not in text
