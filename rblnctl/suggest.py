""""Did you mean": the close names among those that exist (difflib, case-insensitive, as kubectl's plugin and
cobra's `SuggestionsMinimumDistance` do for commands). Only names that exist are ever suggested."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_names(word: str, known: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The `n` names of `known` closest to `word` (compared case-insensitively, without `-`/`_` and a domain
    prefix), best first."""
    def key(s: str) -> str:  # `rebellions.ai/` would make every resource name look alike: compare what follows
        return s.rsplit("/", 1)[-1].lower().replace("-", "").replace("_", "")

    by_key: dict[str, str] = {}
    for name in known:
        by_key.setdefault(key(name), name)
    return [by_key[k] for k in difflib.get_close_matches(key(word), list(by_key), n=n, cutoff=cutoff)]


def did_you_mean(word: str, known: Iterable[str], *, cutoff: float = 0.6) -> str:
    """` (did you mean X?)`, or '' when nothing that exists is close."""
    close = close_names(word, known, cutoff=cutoff)
    return f" (did you mean {close[0]}?)" if close else ""
