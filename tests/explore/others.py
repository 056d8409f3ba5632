"""The explorer's other-actor cases (issue 37): one actor (tests/explore/actors.py) at one point between two of
rblnctl's steps, and the judge.

For a World and its uninterrupted write log (engine.run_baseline), the POINTS are `before-01` and `after-k` for each
write k: every gap between two of the command's steps (the gap before its first write comes after every read that
decided it). A case = (world, point, actor): the world is built again, the command runs, and at that point the actor
acts once (rblnctl's request waits meanwhile: a second rblnctl runs in full there). What the case must show:

- **identity**: once an actor replaced an object (deleted and re-created it: another uid), none of rblnctl's later
  writes to it succeeded (a JSON patch `test` of /metadata/uid or a precondition refuses them; a virt-api
  start/stop carries none, so the VM must be read back first), and a command that tried one does not exit 0;
- **the message is true**: a run that exits 0 left a world one of the ACCEPTED ones (below); a run that says it
  changed nothing, where the actor acted before its first write, changed nothing after the actor;
- **the recovery converges**: otherwise the recovery it printed (engine.recovery_of: the first command that goes on,
  else the same command) leaves an accepted world.

ACCEPTED worlds are what the two serial orders leave, each computed by running them (`references`): the actor
first, then the command (and its printed recovery, when it failed) = `A;C`; the command, then the actor = `C;A`;
and when the actor's act was refused in the case itself, the uninterrupted run's end (it did nothing). So rblnctl
may notice the actor and go on as if it had come first, or finish what it decided and leave the actor's change on
top, but never a third world: a VM started that its owner stopped, stopped that its owner started, running its old
NPUs with a message that says restarted, an owner's edit undone, a re-created VM changed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.explore.actors import ACTORS, Act, Actor, Scene, vm_path
from tests.explore.engine import Baseline, Write, World, _Fresh, diff, is_write, norm_path, recovery_of, snapshot
from tests.explore.worlds import OPERATORS
from tests.fakes.apiserver import FakeApiServer
from tests.helpers import cli

ACTOR_TIMEOUT = "3s"  # a command's --timeout in these cases: what an actor makes it wait for may never come
# virt-controller's own writes after a stop come 50 ms and 100 ms later (fakes kubevirt.py): settle() waits for the
# fake's scheduled writes due within this horizon (FakeApiServer.wait_scheduled), not a fixed sleep
_SETTLE_HORIZON_S = 0.2


@dataclass(frozen=True)
class Point:
    """Where an actor acts: before write `write` reaches the server (`before`) or once it was handled (`after`)."""

    when: str  # "before" or "after"
    write: Write

    @property
    def label(self) -> str:
        return f"{self.when}-{self.write.label}"


def points(base: Baseline) -> list[Point]:
    """Every gap between two of the command's steps: before its first write, after each write but an Event's (an
    Event changes nothing any step reads: the gap after it is the gap before it)."""
    if not base.writes:
        return []
    return [Point("before", base.writes[0])] + [Point("after", w) for w in base.writes
                                                if not (w.method == "POST" and w.path.endswith("/events"))]


def actors_for(world: World) -> list[Actor]:
    out = []
    for a in ACTORS:
        if (a.needs == "vm" and world.vm is None) or (a.needs == "node" and world.node is None) or \
                (a.needs == "opposite" and world.opposite is None):
            continue
        out.append(a)
    return out


def argv_of(world: World) -> tuple[str, ...]:
    """The command with a short --timeout (an actor may take away what it waits for)."""
    words = list(world.argv)
    for i, w in enumerate(words[:-1]):
        if w == "--timeout":
            words[i + 1] = ACTOR_TIMEOUT
    return tuple(words)


def _opposite(world: World) -> tuple[str, ...] | None:
    if world.opposite is None:
        return None
    words = list(world.opposite)
    for i, w in enumerate(words[:-1]):
        if w == "--timeout":
            words[i + 1] = ACTOR_TIMEOUT
    return tuple(words)


def settle(server: FakeApiServer) -> None:
    """Let the controllers finish reacting before anything is judged."""
    op = OPERATORS.get(server)
    for _ in range(2):  # the operator's reaction may schedule virt-controller's, and the other way round
        if op is not None:
            op.wait_idle()
        server.wait_scheduled(_SETTLE_HORIZON_S)


def scene_of(server: FakeApiServer, world: World) -> Scene:
    original: dict[str, dict] = {}
    if world.vm is not None:
        vm = server.get("VirtualMachine", world.vm[1], world.vm[0])
        if vm is not None:
            original[vm_path(*world.vm)] = vm
    mode = None
    if world.node is not None:
        node = server.get("Node", world.node)
        mode = ((node or {}).get("metadata", {}).get("labels") or {}).get("rebellions.ai/npu.workload.config")
    return Scene(server=server, vm=world.vm, node=world.node, original=original, argv=argv_of(world),
                 opposite=_opposite(world), before_mode=mode)


# -- the serial orders --------------------------------------------------------------------------------------------


@dataclass
class References:
    actor_first: dict  # A;C
    command_first: dict  # C;A
    notes: list[str]


_REFERENCES: dict[tuple[str, str], References] = {}


def references(base: Baseline, actor: Actor) -> References:
    key = (base.world.name, actor.name)
    if key not in _REFERENCES:
        world, argv = base.world, argv_of(base.world)
        notes = []
        with _Fresh(world) as server:
            scene = scene_of(server, world)
            r = cli(*argv, server=server.url)
            settle(server)
            act = actor.act(scene)
            settle(server)
            notes.append(f"C;A: exit {r.exit_code}; then {act.said.strip()}")
            command_first = snapshot(server, world.kinds)
        if actor.name == "second-same" and r.exit_code == 0 and act.effective:
            # A;C is the same two runs of the command on the same world, each exit 0 (so no recovery): C;A's end
            actor_first = command_first
            notes.append("A;C: the same two runs of the command as C;A")
        else:
            with _Fresh(world) as server:
                act = actor.act(scene_of(server, world))
                settle(server)
                r = cli(*argv, server=server.url)
                notes.append(f"A;C: {act.said.strip()}; then exit {r.exit_code}")
                if r.exit_code != 0:
                    rec = recovery_of(r.stderr, argv)
                    r2 = cli(*rec, server=server.url)
                    notes.append(f"  its recovery `{' '.join(rec)}` exit {r2.exit_code}")
                settle(server)
                actor_first = snapshot(server, world.kinds)
        _REFERENCES[key] = References(actor_first, command_first, notes)
    return _REFERENCES[key]


# -- one case -----------------------------------------------------------------------------------------------------


@dataclass
class _Hook:
    """The fake's on_request and on_handled hooks that make `actor` act at `point`, once."""

    scene: Scene
    point: Point
    actor: Actor
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    target: Any = None  # the request of the point's write
    act: Act | None = None
    window: tuple[float, float] | None = None  # when the actor acted (its own requests arrived then)
    after_actor: dict | None = None  # the state the actor left (at `before` points)
    kinds: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)
    acting: bool = False

    def before(self, req: Any) -> None:
        if self.acting or not is_write(req):
            return
        key = (req.method, norm_path(req.path))
        with self.lock:
            if self.target is not None:
                return
            self.counts[key] = self.counts.get(key, 0) + 1
            if key != (self.point.write.method, self.point.write.path) or \
                    self.counts[key] != self.point.write.occurrence:
                return
            self.target = req
        if self.point.when == "before":
            self._act()
            self.after_actor = snapshot(self.scene.server, self.kinds)

    def after(self, req: Any) -> None:
        if self.point.when == "after" and req is self.target and self.act is None:
            self._act()

    def _act(self) -> None:
        self.acting = True
        t0 = time.monotonic()
        try:
            self.act = self.actor.act(self.scene)
        finally:
            self.window = (t0, time.monotonic())
            self.acting = False


