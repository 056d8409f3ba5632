"""The crash-point explorer's machinery: run a command uninterrupted and record its writes, then re-run it with one
fault at one write, run the recovery it printed, and judge (issue 28).

For a World (a cluster on the fake API server and one rblnctl command line):

1. **baseline**: the command runs uninterrupted; the fake's request log gives its writes, in order (reviews,
   which persist nothing, are left out), and the cluster's end state is kept (`snapshot`).
2. **a case** = one write k of that log and one FAULT. The world is built again on a fresh server, the command
   runs, and the fake's `on_request` hook catches write k (by method, path and how many such requests came before
   it) and does what the fault says:
   - `sigint`: SIGINT to the process (the main thread, as a terminal's Ctrl-C), and k is dropped unapplied:
     the interrupt came before k reached the server;
   - `sigterm`: k is applied, then SIGTERM, and its reply never comes (the process is stopped while k's answer
     is on its way);
   - `lost-reply`: k is applied and its reply lost (a reset connection, a proxy's timeout);
   - `conflict`: another writer touches k's object first (an annotation), and k is answered 409 Conflict
     unapplied, as a write that lost the race (a DELETE without preconditions cannot lose it: it goes through).
3. **judged** (`Verdict`): the process ended promptly (a signal: the command returned within EXIT_WITHIN_S and no
   thread it started that would hold a process at exit is left), with its documented code (130 for SIGINT, 143 for
   SIGTERM; otherwise a code of docs/exit-codes.md), no traceback; a command that exits 0 did its job (the end
   state is the baseline's); otherwise the recovery it printed (`finish the job:`, `resume:`, a backquoted command
   that goes on; else the same command) exits 0 and leaves the baseline's end state: no VM stopped or started
   against its owner, no cordon, lock or mark left behind.

Everything runs in this process (CliRunner, the fake on loopback threads): a signal is delivered to the main thread
with pthread_kill from the fake's handler thread at the exact request, as a terminal delivers Ctrl-C.
"""

from __future__ import annotations

import copy
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from tests.fakes.apiserver import FakeApiServer
from tests.helpers import cli

FAULTS = ("sigint", "sigterm", "lost-reply", "conflict")
EXIT_WITHIN_S = 2.0  # issue 28: no process outlives SIGINT/SIGTERM by more than this
DOCUMENTED = {0, 1, 2, 3, 4, 5, 6}  # docs/exit-codes.md (130, 143: the signals)
TOUCH = "explore.rblnctl.io/concurrent-writer"  # what the concurrent writer of a `conflict` writes
CONFLICT_MESSAGE = ("Operation cannot be fulfilled on {what}: the object has been modified; please apply your "
                    "changes to the latest version and try again")  # kube-apiserver's text (errors.NewConflict)
REVIEWS = re.compile(r"/selfsubject\w*reviews$|/subjectaccessreviews$")


# -- the world ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """A cluster and one command: `build(server)` seeds it and returns what to stop afterwards."""

    name: str
    argv: tuple[str, ...]
    build: Callable[[FakeApiServer], list[Callable[[], None]]]
    kinds: tuple[str, ...]  # what the end state is made of
    notes: str = ""
    # What other actors act on (tests/explore/actors.py): the command's VM (namespace, name) and node, and the
    # command that undoes this one (a second admin's `second-opposite`), None where there is none.
    vm: tuple[str, str] | None = None
    node: str | None = None
    opposite: tuple[str, ...] | None = None
    leaves_nothing: bool = False  # what it makes it also removes (preflight --hosts' pods): its end is its start
    # A command that changes these nodes one after another, each its own job (a pool): another actor's change is
    # judged per node (tests/explore/others.py), as each node's change is done before the next begins.
    per_node: tuple[str, ...] = ()


