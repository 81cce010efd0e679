"""Every `--help` fits 80 columns as the terminal wraps it: no line over 80, no word cut off with
'…', and no orphan word — a paragraph's line broken although its next word would have fitted
(a docstring's own line break kept: "(as 'iomatrix plan NAME' estimates" / "it).")."""

from __future__ import annotations

import itertools
import os
import subprocess
from typing import Any

import pytest
import typer.main
from rich.cells import cell_len

from iomatrix.cli import app
from tests.conftest import iomatrix_argv

WIDTH = 80


def _commands() -> list[tuple[str, ...]]:
    group = typer.main.get_command(app)
    found: list[tuple[str, ...]] = [()]
    for name, cmd in getattr(group, "commands", {}).items():
        found.append((name,))
        found += [(name, sub) for sub in getattr(cmd, "commands", {})]
    assert len(found) > 10
    return found


def _texts() -> list[str]:
    """Every help text the CLI holds (commands' docstrings, options' and arguments' help)."""
    texts: list[str] = []

    def walk(cmd: Any) -> None:
        texts.extend(t for t in (cmd.help, cmd.short_help) if t)
        texts.extend(p.help for p in cmd.params if getattr(p, "help", None))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return texts


def _orphans(lines: list[str]) -> list[str]:
    """Lines of the description (above the first panel) broken before a word that would have fit
    on them."""
    found = []
    body = []
    for line in lines:
        if line.lstrip().startswith("╭"):
            break
        body.append(line.rstrip())
    for line, after in itertools.pairwise(body):
        words = after.split()
        if line.strip() and words and cell_len(line) + 1 + cell_len(words[0]) <= WIDTH - 2:
            found.append(f"{line!r} / {after!r}")
    return found


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c) or "iomatrix")
def test_help_fits_80_columns_without_cut_or_orphan_words(command: tuple[str, ...]) -> None:
    done = subprocess.run(
        [*iomatrix_argv(), *command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= WIDTH, done.stdout
    # an ellipsis the help text itself writes (postgresql://…) is the text's; any other is a cut
    written = sum(t.count("…") for t in _texts())
    assert done.stdout.count("…") <= written, done.stdout
    cut = [line for line in lines if line.rstrip(" │").endswith("…")]
    assert not cut, cut
    assert not _orphans(lines), _orphans(lines)


def test_no_help_text_carries_its_own_line_breaks() -> None:
    """A help text's line break inside a paragraph survives into the terminal as an orphan word;
    paragraphs (a blank line between) are the only breaks a help text may hold."""
    broken = [
        t for t in _texts() for para in t.split("\n\n") if "\n" in para.strip() and "\b" not in t
    ]
    # a command's docstring is shown by its own --help reflowed (first paragraph) or as written
    # (later ones): only its later paragraphs' breaks reach the terminal
    later = [t for t in broken if any("\n" in p.strip() for p in t.split("\n\n")[1:])]
    assert not later, later[:3]


def test_the_command_list_shows_each_summary_as_one_paragraph_for_the_terminal_to_wrap() -> None:
    """typer's rich help keeps a docstring's line breaks in `iomatrix --help`'s command list; each
    command's summary there is its first paragraph joined into one line."""
    group = typer.main.get_command(app)
    summaries = {}
    for name, cmd in getattr(group, "commands", {}).items():
        summaries[name] = cmd.short_help
        summaries |= {f"{name} {s}": c.short_help for s, c in getattr(cmd, "commands", {}).items()}
    assert all(s and "\n" not in s for s in summaries.values()), summaries
    assert summaries["plans"].endswith("estimates it).")
