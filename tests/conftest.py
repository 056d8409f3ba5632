"""Shared fixtures: the loopback fake API server, a kubeconfig for it, a client of it (`kube`), and isolation from any
real cluster."""

from __future__ import annotations

import pytest

from tests.envtest.fixtures import (  # noqa: F401  (re-exported)
    ENVTEST_FIXTURES,
    _bare_session,
    _real_session,
    backend,
    bare,
    bare_control_plane,
    control_plane,
    later_policy_crd_installed,
    operator_cluster,
    operator_stack,
    real,
)
from tests.fakes.fixtures import apiserver, kube, kubeconfig, tls_apiserver, tls_files  # noqa: F401  (re-exported)
from tests.kubevirt_real.fixtures import KUBEVIRT_FIXTURES, kv, kv_stack, kv_stack_stuck  # noqa: F401  (re-exported)
from tests.kubevirt_real.fake_backend import kvbackend  # noqa: F401  (re-exported: fake, then real KubeVirt)


_TIERS: dict[str, set[str]] = {"envtest": set(), "kubevirt": set()}
_TIER_NAMES = {"envtest": "envtest (real kube-apiserver)", "kubevirt": "kubevirt (real KubeVirt v1.9.0)"}


def pytest_collection_modifyitems(config, items):
    """Every test that runs on a real control plane carries the `envtest` marker (`pytest -m envtest`), every test
    on real KubeVirt the `kubevirt` marker (`pytest -m kubevirt`). The KubeVirt tier's tests run last, grouped by
    stack, so each stack starts once (one runs at a time: virt-operator's webhook port is fixed)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if ENVTEST_FIXTURES & names:
            item.add_marker(pytest.mark.envtest)
        if KUBEVIRT_FIXTURES & names:
            item.add_marker(pytest.mark.kubevirt)
        for tier, ids in _TIERS.items():
            if item.get_closest_marker(tier) is not None:
                ids.add(item.nodeid)

    def stack_order(item):
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("kvbackend") == "real-kubevirt":
            names.add("kv")  # tests/kubevirt_real/fake_backend.py: its real variant asks for `kv` when it runs
        return (0 if not KUBEVIRT_FIXTURES & names else 1 if "kv" in names else 2 if "kv_stack" in names else 3)
    items.sort(key=stack_order)  # stable: the order within each group is kept


def pytest_terminal_summary(terminalreporter):
    """One line per real tier: how many tests ran against it, and how they ended."""
    for tier, ids in _TIERS.items():
        counts: dict[str, int] = {}
        for outcome in ("passed", "failed", "error", "skipped"):
            for rep in terminalreporter.stats.get(outcome, []):
                if getattr(rep, "nodeid", None) in ids and (rep.when == "call" or outcome != "passed"):
                    counts[outcome] = counts.get(outcome, 0) + 1
        if counts:
            terminalreporter.write_line(f"{_TIER_NAMES[tier]}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))


@pytest.fixture(autouse=True)
def _no_real_cluster(tmp_path_factory, monkeypatch):
    """Point KUBECONFIG at an empty file and HOME at a temp dir: no test can reach a real cluster."""
    home = tmp_path_factory.mktemp("home")
    empty = home / "empty-kubeconfig"
    empty.write_text("")
    monkeypatch.setenv("KUBECONFIG", str(empty))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")

