"""The comparisons that decide an answer, and which of them are not settled yet: where a budget's
runs go first.

An answer is decided by a few pairs, not by any one cell's precision: the leader L (the best centre)
against every other cell X the race has not settled against it (the runner-up first), among them
what the user runs and the default configuration (the cells the answer is quoted against, and the
ones an equivalent decision keeps; stats/decision.py). A pair (L, X) is *settled* when the race's
rule (stats/racing.py, ``race_step``) has stopped X against L: significantly worse by more than θ,
shown unable to beat L by θ (ruled out), or equivalent to it (TOST); every other state leaves the
answer open ("not separated yet"), and runs on both cells of the pair, in the same rounds, are what
narrows the interval of their ratio (stats/paired.py compares them over the rounds both ran). Runs
that tighten one cell's own figure (its CI toward a target) change no decision; they come after the
deciding pairs are settled.

    deciding = {(L, X) : X ∈ cells ∖ {L}, status(X vs L) ∉ {eliminated, equivalent}}

Every unsettled X, not only the runner-up: any of them may end the answer's pick (the tie-break
chooses among the cells not settled against the leader), so each must share the leader's rounds.
Measured (issue 53, the quickstart five times on a quiet host): with the runner-up alone, in two of
the five sweeps raw · writeback, stopped by the race's futility estimate at 3 rounds while the pair
ahead of it ran 9, was named the file server's leading configuration on those 3 rounds, its
comparison with the leader never run on.

Worked example: four cells a (centre 100), b (96), d (85) and c (50); the race stopped c as
significantly worse, b is within 5 % of a but not shown equivalent, d is 15 % behind on three noisy
rounds (neither separated nor ruled out), and the user runs c: the deciding pairs are (a, b) and (a,
d); (a, c) is settled. With b shown equivalent to a and d ruled out there is none: the budget may go
to precision.

Nothing is decided before the race's minimum complete rounds (``race_step`` keeps every unit): no
pair is named then, the race itself still runs every unit."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from iomatrix.stats.looks import DECISION_ALPHA
from iomatrix.stats.racing import race_step

SETTLED = ("eliminated", "equivalent")


def deciding_pairs(
    data: Mapping[str, Sequence[tuple[int, float]]],
    higher_is_better: bool,
    threshold: float = 0.05,
    alpha: float = DECISION_ALPHA,
    min_rounds: int = 3,
    margin: float | None = None,
) -> tuple[tuple[str, str], ...]:
    """(leader, other) for the pairs that decide the answer and are not settled (module
    docstring); ``data`` as for ``race_step``: unit → (round, value > 0) of one workload in one
    tier; ``margin``: the workload's margin of practical equivalence (its role's; None:
    ``threshold``). What the answer is quoted against (the current configuration, the default)
    needs no naming: it is one of the cells, and every unsettled cell is paired with the leader."""
    if len(data) < 2 or any(not pts or min(v for _, v in pts) <= 0 for pts in data.values()):
        return ()  # nothing to compare, or no log scale: the race's own rule runs every unit
    step = race_step(data, higher_is_better, threshold, alpha, min_rounds=min_rounds, margin=margin)
    if step.best is None:
        return ()
    status = {d.unit: d.status for d in step.decisions}
    sign = -1.0 if higher_is_better else 1.0

    def centre(u: str) -> float:
        return sign * sum(math.log(v) for _, v in data[u]) / len(data[u])

    # The runner-up first (the closest comparison), then the others by centre.
    others = sorted((u for u in data if u != step.best), key=lambda u: (centre(u), u))
    return tuple((step.best, x) for x in others if status.get(x) not in SETTLED)
