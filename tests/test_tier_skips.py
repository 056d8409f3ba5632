"""A real tier whose environment is set must run (tests/conftest.py `tier_skips`, `pytest_sessionfinish`): CI
(.ci/run) sets KUBEBUILDER_ASSETS, KUBEVIRT_ASSETS + RBLNCTL_SHARED and RBLNCTL_KERNEL when it has the bundles, and a
run in which a test of such a tier was skipped anyway fails instead of ending green with the tier unrun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import tier_skips

REPO = Path(__file__).resolve().parents[1]
KERNEL = {"RBLNCTL_KERNEL": "/k"}
KUBEVIRT = {"KUBEBUILDER_ASSETS": "/e", "KUBEVIRT_ASSETS": "/v", "RBLNCTL_SHARED": "/s"}


def skipped(nodeid: str, *tiers: str, reason: str = "Skipped: RBLNCTL_KERNEL unset", **extra: object):
    return SimpleNamespace(nodeid=nodeid, user_properties=[("tier", t) for t in tiers],
                           longrepr=(nodeid, 1, reason), **extra)


def test_a_skip_of_a_tier_whose_environment_is_set_is_named():
    rep = skipped("tests/kernel/test_x.py::test_a[kernel]", "kernel", reason="Skipped: the guest did not boot")
    assert tier_skips([rep], KERNEL) == [
        "tests/kernel/test_x.py::test_a[kernel] (kernel; RBLNCTL_KERNEL set) was skipped: the guest did not boot"]
    assert tier_skips([rep], {}) == []  # the tier is not asked for: a skip is what it should be
    assert tier_skips([rep], {"RBLNCTL_KERNEL": ""}) == []  # .ci/run's empty value: unset


def test_only_when_every_tier_of_the_test_has_its_environment():
    # a KubeVirt test needs a control plane too (it is marked envtest as well): with only KUBEBUILDER_ASSETS it skips
    rep = skipped("tests/kubevirt_real/test_y.py::test_b", "envtest", "kubevirt")
    assert tier_skips([rep], {"KUBEBUILDER_ASSETS": "/e"}) == []
    assert tier_skips([rep], {"KUBEBUILDER_ASSETS": "/e", "KUBEVIRT_ASSETS": "/v"}) == []
    (line,) = tier_skips([rep], KUBEVIRT)
    assert "(envtest, kubevirt; KUBEBUILDER_ASSETS, KUBEVIRT_ASSETS, RBLNCTL_SHARED set)" in line


def test_default_tier_skips_and_xfails_are_not_counted():
    assert tier_skips([skipped("tests/test_completions.py::test_bash", reason="Skipped: bash not installed")],
                      {**KERNEL, **KUBEVIRT}) == []
    assert tier_skips([skipped("tests/kernel/test_x.py::test_c[kernel]", "kernel", wasxfail="known")], KERNEL) == []


def _pytest(env: dict[str, str]) -> subprocess.CompletedProcess:
    """One envtest test in a pytest of its own (no xdist), with only `env` of the real tiers' variables."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("KUBEBUILDER_ASSETS", "KUBEVIRT_ASSETS", "RBLNCTL_SHARED", "RBLNCTL_KERNEL")
             and not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "no:randomly",
         "tests/envtest/test_crd_defaults.py::test_v030_crd_gives_the_sandbox_plugin_the_device_plugins_name"],
        cwd=REPO, env={**clean, **env}, capture_output=True, text=True, timeout=300)


def test_the_run_fails_when_a_tier_it_was_given_skipped(tmp_path):
    """End to end through pytest's own exit status: KUBEBUILDER_ASSETS naming a folder without the binaries makes
    the control plane's fixture skip; with the variable set that is exit 1 and a line naming the test."""
    r = _pytest({"KUBEBUILDER_ASSETS": str(tmp_path)})
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("error: tests/envtest/test_crd_defaults.py::test_v030_crd_gives_the_sandbox_plugin_the_device_plugins_name"
            " (envtest; KUBEBUILDER_ASSETS set) was skipped: ") in r.stdout, r.stdout
    assert f"KUBEBUILDER_ASSETS={tmp_path} lacks" in r.stdout, r.stdout

    r = _pytest({})  # the tier not asked for: the same skip is a skip
    assert r.returncode == 0 and "1 skipped" in r.stdout and "error:" not in r.stdout, r.stdout + r.stderr
