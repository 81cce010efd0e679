"""A paired comparison of two cells over the rounds both ran: like with like, with the pair's own
variance.

Cells are measured in rounds (stats/blocked.py), and a host drifts: the first minute of a sweep is
not its last. Two cells are compared only over the rounds in which both ran, each round's log ratio
one observation:

    d_j = ln a_j − ln b_j   for every round j holding both a and b   (n such rounds)
    d̄ = Σ d_j / n,   s_d² = Σ (d_j − d̄)² / (n − 1),   SE = s_d / √n,   df = n − 1
    t = d̄ / SE,   p = 2·P(T_df ≥ |t|)                                   (the paired t-test on log values)
    ratio = exp(d̄)   with CI exp(d̄ ± t_{(1+c)/2, df} · SE)                (a ratio of geometric means)

Why this and not the additive model's residual variance: that variance is pooled over every cell of
the sweep. The steady cache=none cells (±3 %) then lent their precision to the writeback cells (±20
%), and identical cells were called "significantly" different (docs/statistics.md, "Decisions that
reproduce"). The pair's own differences carry exactly the noise of that pair; the round still
cancels the host's drift, since each d_j is taken within one round. Runs one cell made later
(precision runs) are not set against another cell's early runs: they have no partner round and are
left out.

One wild round widens s_d, so the test grows cautious rather than bold: the same paired t serves
when the sweep's residuals are clearly not normal (stats/blocked.py keeps Friedman's omnibus test
for that case).

Worked example: rounds 1–3 with a = 100, 110, 90 and b = 95, 100, 88: d = 0.05129, 0.09531, 0.02247;
d̄ = 0.05636, s_d = 0.03669, SE = 0.02118, df = 2, t = 2.661, p = 0.117; ratio 1.058 with 95 % CI
exp(0.05636 ± 4.303·0.02118) = 0.966–1.159. A round in which only a ran adds nothing.

Fewer than 2 shared rounds give no variance: p = 1 (nothing is decided), ratio exp(d̄) with no
interval (or None with no shared round). SE = 0 (every round the same ratio) decides exactly: d̄ = 0
→ p = 1, else p = 0."""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from iomatrix.stats.summary import t_quantile, t_two_sided_p


@dataclass(frozen=True)
class PairedComparison:
    rounds: int  # n: the rounds both cells ran
    ratio: float | None  # exp(d̄): a/b over those rounds; None with no shared round
    ratio_low: float | None  # CI at the confidence asked; None with n < 2
    ratio_high: float | None
    se_log: float | None  # SE of d̄; None with n < 2
    # n − 1 (0 with n < 2); d₀ + n − 1, possibly ∞, once moderated (stats/moderated.py)
    df: float
    statistic: float  # t
    p_value: float  # two-sided


def shared_log_ratios(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    """ln a_j − ln b_j over the rounds j both hold, in round order (values must be > 0)."""
    return [math.log(a[r]) - math.log(b[r]) for r in sorted(set(a) & set(b))]


def paired_comparison(
    a: Mapping[int, float], b: Mapping[int, float], confidence: float = 0.95
) -> PairedComparison:
    """a versus b (round → value, every value > 0) over the rounds both ran (module docstring)."""
    d = shared_log_ratios(a, b)
    n = len(d)
    if n == 0:
        return PairedComparison(
            rounds=0,
            ratio=None,
            ratio_low=None,
            ratio_high=None,
            se_log=None,
            df=0,
            statistic=0.0,
            p_value=1.0,
        )
    mean = sum(d) / n
    if n < 2:
        return PairedComparison(
            rounds=n,
            ratio=math.exp(mean),
            ratio_low=None,
            ratio_high=None,
            se_log=None,
            df=0,
            statistic=0.0,
            p_value=1.0,
        )
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    if se <= 1e-12 * max(1.0, abs(mean)):
        p = 1.0 if abs(mean) < 1e-12 else 0.0
        return PairedComparison(
            rounds=n,
            ratio=math.exp(mean),
            ratio_low=math.exp(mean),
            ratio_high=math.exp(mean),
            se_log=0.0,
            df=n - 1,
            statistic=0.0 if p == 1.0 else math.copysign(math.inf, mean),
            p_value=p,
        )
    t = mean / se
    # scipy.stats.t's own functions without importing scipy.stats (~1 s of CPU per process, issue
    # 52).
    p = t_two_sided_p(t, n - 1)
    q = t_quantile(confidence, n - 1)
    return PairedComparison(
        rounds=n,
        ratio=math.exp(mean),
        ratio_low=math.exp(mean - q * se),
        ratio_high=math.exp(mean + q * se),
        se_log=se,
        df=n - 1,
        statistic=t,
        p_value=p,
    )
