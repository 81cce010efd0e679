"""`iomatrix results`: one row per cell × workload × metric, as a table, JSON or CSV.

The JSON form is a documented, versioned contract (docs/results-json.md):
other tools and later reports read it.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from iomatrix.domain import axes as axis_registry
from iomatrix.monitor.summary import (
    FieldSummary,
    cell_summary,
    host_questions_view,
    summarize_samples,
)
from iomatrix.report.contention import sweep_contention
from iomatrix.report.guests import guests_used
from iomatrix.report.quality import cold_run, outliers, scale_of, steady_counts
from iomatrix.report.query import (
    CellWorkload,
    cell_workloads,
    failures,
    run_monitor_samples,
    sweep_info,
    unit_stops,
)
from iomatrix.report.rank import boot_unit, run_boots, run_rounds
from iomatrix.stats import summarize
from iomatrix.store import Store

RESULTS_FORMAT = "iomatrix-results"
RESULTS_VERSION = 1

# the consolidation article's questions, shown beside the performance figures with --monitor.
MONITOR_HEADLINE = (
    "cpu_busy_pct",
    "cpu_iowait_pct",
    "disk_util_pct",
    "disk_await_ms",
    "mem_used_mb",
    "mem_used_with_cache_mb",
    "proc_cpu_pct",
)


def _summary_dict(values: list[float], metric: str = "") -> dict[str, Any]:
    s = summarize(values, scale=scale_of(metric))
    return {
        "n": s.n,
        "mean": s.mean,
        "sd": s.sd,
        "cv": s.cv,
        "median": s.median,
        "ci95_low": s.ci_low,
        "ci95_high": s.ci_high,
        "ci95_rel_half_width": s.rel_half_width,
    }


def analysis_unit(
    cw: CellWorkload,
    values: list[float],
    boots: dict[int, tuple[str, int | None]],
    rounds: dict[int, int],
) -> dict[str, Any] | None:
    """What the statistics of a cell whose runs shared guest boots stand on (stats.analysis_unit):
    the runs, or the boot means when the between-boot variance dominates, with that unit's mean and
    CI. None when no boot held two of its runs (every run is then its own unit, and the row's own
    figures are the ones)."""
    if len(cw.runs) != len(values):
        return None
    cu = boot_unit(
        [(rid, rounds.get(rid, 0), v) for rid, v in zip(cw.runs, values, strict=True)], boots
    )
    if cu is None:
        return None
    s = summarize(list(cu.values))
    return {
        "unit": cu.unit,
        "n": s.n,
        "boots": cu.boots,
        "runs": cu.runs,
        "between_boot_share": cu.between_share,
        "mean": s.mean,
        "ci95_low": s.ci_low,
        "ci95_high": s.ci_high,
        "ci95_rel_half_width": s.rel_half_width,
        "first_run_effect": cu.first_run_effect,
        "describe": cu.describe(),
    }


def inference_figures(row: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(figures, note) a results row's mean and CI are shown from: its analysis unit when that is
    the boot means (then the note names it), else the row's own per-run figures (note None)."""
    unit = row.get("analysis_unit")
    if unit is not None and unit["unit"] == "boot-means":
        return unit, f"CI over {unit['describe']}"
    return row, None


def monitor_summary(store: Store, cw: CellWorkload) -> dict[str, FieldSummary]:
    """Per field over the cell's ok runs: mean of the time-weighted run means, highest peak."""
    return cell_summary(summarize_samples(run_monitor_samples(store, rid)) for rid in cw.runs)


def _when_present(store: Store, sid: int) -> dict[str, Any]:
    """The parts of a sweep's document only some sweeps have, absent for the others so that older
    documents read the same: many clients on one backend (docs/shared-storage.md), the guests the
    guest figures came from (report/guests.py)."""
    out: dict[str, Any] = {}
    if contention := [row for curve in sweep_contention(store, sid) for row in curve.as_rows()]:
        out["contention"] = contention
    if guests := guests_used(store, sid):
        out["guests"] = [g.as_dict() for g in guests]
    return out


