"""Jain's fairness index (stats/fairness.py) and the saturation point of a contention sweep
(stats/saturation.py)."""

from __future__ import annotations

import pytest

from iomatrix.stats.fairness import jain_index
from iomatrix.stats.saturation import AggregatePoint, Saturation, saturation


def test_equal_shares_are_perfectly_fair() -> None:
    assert jain_index([500.0, 500.0, 500.0, 500.0]) == pytest.approx(1.0)
    assert jain_index([42.0]) == pytest.approx(1.0)


def test_one_client_taking_everything_gives_one_over_n() -> None:
    assert jain_index([900.0, 0.0, 0.0]) == pytest.approx(1 / 3)


def test_k_of_n_sharing_equally_gives_k_over_n() -> None:
    assert jain_index([10.0, 10.0, 0.0, 0.0]) == pytest.approx(0.5)


def test_worked_example_and_scale_independence() -> None:
    # (1 + 3)² / (2 · (1 + 9)) = 16 / 20
    assert jain_index([1.0, 3.0]) == pytest.approx(0.8)
    assert jain_index([1000.0, 3000.0]) == pytest.approx(0.8)


def test_undefined_and_damaged_inputs() -> None:
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) is None
    with pytest.raises(ValueError):
        jain_index([1.0, -1.0])


def test_saturation_where_the_aggregate_stops_growing() -> None:
    points = [
        AggregatePoint(1, 1000, 950, 1050),
        AggregatePoint(2, 1900, 1850, 1950),
        AggregatePoint(4, 2000, 1900, 2100),
    ]
    assert saturation(points).clients == 2


def test_no_saturation_while_it_scales() -> None:
    points = [
        AggregatePoint(4, 3900, 3800, 4000),
        AggregatePoint(1, 1000, 990, 1010),
        AggregatePoint(2, 1990, 1950, 2030),
    ]
    assert saturation(points).clients is None


def test_overlapping_intervals_that_could_still_scale_are_not_decided() -> None:
    # the mean grew 50 %, the intervals overlap, and the upper end (1700) reaches past a quarter of
    # perfect scaling (1250): neither scaling nor saturation is shown — nothing is claimed (a 2-run
    # curve on a noisy host)
    points = [
        AggregatePoint(1, 1000, 600, 1400),
        AggregatePoint(2, 1500, 1300, 1700),
        AggregatePoint(4, 1600),
    ]
    assert saturation(points) == Saturation(clients=None, undecided=1)
    assert saturation(points).clients is None


def test_overlapping_intervals_below_a_quarter_of_scaling_are_saturated() -> None:
    # the intervals overlap and even the upper end at 2 clients (1200) adds less than a quarter of
    # perfect scaling
    points = [AggregatePoint(1, 1000, 600, 1400), AggregatePoint(2, 1100, 1000, 1200)]
    assert saturation(points) == Saturation(clients=1)


def test_a_small_gain_is_not_scaling() -> None:
    # +5% for doubling the clients: far below a quarter of perfect scaling, however tight the CIs
    points = [AggregatePoint(1, 1000, 999, 1001), AggregatePoint(2, 1050, 1049, 1051)]
    assert saturation(points).clients == 1
    assert saturation([AggregatePoint(1, 1000)]).clients is None
