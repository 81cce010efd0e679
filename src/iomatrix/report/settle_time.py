"""How much more time would settle what a sweep left open, in minutes and a plan's budget, never in
rounds (issue 71: a user cannot act on "1272 more rounds").

A decision's estimate of the rounds still needed (stats/decision.py, power 0.8) becomes minutes
through the time one run of the workload took in this sweep, set-up and boots included, times the
cells that run in each round; beyond ABSURD_MINUTES no plan a user would run buys it, and the text
says so instead of promising it.

Worked example (a quickstart, tests/data/quickstart-roles): the file server's job ran 44 runs of
2.35 s on average in a sweep of 240 s whose runs add up to 232 s (set-up and boots: a factor of
1.03); one round of its deciding pair is two runs, 2 × 2.35 × 1.03 = 4.8 s; 60 rounds still needed
are 60 × 4.8 s ≈ 5 minutes: with time_budget = "4m", a budget of "9m" would settle it."""

from __future__ import annotations

import math
from collections.abc import Sequence

from iomatrix.plan.model import parse_duration

# More than a day of runs for one decision: not a budget anyone sets for a sweep; said as such.
ABSURD_MINUTES = 24 * 60
NOT_WITHIN_ANY = "not within any budget"


def run_seconds(runs: Sequence[tuple[str, float]], sweep_seconds: float | None) -> dict[str, float]:
    """Seconds one run of each workload costs in this sweep: its runs' mean wall time, scaled by the
    sweep's wall-clock time over the sum of every run's (the set-up, boots and pauses between runs
    spread over them). `runs`: (workload, wall seconds) of the sweep's runs; `sweep_seconds`: None
    while it runs (then the runs' own times)."""
    total = sum(w for _, w in runs)
    if total <= 0:
        return {}
    scale = max(1.0, sweep_seconds / total) if sweep_seconds else 1.0
    by: dict[str, list[float]] = {}
    for name, wall in runs:
        by.setdefault(name, []).append(wall)
    return {name: scale * sum(ws) / len(ws) for name, ws in by.items()}


def minutes_text(minutes: float) -> str:
    """ "about 5 minutes", "about 2 hours", "about 3 days" (a figure a user can plan with)."""
    if minutes < 1:
        return "under a minute"
    if minutes < 90:
        return f"about {math.ceil(minutes)} minutes"
    if minutes < 48 * 60:
        return f"about {round(minutes / 60)} hours"
    return f"about {round(minutes / (24 * 60))} days"


def settle_text(
    rounds: int | None,
    seconds_per_run: float | None,
    budget: str | None,
    cells: int = 2,
    what: str = "it",
) -> str:
    """How much more time would settle a decision the sweep left open, from its estimate of the
    rounds still needed (`rounds`, one run of each of `cells` contending cells per round) and the
    measured time of a run: "about 5 minutes more would settle it (time_budget = "9m" in the plan,
    now "4m")"; past ABSURD_MINUTES "not within any budget: about 3 days more would settle it";
    "" when no estimate can be made. `what`: what is settled ("it", "them")."""
    if rounds is None or seconds_per_run is None:
        return ""
    minutes = rounds * max(1, cells) * seconds_per_run / 60
    if minutes > ABSURD_MINUTES:
        return f"{NOT_WITHIN_ANY}: {minutes_text(minutes)} more would settle {what}"
    more = f"{minutes_text(minutes)} more would settle {what}"
    try:
        now = parse_duration(budget) / 60 if budget else None
    except ValueError:
        now = None
    if now is None:
        return more
    total = now + minutes
    needed = f"{math.ceil(total)}m" if total < 120 else f"{math.ceil(total / 60)}h"
    return f'{more} (time_budget = "{needed}" in the plan, now "{budget}")'
