"""Another actor between every two steps of every multi-step command (issue 37; tests/explore/others.py).

The cases are generated as the crash points are (test_crash_points.py): from each world's uninterrupted write log
(every gap between two writes, and before the first) times each actor that applies to the world
(tests/explore/actors.py). The default run takes a deterministic sample, CI the whole matrix (sampling.py);
docs/testing.md ("Other actors") has the sizes and times.
"""

from __future__ import annotations

import pytest

from tests.explore.engine import DOCUMENTED, diff
from tests.explore.others import actors_for, closest, points, run_actor_case
from tests.explore.sampling import sample
from tests.explore.test_crash_points import NOTHING_CHANGED, baseline
from tests.explore.worlds import WORLDS

SAMPLE_EVERY = 12  # the default run takes every 12th case of each world; RBLNCTL_EXPLORE=full takes all

# Cases that still fail, each a known bug left open (docs/testing.md "Other actors" lists the full matrix's): strict
# xfails, so a fix turns them red until they leave this list. Empty since issue 37's fixes.
KNOWN: dict[str, str] = {}


def pytest_generate_tests(metafunc):
    if "actor_case" not in metafunc.fixturenames:
        return
    cases = []
    for world in WORLDS:
        for point in points(baseline(world.name)):
            for actor in actors_for(world):
                cases.append((world.name, f"{world.name}-{point.label}-{actor.name}", (point, actor)))
    metafunc.parametrize("actor_case", [
        pytest.param((name, point, actor), id=case_id,
                     marks=[pytest.mark.xfail(reason=KNOWN[case_id], strict=True)] if case_id in KNOWN else [])
        for name, case_id, (point, actor) in sample(cases, SAMPLE_EVERY, order=_actor_first)])


def _actor_first(case) -> tuple[str, str]:
    """Sample order: by actor, then point. By id (point, then actor) every 12th case of a world with 3, 4 or 6
    actors was the same actor at every point: the node worlds' sample saw one of their actors."""
    _world, case_id, (point, actor) = case
    return actor.name, case_id


def _told(out, base) -> str:
    act = out.act.said.strip() if out.act is not None else "(the actor never acted)"
    return (f"\nthe actor: {act}\nrblnctl said (exit {out.exit_code}):\n{out.stderr}"
            f"\nthe serial orders: {'; '.join(out.references)}")


def test_another_actor_between_two_steps_is_never_overruled_and_the_message_is_true(actor_case):
    name, point, actor = actor_case
    base = baseline(name)
    out = run_actor_case(base, point, actor)
    where = f"{name}: {actor.name} at {point.label}"
    told = _told(out, base)
    assert out.act is not None, f"{where}: the run never got there:{told}"
    assert "Traceback" not in out.stderr and "unexpected" not in out.stderr, f"{where}:{told}"
    assert out.exit_code in DOCUMENTED, f"{where}: exit {out.exit_code}:{told}"
    # identity: nothing written to an object the actor replaced (another uid), and no "done" after trying
    assert not out.wrote_replaced, (f"{where}: rblnctl wrote to the re-created object:\n"
                                    + "\n".join(out.wrote_replaced) + told)
    if out.tried_replaced:
        assert out.exit_code != 0, f"{where}: exit 0 after a write the re-created object refused:{told}"
    if out.after_actor is not None and NOTHING_CHANGED.search(out.stderr):
        changed = diff(out.state, out.after_actor)
        assert not changed, f"{where}: said nothing was changed, but:\n" + "\n".join(changed) + told
    if out.exit_code == 0:  # done means a world the two serial orders could leave
        which, left = closest(out.state, out.accepted, base.world.per_node)
        assert not left, f"{where}: exit 0, but the world is none a serial order leaves (nearest {which}):\n" + \
            "\n".join(left) + told
        return
    assert out.recovery is not None
    assert out.recovery_exit == 0, (f"{where}: the recovery `{' '.join(out.recovery)}` exited {out.recovery_exit}:\n"
                                    f"{out.recovery_stderr}{told}")
    which, left = closest(out.final or {}, out.accepted, base.world.per_node)
    assert not left, (f"{where}: after `{' '.join(out.recovery)}` the world is none a serial order leaves "
                      f"(nearest {which}):\n" + "\n".join(left) + told)


def test_the_matrix_is_generated_not_listed():
    """Every world has points and actors: a world whose write log or actor list came out empty explores nothing."""
    for world in WORLDS:
        assert points(baseline(world.name)), world.name
        assert actors_for(world), world.name