@dataclass
class ActorOutcome:
    act: Act | None
    exit_code: int
    stderr: str
    state: dict
    accepted: list[tuple[str, dict]]
    wrote_replaced: list[str]  # rblnctl's successful writes to an object the actor had replaced
    tried_replaced: bool  # rblnctl attempted a write to a replaced object (refused or not)
    after_actor: dict | None
    recovery: tuple[str, ...] | None = None
    recovery_exit: int | None = None
    recovery_stderr: str = ""
    final: dict | None = None
    references: list[str] = field(default_factory=list)


def _targets(path: str, replaced: str) -> bool:
    sub = replaced.replace("/apis/kubevirt.io/", "/apis/subresources.kubevirt.io/")
    return path == replaced or path.startswith(replaced + "/") or path.startswith(sub + "/")


def run_actor_case(base: Baseline, point: Point, actor: Actor) -> ActorOutcome:
    world, argv = base.world, argv_of(base.world)
    refs = references(base, actor)
    with _Fresh(world) as server:
        hook = _Hook(scene_of(server, world), point, actor, kinds=world.kinds)
        stop_before, stop_after = server.on_request(hook.before), server.on_handled(hook.after)
        r = cli(*argv, server=server.url)
        stop_before()
        stop_after()
        settle(server)
        state = snapshot(server, world.kinds)
        accepted = [("A;C", refs.actor_first), ("C;A", refs.command_first)]
        if hook.act is not None and not hook.act.effective:
            accepted.append(("the actor refused: the uninterrupted run", base.end))
        wrote, tried = [], False
        if hook.act is not None and hook.act.replaced and hook.window is not None:
            t1 = hook.window[1]
            for req in list(server.requests):
                if req.at < t1 or not is_write(req):
                    continue
                for path in hook.act.replaced:
                    if _targets(req.path, path):
                        tried = True
                        if 200 <= req.status < 300:
                            wrote.append(f"{req.method} {req.path} -> {req.status}")
        out = ActorOutcome(act=hook.act, exit_code=r.exit_code, stderr=r.stdout + r.stderr, state=state,
                           accepted=accepted, wrote_replaced=wrote, tried_replaced=tried,
                           after_actor=hook.after_actor, references=refs.notes)
        if r.exit_code != 0 or closest(state, accepted, world.per_node)[1]:
            out.recovery = recovery_of(r.stderr, argv)
            r2 = cli(*out.recovery, server=server.url)
            out.recovery_exit, out.recovery_stderr = r2.exit_code, r2.stdout + r2.stderr
            settle(server)
        out.final = snapshot(server, world.kinds)
    return out


