"""Outlier *flags* (never deletions) by the Iglewicz–Hoaglin modified z-score.

    M_i = 0.6745 · (x_i − median) / MAD,      MAD = median(|x_i − median|)

A sample is flagged when |M_i| > threshold (3.5, as recommended by Iglewicz
and Hoaglin, 1993).  0.6745 ≈ Φ⁻¹(0.75) makes MAD/0.6745 a consistent
estimate of σ for normal data.

MAD = 0 (more than half of the samples are identical): the MAD carries no
scale, so we fall back to the mean absolute deviation around the median,
    M_i = (x_i − median) / (1.253314 · MeanAD),
1.253314 ≈ √(π/2) making MeanAD·1.253314 consistent for σ.  If that is 0 too,
every sample equals the median and nothing is flagged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from iomatrix.stats.summary import as_samples

_MAD_K = 0.6745
_MEANAD_K = 1.253314


def modified_z_scores(samples: Sequence[float]) -> list[float]:
    """Modified z-score of every sample (0.0 for all when the samples have no spread)."""
    arr = as_samples(samples)
    med = float(np.median(arr))
    dev = arr - med
    mad = float(np.median(np.abs(dev)))
    if mad > 0:
        z = _MAD_K * dev / mad
    else:
        mean_ad = float(np.mean(np.abs(dev)))
        if mean_ad == 0:
            return [0.0] * int(arr.size)
        z = dev / (_MEANAD_K * mean_ad)
    return [float(v) for v in z]


def mad_outliers(samples: Sequence[float], threshold: float = 3.5) -> list[int]:
    """Indices (in input order) of samples whose |modified z-score| exceeds ``threshold``.

    Flags only: the caller keeps every sample and decides how to report them.
    """
    if threshold <= 0:
        raise ValueError(f"threshold must be > 0, got {threshold}")
    return [i for i, z in enumerate(modified_z_scores(samples)) if abs(z) > threshold]
