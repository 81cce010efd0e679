"""stats/looks.py `rounds_needed`: the smallest n the formula allows, found window by window from
quantiles computed once per α, is the n of the formula evaluated over every n at once (how it was
computed before issue 52's fleet answer made it a hot path: 10 ms a call)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
from scipy.special import ndtri

from iomatrix.stats.looks import (
    FIRST_LOOK,
    FIRST_WINDOW,
    MAX_ROUNDS_ESTIMATED,
    look_level,
    rounds_needed,
)


@functools.cache
def every_level(alpha: float) -> np.ndarray:
    """look_level at every n from FIRST_LOOK to MAX_ROUNDS_ESTIMATED, one call a look: the levels
    the race tests against, not the vectorised copy `rounds_needed` keeps."""
    return np.array([look_level(alpha, n) for n in range(FIRST_LOOK, MAX_ROUNDS_ESTIMATED + 1)])


def over_every_n(
    gap_log: float, sd_log: float, rounds_done: int, alpha: float, power: float, two_sided: bool
) -> int | None:
    """The docstring's formula over the whole range of n in one array."""
    if sd_log == 0:
        return 1
    n = np.arange(max(FIRST_LOOK, rounds_done + 1), MAX_ROUNDS_ESTIMATED + 1, dtype=float)
    level = every_level(alpha)[n.astype(int) - FIRST_LOOK] / (2.0 if two_sided else 1.0)
    need = ((ndtri(1.0 - level) + ndtri(power)) * np.sqrt(2.0) * sd_log / abs(gap_log)) ** 2
    ok = np.nonzero(n >= need)[0]
    return None if ok.size == 0 else max(1, int(n[ok[0]]) - rounds_done)


def test_the_windowed_search_finds_the_n_of_the_whole_range() -> None:
    seen = set()
    for gap, sd, done, alpha, two in itertools.product(
        (0.5, 0.05, 0.004, -0.02, 1e-4),
        (0.0, 0.01, 0.09, 0.3, 2.0),
        (0, 2, 3, 60, 5000, MAX_ROUNDS_ESTIMATED),
        (0.02, 0.05),
        (True, False),
    ):
        got = rounds_needed(gap, sd, done, alpha, 0.8, two)
        assert got == over_every_n(gap, sd, done, alpha, 0.8, two), (gap, sd, done, alpha, two)
        first = max(FIRST_LOOK, done + 1) + FIRST_WINDOW  # the first n past the first window
        seen.add(
            "none" if got is None else "first window" if sd == 0 or got + done < first else "later"
        )
    assert seen == {"none", "first window", "later"}  # each way out of the search was taken