def _unit(kind: str, key: str, obj: Any, nodes: tuple[str, ...]) -> str:
    """Which node of a pool an object of the state belongs to ("" for none)."""
    for n in nodes:
        if key == f"/{n}" or key.endswith(f"-{n}") or (isinstance(obj, dict) and obj.get("node") == n):
            return n
    return ""


def _split(state: dict, nodes: tuple[str, ...]) -> dict[str, dict]:
    units: dict[str, dict] = {}
    for kind, objs in state.items():
        for key, obj in objs.items():
            units.setdefault(_unit(kind, key, obj, nodes), {}).setdefault(kind, {})[key] = obj
    return units


def closest(state: dict, accepted: list[tuple[str, dict]], per_node: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The accepted world `state` is nearest to, and how they differ; with `per_node` (a pool, World.per_node) each
    node's objects may match a different accepted world, the rest one of them."""
    if not per_node:
        best = min(accepted, key=lambda a: len(diff(state, a[1])))
        return best[0], diff(state, best[1])
    mine = _split(state, per_node)
    theirs = [(name, _split(s, per_node)) for name, s in accepted]
    names, left = [], []
    for unit in sorted(set(mine) | {u for _, t in theirs for u in t}):
        name, units = min(theirs, key=lambda t: len(diff(mine.get(unit, {}), t[1].get(unit, {}))))
        names.append(f"{unit or 'the rest'}: {name}")
        left += diff(mine.get(unit, {}), units.get(unit, {}))
    return ", ".join(names), left



__all__ = ["ACTORS", "ActorOutcome", "Point", "References", "actors_for", "closest", "points", "references",
           "run_actor_case"]
