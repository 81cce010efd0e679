"""Worse than the best: one-sided comparisons with the best (Hsu's MCB), the test that separates.

A cell c is *separated* from the best B when the data show it is not as good as B. The question a
user asks of an answer is one-sided ("is the pick better than the others?"), and only the k − 1
comparisons with the best decide it, so the family is those k − 1 one-sided tests, not the
k(k − 1)/2 two-sided ones of every pair (Hsu 1984, multiple comparisons with the best; Hsu 1996,
*Multiple Comparisons*, ch. 4). For each c ≠ B, with d = ln(centre(c)/centre(B)) and its SE and df
from the pair's paired comparison (stats/blocked.py: the paired t on log ratios, the variance
moderated over the race, stats/moderated.py):

    higher is better:  H0: d ≥ 0   t = d/SE,   p = P(T_df ≤ t)
    lower is better:   H0: d ≤ 0   t = d/SE,   p = P(T_df ≥ t)

Holm over the k − 1 (stats/holm_stepdown.py); c is separated when its adjusted p is below half the
level ℓ of the pair's look (stats/looks.py: α spent over the race, one constant ℓ* at every look
from 3 to 30 shared rounds, 0.00240 at α = 0.02). This
is stats/ruling_out.py's non-superiority test with the margin at 0: "c is not better than B" rather
than "c is not better than B by more than θ"; the practical threshold still applies (a cell within
θ of the best is tied whatever the test says, stats/decision.py).

Why half the level. B is chosen by the data, so each one-sided test is taken in the direction the
data favour: for two identical cells, P(the one behind is separated) = P(|t| > t_{1−ℓ/2}) = ℓ,
exactly the two-sided test's rate at ℓ. With k identical cells a pair (i, j) is called different
only with one of them the best and the other's adjusted p < ℓ/2, i.e. its raw one-sided p below
ℓ/(2(k − 1)): at most ℓ/(k − 1) for each pair, and k·ℓ/2 for any pair of the race. What it gains:
the two-sided family of every pair asks p₂ < ℓ/(k(k−1)/2) at its first step, this one p₂ < ℓ/(k−1)
(p₂ = 2·p₁, the two-sided p): k/2 times the level, 3 times at 6 cells, 2 times at quick's 4.

Worked example (higher is better, α = 0.02): a race of 3 cells at its first look (3 shared rounds,
ℓ = ℓ* = 0.00240). c1's log differences to B are −0.505, −0.48, −0.455 (SD 0.025): d = −0.48, SE =
0.025/√3 = 0.014434 on 2 df, t = −33.26, p = P(T_2 ≤ −33.26) = ½(1 − |t|/√(t² + 2)) = 0.000451; c2
(d = −0.02, SD 0.2) has p = 0.44. Holm over the two: 0.000451 · 2 = 0.00090 < ℓ/2 = 0.00120: c1 is
separated, 38 % behind. The two-sided family of every pair asks 2 · 0.000451 · 3 = 0.00271 ≥
0.00240: not yet.

Only the parametric model gives d an SE on the log scale: with Friedman–Conover (non-normal
residuals) or the Welch fallback, the two-sided test of stats/blocked.py is all there is."""

from __future__ import annotations

from collections.abc import Iterable

from iomatrix.stats.blocked import BlockedAnalysis
from iomatrix.stats.ruling_out import ruled_out_p


def worse_than_best_p(
    analysis: BlockedAnalysis | None, best: str, others: Iterable[str], higher_is_better: bool
) -> dict[str, float]:
    """Holm-adjusted one-sided p of "c is at least as good as ``best``" for each of ``others``
    (all k − 1 cells but the best, for the family to be the one above); empty unless the
    analysis is the parametric blocked model."""
    return ruled_out_p(analysis, best, [c for c in others if c != best], higher_is_better, 0.0)
