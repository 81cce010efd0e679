"""Compare two sweeps (e.g. before/after a host change) cell by cell.

For every key present in both sweeps: ratio b/a with a Fieller CI, Welch's
t-test of b against a, and Holm's correction over all keys that could be
tested (both sides n ≥ 2).  Keys with n < 2 on either side are reported with
``p_value is None`` and ``significant is False`` and are not part of the family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.compare import RatioCI, WelchResult, ratio_ci, welch
from iomatrix.stats.holm_stepdown import holm
from iomatrix.stats.summary import Summary, summarize


@dataclass(frozen=True)
class Change:
    key: str
    a: Summary
    b: Summary
    ratio: RatioCI  # mean(b)/mean(a) with Fieller CI
    welch: WelchResult | None  # b − a; None when either side has n < 2
    p_value: float | None  # raw Welch p
    p_adjusted: float | None  # Holm over all tested keys
    significant: bool  # p_adjusted < alpha


def compare_sweeps(
    a: Mapping[str, Sequence[float]],
    b: Mapping[str, Sequence[float]],
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> list[Change]:
    """Changes from sweep ``a`` to sweep ``b``, in ``a``'s key order, keys in both only."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    keys = [k for k in a if k in b]
    tests: dict[str, WelchResult | None] = {}
    for k in keys:
        if len(a[k]) >= 2 and len(b[k]) >= 2:
            tests[k] = welch(b[k], a[k], confidence)
        else:
            tests[k] = None
    tested = [k for k in keys if tests[k] is not None]
    adjusted = dict(zip(tested, holm([tests[k].p_value for k in tested]), strict=True))  # type: ignore[union-attr]
    out: list[Change] = []
    for k in keys:
        w = tests[k]
        padj = adjusted.get(k)
        out.append(
            Change(
                key=k,
                a=summarize(a[k], confidence),
                b=summarize(b[k], confidence),
                ratio=ratio_ci(b[k], a[k], confidence),
                welch=w,
                p_value=None if w is None else w.p_value,
                p_adjusted=padj,
                significant=padj is not None and padj < alpha,
            )
        )
    return out
