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
* Every quantity iomatrix stores is non-negative (IOPS, MB/s, latencies, CPU per I/O, fractions), so
  by default (``scale="nonnegative"``) a negative sample is refused and the interval never reaches ≤
  0: where the Student-t interval would, the interval is the log-scale t interval (of the geometric
  mean)
      exp( mean(ln x) ∓ t_{(1+c)/2, n−1} · sd(ln x)/√n )
  (a sample of 0 leaves no log: the lower bound is then 0 and the estimate imprecise).  A 0/1 quantity
  (``scale="proportion"``, e.g. ``ss.attained``) gets Wilson's score interval, inside [0, 1]:
      (p + z²/2n ∓ z·√(p(1−p)/n + z²/4n²)) / (1 + z²/n),   z = Φ⁻¹((1+c)/2)
  ``scale="real"`` keeps the plain t interval for a signed quantity.
* ``imprecise`` (stats/precision.py): the interval reaches ≤ 0 or spans more than 10×, so the mean
  is "not measured precisely" and renderers say so instead of printing it as a figure.
"""  # noqa: E501

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from iomatrix.stats import special
from iomatrix.stats.precision import imprecise as _imprecise

Scale = Literal["nonnegative", "proportion", "real"]
SCALES: tuple[str, ...] = ("nonnegative", "proportion", "real")


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


# Memoised: a report asks for the same few (confidence, df) pairs thousands of times (one per cell,
# workload and metric), and each scipy call costs ~0.1 ms of argument handling.
@functools.lru_cache(maxsize=1024)
def t_quantile(confidence: float, df: float) -> float:
    """Two-sided Student-t critical value t_{(1+confidence)/2, df} (scipy.stats.t.ppf, via
    scipy.special.stdtrit)."""
    check_confidence(confidence)
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    # scipy.special's stdtrit is what scipy.stats.t.ppf computes (t._ppf), without importing
    # scipy.stats: ~1 s of CPU per process (its import parses hundreds of docstrings), which a
    # command that only needs intervals (results, the sweep's stopping rule) then never pays; nor
    # scipy.special's package (stats/special.py). Paths that never compute a quantile (--help)
    # load neither.
    return float(special.stdtrit(df, 0.5 + confidence / 2.0))


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p of a Student-t statistic, 2·P(T_df > |t|): scipy.stats.t.sf's own function (t._sf
    is scipy.special.stdtr(df, −x)), called without importing scipy.stats, as t_quantile does.

    Worked example: t = 2.776, df = 4 → p = 0.0500 (the 95 % critical value of t with 4 degrees of
    freedom)."""
    return float(2.0 * special.stdtr(df, -abs(t)))


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
    # how ci_low/ci_high were found: "t" (mean ± t·sd/√n), "log-t" (the t interval of the logs,
    # where the plain one reached ≤ 0), "wilson" (a 0/1 quantity), "t, bounded at 0" (a sample of 0:
    # no log), "" (no interval)
    interval: str = "t"
    imprecise: bool = False  # the interval reaches ≤ 0 or spans > 10×: "not measured precisely"

    @property
    def sem(self) -> float | None:
        """Standard error of the mean, sd/√n (None when n = 1)."""
        return None if self.sd is None else self.sd / math.sqrt(self.n)

    @property
    def df(self) -> int | None:
        """Degrees of freedom of the CI (n − 1), None when n = 1."""
        return self.n - 1 if self.n >= 2 else None


def _log_t_interval(arr: np.ndarray, confidence: float) -> tuple[float, float]:
    """exp(mean(ln x) ∓ t·sd(ln x)/√n): the t interval of the geometric mean (all x > 0, n ≥ 2)."""
    logs = np.log(arr)
    half = t_quantile(confidence, arr.size - 1) * sample_sd(logs) / math.sqrt(arr.size)
    centre = float(np.mean(logs))
    return math.exp(centre - half), math.exp(centre + half)


def _wilson_interval(arr: np.ndarray, confidence: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion from n 0/1 values (always inside [0, 1])."""
    n = arr.size
    p = float(np.mean(arr))
    # scipy.stats.norm.ppf's own function, as in t_quantile
    z = float(special.ndtri(0.5 + confidence / 2.0))
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(
    samples: Sequence[float], confidence: float = 0.95, scale: Scale = "nonnegative"
) -> Summary:
    """Mean, sample SD, CV, median and a CI of the mean that respects the quantity (``scale``).

    * ``"nonnegative"`` (default): Student t, mean ∓ t_{(1+c)/2,n−1}·sd/√n, unless its lower end is
      ≤ 0 — then exp(mean(ln x) ∓ t·sd(ln x)/√n), the log-scale t interval (geometric mean); with a
      sample of 0 the lower end is 0.  A negative sample raises ValueError (it is damage, not a
      measurement).
    * ``"proportion"``: values in [0, 1]; 0/1 values get Wilson's score interval, others the rule
      above capped at 1.
    * ``"real"``: the plain t interval.

    ``imprecise`` is set when the interval reaches ≤ 0 or spans more than 10× (stats/precision.py).

    >>> s = summarize([10.0, 12.0, 14.0])
    >>> (s.mean, s.sd)
    (12.0, 2.0)

    Raises ValueError on an empty sequence, non-finite values, or values outside the scale.
    """
    check_confidence(confidence)
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    arr = as_samples(samples)
    if scale != "real" and float(arr.min()) < 0.0:
        raise ValueError(
            f"samples of a non-negative quantity contain a negative value ({float(arr.min()):g})"
        )
    if scale == "proportion" and float(arr.max()) > 1.0:
        raise ValueError(f"samples of a proportion contain a value above 1 ({float(arr.max()):g})")
    n = int(arr.size)
    mean = float(np.mean(arr)) if np.ptp(arr) != 0 else float(arr[0])
    median = float(np.median(arr))
    if n < 2:
        return Summary(
            n=n,
            mean=mean,
            sd=None,
            cv=None,
            median=median,
            ci_low=None,
            ci_high=None,
            half_width=None,
            rel_half_width=None,
            confidence=confidence,
            interval="",
        )
    sd = sample_sd(arr)
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    low, high, how = mean - half, mean + half, "t"
    if scale == "proportion" and sd > 0 and bool(np.all((arr == 0.0) | (arr == 1.0))):
        low, high = _wilson_interval(arr, confidence)
        how = "wilson"
    elif scale != "real" and sd > 0 and low <= 0.0:
        if float(arr.min()) > 0.0:
            low, high = _log_t_interval(arr, confidence)
            how = "log-t"
        else:
            low, how = 0.0, "t, bounded at 0"
    if scale == "proportion":
        high = min(high, 1.0)
    return Summary(
        n=n,
        mean=mean,
        sd=sd,
        cv=None if mean == 0 else sd / abs(mean),
        median=median,
        ci_low=low,
        ci_high=high,
        half_width=half,
        rel_half_width=None if mean == 0 else half / abs(mean),
        confidence=confidence,
        interval=how,
        imprecise=scale != "real" and (_imprecise(low, high) or not low <= mean <= high),
    )
