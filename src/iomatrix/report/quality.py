"""Per-series quality notes: the cold first run, outliers, steady state, disturbed runs.

Nothing is dropped: the first run is reported apart when it differs
significantly from the rest, outliers are flagged (MAD), the steady-state
verdict of each time-based run is computed from its stored per-interval IOPS and
counted, and runs the rest of the host
disturbed (stats/interference.py) are named with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from iomatrix.metrics import metric_info
from iomatrix.stats import cold_vs_warm, mad_outliers, snia_steady_state
from iomatrix.stats.coldwarm import MIN_WARM_RUNS
from iomatrix.stats.summary import Scale
from iomatrix.stop_kinds import StopKind


def cold_run(samples: Sequence[float]) -> dict[str, Any] | None:
    cw = cold_vs_warm(samples)
    if not cw.tested:
        return None
    return {
        "value": cw.cold,
        "warm_mean": cw.warm.mean if cw.warm else None,
        "ratio": cw.ratio,
        "p_value": cw.p_value,
        "differs": cw.differs,
        "test": cw.test,
    }


def ranked_samples(samples: Sequence[float]) -> tuple[list[float], bool]:
    """The samples a ranking should use: the warm runs when the cold first run differs
    significantly."""
    # With fewer than MIN_WARM_RUNS warm runs the first run is not tested (cold_vs_warm says
    # "untested"), so the samples are kept as they are without asking: its summary of the warm runs
    # was a fifth of a fleet answer's ranking, which asks for every cell of 100 hosts (issue 52).
    # Empty or non-finite samples still go to cold_vs_warm, which refuses them.
    if 1 <= len(samples) <= MIN_WARM_RUNS and all(math.isfinite(v) for v in samples):
        return list(samples), False
    cr = cold_run(samples)
    if cr is not None and cr["differs"]:
        return list(samples[1:]), True
    return list(samples), False


def outliers(samples: Sequence[float]) -> list[int]:
    return mad_outliers(samples) if len(samples) >= 3 else []


STEADY_PREFIX = "ss."
STEADY_WINDOW = 5  # SNIA PTS: the last 5 intervals (fio logs ~10 per run, see fio.jobs)


def steady_state_samples(iops_series: Sequence[float]) -> dict[str, float]:
    """The `ss.*` figures of one run from its per-interval IOPS: `ss.attained` (0/1),
    `ss.range_frac` and `ss.slope_frac` of the SNIA window rule (`stats.snia_steady_state`); {} for
    a series shorter than the window (too short a run to say)."""
    if len(iops_series) < STEADY_WINDOW:
        return {}
    ss = snia_steady_state(iops_series, window=STEADY_WINDOW)
    out = {"ss.attained": 1.0 if ss.attained else 0.0}
    if ss.range_frac is not None:
        out["ss.range_frac"] = ss.range_frac
    if ss.slope_frac is not None:
        out["ss.slope_frac"] = ss.slope_frac
    return out


def scale_of(metric: str) -> Scale:
    """How a metric's interval is found (stats.summarize's ``scale``): a 0/1 metric
    (``ss.attained``, ``load.reached``, durability verdicts) is a proportion over runs; every other
    stored metric is a rate, a time, a count or a fraction that cannot be negative."""
    return "proportion" if metric_info(metric).unit == "0/1" else "nonnegative"


def steady_counts(attained: Sequence[float]) -> dict[str, int] | None:
    if not attained:
        return None
    return {"runs": len(attained), "attained": int(sum(1 for a in attained if a >= 0.5))}


# Stops that are answers from the data (equivalence settles a tie): a results row does not flag
# them.
SETTLING_STOPS = frozenset({StopKind.CONVERGED, StopKind.SETTLED, StopKind.EQUIVALENT})


def notes(row: dict[str, Any]) -> list[str]:
    """Short human flags for a results/rank row."""
    out = []
    cr = row.get("cold_run")
    if cr and cr["differs"]:
        out.append(f"cold run differs ({cr['ratio']:.2f}× warm, p={cr['p_value']:.2g})")
    if row.get("outliers"):
        out.append("outlier run(s) #" + ",".join(str(i + 1) for i in row["outliers"]))
    ss = row.get("steady_state")
    if ss and ss["attained"] < ss["runs"]:
        out.append(f"steady state {ss['attained']}/{ss['runs']} runs")
    # [{"run_id", "reasons", "replaced"}], when the results document has them
    dist = row.get("disturbed_runs")
    if dist:
        out.append(
            "disturbed run(s) "
            + ", ".join(
                f"{d['run_id']} ({'; '.join(d['reasons'])}"
                f"{'; replaced by its retry' if d.get('replaced') else ''})"
                for d in dist
            )
        )
    # [{"run_id", "value"}]: stored values no run can produce (negative, inf, NaN)
    damaged = row.get("damaged")
    if damaged:
        out.append(
            "damaged value(s) left out: "
            + ", ".join(f"run {d['run_id']} = {d['value']}" for d in damaged)
        )
    stop = row.get("stop")
    if stop and stop["kind"] not in SETTLING_STOPS:
        out.append(f"stopped after round {stop['round']}: {stop['reason']}")
    return out
