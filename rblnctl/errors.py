"""The RblnError hierarchy: every failure rblnctl raises on purpose.

The library raises these and never exits; the CLI edge (rblnctl/cli/errors.py) maps each class to
one documented exit code (docs/exit-codes.md). Every message is one line a user can act on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class RblnError(Exception):
    """Base of every failure rblnctl raises on purpose."""


class ConfigError(RblnError):
    """Bad kubeconfig, unknown context, or options that cannot be combined."""


class InvalidInput(RblnError):
    """An argument the user gave is malformed (a BDF, a gate name, a mode)."""


class Ambiguous(InvalidInput):
    """Several objects match and rblnctl will not guess; `choices` lists them, `options` names the
    options-fields that pick one (the front end phrases them, e.g. `--name and --namespace`)."""

    def __init__(self, message: str, *, choices: Iterable[str] = (), options: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.choices = list(choices)
        self.options = tuple(options)


class NotFound(RblnError):
    """A node, custom resource or PCI function that was asked for does not exist."""


class ClusterError(RblnError):
    """The API server refused a request.

    `status` is the HTTP code (0 when no answer came back), `reason` the Status reason.
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class ClusterUnreachable(ClusterError):
    """No answer from the API server (refused, DNS, TLS, dropped connection)."""


class ClusterTimeout(ClusterUnreachable):
    """The API server did not answer within the request timeout."""


class AuthError(ClusterError):
    """The API server does not accept our credentials (401)."""


class Forbidden(AuthError):
    """RBAC refused a verb on a resource (403); the message names verb, resource and namespace."""


class Conflict(ClusterError):
    """A write lost an optimistic-concurrency race (409) more often than we retry."""


class WaitTimeout(RblnError):
    """Something we wait for (pods gone, operator converged) did not happen in time."""


class HostError(RblnError):
    """A host-level operation failed: sysfs write refused, not root, IOMMU off."""


class Refused(RblnError):
    """A safety gate refused the operation; `blockers` lists each reason (rblnctl.plan.Blocker, or text)."""

    def __init__(self, message: str, *, blockers: Iterable[Any] | None = None) -> None:
        super().__init__(message)
        self.blockers = list(blockers or [])


class PreflightFailed(RblnError):
    """At least one preflight check failed; `failed` names them."""

    def __init__(self, message: str, *, failed: list[str] | None = None) -> None:
        super().__init__(message)
        self.failed = list(failed or [])


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread like Ctrl-C.

    Every path that handles Ctrl-C (stop new writes, roll back what the command's rules say,
    print the recovery commands) handles these too; `signum` decides the exit code (128 + signum).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum
