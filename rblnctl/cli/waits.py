"""set-mode's wait for the operator, as one short line: what holds the node up (reason first), elapsed and left.

On a terminal the line sits next to a spinner and its times tick (WaitLine.text, asked on every refresh); piped,
a line is printed only when what it says changes, not its times (wait_key), so `set-mode ... 2>&1 | tee` keeps
one line per change of state, not one per event.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rblnctl.node.events import WaitState


def human_duration(seconds: float) -> str:
    """`4.2s`, `1m05s`, `1h02m` (a table cell)."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _duration(seconds: float) -> str:
    return human_duration(seconds) if seconds >= 60 else f"{int(seconds)}s"


def what(state: WaitState, *, more: bool = True) -> str:
    """What holds the node up most (rblnctl.node.events.WaitState.first), reason first, and how much more is
    missing: `Init:0/2, stuck in init container driver-ready: pod rbln-system/x; last log line: '...' (+1 more)`."""
    first = state.first
    if first is None:
        return "; ".join(state.operator[:1]) or "the operator"
    h = first.hold
    if h is None:
        text = first.text
    else:
        # what it waits for, where the operator's source says (constants.INIT_WAITS), before the pod's name: the
        # known pattern is what a person needs, and a log that cannot be read is then no news (issue 39)
        text = f"{h.status}, {'stuck' if h.stuck else 'still'} in init container {h.container}: " + (
            h.waits_for or f"pod {h.ref}")
        if h.log:
            text += f"; last log line: {h.log!r}"
        elif h.stuck and state.log_problem and not h.waits_for:
            text += f"; its log cannot be read: {state.log_problem}"
    others = len(state.pending) - 1 + (len(state.operator) if state.pending else len(state.operator) - 1)
    return text + (f" (+{others} more)" if more and others > 0 else "")


def wait_text(state: WaitState, elapsed_s: float | None = None) -> str:
    """`waiting 12s, 9m48s left: <what>`."""
    elapsed = state.elapsed_s if elapsed_s is None else elapsed_s
    left = max(0.0, state.timeout_s - elapsed)
    return f"waiting {_duration(elapsed)}, {_duration(left)} left: {what(state)}"


def wait_key(state: WaitState) -> str:
    """What a piped line says first, without its times and how much more is missing: a new line only when this
    changes (pods coming and going during a switch change the count many times a second)."""
    return what(state, more=False)


class WaitLine:
    """The wait's line beside a spinner (rblnctl.cli.console.SpinLine), its times moving on every refresh."""

    def __init__(self, state: WaitState) -> None:
        self.state = state
        self.received = time.monotonic()

    def text(self) -> str:
        return wait_text(self.state, self.state.elapsed_s + time.monotonic() - self.received)
