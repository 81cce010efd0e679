"""`iomatrix plans`: the built-in plans."""

from __future__ import annotations

import typer

from iomatrix.ui import console

NAME = "plans"


def plans() -> None:
    """List the built-in plans with their estimated duration (as 'iomatrix plan NAME' estimates
    it)."""
    from rich.table import Table

    from iomatrix.estimate import estimate_sweep
    from iomatrix.plan.load import builtin_names, load_plan
    from iomatrix.runner import plan_expansion

    t = Table("plan", "estimated", "description", box=None)
    for name in builtin_names():
        plan, base = load_plan(name)
        estimate = estimate_sweep(plan, plan_expansion(plan, base, set()))
        t.add_row(
            name + (" (default)" if name == "quick" else ""),
            estimate.minutes(),
            plan.description,
        )
    console.print(t)
    console.print(
        "[dim]estimated: the sweep's wall clock, set-up included, at most its time budget "
        "('iomatrix plan NAME' says how)[/]"
    )


def register(app: typer.Typer) -> None:
    app.command(NAME)(plans)
