"""An axis's main effect over every stratum of the other axes (stats/main_effects.py): the
docstring's worked example by hand, an interaction that forbids one answer, and the edges."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats import special
from iomatrix.stats.main_effects import axis_effect

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


def test_the_worked_example_by_hand() -> None:
    e = axis_effect(
        _sweep([0.20, 0.25, 0.15], [0.22, 0.18, 0.20]), LEVELS, "cache", "writeback", "none"
    )
    d = [0.21, 0.215, 0.175]  # D_j, the strata-averaged log ratios
    sd = math.sqrt(sum((x - 0.2) ** 2 for x in d) / 2)
    assert sd == pytest.approx(0.021794, abs=1e-6) and e.se_log == pytest.approx(sd / math.sqrt(3))
    assert e.statistic == pytest.approx(15.894, abs=1e-3) and e.df == 2 and e.rounds == 3
    assert e.p_value == pytest.approx(2 * special.stdtr(2, -15.894388), rel=1e-6)
    assert e.p_value == pytest.approx(0.0039, abs=1e-4)
    assert e.ratio == pytest.approx(math.exp(0.2))
    assert (e.low, e.high) == (pytest.approx(1.1570, abs=1e-4), pytest.approx(1.2894, abs=1e-4))
    assert e.strata == {
        "format=qcow2": pytest.approx(math.exp(0.2)),
        "format=raw": pytest.approx(math.exp(0.2)),
    }
    assert e.interaction_p == pytest.approx(1.0) and e.interaction_small


def test_an_interaction_is_not_small_and_says_so() -> None:
    # writeback 1.35× for raw, 1.02× for qcow2, steadily: one "cache" answer would misstate both.
    e = axis_effect(
        _sweep([0.30, 0.31, 0.29, 0.30], [0.02, 0.03, 0.01, 0.02]),
        LEVELS,
        "cache",
        "writeback",
        "none",
    )
    # the strata differ by the same 0.28 in every round: SS_resid = 0 with SS_strata > 0, p = 0
    assert e.interaction_p == 0.0 and not e.interaction_small
    assert e.strata["format=raw"] == pytest.approx(math.exp(0.30))
    # strata swinging against each other: the F-test cannot tell (p ≥ 0.05), but each stratum's
    # ratio (1.35×, 1.11×) lies beyond the 5 % margin of the common 1.22×: not small either
    wide = axis_effect(
        _sweep([0.30, 0.10, 0.50], [0.10, 0.30, -0.10]), LEVELS, "cache", "writeback", "none"
    )
    assert wide.interaction_p >= 0.05 and not wide.interaction_small


def test_too_little_to_average_over_is_a_clear_error() -> None:
    two = {k: v for k, v in _sweep([0.2, 0.2], [0.2, 0.2]).items() if k in ("rw", "rn")}
    with pytest.raises(ValueError, match="need 2"):
        axis_effect(two, LEVELS, "cache", "writeback", "none")
    one_round = _sweep([0.2], [0.2])
    with pytest.raises(ValueError, match="round"):
        axis_effect(one_round, LEVELS, "cache", "writeback", "none")