@dataclass(frozen=True)
class Write:
    """Write k of the uninterrupted run: the `occurrence`-th request with this method and path."""

    index: int
    method: str
    path: str
    occurrence: int

    @property
    def label(self) -> str:
        """`03-PATCH-nodes-n1` (for test ids)."""
        tail = "-".join(p for p in self.path.replace("*", "x").split("/")[-2:] if p)
        return f"{self.index:02d}-{self.method}-{tail}" + (f"-{self.occurrence}" if self.occurrence > 1 else "")


@dataclass
class Baseline:
    world: World
    writes: list[Write]
    start: dict
    end: dict
    exit_code: int
    stderr: str
    seconds: float


# Names a run makes up (a virt-launcher pod's suffix, a preflight run's id): a write is the same write in every run.
_MADE_UP = re.compile(r"(?<=/virt-launcher-)(.+)-[a-z0-9]{5}(?=/|$)|(?<=/rblnctl-preflight-)[0-9a-f]{8}(?=-)")


def norm_path(path: str) -> str:
    """`path` with the names a run makes up replaced by `*` (tests/explore's Write.path)."""
    return _MADE_UP.sub(lambda m: f"{m.group(1)}-*" if m.group(1) else "*", path)


def is_write(req: Any) -> bool:
    """A write of the client under test that changes something (a review persists nothing)."""
    return (req.is_write and not req.from_harness and req.user_agent.startswith("rblnctl/")
            and not REVIEWS.search(req.path))


# -- the state a run leaves ---------------------------------------------------------------------------------------

_META_DROPPED = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
                 "deletionGracePeriodSeconds")


def _clean(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    for k in _META_DROPPED:
        meta.pop(k, None)
    anns = meta.get("annotations") or {}
    anns.pop(TOUCH, None)
    if not anns:
        meta.pop("annotations", None)
    for ref in meta.get("ownerReferences") or []:
        ref.pop("uid", None)
    return out


def _pod(obj: dict) -> dict:
    """A pod as the state sees it: where it runs and whether it is going (its status is the kubelet's story)."""
    meta = obj.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != "kubevirt.io/created-by"}  # a VMI's uid
    return {"node": (obj.get("spec") or {}).get("nodeName"), "labels": labels,
            "terminating": bool(meta.get("deletionTimestamp"))}


def _key(kind: str, obj: dict) -> str:
    """How an object is told apart between runs: by name, a virt-launcher pod (its name has a random suffix) by
    its VM."""
    meta = obj.get("metadata") or {}
    vm = (meta.get("labels") or {}).get("vm.kubevirt.io/name")
    name = f"virt-launcher-{vm}" if kind == "Pod" and vm else meta.get("name")
    return f"{meta.get('namespace') or ''}/{name}"


_VMI_BOOKKEEPING = ("kubevirt.io/vm-generation",)  # the VM generation it started from: counts writes, not state


def _vmi(obj: dict) -> dict:
    clean = _clean(obj)
    anns = {k: v for k, v in (clean["metadata"].get("annotations") or {}).items() if k not in _VMI_BOOKKEEPING}
    return {"phase": (obj.get("status") or {}).get("phase"), "node": (obj.get("status") or {}).get("nodeName"),
            "annotations": anns or None, "spec": clean.get("spec") or {}}


def _vm(obj: dict) -> dict:
    clean = _clean(obj)
    anns = clean["metadata"].get("annotations") or {}
    # rblnctl's record of the template the VM was moved off: bookkeeping whose only effect, the delete of that
    # template by a later run, the templates in the world show; a run that found the template already gone writes none
    anns.pop(C.VM_TEMPLATE_LEFT_ANNOTATION, None)
    if not anns:
        clean["metadata"].pop("annotations", None)
    return {"metadata": {k: clean["metadata"].get(k) for k in ("labels", "annotations")}, "spec": clean.get("spec"),
            "ready": (obj.get("status") or {}).get("ready")}


