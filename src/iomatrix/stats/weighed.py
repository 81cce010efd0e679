"""A weighed ratio of two configurations over several figures: one number for "which is better for
this role, all its deciding figures weighed" (issue 53: a role holding both kinds of job gets one
answer that weighs them).

Each figure k compares configuration B with configuration A by the ratio of their means, turned so
that > 1 is B's advantage (higher is better: b̄/ā; lower is better, a latency: ā/b̄). The weighed
ratio is the weighted geometric mean of those ratios, the weights w_k normalised to sum 1:

    ln W = Σ w_k · s_k · (ln b̄_k − ln ā_k)          s_k = +1 higher is better, −1 lower

Its variance by the delta method (the figures' runs are distinct fio runs, taken as independent):

    Var(ln W) ≈ Σ w_k² · (v_{b,k}/b̄_k² + v_{a,k}/ā_k²)      v = s²/n, the variance of a mean

and its (confidence) interval exp(ln W ∓ t·√Var), t on the Welch–Satterthwaite degrees of freedom of
the sum of those 2K variance terms, each with n − 1 df:

    df = (Σ u_j)² / Σ (u_j² / (n_j − 1))          u_j = w² · v / mean² per term

Worked example (the database trade-off measured on a 2-vCPU VM, issue 53): weights log ½, data
read p99 ¼, data write p99 ¼. cache=none (A) commits 3,800/s, writeback (B) 3,000/s: the log's ratio
for B is 3,000/3,800 = 0.79. Data p99 read: A 900 µs, B 500 µs → 1.8 for B; write: A 800 µs, B 640
µs → 1.25. ln W = ½·ln 0.79 + ¼·ln 1.8 + ¼·ln 1.25 = −0.118 + 0.147 + 0.056 = 0.085: W = 1.09,
B better by 9 % with its figures weighed. With 8 runs a cell, per-run SDs of 10 % on the log and
60 % on the p99s, Var(ln W) ≈ ¼·2·0.1²/8 + 2·(1/16)·2·0.6²/8 = 0.0006 + 0.0113 = 0.0119; df ≈ 31,
and the 90 % interval (t = 1.70) is exp(0.085 ∓ 0.185) = 0.90–1.31×: not yet separated, nor
within 5 %."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from iomatrix.stats.summary import as_samples, check_confidence, sample_sd, t_quantile


@dataclass(frozen=True)
class Part:
    """One figure's share of a weighed ratio: its weight, which way is better, and each
    configuration's runs of it (A: the reference, B: the one compared with it)."""

    weight: float
    higher_is_better: bool
    a: Sequence[float]
    b: Sequence[float]


@dataclass(frozen=True)
class WeighedRatio:
    """B against A over the weighed figures: > 1 is B's advantage; `low`, `high` its interval."""

    ratio: float
    low: float
    high: float
    df: float

    def separated(self) -> bool:
        """The interval excludes 1: one of the two is better with the figures weighed."""
        return self.low > 1 or self.high < 1

    def within(self, margin: float) -> bool:
        """The whole interval within the margin of 1 on both sides (neither better by more than
        `margin`: the two one-sided tests of TOST at the interval's level)."""
        return self.low >= 1 / (1 + margin) and self.high <= 1 + margin


def weighed_ratio(parts: Sequence[Part], confidence: float = 0.90) -> WeighedRatio | None:
    """B against A over `parts` (formula in the module docstring); None when a part has fewer than
    2 runs on either side, a mean is not above 0, or no weight is above 0 (nothing to weigh).

    `confidence` 0.90 by default: a (1 − 2α) interval, the one whose inclusion in ±margin is TOST at
    α = 0.05 and whose exclusion of 1 is a one-sided test at 0.05 each way."""
    check_confidence(confidence)
    total = sum(p.weight for p in parts)
    if not parts or total <= 0 or any(p.weight < 0 for p in parts):
        return None
    log_w, terms = 0.0, []
    for p in parts:
        xa, xb = as_samples(p.a, name="a"), as_samples(p.b, name="b")
        if xa.size < 2 or xb.size < 2:
            return None
        ma, mb = float(xa.mean()), float(xb.mean())
        if ma <= 0 or mb <= 0:
            return None
        w = p.weight / total
        sign = 1.0 if p.higher_is_better else -1.0
        log_w += w * sign * (math.log(mb) - math.log(ma))
        for x, m in ((xa, ma), (xb, mb)):
            terms.append((w * w * sample_sd(x) ** 2 / (x.size * m * m), int(x.size) - 1))
    return weighed_interval(log_w, terms, confidence)


def weighed_interval(
    log_w: float, terms: Sequence[tuple[float, float]], confidence: float
) -> WeighedRatio:
    """exp(ln W ∓ t·√Var) from ln W and its variance terms (u_j, df_j): Var = Σ u_j, t at the
    Welch–Satterthwaite df (Σ u_j)² / Σ (u_j² / df_j); every term 0: the point itself (df ∞).
    Shared by the unpaired form here and the paired one (stats/weighed_paired.py)."""
    var = sum(u for u, _ in terms)
    if var == 0:
        r = math.exp(log_w)
        return WeighedRatio(r, r, r, math.inf)
    den = sum(u * u / dof for u, dof in terms)
    df = var * var / den if den > 0 else float(min(dof for _, dof in terms))
    half = t_quantile(confidence, df) * math.sqrt(var)
    return WeighedRatio(math.exp(log_w), math.exp(log_w - half), math.exp(log_w + half), df)
