"""Terminal presentation: the consoles, the width reports fit in, and how a figure is written. Cheap
to import (the CLI's start-up imports it); the sweep's progress display, which needs the runner, is
in `commands/progress.py`."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.text import Text

from iomatrix.textfile import escape_controls

# Outside a terminal (CI logs, `| less`, a file) reports keep to this width unless COLUMNS says
# otherwise.
PIPED_WIDTH = 100


def report_width(stream: object = None) -> int:
    """The columns every table and line of prose must fit in: COLUMNS when set, else the terminal's
    width, else PIPED_WIDTH. Narrow terminals get what they have (content wraps; nothing fails)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    out = stream if stream is not None else sys.stdout
    if getattr(out, "isatty", lambda: False)():
        return shutil.get_terminal_size((PIPED_WIDTH, 24)).columns
    return PIPED_WIDTH


# A string from a database (a run's error, a host or plan name, a note) longer than this is cut when
# printed: a store holding megabyte strings (a damaged or hostile one) printed them whole, for
# minutes. The JSON and CSV formats keep them whole.
MAX_SHOWN_CHARS = 2000


def cut_long(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text`, or its first `limit` characters and a note of how many more were cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more characters not shown]"


class EscapingConsole(Console):
    """A rich Console that prints every piece of text with its terminal control characters escaped
    (textfile.escape_controls): a plan's description or a database's host name holding ESC [2J, an
    OSC title or U+202E is shown as written, not obeyed. Rich's own colour codes come from styles
    and control segments, which are left alone: only the text segments are escaped.

    Strings are escaped *before* layout (`render_str`, which Rich calls for every string it prints,
    table cells
    included): a table column's width is measured on `\x1b` (4 columns), not on an ESC Rich counts as 0, so a
    hostile name cannot push the row past its column. Text objects built elsewhere are still escaped
    at output.

    No emoji codes (`:x:` in a passwd line or a path is shown as written, not as ❌), and a string
    nested in another renderable (a table cell) is plain text, not markup: a host, workload or
    plan name holding '[bold]' is shown as written. Markup stays for what the code prints itself
    (`console.print("[red]error:[/] …")`, its user text escaped with rich.markup.escape); a
    styled cell is a `Text` with a style."""  # noqa: E501

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    @property
    def options(self) -> ConsoleOptions:
        # Console.render reads `options.markup` for a string inside a renderable (None: the
        # console's own default, markup on); strings printed at the top level are parsed before
        # this, with `print`'s own markup argument.
        return super().options.update(markup=False)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(escape_controls(cut_long(text)), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(escape_controls(seg.text), seg.style) for seg in buffer
        )


console = EscapingConsole(highlight=False, width=report_width(sys.stdout))
err_console = EscapingConsole(stderr=True, highlight=False, width=report_width(sys.stderr))


def print_line(text: str, *, markup: bool = False, dim: bool = False) -> None:
    """One line of a long job's output on stdout: a step, a fact, a path, a sweep's tally.

    A terminal wraps it between words; a pipe or a log file (setup.sh's, a CI's) gets it as one
    line, so that a path or a guest's console line is never split mid-name (a log of `guest build`
    split `/root/.cache/…/29f376d` / `c`; issue 70). Plain text unless `markup`, where the caller
    has escaped what it did not write itself; `dim` for progress, which matters less than the
    results around it."""
    console.print(
        text,
        style="dim" if dim else None,
        markup=markup,
        highlight=False,
        soft_wrap=not console.is_terminal,
    )


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"
