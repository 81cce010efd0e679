"""An answer per axis: the main effect of one axis in a factorial sweep, from every cell's rounds,
with the interaction that says whether one answer fits every cell.

A sweep such as quick's (format raw/qcow2 × cache none/writeback) asks "which cache mode?" of every
format. Where the cache's effect is about the same under each format, the cache decision can use
every format's rounds instead of one pair's (Montgomery, *Design and Analysis of Experiments*, ch.
5–6: the main effect in a two-factor design, the round a block). Two levels a and b of the axis;
the other axes' values make the *strata* s (raw, qcow2); in every round j where every stratum has
both levels:

    d_sj = ln a_sj − ln b_sj                      the axis's log ratio within stratum s, round j
    D_j = Σ_s d_sj / S                            averaged over the S strata
    effect = Σ_j D_j / J,   SE = sd(D_j)/√J,  t on J − 1 df,   ratio exp(effect), CI exp(effect ± t·SE)

(the paired t of §10b on the strata-averaged log ratios: each round one observation, so the round's
own swing of the effect stays in the error, as it must for an answer about the next round).

**Interaction.** The two-way model on d_sj with strata and rounds as factors, one value per cell
(Tukey's layout without replication): d_sj = μ + γ_s + ρ_j + ε,

    SS_strata = J Σ_s (d̄_s· − d̄)²,  df S − 1;   SS_resid = Σ (d_sj − d̄_s· − d̄_·j + d̄)²,  df (S − 1)(J − 1)
    F = (SS_strata/(S − 1)) / (SS_resid/((S − 1)(J − 1))),   p = P(F_{S−1,(S−1)(J−1)} ≥ F)

The interaction is *small* when p ≥ ``INTERACTION_ALPHA`` (0.05; generous to the interaction, so
that one answer is given for every stratum only when the data do not contradict it) and every
stratum's ratio exp(d̄_s·) lies within ``margin`` of the common ratio. Otherwise the caller decides
per cell (stats/decision.py), and says why.

Worked example (cache writeback vs none, strata raw and qcow2, 3 rounds):
raw: d = 0.20, 0.25, 0.15; qcow2: d = 0.22, 0.18, 0.20. D = 0.21, 0.215, 0.175; effect = 0.2;
sd(D) = 0.021794, SE = 0.012583, t = 15.89 on 2 df, p = 0.0039; ratio 1.2214 (1.1570–1.2894 at
95 %, t_{0.975,2} = 4.3027). Interaction: d̄_raw = 0.2, d̄_qcow2 = 0.2: SS_strata = 0, F = 0, p = 1;
small: writeback is 1.22× cache=none for both formats.

Edge cases: fewer than 2 strata (nothing to average over: the pair's own comparison is the answer),
or fewer than 2 complete rounds: ValueError. sd(D) = 0 decides exactly (effect 0 → p = 1, else 0);
SS_resid = 0 with SS_strata > 0: interaction p = 0 (not small)."""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats import special
from iomatrix.stats.summary import t_quantile, t_two_sided_p

INTERACTION_ALPHA = 0.05


@dataclass(frozen=True)
class AxisEffect:
    axis: str
    a: str  # the level compared ...
    b: str  # ... against this one: ratio = a/b
    ratio: float  # exp(effect)
    low: float | None  # CI at the confidence asked; None with sd(D) undefined
    high: float | None
    se_log: float
    df: int  # J − 1
    statistic: float
    p_value: float
    rounds: int  # J: the rounds every stratum ran at both levels
    strata: dict[str, float]  # stratum (its other axes' values) → its own ratio exp(d̄_s·)
    interaction_p: float
    interaction_small: bool


def stratum_name(levels: Mapping[str, str], axis: str) -> str:
    """A cell's stratum: its values of the other axes, "cache=none format=raw"."""
    return " ".join(f"{k}={v}" for k, v in sorted(levels.items()) if k != axis)


