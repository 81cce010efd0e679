"""Two-sample comparison: Welch's t-test, Holm's correction, Fieller CI of a ratio of means.

* ``welch`` wraps ``scipy.stats.ttest_ind(equal_var=False)`` (two-sided).  Both
  samples need n ≥ 2.  When *both* samples have zero variance the t statistic
  is 0/0 and scipy returns NaN; we decide deterministically instead:
  identical constants → t = 0, p = 1; different constants → t = ±inf, p = 0.
  Welch's df is undefined then (``df is None``).
* ``ratio_ci`` uses Fieller's theorem for independent samples, with the
  Welch–Satterthwaite degrees of freedom of ā − R·b̄ evaluated at R = ā/b̄.
  A ratio of two non-negative quantities never gets a lower bound ≤ 0: where
  Fieller's set reaches ≤ 0 or is unbounded, the interval is the log/delta one,
  exp(ln R ∓ t·√(v_a/ā² + v_b/b̄²)) (see ``ratio_ci``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from iomatrix.stats.precision import imprecise
from iomatrix.stats.summary import as_samples, check_confidence, sample_sd, t_quantile


@dataclass(frozen=True)
class WelchResult:
    """Welch's unequal-variance t-test of mean(a) − mean(b), two-sided."""

    t: float
    df: float | None  # Welch–Satterthwaite df; None when both samples have zero variance
    p_value: float
    mean_diff: float  # mean(a) − mean(b)
    se: float  # √(s_a²/n_a + s_b²/n_b)
    ci_low: float  # CI of mean_diff at `confidence`
    ci_high: float
    n_a: int
    n_b: int
    confidence: float = 0.95

    def significant(self, alpha: float = 0.05) -> bool:
        """Unadjusted decision p < alpha (use ``holm`` for families of tests)."""
        return self.p_value < alpha


def _mean(arr: np.ndarray) -> float:
    return float(arr[0]) if float(np.ptp(arr)) == 0.0 else float(np.mean(arr))


