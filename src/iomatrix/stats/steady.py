"""Steady-state checks: the SNIA PTS / StorPerf window rule, and fio's own ``ss=`` verdict.

SNIA rule on the last ``window`` points y_0..y_{w−1} (x = 0..w−1, equally spaced):

    window_mean = mean(y)
    range_frac  = (max y − min y) / |window_mean|                      ≤ max_range (0.20)
    slope_frac  = |slope| · (w − 1) / |window_mean|                    ≤ max_slope (0.10)

``slope`` is the least-squares slope per point, Σ(x−x̄)(y−ȳ) / Σ(x−x̄)² (what
``scipy.stats.linregress`` returns, without its argument handling, which made
steady state a fifth of a report's CPU; exactly 0 for a constant window),
so ``|slope|·(w−1)`` is the *excursion* of the fitted line across the window
(max − min of the fit), which is how SNIA PTS 2.0 words its slope criterion.
StorPerf compares the per-point slope itself with 10% of the mean, which for a
10-point window lets the fit drift by 90% of the mean; we use the excursion.
Both bounds are inclusive.  A window mean of 0 makes both fractions
undefined (None) and steady state is not attained.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from iomatrix.stats.summary import as_samples


@dataclass(frozen=True)
class SteadyState:
    attained: bool
    range_frac: float | None  # (max − min)/|mean| over the window
    slope_frac: float | None  # |LS slope|·(window−1)/|mean| over the window
    window_mean: float | None
    window: int  # number of points actually in the window (0 when unknown)
    rule: str  # human-readable rule, e.g. "SNIA: range ≤ 20%, slope excursion ≤ 10% over 5 points"
    source: str = "snia"  # "snia" (computed here) or "fio" (fio's own verdict)
    # fio: the achieved criterion, as printed (percent if the rule has %)
    fio_criterion: float | None = None
    fio_limit: float | None = None  # fio: the limit from ss=, same units


def _window_metrics(y: np.ndarray) -> tuple[float, float | None, float | None]:
    mean = float(np.mean(y)) if float(np.ptp(y)) != 0 else float(y[0])
    if mean == 0.0:
        return mean, None, None
    rng = float(np.ptp(y)) / abs(mean)
    x = np.arange(y.size, dtype=float) - (y.size - 1) / 2.0  # centred: x̄ = 0
    slope = float(np.dot(x, y - mean) / np.dot(x, x)) if rng else 0.0
    return mean, rng, abs(slope) * (y.size - 1) / abs(mean)


def snia_steady_state(
    series: Sequence[float],
    window: int = 5,
    max_range: float = 0.20,
    max_slope: float = 0.10,
) -> SteadyState:
    """SNIA/StorPerf steady state on the last ``window`` points of ``series``.

    Fewer than ``window`` points: not attained, fractions None.
    """
    if window < 2:
        raise ValueError(f"window must be ≥ 2, got {window}")
    rule = (
        f"SNIA: range ≤ {max_range * 100:g}% and slope excursion ≤ {max_slope * 100:g}% "
        f"of the mean over the last {window} points"
    )
    arr = as_samples(series, name="series", min_n=0)
    if arr.size < window:
        return SteadyState(
            False, None, None, None, int(arr.size), rule + f" (only {arr.size} points)"
        )
    y = arr[-window:]
    mean, rng, slope = _window_metrics(y)
    attained = rng is not None and slope is not None and rng <= max_range and slope <= max_slope
    return SteadyState(attained, rng, slope, mean, window, rule)


_NUM = re.compile(r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def _num(text: Any) -> float | None:
    if isinstance(text, int | float):
        return float(text)
    if isinstance(text, str):
        m = _NUM.search(text)
        return float(m.group()) if m else None
    return None


def fio_steady_state(job_json: Mapping[str, Any]) -> SteadyState | None:
    """fio's own steady-state verdict for one job of fio's JSON output, or None without ``ss=``.

    Reads the job's ``steadystate`` block: ``ss`` (e.g. ``"iops_slope:0.100000%"``),
    ``attained``, ``criterion`` (achieved value as printed), ``data`` (the window's
    ``iops``/``bw`` series and ``iops_mean``/``bw_mean``).  ``attained`` is fio's
    verdict, unchanged.  ``range_frac``/``slope_frac`` are recomputed with the SNIA
    definitions above from the window series of the tracked metric, only when the
    series is complete (fio attained, or no zero slots: fio pads an unfilled
    window with zeros).
    """
    block = job_json.get("steadystate")
    if not isinstance(block, Mapping):
        return None
    ss = str(block.get("ss", ""))
    head, _, limit = ss.partition(":")
    metric = head.removesuffix("_slope") or "iops"
    attained = bool(block.get("attained", 0))
    data = block.get("data") if isinstance(block.get("data"), Mapping) else {}
    series = data.get(metric)
    mean = _num(data.get(f"{metric}_mean"))
    range_frac = slope_frac = None
    n = 0
    if isinstance(series, list) and series:
        y = np.asarray(series, dtype=float)
        n = int(y.size)
        if y.size >= 2 and np.all(np.isfinite(y)) and (attained or np.all(y != 0)):
            wmean, range_frac, slope_frac = _window_metrics(y)
            if mean is None:
                mean = wmean
    return SteadyState(
        attained=attained,
        range_frac=range_frac,
        slope_frac=slope_frac,
        window_mean=mean,
        window=n,
        rule=f"fio ss={ss}" if ss else "fio ss",
        source="fio",
        fio_criterion=_num(block.get("criterion")),
        fio_limit=_num(limit),
    )
