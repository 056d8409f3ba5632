"""events.k8s.io/v1 Events as kube-apiserver validates them, and authentication.k8s.io/v1 SelfSubjectReview.

An Event created through events.k8s.io/v1 is validated strictly (kubernetes/kubernetes
pkg/apis/core/validation/events.go ValidateEventCreate and legacyValidateEvent): eventTime,
reportingController (a qualified name), reportingInstance, action and reason are required, type is Normal or
Warning, the deprecated* fields stay unset, the note fits 1024 bytes, and an Event about a cluster-scoped object
lives in `default` or `kube-system`. The real server answers 422 Invalid listing every failed field, as here.

Not modelled: the real server stores both APIs' Events as one object (a core v1 Event read through events.k8s.io
and the reverse, with the field renames of pkg/apis/events/v1 conversion); the fake keeps two collections
(docs/testing.md lists the difference).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.apiserver.errors import ApiError, invalid
from tests.fakes.apiserver.resources import Resource

EVENTS_V1_ID = "events.events.k8s.io"
SSR_ID = "selfsubjectreviews.authentication.k8s.io"

_QUALIFIED = re.compile(r"(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?"
                        r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)", re.ASCII)
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)


def validate_event_v1(res: Resource, obj: dict) -> None:
    """Raise the real 422 when an events.k8s.io/v1 Event would be refused at create."""
    md = obj.get("metadata") or {}
    name = str(md.get("name") or "")
    causes: list[tuple[str, str, str]] = []

    def required(path: str) -> None:
        causes.append(("FieldValueRequired", path, "Required value"))

    def bad(path: str, value: Any, why: str) -> None:  # field.Invalid: the value as Go's %q prints it
        causes.append(("FieldValueInvalid", path, f"Invalid value: {json.dumps(value)}: {why}"))

    if name and (len(name) > 253 or not _SUBDOMAIN.fullmatch(name)):
        bad("metadata.name", name, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters")
    regarding = obj.get("regarding") or {}
    namespace = str(md.get("namespace") or "")
    if not regarding.get("namespace") and namespace not in ("default", "kube-system"):
        bad("involvedObject.namespace", regarding.get("namespace") or "", "does not match event.namespace")
    controller = obj.get("reportingController") or ""
    if not controller:
        required("reportingController")
    elif not _QUALIFIED.fullmatch(controller):
        bad("reportingController", controller, "name part must consist of alphanumeric characters, '-', '_' or '.'")
    instance = obj.get("reportingInstance") or ""
    if not instance:
        required("reportingInstance")
    elif len(instance) > 128:
        bad("reportingInstance", "", "can have at most 128 characters")
    for key in ("action", "reason"):
        if not obj.get(key):
            required(key)
        elif len(obj[key]) > 128:
            bad(key, "", "can have at most 128 characters")
    if len(str(obj.get("note") or "").encode()) > 1024:
        bad("message", "", "can have at most 1024 characters")
    if not obj.get("eventTime"):
        required("eventTime")
    if obj.get("type") not in ("Normal", "Warning"):
        bad("type", "", f"has invalid value: {obj.get('type') or ''}")
    for key, path in (("deprecatedFirstTimestamp", "firstTimestamp"), ("deprecatedLastTimestamp", "lastTimestamp"),
                      ("deprecatedCount", "count"), ("deprecatedSource", "source")):
        if obj.get(key):
            bad(path, "", "needs to be unset")
    if causes:
        raise invalid(res, name, causes)


def self_subject_review(res: Resource, body: Any, user: str) -> tuple[int, dict]:
    """``POST selfsubjectreviews``: who the request was authenticated as (kubectl auth whoami)."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
    return 201, {"kind": res.kind, "apiVersion": res.api_version,
                 "metadata": {"creationTimestamp": None},
                 "status": {"userInfo": {"username": user, "groups": ["system:authenticated"]}}}
