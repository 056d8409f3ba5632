"""Node writes that stay right when a reply is lost or the node changes under us.

A request whose reply is lost may or may not have been applied, and may still be applied later.
Like client-go's controllers, rblnctl never re-sends such a write blindly. Every node write here
is made from a fresh read and carries that read's resourceVersion:

    read the node -> already landed? done -> patch guarded by resourceVersion
      -> accepted: done
      -> 409 (the node changed, or our earlier try landed late): read again and judge again
      -> reply lost: read again; landed? done; else send again (the guard makes that safe: of two
         tries at most one can apply, and one that arrives late after a newer write is refused)

so a cordon that landed is known to have landed, a relabel that landed is never rolled back as if
it had not, and a rollback can never be overtaken by a cordon that was still on its way. When even
the read after a lost reply fails, the outcome stays unknown and OutcomeUnknown is raised.

A write may carry the uid its run decided on: a node deleted and registered again under the same name
(a re-imaged host rejoining) is another object, and nothing is written to it (Replaced). The fresh read
shows the uid and its resourceVersion guards the patch, so the object written is the one checked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rblnctl.errors import ClusterError, Conflict, OutcomeUnknown, RblnError, Replaced
from rblnctl.kube import NODES, Kube, writes

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = writes.WRITE_ATTEMPTS


def cordon_patch(unschedulable: bool) -> dict:
    """The strategic merge patch kubectl cordon/uncordon sends."""
    return {"spec": {"unschedulable": unschedulable}}


def write_node(kube: Kube, node: str, body: dict, *, patch_type: str, landed: Callable[[dict], bool],
               dry_run: bool = False, on_retry: Callable[[int, str], None] | None = None, uid: str = "") -> None:
    """Make `body` true of the node (judged by `landed`), safely under lost replies and concurrent edits.

    Returns once the node shows it; sends nothing when it already does. Raises Conflict when the
    node kept changing for WRITE_ATTEMPTS tries, OutcomeUnknown when a reply was lost and the node
    cannot be read back, and the API's other refusals as they are. A server dry run sends the
    write once (nothing persists, so there is nothing to read back). The loop is rblnctl.kube.writes.settle.
    With `uid` (the node as the caller decided on it) a node that now has another uid raises Replaced, unwritten.
    """
    def next_write(current: Any) -> writes.Write | None:
        if current is writes.UNREAD or current is None:  # a dry run sends the patch unguarded, as before
            return writes.patch(NODES, node, body, patch_type=patch_type)
        now = (current.get("metadata") or {}).get("uid")
        if uid and now != uid:
            raise Replaced(f"node {node} was deleted and registered again (uid {now}, not {uid}) while rblnctl "
                           "worked on it: nothing was written to the new node")
        if landed(current):
            return None
        guarded = {**body, "metadata": {**(body.get("metadata") or {}),
                                        "resourceVersion": current["metadata"].get("resourceVersion")}}
        return writes.patch(NODES, node, guarded, patch_type=patch_type)

    def gave_up(last: ClusterError, sent: int) -> RblnError:
        if writes.unknown(last):
            return OutcomeUnknown(f"{last}; node {node} still does not show the change after {sent} tries")
        return Conflict(f"node {node} kept changing while rblnctl wrote it ({sent} attempts); nothing of this "
                        "write is assumed to have landed")

    writes.settle(kube, next_write, read=lambda: kube.get(NODES, node), what=f"node {node}", read_first=not dry_run,
                  retry=writes.is_409, attempts=WRITE_ATTEMPTS, on_retry=on_retry, on_lost=on_retry, dry_run=dry_run,
                  exhausted=gave_up)


def set_unschedulable(kube: Kube, node: str, unschedulable: bool, *, dry_run: bool = False, uid: str = "") -> None:
    """Cordon (True) or uncordon (False) a node with kubectl's strategic merge patch, guarded as write_node() is."""
    write_node(kube, node, cordon_patch(unschedulable), patch_type="strategic", dry_run=dry_run, uid=uid,
               landed=lambda obj: bool((obj.get("spec") or {}).get("unschedulable")) == unschedulable)
