"""The one-sided comparisons with the best (stats/worse_than_best.py) and how the race and the
decision use them: the docstring's worked example, the family of k − 1, and a clearly worse cell
separated where the two-sided family of every pair cannot yet."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats.blocked import blocked_analysis
from iomatrix.stats.racing import race_step
from iomatrix.stats.worse_than_best import worse_than_best_p


def _race(
    diffs: dict[str, list[float]], base: float = 1000.0
) -> dict[str, list[tuple[int, float]]]:
    """Cells whose log values differ from the best's by `diffs` round by round."""
    n = len(next(iter(diffs.values())))
    base = 1000.0
    data = {"best": [(r + 1, base) for r in range(n)]}
    for name, ds in diffs.items():
        data[name] = [(r + 1, base * math.exp(d)) for r, d in enumerate(ds)]
    return data


def test_the_worked_example() -> None:
    an = blocked_analysis(
        _race({"c1": [-0.505, -0.48, -0.455], "c2": [-0.02 - 0.2, -0.02, -0.02 + 0.2]})
    )
    p = worse_than_best_p(an, "best", ["best", "c1", "c2"], higher_is_better=True)
    assert set(p) == {"c1", "c2"}  # the best is not compared with itself
    # an exact fit per pair (each cell's log ratio to a constant best): the pair's own variance
    assert an.pair("c1", "best").level == pytest.approx(0.00240, abs=5e-6)  # ℓ* at α = 0.02
    assert p["c1"] < an.pair("c1", "best").level / 2
    assert p["c2"] > 0.2
    assert p["c1"] == pytest.approx(0.00090, rel=0.01)
    # the two-sided family of every pair: Holm over 3 pairs, not below ℓ yet
    assert an.pair("c1", "best").p_adjusted == pytest.approx(0.00271, rel=0.01)
    assert not an.pair("c1", "best").significant


def test_a_cell_38_percent_behind_on_three_rounds_is_separated_by_the_one_sided_family() -> None:
    data = _race({"c1": [-0.505, -0.48, -0.455], "c2": [-0.22, -0.02, 0.18]})
    an = blocked_analysis(data)
    # the two-sided family of every pair does not separate it yet
    assert not an.pair("c1", "best").significant
    step = race_step(data, higher_is_better=True, rounds_left=6)
    [c1] = [d for d in step.decisions if d.unit == "c1"]
    assert c1.status == "eliminated" and c1.reason.startswith("significantly worse than best ")
    assert "one-sided against the best" in c1.reason


def test_identical_cells_are_not_separated() -> None:
    data = _race({"twin": [0.05, -0.04, 0.03, -0.06, 0.02, 0.01]})
    an = blocked_analysis(data)
    best = max(an.centre, key=an.centre.__getitem__)
    other = "twin" if best == "best" else "best"
    p = worse_than_best_p(an, best, list(an.centre), higher_is_better=True)
    assert p[other] > an.pair(other, best).level / 2


def test_no_parametric_model_no_test() -> None:
    assert worse_than_best_p(None, "best", ["a"], higher_is_better=True) == {}
