"""Switch a node's NPUs between container and vm-passthrough mode, safely and resumably: facts -> plan -> apply.

The RBLN NPU operator (like NVIDIA's GPU operator) swaps a node's deploy labels when its workload
label changes, but neither cordons nor drains; that is this package's job. The canonical run:

    lock -> record -> cordon -> list and evict (rounds) -> relabel -> wait for the operator
         -> list and evict again -> uncordon -> release the lock

The package is split as rblnctl.method and rblnctl.vm.diagnose are: facts.py reads everything a plan needs
(read_mode_facts -> ModeFacts, no Kube handle inside), plan.py decides from those facts alone (plan_mode: pure,
no I/O, no clock) and apply.py's ModeSwitcher makes the writes, each settled by reading back. ModeSwitcher.plan
is read_mode_facts + plan_mode. rules.py holds what both the reader and the planner use (pure): how a mode is
spelled and the gates that refuse a switch before anything past them is read. docs/node.md has the exact
requests and failure semantics.
"""

from rblnctl.node.mode.apply import ModeSwitcher
from rblnctl.node.mode.facts import ModeFacts, read_mode_facts, read_pending, read_view
from rblnctl.node.mode.plan import ModePlan, ModeResult, PlanStep, mode_filters, plan_mode
from rblnctl.node.mode.rules import other_mode, parse_mode, short_mode, suggest_mode

__all__ = [
    "ModeFacts", "ModePlan", "ModeResult", "ModeSwitcher", "PlanStep", "mode_filters", "other_mode", "parse_mode",
    "plan_mode", "read_mode_facts", "read_pending", "read_view", "short_mode", "suggest_mode",
]
