"""`iomatrix clean`: remove what a crashed or killed run left behind, and only that."""

from __future__ import annotations

import typer
from rich.markup import escape

from iomatrix.commands.common import refuse_system_workdir
from iomatrix.commands.options import DEFAULT_WORKDIR, CrashedWorkdirOpt
from iomatrix.errors import UserError
from iomatrix.ui import err_console, print_line

NAME = "clean"


def clean(workdir: CrashedWorkdirOpt = DEFAULT_WORKDIR) -> None:
    """Remove what a crashed or killed run left behind (mounts, loop devices, images) — and only
    that."""
    # A mistyped --workdir must not read as "all clean": that is the very path whose leftovers the
    # user is after.
    if not workdir.exists():
        raise UserError(
            f"--workdir {workdir} does not exist: nothing to clean there",
            hint="give the --workdir of the run that was killed (the default is ./iomatrix-work)",
        )
    if not workdir.is_dir():
        raise UserError(
            f"--workdir {workdir} is not a directory",
            hint="give the --workdir of the run that was killed",
        )
    # `run` never makes a workdir there: "/" is a typo, not a run's leftovers
    refuse_system_workdir(workdir)
    # the ledger's reader after the checks above: a mistyped --workdir is refused at once
    from iomatrix.backing.leftovers import clean as clean_leftovers
    from iomatrix.backing.leftovers import pending

    lines = clean_leftovers(workdir.resolve())
    # plain text (a path may hold "[…]", which markup would eat), whole in a log
    for line in lines:
        print_line(line)
    if not lines:
        print_line(f"nothing left behind in {workdir}")
    # refused, failed or still in use: say so in the exit status
    if remaining := pending(workdir.resolve()):
        err_console.print(
            f"[red]{len(remaining)} leftover(s) remain[/] in {escape(str(workdir))} (see above)"
        )
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(NAME)(clean)
