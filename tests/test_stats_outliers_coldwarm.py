"""mad_outliers() and cold_vs_warm(): flags and tests, never deletions."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats import cold_vs_warm, mad_outliers, modified_z_scores


def test_mad_outlier_hand_example() -> None:
    # sorted: 9.8 10 10.1 10.2 10.5 15 → median 10.15
    # |dev|: 0.15 0.35 0.35 0.05 0.05 4.85 → sorted 0.05 0.05 0.15 0.35 0.35 4.85 → MAD = 0.25
    # M(15) = 0.6745 · 4.85 / 0.25 = 13.085 > 3.5;  M(9.8) = 0.6745 · (−0.35)/0.25 = −0.944
    x = [10.0, 10.5, 9.8, 10.2, 10.1, 15.0]
    z = modified_z_scores(x)
    assert z[5] == pytest.approx(13.0853, abs=1e-4)
    assert z[2] == pytest.approx(-0.9443, abs=1e-4)
    assert mad_outliers(x) == [5]
    assert x == [10.0, 10.5, 9.8, 10.2, 10.1, 15.0]  # flags only, input untouched


def test_mad_zero_falls_back_to_mean_absolute_deviation() -> None:
    # median 5, MAD 0; MeanAD = (0+0+0+0+1)/5 = 0.2 → M(6) = 1/(1.253314·0.2) = 3.989 > 3.5
    assert modified_z_scores([5, 5, 5, 5, 6])[4] == pytest.approx(3.9894, abs=1e-4)
    assert mad_outliers([5, 5, 5, 5, 6]) == [4]
    assert mad_outliers([5, 5, 5, 5, 5]) == []
    assert mad_outliers([7.0]) == []


def test_mad_threshold_is_configurable() -> None:
    assert mad_outliers([10.0, 10.5, 9.8, 10.2, 10.1, 15.0], threshold=20) == []


def test_seed001_cold_run_differs() -> None:
    # Seed 001, "type qcow2 cache writethrough aio threads if ide prealloc no", writes: first run on
    # the fresh image 1593.8 s, then ~690 s. warm: mean 691.7005, s = 18.592; t = (1593.794 −
    # 691.7005)/(18.592·√(1 + 1/4)) = 43.40, df = 3.
    cw = cold_vs_warm([1593.794, 670.108, 708.875, 705.443, 682.376])
    assert cw.cold == 1593.794
    assert cw.warm is not None and cw.warm.n == 4
    assert cw.warm.mean == pytest.approx(691.7005)
    assert cw.t == pytest.approx(43.398, abs=1e-3)
    assert cw.df == 3
    assert cw.p_value is not None and cw.p_value < 1e-4
    assert cw.differs and cw.tested
    assert cw.ratio == pytest.approx(1593.794 / 691.7005)


def test_ordinary_first_run_does_not_differ() -> None:
    # Seed 001, "type qcow2 cache unsafe aio native if virtio prealloc yes", writes: first run is
    # typical.
    cw = cold_vs_warm(
        [213.828, 210.642, 220.054, 210.911, 206.659, 221.735, 213.031, 209.053, 209.906, 226.05]
    )
    assert not cw.differs
    assert cw.p_value is not None and cw.p_value > 0.5


def test_prediction_test_is_not_fooled_by_many_warm_runs() -> None:
    # Nine warm runs with s = 1 around 100, cold run 1 SD away: an ordinary draw.
    # prediction: t = 1/√(1 + 1/9) = 0.949 (p ≈ 0.37); one-sample: t = 1/(1/3) = 3 (p ≈ 0.017).
    warm = [100 + d for d in (-1.5, -1, -0.5, 0, 0, 0, 0.5, 1, 1.5)]
    sd = math.sqrt(sum(d * d for d in (-1.5, -1, -0.5, 0, 0, 0, 0.5, 1, 1.5)) / 8)
    cold = 100 + sd
    pred = cold_vs_warm([cold, *warm])
    one = cold_vs_warm([cold, *warm], method="one_sample")
    assert pred.t == pytest.approx(1 / math.sqrt(1 + 1 / 9))
    assert not pred.differs
    assert one.t == pytest.approx(3.0)
    assert one.differs


def test_too_few_warm_runs_is_untested_not_an_error() -> None:
    cw = cold_vs_warm([300.0, 200.0, 201.0])
    assert cw.p_value is None and not cw.differs and not cw.tested
    assert "untested" in cw.test
    single = cold_vs_warm([300.0])
    assert single.warm is None and single.p_value is None


def test_constant_warm_runs_decided_exactly() -> None:
    assert cold_vs_warm([5.0, 5.0, 5.0, 5.0]).p_value == 1.0
    cw = cold_vs_warm([6.0, 5.0, 5.0, 5.0])
    assert cw.p_value == 0.0 and cw.differs
