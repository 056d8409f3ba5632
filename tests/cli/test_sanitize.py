"""Text from the cluster or a host never drives the terminal (rblnctl.cli.sanitize; issue 38, finding 1).

The escape itself (every character of a category that prints nothing, checked against the running Python's
unicodedata), that rblnctl's own styling survives it, and the finding's attack: a tenant's stopped mark that set the
admin's clipboard through `vm attach --dry-run`. tests/cli/test_hostile_text.py runs every read command over a world
whose every string is poisoned.
"""

from __future__ import annotations

import sys
import unicodedata

import pytest

from rblnctl.cli.sanitize import plain, visible
from rblnctl.constants import VM_STOPPED_ANNOTATION as STOPPED
from tests.fakes import objects as o
from tests.helpers import cli
from tests.vm.support import CA22, NS, sandbox_cluster

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # sets the clipboard to `rm -rf ~`
ERASE = "\x1b[2K"
RAW = [chr(c) for c in [*range(0x20), *range(0x7f, 0xa0)] if chr(c) not in "\n\t"] + [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200b", "\u200c",
    "\u200d", "\u2060", "\ufeff", "\u2028", "\u2029"]


def test_every_character_of_a_category_that_prints_nothing_is_escaped():
    hidden = [chr(c) for c in range(sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs") and chr(c) not in "\n\t"]
    missed = [f"U+{ord(ch):04X}" for ch in hidden if visible(ch) == ch]
    assert not missed, f"not escaped: {missed[:20]} (update rblnctl.cli.sanitize._HIDDEN)"
    assert all(visible(ch) == ch for ch in "a é 中 😀 \n\t[]\\") and visible("x") == "x"


@pytest.mark.parametrize("ch", RAW, ids=lambda c: f"U+{ord(c):04X}")
def test_each_escape_is_the_code_point_a_reader_can_look_up(ch):
    want = "\\r" if ch == "\r" else f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    assert visible(f"a{ch}b") == f"a{want}b"


def test_a_json_document_keeps_every_value_and_writes_each_hidden_character_as_an_escape():
    """-o json stays exact (the same values to a JSON reader) with nothing a terminal acts on: msgspec and json.dumps
    write DEL, C1 (U+009B is CSI), bidi and zero-width characters raw, as JSON allows."""
    import json

    from rblnctl.cli.output import Format, dump, json_bytes

    hidden = [chr(c) for c in range(0x20, sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp")]
    doc = {"ascii": "x\x7fy", "all": "é" + "".join(hidden), "name": "n1", "surrogate": "a\udcff"}
    data = json_bytes({k: v for k, v in doc.items() if k != "surrogate"})
    assert data is not None and not any(ch.encode() in data for ch in hidden)
    assert json.loads(data) == {k: v for k, v in doc.items() if k != "surrogate"}
    text = dump(doc, Format.json)  # json.dumps' way: the lone surrogate msgspec refuses
    assert not any(ch in text for ch in [*hidden, "\udcff"]) and json.loads(text) == doc
    assert json_bytes({"a": "é"}) == '{\n  "a": "é"\n}\n'.encode()  # nothing hidden: the bytes as encoded


def test_plain_escapes_controls_and_markup_alike():
    assert plain(f"{OSC52}[bold]x[/bold]") == "\\x1b]52;c;cm0gLXJmIH4K\\x07\\[bold]x\\[/bold]"


def test_the_consoles_escape_a_renderable_built_without_plain_and_keep_their_own_styling(monkeypatch):
    """The net under every call site: a rich Text made from cluster text reaches the terminal escaped, while the
    colour rblnctl adds (a style, not text) is still sent as the SGR sequence it is."""
    import io

    from rich.text import Text

    from rblnctl.cli import console

    monkeypatch.delenv("NO_COLOR", raising=False)
    con = console._console()(file=io.StringIO(), force_terminal=True, color_system="standard", width=200)
    con.print(Text(f"n1 {ERASE}", style="red"), "[yellow]warning:[/] :warning:")
    out = con.file.getvalue()
    assert "\x1b[31m" in out and "\x1b[33m" in out  # rblnctl's red and yellow, as SGR
    assert "n1 \\x1b[2K" in out and "\x1b[2K" not in out and ":warning:" in out


def test_a_tenants_stopped_mark_cannot_drive_the_admins_terminal(apiserver):
    """The finding: the VM owner writes OSC 52 (set the clipboard) and ESC[2K (erase the line) into the stopped mark;
    `vm attach --dry-run` named the mark in its warning with the bytes raw (rich drops BEL, passes ESC)."""
    sandbox_cluster(apiserver)
    vm = o.vm(NS, "v1", host_devices=[CA22], running=False)
    vm["metadata"].update(annotations={STOPPED: f"{OSC52}{ERASE}[bold]x stopping"})
    apiserver.add(vm)
    r = cli("vm", "attach", "v1", "-n", NS, "--npus", "2", "--dry-run", server=apiserver.url)
    assert r.exit_code == 0, r.stderr
    assert "about to stop it (\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2K[bold]x)" in r.stderr  # escaped, markup literal
    for out in (r.stdout, r.stderr):
        assert not any(ch in out for ch in RAW), out
