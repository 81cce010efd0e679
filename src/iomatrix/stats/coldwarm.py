"""Is the first (cold) run of a cell different from the warm runs that follow it?

Seed 001 observed that the first run on a freshly copied image is often an
outlier.  We test it, report it, and never drop it: the caller shows the cold
run separately when ``differs`` is true, and decides itself whether the warm
summary or the all-runs summary is the headline.

Test (default ``method="prediction"``): is the cold value a plausible *new draw*
from the warm runs' distribution?  With m warm runs, warm mean w̄ and SD s,

    t = (cold − w̄) / (s · √(1 + 1/m)),   df = m − 1,   two-sided.

This is the Student-t prediction-interval test (equivalently the pooled
two-sample t-test with n₁ = 1, variance estimated from the warm runs alone).
The alternative ``method="one_sample"`` (``scipy.stats.ttest_1samp(warm,
cold)``) treats the cold value as a known constant and omits its own
sampling noise; its false-positive rate grows with m (at m = 9, a cold run an
ordinary 1 SD from the warm mean gives p ≈ 0.017), so it is not the default.

Zero warm variance: the test is decided exactly, like ``welch``: cold equal to
the warm constant → p = 1, otherwise p = 0.  At least 3 warm runs are needed;
with fewer the result is returned untested (``p_value is None``,
``differs is False``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from iomatrix.stats.summary import Summary, as_samples, summarize

MIN_WARM_RUNS = 3


@dataclass(frozen=True)
class ColdWarm:
    cold: float  # the first run, in run order
    warm: Summary | None  # summary of runs 2..n (None when there is only one run)
    p_value: float | None  # None when untested (fewer than MIN_WARM_RUNS warm runs)
    differs: bool  # p_value < alpha; always False when untested
    t: float | None
    df: int | None
    ratio: float | None  # cold / warm mean; None when the warm mean is 0 or missing
    alpha: float
    test: str  # human-readable description of the test (or why it was not run)

    @property
    def tested(self) -> bool:
        return self.p_value is not None


def cold_vs_warm(
    samples_in_run_order: Sequence[float],
    alpha: float = 0.05,
    method: Literal["prediction", "one_sample"] = "prediction",
) -> ColdWarm:
    """Compare the first run with the remaining runs (see the module docstring)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if method not in ("prediction", "one_sample"):
        raise ValueError(f"unknown method {method!r}")
    arr = as_samples(samples_in_run_order)
    cold = float(arr[0])
    if arr.size == 1:
        return ColdWarm(
            cold=cold,
            warm=None,
            p_value=None,
            differs=False,
            t=None,
            df=None,
            ratio=None,
            alpha=alpha,
            test="untested: only one run",
        )
    warm = summarize(arr[1:])
    ratio = None if warm.mean == 0 else cold / warm.mean
    m = warm.n
    if m < MIN_WARM_RUNS:
        return ColdWarm(
            cold=cold,
            warm=warm,
            p_value=None,
            differs=False,
            t=None,
            df=None,
            ratio=ratio,
            alpha=alpha,
            test=f"untested: {m} warm run(s) < {MIN_WARM_RUNS}",
        )
    df = m - 1
    desc = (
        f"Student t prediction test of the first run against {m} warm runs, two-sided, "
        f"df={df}, α={alpha:g}"
        if method == "prediction"
        else f"one-sample t-test of {m} warm runs against the first run, two-sided, df={df}, "
        f"α={alpha:g}"
    )
    assert warm.sd is not None
    if warm.sd == 0.0:
        same = cold == warm.mean
        t = 0.0 if same else math.copysign(math.inf, cold - warm.mean)
        p = 1.0 if same else 0.0
        return ColdWarm(
            cold=cold,
            warm=warm,
            p_value=p,
            differs=p < alpha,
            t=t,
            df=df,
            ratio=ratio,
            alpha=alpha,
            test=desc + " (warm runs constant: decided exactly)",
        )
    # lazy, as in summary.t_quantile: importing a report must not cost scipy.stats
    from scipy import stats as _st

    if method == "prediction":
        t = (cold - warm.mean) / (warm.sd * math.sqrt(1.0 + 1.0 / m))
        p = float(2.0 * _st.t.sf(abs(t), df))
    else:
        res = _st.ttest_1samp(arr[1:], popmean=cold)
        # ttest_1samp tests warm − cold; report the statistic as cold − warm like "prediction".
        t, p = -float(res.statistic), float(res.pvalue)
    return ColdWarm(
        cold=cold,
        warm=warm,
        p_value=p,
        differs=p < alpha,
        t=t,
        df=df,
        ratio=ratio,
        alpha=alpha,
        test=desc,
    )
