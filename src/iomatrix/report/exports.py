"""Tables for `--format table|json|csv|markdown` of results, rank, compare and monitor, and the
regression gate of `compare --fail-above`. Each function turns a report module's data into
`DataTable`s (rendered by the exporters in `report/export/`); the axes are separate columns so that
axes constant across the shown rows fold into one header line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from iomatrix.domain import axes as axis_registry
from iomatrix.report.contention import ContentionCurve, client_host_lines, saturation_word
from iomatrix.report.curves import LatencyCurve
from iomatrix.report.figures import ci_text, ratio_text
from iomatrix.report.rank import WorkloadRanking, primary_metric
from iomatrix.report.recommend.grammar import centre_heading, to_best
from iomatrix.report.render import DataTable
from iomatrix.report.results import inference_figures
from iomatrix.risk import risk_of
from iomatrix.stats import Change


def cell_axes(axes_of_rows: Sequence[dict[str, str]] = ()) -> list[str]:
    """One column per axis the rows name (report.query.shown_axes: the first release's axes, and a
    later one where a cell of the sweep sets it), in registry order."""
    named = {a for axes in axes_of_rows for a in axes}
    return [a.name for a in axis_registry.axes() if a.always_named or a.name in named]


def _shown_axes(axes: dict[str, str], columns: list[str]) -> dict[str, str]:
    return {a: axes.get(a, "-") for a in columns}


def results_table(doc: dict[str, Any], metric: str | None = None) -> list[DataTable]:
    """One table per sweep of `results_document` (primary metric per workload unless `metric`)."""
    out = []
    for s in doc["sweeps"]:
        rows = []
        columns = cell_axes([r["axes"] for r in s["results"]])
        for r in s["results"]:
            if metric is None and r["metric"] != primary_metric(r["workload"])[0]:
                continue
            if metric not in (None, "all") and r["metric"] != metric:
                continue
            # Runs that shared guest boots: mean and CI of the analysis unit (boot means), as in
            # rank.
            src, unit_note = inference_figures(r)
            ci, _ = ci_text(src["ci95_low"], src["ci95_high"])
            dist = r.get("disturbed_runs") or []
            stop = r.get("stop")
            rows.append(
                {
                    **_shown_axes(r["axes"], columns),
                    "workload": r["workload"],
                    "metric": r["metric"],
                    "n": r["n"],
                    "mean": src["mean"],
                    "95% CI": ci,
                    "ci95_low": src["ci95_low"],
                    "ci95_high": src["ci95_high"],
                    "cv": r["cv"],
                    "unit": unit_note,
                    "disturbed": _disturbed_text(dist),
                    "stopped": stop["kind"] if stop else None,
                }
            )
        out.append(
            DataTable(
                f"sweep {s['id']} · {s['plan']} · {s['status']}",
                [
                    *columns,
                    "workload",
                    "metric",
                    "n",
                    "mean",
                    "95% CI",
                    "unit",
                    "disturbed",
                    "stopped",
                ],
                rows,
                axes=columns,
            )
        )
    return out


def _disturbed_text(dist: Sequence[dict[str, Any]]) -> str | None:
    """'2 (1 replaced)': runs the host disturbed, and how many of them a clean retry replaced."""
    if not dist:
        return None
    replaced = sum(1 for d in dist if d.get("replaced"))
    return f"{len(dist)}" + (f" ({replaced} replaced)" if replaced else "")


def rank_tables(rankings: Sequence[WorkloadRanking]) -> list[DataTable]:
    out = []
    for wr in rankings:
        rows = []
        columns = cell_axes([c.axes for c in wr.cells.values()])
        # the figure the order uses and "the best" is the best of, shown and headed as such (issue
        # 70); the arithmetic mean stays a field of the row (JSON, CSV)
        a = wr.ranking.analysis
        centre = centre_heading(a is not None and a.blocked)
        for row in wr.ranking.rows:
            cell = wr.cells[row.name]
            s = row.summary
            ci, bounded = ci_text(s.ci_low, s.ci_high)
            risk = risk_of(cell.axes["cache"], cell.axes["modifier"])
            tb = wr.to_baremetal.get(row.name)
            rows.append(
                {
                    "rank": row.rank,
                    "group": row.group_label,
                    **_shown_axes(cell.axes, columns),
                    "n": s.n,
                    centre: s.mean if row.centre is None else row.centre,
                    "mean": s.mean,
                    "95% CI": ci,
                    "ci95_low": s.ci_low,
                    "ci95_high": s.ci_high,
                    "vs best": to_best(row.ratio_to_best, wr.metric) if row.ratio_to_best else None,
                    "vs bare metal": ratio_text(*tb) if tb else None,
                    "power loss": risk.level.value if risk else None,
                    "flags": ", ".join([*row.flags, *_rank_flags(wr, row.name)]) or None,
                    "_bounded": bounded,
                }
            )
        better = "higher" if wr.ranking.higher_is_better else "lower"
        notes = [wr.ranking.test_description]
        notes += [f"unit for {label}: {cu.describe()}" for label, cu in (wr.units or {}).items()]
        if any(r.pop("_bounded") for r in rows):
            notes.append("≥0: interval bounded at 0 (the quantity cannot be negative)")
        out.append(
            DataTable(
                f"{wr.title} · {wr.metric} ({better} is better) · tier {wr.tier}",
                [
                    "rank",
                    "group",
                    *columns,
                    "n",
                    centre,
                    "95% CI",
                    "vs best",
                    "vs bare metal",
                    "power loss",
                    "flags",
                ],
                rows,
                axes=columns,
                notes=notes,
            )
        )
    return out


def curve_tables(curves: Sequence[LatencyCurve]) -> list[DataTable]:
    """Latency against load (report/curves.py): one table per queue-depth family and tier, a row per
    configuration and depth, the knee marked: the numbers the HTML report's curves draw."""
    by_table: dict[tuple[str, str], list[LatencyCurve]] = {}
    for c in curves:
        by_table.setdefault((c.family, c.tier), []).append(c)
    out = []
    for (family, tier), group in by_table.items():
        rows = [
            {
                **row,
                "p99 95% CI": ci_text(row["p99_ci95_low"], row["p99_ci95_high"])[0],
                "IOPS 95% CI": ci_text(row["iops_ci95_low"], row["iops_ci95_high"])[0],
                "knee": "knee" if row["knee"] else None,
            }
            for c in group
            for row in c.as_rows()
        ]
        out.append(
            DataTable(
                f"{family} · latency against load ({group[0].iops_metric} vs "
                f"{group[0].latency_metric}) · tier {tier}",
                ["config", "qd", "n", "iops", "IOPS 95% CI", "p99_us", "p99 95% CI", "knee"],
                rows,
                notes=[
                    "knee: the first point where p99 latency grows by a larger fraction than IOPS "
                    "(stats/knee.py); CIs over runs, a run's p99 is one sample"
                ],
            )
        )
    return out


