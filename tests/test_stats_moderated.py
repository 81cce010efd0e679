"""Moderated variances (stats/moderated.py): limma's fitFDist by the method of moments, about a
cell-variance model of the race, capped at the race's residual df. Checked against the docstring's
worked example (computed by hand from the formulas), against the model it assumes (variances drawn
from a known scaled inverse χ² prior), and at the edges."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iomatrix.stats import special
from iomatrix.stats.blocked import blocked_analysis
from iomatrix.stats.moderated import (
    NO_PRIOR,
    cell_variances,
    fit_prior,
    moderated_comparison,
    race_moderation,
    trigamma_inverse,
)
from iomatrix.stats.paired import paired_comparison

# The docstring's race: cells a, b steady, c, d noisy; 3 shared rounds (2 df) per pair.
PAIRS = [
    (0, 1, 0.0004, 2.0),
    (0, 2, 0.0050, 2.0),
    (0, 3, 0.0060, 2.0),
    (1, 2, 0.0045, 2.0),
    (1, 3, 0.0070, 2.0),
    (2, 3, 0.0030, 2.0),
]


def test_the_worked_example_by_hand() -> None:
    v = cell_variances(PAIRS, 4)
    assert v == pytest.approx([0.0013833, 0.0016333, 0.0019333, 0.0036833], abs=1e-7)
    shape = [v[a] + v[b] for a, b, _, _ in PAIRS]
    # e_g = ln(s²/h) − ψ(1) + ln 1, their scatter over G − k = 2, minus ψ'(1) = π²/6
    e = [math.log(s / h) + 0.5772156649 for (_, _, s, _), h in zip(PAIRS, shape, strict=True)]
    mean = sum(e) / 6
    v_excess = sum((x - mean) ** 2 for x in e) / 2 - math.pi**2 / 6
    assert mean == pytest.approx(0.31713, abs=1e-5) and v_excess == pytest.approx(0.55326, abs=1e-5)
    prior = fit_prior([s for _, _, s, _ in PAIRS], [2.0] * 6, shape, 4)
    assert prior.d0 == pytest.approx(4.5270, abs=1e-4)
    assert special.trigamma(prior.d0 / 2) == pytest.approx(v_excess)
    assert prior.s0_sq == pytest.approx(
        math.exp(mean + special.psi(prior.d0 / 2) - math.log(prior.d0 / 2))
    )
    assert prior.s0_sq == pytest.approx(1.08357, abs=1e-5)
    # capped at the residual df (6): d₀ = 4, so 6 df; the noisy pair moves up toward its cells'
    s_cd, df_cd = prior.moderate(0.0030, 2.0, shape[5], 6.0)
    assert df_cd == 6.0 and s_cd == pytest.approx((4 * 1.08357 * shape[5] + 2 * 0.0030) / 6, 1e-4)
    assert s_cd == pytest.approx(0.0050574, abs=1e-7)
    s_ab, _ = prior.moderate(0.0004, 2.0, shape[0], 6.0)
    assert s_ab == pytest.approx(0.0023125, abs=1e-7)
    # uncapped: d₀ + 2 df
    assert prior.moderate(0.0030, 2.0, shape[5])[1] == pytest.approx(6.5270, abs=1e-4)


def test_equal_scatter_gives_an_infinite_prior_df_and_the_pooled_variance() -> None:
    # The first worked example without shape: four variances on 2 df scatter less than sampling
    # alone makes them (0.35011 < ψ'(1) = 1.64493).
    prior = fit_prior([0.0004, 0.0009, 0.0016, 0.0006], [2.0] * 4)
    assert math.isinf(prior.d0) and prior.s0_sq == pytest.approx(0.000875)
    assert prior.moderate(0.0004, 2.0) == (pytest.approx(0.000875), math.inf)
    # capped at 6 residual df: d₀ = 4, the pair's own variance weighs 2 of the 6
    capped = prior.moderate(0.0004, 2.0, df_cap=6.0)
    assert capped == (pytest.approx((4 * 0.000875 + 2 * 0.0004) / 6), 6.0)
    # a 100-fold spread: a small prior df, each pair near its own
    wide = fit_prior([0.0001, 0.0009, 0.0100, 0.0004], [2.0] * 4)
    assert wide.d0 == pytest.approx(1.7051, abs=1e-4)
    assert wide.s0_sq == pytest.approx(0.00069169, abs=1e-8)
    assert wide.moderate(0.0100, 2.0)[0] == pytest.approx(0.0057163, abs=1e-7)


def test_the_estimates_recover_a_known_prior() -> None:
    # The model fitFDist assumes: σ² = d₀ s₀²/χ²_{d₀}, s² = σ² χ²_d/d. 4000 pairs on 2 df (seeded).
    rng = np.random.default_rng(71)
    d0, s0 = 8.0, 0.01
    sigma = d0 * s0 / rng.chisquare(d0, 4000)
    s_sq = sigma * rng.chisquare(2.0, 4000) / 2.0
    prior = fit_prior(list(s_sq), [2.0] * 4000)
    assert prior.d0 == pytest.approx(d0, rel=0.25)
    assert prior.s0_sq == pytest.approx(s0, rel=0.1)
    # no spread in the σ² at all: the excess scatter is ≤ 0 as often as not, d₀ large or ∞
    flat = fit_prior(list(0.01 * rng.chisquare(2.0, 4000) / 2.0), [2.0] * 4000)
    assert flat.d0 > 50
    assert flat.s0_sq == pytest.approx(0.01, rel=0.1)


def test_trigamma_inverse_round_trips() -> None:
    for y in (0.01, 0.5, 1.0, 3.3, 40.0, 1e4):
        assert trigamma_inverse(special.trigamma(y)) == pytest.approx(y, rel=1e-6)
    with pytest.raises(ValueError, match="x > 0"):
        trigamma_inverse(0.0)


def test_too_little_to_fit_leaves_each_pair_its_own() -> None:
    assert fit_prior([0.01], [2.0]) is NO_PRIOR  # one pair
    assert fit_prior([0.01, 0.02], [2.0, 2.0]) is NO_PRIOR  # two
    assert fit_prior([0.0, 0.0, 0.0, 0.01], [2.0] * 4) is NO_PRIOR  # most variances 0
    # three cells: three pairs, three cell variances fitted, nothing left to estimate d₀ from
    three = [(0, 1, 0.01, 2.0), (0, 2, 0.02, 2.0), (1, 2, 0.015, 2.0)]
    v = cell_variances(three, 3)
    assert v is not None
    shape = [v[a] + v[b] for a, b, _, _ in three]
    assert fit_prior([s for _, _, s, _ in three], [2.0] * 3, shape, 3) is NO_PRIOR
    assert NO_PRIOR.moderate(0.01, 2.0) == (0.01, 2.0)
    # a cell in no pair with a variance: the model is not determined
    assert cell_variances([(0, 1, 0.01, 2.0), (0, 2, 0.02, 2.0)], 4) is None
    # a zero variance is floored, not a log of 0
    assert fit_prior([0.0, 0.004, 0.005, 0.006], [2.0] * 4).d0 > 0


def test_a_two_cell_race_is_the_plain_paired_t() -> None:
    a = {1: 100.0, 2: 110.0, 3: 90.0}
    b = {1: 95.0, 2: 100.0, 3: 88.0}
    own = paired_comparison(a, b)
    tests, prior = race_moderation([own], [(0, 1)], 2, 2.0)
    assert prior is NO_PRIOR and tests == [own]
    # stats/paired.py's worked example, unchanged: t = 2.661 on 2 df, p = 0.117
    assert own.statistic == pytest.approx(2.661, abs=1e-3)
    assert own.p_value == pytest.approx(0.117, abs=1e-3)


def test_a_moderated_comparison_uses_the_variance_and_df_given() -> None:
    own = paired_comparison({1: 100.0, 2: 110.0, 3: 90.0}, {1: 95.0, 2: 100.0, 3: 88.0})
    m = moderated_comparison(own, 0.000875, 6.0)
    se = math.sqrt(0.000875 / 3)
    assert m.se_log == pytest.approx(se) and m.df == 6.0
    assert m.statistic == pytest.approx(0.05636 / se, rel=1e-3)
    assert m.p_value == pytest.approx(2 * special.stdtr(6.0, -abs(m.statistic)))
    q = special.stdtrit(6.0, 0.975)
    assert m.ratio_low == pytest.approx(math.exp(math.log(own.ratio) - q * se))


def test_quicks_shape_gains_df_at_three_rounds() -> None:
    # raw and qcow2 × none and writeback, 3 rounds: writeback ~26 % ahead of none with little
    # spread; the none-vs-writeback pair, 2 df on its own, is judged on the race's 6 df.
    data = {
        "raw·none": [(1, 100.0), (2, 103.0), (3, 98.0)],
        "qcow2·none": [(1, 99.0), (2, 101.0), (3, 99.5)],
        "raw·wb": [(1, 136.0), (2, 133.0), (3, 139.0)],
        "qcow2·wb": [(1, 131.0), (2, 140.0), (3, 134.0)],
    }
    an = blocked_analysis(data, allow_nonparametric=False)
    assert an.prior is not None and an.prior.d0 > 0 and an.df_resid == 6
    pr = an.pair("raw·none", "raw·wb")
    assert pr.df == pytest.approx(6.0)
    assert pr.significant
    assert "moderated" in an.description or "pooled" in an.description
