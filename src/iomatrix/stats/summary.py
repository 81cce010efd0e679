"""Descriptive statistics of one cell's stored samples: mean, sample SD, Student-t CI.

Conventions (see docs/statistics.md):

* ``sd`` is the *sample* standard deviation (ddof=1), never the population SD
  that pbench-fio reports.
* The CI is ``mean ± t_{(1+c)/2, n-1} · sd/√n`` — Student t with n−1 degrees of
  freedom and the √n that mmtests' ``meanci`` leaves out.
* Undefined values are ``None``, never NaN: with n=1 the SD, CV and CI do not
  exist; with mean 0 the CV and relative half-width do not exist.
* Samples that are all exactly equal have ``sd == 0.0`` exactly (not a
  rounding residue such as 1e-17), so the CI collapses to the mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def as_samples(samples: Sequence[float], *, name: str = "samples", min_n: int = 1) -> np.ndarray:
    """Validate and convert stored samples to a float array.

    Raises ValueError for fewer than ``min_n`` values or any NaN/infinite value:
    a non-finite sample is a parsing bug upstream, not a measurement.
    """
    arr = np.asarray(list(samples), dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of numbers")
    if arr.size < min_n:
        raise ValueError(f"{name} needs at least {min_n} value(s), got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def t_quantile(confidence: float, df: float) -> float:
    """Two-sided Student-t critical value t_{(1+confidence)/2, df} (scipy.stats.t.ppf)."""
    check_confidence(confidence)
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    from scipy import stats as _st  # lazy: scipy.stats costs ~0.5 s to import; CLI paths that never
    # compute a quantile (e.g. --help) should not pay it

    return float(_st.t.ppf(0.5 + confidence / 2.0, df))


def sample_sd(arr: np.ndarray) -> float:
    """Sample SD (ddof=1), exactly 0.0 when all values are identical. Needs n ≥ 2."""
    if arr.size < 2:
        raise ValueError("the sample SD needs at least 2 values")
    if float(np.ptp(arr)) == 0.0:
        return 0.0
    return float(np.std(arr, ddof=1))


@dataclass(frozen=True)
class Summary:
    """Summary of one cell's samples.

    ``sd``, ``cv``, ``ci_low``, ``ci_high``, ``half_width`` and ``rel_half_width``
    are ``None`` when n = 1.  ``cv`` and ``rel_half_width`` are also ``None``
    when the mean is 0.
    """

    n: int
    mean: float
    sd: float | None
    cv: float | None
    median: float
    ci_low: float | None
    ci_high: float | None
    half_width: float | None
    rel_half_width: float | None
    confidence: float = 0.95

    @property
    def sem(self) -> float | None:
        """Standard error of the mean, sd/√n (None when n = 1)."""
        return None if self.sd is None else self.sd / math.sqrt(self.n)

    @property
    def df(self) -> int | None:
        """Degrees of freedom of the CI (n − 1), None when n = 1."""
        return self.n - 1 if self.n >= 2 else None


def summarize(samples: Sequence[float], confidence: float = 0.95) -> Summary:
    """Mean, sample SD, CV, median and the Student-t CI of the mean.

    >>> s = summarize([10.0, 12.0, 14.0])
    >>> (s.mean, s.sd)
    (12.0, 2.0)

    Raises ValueError on an empty sequence or non-finite values.
    """
    check_confidence(confidence)
    arr = as_samples(samples)
    n = int(arr.size)
    mean = float(np.mean(arr)) if np.ptp(arr) != 0 else float(arr[0])
    median = float(np.median(arr))
    if n < 2:
        return Summary(
            n=n, mean=mean, sd=None, cv=None, median=median, ci_low=None, ci_high=None,
            half_width=None, rel_half_width=None, confidence=confidence,
        )
    sd = sample_sd(arr)
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return Summary(
        n=n,
        mean=mean,
        sd=sd,
        cv=None if mean == 0 else sd / abs(mean),
        median=median,
        ci_low=mean - half,
        ci_high=mean + half,
        half_width=half,
        rel_half_width=None if mean == 0 else half / abs(mean),
        confidence=confidence,
    )
