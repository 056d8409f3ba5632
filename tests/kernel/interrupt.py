"""Ctrl-C for the kernel tier: `python -m tests.kernel.interrupt MARKER -- COMMAND...`.

Runs COMMAND with SIGINT at its default (a shell's background job would have it ignored), waits until MARKER shows
in its output, gives it a second more, sends SIGINT as a terminal's Ctrl-C does, and prints `rc=<exit status>`
then everything COMMAND wrote (stdout and stderr). A COMMAND still running 60 s after the signal is killed and reported
as `rc=hung`; output still held open 10 s after it exited (by a process it left behind) ends with `output-held-open`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time


def main(marker: str, argv: list[str]) -> None:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout is not None
    err = ""
    while marker not in err:
        line = p.stdout.readline()
        if not line:
            break
        err += line
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)  # the process's exit, not the end of its output
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        print("rc=hung")
    else:
        print(f"rc={p.returncode}")
    try:
        rest = p.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:  # something it started still holds its stdout open
        rest = "\noutput-held-open\n"
    print(err + rest)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:])
