"""Write docs/screens.md: what rblnctl shows on an 80x24 terminal, captured from pseudo-terminal runs.

    .venv/bin/python -m tests.screens            # rewrites docs/screens.md

The world is the test suite's: the fake API server with operator v0.3.0 simulated (tests/fakes/operator.py) on two
RBLN-CA12 nodes, KubeVirt v1.9.0, and a host tree of a VM worker without a vIOMMU (tests/fakes/sysfs.py) for
`preflight --local`. Each screen is a real `python -m rblnctl` process on a pseudo-terminal (tests/terminal.py), so
what is folded and how is what a person at that terminal sees. Times and dates in the text are the run's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.terminal import on_terminal, piped

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screens.md"
HEAD = """# rblnctl at 80 columns

What a person sees on an 80x24 terminal, captured from pseudo-terminal runs by `python -m tests.screens` (refresh
this file with it). On a terminal, tables fold their widest columns at word boundaries (after a space or a comma)
and long prose lines fold under their own indent; piped, every row stays one line for grep (docs/output.md). The
world: the test suite's fake API server with the RBLN NPU Operator v0.3.0 simulated on two RBLN-CA12 nodes, and
for `preflight --local` a VM worker without a vIOMMU.
"""


def _block(title: str, args: list[str], text: str, note: str = "") -> str:
    shown = " ".join(a for a in args if not a.startswith("http") and a not in ("--server", "--root")
                     and not a.startswith("/"))
    body = "\n".join(line.rstrip() for line in text.strip("\n").splitlines())
    return f"## {title}\n\n{note}{'' if not note else chr(10) + chr(10)}```\n$ rblnctl {shown}\n{body}\n```\n"


def main() -> int:
    from tests.fakes import sysfs as ht
    from tests.fakes.apiserver import FakeApiServer
    from tests.fakes.operator import stack_v030

    blocks = [HEAD]
    with tempfile.TemporaryDirectory() as tmp:
        root = str(ht.build_host(Path(tmp) / "host", ht.vm_without_viommu()).root)
        args = ["preflight", "--local", "--root", root]
        blocks.append(_block("preflight --local", args, on_terminal(args).text,
                             "The README's first command, on a VM worker that has no vIOMMU."))
    fake = FakeApiServer().start()
    try:
        op = stack_v030(fake)
        try:
            s = ["--server", fake.url]
            blocks.append(_block("node list", ["node", "list"], on_terminal([*s, "node", "list"]).text))
            blocks.append(_block("status", ["status"], on_terminal([*s, "status"]).text))
            plan = ["node", "set-mode", "vm", "npu-node-1"]
            blocks.append(_block("node set-mode: the plan", plan, on_terminal([*s, *plan], answers=["n"]).text,
                                 "The operator's own pods are counted in one row (`-o wide` lists them), so the "
                                 "warning, the plan and the question fit one screen."))
            rehearse = ["node", "set-mode", "vm", "npu-node-1", "npu-node-2", "--rehearse"]
            blocks.append(_block("node set-mode: the rehearsal", rehearse, on_terminal([*s, *rehearse]).text,
                                 "A pool's switch predicted from one read, nothing written: the waves, the pods "
                                 "evicted and where they could go, the operator's rollout and the estimate with "
                                 "its basis."))
            run = [*plan, "--yes", "--timeout", "8"]
            wait = on_terminal([*s, *run])
            frame = wait.before_first("waiting 5s")  # the spinner at 4s, its times ticking
            blocks.append(_block("node set-mode: the wait", run, frame + "...\n" + wait.text.split("relabel: ")[-1]
                                 .split("\n", 1)[-1],
                                 "Operator v0.3.0's sandbox device plugin never leaves `Init:0/2` on a vm-passthrough "
                                 "node: the wait names the init container, its time so far and what is left; piped, "
                                 "a line only when what it says changes."))
            piped_run = ["node", "set-mode", "vm", "npu-node-2", "--yes", "--timeout", "4"]
            _, err, _ = piped([*s, *piped_run])
            blocks.append(_block("node set-mode: the wait, piped", [*piped_run, "2>&1", "|", "cat"], err,
                                 "Piped, rows and lines are never folded (grep finds them whole) and the wait "
                                 "prints a line only when what holds the node up changes."))
            blocks.append(_block("node list: a node mid-switch", ["node", "list"],
                                 on_terminal([*s, "node", "list"]).text,
                                 "The switches above timed out and left their records on the nodes: STATUS says "
                                 "`Switching` until a set-mode finishes or reverses it."))
        finally:
            op.stop()
    finally:
        fake.stop()
    OUT.write_text("\n".join(blocks))
    print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
