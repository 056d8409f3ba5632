"""The API server's `Warning` headers: parsed as client-go parses them, handed to whoever the front end named.

kube-apiserver adds one `Warning: 299 - "text"` header per admission or deprecation warning to the reply
of a request (k8s.io/apiserver pkg/endpoints/filters/warning.go, deduplicated per request); KubeVirt's
KubeVirt-CR update webhook warns this way about deprecated and GA feature gates (kubevirt/kubevirt@v1.9.0
pkg/virt-operator/webhooks/kubevirt-update-admitter.go warnDeprecatedFeatureGates). client-go parses every
reply's headers (k8s.io/client-go rest/warnings.go handleWarnings -> k8s.io/apimachinery pkg/util/net/http.go
ParseWarningHeaders: RFC 7234 `warn-code warn-agent "warn-text" ["warn-date"]`, several per header, comma
separated; an invalid one skips the rest of its header) and gives each to a WarningHandler. kubectl's handler
(k8s.io/kubectl pkg/cmd/cmd.go NewKubectlCommand: rest.NewWarningWriter(stderr, {Deduplicate: true})) prints
code 299 warnings with a text, each text once per process, as `Warning: <text>`.

The library never prints: `Kube.on_warning` (set by the front end) receives every parsed warning of every
reply, errors included; the CLI's handler (rblnctl/cli/console.py) filters, deduplicates and prints as kubectl.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from email.header import decode_header, make_header
from typing import Any

_CODE = re.compile(r"[0-9]{3}")


@dataclass(frozen=True)
class ServerWarning:
    """One warning of one reply: its code (299: miscellaneous persistent warning), agent (`-` unknown), text."""

    code: int
    agent: str
    text: str


def parse_warning_headers(values: list[str]) -> list[ServerWarning]:
    """Every warning in the `Warning` header values of one reply, in order (ParseWarningHeaders)."""
    out: list[ServerWarning] = []
    for header in values:
        while header:
            parsed = _parse_one(header)
            if parsed is None:
                break  # the rest of this header is skipped, the next header parsed
            warning, header = parsed
            out.append(warning)
    return out


def warnings_of(resp: Any) -> list[ServerWarning]:
    """The warnings of a urllib3 response (none when it has no headers)."""
    headers = getattr(resp, "headers", None)
    if headers is None or not hasattr(headers, "getlist"):
        return []
    return parse_warning_headers([str(v) for v in headers.getlist("Warning")])


def _parse_one(header: str) -> tuple[ServerWarning, str] | None:
    """ParseWarningHeader: one warning and what is left of the header after it, or None when it is invalid."""
    parts = header.strip().split(" ", 2)
    if len(parts) != 3:
        return None
    code, agent, rest = parts
    if not _CODE.fullmatch(code) or not agent or _has_control(agent) or not rest:
        return None
    quoted = _quoted(rest)
    if quoted is None:
        return None
    text, remainder = quoted
    text = _rfc2047(text)
    if _has_control(text):
        return None
    if remainder.startswith('"'):  # the optional warn-date: no escapes in it
        end = remainder.find('"', 1)
        if end < 0:
            return None
        remainder = remainder[end + 1:].strip()
    if remainder:
        if not remainder.startswith(","):
            return None
        remainder = remainder[1:].strip()
    return ServerWarning(int(code), agent, text), remainder


def _quoted(value: str) -> tuple[str, str] | None:
    """parseQuotedString: a double-quoted string with backslash escapes, and the rest (stripped)."""
    if not value.startswith('"'):
        return None
    out: list[str] = []
    escaping = False
    for i, c in enumerate(value[1:], start=1):
        if c == '"' and not escaping:
            return "".join(out), value[i + 1:].strip()
        if c == "\\" and not escaping:
            escaping = True
            continue
        out.append(c)
        escaping = False
    return None


def _rfc2047(text: str) -> str:
    """Tolerate RFC 2047 encoded words (`=?utf-8?q?...?=`), as client-go decodes them; else the text as is."""
    if "=?" not in text:
        return text
    try:
        return str(make_header(decode_header(text)))
    except (ValueError, LookupError, UnicodeError):
        return text


def _has_control(text: str) -> bool:
    return any(unicodedata.category(c) == "Cc" for c in text)