def _node(obj: dict) -> dict:
    clean = _clean(obj)
    return {"labels": clean["metadata"].get("labels"), "annotations": clean["metadata"].get("annotations"),
            "spec": clean.get("spec"), "allocatable": (obj.get("status") or {}).get("allocatable")}


SHAPES: dict[str, Callable[[dict], Any]] = {"Pod": _pod, "VirtualMachineInstance": _vmi, "VirtualMachine": _vm,
                                            "Node": _node, "Lease": lambda o: "held"}


def snapshot(server: FakeApiServer, kinds: Iterable[str]) -> dict:
    """The objects of `kinds`, each reduced to what a run must leave as the uninterrupted one does."""
    out: dict[str, dict] = {}
    for kind in kinds:
        shape = SHAPES.get(kind, lambda o: {k: v for k, v in _clean(o).items() if k not in ("status",)})
        objs: dict[str, Any] = {}
        for o in server.list(kind):
            key = _key(kind, o)
            while key in objs:
                key += "+"
            objs[key] = shape(o)
        out[kind] = objs
    return out


def diff(a: dict, b: dict) -> list[str]:
    """What differs between two snapshots, one line each (empty: the same)."""
    lines = []
    for kind in sorted(set(a) | set(b)):
        xa, xb = a.get(kind, {}), b.get(kind, {})
        for key in sorted(set(xa) | set(xb)):
            if xa.get(key) != xb.get(key):
                lines.append(f"{kind} {key}: {_short(xa.get(key))} != {_short(xb.get(key))}")
    return lines


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) < 400 else text[:400] + "..."


# -- running ------------------------------------------------------------------------------------------------------


class _Fresh:
    """A fresh fake API server with the world built on it, torn down on exit."""

    def __init__(self, world: World) -> None:
        self.world = world

    def __enter__(self) -> FakeApiServer:
        self.server = FakeApiServer().start()
        try:
            self.stoppers = self.world.build(self.server)
        except BaseException:
            self.server.stop()
            raise
        self.server.clear_requests()
        return self.server

    def __exit__(self, *exc: Any) -> None:
        for stop in self.stoppers:
            stop()
        self.server.stop()


def run_baseline(world: World) -> Baseline:
    """The uninterrupted run: its writes and the state it leaves."""
    with _Fresh(world) as server:
        start = snapshot(server, world.kinds)
        t0 = time.monotonic()
        r = cli(*world.argv, server=server.url)
        seconds = time.monotonic() - t0
        counts: dict[tuple[str, str], int] = {}
        writes = []
        for req in list(server.requests):
            if not is_write(req):
                continue
            key = (req.method, norm_path(req.path))
            counts[key] = counts.get(key, 0) + 1
            writes.append(Write(index=len(writes) + 1, method=req.method, path=key[1], occurrence=counts[key]))
        end = snapshot(server, world.kinds)
    return Baseline(world=world, writes=writes, start=start, end=end, exit_code=r.exit_code, stderr=r.stderr,
                    seconds=seconds)


