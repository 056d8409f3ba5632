"""One bound for every sysfs access that can block in the kernel: run it in a forked child, wait at most so long.

An unbind from vfio-pci waits (uninterruptibly) until every VFIO user lets go of the device, and holds the device
lock all that time; reading that function's `driver_override` takes the device lock too (torvalds/linux v6.1
drivers/vfio/vfio_main.c vfio_unregister_group_dev(): "blocked until released by user";
drivers/pci/pci-sysfs.c driver_override_show(): device_lock()). A thread would not do: a process cannot exit while
one of its threads sleeps in the kernel, and Ctrl-C must end rblnctl. So the access runs in a child process: the
parent waits `bound_s` at most, then leaves the child to finish in the kernel and raises StillBlocked.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import time
from collections.abc import Callable

from rblnctl.errors import HostError

MAX_ANSWER = 4096  # what a child may hand back (a sysfs attribute is at most a page)


class StillBlocked(HostError):
    """The access was still blocked in the kernel when its bound passed.

    It is not cancelled (the kernel cannot be made to give it up): the child process `pid` keeps waiting in it and
    finishes once whatever holds the device lets go.
    """

    def __init__(self, message: str, *, pid: int = 0) -> None:
        super().__init__(message)
        self.pid = pid


def run_bounded(action: Callable[[], bytes], bound_s: float) -> bytes:
    """Run `action` in a forked child and return what it returned (at most MAX_ANSWER bytes).

    Raises OSError with the errno the child's access failed with, StillBlocked when the child has not finished
    within `bound_s` (it is left running). KeyboardInterrupt while waiting propagates with the child's pid as its
    `blocked_pid` (the child is left running, too).
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the parent's to handle
        code = 0
        try:
            detach_fds(keep=w)
            os.write(w, action()[:MAX_ANSWER])
        except OSError as e:
            code = e.errno if e.errno and 0 < e.errno < 256 else errno.EIO
        except BaseException:
            code = errno.EIO
        os._exit(code)
    os.close(w)
    try:
        # the pipe ends (EOF) when the child exits: wait on it rather than poll, so an answer costs no sleep
        answer = b""
        deadline = time.monotonic() + bound_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StillBlocked(f"still blocked in the kernel after {bound_s:g} s", pid=pid)
            if not select.select([r], [], [], left)[0]:
                continue
            chunk = os.read(r, MAX_ANSWER)
            if not chunk:
                break
            answer += chunk
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if code == 0:
            return answer[:MAX_ANSWER]
        err = code if code > 0 else errno.EINTR
        raise OSError(err, os.strerror(err))
    except KeyboardInterrupt as e:  # the caller records the child it leaves waiting (rblnctl.host.vfio.binder)
        e.blocked_pid = pid  # type: ignore[attr-defined]
        raise
    finally:
        os.close(r)


def detach_fds(*, keep: int | None = None) -> None:  # pragma: no cover - the child
    """Let go of everything the child inherited but `keep`: it may outlive rblnctl, blocked in the kernel until a
    VFIO user lets go, and must not keep rblnctl's stdout/stderr open (a pipe reading rblnctl's output would wait for
    it) nor the state file's lock (every later run would be refused as concurrent). os.closerange closes every
    descriptor, whether /proc is mounted or not."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    top = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536
    top = top if top > 0 else 65536
    if keep is None or keep < 3:
        os.closerange(3, top)
    else:
        os.closerange(3, keep)
        os.closerange(keep + 1, top)
