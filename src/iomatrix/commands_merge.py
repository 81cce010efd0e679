"""`iomatrix merge`: combine per-host results databases into one (the logic is in store/merge.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the `merge` command to the CLI `app`."""

    @app.command()
    def merge(
        out: Annotated[Path, typer.Argument(help="The merged database (created, or merged into when it exists).")],
        inputs: Annotated[list[Path], typer.Argument(help="Per-host results databases to add to it.")],
    ) -> None:
        """Merge per-host databases, e.g. 'iomatrix merge fleet.sqlite results/*.sqlite'; merging one twice adds
        nothing, a conflict is refused and nothing is written."""
        from iomatrix.store.merge import merge as merge_databases
        from iomatrix.ui import console

        result = merge_databases(out, inputs)
        for r in result.inputs:
            older = f" (schema {r.schema_version}, migrated on a copy)" if r.schema_version < _current() else ""
            console.print(f"{r.path}{older}: {r.sweeps_added} sweep(s) added with {r.runs_added} run(s), "
                          f"{r.sweeps_present} already merged", soft_wrap=True)
        console.print(f"{out}: {result.hosts} host(s), {result.sweeps} sweep(s), {result.runs} run(s)",
                      soft_wrap=True)


def _current() -> int:
    from iomatrix.store.schema import SCHEMA_VERSION

    return SCHEMA_VERSION
