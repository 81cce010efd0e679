"""Steady state (SNIA window rule, fio's verdict), adaptive repetition, seed 000 scores."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats import (
    fio_steady_state,
    needs_more_runs,
    runs_needed_estimate,
    snia_steady_state,
    weighted_mixed,
    weighted_score,
    weighted_score_ci,
)

# --- SNIA steady state -------------------------------------------------------------------------


def test_flat_series_is_steady() -> None:
    # ramp-up outside window
    ss = snia_steady_state([50.0, 120.0, 100.0, 100.0, 100.0, 100.0, 100.0])
    assert ss.attained
    assert (ss.range_frac, ss.slope_frac, ss.window_mean, ss.window) == (0.0, 0.0, 100.0, 5)


def test_ramping_series_fails_on_slope_even_with_an_acceptable_range() -> None:
    # [90, 93, 96, 99, 102]: mean 96; range 12/96 = 12.5% ≤ 20%;
    # LS slope = 3 per point → excursion 3·4 = 12 → 12/96 = 12.5% > 10%  → not steady.
    # (StorPerf's per-point rule, 3/96 = 3.1%, would have called this steady.)
    ss = snia_steady_state([90, 93, 96, 99, 102])
    assert ss.range_frac == pytest.approx(0.125)
    assert ss.slope_frac == pytest.approx(0.125)
    assert ss.window_mean == 96.0
    assert not ss.attained


def test_gentle_ramp_is_steady() -> None:
    # [100..104]: mean 102, range 4/102 = 3.9%, excursion 4/102 = 3.9%
    ss = snia_steady_state([100, 101, 102, 103, 104])
    assert ss.attained
    assert ss.slope_frac == pytest.approx(4 / 102)


def test_noisy_series_fails_on_range() -> None:
    # [100, 70, 110, 80, 105]: mean 93, range 40/93 = 43%;
    # Sxy = (−2)(7) + (−1)(−23) + 0 + (1)(−13) + (2)(12) = 20, Sxx = 10 → slope 2 → 8/93 = 8.6%
    ss = snia_steady_state([100, 70, 110, 80, 105])
    assert ss.range_frac == pytest.approx(40 / 93)
    assert ss.slope_frac == pytest.approx(8 / 93)
    assert not ss.attained


def test_short_series_and_bounds_are_inclusive() -> None:
    short = snia_steady_state([1.0, 2.0])
    assert not short.attained and short.range_frac is None and short.window == 2
    # range exactly 20%: [90, 110, 100, 110, 90] mean 100, range 20/100; slope 0
    assert snia_steady_state([90, 110, 100, 110, 90]).attained


def test_zero_mean_window_is_not_steady() -> None:
    ss = snia_steady_state([0.0] * 5)
    assert not ss.attained and ss.range_frac is None


# --- fio's verdict ------------------------------------------------------------------------------


def _fio_job(attained: int, iops: list[int]) -> dict:
    # Shape of fio's JSON (stat.c): one job with an ss= option.
    return {
        "jobname": "randread",
        "steadystate": {
            "ss": "iops_slope:0.300000%",
            "duration": len(iops),
            "attained": attained,
            "criterion": "0.120000%",
            "max_deviation": 0.0,
            "slope": 1.2,
            "data": {
                "bw": [i * 4 for i in iops],
                "iops": iops,
                "bw_mean": sum(iops) * 4 // len(iops),
                "iops_mean": sum(iops) // len(iops),
            },
        },
    }


def test_fio_block_is_read() -> None:
    ss = fio_steady_state(_fio_job(1, [1000, 1001, 999, 1002, 998]))
    assert ss is not None
    assert ss.attained and ss.source == "fio"
    assert ss.fio_criterion == pytest.approx(0.12)
    assert ss.fio_limit == pytest.approx(0.3)
    assert ss.window_mean == 1000
    assert ss.window == 5
    assert ss.range_frac == pytest.approx(4 / 1000)
    assert "iops_slope" in ss.rule


def test_fio_unfilled_window_is_not_rescored() -> None:
    ss = fio_steady_state(_fio_job(0, [1000, 1001, 0, 0, 0]))
    assert ss is not None and not ss.attained
    assert ss.range_frac is None and ss.slope_frac is None


def test_fio_without_ss_returns_none() -> None:
    assert fio_steady_state({"jobname": "x", "read": {}}) is None


# --- adaptive repetition ------------------------------------------------------------------------

SEED001 = [213.828, 210.642, 220.054, 210.911, 206.659, 221.735, 213.031, 209.053, 209.906, 226.05]


def test_needs_more_runs_reasons() -> None:
    assert needs_more_runs(SEED001[:2], min_runs=3, max_runs=10, ci_target=0.05) == (True, "n<min")
    # 10 runs: ±4.513/214.19 = ±2.1% ≤ 5%
    assert needs_more_runs(SEED001, 3, 20, 0.05) == (False, "converged")
    # 3 runs [213.828, 210.642, 220.054]: mean 214.84, s = 4.787, ±4.303·4.787/√3 = ±11.89 → 5.5%
    more, why = needs_more_runs(SEED001[:3], 3, 20, 0.05)
    assert more and why == "CI ±5.5% > target 5%"
    assert needs_more_runs(SEED001, 3, 10, 0.01) == (False, "max runs reached")


def test_runs_needed_estimate_uses_t_not_z() -> None:
    # mean 214.1869, s = 6.30912; target 1% → 2.141869.  z-formula: (1.96·6.30912/2.141869)² = 33.33
    # → 34. With t: n = 36 is the first with t_{n−1}·s/√n ≤ target (t_{35} = 2.0301 → 2.1351 ≤
    # 2.1419; n = 35: t_{34} = 2.0322 → 2.1672 > 2.1419).
    assert runs_needed_estimate(SEED001, 0.01) == 36
    assert runs_needed_estimate([1.0], 0.05) is None
    assert runs_needed_estimate([3.0, 3.0], 0.05) == 2
    # [1, 3]: mean 2, s = √2, target 100% → 2.  n = 4: t_{0.975,3}·√2/√4 = 3.182·0.7071 = 2.250 > 2;
    # n = 5: t_{0.975,4}·√2/√5 = 2.776·0.6325 = 1.756 ≤ 2  → 5.
    assert runs_needed_estimate([1.0, 3.0], 1.0) == 5


# --- seed 000 weighted scores -------------------------------------------------------------------


def test_weighted_score_by_hand() -> None:
    # bare metal: seq 200 MB/s, 4k random 10 MB/s → factor 20.
    # cell: seq 150, rand4k 5 → (150 + 5·20)/2 = 125.   Bare metal itself: (200 + 10·20)/2 = 200.
    assert weighted_score(150, 5, 200, 10) == 125.0
    assert weighted_score(200, 10, 200, 10) == 200.0
    # write side: bare metal seq 180, 4k 6 → factor 30; cell 120 and 3 → (120 + 90)/2 = 105
    assert weighted_score(120, 3, 180, 6) == 105.0
    assert weighted_mixed(125.0, 105.0) == 115.0
    with pytest.raises(ValueError):
        weighted_score(1, 1, 1, 0)


def test_weighted_score_ci_propagates_both_means() -> None:
    # seq [140, 150, 160]: mean 150, s² = 100, v = 100/3; rand [4, 5, 6]: mean 5, s² = 1, v = 1/3,
    # ×20² → 400/3 var(score) = (100/3 + 400/3)/4 = 41.667, SE = 6.455; df = (500/3)²/((100/3)²/2 +
    # (400/3)²/2) = 2.941
    ci = weighted_score_ci([140, 150, 160], [4, 5, 6], 200, 10)
    assert ci.score == pytest.approx(125.0)
    assert ci.df == pytest.approx(2.941, abs=1e-3)
    half = ci.high - ci.score
    assert half == pytest.approx(ci.score - ci.low)
    assert half / math.sqrt(125 / 3) == pytest.approx(3.2, abs=0.05)  # t_{0.975, 2.94} ≈ 3.20


def test_weighted_mixed_ci_propagates_the_two_standard_errors() -> None:
    """read: SE 2 at df 4 (half = t₄·2), write: SE 2 at df 4 → mixed SE = ½√8 = √2, df =
    8²/(16/4+16/4) = 8."""
    from scipy import stats as st

    from iomatrix.stats.scores import ScoreCI, weighted_mixed_ci

    t4 = st.t.ppf(0.975, 4)
    r = ScoreCI(100.0, 100 - 2 * t4, 100 + 2 * t4, 4.0)
    w = ScoreCI(50.0, 50 - 2 * t4, 50 + 2 * t4, 4.0)
    m = weighted_mixed_ci(r, w)
    assert m.score == 75.0 and m.df == pytest.approx(8.0)
    assert m.high - 75.0 == pytest.approx(st.t.ppf(0.975, 8) * 2**0.5)
