"""summarize(): pinned against published t tables and seed 001's own CIs."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats import summarize, t_quantile

# Seed 001, "type qcow2 cache unsafe aio native if virtio prealloc yes", writes (seconds).
SEED001_QCOW2_UNSAFE_NATIVE = [
    213.828,
    210.642,
    220.054,
    210.911,
    206.659,
    221.735,
    213.031,
    209.053,
    209.906,
    226.05,
]
# Seed 001, "type raw cache unsafe aio threads if virtio prealloc no", writes;
# published "214.573400 +/- 6.630368".
SEED001_RAW_UNSAFE_THREADS = [207.495, 218.463, 211.106, 215.195, 220.608]


@pytest.mark.parametrize(
    ("df", "published"),
    [(1, 12.706), (4, 2.776), (9, 2.262), (29, 2.045)],  # any printed t table, two-sided 95%
)
def test_t_quantiles_match_printed_tables(df: int, published: float) -> None:
    assert t_quantile(0.95, df) == pytest.approx(published, abs=5e-4)


def test_hand_computed_ci() -> None:
    # [10, 12, 14, 16, 18]: mean 14; deviations ±4, ±2, 0 → Σd² = 40; s² = 40/4 = 10; SE = √(10/5) =
    # √2. half-width = t_{0.975,4} · √2 = 2.776 · 1.41421 = 3.926.
    s = summarize([10, 12, 14, 16, 18])
    assert s.n == 5
    assert s.mean == 14.0
    assert s.median == 14.0
    assert s.sd == pytest.approx(math.sqrt(10))
    assert s.cv == pytest.approx(math.sqrt(10) / 14)
    assert s.half_width == pytest.approx(2.776 * math.sqrt(2), rel=2e-4)
    assert s.ci_low == pytest.approx(14 - 3.926, abs=1e-3)
    assert s.ci_high == pytest.approx(14 + 3.926, abs=1e-3)
    assert s.rel_half_width == pytest.approx(3.926 / 14, abs=1e-4)
    assert s.sem == pytest.approx(math.sqrt(2))
    assert s.df == 4


def test_n2_uses_one_degree_of_freedom() -> None:
    # [1, 3]: mean 2, s = √2, SE = s/√2 = 1 → half-width = t_{0.975,1} = 12.706.
    s = summarize([1.0, 3.0], scale="real")
    assert s.half_width == pytest.approx(12.706, abs=5e-4)
    assert (s.ci_low, s.ci_high) == pytest.approx((2 - 12.706, 2 + 12.706), abs=5e-4)
    # The same runs of a quantity that cannot be negative (the default): the t interval would reach
    # below 0, so the interval is the t interval of the logs, exp(ln √3 ∓ 12.706·(ln 3/√2)/√2), and
    # far too wide to state.
    p = summarize([1.0, 3.0])
    half = 12.706205 * (math.log(3.0) / math.sqrt(2)) / math.sqrt(2)
    assert p.interval == "log-t" and p.imprecise
    assert (p.ci_low, p.ci_high) == pytest.approx(
        (math.sqrt(3) * math.exp(-half), math.sqrt(3) * math.exp(half))
    )


def test_n1_has_no_spread_and_no_ci() -> None:
    s = summarize([42.0])
    assert (s.n, s.mean, s.median) == (1, 42.0, 42.0)
    assert s.sd is None and s.cv is None and s.sem is None and s.df is None
    assert s.ci_low is None and s.ci_high is None
    assert s.half_width is None and s.rel_half_width is None


def test_zero_variance_collapses_ci_exactly() -> None:
    s = summarize([0.1, 0.1, 0.1])  # float mean of 0.1s is not exactly 0.1; sd must still be 0
    assert s.mean == 0.1
    assert s.sd == 0.0
    assert s.half_width == 0.0
    assert s.ci_low == s.ci_high == 0.1
    assert s.rel_half_width == 0.0


def test_mean_zero_has_no_relative_measures() -> None:
    s = summarize([-1.0, 1.0], scale="real")
    assert s.mean == 0.0
    assert s.cv is None and s.rel_half_width is None
    assert s.half_width == pytest.approx(12.706, abs=5e-4)  # SE = √2/√2 = 1


def test_invalid_input_raises() -> None:
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError):
        summarize([1.0, 2.0], confidence=1.0)


def test_seed001_ci_is_student_t_with_sample_sd() -> None:
    # Published: "writeinterval: 214.186900 +/- 4.513276".
    s = summarize(SEED001_QCOW2_UNSAFE_NATIVE)
    assert s.mean == pytest.approx(214.1869, abs=1e-9)
    # It matches Student t with n−1 = 9 df and the sample SD (ddof=1): 2.262157 · 6.309119/√10 =
    # 4.513272, i.e. the published value to 4e-6 (its own rounding).
    assert s.half_width == pytest.approx(4.513276, abs=1e-5)
    # ... and NOT the other conventions seen in the anchors:
    assert s.sd is not None
    z_sample_sd = 1.959964 * s.sd / math.sqrt(10)  # normal quantile: 3.910
    t_pop_sd = 2.262157 * s.sd * math.sqrt(9 / 10) / math.sqrt(10)  # population SD (pbench): 4.282
    assert abs(z_sample_sd - 4.513276) > 0.5
    assert abs(t_pop_sd - 4.513276) > 0.2


def test_seed001_five_run_cell_uses_four_df() -> None:
    s = summarize(SEED001_RAW_UNSAFE_THREADS)
    assert s.mean == pytest.approx(214.5734, abs=1e-9)
    assert s.half_width == pytest.approx(6.630368, abs=1e-5)  # 2.776 · s/√5


def test_other_confidence_levels() -> None:
    # 90% two-sided, df=4: t_{0.95,4} = 2.132 (printed tables).
    s = summarize([10, 12, 14, 16, 18], confidence=0.90)
    assert s.half_width == pytest.approx(2.132 * math.sqrt(2), abs=1e-3)
    assert s.confidence == 0.90
