"""The texts of figures with their intervals, in one place: a value's interval ("1.2–3.4", bounded
at 0 for a quantity that cannot be negative) and a ratio with its interval ("1.23× (1.10–1.40)").
Every renderer (terminal, Markdown, HTML, CSV/JSON text columns, the headline and its "not chosen"
line) writes a ratio through `ratio_text`, so an interval that reaches 0 or spans more than 10×
(stats/precision.py) reads "not measured precisely" everywhere instead of as a figure. A leaf
module: the recommendation's own data classes (report/recommend/verdict.py) use it without importing
the renderer."""

from __future__ import annotations

from iomatrix.stats.precision import imprecise
from iomatrix.ui import fmt

BOUNDED_NOTE = "≥0: the interval's lower end is bounded at 0 (the quantity cannot be negative)"
IMPRECISE = "not measured precisely"
NO_INTERVAL_NOTE = (
    "no interval: Fieller's interval of a ratio is unbounded when the denominator's mean is not "
    "clearly above zero (too noisy); or the figure is a point ratio"
)


def ci_text(low: float | None, high: float | None, *, positive: bool = True) -> tuple[str, bool]:
    """'low–high', bounded at 0 for a positive quantity, "not measured precisely" for an interval
    that reaches 0 or spans more than 10× (the estimate is then no figure); returns (text,
    bounded)."""
    if low is None or high is None:
        return "–", False
    if positive and imprecise(low, high):
        return IMPRECISE, False
    if positive and low < 0:
        return f"≥0–{fmt(high)}", True
    return f"{fmt(low)}–{fmt(high)}", False


def ratio_text(ratio: float | None, low: float | None, high: float | None) -> str:
    if ratio is None:
        return "–"
    if low is None or high is None:
        return f"{ratio:.2f}× (no interval)"
    if imprecise(low, high):
        # the bounds as they are; the point ratio is no figure
        return f"{IMPRECISE} ({low:.2g}–{high:.3g}×)"
    lo = "≥0" if low < 0 else f"{low:.2f}"
    return f"{ratio:.2f}× ({lo}–{high:.2f})"
