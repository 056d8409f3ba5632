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
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rblnctl.errors import ClusterError, ClusterUnreachable, Conflict, OutcomeUnknown
from rblnctl.kube import NODES, Kube, outcome_unknown

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 5


def cordon_patch(unschedulable: bool) -> dict:
    """The strategic merge patch kubectl cordon/uncordon sends."""
    return {"spec": {"unschedulable": unschedulable}}


def write_node(kube: Kube, node: str, body: dict, *, patch_type: str, landed: Callable[[dict], bool],
               dry_run: bool = False, on_retry: Callable[[int, str], None] | None = None) -> None:
    """Make `body` true of the node (judged by `landed`), safely under lost replies and concurrent edits.

    Returns once the node shows it; sends nothing when it already does. Raises Conflict when the
    node kept changing for WRITE_ATTEMPTS tries, OutcomeUnknown when a reply was lost and the node
    cannot be read back, and the API's other refusals as they are. A server dry run sends the
    write once (nothing persists, so there is nothing to read back).
    """
    if dry_run:
        kube.patch(NODES, node, body, patch_type=patch_type, dry_run=True)
        return
    lost: ClusterError | None = None
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            current = kube.get(NODES, node)
        except (ClusterError, ClusterUnreachable) as e:
            if lost is not None:
                raise OutcomeUnknown(f"{lost}; reading node {node} back to see whether it landed failed too: {e}") \
                    from lost
            raise
        if landed(current):
            return
        guarded = {**body, "metadata": {**(body.get("metadata") or {}),
                                        "resourceVersion": current["metadata"].get("resourceVersion")}}
        try:
            kube.patch(NODES, node, guarded, patch_type=patch_type)
            return
        except Conflict as conflict:
            why = f"node {node} changed under us (attempt {attempt}); reading it again"
            log.debug("%s: %s", why, conflict)
        except ClusterError as err:
            if not outcome_unknown(err):
                raise
            lost = err
            why = f"the reply to a write of node {node} was lost (attempt {attempt}); reading it back"
            log.debug("%s: %s", why, err)
        if on_retry is not None:
            on_retry(attempt, why)
    raise Conflict(f"node {node} kept changing while rblnctl wrote it ({WRITE_ATTEMPTS} attempts); nothing of this "
                   "write is assumed to have landed")


def set_unschedulable(kube: Kube, node: str, unschedulable: bool, *, dry_run: bool = False) -> None:
    """Cordon (True) or uncordon (False) a node with kubectl's strategic merge patch, guarded as write_node() is."""
    write_node(kube, node, cordon_patch(unschedulable), patch_type="strategic", dry_run=dry_run,
               landed=lambda obj: bool((obj.get("spec") or {}).get("unschedulable")) == unschedulable)