CONTENTION_NOTES = [
    "clients: N clients ran the workload at once against one shared backing, each with "
    "its own disk, export and "
    "fio, started together (fio client/server mode); figures are means with 95% CIs over runs",
    "aggregate: the clients' sum; per client: their mean; worst p99: the highest client "
    "p99; fairness: Jain's index "
    "(Σx)²/(n·Σx²) of the clients' throughputs, 1 = equal shares, 1/N = one client got everything",
    "saturation: the N from which more clients stopped adding aggregate throughput "
    "(stats/saturation.py); 'not "
    "decided': from this N the intervals overlap and could still hold a scaling step "
    "(more runs tell); on one "
    "host the clients share its CPUs with each other and a lab server: they contend for "
    "CPU, not only the backend",
]


# The terminal's columns: a figure with its 95% CI in one cell (the row's numbers stay apart for
# JSON and CSV).
_CONTENTION_FIGURES = (
    ("aggregate", "aggregate (95% CI)"),
    ("per_client", "per client (95% CI)"),
    ("per_client_p99_us", "p99 µs per client (95% CI)"),
    ("fairness", "fairness J (95% CI)"),
)


def _with_ci(row: dict[str, Any], name: str) -> str:
    value = row[name]
    if value is None:
        return "–"
    shown = f"{value:.3f}" if name == "fairness" else f"{value:,.0f}"
    ci = ci_text(row[f"{name}_ci95_low"], row[f"{name}_ci95_high"])[0]
    return shown if ci in ("", "–") else f"{shown} ({ci})"


