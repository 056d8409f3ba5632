"""The two rich Consoles (stdout for results, stderr for progress, warnings and errors); nothing else creates one."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.measure import Measurement
    from rich.segment import Segment
    from rich.status import Status

    from rblnctl.method.plan import MethodEvents
    from rblnctl.node.events import NodeEvents, WaitState
    from rblnctl.node.pods import PodRef
    from rblnctl.vm.attach import VmEvents
    from rblnctl.vm.lifecycle import VmState

_no_color = False
PIPE_WIDTH = 160  # table width when stdout is not a terminal and COLUMNS is unset


def disable_color() -> None:
    """Turn colour off for both consoles (`--no-color`); call before the first use."""
    global _no_color
    _no_color = True
    stdout.cache_clear()
    stderr.cache_clear()


def color_enabled() -> bool:
    """Whether colour may be used at all (`--no-color` and NO_COLOR both turn it off)."""
    return not _no_color and not os.environ.get("NO_COLOR")


@lru_cache(maxsize=1)
def stdout() -> "Console":
    """The console for results: the only writer to stdout."""
    import sys

    # Piped output is read by grep and people alike: do not squeeze tables into rich's default 80
    # columns when there is no terminal to measure (COLUMNS, when set, still wins).
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return _console()(highlight=False, soft_wrap=False, width=width, **_plain())


@lru_cache(maxsize=1)
def stderr() -> "Console":
    """The console for progress, warnings and errors."""
    return _console()(stderr=True, highlight=False, **_plain())


@lru_cache(maxsize=1)
def _console() -> type[Console]:
    """rich's Console that never lets a character a terminal acts on through (rblnctl.cli.sanitize): rblnctl's own
    styling is in each segment's style and rich's cursor moves (spinners, live tables) in control segments, so
    escaping the text of every other segment leaves both alone. The call sites escape first (`plain`, which also
    keeps markup out and escapes what rich's Text would drop silently: BEL, BS, CR); this catches a renderable
    built from cluster text without it (a live table's rows). No emoji codes either: `:warning:` in a message
    stays as written."""
    from rich.console import Console
    from rich.segment import Segment

    from rblnctl.cli.sanitize import visible

    class SafeConsole(Console):
        def __init__(self, **kw: Any) -> None:
            super().__init__(emoji=False, **kw)

        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            return super()._render_buffer(seg if seg.control or not seg.text else
                                          Segment(visible(seg.text), seg.style) for seg in buffer)

    return SafeConsole


def _plain() -> dict:
    """Without colour (`--no-color`, NO_COLOR) no styling at all: rich's no_color still prints bold and
    underline, which a reader who asked for plain output does not want either."""
    return {} if color_enabled() else {"color_system": None}


def say(text: str, *, con: "Console | None" = None, lead: str = "", lead_style: str = "", style: str = "",
        indent: int | None = None) -> None:
    """One line of prose (a progress line, a note, a warning, an `error:`; `lead` is its styled first word): piped,
    one line whatever its length (grep finds it whole); on a terminal folded to its width at spaces with a hanging
    indent, a `quoted` command alone on its own line and never broken (rblnctl.cli.fold.fold_prose). Text from the
    cluster is escaped (rblnctl.cli.sanitize) and never read as markup. Every prose line on stderr goes through here:
    rich's own wrapping would break a command at its spaces."""
    from rich.markup import escape

    from rblnctl.cli.sanitize import visible

    con = stderr() if con is None else con
    full = f"{lead} {visible(text)}" if lead else visible(text)
    lines = [full]
    if con.is_terminal:
        from rblnctl.cli.fold import fold_prose, prose_indent

        width = con.width
        lines = fold_prose(full, width, indent=prose_indent(full, width) if indent is None else indent)
    for i, line in enumerate(lines):
        body = escape(line)
        if i == 0 and lead and lead_style:
            body = f"[{lead_style}]{escape(lead)}[/]{escape(line[len(lead):])}"
        con.print(f"[{style}]{body}[/]" if style else body, soft_wrap=True)


def warn(message: object) -> None:
    """Print one warning line to stderr (escaped, never read as markup); an Advice names its flag."""
    from rblnctl.cli.flags import flag_for
    from rblnctl.cli.rerun import spell

    text = spell(message)
    option = getattr(message, "option", None)
    if option:
        text += f" (pass {flag_for(option)})"
    say(text, lead="warning:", lead_style="yellow")


class ServerWarnings:
    """The API server's warnings (admission webhooks, deprecated APIs) on stderr, as kubectl prints them.

    kubectl's handler (k8s.io/kubectl pkg/cmd/cmd.go: rest.NewWarningWriter(stderr, {Deduplicate: true, Color:
    ...}); k8s.io/client-go rest/warnings.go warningWriter.HandleWarningHeader) prints only code 299 warnings with
    a text, each text once per process, as `Warning: <text>` ("Warning:" in yellow where colour is allowed). Set
    as `Kube.on_warning`; requests run on several threads, hence the lock. stdout is never touched (-o json).
    """

    def __init__(self) -> None:
        import threading

        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, warning: object) -> None:
        code, text = getattr(warning, "code", 0), str(getattr(warning, "text", "") or "")
        if code != 299 or not text:
            return
        with self._lock:
            if text in self._seen:
                return
            self._seen.add(text)
            say(text, lead="Warning:", lead_style="yellow")


def info(message: str) -> None:
    """Print one progress line to stderr."""
    say(message)


ECHO_ROOM = 3  # a spinner line ends this short of the terminal's edge: the `^C` a terminal echoes fits without a wrap


class SpinLine:
    """A spinner's text, always one line: cut to the room beside the spinner with `…` (never wrapped, so redrawing
    it and erasing it at the end, or at Ctrl-C, clear exactly one line and leave nothing cut on the screen; issue 39).
    `text` is a string or a function giving it anew at each refresh (a wait's ticking times). Escaped
    (rblnctl.cli.sanitize), never read as markup. Piped, nothing spins: the lines are printed whole instead."""

    def __init__(self, text: str | Callable[[], str]) -> None:
        self.text = text

    def plain(self) -> str:
        from rblnctl.cli.sanitize import visible

        return visible(" ".join(str(self.text() if callable(self.text) else self.text).split()))

    def line(self, room: int) -> str:
        from rblnctl.cli.fold import cut

        return cut(self.plain(), room)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        # the whole terminal's width here; the spinner's frame and a space take 2 of it, the echo of ^C ECHO_ROOM
        width = len(self.line(max(1, options.max_width - 2 - ECHO_ROOM)))
        return Measurement(width, width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        yield Text(self.line(options.max_width), no_wrap=True, overflow="crop")


def spinner(con: "Console", text: str | Callable[[], str]) -> Status:
    """A started spinner (rich's Status) with `text` beside it, one line (SpinLine); `.update(SpinLine(...))` to
    change it, `.stop()` to erase it."""
    status = con.status(SpinLine(text), spinner="dots")
    status.start()
    return status


class Spinning:
    """What `waiting` hands its block: `retrying`, the on_retry hook of the library's wait under the spinner."""

    def __init__(self, con: Console) -> None:
        self.con = con

    def retrying(self, err: Exception) -> None:
        """A transient failure the wait tries again (a 5xx, a dropped watch): `  retrying: <error>`, one line on
        stderr, as Progress.retry says every other wait's retry; on a terminal above the spinner, which goes on
        (the same console: a second one would tear the spinner's line)."""
        from rblnctl.errors import one_line

        say(f"  retrying: {one_line(err)}", con=self.con)


@contextmanager
def waiting(message: str) -> Iterator[Spinning]:
    """Show a spinner with message on stderr while the block runs (only on a terminal; silent in pipes but for the
    retries the block reports to the Spinning it is handed)."""
    con = stderr()
    if not con.is_terminal:
        yield Spinning(con)
        return
    status = spinner(con, message)
    try:
        yield Spinning(con)
    finally:
        status.stop()


def stdin_is_tty() -> bool:
    """Whether someone can answer a question (a closed stdin, `<&-`, counts as no)."""
    import sys

    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def confirm(question: str, *, yes: bool, show: object = None, verdict: Sequence[object] = ()) -> None:
    """Ask before a change: --yes skips; no terminal refuses (exit 2); "no" refuses (exit 1).

    `show` (text, or a callable returning it, built only when someone will read it) is printed on
    stderr first, so stdout stays clean for -o json; then `verdict`, the warnings that bear on the answer, as the
    last lines before the question (a plan a screen long never scrolls them off). Every mutating command asks the
    same way.
    """
    from rblnctl.errors import InvalidInput, Refused

    if yes:
        return
    if not stdin_is_tty():
        raise InvalidInput(f"{question.rstrip('?')}: stdin is not a terminal, so rblnctl cannot ask; "
                           "pass --yes to go ahead (or --dry-run to see the plan)")
    if show is not None:
        import sys

        from rblnctl.cli.sanitize import visible

        text = visible(show() if callable(show) else str(show))
        if stderr().is_terminal:  # a plan's prose (vfio's changes) folds as every line does; tables come folded
            from rblnctl.cli.fold import fold_prose, prose_indent

            width = stderr().width
            text = "".join(f"{out}\n" for line in text.splitlines()
                           for out in fold_prose(line, width, indent=prose_indent(line, width)))
        sys.stderr.write(text)
        sys.stderr.flush()
    for w in verdict:
        warn(w)
    if not ask_yes_no(question):
        raise Refused("not confirmed; nothing was changed")


def ask_yes_no(question: str) -> bool:
    """Ask `question [y/N]` on stderr and read one line; Ctrl-C propagates (exit 130), end of input means no."""
    import sys

    from rblnctl.cli.sanitize import visible

    sys.stderr.write(f"{visible(question)} [y/N]: ")
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        sys.stderr.write("\n")
        return False
    return line.strip().lower() in ("y", "yes")


class PoolLines(Protocol):
    """What a pool's progress (rblnctl.cli.pool.PoolProgress) takes of one node's events: its lines, its row."""

    def node_line(self, node: str, text: str, style: str = "") -> None: ...

    def evicted(self, node: str) -> None: ...

    def update(self, node: str, *, state: str | None = None, detail: str | None = None) -> None: ...


class Progress:
    """Every command's progress on stderr, whichever library's events it shows: a line per step or event, and what a
    wait waits for, beside a spinner on a terminal, a line per change when piped.

    One class for the node (drain, set-mode), method (policy set-method), VM change (vm attach|detach) and VM
    lifecycle (vm start|stop|restart) events. What differs per command is data: the step that waits and spins
    (`wait_step`), the step shown red (`rollback_step`) and the line a retry prints (`retried`, a format of
    {attempt} and {why}; `retry_suffix`: whether it says "(server dry run)" as every other line does). In a pool
    (rblnctl.cli.pool.PoolProgress) each node's events go through one of these, given the pool and the node: its
    lines and its row are the pool's to show (a live table on a terminal, prefixed lines when piped).
    """

    def __init__(self, *, server_dry_run: bool = False, wait_step: object = None, rollback_step: object = None,
                 retried: str = "{why}; re-reading and retrying", retry_suffix: bool = True,
                 pool: PoolLines | None = None, node: str = "") -> None:
        self.console = stderr()
        self.status: Status | None = None
        self.suffix = " (server dry run)" if server_dry_run else ""  # as kubectl's progress lines
        self.wait_step, self.rollback_step = wait_step, rollback_step
        self.retried, self.retry_suffix = retried, retry_suffix
        self.pool, self.node = pool, node
        self.shown: str | None = None  # what the last wait line said: only a change is a new line

    # -- the library's events ----------------------------------------------------------------------------------

    def node_events(self) -> NodeEvents:
        """rblnctl.node.events.NodeEvents (node drain, node set-mode on one node)."""
        from rblnctl.node.events import NodeEvents

        return NodeEvents(on_step=self.step, on_evicted=self.evicted, on_gone=self.gone,
                          on_pdb_blocked=self.pdb_blocked, on_wait=self.wait_state, on_warning=self.warning)

    def method_events(self) -> MethodEvents:
        """rblnctl.method.MethodEvents (policy set-method)."""
        from rblnctl.method import MethodEvents

        return MethodEvents(on_step=self.step, on_waiting=self.waiting, on_retry=self.retry, on_warning=self.warning)

    def vm_events(self) -> VmEvents:
        """rblnctl.vm.attach.VmEvents (vm attach, vm detach)."""
        from rblnctl.vm.attach import VmEvents

        return VmEvents(on_step=self.say, on_retry=self.retry)

    # -- lines ------------------------------------------------------------------------------------------------

    def line(self, text: str, style: str = "", *, suffix: bool = True) -> None:
        if self.pool is not None:
            self.pool.node_line(self.node, text, style)
            return
        say(text + (self.suffix if suffix else ""), con=self.console, style=style)

    def step(self, step: object, detail: str) -> None:
        """`STEP: detail`; the wait step is a spinner on a terminal."""
        self.stop()
        self._row(state=str(step), detail=detail)
        if step == self.wait_step and self.console.is_terminal:
            self.status = spinner(self.console, detail)
            return
        self.line(f"{step}: {detail}", "red" if self.rollback_step is not None and step == self.rollback_step else "")

    def say(self, text: str) -> None:
        """A step in words (a VM's request, change or restart): ends the spinner, and the wait before it."""
        self.stop()
        self.shown = None
        self.line(text)

    def retry(self, attempt: int, why: str) -> None:
        self.line(self.retried.format(attempt=attempt, why=why), suffix=self.retry_suffix)

    def warning(self, text: str) -> None:
        self.stop()
        warn(f"{self.node}: {text}" if self.node else text)

    def evicted(self, pod: PodRef) -> None:
        if self.pool is not None:
            self.pool.evicted(self.node)
        self._event(node_event_lines("evicted", pod))

    def gone(self, pod: PodRef) -> None:
        self._event(node_event_lines("gone", pod))

    def pdb_blocked(self, pod: PodRef, message: str, attempt: int) -> None:
        self._event(node_event_lines("pdb", pod, message=message, attempt=attempt), "yellow")

    def _event(self, words: tuple[str, str], style: str = "") -> None:
        detail, line = words
        self._row(detail=detail)
        self.line(line, style)

    def _row(self, **change: str) -> None:
        """In a pool: the node's row (its state, its DETAIL)."""
        if self.pool is not None:
            self.pool.update(self.node, **change)

    # -- what a wait waits for -------------------------------------------------------------------------------

    def wait_state(self, state: WaitState) -> None:
        """The node wait's one line (rblnctl.cli.waits): beside the spinner with its times ticking on a terminal;
        piped, printed again only when what it says changes."""
        from rblnctl.cli.waits import WaitLine, wait_key, wait_text, what

        self._row(detail=what(state))  # reason first: a pool row's DETAIL is cut at its end
        if self.status is not None:
            self.status.update(SpinLine(WaitLine(state).text))
            return
        key = wait_key(state)
        if key != self.shown:
            self.shown = key
            self.line(wait_text(state), "dim")

    def waiting(self, missing: list[str]) -> None:
        """What the operator has still to do (policy set-method's wait)."""
        text = f"waiting for the operator: {'; '.join(missing[:3])}" + (" ..." if len(missing) > 3 else "")
        if self.status is not None:
            self.status.update(SpinLine(text))
        else:
            self.line(text, "dim")

    def vm_state(self, st: VmState) -> None:
        """A VM's state while vm start|stop|restart waits (rblnctl.vm.lifecycle): the spinner's text on a terminal,
        a line per change in a pipe."""
        text = f"  {st.describe()}"
        if text == self.shown:
            return
        self.shown = text
        if not self.console.is_terminal:
            self.line(text, suffix=False)
        elif self.status is None:
            self.status = spinner(self.console, text)
        else:
            self.status.update(SpinLine(text))

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def node_event_lines(event: str, pod: PodRef, *, message: str = "", attempt: int = 0) -> tuple[str, str]:
    """A node event's words: (a pool row's DETAIL, the progress line) for an evicted or gone pod, or a
    PodDisruptionBudget refusing an eviction ("pdb")."""
    if event == "evicted":
        return f"evicted {pod}", f"  evicted {pod}"
    if event == "gone":
        return f"gone {pod}", f"  gone    {pod}"
    refused = f"{pod}: a PodDisruptionBudget refuses the eviction (attempt {attempt})"
    return refused, f"  {refused}; retrying: {message}"
