"""Steady state of one time-based run, from fio's per-interval IOPS log."""

from __future__ import annotations

from iomatrix.fio.parse import parse_iops_log
from iomatrix.stats import snia_steady_state

WINDOW = 5


def steady_metrics(iops_log: str | None) -> tuple[dict[str, float], list[float]]:
    """`ss.*` metrics (SNIA window over the last WINDOW intervals) and the series they came from."""
    if not iops_log:
        return {}, []
    series = parse_iops_log(iops_log)
    if len(series) < WINDOW:
        return {}, series
    ss = snia_steady_state(series, window=WINDOW)
    out = {"ss.attained": 1.0 if ss.attained else 0.0}
    if ss.range_frac is not None:
        out["ss.range_frac"] = ss.range_frac
    if ss.slope_frac is not None:
        out["ss.slope_frac"] = ss.slope_frac
    return out, series
