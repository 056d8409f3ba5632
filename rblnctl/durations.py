"""kubectl's duration syntax (`30`, `30s`, `1m30s`, `500ms`, `2h`) as seconds: the one parser every option uses."""

from __future__ import annotations

import math
import re

from rblnctl.errors import InvalidInput

_PART = r"(\d+(?:\.\d+)?)(ms|s|m|h)"
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# A week: longer than any wait rblnctl makes, short enough that deadline arithmetic stays exact.
MAX_SECONDS = 7 * 24 * 3600.0


def parse_duration(text: str, *, what: str, zero_means_forever: bool = False, minimum_s: float = 0.0
                   ) -> float | None:
    """Return seconds for `text`; None for `0` when `zero_means_forever` (kubectl's --request-timeout=0).

    Plain numbers are seconds. Negative, NaN, infinite and absurd values (over a week) raise
    InvalidInput naming `what` (the option, e.g. `--timeout`); so does `0` unless it means "forever", and
    a value below `minimum_s` (an option whose wait means nothing shorter).
    """
    value = (text or "").strip()
    try:
        seconds = float(value)
    except ValueError:
        if not value or not re.fullmatch(f"(?:{_PART})+", value):
            raise InvalidInput(f"{what} takes seconds or a duration like 30s, 1m, 1m30s, not {text!r}") from None
        seconds = sum(float(n) * _UNIT[u] for n, u in re.findall(_PART, value))
    if math.isnan(seconds) or math.isinf(seconds):
        raise InvalidInput(f"{what} must be a finite duration, not {text!r}")
    if seconds < 0:
        raise InvalidInput(f"{what} cannot be negative ({text!r})")
    if seconds > MAX_SECONDS:
        raise InvalidInput(f"{what} {text!r} is longer than a week; rblnctl never waits that long")
    if seconds == 0:
        if zero_means_forever:
            return None
        raise InvalidInput(f"{what} must be more than 0")
    if seconds < minimum_s:
        raise InvalidInput(f"{what} must be at least {minimum_s:g}s, not {text!r}")
    return seconds