def axis_effect(
    data: Mapping[str, Sequence[tuple[int, float]]],
    levels: Mapping[str, Mapping[str, str]],
    axis: str,
    a: str,
    b: str,
    margin: float = 0.05,
    confidence: float = 0.95,
) -> AxisEffect:
    """The main effect of ``axis`` (level ``a`` against ``b``) over every stratum of the other axes
    (module docstring). ``data``: cell → (round, value > 0); ``levels``: cell → axis → value. Cells
    at other levels of ``axis`` are left out."""
    d, rounds = _stratum_log_ratios(data, levels, axis, a, b)
    strata = sorted(d)
    n_s, n_r = len(strata), len(rounds)
    big_d = [sum(d[s][j] for s in strata) / n_s for j in range(n_r)]
    effect = sum(big_d) / n_r
    se, t, p, lo, hi = _paired_t(big_d, effect, confidence)
    means = {s: sum(d[s]) / n_r for s in strata}
    inter_p = _interaction_p(d, means, big_d, effect, strata, n_r)
    within = all(abs(m - effect) <= -math.log(1.0 - margin) for m in means.values())
    return AxisEffect(
        axis=axis,
        a=a,
        b=b,
        ratio=math.exp(effect),
        low=lo,
        high=hi,
        se_log=se,
        df=n_r - 1,
        statistic=t,
        p_value=p,
        rounds=n_r,
        strata={s: math.exp(m) for s, m in means.items()},
        interaction_p=inter_p,
        interaction_small=inter_p >= INTERACTION_ALPHA and within,
    )


def _stratum_log_ratios(
    data: Mapping[str, Sequence[tuple[int, float]]],
    levels: Mapping[str, Mapping[str, str]],
    axis: str,
    a: str,
    b: str,
) -> tuple[dict[str, list[float]], list[int]]:
    """stratum → d_sj over the rounds j every stratum ran at both levels, and those rounds;
    ValueError with fewer than 2 strata or rounds, or a value ≤ 0."""
    by: dict[str, dict[str, dict[int, float]]] = {}
    for cell, pts in data.items():
        lv = levels[cell]
        if lv.get(axis) in (a, b):
            by.setdefault(stratum_name(lv, axis), {})[lv[axis]] = {int(r): float(v) for r, v in pts}
    strata = sorted(s for s, two in by.items() if a in two and b in two)
    if len(strata) < 2:
        raise ValueError(f"the {axis} axis has {a} and {b} in {len(strata)} stratum(s): need 2")
    both = [set(by[s][a]) & set(by[s][b]) for s in strata]
    rounds = sorted(set.intersection(*both))
    if len(rounds) < 2:
        raise ValueError(f"{len(rounds)} round(s) hold {a} and {b} in every stratum: need 2")
    if any(by[s][x][r] <= 0 for s in strata for x in (a, b) for r in rounds):
        raise ValueError("a value ≤ 0 has no logarithm")
    return {
        s: [math.log(by[s][a][r]) - math.log(by[s][b][r]) for r in rounds] for s in strata
    }, rounds


def _paired_t(
    big_d: Sequence[float], effect: float, confidence: float
) -> tuple[float, float, float, float, float]:
    """(SE, t, p, low, high) of the mean of the D_j; sd(D) = 0 decides exactly."""
    n_r = len(big_d)
    sd = math.sqrt(sum((x - effect) ** 2 for x in big_d) / (n_r - 1))
    se = sd / math.sqrt(n_r)
    if se <= 1e-12 * max(1.0, abs(effect)):
        t, p = (0.0, 1.0) if abs(effect) < 1e-12 else (math.copysign(math.inf, effect), 0.0)
        return se, t, p, math.exp(effect), math.exp(effect)
    t = effect / se
    q = t_quantile(confidence, n_r - 1)
    return (
        se,
        t,
        t_two_sided_p(t, n_r - 1),
        math.exp(effect - q * se),
        math.exp(effect + q * se),
    )


def _interaction_p(
    d: Mapping[str, Sequence[float]],
    means: Mapping[str, float],
    big_d: Sequence[float],
    grand: float,
    strata: Sequence[str],
    n_r: int,
) -> float:
    """The F-test of the strata in d_sj = μ + γ_s + ρ_j + ε (module docstring)."""
    n_s = len(strata)
    ss_strata = n_r * sum((means[s] - grand) ** 2 for s in strata)
    ss_resid = sum((d[s][j] - means[s] - big_d[j] + grand) ** 2 for s in strata for j in range(n_r))
    df1, df2 = n_s - 1, (n_s - 1) * (n_r - 1)
    if ss_resid <= 1e-24:
        return 1.0 if ss_strata <= 1e-24 else 0.0
    f = (ss_strata / df1) / (ss_resid / df2)
    return float(special.fdtrc(df1, df2, f))
