"""The RblnError hierarchy: every failure rblnctl raises on purpose.

The library raises these and never exits; the CLI edge (rblnctl/cli/errors.py) maps each class to
one documented exit code (docs/exit-codes.md). Every message is one line a user can act on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rblnctl.remedy import Remedy


class RblnError(Exception):
    """Base of every failure rblnctl raises on purpose.

    The message is one line saying what failed. `details` are further lines a front end may show
    below it (pods still terminating, what was left behind); `recovery` describes, as data, how to
    go on (e.g. rblnctl.node.record.Recovery), for the front end to phrase as commands.
    """

    details: list[str | Remedy] = []  # noqa: RUF012 - a shared empty default; instances assign their own list
    recovery: object | None = None
    retry_after_s: float | None = None  # a reply's Retry-After (rblnctl.kube.client waits that long to retry)

    def with_details(self, details: Sequence[str | Remedy], recovery: object | None = None) -> RblnError:
        """Attach detail lines (and a recovery) to this error; returns it, for `raise err.with_details(...)`."""
        self.details = list(details)
        if recovery is not None:
            self.recovery = recovery
        return self


def one_line(err: object) -> str:
    """An error (or any text) as one line: its whitespace runs folded to one space; an exception with no
    message reads as its type's name. The one way errors are rendered into a note, a cell or a reason."""
    text = " ".join(str(err).split())
    if text or not isinstance(err, BaseException):
        return text
    # Ctrl-C (a bare KeyboardInterrupt) is `interrupted`, never the Python class name (in the cluster's Events)
    return "interrupted" if isinstance(err, KeyboardInterrupt) else type(err).__name__


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


class UnknownName(InvalidInput):
    """A name no registry rblnctl keeps lists (a KubeVirt feature gate); `suggestions` are the close ones it knows,
    `options` the options-fields that let an unknown name through (the front end phrases them)."""

    def __init__(self, message: str, *, suggestions: Iterable[str] = (), options: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.suggestions = list(suggestions)
        self.options = tuple(options)


class NotFound(RblnError):
    """A node, custom resource or PCI function that was asked for does not exist; `options` names the
    options-fields that name another one instead (the front end phrases them: `--resource`)."""

    options: tuple[str, ...] = ()


class ApiNotServed(NotFound):
    """The API server does not serve the resource at all: its CRD or API group is not installed.

    A real kube-apiserver answers a request under an API group it does not serve with its HTTP mux's
    plain-text `404 page not found`, not a JSON Status; `resource` is the resource as RBAC names it
    (`kubevirts.kubevirt.io`), `group` its API group.
    """

    def __init__(self, message: str, *, resource: str = "", group: str = "") -> None:
        super().__init__(message)
        self.resource = resource
        self.group = group


class ClusterError(RblnError):
    """The API server refused a request.

    `status` is the HTTP code (0 when no answer came back), `reason` the Status reason,
    `server_message` the Status message as the server wrote it (empty when there was none).
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "", server_message: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.server_message = server_message


class ContinueExpired(ClusterError):
    """410 Expired on a list's `continue` page: the snapshot its token names is gone (etcd compacted it, the
    watch cache no longer holds it). `inconsistent_continue` is the token the server offers to read the rest as it
    is now (empty when it offered none)."""

    def __init__(self, message: str, *, inconsistent_continue: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.inconsistent_continue = inconsistent_continue


class ClusterUnreachable(ClusterError):
    """No answer from the API server (refused, DNS, TLS, dropped connection)."""


class ClusterTimeout(ClusterUnreachable):
    """The API server did not answer within the request timeout."""


class OutcomeUnknown(ClusterUnreachable):
    """A write was sent and its reply was lost (timeout, dropped connection): it may or may not have applied.

    Never re-send it blindly: re-read the object and decide from what the server holds (client-go's answer).
    """


class WriteTimeout(OutcomeUnknown, ClusterTimeout):
    """A write got no answer within the request timeout; it may have applied."""


class NotAnApiServer(ClusterUnreachable):
    """The server answered, but not as a Kubernetes API server does (HTML from a proxy or a web server)."""


class AggregatedApiError(ClusterError):
    """An API group that kube-apiserver's aggregation layer proxies to another server (an APIService with a
    Service: KubeVirt's virt-api serves `subresources.kubevirt.io`) answered with something that is not a
    Kubernetes Status. The cluster's API server is fine; that server, or the way to it, is not.

    `api_service` names the APIService (`v1.subresources.kubevirt.io`), `service` its Service (`kubevirt/virt-api`;
    "" when the APIService could not be read).
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "", api_service: str = "",
                 service: str = "") -> None:
        super().__init__(message, status=status, reason=reason)
        self.api_service = api_service
        self.service = service


class MalformedReply(ClusterError):
    """The API server's reply could not be read (invalid JSON, or not the shape the request returns)."""


class AuthError(ClusterError):
    """The API server does not accept our credentials (401)."""


class ProxyAuthError(AuthError):
    """A forward proxy refused the request for want of (valid) credentials: 407, or a SOCKS5 login refused."""


class Forbidden(AuthError):
    """RBAC refused a verb on a resource (403); the message names verb, resource and namespace."""


class Conflict(ClusterError):
    """A write lost an optimistic-concurrency race (409) more often than we retry."""


class AdmissionDenied(ClusterError):
    """The API server's admission refused a write (403 from a ResourceQuota, Pod Security, a webhook), not RBAC."""


class Partial(RblnError):
    """A command that changes several objects did not change every one.

    `result` is the library's result all the same: it lists each object done, failed (and why) or
    not attempted (and why not), for the front end to show before this error. `outcomes` are those
    rows (rblnctl.batch.ItemOutcome).
    """

    def __init__(self, message: str, *, result: object | None = None, outcomes: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.result = result
        self.outcomes = list(outcomes)


class WaitTimeout(RblnError):
    """Something we wait for (pods gone, operator converged) did not happen in time."""


class HostError(RblnError):
    """A host-level operation failed: sysfs write refused, not root, IOMMU off."""


class Replaced(RblnError):
    """An object rblnctl read and decided on was deleted and re-created under it (another metadata.uid): nothing was
    written to the new one (a JSON patch `test` of /metadata/uid, or a read-back of the uid before a write whose API
    takes no precondition)."""


class Refused(RblnError):
    """A safety gate refused the operation; `blockers` lists each reason (rblnctl.plan.Blocker, or text), `options`
    the options-fields that would let it go ahead (the front end phrases them, e.g. `--reverse`)."""

    def __init__(self, message: str, *, blockers: Iterable[Any] | None = None, options: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.blockers = list(blockers or [])
        self.options = tuple(options)


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


class HostPodFailed(RblnError):
    """A host pod gave no result: it could not be scheduled, its image not pulled, it missed its deadline,
    or it printed no report. The message says which, for the node it ran on."""
