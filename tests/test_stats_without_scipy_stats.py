"""The decision's statistics without importing scipy.stats (issue 52: ~1 s of CPU per `recommend`
process): the Shapiro–Wilk p (stats/shapiro.py) and the F and t tails (scipy.special, what
scipy.stats calls) are scipy.stats's, bit for bit, and a blocked analysis (what every host's ranking
runs) no longer imports scipy.stats."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from iomatrix.stats import blocked, ruling_out
from iomatrix.stats.equivalence import tost
from iomatrix.stats.paired import paired_comparison
from iomatrix.stats.shapiro import shapiro_p


@pytest.mark.parametrize("seed", range(4))
def test_the_same_p_as_scipy_stats_shapiro(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in range(300):
        n = int(rng.integers(3, 120))
        x = rng.standard_normal(n) * rng.uniform(1e-3, 10.0)
        if i % 2:
            x += rng.exponential(size=n)  # skewed: small p
        if i % 7 == 0:
            x = np.round(x, 1)  # ties
        want = float(stats.shapiro(x).pvalue)
        assert shapiro_p(x) == want or (np.isnan(want) and np.isnan(shapiro_p(x))), (seed, i, x)


def test_the_worked_example() -> None:
    assert shapiro_p(np.array([1.0, 2, 3, 4, 100])) == pytest.approx(0.0003054, rel=1e-3)
    assert shapiro_p(np.array([1.0, 2, 3, 4, 5])) == pytest.approx(0.9672, rel=1e-4)


def test_a_constant_sample_and_too_few_values_as_scipy() -> None:
    x = np.array([2.0, 2.0, 2.0, 2.0])
    with np.errstate(all="ignore"), pytest.warns(UserWarning):
        want = float(stats.shapiro(x).pvalue)
    assert shapiro_p(x) == want


def test_a_blocked_analysis_does_not_import_scipy_stats() -> None:
    code = (
        "import sys\n"
        "from iomatrix.stats.blocked import blocked_analysis\n"
        "data = {c: [(r, 100.0 * (1 + 0.1 * i) * (1 + 0.03 * ((r * 7 + i * 3) % 5))) for "
        "r in range(6)]\n"
        "        for i, c in enumerate('abcd')}\n"
        "a = blocked_analysis(data)\n"
        "assert a.method == 'rcbd-anova' and a.normality_p is not None and a.p_cells is "
        "not None, a\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_t_and_f_tails_are_scipy_stats() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        x, df, df1 = float(rng.normal(0, 3)), float(rng.integers(1, 60)), int(rng.integers(1, 9))
        assert blocked._f_p(abs(x) * 2, df1, int(df)) == float(stats.f.sf(abs(x) * 2, df1, int(df)))
        assert blocked._t_sf2(x, df) == float(2.0 * stats.t.sf(abs(x), df))
        for hib in (True, False):
            want = stats.t.cdf((x - 0.1) / 0.7, df) if hib else stats.t.sf((x - 0.1) / 0.7, df)
            assert ruling_out._p_one_sided(x, 0.7, df, 0.1, hib) == float(want)
        d, se, level = (
            float(rng.normal(0, 0.05)),
            float(rng.uniform(0.001, 0.1)),
            float(rng.uniform(0.001, 0.2)),
        )
        lo, hi = math.log(1 - 0.05), -math.log(1 - 0.05)
        got = tost(math.exp(d), se, df, level, 0.05, True)
        d = math.log(math.exp(d))  # as tost takes it back from the ratio
        q = float(stats.t.ppf(1.0 - level, df))
        assert got.p_value == max(
            float(stats.t.sf((d - lo) / se, df)), float(stats.t.cdf((d - hi) / se, df))
        )
        assert (got.low, got.high) == (math.exp(d - q * se), math.exp(d + q * se))


def test_the_paired_comparison_is_scipy_stats() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(2, 12))
        a = {r: float(v) for r, v in enumerate(rng.uniform(50, 150, n))}
        b = {r: float(v) for r, v in enumerate(rng.uniform(50, 150, n))}
        got = paired_comparison(a, b)
        assert got.p_value == float(2.0 * stats.t.sf(abs(got.statistic), n - 1))
        q = float(stats.t.ppf(0.975, n - 1))
        d = [math.log(a[r]) - math.log(b[r]) for r in range(n)]
        assert got.ratio_low == math.exp(sum(d) / n - q * got.se_log)
