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


_TIER_NAMES = {"envtest": "envtest (real kube-apiserver)", "kubevirt": "kubevirt (real KubeVirt v1.9.0)",
               "kernel": "kernel (real Linux 6.1 in QEMU)"}


REAL_DIRS = ("tests/envtest/", "tests/kubevirt_real/", "tests/kernel/")


def real_tier(nodeid: str) -> bool:
    """Whether a test may reach a real control plane or KubeVirt stack, from its node id alone (what xdist's
    scheduler sees): it lives in a real tier's folder, or one of its parameters is a real backend (`real`,
    `real-kubevirt`, `kernel`). tests/test_hygiene.py checks that every `envtest`/`kubevirt`/`kernel` test is one.
    The kernel tier (tests/kernel/) boots one QEMU guest per session: on one worker, never two guests at once."""
    if nodeid.startswith(REAL_DIRS):
        return True
    params = nodeid.partition("[")[2].rstrip("]").split("-")
    return "real" in params or "kernel" in params


def pytest_xdist_make_scheduler(config, log):
    """The suite runs on two pytest-xdist workers (pyproject addopts `-n 2`): xdist's scopes, every real-tier test in
    one scope so one worker runs them all, in collection order (below), one control plane or KubeVirt stack at a
    time, while the other worker takes the rest test by test. (`--dist loadgroup` cannot do it: with pytest 9 the
    group suffix xdist 3.8 writes into item._nodeid never reaches the node id.)"""
    from xdist.scheduler import LoadScopeScheduling

    class RealTiersTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "real" if real_tier(nodeid) else nodeid

    return RealTiersTogether(config, log)


def pytest_collection_modifyitems(config, items):
    """Every test that runs on a real control plane carries the `envtest` marker (`pytest -m envtest`), every test
    on real KubeVirt the `kubevirt` marker (`pytest -m kubevirt`). The KubeVirt tier's tests run last, grouped by
    stack, so each stack starts once (one runs at a time: virt-operator's webhook port is fixed); under xdist one
    worker runs them all (pytest_xdist_make_scheduler)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if ENVTEST_FIXTURES & names:
            item.add_marker(pytest.mark.envtest)
        if KUBEVIRT_FIXTURES & names:
            item.add_marker(pytest.mark.kubevirt)
        if _on_kernel(item):
            item.add_marker(pytest.mark.kernel)
        # reports carry the tiers back from the workers (under xdist the controller collects nothing)
        item.user_properties.extend(("tier", tier) for tier in _TIER_NAMES if item.get_closest_marker(tier))

    def stack_order(item):
        if _on_kernel(item):
            # last: the session's guest boots once and is powered off at the end of the run; the tests that boot
            # another machine or reboot it (tests/kernel/guest.py `reboots`) after the rest
            return 5 if getattr(getattr(item, "function", None), "reboots", False) else 4
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("kvbackend") == "real-kubevirt":
            names.add("kv")  # tests/kubevirt_real/fake_backend.py: its real variant asks for `kv` when it runs
        return (0 if not KUBEVIRT_FIXTURES & names else 1 if "kv" in names else 2 if "kv_stack" in names else 3)
    items.sort(key=stack_order)  # stable: the order within each group is kept


def _on_kernel(item) -> bool:
    """A kernel-tier test: it asks for the session's guest, or it is the `kernel` variant of a fake/kernel scenario."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    return bool({"kernel", "linux"} & names) or (callspec is not None and "kernel" in callspec.params.values())


# What each real tier needs from the environment: when all of a test's tiers have theirs, a skip of it is a failure
# of the run (tier_skips), not a quiet "skipped": CI (.ci/run) sets them exactly when the tier is to run.
TIER_ENV = {"envtest": ("KUBEBUILDER_ASSETS",),
            "kubevirt": ("KUBEBUILDER_ASSETS", "KUBEVIRT_ASSETS", "RBLNCTL_SHARED"),
            "kernel": ("RBLNCTL_KERNEL",)}


def tier_skips(reports, env) -> list[str]:
    """One line per test of a real tier that was skipped although the environment names every tier it is in (so it
    should have run: a broken bundle, a fixture that gave up, a tier's tests skipped by mistake); `reports` are the
    run's skipped reports (their tiers in user_properties, as pytest_collection_modifyitems put them), `env` the
    environment. An xfail is not a skip."""
    lines = []
    for rep in reports:
        if getattr(rep, "wasxfail", None) is not None:
            continue
        tiers = [value for name, value in getattr(rep, "user_properties", ()) if name == "tier"]
        needed = {var for tier in tiers for var in TIER_ENV.get(tier, ())}
        if tiers and all(env.get(var) for var in needed):
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr or "")
            lines.append(f"{rep.nodeid} ({', '.join(tiers)}; {', '.join(sorted(needed))} set) was skipped: "
                         f"{reason.removeprefix('Skipped: ')}")
    return lines


_SKIPPED_TIERS = pytest.StashKey[list]()


def pytest_sessionfinish(session):
    """A real tier whose environment is set must run: any of its tests skipped fails the run (exit 1), each named in
    the summary. On the controller only (under xdist it has every worker's reports)."""
    import os

    if hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = tier_skips(reporter.stats.get("skipped", []) if reporter else [], os.environ)
    session.config.stash[_SKIPPED_TIERS] = lines
    if lines and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    """One line per real tier: how many tests ran against it, and how they ended (under xdist the reports come from
    the workers, which collected the tests: each carries its tiers in user_properties); then every real-tier test
    skipped although its environment was set (pytest_sessionfinish made that a failure)."""
    for tier in _TIER_NAMES:
        counts: dict[str, int] = {}
        for outcome in ("passed", "failed", "error", "skipped"):
            for rep in terminalreporter.stats.get(outcome, []):
                tiers = getattr(rep, "user_properties", ())
                if ("tier", tier) in tiers and (rep.when == "call" or outcome != "passed"):
                    counts[outcome] = counts.get(outcome, 0) + 1
        if counts:
            terminalreporter.write_line(f"{_TIER_NAMES[tier]}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    for line in terminalreporter.config.stash.get(_SKIPPED_TIERS, []):
        terminalreporter.write_line(f"error: {line}", red=True)


@pytest.fixture(autouse=True)
def _no_real_cluster(tmp_path_factory, monkeypatch):
    """Point KUBECONFIG at an empty file and HOME at a temp dir: no test can reach a real cluster."""
    home = tmp_path_factory.mktemp("home")
    empty = home / "empty-kubeconfig"
    empty.write_text("")
    monkeypatch.setenv("KUBECONFIG", str(empty))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # rblnctl honours the proxy variables as kubectl does (rblnctl/kube/proxies.py): a developer's own must not
    # change what a test reaches. Tests of proxies set them themselves.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")



def pytest_configure(config):
    """A suite started in the background by a shell without job control inherits SIGINT ignored (bash ignores it in
    asynchronous commands; Python then keeps SIG_IGN instead of raising KeyboardInterrupt): every test that presses
    Ctrl-C would hang (seen: a CI started with `(... &)`, `vm list -w` waiting for three ignored SIGINTs). The tests
    press Ctrl-C on purpose, so each process of the run takes it as a terminal's Ctrl-C is taken; the processes the
    tests start inherit the default (a caught signal is reset at exec)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
