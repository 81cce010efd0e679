"""`iomatrix plans`: the built-in plans."""

from __future__ import annotations

import typer

from iomatrix.ui import console

NAME = "plans"


def plans() -> None:
    """List the built-in plans with their estimated duration (as 'iomatrix plan NAME' estimates
    it)."""
    from rich.markup import escape
    from rich.table import Table

    from iomatrix.estimate import estimate_sweep
    from iomatrix.guest.pace import recorded_pace
    from iomatrix.plan.load import builtin_names, load_plan
    from iomatrix.runner import plan_expansion

    pace = recorded_pace()
    paced = False
    t = Table("plan", "estimated", "description", box=None)
    for name in builtin_names():
        plan, base = load_plan(name)
        estimate = estimate_sweep(plan, plan_expansion(plan, base, set()), pace)
        paced = paced or estimate.pace is not None
        t.add_row(
            name + (" (default)" if name == "quick" else ""),
            estimate.minutes() + (" *" if estimate.pace is not None else ""),
            plan.description,
        )
    console.print(t)
    console.print(
        "[dim]estimated: the sweep's wall clock, set-up included, at most its time budget "
        "('iomatrix plan NAME' says how)[/]"
    )
    if paced and pace is not None:
        console.print(f"[dim]* {escape(pace.sentence())}[/]")


def register(app: typer.Typer) -> None:
    app.command(NAME)(plans)