@dataclass
class Trigger:
    """The fake's on_request hook that does `fault` at write `at`."""

    server: FakeApiServer
    at: Write
    fault: str
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    fired_at: float | None = None  # when the fault fired (time.monotonic())
    signalled_at: float | None = None  # when a signal was sent
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: Any) -> None:
        if not is_write(req):
            return
        key = (req.method, norm_path(req.path))
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if self.fired_at is not None or key != (self.at.method, self.at.path) or \
                    self.counts[key] != self.at.occurrence:
                return
            self.fired_at = time.monotonic()
        exact = "^" + re.escape(req.path) + "$"
        if self.fault == "sigint":
            self._signal(signal.SIGINT)
            self.server.inject_fault(method=req.method, path=exact, drop=True, client="rblnctl/")
        elif self.fault == "sigterm":
            self.server.inject_fault(method=req.method, path=exact, lose_reply=True, client="rblnctl/",
                                     then=lambda: self._signal(signal.SIGTERM))
        elif self.fault == "lost-reply":
            self.server.inject_fault(method=req.method, path=exact, lose_reply=True, client="rblnctl/")
        elif self.fault == "conflict":
            self._touch(req.path)
            if req.method == "DELETE" and not (isinstance(req.body, dict) and req.body.get("preconditions")):
                return  # kube-apiserver deletes whatever changed meanwhile: only a precondition makes a 409
            self.server.inject_fault(method=req.method, path=exact, status=409, reason="Conflict",
                                     message=CONFLICT_MESSAGE.format(what=req.path.rsplit("/", 1)[-1]),
                                     client="rblnctl/")
        else:
            raise ValueError(self.fault)

    def _signal(self, sig: int) -> None:
        self.signalled_at = time.monotonic()
        signal.pthread_kill(threading.main_thread().ident, sig)

    def _touch(self, path: str) -> None:
        """The concurrent writer: an annotation on the object `path` writes (or, for a subresource, belongs to)."""
        target = _object_of(self.server, path)
        if target is None:
            return
        kind, name, ns = target
        try:
            self.server.mutate(kind, name, ns, fn=lambda o: o.setdefault("metadata", {}).setdefault(
                "annotations", {}).__setitem__(TOUCH, str(time.monotonic_ns())))
        except KeyError:
            pass


def _object_of(server: FakeApiServer, path: str) -> tuple[str, str, str | None] | None:
    """(kind, name, namespace) of the object a write's path names (virt-api's subresources: their VM)."""
    path = path.replace("/apis/subresources.kubevirt.io/", "/apis/kubevirt.io/")
    route = server._table.route(path)
    if route is None:
        parent = path.rsplit("/", 1)[0]
        route = server._table.route(parent)
    if route is None or route[2] is None:
        return None
    res, ns, name, _sub = route
    return res.kind, name, ns


@dataclass
class Outcome:
    """One case's run, its recovery, and what they left."""

    exit_code: int
    stderr: str
    state: dict
    elapsed_after_signal: float | None
    lingering: list[str]
    escaped: str | None  # a signal that reached the test instead of the command
    fired: bool = False  # the fault met its write (a run that never makes it proves nothing)
    recovery: tuple[str, ...] | None = None
    recovery_exit: int | None = None
    recovery_stderr: str = ""
    final: dict | None = None


class _SignalHandlers:
    """The CLI's own handlers for SIGTERM and SIGHUP (rblnctl.cli.app.main installs them), put back afterwards."""

    def __enter__(self) -> None:
        from rblnctl.cli.errors import install_signal_handlers

        self.saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        signal.signal(signal.SIGINT, signal.default_int_handler)
        install_signal_handlers()

    def __exit__(self, *exc: Any) -> None:
        for s, h in self.saved.items():
            signal.signal(s, h)


def run_case(base: Baseline, at: Write, fault: str) -> Outcome:
    """Build the world again, run the command with `fault` at write `at`, then the recovery it printed."""
    world = base.world
    with _Fresh(world) as server:
        trigger = Trigger(server, at, fault)
        unsubscribe = server.on_request(trigger)
        before = set(threading.enumerate())
        escaped = None
        with _SignalHandlers():
            try:
                r = cli(*world.argv, server=server.url)
                code, stderr = r.exit_code, r.stderr
            except KeyboardInterrupt as e:  # the signal landed after the command had returned
                code, stderr, escaped = -1, "", repr(e)
            returned = time.monotonic()
        unsubscribe()
        elapsed = None if trigger.signalled_at is None else returned - trigger.signalled_at
        lingering = _lingering(before, trigger.signalled_at)
        state = snapshot(server, world.kinds)
        out = Outcome(exit_code=code, stderr=stderr, state=state, elapsed_after_signal=elapsed, lingering=lingering,
                      escaped=escaped, fired=trigger.fired_at is not None)
        server.clear_faults()
        if code != 0 or diff(state, base.end):
            out.recovery = recovery_of(stderr, world.argv)
            r2 = cli(*out.recovery, server=server.url)
            out.recovery_exit, out.recovery_stderr = r2.exit_code, r2.stderr
        out.final = snapshot(server, world.kinds)
    return out


