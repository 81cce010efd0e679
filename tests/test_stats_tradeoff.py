"""stats/tradeoff.py: the cells a role's weighed trade-off is open between."""

from __future__ import annotations

from iomatrix.stats.tradeoff import RoleFigure, open_tradeoff_cells, weighed

LOG_P = [(1, 1000.0), (2, 1040.0), (3, 960.0), (4, 1000.0)]


def _figures(q_p99: list[float], p_p99: float = 400.0) -> list[RoleFigure]:
    log = RoleFigure({"P": LOG_P, "Q": [(r, 800.0) for r in range(1, 5)]}, True, 2.0)
    p99 = RoleFigure(
        {"P": [(r, p_p99) for r in range(1, 5)], "Q": list(enumerate(q_p99, start=1))}, False, 1.0
    )
    return [log, p99]


def test_worked_example_within_the_margin_is_not_open() -> None:
    """The docstring's example: Q 1.008× P weighed, 0.98-1.03× at 90 %: within 5 % both ways."""
    figures = _figures([250.0, 260.0, 240.0, 250.0])
    w = weighed(figures, "P", "Q", 0.90)
    assert w is not None
    assert round(w.ratio, 3) == 1.008 and 0.98 < w.low < 0.99 and 1.03 < w.high < 1.04
    assert open_tradeoff_cells(figures, "P", 0.05) == frozenset()


def test_a_noisy_veto_figure_leaves_the_pair_open() -> None:
    """The same means with Q's p99 swinging ±30 %: neither separated nor within 5 %: both run on."""
    figures = _figures([250.0, 340.0, 170.0, 240.0])
    w = weighed(figures, "P", "Q", 0.90)
    assert w is not None and w.low < 1 / 1.05 and w.high > 1.05
    assert open_tradeoff_cells(figures, "P", 0.05) == frozenset({"P", "Q"})


def test_no_plausible_veto_no_tradeoff() -> None:
    """P within 5 % of the best on the other figure: no veto, so the race's pairs decide."""
    figures = _figures([395.0, 390.0, 400.0, 398.0])
    assert open_tradeoff_cells(figures, "P", 0.05) == frozenset()


def test_a_clear_winner_when_weighed_is_not_open() -> None:
    """Q's p99 5× lower in every round: Q separated ahead with the figures weighed."""
    figures = _figures([80.0, 81.0, 79.0, 80.0])
    w = weighed(figures, "P", "Q", 0.90)
    assert w is not None and w.low > 1
    assert open_tradeoff_cells(figures, "P", 0.05) == frozenset()
