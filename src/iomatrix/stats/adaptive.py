"""Adaptive repetition: keep running a cell until its CI is tight enough.

``ci_target`` is a fraction of the mean (0.05 = "±5%"); the CI is the
Student-t CI of ``summarize`` at ``confidence``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from iomatrix.stats import special
from iomatrix.stats.summary import as_samples, check_confidence, summarize, t_quantile


def _check_target(ci_target: float) -> None:
    if not ci_target > 0:
        raise ValueError(f"ci_target must be > 0 (a fraction of the mean), got {ci_target}")


def needs_more_runs(
    samples: Sequence[float],
    min_runs: int,
    max_runs: int,
    ci_target: float,
    confidence: float = 0.95,
) -> tuple[bool, str]:
    """(run again?, reason).  Reasons, checked in this order:

    * ``"n<min"`` — fewer than ``min_runs`` samples → True
    * ``"converged"`` — rel. CI half-width ≤ ``ci_target`` → False
    * ``"max runs reached"`` — n ≥ ``max_runs`` and not converged → False
    * ``"CI ±7.2% > target 5%"`` — otherwise → True
      (``"CI undefined (n=1)"`` / ``"CI undefined (mean 0)"`` when it cannot be computed)
    """
    _check_target(ci_target)
    if min_runs < 1 or max_runs < min_runs:
        raise ValueError(f"need 1 ≤ min_runs ≤ max_runs, got {min_runs}, {max_runs}")
    arr = as_samples(samples, min_n=0)
    n = int(arr.size)
    if n < min_runs:
        return True, "n<min"
    s = summarize(arr, confidence)
    if s.half_width is None:
        rel: float | None = None
        why = f"CI undefined (n={n})"
    elif s.rel_half_width is None:
        rel = 0.0 if s.half_width == 0 else None
        why = "CI undefined (mean 0)"
    else:
        rel = s.rel_half_width
        why = f"CI ±{rel * 100:.1f}% > target {ci_target * 100:g}%"
    if rel is not None and rel <= ci_target:
        return False, "converged"
    if n >= max_runs:
        return False, "max runs reached"
    return True, why


def runs_needed_estimate(
    samples: Sequence[float], ci_target: float, confidence: float = 0.95
) -> int | None:
    """Estimated *total* number of runs for the CI half-width to reach ``ci_target``·|mean|.

    pyperf's n = ⌈(Z·s/(W·mean))²⌉ with Student t instead of Z: the smallest
    n ≥ 2 with t_{(1+c)/2, n−1} · s/√n ≤ ci_target·|mean|, using the current
    sample mean and SD as if they were the truth (an estimate for an ETA, not
    a promise).  None when it cannot be estimated (n < 2 or mean 0).  Remaining
    runs = max(0, estimate − len(samples)).
    """
    _check_target(ci_target)
    check_confidence(confidence)
    arr = as_samples(samples, min_n=0)
    if arr.size < 2:
        return None
    s = summarize(arr, confidence)
    if s.mean == 0 or s.sd is None:
        return None
    if s.sd == 0:
        return 2
    target = ci_target * abs(s.mean)
    # scipy.stats.norm.ppf's own function (stats/special.py)
    z = float(special.ndtri(0.5 + confidence / 2.0))
    # t > z, so the z answer is a lower bound; walk up from it (a few steps at most).
    n = max(2, math.ceil((z * s.sd / target) ** 2))
    while t_quantile(confidence, n - 1) * s.sd / math.sqrt(n) > target:
        n += 1
    return n