def results_document(
    store: Store, sweep_ids: list[int], *, with_monitor: bool = True
) -> dict[str, Any]:
    """The stable JSON document for the given sweeps."""
    sweeps = []
    for sid in sweep_ids:
        info = sweep_info(store, sid)
        rows = []
        stops = unit_stops(store, sid)
        cws = cell_workloads(store, sid)
        all_runs = [rid for cw in cws for rid in cw.runs]
        boots, rounds = run_boots(store, all_runs), run_rounds(store, all_runs)
        for cw in cws:
            mon = monitor_summary(store, cw) if with_monitor else {}
            view = host_questions_view(mon) if mon else {}
            steady = steady_counts(cw.samples.get("ss.attained", []))
            disturbed = [
                {"run_id": rid, "reasons": list(why), "replaced": rid in cw.replaced}
                for rid, why in sorted(cw.disturbed.items())
            ]
            stop = stops.get((cw.cell_id, cw.workload))
            for metric, values in sorted(cw.samples.items()):
                rows.append(
                    {
                        "cell": cw.cell_key,
                        "axes": cw.axes,
                        "workload": cw.workload,
                        "metric": metric,
                        "accel": cw.accel,
                        **_summary_dict(values, metric),
                        "samples": values,
                        "cold_run": cold_run(values),
                        "outliers": outliers(values),
                        "steady_state": steady,
                        "failed_runs": cw.failed,
                        "run_ids": cw.runs,
                        "disturbed_runs": disturbed,
                        "stop": stop,
                        "analysis_unit": analysis_unit(cw, values, boots, rounds),
                        # stored values no run can produce, left out of the figures (absent when
                        # none: older documents read the same)
                        **(
                            {"damaged": dmg}
                            if (
                                dmg := [
                                    {"run_id": rid, "value": repr(v)}
                                    for rid, m, v in cw.damaged
                                    if m == metric
                                ]
                            )
                            else {}
                        ),
                    }
                )
            info.setdefault("cells", []).append(
                {
                    "cell": cw.cell_key,
                    "axes": cw.axes,
                    "workload": cw.workload,
                    "backing": cw.backing,
                    "accel": cw.accel,
                    "ok_runs": len(cw.runs),
                    "failed_runs": cw.failed,
                    "cache_states": sorted(set(cw.cache_states)),
                    "page_cache": sorted(set(cw.page_cache)),
                    "phases": {k: _summary_dict(v) for k, v in cw.phases.items()},
                    "monitor": {
                        k: {"mean": f.mean, "peak": f.peak, "runs": f.n} for k, f in mon.items()
                    },
                    "host_view": view,
                    "disturbed_runs": disturbed,
                    "replaced_runs": cw.replaced,
                    "stop": stop,
                    # rate-limited workloads only (absent elsewhere, so older documents read the
                    # same)
                    **(
                        {
                            "load_not_reached": [
                                {"run_id": rid, "achieved_frac": f}
                                for rid, f in sorted(cw.unreached.items())
                            ]
                        }
                        if cw.unreached
                        else {}
                    ),
                }
            )
        info["results"] = rows
        info.update(_when_present(store, sid))
        info["failures"] = failures(store, sid)
        sweeps.append(info)
    return {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "sweeps": sweeps}


# The columns after the cell's axes (one column per axis the document's cells name, in registry
# order).
CSV_COLUMNS = (
    "workload",
    "metric",
    "accel",
    "n",
    "mean",
    "sd",
    "cv",
    "median",
    "ci95_low",
    "ci95_high",
    "failed_runs",
    "samples",
    "disturbed_runs",
    "stop",
    "unit",
    "unit_n",
    "unit_ci95_low",
    "unit_ci95_high",
)


def to_csv(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    named = {a for sweep in doc["sweeps"] for r in sweep["results"] for a in r["axes"]}
    columns = [a.name for a in axis_registry.axes() if a.always_named or a.name in named]
    w.writerow(("sweep", "cell", *columns, *CSV_COLUMNS))
    for sweep in doc["sweeps"]:
        for r in sweep["results"]:
            w.writerow(
                [
                    sweep["id"],
                    r["cell"],
                    *(r["axes"].get(a, "-") for a in columns),
                    r["workload"],
                    r["metric"],
                    "+".join(r["accel"]),
                    r["n"],
                    r["mean"],
                    r["sd"],
                    r["cv"],
                    r["median"],
                    r["ci95_low"],
                    r["ci95_high"],
                    r["failed_runs"],
                    " ".join(f"{v:.6g}" for v in r["samples"]),
                    " ".join(str(d["run_id"]) for d in r["disturbed_runs"]),
                    r["stop"]["kind"] if r["stop"] else "",
                    *_unit_columns(r.get("analysis_unit"), r),
                ]
            )
    return buf.getvalue()


def _unit_columns(u: dict[str, Any] | None, row: dict[str, Any]) -> list[Any]:
    # When every run was its own unit (no boot held two of the cell's runs) the unit is the runs,
    # and its n and CI are the row's own: said, not left empty, so a reader of the CSV never wonders
    # what an empty cell means.
    if u is None:
        return ["runs", row["n"], row["ci95_low"], row["ci95_high"]]
    return [u["unit"], u["n"], u["ci95_low"], u["ci95_high"]]


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False)
