"""`iomatrix merge`: combine per-host results databases into one (the logic is in store/merge.py),
or into a fleet's central PostgreSQL store (store/pg.py: what `publish` does, for all the inputs at
once)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from iomatrix.dburl import DatabaseURL, parse_db
from iomatrix.errors import UserError
from iomatrix.ui import console

NAME = "merge"


def merge(
    out: Annotated[
        Path,
        typer.Argument(
            parser=parse_db,
            metavar="OUT",
            help="The merged database (created, or merged into when it exists), or a central "
            "store's postgresql:// URL.",
        ),
    ],
    inputs: Annotated[
        list[Path],
        typer.Argument(
            parser=parse_db, metavar="INPUTS", help="Per-host results databases to add to it."
        ),
    ],
) -> None:
    """Merge per-host databases, e.g. 'iomatrix merge fleet.sqlite results/*.sqlite' (or into a
    central store: 'iomatrix merge postgresql://lab@db.example/iomatrix results/*.sqlite'); merging
    one twice adds nothing, a conflict is refused and nothing is written."""
    from iomatrix.store.merge import merge as merge_databases
    from iomatrix.store.schema import SCHEMA_VERSION

    for path in inputs:
        if isinstance(path, DatabaseURL):
            raise UserError(
                f"merge reads per-host SQLite files, not a central store ({path})",
                hint="read the store with --db URL (results, rank, recommend, report, "
                "history), and "
                "give merge the hosts' files",
            )
    if isinstance(out, DatabaseURL):
        _merge_into_store(out, inputs)
        return
    # merging a database into itself adds nothing and would rewrite it: a mistyped line
    for path in inputs:
        if _same_file(path, out):
            raise UserError(
                f"{path} is both the output and an input of the merge",
                hint="name a new file as the output, e.g. 'iomatrix merge fleet.sqlite "
                "a.sqlite b.sqlite'",
            )
    result = merge_databases(out, inputs)
    for r in result.inputs:
        older = (
            f" (schema {r.schema_version}, migrated on a copy)"
            if r.schema_version < SCHEMA_VERSION
            else ""
        )
        console.print(
            f"{r.path}{older}: {r.sweeps_added} sweep(s) added with {r.runs_added} run(s), "
            f"{r.sweeps_present} already merged",
            soft_wrap=True,
            markup=False,
        )
    # A host row is a machine with its software: one machine upgraded between two sweeps is two
    # rows, and still one host to the reader.
    versions = (
        f" ({result.hosts} host configurations: software or memory differ)"
        if result.hosts > result.machines
        else ""
    )
    console.print(
        f"{out}: {result.machines} host(s){versions}, {result.sweeps} sweep(s), "
        f"{result.runs} run(s)",
        soft_wrap=True,
        markup=False,
    )


def _merge_into_store(url: DatabaseURL, inputs: list[Path]) -> None:
    """Every input published into the store in one transaction: all of them or, when one is refused,
    none (as a merge into a file). Unlike a merge into a file, a sweep still running is left for
    later, as `publish` leaves it."""
    from iomatrix.commands.common import pg_store

    for path, r in zip(inputs, pg_store().publish_all(inputs, url), strict=True):
        running = (
            f"; {r.sweeps_running} sweep(s) still running left for later"
            if r.sweeps_running
            else ""
        )
        console.print(
            f"{path} → {url}: {r.sweeps_added} sweep(s) added with {r.runs_added} run(s), "
            f"{r.sweeps_present} already there{running}",
            soft_wrap=True,
            markup=False,
        )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def register(app: typer.Typer) -> None:
    app.command(NAME)(merge)
