"""The text helpers every renderer shares (split from report/screen.py, which re-exports them,
issue 68): `wrap` (prose) and `code_lines` (snippets, never broken but XML between attributes and
a too-wide shell command between its words)."""

from __future__ import annotations

import re
import textwrap

from iomatrix.ui import cut_long


def wrap(text: str, width: int, indent: str = "", hang: str = "  ") -> list[str]:
    """`text` wrapped to `width` columns (continuation lines indented by `hang` more); never wider,
    never empty-handed: a width too small for the indentation still gets one word per line. A
    megabyte string of a damaged database is cut first (ui.cut_long), not wrapped whole."""
    room = max(width, len(indent) + len(hang) + 10)
    return textwrap.wrap(
        cut_long(text),
        room,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_on_hyphens=False,
        break_long_words=width >= 60,
    ) or [indent]


def code_lines(text: str, language: str, width: int, indent: str = "") -> list[str]:
    """A snippet's lines, paste-ready. XML breaks between attributes where a line is too wide
    (whitespace between attributes means nothing to XML); other languages are never broken (a broken
    shell word is a broken command). `indent` is not put before a line that continues a shell word
    (the line before ends in a bare backslash, vmconfig.config.shell_word): the shell would take the
    indent as a space inside the word."""
    out = []
    # the line before ended a shell word with a bare backslash: this line goes on with it
    in_word = False
    for line in text.splitlines():
        # The word resumes at the line's first column: an indent there would split it in two when
        # pasted.
        line = ("" if in_word else indent) + line
        in_word = language == "sh" and line.endswith("\\") and not line.endswith(" \\")
        if len(line) > width and language == "sh" and "<<" not in text:
            out += _shell_continued(line, width)
            continue
        if len(line) <= width or language != "xml":
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        words = re.findall(r'[^\s"]+(?:"[^"]*")?|"[^"]*"', line.strip())
        # a tag's end ("/>", ">") stays with its last attribute: alone on a line it reads as a
        # stray line of the snippet (issue 70, "snippets whole")
        for i in range(len(words) - 1, 0, -1):
            if words[i] in ("/>", ">"):
                words[i - 1 : i + 1] = [f"{words[i - 1]} {words[i]}"]
        cur = lead + words[0]
        for w in words[1:]:
            if len(cur) + 1 + len(w) > width:
                out.append(cur)
                cur = lead + "    " + w
            else:
                cur += " " + w
        out.append(cur)
    return out


def _shell_continued(line: str, width: int) -> list[str]:
    """A shell command too wide for `width` broken between its words with " \\" continuations (the shell joins
    them back into one command); a comment, a word wider than the line, or a quoted string stays
    whole."""  # noqa: E501
    lead = line[: len(line) - len(line.lstrip())]
    if line.lstrip().startswith("#") or line.rstrip().endswith("\\"):
        return [line]
    words = re.findall(r"(?:[^\s'\"]+|'[^']*'|\"[^\"]*\")+", line.strip())
    # a word wider than a line: left whole
    if any(len(lead) + 4 + len(w) + 2 > width for w in words):
        return [line]
    out, cur = [], lead + words[0]
    for w in words[1:]:
        if len(cur) + 1 + len(w) + 2 > width and cur.strip():
            out.append(cur + " \\")
            cur = lead + "    " + w
        else:
            cur += " " + w
    return [*out, cur]


def wrapped_lines(lines: list[str], width: int, indent: str) -> list[str]:
    return [x for line in lines for x in wrap(line, width, indent)]


def _first_clause(text: str) -> str:
    """A risk's statement without its reasons: the text up to its first parenthesis, semicolon or
    colon ("completed writes survive (they reached the host)" → "completed writes survive")."""
    return re.split(r" \(|; |: ", text, maxsplit=1)[0]
