"""One optional read: a read that tolerates an absent API, and whose caller says what a refusal means.

A read has three outcomes, never conflated:

- served:     the API server answered; `value` is the reply;
- absent:     404: the object, its type or its whole API group is not there (a real kube-apiserver answers a
              request under a group it does not serve with its mux's plain-text `404 page not found`, which
              rblnctl.kube.replies turns into ApiNotServed, a NotFound); `value` is the caller's `absent` value,
              since "not installed" really means "there is none";
- forbidden:  403: RBAC does not let this user make the read. Whether there is something to find is
              unknown, so it never reads as "none": `value` is None and the caller chose, by `on_forbidden`,
              what the refusal means:
              NOTE     the read is unknown and a note saying so is added to `notes` (shown to the user);
              UNKNOWN  the read is unknown and the caller carries that itself (a field that is None, a
                       verdict of "unknown", a Fetch in preflight) — it must not become a default;
              ERROR    the Forbidden is raised: without this read the command cannot go on.

Other API errors, ClusterUnreachable and 401 propagate: no default is right for them.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rblnctl.errors import ApiNotServed, Forbidden, NotFound, one_line

log = logging.getLogger(__name__)


class OnForbidden(enum.Enum):
    """What a 403 means to the caller of optional() (see the module's text)."""

    NOTE = "note"
    UNKNOWN = "unknown"
    ERROR = "error"


NOTE = OnForbidden.NOTE
UNKNOWN = OnForbidden.UNKNOWN
ERROR = OnForbidden.ERROR


@dataclass(frozen=True, kw_only=True)
class Read:
    """The outcome of one optional read."""

    what: str  # what was read, as a note names it: "list VirtualMachineInstances"
    value: Any = None
    absent: bool = False  # 404: the object, its type or its API group is not there
    not_served: bool = False  # the 404 says the type or its API group is not served at all
    forbidden: str | None = None  # the 403's message, one line; None when not refused

    @property
    def known(self) -> bool:
        """False when the read was refused: its value says nothing about what exists."""
        return self.forbidden is None

    @property
    def note(self) -> str | None:
        """The line telling the user this read was refused (None when it was not)."""
        return None if self.forbidden is None else f"cannot {self.what} (forbidden): {self.forbidden}"


class Notes(Protocol):
    """Where a NOTE goes: any list that takes a line (a list[str], or a warnings list that also holds Remedies)."""

    def append(self, note: str, /) -> None: ...


def optional(call: Callable[[], Any], *, what: str, on_forbidden: OnForbidden, absent: Any = None,
             notes: Notes | None = None) -> Read:
    """Make the read `call`; 404 -> absent (value `absent`), 403 -> as `on_forbidden` says (never `absent`).

    `what` names the read in the note ("list ResourceClaims in namespace vms"). With NOTE, `notes` is the
    list the note is added to.
    """
    if on_forbidden is OnForbidden.NOTE and notes is None:
        raise TypeError("optional(on_forbidden=NOTE) needs the notes list the note goes to")
    try:
        return Read(what=what, value=call())
    except NotFound as e:
        return Read(what=what, value=absent, absent=True, not_served=isinstance(e, ApiNotServed))
    except Forbidden as e:
        if on_forbidden is OnForbidden.ERROR:
            raise
        log.debug("cannot %s: %s", what, e)
        read = Read(what=what, forbidden=one_line(e))
        if on_forbidden is OnForbidden.NOTE and notes is not None and read.note is not None:
            notes.append(read.note)
        return read
