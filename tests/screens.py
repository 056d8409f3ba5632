"""Write docs/screens.md: what rblnctl shows on an 80x24 terminal, captured from pseudo-terminal runs.

    .venv/bin/python -m tests.screens            # rewrites docs/screens.md

The world is the test suite's: the fake API server with operator v0.3.0 simulated (tests/fakes/operator.py) on three
nodes of two products (two RBLN-CA12, one RBLN-CA22), KubeVirt v1.9.0, and a host tree of a VM worker without a
vIOMMU (tests/fakes/sysfs.py) for `preflight --local`. Each screen is a real `python -m rblnctl` process on a
pseudo-terminal (tests/terminal.py), so what is folded and how is what a person at that terminal sees. Times and
dates in the text are the run's.
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
this file with it). On a terminal every screen fits its width (rblnctl/cli/fold.py, one mechanism): tables fold their
widest columns at word boundaries (after a space or a comma), and a table that cannot fit even so, or whose cells
hold a command, moves columns under each row as `HEADER: value` lines; prose, warnings and `error:` lines fold at
spaces under their own indent, and a `quoted` command that does not fit where it stands goes alone on its own
line, indented, never broken (the one line allowed to be wider than the terminal, when the command is). Spinner
lines are one line, cut with `...`, so Ctrl-C erases them whole. Piped, every row and line stays whole for grep
(docs/output.md). The world: the test suite's fake API server with the RBLN NPU Operator v0.3.0 simulated on three
nodes of two products (two RBLN-CA12, one RBLN-CA22), KubeVirt v1.9.0, and for `preflight --local` a VM worker
without a vIOMMU.
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
            from tests.fakes import objects as o
            from tests.fakes.releases import V0_3_0

            (policy,) = fake.list("RBLNClusterPolicy")
            fake.add(o.npu_node("npu-node-3", product="RBLN-CA22", release=V0_3_0, policy=policy))
            assert op.wait_idle()
            s = ["--server", fake.url]
            blocks.append(_block("node list", ["node", "list"], on_terminal([*s, "node", "list"]).text))
            blocks.append(_block("node list -o wide: two products", ["node", "list", "-o", "wide"],
                                 on_terminal([*s, "node", "list", "-o", "wide"]).text,
                                 "Nine columns cannot fit 80: the widest that must go (COMPONENTS, then PRODUCT) "
                                 "fold under each row."))
            blocks.append(_block("status", ["status"], on_terminal([*s, "status"]).text))
            blocks.append(_block("vm fit: no node in vm mode yet", ["vm", "fit", "--npus", "2"],
                                 on_terminal([*s, "vm", "fit", "--npus", "2"]).text,
                                 "REASON holds a command: the column goes under each row, where the command "
                                 "stands whole on its own line."))
            refused = ["node", "set-mode", "vm", "npu-node-3", "--yes"]
            blocks.append(_block("node set-mode: refused, folded", refused, on_terminal([*s, *refused]).text,
                                 "The `error:` line and its reasons fold at spaces under their indent."))
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
                                 "node: the wait names the init container and what it waits for (the pattern the "
                                 "operator's source gives), its time so far and what is left, on one line cut to "
                                 "the terminal; piped, a line only when what it says changes. The timeout says "
                                 "that waiting longer does not help, and the commands to resume or go back stand "
                                 "alone on their lines."))
            piped_run = ["node", "set-mode", "vm", "npu-node-2", "--yes", "--timeout", "4"]
            _, err, _ = piped([*s, *piped_run])
            blocks.append(_block("node set-mode: the wait, piped", [*piped_run, "2>&1", "|", "cat"], err,
                                 "Piped, rows and lines are never folded (grep finds them whole) and the wait "
                                 "prints a line only when what holds the node up changes."))
            blocks.append(_block("node list: a node mid-switch, its plugin held", ["node", "list"],
                                 on_terminal([*s, "node", "list"]).text,
                                 "The switches above timed out and left their records on the nodes: STATUS says "
                                 "`Switching` until a set-mode finishes or reverses it, and `Init:0/2` while an "
                                 "operator component's pod is held in an init container (why NPUS is 0)."))
        finally:
            op.stop()
    finally:
        fake.stop()
    OUT.write_text("\n".join(blocks))
    print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
