"""The rules a mode switch's reader and planner share (pure): how a mode is spelled, and the gates at which a switch
is refused before anything past them is read (rblnctl.node.mode.facts stops there; rblnctl.node.mode.plan decides)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, Refused
from rblnctl.node.options import ModeOptions
from rblnctl.node.record import Recovery, SwitchRecord
from rblnctl.operator.components import deploy_labels
from rblnctl.operator.cluster import OperatorView
from rblnctl.operator.nodes import is_npu_node, labels_of, mode_of, node_product
from rblnctl.operator.release import release_of
from rblnctl.operator.policy import Policy


def parse_mode(value: str) -> str:
    """Return the label value for what the user typed (`vm`, `vm-passthrough`, `container`)."""
    mode = C.MODE_ALIASES.get(str(value).strip().lower())
    if mode is None:
        hint = suggest_mode(value)
        raise InvalidInput(f"unknown mode {value!r}" + (f" (did you mean {hint}?)" if hint else "")
                           + f": use one of {', '.join(C.MODE_ALIASES)}")
    return mode


def suggest_mode(value: str) -> str | None:
    """The mode a typo most likely meant (`vmm`: vm, `contaner`: container); None when nothing is close."""
    import difflib

    close = difflib.get_close_matches(str(value).strip().lower(), list(C.MODE_ALIASES), n=1, cutoff=0.6)
    return close[0] if close else None


def short_mode(mode: str) -> str:
    """`vm` for vm-passthrough, as the command line spells it."""
    return "vm" if mode == C.MODE_VM else mode


def other_mode(mode: str) -> str:
    return C.MODE_CONTAINER if mode == C.MODE_VM else C.MODE_VM


def refuse_node(node: str, node_obj: Mapping[str, Any]) -> None:
    """Refused: the node has no NPU mode to switch, or the operator deploys nothing there."""
    if not is_npu_node(dict(node_obj)):
        raise Refused(f"node {node} has no Rebellions NPU (neither an NFD pci-1eff label nor "
                      f"{C.NPU_PRESENT_LABEL}=true): there is no NPU mode to switch")
    if deploy_labels(labels_of(dict(node_obj))).skip:
        raise Refused(f"node {node} has {C.DEPLOY_SKIP_LABEL}=true: the operator deploys nothing there, so it "
                      f"would never switch; remove the label first "
                      f"(kubectl label node {node} {C.DEPLOY_SKIP_LABEL}-)")


def refuse_record(node_obj: Mapping[str, Any], target: str, record: SwitchRecord | None, options: ModeOptions,
                  view: OperatorView) -> None:
    """Refused: an unfinished switch to the other mode, and no `reverse` to take it over. Its recovery offers to
    resume that switch only when set-mode would accept it now (Policy.switch_blockers under the operator's release,
    read from the view's Deployments: a known v0.3.0 serves no VM, so resuming a switch to vm is refused there)."""
    if record is not None and record.target != target and not options.reverse:
        node = str((node_obj.get("metadata") or {}).get("name") or "")
        blockers = [] if view.policy is None else view.policy.switch_blockers(
            record.target, product=node_product(dict(node_obj)), release=release_of(view.deployments or []))
        resumable = all(b.override is not None and getattr(options, b.override, False) for b in blockers)
        raise Refused(
            f"a switch of node {node} to {short_mode(record.target)} started at {record.started or '?'} is "
            f"unfinished: finish that one, or reverse it to switch to {short_mode(target)} instead",
            options=("reverse",),
        ).with_details([], recovery=Recovery(node=node, target=record.target, back=target, resumable=resumable))


def is_converged(node_obj: Mapping[str, Any], policy: Policy, target: str, pending: Sequence[str]) -> bool:
    """The node is in the target mode and the operator has nothing left to do there: no pod need leave."""
    return mode_of(labels_of(dict(node_obj)), policy).effective == target and not pending