def contention_tables(curves: Sequence[ContentionCurve]) -> list[DataTable]:
    """Many clients, one backend (report/contention.py): one table per workload and tier, a row per
    configuration and number of clients, the saturation point marked: the numbers the HTML report's
    curves draw."""
    by_table: dict[tuple[str, str], list[ContentionCurve]] = {}
    for c in curves:
        by_table.setdefault((c.workload, c.tier), []).append(c)
    out = []
    for (workload, tier), group in by_table.items():
        rows = [
            {
                **row,
                **{shown: _with_ci(row, name) for name, shown in _CONTENTION_FIGURES},
                "worst p99 µs": None
                if row["worst_p99_us"] is None
                else f"{row['worst_p99_us']:,.0f}",
                "saturation": saturation_word(row),
            }
            for c in group
            for row in c.as_rows()
        ]
        axes = [a for a in cell_axes([c.axes for c in group]) if a not in ("tier", "clients")]
        notes = [
            *CONTENTION_NOTES,
            *(
                f"clients on other hosts (one each, in this order) · {h}"
                for h in client_host_lines(group)
            ),
        ]
        out.append(
            DataTable(
                f"{workload} · many clients, one backend ({group[0].metric}) · tier {tier}",
                [
                    *axes,
                    "clients",
                    "n",
                    *(shown for _, shown in _CONTENTION_FIGURES),
                    "worst p99 µs",
                    "saturation",
                ],
                rows,
                notes=notes,
                axes=axes,
            )
        )
    return out


def _rank_flags(wr: WorkloadRanking, label: str) -> list[str]:
    out = []
    n = len((wr.disturbed or {}).get(label, []))
    if n:
        out.append(f"{n} disturbed")
    unit = (wr.units or {}).get(label)
    if unit is not None and unit.unit == "boot-means":
        out.append("n = boots")  # the boot means are the unit: runs of one boot are not independent
    stop = (wr.stops or {}).get(label)
    if stop and stop["kind"] == "eliminated":
        out.append(f"eliminated after round {stop['round']}")
    return out


def _direction(key: str) -> bool:
    """Higher is better for the metric of a compare key 'cell · workload · metric'."""
    workload, metric = key.split(" · ")[-2:]
    m, higher = primary_metric(workload)
    if metric != m:
        higher = not metric.endswith(("_us", "_ms", "_s", ".seconds"))
    return higher


def regressions(changes: Sequence[Change], fail_above_pct: float) -> list[Change]:
    """Significant changes for the worse by more than `fail_above_pct` percent (B relative to A)."""
    out = []
    for c in changes:
        if not c.significant or c.ratio.ratio is None:
            continue
        worse = (1 - c.ratio.ratio) if _direction(c.key) else (c.ratio.ratio - 1)
        if worse * 100 > fail_above_pct:
            out.append(c)
    return out


def compare_table(changes: Sequence[Change], show_all: bool = False) -> DataTable:
    rows = []
    for c in sorted(
        changes, key=lambda c: (not c.significant, c.p_adjusted if c.p_adjusted is not None else 1)
    ):
        if not (c.significant or show_all):
            continue
        cell, workload, metric = c.key.rsplit(" · ", 2)
        rows.append(
            {
                "cell": cell,
                "workload": workload,
                "metric": metric,
                "A mean": c.a.mean,
                "B mean": c.b.mean,
                "B/A": ratio_text(*c.ratio),
                "ratio": c.ratio.ratio,
                "ci95_low": c.ratio.low,
                "ci95_high": c.ratio.high,
                "p (Holm)": c.p_adjusted,
                "changed": c.significant,
            }
        )
    return DataTable(
        "changes (Welch's t-test, Holm-corrected, α=0.05)",
        ["cell", "workload", "metric", "A mean", "B mean", "B/A", "p (Holm)", "changed"],
        rows,
        axes=["workload", "metric"],
    )


def monitor_table(
    series: dict[str, list[tuple[float, float]]], prefixes: Sequence[str]
) -> DataTable:
    names = sorted(n for n in series if n.startswith(tuple(prefixes)))
    index = {n: dict(series[n]) for n in names}
    times = sorted({t for n in names for t, _ in series[n]})
    rows = [{"t (s)": round(t, 3), **{n: index[n].get(t) for n in names}} for t in times]
    return DataTable("host time series", ["t (s)", *names], rows)
