"""Folding text to a terminal's width, one way for every screen (issue 39): a table cell at spaces and after commas
(fold), a prose line at spaces with a `quoted` command kept whole on a line of its own (fold_prose), and the one kind of
line a screen may hold wider than the terminal (is_command_line). rblnctl.cli.output (tables, views) and
rblnctl.cli.console (progress, warnings, errors) both fold through here."""

from __future__ import annotations


def cell_words(text: str) -> list[str]:
    import re

    return re.findall(r"[^ ,]+,?", text)


def fold(text: str, width: int, *, indent: int = 0, hang: bool = False) -> list[str]:
    """`text` in lines of at most `width` columns, broken at a space or after a comma (a word longer than a line is
    cut where the line ends); continuation lines start with `indent` spaces. `hang`: a line's last comma may stand
    one column past `width` (in a table, into the padding: `Ready,SchedulingDisabled,` then `Switching`)."""
    import re

    if len(text) <= width or width <= indent + 1:
        return [text]
    lead = len(text) - len(text.lstrip(" "))
    lines: list[str] = []
    line = text[:lead]
    for sep, word in re.findall(r"( *)([^ ,]*,|[^ ,]+)", text[lead:]):
        room = width - (indent if lines else 0)
        candidate = line + word if not line.strip() else line + sep + word
        if len(candidate) <= room + (hang and candidate.endswith(",")):
            line = candidate
            continue
        if line.strip():
            lines.append(line)
            room, candidate = width - indent, word
        while len(candidate) > room + (hang and candidate.endswith(",")):  # one word wider than a line
            lines.append(candidate[:room])
            candidate, room = candidate[room:], width - indent
        line = candidate
    if line.strip():
        lines.append(line)
    return [lines[0]] + [" " * indent + rest for rest in lines[1:]]


def _prose_tokens(text: str) -> list[tuple[str, str]]:
    """(spaces before, word) pairs of a prose line: a word ends at a space; a `quoted` span (a command, a flag with
    its value) is one word with what sticks to it (`rblnctl node list`, or (`--yes`)."""
    import re

    return re.findall(r"( *)((?:[^ `]*`[^`]*`)+[^ `]*|[^ ]+)", text)


_PROGRAM = r"\S*(?:rblnctl|kubectl|virtctl|helm)"  # a command's first word (the program as invoked, maybe a path)


def is_command_line(line: str) -> bool:
    """Whether `line` is one command standing alone (a whole `quoted` command with what sticks to it, or a line that
    starts with the program's name): the one kind of line a screen may hold wider than the terminal, since breaking
    it would break what a person copies (fold_prose puts such a command on a line of its own)."""
    import re

    text = line.strip()
    return bool(re.fullmatch(r"[(\[]?`[^`]+`[,;:.)\]]*", text) or re.fullmatch(rf"{_PROGRAM}( .+)?", text)
                and " # " not in text)


def fold_prose(text: str, width: int, *, indent: int = 0) -> list[str]:
    """A prose line folded to `width` columns at spaces, continuation lines indented by `indent`: a `quoted` command
    (a span with a space in it) that does not fit where it stands is never broken: it stands alone on the next line,
    indented two more, and the prose goes on below it. Only such a command, longer than a line, is left wider than
    `width`. A word longer than a line (no space to break at) is cut where the line ends, as fold() does."""
    import re

    if len(text) <= width or width <= indent + 8:
        return [text]
    lead = len(text) - len(text.lstrip(" "))
    labelled = re.fullmatch(rf"( *[A-Za-z][\w ]*:) +({_PROGRAM} .*)", text)
    if labelled and "`" not in text:  # `resume:  rblnctl node set-mode ...`: the label, the command alone below it
        return [labelled.group(1), " " * (lead + 2) + labelled.group(2)]
    lines: list[str] = []
    line = text[:lead]
    for sep, word in _prose_tokens(text[lead:]):
        room = width - (indent if lines else 0)
        candidate = line + word if not line.strip() else line + sep + word
        if len(candidate) <= room:
            line = candidate
            continue
        command = "`" in word and " " in word
        if line.strip():
            lines.append(line)
        if command:  # alone on its line, indented two more than the prose, never cut
            lines.append(" " * 2 + word)
            line = ""
            continue
        room = width - indent
        while len(word) > room:  # one word wider than a line (a path, a long name): cut where the line ends
            lines.append(word[:room])
            word = word[room:]
        line = word
    if line.strip():
        lines.append(line)
    return [lines[0]] + [" " * indent + rest for rest in lines[1:]]


def prose_indent(line: str, width: int) -> int:
    """Where a folded prose line goes on: under the value of a `Key:   value` line, else two columns in from the
    line's own indent."""
    import re

    key = re.match(r"[A-Za-z][\w .-]{0,24}:\s{2,}", line)
    indent = len(key.group(0)) if key else len(line) - len(line.lstrip()) + 2
    return min(indent, width // 2)


def cut(text: str, width: int | None) -> str:
    """One line of at most `width` columns, `…` where it was cut (a spinner's text, a note on a live screen that
    must fit the terminal's height): said whole elsewhere (piped, or the command without --watch)."""
    return text if width is None or len(text) <= width else text[:max(0, width - 1)] + "…"


def commands(text: str) -> list[str]:
    """The `quoted` commands of a text (a span in backquotes with a space in it), quotes included: what no fold
    breaks."""
    import re

    return [m for m in re.findall(r"`[^`]*`", text) if " " in m]
