"""A weighed ratio of two configurations over several figures, each figure compared over the rounds
both ran (stats/paired.py): stats/weighed.py's ratio, paired like the race and the job's decision.

Why paired: the host drifts from round to round, and a round's runs of one figure are seconds apart
(the scheduler runs a group's cells together, docs/statistics.md §10d), so the two cells' runs in a
round share the host's state. Each figure k then gives the paired mean of the log ratios over its
n_k shared rounds j, turned so that > 1 is B's advantage:

    d̄_k = Σ_j (ln b_kj − ln a_kj) / n_k          SE_k = s_{d,k} / √n_k,   df_k = n_k − 1

and, the weights w_k normalised to sum 1 and s_k = +1 when higher is better, −1 when lower is:

    ln W = Σ w_k · s_k · d̄_k
    Var(ln W) = Σ w_k² · SE_k²                       (the figures' runs are distinct fio runs)
    df = (Σ u_k)² / Σ (u_k² / df_k)                  u_k = w_k² · SE_k²  (Welch–Satterthwaite)
    interval: exp(ln W ∓ t_{(1+c)/2, df} · √Var)

Unlike the unpaired form it compares geometric means (a ratio of per-round logs), so one wild p99
of a 1 s run moves the figure by its log, not by its value (seen: 264, 272, 285 and 2,572 µs).

Worked example (the database's trade-off, weights log ½, data read p99 ¼, data write p99 ¼; 8
shared rounds each): B commits 0.79× A's rate (d̄ = ln 0.79 = −0.236, SE 0.04), its read p99 is
0.556× A's (d̄ = −0.588, SE 0.15), its write p99 0.8× (d̄ = −0.223, SE 0.15). ln W = ½·(−0.236) −
¼·(−0.588) − ¼·(−0.223) = 0.0849: W = 1.09. Var = ¼·0.0016 + 2·(1/16)·0.0225 = 0.00321; u =
0.0004, 0.0014, 0.0014 with 7 df each: df = 17.6; the 90 % interval (t = 1.736) is
exp(0.0849 ∓ 0.0984) = 0.987–1.20×: not separated, nor within 5 %."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.paired import paired_comparison
from iomatrix.stats.summary import check_confidence
from iomatrix.stats.weighed import WeighedRatio, weighed_interval


@dataclass(frozen=True)
class PairedPart:
    """One figure's share of a paired weighed ratio: its weight, which way is better, and B against
    A over the rounds both ran: the mean of ln b − ln a, its standard error and degrees of freedom
    (stats/paired.py's PairedComparison of B against A gives them: ln ratio, se_log, df)."""

    weight: float
    higher_is_better: bool
    log_ratio: float
    se: float
    df: int


def paired_part(
    weight: float, higher_is_better: bool, a: Mapping[int, float], b: Mapping[int, float]
) -> PairedPart | None:
    """One figure's part, B (`b`: round → value) against A over the rounds both ran
    (stats/paired.py); None with fewer than 2 shared rounds or a value not above 0 (no log
    scale)."""
    if not a or not b or min(a.values()) <= 0 or min(b.values()) <= 0:
        return None
    pc = paired_comparison(b, a, 0.95)  # (its interval is not used: the weighing makes its own)
    if pc.rounds < 2 or pc.ratio is None or pc.se_log is None:
        return None
    return PairedPart(weight, higher_is_better, math.log(pc.ratio), pc.se_log, pc.df)


def paired_weighed_ratio(
    parts: Sequence[PairedPart], confidence: float = 0.90
) -> WeighedRatio | None:
    """B against A over `parts` (formula in the module docstring); None when a part has fewer than
    2 shared rounds (df < 1), a weight is negative or none is above 0 (nothing to weigh).
    `confidence` as in stats/weighed.py: 0.90, the interval whose inclusion in ±margin is TOST at
    α = 0.05."""
    check_confidence(confidence)
    total = sum(p.weight for p in parts)
    if not parts or total <= 0 or any(p.weight < 0 or p.df < 1 for p in parts):
        return None
    log_w, terms = 0.0, []
    for p in parts:
        w = p.weight / total
        log_w += w * (1.0 if p.higher_is_better else -1.0) * p.log_ratio
        terms.append((w * w * p.se * p.se, p.df))
    return weighed_interval(log_w, terms, confidence)
