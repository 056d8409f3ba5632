"""Shell completion: the scripts in completions/, bash driven through COMP_WORDS, and `kubectl rbln <TAB>`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import objects as o
from tests.helpers import closed_port_url

ROOT = Path(__file__).resolve().parents[1]
FILES = {"bash": "rblnctl.bash", "zsh": "_rblnctl", "fish": "rblnctl.fish"}
BIN = Path(sys.executable).parent  # where pip put rblnctl, kubectl-rbln and kubectl_complete-rbln


@pytest.mark.parametrize("shell", sorted(FILES))
def test_completion_script_is_current(shell):
    out = subprocess.run([sys.executable, "-m", "rblnctl", "completion", shell], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (ROOT / "completions" / FILES[shell]).read_text(), (
        f"completions/{FILES[shell]} is stale: regenerate with completions/generate.sh"
    )
    env = dict(os.environ, _RBLNCTL_COMPLETE=f"source_{shell}")  # the way the scripts call back
    code = "import sys; sys.argv[0] = 'rblnctl'; from rblnctl.cli.app import main; main()"
    same = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert same.stdout.rstrip("\n") == out.stdout.rstrip("\n")


def test_an_unknown_shell_is_bad_input():
    r = subprocess.run([sys.executable, "-m", "rblnctl", "completion", "tcsh"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: no completion for shell 'tcsh'")


def bash_tab(words: list[str], env: dict | None = None) -> list[str]:
    """What bash offers for TAB after `words` (the last one is the word being typed), with rblnctl's script."""
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    script = (f"source {ROOT / 'completions' / 'rblnctl.bash'}\n"
              f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
              "_rblnctl_completion rblnctl\n"
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    full = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, env=full, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line]


@pytest.fixture
def npu_cluster(apiserver, kubeconfig):
    apiserver.add(o.npu_node("npu-a"), o.npu_node("npu-b", mode="vm-passthrough"), o.node("cpu-only"))
    return {"KUBECONFIG": str(kubeconfig)}


def test_bash_completes_npu_node_names_from_the_cluster(npu_cluster):
    assert bash_tab(["rblnctl", "node", "set-mode", "vm", ""], npu_cluster) == ["npu-a", "npu-b"]  # not cpu-only
    assert bash_tab(["rblnctl", "node", "set-mode", "vm", "npu-a", "npu-"], npu_cluster) == ["npu-b"]
    assert bash_tab(["rblnctl", "node", "drain", "npu-b"], npu_cluster) == ["npu-b"]
    assert bash_tab(["rblnctl", "preflight", "--node", ""], npu_cluster) == ["npu-a", "npu-b"]
    assert bash_tab(["rblnctl", "node", "h"]) == ["history"]
    assert bash_tab(["rblnctl", "node", "history", "npu-"], npu_cluster) == ["npu-a", "npu-b"]
    assert sorted(bash_tab(["rblnctl", "node", "history", "npu-a", "-o", ""])) == ["json", "jsonpath=", "table",
                                                                                     "wide", "yaml"]


def test_bash_completes_modes_gates_contexts_and_formats(npu_cluster):
    assert bash_tab(["rblnctl", "node", "set-mode", ""]) == ["container", "vm", "vm-passthrough"]
    assert bash_tab(["rblnctl", "kubevirt", "enable-gates", "HostDev"]) == ["HostDevices", "HostDevicesWithDRA"]
    assert bash_tab(["rblnctl", "kubevirt", "disable-gates", "HostDevices", "HostDev"]) == ["HostDevicesWithDRA"]
    assert bash_tab(["rblnctl", "--context", ""], npu_cluster) == ["fake"]
    assert bash_tab(["rblnctl", "node", "list", "-o", "j"]) == ["json", "jsonpath="]
    assert bash_tab(["rblnctl", "preflight", "-o", "j"]) == ["json", "jsonpath=", "junit"]  # preflight's own format


def test_bash_completes_the_restart_flags_of_attach_and_detach():
    for verb in ("attach", "detach"):
        assert bash_tab(["rblnctl", "vm", verb, "v1", "--next"]) == ["--next-restart"]
        assert sorted(bash_tab(["rblnctl", "vm", verb, "v1", "--res"])) == (
            ["--resource", "--restart"] if verb == "attach" else ["--restart"])


def test_bash_falls_back_to_file_names_only_for_path_options():
    """typer's script registers `complete -o default`, so an empty answer (no cluster) listed files as node names."""
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    script = f"source {ROOT / 'completions' / 'rblnctl.bash'}; complete -p rblnctl"
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "complete -o nosort -F _rblnctl_completion rblnctl"
    assert "compopt -o default" in (ROOT / "completions" / "rblnctl.bash").read_text()  # for file,<path> answers


def test_a_cluster_that_does_not_answer_offers_nothing_quietly(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    server = closed_port_url()
    kubeconfig.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{server}'}}\n"
                          "users:\n- name: u\n  user: {}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
                          "current-context: x\n")
    assert bash_tab(["rblnctl", "node", "set-mode", "vm", ""], {"KUBECONFIG": str(kubeconfig)}) == []


def test_bash_completes_bdfs_from_the_hosts_sysfs(tmp_path):
    from tests.fakes.sysfs import npu_node

    kern = npu_node(tmp_path, 2)
    assert bash_tab(["rblnctl", "vfio", "bind", "--root", str(kern.root), ""]) == ["0000:3b:00.0", "0000:3c:00.0"]
    assert bash_tab(["rblnctl", "vfio", "bind", "--root", str(kern.root), "0000:3b:00.0", ""]) == ["0000:3c:00.0"]


def test_kubectl_complete_rbln_speaks_cobras_format(npu_cluster):
    run = [str(BIN / "kubectl_complete-rbln")]
    env = {**os.environ, **npu_cluster}
    out = subprocess.run(run + ["node", "set-mode", "vm", ""], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.splitlines() == ["npu-a", "npu-b", ":4"]  # 4: ShellCompDirectiveNoFileComp
    out = subprocess.run(run + ["--kubeconfig", ""], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.splitlines() == [":0"]  # a path: the shell completes files


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")
def test_real_kubectl_completes_kubectl_rbln(npu_cluster):
    """kubectl >= 1.26 finds kubectl_complete-rbln on PATH and relays its answer for `kubectl rbln <TAB>`."""
    env = {**os.environ, **npu_cluster, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(["kubectl", "__complete", "rbln", "node", "set-mode", "vm", ""], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == ["npu-a", "npu-b"] and out.stdout.splitlines()[-1] == ":4"


def test_bash_completes_set_modes_rehearse_flag():
    assert bash_tab(["rblnctl", "node", "set-mode", "vm", "n1", "--reh"]) == ["--rehearse"]
