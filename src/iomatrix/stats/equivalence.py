"""Equivalence: two one-sided tests (TOST) that two cells are within the margin of practical
    equivalence.

A cell c is *equivalent* to a reference b (the best, or what the user runs) when the data show that
neither is better than the other by more than the margin θ (the role's margin of practical
equivalence; 5 % by default). On the paired comparison of the two over the rounds both ran
(stats/paired.py: d = ln(c/b) averaged over the shared rounds, its SE on df = n − 1), with the
margin as log-ratio bounds

    higher is better:  L = ln(1 − θ),      U = −ln(1 − θ)     (c/b in [1 − θ, 1/(1 − θ)])
    lower is better:   L = ln(1/(1 + θ)),  U = ln(1 + θ)      (c/b in [1/(1 + θ), 1 + θ])

    p_low  = P(T_df ≥ (d − L)/SE)      H0: d ≤ L  (c worse than b by more than θ)
    p_high = P(T_df ≤ (d − U)/SE)      H0: d ≥ U  (c better than b by more than θ)
    p = max(p_low, p_high);  equivalent when p < level

(Schuirmann 1987). ``level`` is the level of the pair's look (stats/looks.py: α spent over the
race's looks), so repeated looks at a pair do not call it equivalent more often than α overall,
exactly as they do not call it different more often. TOST at ``level`` is the same as the (1 −
2·level) interval exp(d ± t_{1−level,df}·SE) lying inside the margin; that interval is what a report
quotes with the word "equivalent".

Worked example (higher is better, θ = 5 %, α = 0.02): 10 shared rounds with d = 0.01, SE = 0.012,
df = 9; L = −0.051293, U = 0.051293: p_low = P(T_9 ≥ 5.11) = 0.00032, p_high = P(T_9 ≤ −3.44) =
0.00369, p = 0.00369. The look (the 8th, 10 − 3 + 1) is at ℓ* = 0.00240, like every look from 3 to
30 shared rounds: p ≥ level, not yet equivalent; with SE = 0.010, p_high = P(T_9 ≤ −4.13) = 0.00128
< 0.00240: equivalent, interval exp(0.01 ± 3.716·0.010) = 0.973–1.048 (t_{1−0.00240, 9} = 3.716).

Fewer than 2 shared rounds give no SE: not equivalent (p = 1). SE = 0 decides exactly: d strictly
inside (L, U) → p = 0.

Rounds to show equivalence (``rounds_to_show_equivalent``), the observed d taken as the true one:
TOST passes when both one-sided tests do, and the nearer bound binds, so it is the one-sided test of
the gap g = min(d − L, U − d) at the look's level with the given power (stats/looks.py:
rounds_needed), per-run SD s on the log scale (the pair's own: SE·√n/√2):

    n ≥ ((z_{1−level(n)} + z_{power}) · √2 · s / g)²       none when g ≤ 0 (d outside the margin)

Worked example: d = 0.01, s = 0.03, 5 rounds done, θ = 5 % higher is better, α = 0.02: g =
0.051293 − 0.01 = 0.041293; every n up to 30 has the level ℓ* = 0.00240, z_{1−ℓ*} = 2.820, so
((2.820 + 0.842)·√2·0.03/0.041293)² = 14.15 for each: n = 15, 10 more rounds."""

from __future__ import annotations

import math
from dataclasses import dataclass

from iomatrix.stats import special
from iomatrix.stats.looks import DECISION_ALPHA, rounds_needed

DEFAULT_MARGIN = 0.05


@dataclass(frozen=True)
class Tost:
    p_value: float  # max of the two one-sided p-values
    level: float  # the level it had to reach
    low: float | None  # the (1 − 2·level) interval of the ratio c/b; None without an SE
    high: float | None

    @property
    def equivalent(self) -> bool:
        return self.p_value < self.level


def check_margin(margin: float) -> float:
    """The margin as a fraction in (0, 1); a ValueError names it otherwise (callers turn it into a
    UserError)."""
    if not (isinstance(margin, int | float) and 0.0 < margin < 1.0):
        raise ValueError(f"margin of practical equivalence {margin!r} is not a fraction in (0, 1)")
    return float(margin)


def log_bounds(margin: float, higher_is_better: bool) -> tuple[float, float]:
    """(L, U): the log ratios c/b between which neither cell is better than the other by more than
    ``margin``."""
    if higher_is_better:
        return math.log(1.0 - margin), -math.log(1.0 - margin)
    return -math.log(1.0 + margin), math.log(1.0 + margin)


def tost(
    ratio: float | None,
    se_log: float | None,
    df: float | None,
    level: float,
    margin: float,
    higher_is_better: bool,
) -> Tost:
    """TOST of the ratio c/b (``ratio`` = exp(d), ``se_log`` its SE on ``df``) against ``margin`` at
    ``level``."""
    # scipy.stats.t's own functions (t._sf, t._cdf, t._ppf: stdtr, stdtrit), without importing
    # scipy.stats: ~1 s of CPU per process (issue 52); stats/special.py.
    stdtr, stdtrit = special.stdtr, special.stdtrit

    lo_b, hi_b = log_bounds(check_margin(margin), higher_is_better)
    if (
        ratio is None
        or not ratio > 0
        or not math.isfinite(ratio)
        or se_log is None
        or not df
        or level <= 0
    ):
        return Tost(1.0, level, None, None)
    d = math.log(ratio)
    if se_log == 0.0:
        inside = lo_b < d < hi_b
        return Tost(0.0 if inside else 1.0, level, ratio, ratio)
    p_low = float(stdtr(df, -((d - lo_b) / se_log)))  # t.sf(x, df)
    p_high = float(stdtr(df, (d - hi_b) / se_log))  # t.cdf(x, df)
    q = float(stdtrit(df, 1.0 - min(level, 0.5)))  # t.ppf(q, df)
    return Tost(max(p_low, p_high), level, math.exp(d - q * se_log), math.exp(d + q * se_log))


def rounds_to_show_equivalent(
    effect_log: float,
    sd_log: float | None,
    rounds_done: int,
    margin: float,
    higher_is_better: bool,
    alpha: float = DECISION_ALPHA,
    power: float = 0.8,
) -> int | None:
    """More rounds (≥ 1) after which TOST would show the pair within ``margin`` with the given
    power, its observed log ratio ``effect_log`` taken as the true one (module docstring); None when
    it cannot be estimated (no SD, or the observed ratio outside the margin: more rounds would not
    show it inside)."""
    lo_b, hi_b = log_bounds(check_margin(margin), higher_is_better)
    gap = min(effect_log - lo_b, hi_b - effect_log) if math.isfinite(effect_log) else 0.0
    if sd_log is None or gap <= 0:
        return None
    return rounds_needed(gap, sd_log, rounds_done, alpha, power, two_sided=False)
