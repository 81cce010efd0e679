"""stats/shapiro.py: the Shapiro–Wilk p without importing scipy.stats is scipy.stats.shapiro's, bit for bit, and a
blocked analysis (what every host's ranking runs) no longer imports scipy.stats (issue 52: ~1 s per process)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

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
    code = ("import sys\n"
            "from iomatrix.stats.blocked import blocked_analysis\n"
            "data = {c: [(r, 100.0 * (1 + 0.1 * i) * (1 + 0.03 * ((r * 7 + i * 3) % 5))) for r in range(6)]\n"
            "        for i, c in enumerate('abcd')}\n"
            "a = blocked_analysis(data)\n"
            "assert a.method == 'rcbd-anova' and a.normality_p is not None and a.p_cells is not None, a\n"
            "print('scipy.stats' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
