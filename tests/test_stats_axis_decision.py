"""One axis decided on its own by the pairs' rule (stats/axis_decision.py, issue 71): the
docstring's worked examples by hand, equivalence, an interaction that sends it back to the cells,
and no decision before the first look."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats import special
from iomatrix.stats.axis_decision import AxisDecision, decide_axis
from iomatrix.stats.moderated import Prior

LEVELS = {
    "rw": {"format": "raw", "cache": "writeback"},
    "rn": {"format": "raw", "cache": "none"},
    "qw": {"format": "qcow2", "cache": "writeback"},
    "qn": {"format": "qcow2", "cache": "none"},
}


def _sweep(raw_d: list[float], qcow2_d: list[float]) -> dict[str, list[tuple[int, float]]]:
    """cache=none at 100 (raw) and 90 (qcow2) in every round, writeback e^d times that."""
    rounds = range(1, len(raw_d) + 1)
    return {
        "rn": [(r, 100.0) for r in rounds],
        "qn": [(r, 90.0) for r in rounds],
        "rw": [(r, 100.0 * math.exp(x)) for r, x in zip(rounds, raw_d, strict=True)],
        "qw": [(r, 90.0 * math.exp(x)) for r, x in zip(rounds, qcow2_d, strict=True)],
    }


EXAMPLE = _sweep([0.20, 0.25, 0.15], [0.22, 0.18, 0.20])


def _cache(data: dict[str, list[tuple[int, float]]], **kw: object) -> AxisDecision:
    """writeback against none, higher is better, α 0.02, margin 5 % unless `kw` says otherwise."""
    args: dict[str, object] = {"higher_is_better": True, "alpha": 0.02, "margin": 0.05, **kw}
    return decide_axis(data, LEVELS, "cache", "writeback", "none", **args)  # type: ignore[arg-type]


def test_the_worked_example_is_decided_at_the_looks_level_over_the_family() -> None:
    d = decide_axis(
        EXAMPLE,
        LEVELS,
        "cache",
        "writeback",
        "none",
        higher_is_better=True,
        alpha=0.02,
        margin=0.05,
        family=2,
    )
    assert d.level == pytest.approx(0.005)  # α/(1·2) at the first look, over 2 axis tests
    assert d.p_value == pytest.approx(0.0039, abs=1e-4) and d.df == 2
    assert d.status == "decided" and d.better == "writeback"
    assert d.ratio == pytest.approx(math.exp(0.2))
    assert (d.low, d.high) == (pytest.approx(1.1570, abs=1e-4), pytest.approx(1.2894, abs=1e-4))
    # a latency: the lower level is the better one
    lat = decide_axis(
        EXAMPLE,
        LEVELS,
        "cache",
        "writeback",
        "none",
        higher_is_better=False,
        alpha=0.02,
        margin=0.05,
        family=2,
    )
    assert lat.status == "decided" and lat.better == "none"
    # over 4 tests the same p is not enough (0.0039 ≥ 0.0025): not told apart, not equivalent
    four = decide_axis(
        EXAMPLE,
        LEVELS,
        "cache",
        "writeback",
        "none",
        higher_is_better=True,
        alpha=0.02,
        margin=0.05,
        family=4,
    )
    assert four.status == "open" and four.better is None


def test_the_docstrings_moderated_example() -> None:
    """s₀² = 1, d₀ = 4, df_resid 6, every cell's variance 0.0005: h_D = 0.0005, s̃_D² =
    (4 · 0.0005 + 2 · 0.000475)/6 on 6 df."""
    d = _cache(
        EXAMPLE,
        prior=Prior(1.0, 4.0, 6),
        df_resid=6,
        family=2,
        variances=dict.fromkeys(LEVELS, 0.0005),
    )
    s_d = 0.0217945**2  # sd(D)², the worked example's
    assert d.df == 6
    s_mod = (4 * 0.0005 + 2 * s_d) / 6
    assert s_mod == pytest.approx(0.00049167, abs=1e-8)
    se = math.sqrt(s_mod / 3)
    assert se == pytest.approx(0.012802, abs=1e-6)
    assert d.p_value == pytest.approx(2 * special.stdtr(6, -0.2 / se), rel=1e-6)
    assert d.p_value < 1e-5 and d.status == "decided"


def test_the_moderated_example_gains_degrees_of_freedom() -> None:
    """With a prior s₀² = 1, d₀ = 4 (df_resid 6) and every cell's fitted variance the same, h_D is
    what the cells say of D and s̃_D² rests on 6 df."""
    # the cells' own noise: each cell swings alike, so the fitted v are equal
    noisy = {
        "rn": [(1, 100.0), (2, 102.0), (3, 98.0)],
        "qn": [(1, 90.0), (2, 88.0), (3, 91.0)],
        "rw": [(1, 122.0), (2, 129.0), (3, 115.0)],
        "qw": [(1, 112.0), (2, 105.0), (3, 110.0)],
    }
    plain = decide_axis(
        noisy, LEVELS, "cache", "writeback", "none", higher_is_better=True, alpha=0.02, margin=0.05
    )
    moderated = decide_axis(
        noisy,
        LEVELS,
        "cache",
        "writeback",
        "none",
        higher_is_better=True,
        alpha=0.02,
        margin=0.05,
        prior=Prior(1.0, 4.0, 6),
        df_resid=6,
    )
    assert plain.df == 2 and moderated.df == 6
    assert moderated.ratio == pytest.approx(plain.ratio)


def test_equal_levels_are_shown_equivalent_and_a_crossing_effect_is_decided_per_cell() -> None:
    flat = _sweep([0.001, -0.002, 0.0015, 0.0, -0.001, 0.002], [0.0, 0.001, -0.001, 0.002, 0, 0])
    d = _cache(flat)
    assert d.status == "equivalent" and d.better is None
    c = _cache(_sweep([0.3, 0.32, 0.28, 0.31], [-0.3, -0.29, -0.31, -0.3]))
    assert c.status == "per_cell" and not c.effect.interaction_small


def test_nothing_is_decided_before_the_first_look() -> None:
    two = _sweep([0.5, 0.5001], [0.5, 0.4999])
    d = decide_axis(
        two, LEVELS, "cache", "writeback", "none", higher_is_better=True, alpha=0.02, margin=0.05
    )
    assert d.level == 0.0 and d.status == "open"
    with pytest.raises(ValueError):
        decide_axis(
            {"rw": [(1, 1.0)]},
            {"rw": LEVELS["rw"]},
            "cache",
            "writeback",
            "none",
            higher_is_better=True,
            alpha=0.02,
            margin=0.05,
        )
