"""`iomatrix plans`: the built-in plans."""

from __future__ import annotations

import typer

from iomatrix.ui import console

NAME = "plans"


def plans() -> None:
    """List the built-in plans."""
    from rich.table import Table

    from iomatrix.plan.load import builtin_names, load_plan

    t = Table("plan", "description", box=None)
    for name in builtin_names():
        plan, _ = load_plan(name)
        t.add_row(name + (" (default)" if name == "quick" else ""), plan.description)
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command(NAME)(plans)
