"""Racing (F-race / irace style) as a repetition policy: pure decisions for the scheduler.

After every round the scheduler passes, per unit of one workload, the
(round, value) pairs measured so far.  ``race_step``:

1. compares the units with ``blocked_analysis``: each pair over the rounds both
   ran with its own variance (stats/paired.py), Holm over the family, each pair
   judged at the level of its look (stats/looks.py: α spent over the race's
   looks, so that identical units are called different at most α of the time
   however many rounds the race takes); Welch with fewer than 2 complete rounds;
2. the *current best* B is the unit with the best centre (geometric mean);
3. a unit is **eliminated** when it is significantly worse than the best
   (Holm-adjusted p below its look's level) *and* its gap exceeds the practical
   threshold θ:
   gap = 1 − centre/best (higher is better) or centre/best − 1 (lower is better);
   or when its gap exceeds θ and the one-sided test of stats/ruling_out.py
   (Holm over the units behind by more than θ but not significantly) shows it
   cannot be better than the best by more than θ (the decision rule's *ruled
   out*): more runs could only tell how much worse it is, which does not
   change the answer;
4. a unit is **equivalent** to the best (TOST, Schuirmann 1987; stats/equivalence.py)
   when the (1 − 2ℓ) confidence interval of its ratio to the best, r =
   centre(u)/centre(B), lies inside the equivalence margin (θ, or the
   workload's role's margin when ``margin`` is given, as its decision uses
   it; written θ below), ℓ the level of the pair's look (stats/looks.py, as
   for separating: the decision rule's own test, so a unit the race stops as
   equivalent is one the answer calls equivalent): whichever of the two is
   really better, the other is within θ of it:

       higher is better:  1 − θ ≤ r_low  and  r_high ≤ 1/(1 − θ)
       lower is better:   1/(1 + θ) ≤ r_low  and  r_high ≤ 1 + θ

   The interval comes from the pair's paired comparison on log values
   (``blocked_analysis(..., allow_nonparametric=False)``: exp(d̄ ±
   t_{1−ℓ,df}·SE) over the rounds both ran); it is a per-pair test, not
   corrected over the family (each equivalence stops one unit; the final
   answer is decided again from all the data by stats/decision.py).
   An equivalent unit stops being repeated: the tie is settled;
5. a **contender** (neither eliminated, equivalent, nor within θ by its point
   estimate) is **futile** when it cannot be separated from the best in the
   rounds left (``rounds_left``: what ``max`` and the time budget still allow).
   With d = |ln r| the observed effect and s the pair's own per-run SD on the
   log scale (SE·√n/√2 of its paired comparison), the decision rule's estimate
   (``stats.decision.rounds_to_separate``) at power ``FUTILITY_POWER`` = 0.5:
   the first n with

       n ≥ ((z_{1−level(n)/2} + z_{0.5}) · √2 · s / d)² = (z_{1−level(n)/2} · √2 · s / d)²

   rounds per cell in all, i.e. the rounds after which the observed difference,
   if it is the true one, would just reach significance; or, when fewer, the
   rounds after which the one-sided test of stats/ruling_out.py would just
   rule it out (``rounds_to_rule_out`` at the same power, one-sided against
   |d − δ|, δ the margin; a unit well behind is ruled out long before it is
   separated).  extra = n − rounds
   done; futile when extra > rounds_left > 0: even at ``max`` neither test would more
   likely than not settle it, so the runs are not spent and
   the pair is reported as "not separable within the budget" (with no round
   left, ``max`` or the budget stops the unit anyway, under its own reason).  The estimate
   ignores Holm's split, so it is a lower bound and the stop errs towards
   running on.  No estimate (s unknown: the Welch fallback) → no
   futility stop;
6. units the report needs as **baselines** (e.g. the bare-metal reference of a
   guest cell) are never eliminated; they are marked ``"baseline: keep min runs"``
   and the scheduler runs them only up to the minimum;
7. the *top group* is the best plus every unit within θ of it by its point
   estimate (stats/decision.py's rule), and ``contenders`` are the units still
   racing that are neither eliminated nor in the top group.

Nothing is decided before ``min_rounds`` complete rounds.  ``stop_reason`` says
when the race for a workload is over.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.blocked import BlockedAnalysis, BlockedPair, blocked_analysis
from iomatrix.stats.decision import (
    equivalence_margin,
    gap_to_best,
    pair_sd,
    rounds_to_separate,
    rounds_to_settle,
)
from iomatrix.stats.equivalence import tost
from iomatrix.stats.looks import DECISION_ALPHA, look_index
from iomatrix.stats.ruling_out import ruled_out_p
from iomatrix.stats.worse_than_best import worse_than_best_p

# equivalence_margin: stats/__init__.py exports it from here.
__all__ = ["equivalence_margin", "race_step", "stop_reason"]

FUTILITY_POWER = 0.5
STATUSES = ("keep", "eliminated", "baseline", "equivalent", "futile")


@dataclass(frozen=True)
class Elimination:
    unit: str
    status: str  # one of STATUSES
    reason: str  # e.g. "significantly worse than X by 38% (p=0.002 > threshold 5%)"


@dataclass(frozen=True)
class RaceStep:
    best: str | None
    decisions: tuple[Elimination, ...]
    top_group: frozenset[str]
    contenders: frozenset[str]  # still racing, neither eliminated nor within θ of the best
    method: str  # the analysis used ("rcbd-anova", "friedman-conover", "welch", or "none")
    rounds_left: int | None = None  # what max and the budget still allowed when this step was taken

    def _with(self, status: str) -> tuple[str, ...]:
        return tuple(d.unit for d in self.decisions if d.status == status)

    @property
    def eliminated(self) -> tuple[str, ...]:
        return self._with("eliminated")

    @property
    def equivalent(self) -> tuple[str, ...]:
        """Stopped as practically equivalent to the best (TOST)."""
        return self._with("equivalent")

    @property
    def futile(self) -> tuple[str, ...]:
        """Stopped because the rounds left cannot separate them from the best."""
        return self._with("futile")

    @property
    def active(self) -> tuple[str, ...]:
        """Units still racing (not stopped, not a baseline)."""
        return self._with("keep")


def _check(threshold: float, alpha: float) -> None:
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be a fraction in [0, 1), got {threshold}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")


def race_step(
    data: Mapping[str, Sequence[tuple[int, float]]],
    higher_is_better: bool,
    threshold: float = 0.05,
    alpha: float = DECISION_ALPHA,
    baselines: Collection[str] = (),
    min_rounds: int = 3,
    rounds_left: int | None = None,
    margin: float | None = None,
) -> RaceStep:
    """One racing decision over the units of one workload (see the module docstring).

    ``rounds_left``: rounds the race may still run (None = unlimited: no futility stop). ``margin``:
    the margin of practical equivalence of step 4 (the workload's role's, as its decision uses;
    None: θ)."""
    _check(threshold, alpha)
    units = list(data)
    base = set(baselines)

    def keep_all(why: str) -> RaceStep:
        ds = tuple(
            Elimination(
                u,
                "baseline" if u in base else "keep",
                "baseline: keep min runs" if u in base else why,
            )
            for u in units
        )
        return RaceStep(
            None, ds, frozenset(u for u in units if u not in base), frozenset(), "none", rounds_left
        )

    racing = [u for u in units if u not in base]
    if len(racing) < 2:
        return keep_all("nothing to race against")
    rounds_per_unit = {u: {r for r, _ in data[u]} for u in racing}
    complete = set.intersection(*rounds_per_unit.values())
    if len(complete) < min_rounds:
        return keep_all(f"{len(complete)} complete round(s) < minimum {min_rounds}")
    sub = {u: data[u] for u in racing}
    an = blocked_analysis(sub, alpha)
    # The equivalence interval: parametric, at 1 − 2α (a TOST at α).
    eq_an = blocked_analysis(sub, alpha, confidence=1.0 - 2.0 * alpha, allow_nonparametric=False)
    sign = -1.0 if higher_is_better else 1.0
    best = min(racing, key=lambda u: (sign * an.centre[u], u))
    rules = _Rules(
        threshold,
        alpha,
        higher_is_better,
        rounds_left,
        len(complete),
        threshold if margin is None else margin,
    )
    ruled = _ruled_out(an, racing, best, rules)
    # one-sided against the best, Holm over the k − 1 (stats/worse_than_best.py)
    worse = worse_than_best_p(an, best, racing, higher_is_better)
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
        decision, place = _judge(u, best, an, eq_an, (ruled, worse), rules)
        decisions.append(decision)
        if place == "top":
            top.add(u)
        elif place == "contender":
            contenders.add(u)
    return RaceStep(
        best, tuple(decisions), frozenset(top), frozenset(contenders), an.method, rounds_left
    )


@dataclass(frozen=True)
class _Rules:
    threshold: float
    alpha: float
    higher_is_better: bool
    rounds_left: int | None
    rounds_done: int
    margin: float  # of practical equivalence (step 4)


def _ruled_out(
    an: BlockedAnalysis, racing: Sequence[str], best: str, rules: _Rules
) -> dict[str, float]:
    """The non-superiority family (stats/ruling_out.py): the units behind by more than θ yet not
    significantly, with their Holm-adjusted p (parametric model only)."""
    pairs = {u: an.pair(u, best) for u in racing if u != best}
    behind = [
        u
        for u, pr in pairs.items()
        if not pr.significant and gap_to_best(pr.ratio, rules.higher_is_better) > rules.threshold
    ]
    return ruled_out_p(an, best, behind, rules.higher_is_better, rules.threshold)


def _judge(
    u: str,
    best: str,
    an: BlockedAnalysis,
    eq_an: BlockedAnalysis,
    tests: tuple[Mapping[str, float], Mapping[str, float]],
    rules: _Rules,
) -> tuple[Elimination, str]:
    """One unit against the best (steps 3–5 of the module docstring): its decision, and "top"
    (within θ or equivalent), "contender" (still racing outside the top group) or "" (stopped)."""
    alpha, pct = rules.alpha, f"{rules.threshold:.0%}"
    pr = an.pair(u, best)
    gap = gap_to_best(pr.ratio, rules.higher_is_better)
    level = (
        f"{pr.level:.2g}, the level of look {look_index(pr.paired_rounds)} of α={alpha:g}: "
        f"{pr.paired_rounds} shared rounds"
    )
    ruled, worse = tests
    one_sided = worse.get(u, 1.0)
    if not pr.significant and one_sided < pr.level / 2 and gap > rules.threshold:
        return Elimination(
            u,
            "eliminated",
            f"significantly worse than {best} by {gap:.0%} (one-sided against the best, Holm "
            f"p={one_sided:.2g} < half {level}; threshold {pct})",
        ), ""
    if pr.significant and gap > rules.threshold:
        return Elimination(
            u,
            "eliminated",
            f"significantly worse than {best} by {gap:.0%} "
            f"(Holm p={pr.p_adjusted:.2g} < {level}; threshold {pct})",
        ), ""
    if u in ruled and ruled[u] < pr.level and not _separable_soon(pr, rules):
        # Stops the race for u; it does not make the best "the answer" over u (stats/decision.py).
        return Elimination(
            u,
            "eliminated",
            f"cannot be more than {pct} better than {best}: {gap:.0%} behind "
            f"(one-sided test against that margin, Holm p={ruled[u]:.2g} < "
            f"{level})",
        ), ""
    # the parametric paired comparison (the omnibus test may be Friedman's)
    eq = eq_an.pair(u, best)
    t = tost(eq.ratio, eq.se_log, eq.df, eq.level, rules.margin, rules.higher_is_better)
    if t.equivalent and t.low is not None and t.high is not None:
        return Elimination(
            u,
            "equivalent",
            f"equivalent to {best}: ratio {eq.ratio:.3f}, "
            f"{(1 - 2 * eq.level) * 100:.4g}% CI {t.low:.3f}–{t.high:.3f} "
            f"within ±{rules.margin:.0%} (TOST at {level})",
        ), "top"
    if gap <= rules.threshold:
        return Elimination(u, "keep", f"within {pct} of {best}"), "top"
    # Even odds (FUTILITY_POWER) of settling it: separated or ruled out (stats/decision.py:
    # rounds_to_settle).
    extra = rounds_to_settle(
        ratio=pr.ratio,
        sd_log=pair_sd(pr),
        rounds_done=pr.paired_rounds or rules.rounds_done,
        alpha=alpha,
        threshold=rules.threshold,
        higher_is_better=rules.higher_is_better,
        can_rule_out=pr.se_log is not None,
        power=FUTILITY_POWER,
    )
    left = rules.rounds_left
    # With no round left, max or the budget stops the unit anyway, and says so.
    if left is not None and left > 0 and extra is not None and extra > left:
        return Elimination(
            u,
            "futile",
            f"not separable from {best} within the budget: {gap:.0%} behind "
            f"(Holm p={pr.p_adjusted:.2g}); about {extra} more round(s) needed "
            f"for even odds of separating them or ruling it out, {left} left",
        ), ""
    return Elimination(
        u, "keep", f"{gap:.0%} behind {best} but not significantly (Holm p={pr.p_adjusted:.2g})"
    ), "contender"


def _separable_soon(pr: BlockedPair, rules: _Rules) -> bool:
    """A unit shown unable to beat the best by θ (ruled out) runs on while the rounds left would
    more likely than not also separate it (FUTILITY_POWER, ``rounds_to_separate``): ruled out,
    the answer can only say "cannot be more than θ better"; separated, it says "decided".
    A cell 38 % behind on 3 rounds (2 df) is ruled out at once, yet separated two rounds later; it
    used to stop at the first, and the quickstart's answers stayed undecided (issue 71)."""
    left = rules.rounds_left
    if not left or left <= 0 or pr.ratio is None or not pr.ratio > 0:
        return False
    extra = rounds_to_separate(
        math.log(pr.ratio), pair_sd(pr), pr.paired_rounds, rules.alpha, FUTILITY_POWER
    )
    return extra is not None and extra <= left


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
    * only the best is still racing (every other unit eliminated, equivalent or futile, in this
      or an earlier step):
      ``"not separable within the budget"`` when any unit stopped as futile,
      else ``"tied group settled"`` when any stopped as equivalent, else ``"one best left"``;
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
            if any(s.futile for s in steps):
                return "not separable within the budget"
            if any(s.equivalent for s in steps):
                return "tied group settled"
            return "one best left"
        recent = steps[-STABLE_ROUNDS:]
        if (
            len(recent) == STABLE_ROUNDS
            and not last.contenders
            and last.best is not None
            and all(s.top_group == last.top_group for s in recent)
        ):
            return "stable tied group"
    if rounds_done >= max_rounds:
        return "max rounds"
    if not budget_left:
        return "budget"
    return None


