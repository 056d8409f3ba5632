"""Issue 29, "One Remedy": every printed hint is spelt by the CLI from the program name invoked and the flags given.

Before, the pool resume hints kept --max-unavailable and dropped --context, --force, --evict-vms, --all-pods,
--take-over, --grace-period and --timeout (a hint followed under `kubectl rbln --context prod` could act on another
cluster); the drain and vfio hints said `rblnctl` to kubectl rbln users; the vm lifecycle hints dropped --context.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading

import pytest
from typer.testing import CliRunner

from rblnctl.cli.app import app
from tests.cli.test_capacity import vm_cluster  # noqa: F401 - the fixture
from tests.cli.node.test_pool import MODE, pool  # noqa: F401 - the pool fixture
from tests.fakes import objects as o
from tests.vm.support import CA22
from tests.helpers import cli

PROGS = ["rblnctl", "kubectl rbln"]
FLAGS = ["--force", "--evict-vms", "--all-pods", "--take-over", "--grace-period", "30", "--timeout", "20m"]


def run(prog: str, kubeconfig, *args: str):
    argv = ["--kubeconfig", str(kubeconfig), "--context", "fake", *args]
    return CliRunner().invoke(app, argv, prog_name=prog, catch_exceptions=False)


def _ctrl_c_at_first_relabel(apiserver):
    fired: list[int] = []

    def hook(req):
        if not fired and req.method == "PATCH" and MODE in (((req.body or {}).get("metadata") or {}).get(
                "labels") or {}):
            fired.append(1)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    return apiserver.on_request(hook)


def _hint(stderr: str, prefix: str) -> list[str]:
    line = next(ln for ln in stderr.splitlines() if prefix in ln)
    return shlex.split(line.split(prefix, 1)[1].strip().strip("`"))


@pytest.mark.parametrize("prog", PROGS)
def test_pool_resume_hints_keep_the_context_and_every_flag(pool, tmp_path, prog):  # noqa: F811
    kubeconfig = pool.write_kubeconfig(tmp_path / "kubeconfig")
    unsubscribe = _ctrl_c_at_first_relabel(pool)
    r = run(prog, kubeconfig, "node", "set-mode", "vm", "-l", "pool=a", "--max-unavailable", "1", *FLAGS, "--yes")
    unsubscribe()
    assert r.exit_code == 130, r.stderr
    head = prog.split()
    resume = _hint(r.stderr, "resume: ")
    assert resume[:len(head) + 4] == [*head, "--kubeconfig", str(kubeconfig), "--context", "fake"]
    assert resume[len(head) + 4:len(head) + 8] == ["node", "set-mode", "vm", "n1"]
    for flag in FLAGS:
        assert flag in resume, (flag, resume)
    assert "--selector" not in resume and "--max-unavailable" not in resume  # one node: not the pool's selection
    pool_line = r.stderr.split("re-run `", 1)[1].split("`", 1)[0]
    assert pool_line.startswith(f"{prog} --kubeconfig {kubeconfig} --context fake node set-mode")
    for flag in [*FLAGS, "--selector", "--max-unavailable"]:
        assert flag in shlex.split(pool_line), (flag, pool_line)


@pytest.mark.parametrize("prog", PROGS)
def test_an_interrupted_drain_names_the_program_and_the_context(apiserver, tmp_path, mocker, prog):
    apiserver.add(o.npu_node("n1"))
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    mocker.patch("rblnctl.node.drain.Drainer.apply", side_effect=KeyboardInterrupt)
    r = run(prog, kubeconfig, "node", "drain", "n1", "--force", "--yes")
    assert r.exit_code == 130
    assert f"re-run `{prog} --kubeconfig {kubeconfig} --context fake node drain --force --yes n1`" in r.stderr


@pytest.mark.parametrize("prog", PROGS)
def test_an_interrupted_set_mode_recovery_keeps_the_context(apiserver, tmp_path, mocker, prog):
    apiserver.add(o.cluster_policy(), o.npu_node("n1"))
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    mocker.patch("rblnctl.node.mode.ModeSwitcher.apply", side_effect=KeyboardInterrupt)
    r = run(prog, kubeconfig, "node", "set-mode", "vm", "n1", "--evict-vms", "--yes")
    assert r.exit_code == 130
    base = f"{prog} --kubeconfig {kubeconfig} --context fake node set-mode"
    assert f"resume:  {base} vm n1 --evict-vms --yes" in r.stderr
    assert f"go back: {base} container n1 --evict-vms --reverse --yes" in r.stderr


@pytest.mark.parametrize("action", ["start", "stop", "restart"])
def test_vm_lifecycle_interrupt_hints_keep_the_context(apiserver, tmp_path, mocker, action):
    apiserver.add(o.vm("default", "v1", running=action != "start"))
    if action != "start":
        apiserver.add(o.vmi("default", "v1", "n1"))
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    from rblnctl.vm.lifecycle import VmLifecycle

    def made_then_ctrl_c(self, plan):  # the request went through, then the user pressed Ctrl-C while waiting
        self.made = plan.send
        raise KeyboardInterrupt

    mocker.patch.object(VmLifecycle, "apply", autospec=True, side_effect=made_then_ctrl_c)
    args = ["vm", action, "v1", "--timeout", "2m"] + (["--yes"] if action != "start" else [])
    r = run("kubectl rbln", kubeconfig, *args)
    assert r.exit_code == 130, r.stderr
    follow = "stop" if action == "stop" else "start"
    yes = " --yes" if follow == "stop" else ""  # vm start has no --yes: a flag the command does not take is left out
    assert (f"`kubectl rbln --kubeconfig {kubeconfig} --context fake vm {follow} v1 -n default --wait "
            f"--timeout 2m{yes}` follows it again") in r.stderr, r.stderr


def test_a_vfio_recovery_hint_names_kubectl_rbln_to_its_users(tmp_path, monkeypatch, mocker):
    import rblnctl.host.vfio.writer as vfio_writer
    from tests.fakes.sysfs import guard_real_host, npu_node

    guard_real_host(monkeypatch)
    k = npu_node(tmp_path, 1)
    monkeypatch.setattr(vfio_writer, "default_writer", lambda: k.writer)
    mocker.patch("os.geteuid", return_value=0)
    bdf = "0000:3b:00.0"
    k.refuse_probe("vfio-pci", bdf)
    k.refuse_probe("rebellions", bdf)
    r = CliRunner().invoke(app, ["vfio", "bind", bdf, "--yes", "--root", str(k.root)], prog_name="kubectl rbln",
                           catch_exceptions=False)
    assert r.exit_code == 1
    assert f"run `kubectl rbln vfio unbind {bdf} --driver rebellions --root {k.root}`" in r.stderr, r.stderr


def test_preflight_prints_a_remedy_command_once_per_run(apiserver):
    from tests.cli.test_preflight import seed
    from tests.helpers import cli

    seed(apiserver, nodes=1)  # a sandbox policy checked for dra: one policy change fixes three checks
    r = cli("preflight", "--method", "dra", server=apiserver.url)
    assert r.exit_code == 1
    remedies = r.stdout.split("remedies:", 1)[1]
    assert remedies.count("kubectl patch rblnclusterpolicy") == 1, remedies
    assert "FAIL dra.driver: enable it (driver >= 0.2.1): the remedy of operator.policy above" in remedies
    import json

    r = cli("preflight", "--method", "dra", "-o", "json", server=apiserver.url)  # each finding's document: whole
    checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["dra.driver"]["remedyCommand"] == checks["operator.policy"]["remedyCommand"] != ""


def test_a_hint_never_prints_the_bearer_token(apiserver, tmp_path, mocker):
    """--token is a connection flag a hint keeps, but its value is a secret (terminals, scrollback, CI logs): the hint
    names a shell variable the shell expands instead, as kubectl never echoes a token."""
    apiserver.add(o.npu_node("n1"))
    mocker.patch("rblnctl.node.drain.Drainer.apply", side_effect=KeyboardInterrupt)
    r = CliRunner().invoke(app, ["--server", apiserver.url, "--token", "s3cr3t-t0ken", "node", "drain", "n1",
                                 "--force", "--yes"], prog_name="rblnctl", catch_exceptions=False)
    assert r.exit_code == 130
    assert "s3cr3t-t0ken" not in r.stderr and "s3cr3t-t0ken" not in r.stdout
    assert (f'`rblnctl --server {apiserver.url} --token "${{TOKEN:?set TOKEN to your --token}}" node drain --force '
            '--yes n1`') in r.stderr


def _run_hint_in(shell: str, hint: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Paste `hint` into `shell` (bash, or sh: dash where it is sh) with `rblnctl` a function printing its argv."""
    script = 'rblnctl() { for a in "$@"; do printf "[%s]\\n" "$a"; done; }\n' + hint + "\n"
    return subprocess.run([shell, "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], **env})


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_a_pasted_hint_with_no_token_set_fails_rather_than_run_without_one(apiserver, mocker, shell):
    """The hint spelt `--token "$TOKEN"`: pasted where TOKEN is not set (no shell sets it), the shell made it
    `--token ''` and ran the command with an empty token: another identity, or a 401 far from the cause. Now the
    shell refuses the line, naming what to set; with TOKEN set, the hint runs with that token."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell}")
    apiserver.add(o.npu_node("n1"))
    mocker.patch("rblnctl.node.drain.Drainer.apply", side_effect=KeyboardInterrupt)
    r = CliRunner().invoke(app, ["--server", apiserver.url, "--token", "s3cr3t-t0ken", "node", "drain", "n1",
                                 "--force", "--yes"], prog_name="rblnctl", catch_exceptions=False)
    assert r.exit_code == 130 and "s3cr3t-t0ken" not in r.stderr + r.stdout
    (hint,) = [h for h in re.findall(r"`([^`]+)`", r.stderr) if "--token" in h]
    unset = _run_hint_in(shell, hint, {})
    assert unset.returncode != 0 and unset.stdout == "", unset.stdout  # nothing ran
    assert "TOKEN" in unset.stderr
    empty = _run_hint_in(shell, hint, {"TOKEN": ""})
    assert empty.returncode != 0 and empty.stdout == ""
    given = _run_hint_in(shell, hint, {"TOKEN": "s3cr3t-t0ken"})
    assert given.returncode == 0 and "[--token]\n[s3cr3t-t0ken]\n" in given.stdout, given.stdout


def test_a_remedy_inline_in_a_library_message_writes_another_programs_command_where_its_text_says():
    """One way to put a Remedy into a one-line library message (it was written out by hand twice): another program's
    command at `{command}`, else after a colon; this program's own commands are the front end's to spell."""
    from rblnctl.remedy import Command, Remedy

    edit = Command.external("kubectl", "edit", "rblnclusterpolicy", "p")
    assert Remedy("give each plugin its own names", edit).inline() == \
        "give each plugin its own names: `kubectl edit rblnclusterpolicy p`"
    assert Remedy("run {command} and retry", edit).inline() == "run `kubectl edit rblnclusterpolicy p` and retry"
    assert Remedy("switch it to vm", Command(words=("node", "set-mode", "vm", "n1"))).inline() == "switch it to vm"
    assert Remedy("nothing to run").inline() == "nothing to run"


def test_remedy_command_is_an_argv_that_runs_once_its_placeholder_is_filled(vm_cluster):  # noqa: F811
    """Issue 38 finding 5: with --token, `-o json`'s remedyCommand held `${TOKEN:?set TOKEN to your --token}` (shell
    syntax); run as an argv, that text went out as the bearer token. Now the element is `$(TOKEN)`, remedyEnv says what
    it stands for, and the argv with it filled in runs, with the token, as is (no shell)."""
    import json
    import sys

    vm_cluster.require_token = True
    vm_cluster.add(o.vm("vms", "big", running=False, host_devices=[CA22] * 8))
    token = vm_cluster.token
    r = cli("--token", token, "vm", "diagnose", "big", "-n", "vms", "-o", "json", server=vm_cluster.url)
    assert r.exit_code == 1, r.stderr
    assert token not in r.stdout + r.stderr
    link = next(link for link in json.loads(r.stdout)["links"] if link["status"] == "FAIL")
    assert link["remedyCommand"] == ["rblnctl", "--server", vm_cluster.url, "--token", "$(TOKEN)", "vm", "attach",
                                     "big", "-n", "vms", "--npus", "2"]
    assert link["remedyEnv"] == {"TOKEN": "your --token"}
    assert '--token "${TOKEN:?set TOKEN to your --token}"' in link["remedy"]  # the human hint keeps its shell form
    argv = [token if a == f"$({k})" else a for a in link["remedyCommand"] for k in link["remedyEnv"]]
    run = subprocess.run([sys.executable, "-m", "rblnctl", *argv[1:], "--dry-run"], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr  # authenticated (require_token), and the command it names
    assert "big: 8 -> 2 NPU(s)" in run.stdout, run.stdout
    vm_cluster.require_token = False
    plain = cli("vm", "diagnose", "big", "-n", "vms", "-o", "json", server=vm_cluster.url)  # no secret: {} and no $(
    link = next(link for link in json.loads(plain.stdout)["links"] if link["status"] == "FAIL")
    assert link["remedyEnv"] == {} and not any("$(" in a for a in link["remedyCommand"])
