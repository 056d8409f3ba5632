"""rblnctl.clock's waits on the main thread: a Ctrl-C that lands while one blocks is run at once (in slices of
SIGNAL_CHECK_S), and slicing changes nothing else (what they return, how long they wait, a stop that wakes them)."""

from __future__ import annotations

import threading
import time

import pytest

from rblnctl.clock import SIGNAL_CHECK_S, Clock, Stop, sliced
from tests.helpers import blocked_in, ctrl_c_pending_when

LONG_S = 60.0  # longer than any test runs: only the interrupt (or the stop) ends the wait


def _sleep() -> None:
    Clock().sleep(LONG_S)


def _sleep_until_event() -> None:
    Clock().sleep(LONG_S, threading.Event())


def _sleep_until_stop() -> None:
    Clock().sleep(LONG_S, Stop())


def _stop_wait() -> None:
    Stop().wait(LONG_S)


def _stop_wait_for_ever() -> None:
    Stop().wait()


@pytest.mark.parametrize("wait, where", [(_sleep, "sleep"), (_sleep_until_event, "sleep"), (_sleep_until_stop, "sleep"),
                                         (_stop_wait, "wait"), (_stop_wait_for_ever, "wait")],
                         ids=["sleep", "sleep_until_event", "sleep_until_stop", "stop_wait", "stop_wait_for_ever"])
def test_a_ctrl_c_that_lands_as_the_main_thread_sleeps_is_run_at_once(wait, where):
    """A Ctrl-C that landed just before the main thread blocked in time.sleep or an Event's wait (SIGINT's handler
    pending, the wait not interrupted) ran only when the wait ended: a retry's backoff, a poll's pause, up to 5 s
    (for ever in Stop.wait()). The waits go in slices: the handler runs within one."""
    main = threading.main_thread()
    with ctrl_c_pending_when(lambda: blocked_in(main, wait.__name__, where)):
        with pytest.raises(KeyboardInterrupt):
            wait()


def test_a_stop_set_while_the_main_thread_sleeps_wakes_it_at_once():
    stop = Stop()
    main = threading.main_thread()

    def set_once_asleep() -> None:
        while not blocked_in(main, "test_a_stop_set_while_the_main_thread_sleeps_wakes_it_at_once", "sleep"):
            time.sleep(0.01)
        stop.set()

    threading.Thread(target=set_once_asleep, daemon=True).start()
    began = time.monotonic()
    assert Clock().sleep(LONG_S, stop) is True
    assert time.monotonic() - began < LONG_S  # woken, not timed out (the margin is the whole sleep)


def test_the_sliced_waits_return_what_the_unsliced_ones_did():
    clock = Clock()
    assert clock.sleep(0) is False and clock.sleep(-1) is False
    assert clock.sleep(0, threading.Event()) is False and Stop().wait(0) is False
    done = Stop()
    done.set()
    assert clock.sleep(LONG_S, done) is True and done.wait(LONG_S) is True and done.wait(0) is True
    assert done.wait() is True
    event = threading.Event()
    event.set()
    assert clock.sleep(LONG_S, event) is True


def test_a_sliced_sleep_lasts_its_whole_length_in_a_few_slices_not_a_busy_loop():
    slices: list[float] = []

    def slept(seconds: float) -> bool:
        slices.append(seconds)
        time.sleep(seconds)
        return False

    began = time.monotonic()
    assert sliced(slept, 3.5 * SIGNAL_CHECK_S) is False
    assert time.monotonic() - began >= 3.5 * SIGNAL_CHECK_S  # never shorter (a lower bound only)
    assert all(0 <= s <= SIGNAL_CHECK_S for s in slices) and 4 <= len(slices) <= 5


def test_another_thread_waits_in_one_go():
    """Signal handlers run on the main thread only: another thread's wait is not cut up."""
    slices: list[float] = []

    def run() -> None:
        sliced(lambda s: bool(slices.append(s)), 2.5)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert slices == [2.5]