STOPPED = ("eliminated", "equivalent", "futile")
SETTLED = ("eliminated", "equivalent")  # against the leader: no deciding pair left (deciding.py)


@dataclass(frozen=True)
class Replay:
    """A race replayed on stored rounds (``replay_race``)."""

    steps: tuple[RaceStep, ...]  # one per round looked at, oldest first
    data: dict[str, list[tuple[int, float]]]  # each unit's rounds up to its stop: what the race ran
    stopped: dict[str, tuple[int, Elimination]]  # unit → (the round it stopped at, why)
    rounds: int  # the rounds the race ran
    reason: str | None  # stop_reason's, or None when the stored rounds ran out first


def replay_race(
    data: Mapping[str, Sequence[tuple[int, float]]],
    higher_is_better: bool,
    max_rounds: int,
    threshold: float = 0.05,
    alpha: float = DECISION_ALPHA,
    min_rounds: int = 3,
    margin: float | None = None,
    deciding_run_on: bool = False,
) -> Replay:
    """Race units whose every round is already measured (a fixed-round sweep, captured): after each
    round r (the stored round numbers in order, at most ``max_rounds``), ``race_step`` on the rounds
    up to r of the units still racing, the stopped units keeping the rounds they ran; a unit
    stopped (eliminated, equivalent or futile) runs no more, and the race ends when ``stop_reason``
    says so. What a sweep of ``max_rounds`` would have decided on this data, without its timing:
    how calibration benches re-judge stored sweeps (bench/rejudge.py) with today's rule.

    ``deciding_run_on``: as a sweep with a precision phase runs it (stats/deciding.py, the
    scheduler's deciding pairs): a unit stops only once settled against the leader (eliminated or
    equivalent); a futile or tied one runs on beside the leader, and the replay ends when no more
    than one unit is unsettled, or at ``max_rounds``.

    Example: units a, b with rounds 1–9 and a 30 % gap: race_step after round 3 eliminates b
    against a, a alone is left, ``reason`` "one best left", ``rounds`` 3, ``data["b"]`` rounds 1–3.
    """
    rounds = sorted({r for pts in data.values() for r, _ in pts})[:max_rounds]
    stopped: dict[str, tuple[int, Elimination]] = {}
    steps: list[RaceStep] = []
    reason: str | None = None
    done = 0
    ends = SETTLED if deciding_run_on else STOPPED
    for done, r in enumerate(rounds, start=1):
        step = race_step(
            _ran(data, stopped, r),
            higher_is_better,
            threshold,
            alpha,
            min_rounds=min_rounds,
            rounds_left=max_rounds - done,
            margin=margin,
        )
        steps.append(step)
        for d in step.decisions:
            if d.status in ends and d.unit not in stopped:
                stopped[d.unit] = (r, d)
        if deciding_run_on:
            reason = _all_settled(step, stopped, done, max_rounds)
        else:
            reason = stop_reason(steps, done, max_rounds, True, min_rounds)
        if reason is not None:
            break
    ran = _ran(data, stopped, rounds[done - 1] if done else 0)
    return Replay(tuple(steps), ran, stopped, done, reason)


def _ran(
    data: Mapping[str, Sequence[tuple[int, float]]],
    stopped: Mapping[str, tuple[int, Elimination]],
    last: int,
) -> dict[str, list[tuple[int, float]]]:
    """Each unit's rounds up to ``last``, or up to the round it stopped at."""
    return {
        u: [(rr, v) for rr, v in pts if rr <= (stopped[u][0] if u in stopped else last)]
        for u, pts in data.items()
    }


def _all_settled(
    step: RaceStep, stopped: Mapping[str, tuple[int, Elimination]], done: int, max_rounds: int
) -> str | None:
    """Why a replay with the deciding pairs running on ends: at most one unit unsettled, or
    ``max_rounds``; None to go on."""
    left = [d for d in step.decisions if d.unit not in stopped]
    if step.best is not None and len(left) <= 1:
        return "every pair settled"
    return "max rounds" if done >= max_rounds else None
