"""Text shown to a terminal, made harmless: the one place that decides how cluster and host text is escaped (issue 38).

rblnctl prints what tenants and hosts wrote (VM annotations, condition and Event messages, init container log lines,
object names, sysfs strings). A terminal takes some characters as commands: ESC starts a sequence that moves the
cursor, erases lines or sets the clipboard (OSC 52), C1 controls (U+0080-U+009F; U+009B is CSI) do the same on many
terminals, CR and BS overwrite what was printed, and the bidi overrides (U+202A-U+202E, U+2066-U+2069) and the
zero-width characters make the text read otherwise than it is. `visible` writes each of them as an escape a reader
sees (`\\x1b`, `\\x9b`, `\\r`, `\\u202e`, `\\u200b`): the text of every Unicode category that prints nothing
(Cc, Cf, Zl, Zp, Cs: `_HIDDEN`, tests/cli/test_sanitize.py checks it against the running Python's unicodedata), line
feeds and tabs excepted (a table cell is made one line before: rblnctl.cli.output._one_line).

kubectl escapes ESC and CR in `describe` (k8s.io/cli-runtime pkg/printers/terminal.go EscapeTerminal, issue
kubernetes#101695) as `^[` and `\\r`; rblnctl writes every hidden character in the one unambiguous form above.

Where it applies (docs/security.md, "What rblnctl escapes"): every table cell and prose line on stdout
(rblnctl.cli.output: tables, -o wide, -o name, custom-columns, preamble and epilogue, `-w` change lines), and every
string the two rich consoles print (rblnctl.cli.console: warnings, errors, notes, progress, spinners), where `plain`
also keeps rich from reading the text as markup (`[bold]` stays literal). -o json and -o yaml stay exact (their
encoders escape control characters); so does -o jsonpath, a program's format as kubectl's is.
"""

from __future__ import annotations

import re

# Every code point whose Unicode category is Cc, Cf, Zl, Zp or Cs (Unicode 14.0, Python 3.11's unicodedata), line
# feed and tab excepted. A literal list rather than a walk of unicodedata at import: that costs a third of a second.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
_NAMED = {"\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with every character a terminal would act on, or that prints nothing, written as an escape."""
    return _HIDDEN.sub(_escape, text) if _HIDDEN.search(text) else text


def plain(text: object) -> str:
    """`text` for a rich console's markup: `visible`, and never read as markup (`[bold]` printed as written)."""
    from rich.markup import escape

    return escape(visible(str(text)))
