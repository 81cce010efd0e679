"""Holm's step-down adjustment of a family of p-values (Holm 1979).

(Not named holm.py: a submodule named like the function it exports would replace that
function on the lazily loaded ``iomatrix.stats`` package once imported.)

Sort the m p-values ascending, p_(1) ≤ … ≤ p_(m).  The adjusted values are

    p̃_(i) = min(1, max_{j ≤ i} (m − j + 1) · p_(j))

i.e. multiply the i-th smallest by (m − i + 1), then make the sequence
monotone non-decreasing (a larger raw p never gets a smaller adjusted p) and
cap it at 1.  Rejecting every hypothesis with p̃ < α controls the
family-wise error rate at α under any dependence between the tests.  This is
R's ``p.adjust(p, method = "holm")``.  Ties keep their input order (a stable
sort); tied raw p-values get the same adjusted value either way because of the
running maximum.
"""

from __future__ import annotations

from collections.abc import Sequence


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order of the input.  Raises ValueError outside [0, 1]."""
    ps = [float(p) for p in p_values]
    if any(not (0.0 <= p <= 1.0) for p in ps):  # also rejects NaN
        raise ValueError("p-values must lie in [0, 1]")
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):  # rank 0 is the smallest p: multiplier m
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted
