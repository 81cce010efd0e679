"""The weighed ratio paired by round (stats/weighed_paired.py), on numbers whose answer is known by
hand."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats.paired import paired_comparison
from iomatrix.stats.weighed_paired import PairedPart, paired_weighed_ratio


def test_the_docstrings_worked_example() -> None:
    """Weights 2 : 1 : 1, 8 shared rounds each: W = 1.09, 90% interval 0.987–1.20×, df 17.6."""
    w = paired_weighed_ratio(
        [
            PairedPart(2, True, math.log(0.79), 0.04, 7),
            PairedPart(1, False, math.log(500 / 900), 0.15, 7),
            PairedPart(1, False, math.log(0.8), 0.15, 7),
        ]
    )
    assert w is not None
    assert math.log(w.ratio) == pytest.approx(0.0849, abs=5e-5)
    assert (round(w.low, 3), round(w.high, 2)) == (0.987, 1.20)
    assert w.df == pytest.approx(17.6, abs=0.05)
    assert not w.separated() and not w.within(0.05)


def test_a_host_level_shift_cancels_in_each_round() -> None:
    """The host's level moves 4× over three rounds and B is 1.25× A's rate in each: paired, the
    ratio is B's advantage with a narrow interval (what the unpaired ratio of means cannot show)."""
    a = {1: 1000.0, 2: 2000.0, 3: 4000.0}
    b = {1: 1250.0, 2: 2520.0, 3: 4980.0}
    pc = paired_comparison(b, a)
    assert pc.ratio is not None and pc.se_log is not None
    w = paired_weighed_ratio([PairedPart(1, True, math.log(pc.ratio), pc.se_log, pc.df)])
    assert w is not None and w.ratio == pytest.approx(1.25, abs=0.01)
    assert w.low > 1.2 and w.high < 1.3 and w.separated()
    # a latency counts lower as better: the same ratio turned
    lat = paired_weighed_ratio([PairedPart(1, False, math.log(pc.ratio), pc.se_log, pc.df)])
    assert lat is not None and lat.ratio == pytest.approx(1 / w.ratio)


def test_steady_rounds_give_the_point_and_nothing_to_weigh_is_none() -> None:
    w = paired_weighed_ratio([PairedPart(1, True, math.log(1.1), 0.0, 4)])
    assert w is not None and (w.low, w.ratio, w.high) == pytest.approx((1.1, 1.1, 1.1))
    assert paired_weighed_ratio([]) is None
    assert paired_weighed_ratio([PairedPart(1, True, 0.1, 0.05, 0)]) is None  # one shared round
    assert paired_weighed_ratio([PairedPart(0, True, 0.1, 0.05, 4)]) is None  # no weight
    assert paired_weighed_ratio([PairedPart(-1, True, 0.1, 0.05, 4)]) is None
