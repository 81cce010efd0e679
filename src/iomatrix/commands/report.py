"""`iomatrix report`: one self-contained HTML file of a sweep (docs/report.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from iomatrix.commands.answer_options import ANSWERING, AnswerOptions, answer_command
from iomatrix.commands.common import check_target, open_store, parse_objective
from iomatrix.ui import print_line

NAME = "report"


@answer_command(ANSWERING)
def report(
    html: Annotated[Path, typer.Option("--html", help="Write the report to this HTML file.")],
    opts: AnswerOptions,
) -> None:
    """One self-contained HTML file: the answer first, then recommendation and risks, rankings with
    error bars, block-size bars, host panels over time, sweep metadata and every run."""
    # first: before matplotlib is imported (seconds) and the report is built
    check_output_path(html)
    ranking = opts.ranking()
    sweep, current, require, target, group = (
        opts.sweep,
        opts.current,
        opts.require,
        opts.target,
        opts.group,
    )
    # Each option's parser imported only when the option is given: a report refused for a missing
    # --db is refused at once (no --require: nothing to refuse; write_report adds the default).
    check_target(target)
    goal = parse_objective(opts.objective)
    if require:
        from iomatrix.report.recommend.requirements import parse_requirements

        # checked here too: a bad one is refused before matplotlib loads
        parse_requirements(require, opts.allow_data_loss)
    if current is not None:
        from iomatrix.current import parse_current

        cur = parse_current(current)
    else:
        cur = None
    store = open_store(opts.db)
    from iomatrix.report.query import pick_sweep

    sid = pick_sweep(store, sweep)
    # the fleet sections for one group; the sweep shown in full is that group's latest
    if group is not None:
        from iomatrix.report.fleet import select_fleet

        sid = sweep if sweep is not None else select_fleet(store, group).sweeps[-1].id
    require_charts()
    # Imported once every option is known to be good: matplotlib, behind it, writes its font cache
    # on first import.
    from iomatrix.report.html import write_report

    size = write_report(
        store,
        sid,
        html,
        current=cur,
        requirements=require,
        target=target,
        objective=goal,
        fleet_group=group,
        allow_data_loss=opts.allow_data_loss,
        **ranking,
    )
    print_line(f"wrote {html} ({size / 1024:.0f} KiB): open it in a browser, it needs no network")


def check_output_path(path: Path) -> None:
    """Refuse, before the report is built (seconds of work), a path it could not be written to: a
    directory, a missing directory, or a place where no file can be created (/proc, a read-only
    mount, no permission). The probe creates and removes a temporary file beside it: as root,
    access() says yes to /proc/version."""
    import os
    import tempfile

    from iomatrix.errors import UserError

    if path.is_dir():
        raise UserError(
            f"--html {path} is a directory",
            hint=f"name a file in it, e.g. --html {path / 'report.html'}",
        )
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(
            f"--html {path}: the directory {parent} does not exist",
            hint=f"create it first (mkdir -p {parent}) or name a file in an existing directory",
        )
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(
            f"--html {path}: cannot write a file in {parent} ({e.strerror})",
            hint="name a file in a directory you can write to",
        ) from None
    if path.exists() and not path.is_file():
        raise UserError(f"--html {path} is not a regular file", hint="name a new or ordinary file")


def register(app: typer.Typer) -> None:
    app.command(NAME)(report)


def require_charts() -> None:
    """The HTML report draws its charts with matplotlib, an extra a measuring-only install leaves
    out (a fleet host of the role's measure profile: `scripts/setup.sh --measure-only`): a one-line
    error saying so, not a traceback."""
    from iomatrix.errors import UserError

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError(
            "the HTML report draws its charts with matplotlib, which this install leaves out (a "
            "measuring-only install: scripts/setup.sh --measure-only, the fleet role's "
            "measure profile)",
            hint="install the charts extra (.venv/bin/pip install 'matplotlib>=3.8', or "
            "scripts/setup.sh "
            "--minimal), or write the report where the merged database is; Markdown and JSON "
            "need no charts (iomatrix recommend --format markdown|json)",
        )
