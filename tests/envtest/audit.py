"""The real server's own account of what it was asked: its audit log (JSON lines, level Metadata).

ControlPlane starts kube-apiserver with ``--audit-log-mode=blocking``, so an event is in the file before the
reply leaves the server. A test marks the log, runs rblnctl, and asks what rblnctl wrote since the mark:
the ground truth for "a dry run makes zero write requests" and "--dry-run=server stores nothing".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# Creates that store nothing: access reviews answer a question.
REVIEWS = frozenset({"selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews",
                     "subjectaccessreviews", "tokenreviews", "localsubjectaccessreviews"})


@dataclass(frozen=True)
class AuditEvent:
    verb: str
    uri: str
    user: str
    user_agent: str
    code: int
    resource: str
    subresource: str
    namespace: str
    name: str
    received: str = ""  # requestReceivedTimestamp (a watch is logged when its stream ends)

    @property
    def dry_run(self) -> bool:
        return "dryRun=All" in self.uri

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS and self.resource not in REVIEWS


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """The position after every event logged so far; pass it to ``events(since=...)``."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def events(self, since: int = 0, *, user_agent: str | None = None,
               stage: str = "ResponseComplete") -> list[AuditEvent]:
        """The events of `stage` since the mark (a watch's ResponseComplete comes when its stream ends; its
        ResponseStarted when the stream starts), by clients whose User-Agent starts with `user_agent`."""
        out = []
        with open(self.path, "rb") as f:
            f.seek(since)
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("stage") != stage:
                    continue
                ref = e.get("objectRef") or {}
                ev = AuditEvent(verb=e.get("verb", ""), uri=e.get("requestURI", ""),
                                user=(e.get("user") or {}).get("username", ""), user_agent=e.get("userAgent", ""),
                                code=int((e.get("responseStatus") or {}).get("code") or 0),
                                resource=ref.get("resource", ""), subresource=ref.get("subresource", ""),
                                namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                                received=e.get("requestReceivedTimestamp", ""))
                if user_agent is None or ev.user_agent.startswith(user_agent):
                    out.append(ev)
        return out

    def writes(self, since: int = 0, *, user_agent: str = "rblnctl/") -> list[AuditEvent]:
        """Requests that change something (reviews excepted), by clients whose User-Agent starts so."""
        return [e for e in self.events(since, user_agent=user_agent) if e.is_write]
