"""Steps in a figure's history: where a host's level moved for good, over many sweeps (issue 52).

Comparing each sweep with the one before (report/history.py) misses a drift that no single pair
shows, and on a host whose sweeps swing 7–23 % from day to day it flags a one-off swing as readily
as a lasting change. asv looks at the whole series instead: its curves are piecewise constant plus
noise, and a step is where the level of the best piecewise-constant fit changes (asv's step_detect).
Here the same view is sized for a host's tens of sweeps rather than thousands of commits, and
calibrated by permutation, because with so few points a fit's boundaries, chosen to make the levels
differ most, look significant far too often (an optimal-partitioning fit tested by z called 12–17 %
of step-free series stepped in a simulation; this procedure 4.8 % at α = 5 %).

A sweep's point is m_j, the mean of the log of its runs' values (ratios, not differences, are what
change). A step is a level that held for at least MIN_SWEEPS sweeps before and after: a lone sweep
off the line is the consecutive comparison's business, not a lasting change. Binary segmentation:

1. Over every split of the series with ≥ MIN_SWEEPS points on each side, the pooled two-sample t of
   the levels before and after, t(k) = (m̄_after − m̄_before) / √(s²(1/k + 1/(n−k))), s² the pooled
   within-side variance of the points (so the host's own sweep-to-sweep noise is the yardstick,
   whatever its runs say). T = max |t(k)|.
2. p = (1 + #{permutations with T* ≥ T}) / (1 + PERMUTATIONS): T recomputed on the series shuffled,
   which under "no step" is as likely as the order observed. This prices in that the split was
   chosen for being the largest.
3. If p < α, the split is a step, and each side is searched again the same way.

The caller adjusts p across everything it tests together (one host's figures: Holm, `real_steps`)
and keeps a step only when its ratio exp(m̄_after − m̄_before) moves by more than its threshold θ.

Worked example (one figure, IOPS of eight sweeps, one run each): levels m = ln[100, 98, 101, 99, 80,
82, 79, 81] = [4.605, 4.585, 4.615, 4.595, 4.382, 4.407, 4.369, 4.394]. Splits with ≥ 2 sweeps a
side are after sweep 2 to 6; after the fourth, m̄ = 4.600 and 4.388, pooled s² = 0.00028, t =
−0.212/√(0.00028 · (1/4 + 1/4)) = −17.9, the largest. Only the orders that keep the four high values
on one side of a 4/4 split reach it: 2 · 4! · 4! of the 8! orders, p = 2/70 = 0.029 (the
permutations drawn gave 0.024). A step, with exp(−0.212) = 0.81: 19 % lower from the fifth sweep on.
The same pattern over six sweeps (3 + 3) has p = 2/20 = 0.1: six sweeps cannot show a step at α =
0.05, whatever its size; the smallest p a split of k and n − k sweeps can have is 2/C(n, k). The
history's consecutive comparison still flags the change itself."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from iomatrix.stats.holm_stepdown import holm

K = TypeVar("K")  # what names a figure to the caller: a key, a (plan, key) pair
MIN_SWEEPS = 2  # sweeps on each side of a step: a level that held, not one sweep off the line
PERMUTATIONS = 499  # p's resolution 0.002; ~40 ms per figure of 30 sweeps
# the permutations are drawn the same way every time: the same store gives the same history
SEED = 52


@dataclass(frozen=True)
class Step:
    """A lasting change of level: from sweep index `at` on (0-based, in the series' order)."""

    at: int
    # the level before (geometric mean of the sweeps' geometric means, in the figure's unit)
    before: float
    after: float
    ratio: float  # after / before
    p: float  # permutation p of the split, before any adjustment across steps
    sweeps_before: int
    sweeps_after: int


def level(values: Sequence[float]) -> float:
    """A sweep's point: the mean of the log of its runs' values (all > 0)."""
    return sum(math.log(v) for v in values) / len(values)


def largest_split(levels: np.ndarray) -> tuple[float, int | None]:
    """(t, k) of the split with the largest |t| (module docstring, step 1); (0, None) when none has
    MIN_SWEEPS a side or every side is flat."""
    n = len(levels)
    c, c2 = np.cumsum(levels), np.cumsum(np.square(levels))
    best: tuple[float, int | None] = (0.0, None)
    for k in range(MIN_SWEEPS, n - MIN_SWEEPS + 1):
        mean_a, mean_b = c[k - 1] / k, (c[-1] - c[k - 1]) / (n - k)
        ss = (c2[k - 1] - k * mean_a * mean_a) + ((c2[-1] - c2[k - 1]) - (n - k) * mean_b * mean_b)
        s2 = ss / (n - 2)
        if s2 <= 1e-24:
            continue
        t = float((mean_b - mean_a) / math.sqrt(s2 * (1 / k + 1 / (n - k))))
        if abs(t) > abs(best[0]):
            best = (t, k)
    return best


def _search(
    levels: np.ndarray, offset: int, alpha: float, rng: np.random.Generator, out: list[Step]
) -> None:
    t, k = largest_split(levels)
    if k is None:
        return
    shuffled, reached = levels.copy(), 1
    for _ in range(PERMUTATIONS):
        rng.shuffle(shuffled)
        reached += abs(largest_split(shuffled)[0]) >= abs(t)
    p = reached / (PERMUTATIONS + 1)
    if p >= alpha:
        return
    before, after = float(levels[:k].mean()), float(levels[k:].mean())
    out.append(
        Step(
            at=offset + k,
            before=math.exp(before),
            after=math.exp(after),
            ratio=math.exp(after - before),
            p=p,
            sweeps_before=k,
            sweeps_after=len(levels) - k,
        )
    )
    _search(levels[:k], offset, alpha, rng, out)
    _search(levels[k:], offset + k, alpha, rng, out)


def detect_steps(series: Sequence[Sequence[float]], alpha: float = 0.05) -> list[Step]:
    """The steps of one figure over sweeps in time order (each sweep: its runs' values), by binary
    segmentation with a permutation test at `alpha` per split; a sweep without positive values is
    left out. In order of `at`."""
    levels = np.array([level(v) for v in series if v and all(x > 0 for x in v)])
    if len(levels) < 2 * MIN_SWEEPS:
        return []
    found: list[Step] = []
    _search(levels, 0, alpha, np.random.default_rng(SEED), found)
    return sorted(found, key=lambda s: s.at)


def real_steps(
    found: dict[K, list[Step]], alpha: float, threshold: float
) -> dict[K, list[tuple[Step, float]]]:
    """Of every figure's steps, those significant after Holm across all of them (p adjusted, second
    in each pair) and larger than `threshold` (a fraction: 0.05 keeps a ratio below 0.95 or above
    1/0.95)."""
    flat = [(key, s) for key, steps in found.items() for s in steps]
    if not flat:
        return {}
    adjusted = holm([s.p for _, s in flat])
    out: dict[K, list[tuple[Step, float]]] = {}
    for (key, s), p in zip(flat, adjusted, strict=True):
        if p < alpha and abs(math.log(s.ratio)) > -math.log(1 - threshold):
            out.setdefault(key, []).append((s, p))
    return out
