"""One axis decided on its own (issue 71, "an answer per axis"): the main effect of one level
against another over every stratum of the other axes (stats/main_effects.py), judged by the rule the
pairs are judged by: its variance moderated toward the race's (stats/moderated.py), its look's
level (stats/looks.py), equivalence by a TOST at that level (stats/equivalence.py).

A quickstart varies format × cache. "Which cache mode?" has one answer for both formats when the
interaction is small, and that answer may use both formats' rounds: the strata-averaged log ratio
D_j = Σ_s (ln a_sj − ln b_sj)/S of each round j (main_effects.py), J rounds, sample variance s_D²
on J − 1 df.

**Moderation.** The race's pairs have fitted a cell-variance model v_i and a prior (s₀², d₀)
about it (stats/moderated.py: each pair's shape h = v_a + v_b). D_j averages S independent
differences, so its shape is h_D = Σ_s (v_{a,s} + v_{b,s}) / S², and

    s̃_D² = (d₀' s₀² h_D + (J − 1) s_D²) / (d₀' + J − 1)   on d₀' + J − 1 df,
    d₀' = min(d₀, df_resid − (J − 1))                     (no more df than the race holds)
    SE = s̃_D/√J,  t = D̄/SE,  p two-sided

Without a prior (d₀ = 0, or the cells' variances undetermined) s_D² on J − 1 df, as main_effects.

**The rule.** The level is the look's (stats/looks.py, at J shared rounds), divided by the
``family`` of axis comparisons the caller makes for one answer (Bonferroni: the axis lines add
tests beside the pairs' own family). Then:

* the interaction is small (main_effects.py) and p < level → ``decided``: the better level is
  named (a if D̄ > 0 for a higher-is-better figure);
* the interaction is small and a TOST within ``margin`` at the level → ``equivalent``;
* the interaction is small, else → ``open``: not told apart at this resolution; the interval (at
  ``confidence``) is what the sweep reached;
* the interaction is *quantitative* at most — its F test does not reject, and every stratum's own
  ratio lies on the same side of 1 as the common one, but some lie farther than the margin from it
  — and p < level → ``decided`` with ``by_stratum``: the same level is better in every stratum, by
  amounts that differ, and the line says each stratum's ratio. Why it holds: the paired t on D_j
  tests the strata-averaged effect whatever the interaction (each round's D_j is one observation,
  the strata's differences included in its swing), so its error rate is the pairs'. What an
  interaction can make wrong is the *direction* in one stratum (a qualitative interaction, Gail &
  Simon 1985: the one kind that changes which level to pick), and a stratum whose estimate points
  the other way, or an F test that rejects, sends the axis to the cells. Equivalence is never
  claimed this way: an average near 1 over strata that differ by more than the margin is not
  "within the margin" in each;
* otherwise → ``per_cell``: one answer does not fit every stratum, the cells' own pairwise
  decisions stand.

Why not the margin alone: estimates of two strata land apart by chance, and by more on a tail
latency. In the 09:41 quickstart batch writeback's p99 against cache=none was 0.41–0.61× by
format, the two formats 1–17 % apart; "every stratum within 5 % of the common ratio" sent the
cache axis to the cells in 3 of 5 runs, and in 2 of those a cell's own pair was not decided. By
this rule one of the two is decided (strata 12 % apart, F p 0.67); the other's F test rejects
(p 0.001 on 3 rounds), and it stays per cell (docs/benchmarks-history.md, 2026-11-28 09:41).

Worked example (cache writeback a against none b, strata raw and qcow2, 3 rounds, higher is
better, no prior): raw d = 0.20, 0.25, 0.15; qcow2 d = 0.22, 0.18, 0.20 → D̄ = 0.2, SE = 0.012583
on 2 df, t = 15.894, p = 0.0039, writeback 1.22× (1.16–1.29) cache=none; decided where p is below
the first look's level over the family (2 axes: half of it). The same with a prior s₀² = 1, d₀ = 4,
df_resid = 6 and cell variances 0.0005 each (h_D = 4 · 0.0005 / 4 = 0.0005): s_D² = 0.000475,
s̃_D² = (4 · 0.0005 + 2 · 0.000475)/6 = 0.00049167 on 6 df, SE = 0.012802, t = 15.62, p =
4.4e-6: decided with more to spare.

Quantitative example: raw d = 0.80, 0.95, 0.70, 0.90; qcow2 d = 0.60, 0.75, 0.55, 0.70 (writeback
2.31× and 1.92× cache=none): D = 0.70, 0.85, 0.625, 0.80, D̄ = 0.74375, s_D = 0.1008, t = 14.76 on 3
df, p = 0.00067; interaction: d̄ 0.8375 and 0.65, SS_strata = 4 · 2 · 0.09375² = 0.0703, SS_resid =
0.00094, F = 225 on 1 and 3 df, p = 0.00064: the interaction is shown, per cell. With the qcow2
rounds in another order (0.75, 0.60, 0.70, 0.55): D = 0.775, 0.775, 0.70, 0.725, s_D = 0.0375, t =
39.7, p = 3.5e-5; SS_resid = 0.0534, F = 3.9, p = 0.14: not shown, both strata point the same way,
and 2.31× and 1.92× lie 10 % and 9 % off the common 2.10× (beyond the 5 % margin): decided by
stratum, as p is below the first look's level.

Edge cases: as main_effects (ValueError with fewer than 2 strata or rounds); before the first look
(J < 3) the level is 0 and nothing is decided or shown equivalent; SE 0 decides exactly."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.equivalence import tost
from iomatrix.stats.looks import look_level
from iomatrix.stats.main_effects import (
    INTERACTION_ALPHA,
    AxisEffect,
    axis_effect,
    stratum_name,
)
from iomatrix.stats.moderated import Prior, cell_variances, pair_variance
from iomatrix.stats.paired import paired_comparison
from iomatrix.stats.summary import t_quantile, t_two_sided_p


@dataclass(frozen=True)
class AxisDecision:
    effect: AxisEffect  # the main effect on its own variance (main_effects.py)
    status: str  # "decided" | "equivalent" | "open" | "per_cell"
    better: str | None  # the level shown better ("decided"), else None
    ratio: float  # a/b, exp(D̄)
    low: float | None  # its interval at `confidence`, on the moderated variance
    high: float | None
    p_value: float
    level: float  # what p had to be below (the look's level over the family)
    df: float

    @property
    def by_stratum(self) -> bool:
        """Decided on the strata's average while their own ratios differ by more than the margin
        (a quantitative interaction: the same level better in each); the line names each
        stratum's ratio."""
        return self.status == "decided" and not self.effect.interaction_small


