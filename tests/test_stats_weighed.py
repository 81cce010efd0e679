"""The weighed ratio of two configurations over a role's figures (stats/weighed.py), on numbers
whose answer is known by hand."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats.weighed import Part, WeighedRatio, weighed_ratio


def _runs(mean: float, cv: float, n: int) -> list[float]:
    """n runs with the given mean and a sample SD of cv · mean exactly (symmetric ± pairs)."""
    assert n % 2 == 0
    # n/2 pairs at ±d: sample SD = d·√(n/(n−1))
    d = cv * mean / math.sqrt(n / (n - 1))
    return [mean + d, mean - d] * (n // 2)


def test_the_docstrings_worked_example() -> None:
    """The database trade-off of the module docstring: W = 1.09, 90% interval 0.90–1.31×."""
    parts = [
        Part(0.5, True, _runs(3800, 0.1, 8), _runs(3000, 0.1, 8)),
        Part(0.25, False, _runs(900, 0.6, 8), _runs(500, 0.6, 8)),
        Part(0.25, False, _runs(800, 0.6, 8), _runs(640, 0.6, 8)),
    ]
    w = weighed_ratio(parts)
    assert w is not None
    assert w.ratio == pytest.approx(1.088, abs=0.001)
    assert (round(w.low, 2), round(w.high, 2)) == (0.90, 1.31)
    assert w.df == pytest.approx(31.0, abs=0.1)
    assert not w.separated() and not w.within(0.05)


def test_weights_are_relative_and_the_sign_follows_the_figure() -> None:
    """2 : 1 : 1 is ½ : ¼ : ¼; a latency counts lower as better, a rate higher."""
    a = [Part(2, True, [100, 100], [121, 121]), Part(2, False, [10, 10], [10, 10])]
    w = weighed_ratio(a)
    assert w is not None and w.ratio == pytest.approx(1.1)  # √1.21 · 1
    lat = weighed_ratio([Part(1, False, [200, 200], [100, 100])])
    assert lat is not None and lat.ratio == pytest.approx(2.0)
    # steady runs: the interval is the point, separated, not within 5%
    assert (lat.low, lat.high) == (pytest.approx(2.0), pytest.approx(2.0)) and lat.separated()


def test_within_is_tost_at_the_intervals_level() -> None:
    assert WeighedRatio(1.0, 0.96, 1.04, 10).within(0.05)
    assert not WeighedRatio(1.0, 0.94, 1.04, 10).within(0.05)  # 1/1.05 = 0.952
    assert not WeighedRatio(1.0, 0.96, 1.06, 10).within(0.05)
    assert not WeighedRatio(1.0, 0.96, 1.04, 10).separated()


def test_nothing_to_weigh_is_none() -> None:
    assert weighed_ratio([]) is None
    assert weighed_ratio([Part(1, True, [1.0], [1.0, 2.0])]) is None  # one run of A
    assert weighed_ratio([Part(1, True, [0.0, 0.0], [1.0, 2.0])]) is None  # a mean of 0
    assert weighed_ratio([Part(0, True, [1.0, 1.0], [1.0, 2.0])]) is None  # no weight
