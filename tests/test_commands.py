"""The command modules: each registers exactly its own command, `iomatrix --help` lists every
command, the CLI's start-up imports nothing heavy, and `--format` refuses a format a command does
not render."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import iomatrix.commands
from iomatrix.commands import COMMANDS
from iomatrix.commands.options import check_format, format_option
from iomatrix.errors import UserError
from iomatrix.report.formats import OutputFormat
from tests.conftest import run_cli

# Every command of `iomatrix --help`, in its order (the CLI's surface: renaming or dropping one
# breaks users).
TODAY = [
    "plans",
    "plan",
    "run",
    "results",
    "rank",
    "compare",
    "monitor",
    "clean",
    "recommend",
    "report",
    "merge",
    "publish",
    "history",
    "guest",
]
NOT_COMMANDS = {
    "__init__",
    "options",
    "common",
    "progress",
    "thresholds",
    "help_names",
    "answer_options",
}
# a command that renders only these two
TableOrJson = format_option(OutputFormat.table, OutputFormat.json)


def _registered(app: typer.Typer) -> list[str]:
    return [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]


@pytest.mark.parametrize("module", COMMANDS, ids=lambda m: m.NAME)
def test_each_command_module_registers_exactly_its_command(module) -> None:  # type: ignore[no-untyped-def]
    app = typer.Typer()
    module.register(app)
    assert _registered(app) == [module.NAME]
    assert module.__name__ == f"iomatrix.commands.{module.NAME}"


def test_every_command_module_is_registered_in_order() -> None:
    modules = {p.stem for p in Path(iomatrix.commands.__file__).parent.glob("*.py")} - NOT_COMMANDS
    assert [m.NAME for m in COMMANDS] == TODAY
    assert modules == set(TODAY)


def test_guest_registers_its_subcommands() -> None:
    app = typer.Typer()
    COMMANDS[TODAY.index("guest")].register(app)
    assert [c.name for c in app.registered_groups[0].typer_instance.registered_commands] == [
        "build",
        "info",
    ]


def test_help_lists_every_command() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    listed = [
        line.split()[1]
        for line in proc.stdout.splitlines()
        if line.startswith("│ ") and len(line.split()) > 2 and line.split()[1].isalpha()
    ]
    assert [c for c in listed if c in TODAY] == TODAY


def test_start_up_imports_nothing_heavy() -> None:
    """`iomatrix --help` must stay fast: the store, the runner, pydantic, numpy and rich tables are
    imported inside the commands' bodies."""
    heavy = (
        "numpy",
        "scipy",
        "matplotlib",
        "pydantic",
        "rich.table",
        "iomatrix.runner",
        "iomatrix.store",
        "iomatrix.plan.model",
        "iomatrix.guest",
    )
    code = f"import sys, iomatrix.cli; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == []


def test_a_format_a_command_does_not_render_is_one_line_error() -> None:
    accepted = (OutputFormat.table, OutputFormat.json)
    assert check_format(OutputFormat.json, accepted) is OutputFormat.json
    with pytest.raises(UserError, match="--format csv is not available here") as err:
        check_format(OutputFormat.csv, accepted)
    assert err.value.one_line() == "--format csv is not available here — use table or json"

    app = typer.Typer()
    chosen: list[OutputFormat] = []

    @app.command()
    def show(format: TableOrJson = OutputFormat.table) -> None:  # type: ignore[valid-type]
        chosen.append(format)

    @app.command()
    def other() -> None:
        pass

    runner = CliRunner()
    assert runner.invoke(app, ["show", "--format", "json"]).exit_code == 0 and chosen == [
        OutputFormat.json
    ]
    refused = runner.invoke(app, ["show", "--format", "csv"])
    assert isinstance(refused.exception, UserError) and chosen == [OutputFormat.json]
    helptext = runner.invoke(app, ["show", "--help"]).output
    assert (
        "<table|json>" in helptext and "table or json." in helptext and "markdown" not in helptext
    )