def decide_axis(
    data: Mapping[str, Sequence[tuple[int, float]]],
    levels: Mapping[str, Mapping[str, str]],
    axis: str,
    a: str,
    b: str,
    *,
    higher_is_better: bool,
    alpha: float,
    margin: float,
    prior: Prior | None = None,
    df_resid: float = math.inf,
    family: int = 1,
    confidence: float = 0.95,
    variances: Mapping[str, float] | None = None,
) -> AxisDecision:
    """Level `a` of `axis` against `b` over every stratum (module docstring). ``data``: cell →
    (round, value > 0) of every cell the race compared (the prior's cell model is fitted over all
    of them); ``levels``: cell → axis → value; ``prior``, ``df_resid``: the race's
    (BlockedAnalysis.prior, .df_resid); ``variances``: `cell_variances_of(data)` computed once for
    several axes (else computed here). ValueError as axis_effect."""
    eff = axis_effect(data, levels, axis, a, b, margin=margin, confidence=confidence)
    n = eff.rounds
    s_sq, df = eff.se_log**2 * n, float(n - 1)
    shape = None
    if prior is not None and prior.d0 > 0:
        v = cell_variances_of(data) if variances is None else variances
        shape = _shape(v, levels, axis, a, b) if v else None
    if prior is not None and shape is not None:
        s_sq, df = prior.moderate(s_sq, df, shape, df_resid)
    level = look_level(alpha, n) / max(1, family)
    mean = math.log(eff.ratio)
    se = math.sqrt(s_sq / n)
    if se <= 1e-12 * max(1.0, abs(mean)):
        p = 1.0 if abs(mean) < 1e-12 else 0.0
        low = high = eff.ratio
    else:
        p = t_two_sided_p(mean / se, df)
        q = t_quantile(confidence, df)
        low, high = math.exp(mean - q * se), math.exp(mean + q * se)
    status, better = "open", None
    decides = level > 0 and p < level
    if eff.interaction_small:
        if decides:
            status, better = "decided", (a if (mean > 0) == higher_is_better else b)
        elif level > 0 and tost(eff.ratio, se, df, level, margin, higher_is_better).equivalent:
            status = "equivalent"
    elif decides and _quantitative(eff, mean):
        status, better = "decided", (a if (mean > 0) == higher_is_better else b)
    else:
        status = "per_cell"
    return AxisDecision(
        effect=eff,
        status=status,
        better=better,
        ratio=eff.ratio,
        low=low,
        high=high,
        p_value=p,
        level=level,
        df=df,
    )


def _quantitative(eff: AxisEffect, mean: float) -> bool:
    """The interaction is quantitative at most: not shown by its F test, and no stratum's own
    ratio on the other side of 1 from the common one (module docstring)."""
    return eff.interaction_p >= INTERACTION_ALPHA and all(
        (math.log(r) > 0) == (mean > 0) and r != 1.0 for r in eff.strata.values()
    )


def cell_variances_of(data: Mapping[str, Sequence[tuple[int, float]]]) -> dict[str, float]:
    """Cell → v_i, fitted to the paired log-ratio variances of every pair of `data`'s cells as
    stats/moderated.py fits them ({} where the model is undetermined)."""
    cells = sorted(data)
    table = {c: {int(r): float(v) for r, v in data[c]} for c in cells}
    pairs = []
    for i in range(len(cells)):
        for j in range(i + 1, len(cells)):
            pc = paired_comparison(table[cells[i]], table[cells[j]])
            if (s_sq := pair_variance(pc)) is not None:
                pairs.append((i, j, s_sq, float(pc.df)))
    v = cell_variances(pairs, len(cells))
    return {} if v is None else dict(zip(cells, v, strict=True))


def _shape(
    v: Mapping[str, float],
    levels: Mapping[str, Mapping[str, str]],
    axis: str,
    a: str,
    b: str,
) -> float | None:
    """h_D = Σ_s (v_{a,s} + v_{b,s}) / S² over the strata holding both levels; None without."""
    at = {(stratum_name(levels[c], axis), levels[c].get(axis)): c for c in v if c in levels}
    strata = sorted({s for s, lv in at if lv == a} & {s for s, lv in at if lv == b})
    if not strata:
        return None
    total = sum(v[at[(s, a)]] + v[at[(s, b)]] for s in strata)
    return total / len(strata) ** 2 if total > 0 else None
