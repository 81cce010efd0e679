"""`rank`, `recommend` and `report` share one option base (commands/options.py): an option the
commands have in common is one option, with one spelling, one help text, one default and one parser,
and a mistake in it is refused by each with the same line.

Read from the real click commands typer builds for the CLI (what `--help` prints and what parses
argv)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup, TyperOption

from iomatrix.cli import app
from tests.conftest import iomatrix_argv

COMMANDS = ("rank", "recommend", "report")
# The options every ranking command has, and those of the two that answer "what should I use".
RANKING = {
    "--db",
    "--sweep",
    "--objective",
    "--min-runs",
    "--max-noise",
    "--threshold",
    "--tie-break",
    "--group",
}
ANSWERING = {"--current", "--require", "--target", "--allow-data-loss"}
# Options whose name is shared but which are different options on purpose: rank --score ranks by one
# weighted score instead of the cells' metric; recommend --score (repeatable) adds weighted scores
# to the answer.
DIFFERENT = {"--score"}


def _options(command: str) -> dict[str, TyperOption]:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    cmd = group.commands[command]
    return {p.opts[0]: p for p in cmd.params if isinstance(p, TyperOption)}


def _surface(option: TyperOption) -> dict[str, object]:
    """What a user sees and gets of an option: its spellings, help, default, metavar, kind, type and
    the parser that reads its value (one function object where the option is declared once)."""
    declared = option.type_descriptor
    return {
        "opts": option.opts,
        "secondary": option.secondary_opts,
        "help": option.help,
        "default": option.default,
        "metavar": option.metavar,
        "flag": option.is_flag,
        "multiple": option.multiple,
        "required": option.required,
        "type": repr(declared.annotation),
        "parser": declared.parameter_info.parser,
        "callback": declared.parameter_info.callback,
    }


def test_the_shared_options_are_there() -> None:
    found = {c: set(_options(c)) for c in COMMANDS}
    for command in COMMANDS:
        assert found[command] >= RANKING, (command, sorted(RANKING - found[command]))
    for command in ("recommend", "report"):
        assert found[command] >= ANSWERING, (command, sorted(ANSWERING - found[command]))


def test_options_of_the_same_name_have_the_same_help_default_and_type() -> None:
    options = {c: _options(c) for c in COMMANDS}
    shared = {
        name
        for c in COMMANDS
        for name in options[c]
        if sum(name in options[other] for other in COMMANDS) > 1
    } - DIFFERENT
    assert shared >= RANKING | ANSWERING
    for name in sorted(shared):
        surfaces = {c: _surface(options[c][name]) for c in COMMANDS if name in options[c]}
        first, *rest = surfaces.items()
        for command, surface in rest:
            assert surface == first[1], (
                f"{name}: {first[0]} and {command} differ: {first[1]} != {surface}"
            )
        help_text = first[1]["help"]
        assert isinstance(help_text, str) and help_text and "as for" not in help_text.lower(), (
            name,
            help_text,
        )


def test_the_shared_options_keep_their_defaults() -> None:
    """The CLI surface a user scripts against: the defaults the commands had before they shared one
    base."""
    for command in COMMANDS:
        opts = _options(command)
        assert {
            name: opts[name].default
            for name in ("--db", "--min-runs", "--max-noise", "--threshold", "--tie-break")
        } == {
            "--db": Path("iomatrix.sqlite"),
            "--min-runs": 3,
            "--max-noise": 0.10,
            "--threshold": 0.05,
            # "keeper" since issue 53: a tie keeps what the user runs, else QEMU's default
            "--tie-break": "safety,keeper,simplicity",
        }, command
        assert opts["--sweep"].default is None and opts["--objective"].default is None
    for command in ("recommend", "report"):
        opts = _options(command)
        assert opts["--target"].default == "libvirt" and opts["--current"].default is None
        assert opts["--allow-data-loss"].default is False and opts["--require"].multiple


def test_the_default_threshold_and_tie_break_pass_the_decision_rules_checks() -> None:
    """`ranking_arguments` checks a threshold and a tie-break with the decision rule's own checks
    only when they are not the defaults (a command refusing a missing --db must not import the
    decision rule first: bench/cli_startup.py), so the defaults must pass those checks unchanged."""
    from iomatrix.commands.options import (
        DEFAULT_THRESHOLD,
        DEFAULT_TIE_BREAK,
        ranking_arguments,
        tie_break_keys,
    )
    from iomatrix.stats.decision import check_threshold, check_tie_break

    keys = tie_break_keys(DEFAULT_TIE_BREAK)
    assert check_threshold(DEFAULT_THRESHOLD) == DEFAULT_THRESHOLD
    assert check_tie_break(keys) == tuple(keys)
    given = ranking_arguments(3, 0.10, DEFAULT_THRESHOLD, DEFAULT_TIE_BREAK)
    assert given == {"min_n": 3, "max_noise": 0.10, "threshold": 0.05, "tie_break": keys}
    assert isinstance(given["threshold"], float)


def test_the_default_target_passes_the_answers_check() -> None:
    """recommend and report check --target with the answer's check only when it is not the default
    (commands/common.py check_target), so the default must pass it."""
    from iomatrix.commands.options import DEFAULT_TARGET
    from iomatrix.report.headline import check_target

    assert check_target(DEFAULT_TARGET) == DEFAULT_TARGET


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tie-break", "speed"], "error: unknown tie-break key(s) 'speed'"),
        (["--min-runs", "1"], "error: --min-runs 1 is out of range"),
        (["--threshold", "150%"], "error: practical threshold 1.5 is not a fraction in [0, 1)"),
    ],
)
def test_a_bad_ranking_option_is_refused_alike_by_each_command(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """Checked before the database is opened: the database named does not exist, and no command says
    so."""
    extra = {"rank": [], "recommend": [], "report": ["--html", str(tmp_path / "r.html")]}
    for command in COMMANDS:
        res = subprocess.run(
            [
                *iomatrix_argv(),
                command,
                "--db",
                str(tmp_path / "none.sqlite"),
                *args,
                *extra[command],
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "300"},
        )
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), (
            command,
            res.stderr,
        )
    # nothing written: no database, no report
    assert sorted(p.name for p in tmp_path.iterdir()) == []
