"""Racing (F-race / irace style) as a repetition policy: pure decisions for the scheduler.

After every round the scheduler passes, per unit of one workload, the
(round, value) pairs measured so far.  ``race_step``:

1. compares the units with ``blocked_analysis`` (round as block, Holm over the
   family; Welch with fewer than 2 complete rounds);
2. the *current best* is the unit with the best centre (geometric mean);
3. a unit is **eliminated** when it is significantly worse than the best
   (Holm-adjusted p < α) *and* its gap exceeds the practical threshold θ:
   gap = 1 − centre/best (higher is better) or centre/best − 1 (lower is better);
4. units the report needs as **baselines** (e.g. the bare-metal reference of a
   guest cell) are never eliminated; they are marked ``"baseline: keep min runs"``
   and the scheduler runs them only up to the minimum;
5. the *top group* is the best plus every unit within θ of it
   (stats/decision.py's rule), and ``contenders`` are the units neither
   eliminated nor in the top group.

Nothing is eliminated before ``min_rounds`` complete rounds.  ``stop_reason``
says when the race for a workload is over.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.blocked import blocked_analysis


@dataclass(frozen=True)
class Elimination:
    unit: str
    status: str  # "keep" | "eliminated" | "baseline"
    reason: str  # e.g. "significantly worse than X by 38% (p=0.002 > threshold 5%)"


@dataclass(frozen=True)
class RaceStep:
    best: str | None
    decisions: tuple[Elimination, ...]
    top_group: frozenset[str]
    contenders: frozenset[str]  # neither eliminated nor within θ of the best
    method: str  # the analysis used ("rcbd-anova", "friedman-conover", "welch", or "none")

    @property
    def eliminated(self) -> tuple[str, ...]:
        return tuple(d.unit for d in self.decisions if d.status == "eliminated")

    @property
    def active(self) -> tuple[str, ...]:
        """Units still racing (not eliminated, not a baseline)."""
        return tuple(d.unit for d in self.decisions if d.status == "keep")


def _check(threshold: float, alpha: float) -> None:
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be a fraction in [0, 1), got {threshold}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def race_step(
    data: Mapping[str, Sequence[tuple[int, float]]],
    higher_is_better: bool,
    threshold: float = 0.05,
    alpha: float = 0.05,
    baselines: Collection[str] = (),
    min_rounds: int = 3,
) -> RaceStep:
    """One racing decision over the units of one workload (see the module docstring)."""
    _check(threshold, alpha)
    units = list(data)
    base = set(baselines)

    def keep_all(why: str) -> RaceStep:
        ds = tuple(Elimination(u, "baseline" if u in base else "keep",
                               "baseline: keep min runs" if u in base else why) for u in units)
        return RaceStep(None, ds, frozenset(u for u in units if u not in base), frozenset(), "none")

    racing = [u for u in units if u not in base]
    if len(racing) < 2:
        return keep_all("nothing to race against")
    rounds_per_unit = {u: {r for r, _ in data[u]} for u in racing}
    complete = set.intersection(*rounds_per_unit.values())
    if len(complete) < min_rounds:
        return keep_all(f"{len(complete)} complete round(s) < minimum {min_rounds}")
    an = blocked_analysis({u: data[u] for u in racing}, alpha)
    sign = -1.0 if higher_is_better else 1.0
    best = min(racing, key=lambda u: (sign * an.centre[u], u))
    decisions: list[Elimination] = []
    top = {best}
    contenders: set[str] = set()
    for u in units:
        if u in base:
            decisions.append(Elimination(u, "baseline", "baseline: keep min runs"))
            continue
        if u == best:
            decisions.append(Elimination(u, "keep", "current best"))
            continue
        pr = an.pair(u, best)
        gap = (1.0 - pr.ratio) if higher_is_better else (pr.ratio - 1.0)
        if pr.significant and gap > threshold:
            decisions.append(Elimination(u, "eliminated",
                                         f"significantly worse than {best} by {gap:.0%} "
                                         f"(Holm p={pr.p_adjusted:.2g} < {alpha:g}; threshold {threshold:.0%})"))
        elif gap <= threshold:
            top.add(u)
            decisions.append(Elimination(u, "keep", f"within {threshold:.0%} of {best}"))
        else:
            contenders.add(u)
            decisions.append(Elimination(u, "keep", f"{gap:.0%} behind {best} but not significantly "
                                                    f"(Holm p={pr.p_adjusted:.2g})"))
    return RaceStep(best, tuple(decisions), frozenset(top), frozenset(contenders), an.method)


STABLE_ROUNDS = 2


def stop_reason(
    steps: Sequence[RaceStep],
    rounds_done: int,
    max_rounds: int,
    budget_left: bool = True,
    min_rounds: int = 3,
) -> str | None:
    """Why the race for this workload stops now, or None to run another round.

    ``steps`` holds one ``race_step`` per finished round (oldest first).  Checked in order:

    * fewer than ``min_rounds`` rounds → None (keep going);
    * ``"one best left"`` — only one racing unit is not eliminated;
    * ``"stable tied group"`` — no contenders remain (every racing unit is eliminated or in
      the top group) and the top group is the same in the last ``STABLE_ROUNDS`` (2) steps;
    * ``"max rounds"`` — ``rounds_done ≥ max_rounds``;
    * ``"budget"`` — the time budget is spent.
    """
    if min_rounds < 1 or max_rounds < min_rounds:
        raise ValueError(f"need 1 ≤ min_rounds ≤ max_rounds, got {min_rounds}, {max_rounds}")
    if rounds_done < min_rounds:
        return None if budget_left else "budget"
    if steps:
        last = steps[-1]
        if last.best is not None and len(last.active) == 1:
            return "one best left"
        recent = steps[-STABLE_ROUNDS:]
        if (len(recent) == STABLE_ROUNDS and not last.contenders and last.best is not None
                and all(s.top_group == last.top_group for s in recent)):
            return "stable tied group"
    if rounds_done >= max_rounds:
        return "max rounds"
    if not budget_left:
        return "budget"
    return None
