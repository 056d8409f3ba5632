"""One read of preflight's facts as data: its value, absent (404), or why it failed (403, 5xx), never raised."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rblnctl.errors import AuthError, ClusterError, ClusterUnreachable
from rblnctl.kube import Resource
from rblnctl.kube.optional import UNKNOWN, optional

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Fetch:
    """The outcome of one read: its value, or that the type/object is absent (404), or why it failed."""

    verb: str
    resource: str  # as RBAC names it: nodes, kubevirts.kubevirt.io
    namespace: str | None = None  # None: all namespaces / cluster scope
    value: Any = None
    absent: bool = False
    error: str | None = None
    forbidden: bool = False

    @property
    def ok(self) -> bool:
        """True when the read succeeded."""
        return not self.absent and self.error is None

    def can_i(self) -> str:
        """The `kubectl auth can-i` command that tells whether this user may make this read."""
        flag = f"-n {self.namespace}" if self.namespace else "-A"
        return f"kubectl auth can-i {self.verb} {self.resource} {flag}"

    def remedy(self) -> str:
        """What to do when the read failed: the RBAC permission to grant, or the error to look into."""
        if self.forbidden:
            where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
            return (f"grant `{self.verb}` on `{self.resource}` {where} to this user (check with "
                    f"`{self.can_i()}`), or use a kubeconfig that has it")
        if self.absent:
            return (f"the API server does not serve {self.resource} here: check `kubectl api-resources` (and that "
                    "--server points at a Kubernetes API server), then rerun")
        return f"the API server failed to {self.verb} {self.resource}; check its health and rerun"


def fetch(verb: str, res: Resource | str, call: Callable[[], Any], *, namespace: str | None = None) -> Fetch:
    """Run one read (rblnctl.kube.optional, 403 an unknown); turn 404 into `absent`, 403 and other API errors
    into `error` (never raise them).

    ClusterUnreachable and 401 propagate: no later read could succeed either.
    """
    name = res.qualified if isinstance(res, Resource) else res
    try:
        read = optional(call, what=f"{verb} {name}", on_forbidden=UNKNOWN)
    except (ClusterUnreachable, AuthError):
        raise
    except ClusterError as e:
        log.debug("%s %s failed: %s", verb, name, e)
        return Fetch(verb=verb, resource=name, namespace=namespace, error=str(e))
    if read.forbidden is not None:
        return Fetch(verb=verb, resource=name, namespace=namespace, error=read.forbidden, forbidden=True)
    return Fetch(verb=verb, resource=name, namespace=namespace, value=read.value, absent=read.absent)
