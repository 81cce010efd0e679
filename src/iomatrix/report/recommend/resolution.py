"""What an answer says when the sweep could not tell its cells apart (issue 71): the interval it
reached, the property the pick rests on, and how many minutes more would settle it.

Every role ends with one configuration and one of three statuses: decided (shown better),
equivalent (within the margin, TOST: stats/equivalence.py) or not told apart at this resolution.
The last never prints a round count (a user cannot act on "1272 more rounds"): the decision's
estimate of the rounds still needed (stats/decision.py, power 0.8) becomes minutes through the time
one round of the two cells took in this sweep, and the plan's budget that would buy them.

Worked example (a quickstart, tests/data/quickstart-roles): the file server's job ran 44 runs of
2.35 s on average in a sweep of 240 s whose runs add up to 232 s (set-up and boots: a factor of
1.03); one round of its deciding pair is two runs, 2 × 2.35 × 1.03 = 4.8 s; "about 60 more rounds"
is 60 × 4.8 s ≈ 5 minutes: with time_budget = "4m", a budget of "9m" would settle it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from iomatrix.plan.model import parse_duration
from iomatrix.stats.decision import safety_key

# The three statuses every answer ends with, by the decision's own status (roles.STATUS_WORDS).
RESOLUTION = {
    "answer": "decided",
    "equivalent": "equivalent",
    "tied": "not told apart at this resolution",
    "provisional": "not told apart at this resolution",
}

# What each format offers a user, the reason a tie between formats is broken as it is.
FORMAT_PROPERTY = {
    "raw": "raw: the simpler format, nothing between the guest and the file",
    "qcow2": "qcow2: snapshots and thin provisioning",
}


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
    """ "about 5 minutes", "about 2 hours" (a figure a user can plan with)."""
    if minutes < 1:
        return "under a minute"
    if minutes < 90:
        return f"about {math.ceil(minutes)} minutes"
    return f"about {round(minutes / 60)} hours"


def settle_text(
    rounds: int | None, seconds_per_run: float | None, budget: str | None, cells: int = 2
) -> str:
    """How much more time would settle a decision the sweep left open, from its estimate of the
    rounds still needed (`rounds`, one run of each of `cells` contending cells per round) and the
    measured time of a run: "about 5 minutes more would settle it (time_budget = "9m" in the plan,
    now "4m")"; "" when no estimate can be made."""
    if rounds is None or seconds_per_run is None:
        return ""
    minutes = rounds * cells * seconds_per_run / 60
    more = f"{minutes_text(minutes)} more would settle it"
    try:
        now = parse_duration(budget) / 60 if budget else None
    except ValueError:
        now = None
    if now is None:
        return more
    total = now + minutes
    needed = f"{math.ceil(total)}m" if total < 120 else f"{math.ceil(total / 60)}h"
    return f'{more} (time_budget = "{needed}" in the plan, now "{budget}")'


def pick_reason(pick: Mapping[str, str], rival: Mapping[str, str] | None, keeper: str = "") -> str:
    """The property a pick among cells not told apart rests on, in the decision's tie-break order
    (stats/decision.py: safety, keeper, simplicity): power-loss safety where the rival is less
    safe; `keeper` ("what you run", "QEMU's default") where the pick keeps it and the rival
    changes the cache or aio; else what the pick's format offers; else the simpler configuration.

    >>> pick_reason({"format": "qcow2", "cache": "none"}, {"format": "raw", "cache": "none"})
    'qcow2: snapshots and thin provisioning'
    """
    if rival is None:
        return keeper or "the tie-break"
    if safety_key(pick) < safety_key(rival):
        return "power-loss safety"
    own = ("cache", "aio")
    if keeper and any(pick.get(a) != rival.get(a) for a in own):
        return "keeps what you run" if keeper.startswith("what you run") else keeper
    if pick.get("format") != rival.get("format") and pick.get("format") in FORMAT_PROPERTY:
        return FORMAT_PROPERTY[str(pick.get("format"))]
    if keeper:
        return "keeps what you run" if keeper.startswith("what you run") else keeper
    return "the simpler configuration"
