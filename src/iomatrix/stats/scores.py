"""Weighted read/write scores ("top performers": sequential and 4 KiB random weighed equally).

The 4 KiB random result is rescaled by the bare-metal ratio
factor = bm_seq / bm_rand4k, so that on bare metal it weighs exactly as much as
the sequential result, and the score is the mean of the two:

    weighted_score = (seq + rand4k · factor) / 2
    weighted_mixed = (weighted_read + weighted_write) / 2

``weighted_score_ci`` propagates run-to-run uncertainty: the score is a linear
combination of two independent sample means, so its SE is
½·√(s_seq²/n_seq + factor²·s_rand²/n_rand), with Welch–Satterthwaite df.  The
bare-metal values are treated as exact constants (their own noise is ignored).

``weighted_mixed_ci`` averages a weighted-read and a weighted-write ScoreCI.  The
two come from different workloads' runs, treated as independent, so

    SE_mixed = ½·√(SE_read² + SE_write²)

with SE recovered from each CI (half-width / t quantile at its df) and a
Welch–Satterthwaite df.  (Averaging the two CIs' bounds, as the report once
did, gives a CI as wide as their mean width: too wide by up to √2.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from iomatrix.stats.summary import as_samples, check_confidence, sample_sd, t_quantile


def _factor(bm_seq: float, bm_rand4k: float) -> float:
    if bm_rand4k == 0:
        raise ValueError("bare-metal 4k random result is 0: the weighting factor is undefined")
    return bm_seq / bm_rand4k


def weighted_score(seq: float, rand4k: float, bm_seq: float, bm_rand4k: float) -> float:
    """mean(seq, rand4k × bm_seq/bm_rand4k)."""
    return (seq + rand4k * _factor(bm_seq, bm_rand4k)) / 2.0


def weighted_mixed(wr: float, ww: float) -> float:
    """Mean of the weighted read and weighted write scores."""
    return (wr + ww) / 2.0


class ScoreCI(NamedTuple):
    score: float
    low: float | None
    high: float | None
    df: float | None


def weighted_score_ci(
    seq: Sequence[float],
    rand4k: Sequence[float],
    bm_seq: float,
    bm_rand4k: float,
    confidence: float = 0.95,
) -> ScoreCI:
    """Weighted score of the sample means with a propagated Student-t CI (bounds None if n < 2)."""
    check_confidence(confidence)
    f = _factor(bm_seq, bm_rand4k)
    xs = as_samples(seq, name="seq")
    xr = as_samples(rand4k, name="rand4k")
    score = weighted_score(float(xs.mean()), float(xr.mean()), bm_seq, bm_rand4k)
    if xs.size < 2 or xr.size < 2:
        return ScoreCI(score, None, None, None)
    vs = sample_sd(xs) ** 2 / xs.size
    vr = f * f * sample_sd(xr) ** 2 / xr.size
    var = (vs + vr) / 4.0
    if var == 0:
        return ScoreCI(score, score, score, None)
    df = (vs + vr) ** 2 / (vs * vs / (xs.size - 1) + vr * vr / (xr.size - 1))
    half = t_quantile(confidence, df) * math.sqrt(var)
    return ScoreCI(score, score - half, score + half, df)


def weighted_mixed_ci(read: ScoreCI, write: ScoreCI, confidence: float = 0.95) -> ScoreCI:
    """Mean of a weighted-read and a weighted-write score with a propagated CI (see the module
    docstring)."""
    check_confidence(confidence)
    score = weighted_mixed(read.score, write.score)
    if read.low is None or write.low is None or read.high is None or write.high is None:
        return ScoreCI(score, None, None, None)
    parts = []
    for ci in (read, write):
        half = (ci.high - ci.low) / 2.0  # type: ignore[operator]
        if half == 0:
            parts.append((0.0, None))
            continue
        assert ci.df is not None
        parts.append(((half / t_quantile(confidence, ci.df)) ** 2, ci.df))
    v = sum(p[0] for p in parts)
    if v == 0:
        return ScoreCI(score, score, score, None)
    df = v * v / sum(p[0] ** 2 / p[1] for p in parts if p[1] is not None)
    half = t_quantile(confidence, df) * math.sqrt(v) / 2.0
    return ScoreCI(score, score - half, score + half, df)
