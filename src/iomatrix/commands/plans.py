"""`iomatrix plans`: the built-in plans."""

from __future__ import annotations

import typer

from iomatrix.ui import console

NAME = "plans"


def plans() -> None:
    """List the built-in plans with their estimated duration (as 'iomatrix plan NAME' estimates
    it)."""
    from rich.table import Table

    from iomatrix.matrix import estimate_seconds
    from iomatrix.plan.load import builtin_names, load_plan
    from iomatrix.runner import plan_expansion

    t = Table("plan", "estimated", "description", box=None)
    for name in builtin_names():
        plan, base = load_plan(name)
        low, high = estimate_seconds(plan, plan_expansion(plan, base, set()))
        t.add_row(
            name + (" (default)" if name == "quick" else ""),
            duration_range(low, high),
            plan.description,
        )
    console.print(t)
    console.print(
        "[dim]estimated: minimum runs per cell to maximum runs or the time budget "
        "('iomatrix plan NAME')[/]"
    )


def duration_range(low: float, high: float) -> str:
    """'4–12 min', '7 min', '1.5–3.0 h': the estimate's range in the unit that reads best."""
    scale, unit, digits = (3600, "h", 1) if high >= 5400 else (60, "min", 0 if low >= 60 else 1)
    a, b = f"{low / scale:.{digits}f}", f"{high / scale:.{digits}f}"
    return f"{a} {unit}" if a == b else f"{a}–{b} {unit}"


def register(app: typer.Typer) -> None:
    app.command(NAME)(plans)
