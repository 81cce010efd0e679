"""Ruling out: the cells the data show cannot beat the best by more than the practical threshold θ.

For a cell c behind the best B, with d = ln(centre(c)/centre(B)), its standard error SE and df from
the parametric blocked model (stats/blocked.py: the two-way additive model on log values, round as
block), c would be the better choice only beyond the margin

    higher is better:  δ = −ln(1 − θ)   H0: d ≥ δ    t = (d − δ)/SE,   p = P(T_df ≤ t)
    lower is better:   δ = −ln(1 + θ)   H0: d ≤ δ    t = (d − δ)/SE,   p = P(T_df ≥ t)

a one-sided t-test: the non-inferiority half of TOST (Schuirmann 1987) read from the best's side,
the indifference zone of ranking-and-selection procedures. The family's p-values are Holm-adjusted
(stats/holm_stepdown.py), like the significance tests that separate cells, and a cell is *ruled out*
when its adjusted p < α: whatever its true value, choosing B loses at most θ against it, so how much
worse it really is does not change the answer.

With one cell, 3 rounds and log differences −0.12, −0.08, −0.04 to the best (higher is better, θ =
5%): d = −0.08, SE = 0.04/√3 = 0.023094 on 2 df, δ = 0.051293, t = −5.6852, p = P(T_2 ≤ −5.6852) =
0.01479 < 0.05: ruled out. With twice the spread (−0.16, −0.08, 0.0): SE = 0.046188, t = −2.8426, p
= 0.05234: not ruled out, the data cannot tell.

Only the parametric model gives d an SE on the log scale: with Friedman–Conover (non-normal
residuals) or the Welch fallback (fewer than 2 complete rounds) nothing is ruled out.

**Rounds to rule out** a cell whose observed d is the true one, with s the residual SD of the logs
(the difference of two cells in one round has SD √2·s), for the one-sided test at α with the given
power:

    n = ⌈ ((z_{1−α} + z_{power}) · √2 · s / |d − δ|)² ⌉   rounds per cell in all

(normal approximation, α not split by Holm: a lower bound, like stats/decision.py's rounds to
separate); None when d lies beyond δ (the cell may be better by more than θ: no number of rounds
rules it out) or s is unknown."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from iomatrix.stats import special
from iomatrix.stats.blocked import BlockedAnalysis, BlockedPair
from iomatrix.stats.holm_stepdown import holm
from iomatrix.stats.looks import rounds_needed


def margin(threshold: float, higher_is_better: bool) -> float:
    """δ: the log ratio centre(c)/centre(best) beyond which c is better than the best by more than
    θ."""
    return -math.log(1.0 - threshold) if higher_is_better else -math.log(1.0 + threshold)


def _p_one_sided(d: float, se: float, df: float, delta: float, higher_is_better: bool) -> float:
    if se == 0.0:  # an exact fit: the data decide without error
        return 0.0 if (d < delta if higher_is_better else d > delta) else 1.0
    t = (d - delta) / se
    # t.cdf and t.sf are scipy.special.stdtr (t._cdf, t._sf), without importing scipy.stats (~1 s
    # of CPU per process, issue 52) nor scipy.special's package (stats/special.py)
    return float(special.stdtr(df, t) if higher_is_better else special.stdtr(df, -t))


def non_superiority(
    pairs: Mapping[str, BlockedPair], higher_is_better: bool, threshold: float
) -> dict[str, float]:
    """Holm-adjusted one-sided p-values of "c is better than the best by more than θ", for every
    cell of ``pairs`` (each the comparison oriented c versus the best) the parametric model gives an
    SE; the rest are left out."""
    delta = margin(threshold, higher_is_better)
    raw: dict[str, float] = {}
    for name, pr in pairs.items():
        if pr.se_log is None or pr.df is None or not pr.ratio > 0 or not math.isfinite(pr.ratio):
            continue
        raw[name] = _p_one_sided(math.log(pr.ratio), pr.se_log, pr.df, delta, higher_is_better)
    return dict(zip(raw, holm(list(raw.values())), strict=True))


def ruled_out_p(
    analysis: BlockedAnalysis | None,
    best: str,
    behind: Iterable[str],
    higher_is_better: bool,
    threshold: float,
) -> dict[str, float]:
    """``non_superiority`` over the cells ``behind`` the best (the family: behind by more than θ,
    not significantly), each compared with ``best`` in ``analysis``; empty unless that is the
    parametric blocked model."""
    if analysis is None or not analysis.blocked:
        return {}
    pairs = {n: analysis.pair(n, best) for n in behind if n in analysis.centre}
    return non_superiority(pairs, higher_is_better, threshold)


def rounds_to_rule_out(
    effect_log: float,
    sd_log: float | None,
    rounds_done: int,
    threshold: float,
    higher_is_better: bool,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int | None:
    """More rounds (≥ 1) after which the one-sided test would rule the cell out with the given
    power, its observed log ratio ``effect_log`` taken as the true one (module docstring); None when
    it cannot be estimated."""
    delta = margin(threshold, higher_is_better)
    gap = (delta - effect_log) if higher_is_better else (effect_log - delta)
    if sd_log is None or not math.isfinite(effect_log) or gap <= 0:
        return None
    return rounds_needed(gap, sd_log, rounds_done, alpha, power, two_sided=False)
