"""`iomatrix merge`: combine per-host results databases into one (the logic is in store/merge.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from iomatrix.errors import UserError
from iomatrix.ui import console

NAME = "merge"


def merge(
    out: Annotated[Path, typer.Argument(help="The merged database (created, or merged into when it exists).")],
    inputs: Annotated[list[Path], typer.Argument(help="Per-host results databases to add to it.")],
) -> None:
    """Merge per-host databases, e.g. 'iomatrix merge fleet.sqlite results/*.sqlite'; merging one twice adds
    nothing, a conflict is refused and nothing is written."""
    from iomatrix.store.merge import merge as merge_databases
    from iomatrix.store.schema import SCHEMA_VERSION

    for path in inputs:  # merging a database into itself adds nothing and would rewrite it: a mistyped line
        if _same_file(path, out):
            raise UserError(f"{path} is both the output and an input of the merge",
                            hint="name a new file as the output, e.g. 'iomatrix merge fleet.sqlite a.sqlite b.sqlite'")
    result = merge_databases(out, inputs)
    for r in result.inputs:
        older = f" (schema {r.schema_version}, migrated on a copy)" if r.schema_version < SCHEMA_VERSION else ""
        console.print(f"{r.path}{older}: {r.sweeps_added} sweep(s) added with {r.runs_added} run(s), "
                      f"{r.sweeps_present} already merged", soft_wrap=True)
    console.print(f"{out}: {result.hosts} host(s), {result.sweeps} sweep(s), {result.runs} run(s)", soft_wrap=True)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def register(app: typer.Typer) -> None:
    app.command(NAME)(merge)
