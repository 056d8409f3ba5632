"""Authorization: ``forbid(verb, resource, namespace)`` rules refuse matching resource requests
with the 403 of responsewriters.Forbidden (k8s.io/apiserver/pkg/endpoints/handlers/
responsewriters/errors.go); ``allow_all()`` drops them.
"""

from __future__ import annotations

import threading

from tests.fakes.apiserver.config import Settings
from tests.fakes.apiserver.errors import ApiError, details, group_resource
from tests.fakes.apiserver.resources import Resource


class Authorizer:
    def __init__(self, lock: threading.RLock, settings: Settings):
        self._lock = lock
        self.settings = settings
        self._forbidden: list[tuple[str, str, str | None]] = []

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        with self._lock:
            self._forbidden.append((verb, resource, namespace))

    def allow_all(self) -> None:
        with self._lock:
            self._forbidden.clear()

    def authorize(self, verb: str, res: Resource, sub: str | None, name: str | None, namespace: str | None) -> None:
        """Raise the real 403 when a forbid() rule matches."""
        rname = f"{res.plural}/{sub}" if sub else res.plural
        qualified = f"{res.plural}.{res.group}" + (f"/{sub}" if sub else "") if res.group else rname
        with self._lock:
            rules = list(self._forbidden)
        for v, r, ns in rules:
            if v in ("*", verb) and r in ("*", rname, qualified) and (ns is None or ns == namespace):
                scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
                who = f'{group_resource(res)} "{name}"' if name else group_resource(res)
                raise ApiError(403, "Forbidden", f'{who} is forbidden: User "{self.settings.user}" cannot {verb} '
                               f'resource "{rname}" in API group "{res.group}" {scope}', details(res, name))
