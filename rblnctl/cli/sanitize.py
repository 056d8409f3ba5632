"""Text shown to a terminal, made harmless: the one place that decides how cluster and host text is escaped (issue 38).

rblnctl prints what tenants and hosts wrote (VM annotations, condition and Event messages, init container log lines,
object names, sysfs strings). A terminal takes some characters as commands: ESC starts a sequence that moves the
cursor, erases lines or sets the clipboard (OSC 52), C1 controls (U+0080-U+009F; U+009B is CSI) do the same on many
terminals, CR and BS overwrite what was printed, and the bidi overrides (U+202A-U+202E, U+2066-U+2069) and the
zero-width characters make the text read otherwise than it is. `visible` writes each of them as an escape a reader
sees (`\\x1b`, `\\x9b`, `\\r`, `\\u202e`, `\\u200b`): the text of every Unicode category that prints nothing
(Cc, Cf, Zl, Zp, Cs: `_HIDDEN`, tests/cli/test_sanitize.py checks it against the running Python's unicodedata), line
feeds and tabs excepted (a table cell is made one line before: rblnctl.cli.output._one_line).

kubectl escapes ESC and CR in its `get` tables, custom-columns and `describe` (k8s.io/cli-runtime
pkg/printers/terminal.go EscapeTerminal, kubernetes PR #112553 for issue #101695) as `^[` and `\\r`, and leaves -o
jsonpath raw; rblnctl escapes every hidden character, in the one unambiguous form above.

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
_RANGES = ((0x00, 0x08), (0x0b, 0x1f), (0x7f, 0x9f), (0xad, 0xad), (0x600, 0x605), (0x61c, 0x61c), (0x6dd, 0x6dd),
           (0x70f, 0x70f), (0x890, 0x891), (0x8e2, 0x8e2), (0x180e, 0x180e), (0x200b, 0x200f), (0x2028, 0x202e),
           (0x2060, 0x2064), (0x2066, 0x206f), (0xd800, 0xdfff), (0xfeff, 0xfeff), (0xfff9, 0xfffb),
           (0x110bd, 0x110bd), (0x110cd, 0x110cd), (0x13430, 0x13438), (0x1bca0, 0x1bca3), (0x1d173, 0x1d17a),
           (0xe0001, 0xe0001), (0xe0020, 0xe007f))
_HIDDEN = re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in _RANGES) + "]")
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
    if text.isprintable():  # in C, and true of nearly every string: it has none of _HIDDEN's categories
        return text
    return _HIDDEN.sub(_escape, text) if _HIDDEN.search(text) else text


def _json_escape(m: re.Match[str]) -> str:
    return _json_escape_char(m.group())


def _json_escape_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells a code point above the BMP as its UTF-16 surrogate pair
    return f"\\u{0xd800 + (code >> 10):04x}\\u{0xdc00 + (code & 0x3ff):04x}"


# _HIDDEN's characters of the Basic Multilingual Plane, surrogates aside (a class of BMP ranges is searched by a
# lookup table: ten times faster than one with the astral ranges), and a byte that starts an astral character.
_HIDDEN_BMP = re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in _RANGES
                                       if hi < 0x10000 and lo != 0xd800) + "]")
_ASTRAL_UTF8 = re.compile(b"[\xf0-\xf4]")


def json_visible(data: bytes) -> bytes:
    """A JSON document (UTF-8) with every hidden character that its encoder wrote raw (DEL, the C1 controls, bidi
    and zero-width characters: JSON only requires U+0000-U+001F escaped) written as its `\\u` escape: the same
    values to every JSON reader, nothing a terminal acts on. Such characters only occur inside strings (the rest of
    a document is ASCII punctuation and digits), where the escape means the character.

    A document of ASCII (nearly all: names, labels, rblnctl's words) is checked in C and never copied; one with other
    text is decoded to be searched (0.15 s for 16 MB on this workplace's machine) and rewritten only when it holds
    a hidden character."""
    if data.isascii():
        return data if b"\x7f" not in data else data.replace(b"\x7f", b"\\u007f")
    text = data.decode("utf-8")
    if not _HIDDEN_BMP.search(text) and not _ASTRAL_UTF8.search(data):
        return data
    return json_text_visible(text).encode("utf-8")


def json_text_visible(text: str) -> str:
    """json_visible over a document already text (json.dumps': a lone surrogate from a file name included)."""
    return _HIDDEN.sub(_json_escape, text)


def plain(text: object) -> str:
    """`text` for a rich console's markup: `visible`, and never read as markup (`[bold]` printed as written)."""
    from rich.markup import escape

    return escape(visible(str(text)))
