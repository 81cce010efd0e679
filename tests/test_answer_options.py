"""One option base for rank, recommend and report (issue 48): the options they share (--db, --sweep,
--objective, --require, --current, --target, the ranking options, …) are declared once, in
iomatrix.commands.answer_options, and each command takes the ones it uses: same spelling, help text
and default in all three, listed in one order, and the values reach the command.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer

from iomatrix.cli import app
from iomatrix.commands import answer_options
from iomatrix.commands.answer_options import (
    ANSWERING,
    OPTIONS,
    RANKING,
    AnswerOptions,
    answer_command,
)
from tests.conftest import iomatrix_argv

COMMANDS = ("rank", "recommend", "report")


def _params(command: str) -> dict[str, Any]:
    """The command's options as typer builds them (its click parameters), by name, in --help's
    order."""
    group: Any = typer.main.get_command(app)
    return {p.name: p for p in group.commands[command].params if p.name is not None}


def test_the_shared_options_are_the_bases_with_one_help_and_default() -> None:
    taken = {c: _params(c) for c in COMMANDS}
    assert set(RANKING) <= set(taken["rank"]) and set(ANSWERING) <= set(taken["recommend"])
    assert set(ANSWERING) <= set(taken["report"])
    for name in OPTIONS:
        users = [taken[c][name] for c in COMMANDS if name in taken[c]]
        assert len(users) >= 2, name  # the base holds shared options only
        first = users[0]
        for other in users[1:]:
            assert (other.opts, getattr(other, "help", None), other.default, other.metavar) == (
                first.opts,
                getattr(first, "help", None),
                first.default,
                first.metavar,
            ), name


def test_every_command_lists_the_base_in_one_order() -> None:
    """The shared options come as one block in the base's order (report's required --html first,
    each command's own options after the block)."""
    for command in COMMANDS:
        names = list(_params(command))
        shared = [n for n in names if n in OPTIONS]
        assert shared == [n for n in OPTIONS if n in shared], command
        start = names.index(shared[0])
        assert names[start : start + len(shared)] == shared, command


def test_a_name_outside_the_base_is_refused() -> None:
    with pytest.raises(ValueError, match="not options of the base: metric"):
        answer_command(("db", "metric"))


def test_the_command_gets_the_given_values_gathered() -> None:
    seen: list[AnswerOptions] = []

    @answer_command(("db", "sweep", "require", "tie_break"))
    def demo(opts: AnswerOptions, top: int = 20) -> None:
        seen.append(opts)

    demo(db=Path("x.sqlite"), sweep=4, require=["migratable"], tie_break="name", top=3)
    assert seen == [
        AnswerOptions(db=Path("x.sqlite"), sweep=4, require=["migratable"], tie_break="name")
    ]
    assert seen[0].ranking()["tie_break"] == ["name"]
    assert answer_options.PARAMETER == "opts"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["rank", "--min-runs", "1"], "error: --min-runs 1 is out of range"),
        (["recommend", "--target", "nope"], "error: unknown target 'nope'"),
        (
            ["report", "--html", "r.html", "--tie-break", ","],
            "error: --tie-break ',' names no tie-break key",
        ),
    ],
)
def test_the_values_reach_each_command_through_the_cli(
    tmp_path: Path, args: list[str], line: str
) -> None:
    res = subprocess.run(
        [*iomatrix_argv(), *args], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert res.returncode == 2 and res.stderr.startswith(line), res.stderr
    assert not list(tmp_path.iterdir())  # refused before anything is written