def _lingering(before: set[threading.Thread], signalled_at: float | None) -> list[str]:
    """Threads the command started that would keep a process alive at exit (not daemons), still running once the
    time a signalled process may take has passed (joined until then)."""
    budget_end = (signalled_at or time.monotonic()) + EXIT_WITHIN_S
    left = []
    for t in threading.enumerate():
        if t in before or t.daemon or not t.is_alive():
            continue
        t.join(max(0.0, budget_end - time.monotonic()))
        if t.is_alive():
            left.append(t.name)
    return left


# -- the recovery a command printed --------------------------------------------------------------------------------

_PROG = r"(?:rblnctl|kubectl rbln)"
# A command the run printed to go on: after a label, or between backquotes; it ends at a `;` or the line's end.
_PRINTED = re.compile(rf"(?:finish the job|resume):\s+({_PROG} [^;`\n]+)|`({_PROG} [^`]+)`")
_GOING_BACK = re.compile(r"go(?:es)? back|--reverse")
_READ_ONLY = re.compile(r"^(?:vm list|vm diagnose|vm fit|node list|node history|status|policy show|kubevirt status"
                        r"|preflight)\b")


def _without_globals(words: list[str], *, keep: bool = False) -> list[str]:
    """The command after the program's root options (`keep`: with them, but for --server, which the explorer gives
    every run itself): a printed command repeats the run's root options (issue 29)."""
    from rblnctl.cli.errors import GLOBAL_VALUE_OPTS

    i, kept = 0, []
    while i < len(words) and words[i].startswith("-"):
        name = words[i].split("=", 1)[0]
        step = 2 if name in GLOBAL_VALUE_OPTS and "=" not in words[i] else 1
        if name not in ("--server", "-s"):
            kept += words[i:i + step]
        i += step
    return (kept if keep else []) + words[i:]


def recovery_of(stderr: str, argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command the run printed to go on from where it stopped (argv without the program name): the first one
    that goes on (`finish the job:`, `resume:`, a backquoted command that is neither read-only nor a way back); the
    same command when it printed none. A printed command is run as a person would: with the original's --yes."""
    found: str | None = None
    for m in _PRINTED.finditer(stderr):
        cmd = (m.group(1) or m.group(2)).strip()
        before, after = stderr[max(0, m.start() - 12):m.start()], stderr[m.end():m.end() + 20]
        words = shlex.split(cmd)
        rest = _without_globals(words[2:] if words[:2] == ["kubectl", "rbln"] else words[1:])
        if _READ_ONLY.match(" ".join(rest)) or _GOING_BACK.search(cmd) or _GOING_BACK.search(after) or \
                _GOING_BACK.search(before):
            continue
        found = cmd
        break
    if found is None:
        return argv
    words = shlex.split(found)
    words = _without_globals(words[2:] if words[:2] == ["kubectl", "rbln"] else words[1:], keep=True)
    if "--yes" in argv and "--yes" not in words and "-y" not in words and _takes_yes(words):
        words.append("--yes")
    return tuple(words)


def _takes_yes(words: list[str]) -> bool:
    """Whether the command `words` names has a --yes (vm start has none: it never asks)."""
    import typer.testing

    from rblnctl.cli.app import app

    cmd: Any = typer.testing._get_command(app)  # built once (tests/helpers.py)
    for w in words:
        sub = getattr(cmd, "commands", {}).get(w)
        if sub is not None:
            cmd = sub
    return any("--yes" in getattr(p, "opts", ()) for p in getattr(cmd, "params", ()))
