"""HelmClient: `helm version --short` through the runner seam; the default runner on a real subprocess (not helm)."""

from __future__ import annotations

import sys

import pytest

from rblnctl.preflight.helm import CommandResult, HelmClient, run_command
from tests.preflight.cluster_support import fake_helm


def test_no_helm_on_path_runs_nothing():
    def run(argv, timeout_s):
        raise AssertionError(f"ran {argv}")

    assert HelmClient(which=lambda _n: None, run=run).version().path is None


def test_version_is_asked_with_an_argument_list_and_the_timeout():
    calls: list = []
    info = fake_helm("v3.14.2+gc309b6f", calls=calls).version()
    assert info.output == "v3.14.2+gc309b6f" and info.error is None and info.path == "/opt/bin/helm"
    assert calls == [(["/opt/bin/helm", "version", "--short"], 10.0)]


@pytest.mark.parametrize("raised, says", [
    (TimeoutError("slow"), "`helm version --short` did not finish within 10s"),
    (PermissionError(13, "Permission denied"), "cannot run /opt/bin/helm: Permission denied"),
])
def test_runner_failures_are_data(raised, says):
    def run(argv, timeout_s):
        raise raised

    info = HelmClient(which=lambda n: f"/opt/bin/{n}", run=run).version()
    assert info.output is None and info.error == says


def test_nonzero_exit_names_the_last_line_of_stderr():
    def run(argv, timeout_s):
        return CommandResult(returncode=2, stdout="", stderr="first\nError: unknown flag\n")

    info = HelmClient(which=lambda n: f"/opt/bin/{n}", run=run).version()
    assert info.error == "`helm version --short` exited 2: Error: unknown flag"


def test_default_runner_captures_output_and_exit_code():
    out = run_command([sys.executable, "-c", "import sys; print('v9'); sys.stderr.write('e'); sys.exit(3)"], 30)
    assert out == CommandResult(returncode=3, stdout="v9\n", stderr="e")


def test_default_runner_turns_a_timeout_into_timeout_error():
    with pytest.raises(TimeoutError, match="did not finish within 0.2s"):
        run_command([sys.executable, "-c", "import time; time.sleep(30)"], 0.2)


def test_default_runner_raises_oserror_for_a_missing_program(tmp_path):
    with pytest.raises(OSError):
        run_command([str(tmp_path / "no-such-helm"), "version"], 5)
