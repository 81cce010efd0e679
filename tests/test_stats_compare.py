"""welch(), holm(), ratio_ci(): pinned against R output and hand arithmetic."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats import holm, ratio_ci, welch

# R's `sleep` data set (Cushny & Peebles), extra hours of sleep by drug group.
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_welch_matches_r_t_test_on_sleep() -> None:
    # R: t.test(extra ~ group, data = sleep)   (Welch is R's default)
    #   t = -1.8608, df = 17.776, p-value = 0.07939
    #   95 percent confidence interval: -3.3654832  0.2054832
    #   mean in group 1: 0.75, mean in group 2: 2.33
    r = welch(SLEEP_1, SLEEP_2)
    assert r.mean_diff == pytest.approx(0.75 - 2.33)
    assert r.t == pytest.approx(-1.8608, abs=1e-4)
    assert r.df == pytest.approx(17.776, abs=1e-3)
    assert r.p_value == pytest.approx(0.07939, abs=1e-5)
    assert (r.ci_low, r.ci_high) == pytest.approx((-3.3654832, 0.2054832), abs=1e-7)
    assert not r.significant(0.05)


def test_welch_hand_arithmetic_unequal_n() -> None:
    # a = [19..23]: mean 21, s² = (4+1+0+1+4)/4 = 2.5,   s²/n = 0.5
    # b = [14,16,18,20]: mean 17, s² = (9+1+1+9)/3 = 20/3, s²/n = 5/3
    # SE = √(0.5 + 5/3) = √(13/6) = 1.471960;  t = 4 / 1.471960 = 2.717465
    # df = (13/6)² / (0.5²/4 + (5/3)²/3) = 4.694444 / 0.988426 = 4.749415
    # p (two-sided, t=2.7175, df=4.7494) = 0.04422  (R: t.test(c(19:23), c(14,16,18,20)))
    r = welch([19, 20, 21, 22, 23], [14, 16, 18, 20])
    assert r.mean_diff == 4.0
    assert r.se == pytest.approx(math.sqrt(13 / 6))
    assert r.t == pytest.approx(2.717465, abs=1e-6)
    assert r.df == pytest.approx(4.749415, abs=1e-6)
    assert r.p_value == pytest.approx(0.04422, abs=1e-5)
    assert (r.n_a, r.n_b) == (5, 4)
    assert r.significant(0.05)


def test_welch_identical_constants_p_one() -> None:
    r = welch([5.0, 5.0, 5.0], [5.0, 5.0])
    assert (r.t, r.p_value, r.df, r.se) == (0.0, 1.0, None, 0.0)


def test_welch_different_constants_p_zero() -> None:
    r = welch([0.1, 0.1, 0.1], [0.2, 0.2, 0.2])
    assert r.p_value == 0.0
    assert r.t == -math.inf
    assert r.df is None


def test_welch_one_constant_sample_uses_the_other_variance() -> None:
    # a constant: SE = √(0 + s_b²/n_b); b = [1,2,3]: s² = 1, SE = 1/√3;
    # t = (5−2)·√3 = 5.196; df = n_b − 1 = 2.
    r = welch([5, 5, 5], [1, 2, 3])
    assert r.t == pytest.approx(3 * math.sqrt(3))
    assert r.df == pytest.approx(2.0)


def test_welch_needs_two_runs_per_side() -> None:
    with pytest.raises(ValueError):
        welch([1.0], [1.0, 2.0])


def test_holm_known_vector() -> None:
    # sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → monotone max → 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_handles_empty() -> None:
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    with pytest.raises(ValueError):
        holm([1.5])


def test_ratio_ci_constant_denominator_is_ci_of_numerator_scaled() -> None:
    # b constant 5 → Fieller reduces to (ā ± t·SE_a)/5.  a = [10,11,12]: ā = 11, SE = 1/√3,
    # t_{0.975,2} = 4.303 → 11 ± 2.484 → [8.516, 13.484] / 5 = [1.7032, 2.6968].
    r = ratio_ci([10, 11, 12], [5, 5, 5])
    assert r.ratio == pytest.approx(2.2)
    assert r.low == pytest.approx((11 - 4.303 / math.sqrt(3)) / 5, abs=1e-4)
    assert r.high == pytest.approx((11 + 4.303 / math.sqrt(3)) / 5, abs=1e-4)


def test_ratio_ci_constant_numerator_inverts_ci_of_denominator() -> None:
    # a constant 10 → roots 10/(b̄ ± t·SE_b): b = [4,5,6], b̄ = 5, t·SE = 4.303/√3 = 2.484
    # → [10/7.484, 10/2.516] = [1.3362, 3.9746]: asymmetric, as a ratio CI should be.
    r = ratio_ci([10, 10, 10], [4, 5, 6])
    assert r.ratio == pytest.approx(2.0)
    assert r.low == pytest.approx(10 / (5 + 4.303 / math.sqrt(3)), abs=1e-4)
    assert r.high == pytest.approx(10 / (5 - 4.303 / math.sqrt(3)), abs=1e-3)


def test_ratio_ci_agrees_with_delta_method_when_denominator_is_precise() -> None:
    # Delta method: SE(R) = R·√(v_a/ā² + v_b/b̄²), v = s²/n; for a precise denominator Fieller ≈
    # delta.
    a = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]  # ā = 100.0333, s² = 0.5067
    b = [50.0, 50.5, 49.5, 50.2, 49.8, 50.1]  # b̄ = 50.0167, s² = 0.1177
    ma, mb = sum(a) / 6, sum(b) / 6
    va = sum((x - ma) ** 2 for x in a) / 5 / 6
    vb = sum((x - mb) ** 2 for x in b) / 5 / 6
    ratio = ma / mb
    se = ratio * math.sqrt(va / ma**2 + vb / mb**2)
    r = ratio_ci(a, b)
    assert r.ratio == pytest.approx(ratio)
    assert r.low is not None and r.high is not None
    # df ≈ 10 here (Welch–Satterthwaite at R: 9.99), t_{0.975,10} = 2.228
    assert r.low == pytest.approx(ratio - 2.228 * se, abs=2e-4)
    assert r.high == pytest.approx(ratio + 2.228 * se, abs=2e-4)


def test_ratio_ci_undefined_cases() -> None:
    assert ratio_ci([1.0, 2.0], [0.0, 0.0]) == (None, None, None)  # mean(b) = 0
    assert ratio_ci([4.0], [2.0, 2.0]) == (2.0, None, None)  # n = 1
    assert ratio_ci([3.0, 3.0], [1.5, 1.5]) == (2.0, 2.0, 2.0)  # both constant: exact
    # denominator not distinguishable from 0 → Fieller set unbounded
    assert ratio_ci([10, 11, 12], [-1.0, 1.0, 2.0], positive=False).low is None  # a signed quantity


def test_holm_step_down_hand_computed_and_monotone() -> None:
    """Hand computation, m = 5, p = (0.04, 0.001, 0.03, 0.012, 0.2):

    sorted: 0.001 ×5 = 0.005; 0.012 ×4 = 0.048; 0.03 ×3 = 0.09; 0.04 ×2 = 0.08 → max(0.09, 0.08) =
        0.09
    (monotone); 0.2 ×1 = 0.2.  R: p.adjust(c(0.04, 0.001, 0.03, 0.012, 0.2), "holm")
    = 0.090 0.005 0.090 0.048 0.200.
    """
    assert holm([0.04, 0.001, 0.03, 0.012, 0.2]) == pytest.approx([0.09, 0.005, 0.09, 0.048, 0.2])


def test_holm_ties_and_cap() -> None:
    # two equal smallest p: both ×3 then ×2 → running max keeps both at 0.3; 0.5×1 = 0.5
    assert holm([0.1, 0.1, 0.5]) == pytest.approx([0.3, 0.3, 0.5])
    assert holm([0.4, 0.9, 0.3]) == pytest.approx([0.9, 0.9, 0.9])  # 0.9, max(0.8,0.9), min(1, 0.9)
    with pytest.raises(ValueError):
        holm([float("nan")])


def test_cli_import_does_not_load_scipy_or_pandas() -> None:
    """`iomatrix --help` must not pay for scipy/pandas: the stats package loads its modules
    lazily."""
    import subprocess
    import sys

    code = (
        "import sys, iomatrix.cli; bad = [m for m in ('scipy', 'pandas', 'statsmodels') "
        "if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
