"""Intervals that respect the quantity (issue 38): no interval of a quantity that cannot be negative
reaches below 0, and an interval wider than 10× marks its estimate "not measured precisely"."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iomatrix.stats import blocked_analysis, compare_sweeps, ratio_ci, summarize
from iomatrix.stats.precision import imprecise


def test_random_positive_samples_never_get_a_negative_bound() -> None:
    """Property: for random positive samples (log-normal, exponential, uniform near 0; n = 2..12;
        seeded, so a
    failure reproduces) neither a summary nor a ratio nor a sweep comparison has a bound ≤ 0 (a
    bound of 0 only where a sample is 0), and a stated (precise) mean lies inside its interval."""
    rng = np.random.default_rng(38)
    draws = [
        lambda n: rng.lognormal(5.0, rng.uniform(0.01, 2.5), n),
        lambda n: rng.exponential(100.0, n),
        lambda n: rng.uniform(1e-6, 1.0, n) * rng.choice([1.0, 1e4]),
    ]
    for i in range(600):
        n = int(rng.integers(2, 13))
        a = list(draws[i % 3](n))
        b = list(draws[(i + 1) % 3](int(rng.integers(2, 13))))
        s = summarize(a)
        assert s.ci_low is not None and s.ci_high is not None
        assert 0.0 < s.ci_low <= s.ci_high, (a, s)
        if not s.imprecise:
            assert s.ci_low <= s.mean <= s.ci_high
        r = ratio_ci(a, b)
        assert r.low is not None and r.high is not None and 0.0 < r.low <= r.ratio <= r.high, (
            a,
            b,
            r,
        )
        (change,) = compare_sweeps({"k": a}, {"k": b})
        assert change.ratio.low is not None and change.ratio.low > 0.0


def test_results_example_19870_iops_has_a_positive_interval() -> None:
    """`results` printed 19,870  -825–40,565 IOPS: two runs 19,870 ± 1,629 (t = 12.706 with 1 df).
    The t interval of the logs keeps the figure and a positive interval, exp(mean ln x ∓ t·sd(ln
    x)/√2)."""
    runs = [18241.2, 21498.8]
    plain = summarize(runs, scale="real")
    assert plain.ci_low == pytest.approx(-825, abs=3) and plain.ci_high == pytest.approx(
        40565, abs=3
    )
    s = summarize(runs)
    logs = [math.log(x) for x in runs]
    half = 12.706205 * abs(logs[1] - logs[0]) / math.sqrt(2) / math.sqrt(2)
    gm = math.exp(sum(logs) / 2)
    assert s.mean == 19870.0 and s.interval == "log-t"
    assert (s.ci_low, s.ci_high) == pytest.approx((gm * math.exp(-half), gm * math.exp(half)))
    assert s.ci_low > 0 and not s.imprecise  # about 7,000–56,000: wide (two runs) but within 10×


def test_ss_attained_one_in_three_is_a_wilson_interval_inside_0_1() -> None:
    """`ss.attained 0.333  -1.1–1.77`: one steady run in three. Wilson's score interval (hand
    arithmetic: z = 1.959964, p = 1/3, n = 3) is 0.0615–0.7923, and that spans 13× — not measured
    precisely."""
    s = summarize([0.0, 1.0, 0.0], scale="proportion")
    z, p, n = 1.959964, 1 / 3, 3
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert (s.ci_low, s.ci_high) == pytest.approx((centre - half, centre + half), abs=1e-6)
    assert (round(s.ci_low, 4), round(s.ci_high, 4)) == (0.0615, 0.7923)
    assert s.interval == "wilson" and s.imprecise
    # constant: the point, as before
    assert summarize([1.0, 1.0, 1.0], scale="proportion").ci_low == 1.0


def test_compare_all_example_ratio_0807_gets_a_positive_interval() -> None:
    """`compare --all` printed 0.807  -5.192–8.277: Fieller's lower root is negative when the
    numerator is not clearly above 0. The log/delta interval replaces it, is positive and is flagged
    as imprecise."""
    # B/A = 2050/2350; B too noisy to be clearly above 0
    before, after = [2300.0, 2400.0], [100.0, 4000.0]
    fieller = ratio_ci(after, before, positive=False)
    assert fieller.low is not None and fieller.low < 0
    r = ratio_ci(after, before)
    assert r.ratio == pytest.approx(2050 / 2350) and r.low is not None and r.high is not None
    ua = np.var(after, ddof=1) / 2 / 2050**2
    ub = np.var(before, ddof=1) / 2 / 2350**2
    from scipy import stats as st

    df = (ua + ub) ** 2 / (ua**2 + ub**2)
    half = st.t.ppf(0.975, df) * math.sqrt(ua + ub)
    assert (r.low, r.high) == pytest.approx((r.ratio * math.exp(-half), r.ratio * math.exp(half)))
    assert r.low > 0 and r.imprecise


def test_wide_ratio_is_not_measured_precisely_but_a_tight_one_is() -> None:
    """`rank` printed 2.71× (0.04–195.49): such a ratio is flagged, a 5 % one is not."""
    assert imprecise(0.04, 195.49) and imprecise(-5.192, 8.277) and imprecise(0.0, 1.0)
    assert not imprecise(1.9, 3.1) and not imprecise(2.0, 2.0) and not imprecise(None, None)
    assert imprecise(1.0, 10.01) and not imprecise(1.0, 10.0)
    assert not ratio_ci([100.0, 101.0, 99.0], [50.0, 51.0, 49.0]).imprecise


def test_blocked_ratios_are_positive() -> None:
    """The blocked analysis' ratios are exp(d ∓ t·SE): positive by construction (pinned here so a
    change to the model keeps it)."""
    data = {"a": [(1, 100.0), (2, 500.0), (3, 40.0)], "b": [(1, 90.0), (2, 20.0), (3, 300.0)]}
    an = blocked_analysis(data)
    assert an.pairs and all(p.ratio_low is not None and p.ratio_low > 0 for p in an.pairs)


@pytest.mark.parametrize("bad", [[1.0, -2.0], [1.0, math.inf], [math.nan, 1.0]])
def test_a_negative_or_non_finite_sample_is_refused_not_summarised(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)
    with pytest.raises(ValueError):
        ratio_ci(bad, [1.0, 2.0])
