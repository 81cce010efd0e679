"""When an interval is too wide to call its estimate a figure: "not measured precisely".

An interval [lo, hi] of a quantity that cannot be negative is *imprecise* when

    lo ≤ 0  (it reaches a value the quantity cannot take, or the interval says nothing about its size)
    or  hi / lo > PRECISION_SPAN  (= 10: the data leave the value open over more than an order of magnitude)

A point interval (lo = hi, e.g. constant samples) is precise whatever its value, and a missing
interval (n = 1, an unbounded Fieller set) is *not* judged here: it is shown as "no interval", not
as imprecise. Renderers print such an estimate as "not measured precisely" instead of as a figure
(docs/statistics.md §1)."""  # noqa: E501

from __future__ import annotations

import math

PRECISION_SPAN = 10.0  # hi/lo above this: more than an order of magnitude is not a measurement


def imprecise(low: float | None, high: float | None) -> bool:
    """True when the interval [low, high] of a non-negative quantity is too wide to state its
    estimate."""
    if low is None or high is None:
        return False
    if not (math.isfinite(low) and math.isfinite(high)):
        return True
    if low == high:
        return False
    return low <= 0.0 or high / low > PRECISION_SPAN
