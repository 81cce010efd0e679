"""Power of Welch's test to detect a given change, and the runs per side it needs (the `compare`
gate).

A gate that finds "no significant regression" says something only if the data could have found one.
For a change of δ (the gate's threshold θ times A's mean) between two sweeps with run-to-run SDs
s_a, s_b and n_a, n_b runs, Welch's two-sided test at level α has power

    power = P(|T| > t_{1−α/2, ν})  with T ~ noncentral t(ν, λ),
    λ = δ / √(s_a²/n_a + s_b²/n_b),   ν = Welch–Satterthwaite df of the two variances

(``scipy.stats.nct``; both tails counted). The runs needed per side are the smallest n (same on both
sides, each side keeping its own SD) with power ≥ the target (0.8 by convention). The SDs are the
observed ones, plugged in as if they were true (the same approximation as ``runs_needed_estimate``);
α is the level the first Holm step uses, α/m for m figures, so the answer is per figure of the
family.

Special cases: both SDs 0 → power 1 (any δ > 0 is seen without noise) and 2 runs per side; δ = 0 →
power α (nothing to find); fewer than 2 runs on a side → power 0 (no variance, no test)."""

from __future__ import annotations

import math
from typing import NamedTuple

from iomatrix.stats.summary import check_confidence

MAX_RUNS_PER_SIDE = 10_000  # beyond this the answer is "more than any sweep runs"


class Power(NamedTuple):
    power: float  # at the observed n_a, n_b
    n_needed: int | None  # runs per side for `target` power; None: more than MAX_RUNS_PER_SIDE


def _power(delta: float, sd_a: float, sd_b: float, n_a: int, n_b: int, alpha: float) -> float:
    from scipy import stats as _st  # lazy: see summary.t_quantile

    if n_a < 2 or n_b < 2:
        return 0.0
    va, vb = sd_a * sd_a / n_a, sd_b * sd_b / n_b
    if va + vb == 0.0:
        return 1.0 if delta > 0 else alpha
    df = (va + vb) ** 2 / (
        (va * va / (n_a - 1) if va else 0.0) + (vb * vb / (n_b - 1) if vb else 0.0)
    )
    ncp = abs(delta) / math.sqrt(va + vb)
    crit = float(_st.t.ppf(1 - alpha / 2, df))
    return float(_st.nct.sf(crit, df, ncp) + _st.nct.cdf(-crit, df, ncp))


def welch_power(
    delta: float,
    sd_a: float,
    sd_b: float,
    n_a: int,
    n_b: int,
    alpha: float = 0.05,
    target: float = 0.8,
) -> Power:
    """Power of Welch's two-sided test at level ``alpha`` to detect a difference of means ``delta``
    (see the module docstring), and the runs per side that reach ``target`` power."""
    check_confidence(1 - alpha)
    check_confidence(target)
    if (
        not (math.isfinite(delta) and math.isfinite(sd_a) and math.isfinite(sd_b))
        or sd_a < 0
        or sd_b < 0
    ):
        raise ValueError("delta and the SDs must be finite, the SDs ≥ 0")
    power = _power(delta, sd_a, sd_b, n_a, n_b, alpha)
    if delta == 0:
        return Power(power, None)
    lo = 2
    if _power(delta, sd_a, sd_b, lo, lo, alpha) >= target:
        return Power(power, lo)
    hi = lo
    while _power(delta, sd_a, sd_b, hi, hi, alpha) < target:  # bounded doubling, then bisection
        if hi >= MAX_RUNS_PER_SIDE:
            return Power(power, None)
        lo, hi = hi, min(2 * hi, MAX_RUNS_PER_SIDE)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _power(delta, sd_a, sd_b, mid, mid, alpha) >= target:
            hi = mid
        else:
            lo = mid
    return Power(power, hi)
