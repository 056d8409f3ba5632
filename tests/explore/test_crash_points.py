"""Every multi-step command, faulted at every write it makes (issue 28's crash-point explorer; tests/explore/engine.py).

The cases are generated from each command's uninterrupted run on the fake API server (its write log), computed
once per session when the tests are collected: a write a command stops making drops its cases, a new one adds four.
docs/testing.md ("The crash-point explorer") has the matrix's size and time.
"""

from __future__ import annotations

import re

import pytest

from tests.explore.engine import DOCUMENTED, EXIT_WITHIN_S, FAULTS, Baseline, diff, run_baseline, run_case
from tests.explore.sampling import sample
from tests.explore.worlds import WORLDS

_BASELINES: dict[str, Baseline] = {}
NOTHING_CHANGED = re.compile(r"nothing was (?:changed|written)")  # a claim the state must bear out

# Cases that fail because of issue 28 findings 1-4 (the stopped mark of `vm attach|detach --restart` and `vm restart`
# taken for done), fixed on another branch: xfail(strict) until it is merged, then the lead removes the entry.
# (world, write label, fault) -> finding
KNOWN: dict[tuple[str, str, str], int] = {}


def baseline(name: str) -> Baseline:
    if name not in _BASELINES:
        world = next(w for w in WORLDS if w.name == name)
        base = run_baseline(world)
        assert base.exit_code == 0, f"{name}: the uninterrupted run failed: {base.stderr}"
        assert base.writes, f"{name}: the uninterrupted run wrote nothing"
        assert diff(base.start, base.end) or world.leaves_nothing, (
            f"{name}: the uninterrupted run changed nothing the explorer looks at")
        _BASELINES[name] = base
    return _BASELINES[name]


SAMPLE_EVERY = 5  # the default run takes every 5th case of each world (tests/explore/sampling.py); CI takes all


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    cases = [(world.name, f"{world.name}-{write.label}-{fault}", (write, fault))
             for world in WORLDS for write in baseline(world.name).writes for fault in FAULTS]
    params = []
    for name, case_id, (write, fault) in sample(cases, SAMPLE_EVERY):
        marks = []
        finding = KNOWN.get((name, write.label, fault))
        if finding is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=f"issue 28 finding {finding}, fixed on branch "
                                                               "vm-restart"))
        params.append(pytest.param((name, write, fault), id=case_id, marks=marks))
    metafunc.parametrize("case", params)


def test_a_fault_at_any_write_ends_promptly_truthfully_and_the_recovery_finishes_the_job(case):
    name, write, fault = case
    base = baseline(name)
    out = run_case(base, write, fault)
    where = f"{name}: {fault} at write {write.label}"
    assert out.fired, f"{where}: the run never made that write:\n{out.stderr}"
    assert out.escaped is None, f"{where}: the signal reached the test, not the command: {out.escaped}"
    assert "Traceback" not in out.stderr and "unexpected" not in out.stderr, f"{where}:\n{out.stderr}"
    if fault in ("sigint", "sigterm"):
        expected = 130 if fault == "sigint" else 143
        assert out.exit_code == expected, f"{where}: exit {out.exit_code}, not {expected}:\n{out.stderr}"
        assert out.elapsed_after_signal is not None and out.elapsed_after_signal < EXIT_WITHIN_S, (
            f"{where}: the command returned {out.elapsed_after_signal:.1f}s after the signal")
        said = "interrupted" if fault == "sigint" else "terminated by signal 15"
        assert said in out.stderr, f"{where}: the run did not say it was {said}:\n{out.stderr}"
    else:
        assert out.exit_code in DOCUMENTED, f"{where}: exit {out.exit_code}:\n{out.stderr}"
    assert not out.lingering, f"{where}: threads that would hold the process: {out.lingering}"
    if NOTHING_CHANGED.search(out.stderr):  # a run that says it changed nothing changed nothing
        assert not diff(out.state, base.start), f"{where}: said nothing was changed, but:\n" + "\n".join(
            diff(out.state, base.start))
    if out.exit_code == 0:  # a command that says it is done is done
        assert not diff(out.state, base.end), f"{where}: exit 0 but:\n" + "\n".join(diff(out.state, base.end))
    if out.recovery is not None:
        assert out.recovery_exit == 0, (f"{where}: the recovery `{' '.join(out.recovery)}` exited "
                                        f"{out.recovery_exit}:\n{out.recovery_stderr}\n(the run said:\n{out.stderr})")
    left = diff(out.final or {}, base.end)
    assert not left, f"{where}: after `{' '.join(out.recovery or ())}`:\n" + "\n".join(left) + \
        f"\n(the run said:\n{out.stderr})"