def welch(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> WelchResult:
    """Welch's t-test (scipy.stats.ttest_ind, equal_var=False, two-sided).

    Raises ValueError when either sample has fewer than 2 values.
    """
    check_confidence(confidence)
    xa = as_samples(a, name="a", min_n=2)
    xb = as_samples(b, name="b", min_n=2)
    ma, mb = _mean(xa), _mean(xb)
    va, vb = sample_sd(xa) ** 2, sample_sd(xb) ** 2
    se = math.sqrt(va / xa.size + vb / xb.size)
    diff = ma - mb
    if se == 0.0:
        # Both samples constant: no noise at all, the comparison is exact.
        if diff == 0.0:
            t, p = 0.0, 1.0
        else:
            t, p = math.copysign(math.inf, diff), 0.0
        return WelchResult(
            t=t,
            df=None,
            p_value=p,
            mean_diff=diff,
            se=0.0,
            ci_low=diff,
            ci_high=diff,
            n_a=int(xa.size),
            n_b=int(xb.size),
            confidence=confidence,
        )
    from scipy import stats as _st  # lazy, as in summary.t_quantile

    with warnings.catch_warnings():
        # One constant sample makes scipy warn about "catastrophic cancellation"; the
        # other sample's variance carries the test, so the result is well defined.
        warnings.simplefilter("ignore", RuntimeWarning)
        res = _st.ttest_ind(xa, xb, equal_var=False)
        ci = res.confidence_interval(confidence_level=confidence)
    return WelchResult(
        t=float(res.statistic),
        df=float(res.df),
        p_value=float(res.pvalue),
        mean_diff=diff,
        se=se,
        ci_low=float(ci.low),
        ci_high=float(ci.high),
        n_a=int(xa.size),
        n_b=int(xb.size),
        confidence=confidence,
    )


class RatioCI(NamedTuple):
    """Ratio of means with its CI; ``low``/``high`` are None when the CI is undefined."""

    ratio: float | None
    low: float | None
    high: float | None

    @property
    def imprecise(self) -> bool:
        """The interval reaches ≤ 0 or spans more than 10× (stats/precision.py): "not measured
        precisely"."""
        return imprecise(self.low, self.high)

    def turned(self) -> RatioCI:
        """The same ratio the other way round: B over A from A over B, its interval turned with it
        (1.43× (1.20–1.70) → 0.70× (0.59–0.83)); a bound that is None or 0 stays None."""
        return RatioCI(
            None if not self.ratio else 1 / self.ratio,
            None if not self.high else 1 / self.high,
            None if not self.low else 1 / self.low,
        )


def _log_delta(
    ma: float, mb: float, va: float, vb: float, na: int, nb: int, confidence: float
) -> RatioCI:
    """exp(ln R ∓ t·√(v_a/ā² + v_b/b̄²)), t at the Welch–Satterthwaite df of the two log-scale
    variances."""
    ua, ub = va / (ma * ma), vb / (mb * mb)
    se = math.sqrt(ua + ub)
    den = ua * ua / (na - 1) + ub * ub / (nb - 1)
    df = (ua + ub) ** 2 / den if den > 0 else float(min(na, nb) - 1)
    half = t_quantile(confidence, df) * se
    r = ma / mb
    return RatioCI(r, r * math.exp(-half), r * math.exp(half))


def ratio_ci(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, positive: bool = True
) -> RatioCI:
    """mean(a)/mean(b) with a Fieller confidence interval (log/delta where Fieller reaches ≤ 0).

    Fieller: the set of R with (ā − R·b̄)² ≤ t²·(v_a + R²·v_b), v = s²/n, i.e. the
    roots of  R²(b̄² − t²v_b) − 2R·ā·b̄ + (ā² − t²v_a) = 0.
    t uses the Welch–Satterthwaite df of ā − R·b̄ evaluated at R = ā/b̄.

    * mean(b) == 0 → ``RatioCI(None, None, None)``.
    * either n < 2 → ratio only, bounds None.
    * b̄ not significantly different from 0 (g = t²v_b/b̄² ≥ 1) → the Fieller set
      is unbounded; bounds None.
    * both samples constant → (R, R, R).

    ``positive`` (default: every quantity iomatrix stores is non-negative): a negative sample raises
    ValueError, and where both means are > 0 but Fieller's set is unbounded or its lower root ≤ 0 (a
    ratio of non-negative quantities cannot be ≤ 0; the numerator is then not clearly above 0), the
    interval is the log/delta one, exp(ln R ∓ t·√(v_a/ā² + v_b/b̄²)), Welch–Satterthwaite df of the
    two log-scale variances.  Such an interval is wide and ``RatioCI.imprecise`` says so."""
    check_confidence(confidence)
    xa = as_samples(a, name="a")
    xb = as_samples(b, name="b")
    if positive and (float(xa.min()) < 0.0 or float(xb.min()) < 0.0):
        raise ValueError("samples of a non-negative quantity contain a negative value")
    ma, mb = _mean(xa), _mean(xb)
    if mb == 0.0:
        return RatioCI(None, None, None)
    r = ma / mb
    na, nb = int(xa.size), int(xb.size)
    if na < 2 or nb < 2:
        return RatioCI(r, None, None)
    va = sample_sd(xa) ** 2 / na
    vb = sample_sd(xb) ** 2 / nb
    if va == 0.0 and vb == 0.0:
        return RatioCI(r, r, r)
    num = (va + r * r * vb) ** 2
    den = va * va / (na - 1) + (r**4) * vb * vb / (nb - 1)
    df = num / den if den > 0 else float(min(na, nb) - 1)
    t = t_quantile(confidence, df)
    t2 = t * t
    a2 = mb * mb - t2 * vb
    log_delta_fits = positive and ma > 0.0 and mb > 0.0
    if a2 <= 0.0:
        return (
            _log_delta(ma=ma, mb=mb, va=va, vb=vb, na=na, nb=nb, confidence=confidence)
            if log_delta_fits
            else RatioCI(r, None, None)
        )
    disc = ma * ma * vb + mb * mb * va - t2 * va * vb
    root = t * math.sqrt(max(disc, 0.0))
    lo = (ma * mb - root) / a2
    hi = (ma * mb + root) / a2
    lo, hi = min(lo, hi), max(lo, hi)
    if log_delta_fits and lo <= 0.0:
        return _log_delta(ma=ma, mb=mb, va=va, vb=vb, na=na, nb=nb, confidence=confidence)
    return RatioCI(r, lo, hi)
