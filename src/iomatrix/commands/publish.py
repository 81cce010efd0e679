"""`iomatrix publish`: copy a host's results database into a fleet's central PostgreSQL store
(store/pg.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from iomatrix.dburl import DatabaseURL, parse_db
from iomatrix.errors import UserError
from iomatrix.ui import console

NAME = "publish"


def publish(
    source: Annotated[
        Path, typer.Argument(help="The host's results database (SQLite file; only read).")
    ],
    url: Annotated[
        Path,
        typer.Argument(
            parser=parse_db,
            metavar="URL",
            help="The central store, postgresql://[user@]host[:port]/database.",
        ),
    ],
) -> None:
    """Publish a host's sweeps into the central store, e.g. 'iomatrix publish iomatrix.sqlite
    postgresql://lab@db.example/iomatrix'; publishing twice adds nothing, a conflict is refused and
    nothing is written, a failed publish leaves the host's file as it was (the next one catches up).
    Credentials: ~/.pgpass, PGPASSFILE or a service file, never the command line."""
    if not isinstance(url, DatabaseURL):
        raise UserError(
            f"'{url}' is not a PostgreSQL URL", hint="give postgresql://[user@]host[:port]/database"
        )
    from iomatrix.commands.common import pg_store

    result = pg_store().publish(source, url)
    running = (
        f"; {result.sweeps_running} sweep(s) still running left for the next publish"
        if result.sweeps_running
        else ""
    )
    console.print(
        f"{source} → {url}: {result.sweeps_added} sweep(s) added, "
        f"{result.sweeps_present} already there; "
        f"{result.runs_added} run(s) added, {result.runs_present} already there{running}",
        soft_wrap=True,
        markup=False,
    )


def register(app: typer.Typer) -> None:
    app.command(NAME)(publish)
