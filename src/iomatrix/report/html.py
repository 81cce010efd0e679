"""`iomatrix report --html`: one self-contained HTML file (inline SVG charts and CSS, no script, no
request).

Order follows what a reader needs: the recommendation and its risks, then the evidence (rankings
with error bars, block-size bars beside bare metal and the ceiling, host panels over time), then the
sweep's metadata and every run. A section without data says what is missing instead of disappearing
— except latency against load and host CPU per I/O, which appear only for sweeps that measured them
(a queue-depth family, runs with the I/O path sampled), so a report of an older sweep reads as it
did."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from iomatrix.report import charts
from iomatrix.report.companions import companion
from iomatrix.report.contention import (
    ContentionCurve,
    client_host_lines,
    saturation_word,
    sweep_contention,
)
from iomatrix.report.curves import LatencyCurve, latency_curves
from iomatrix.report.figures import BOUNDED_NOTE, ci_text, ratio_text
from iomatrix.report.fleet_render import fleet_html
from iomatrix.report.headline import DEFAULT_TARGET, headline
from iomatrix.report.history_chart import history_sections
from iomatrix.report.html_tables import labelled_tables
from iomatrix.report.naming import cell_names
from iomatrix.report.objective import Objective, objective_line, objective_metric
from iomatrix.report.per_backing import configurations_in
from iomatrix.report.query import (
    CellWorkload,
    cell_workloads,
    failures,
    monitor_series,
    run_table,
    sweep_info,
)
from iomatrix.report.rank import WorkloadRanking, primary_metric, rank_sweep
from iomatrix.report.recommend import Recommendation, Verdict, recommend
from iomatrix.report.recommend.grammar import centre_heading, compared, to_best
from iomatrix.report.render import gain_text, page_cache_lines, status_text
from iomatrix.stats import summarize
from iomatrix.stats.decision import DEFAULT_THRESHOLD, DEFAULT_TIE_BREAK
from iomatrix.stats.ranking import RankedRow
from iomatrix.stats.summary import Summary
from iomatrix.store import Store
from iomatrix.tiers import is_reference, known_tier, reference_tier, tier_classes
from iomatrix.ui import fmt
from iomatrix.vmconfig.reading import CurrentConfig

BLOCK_SIZES = ("512", "4k", "64k", "1m")
SIZE_WORKLOAD = re.compile(r"^(rand-read|rand-write)-(512|4k|64k|1m)$")
MAX_HOST_COLUMNS = 3
COST_METRIC = "cost.cpu_us_per_io"


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("iomatrix", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt
    # a configuration to use named by its settings: the number of clients it was measured with is
    # a condition its answer's name says ("… with 4 clients"), not a setting (issue 70)
    env.filters["setting"] = configurations_in
    env.filters["ratio"] = lambda g: "–" if g is None or g.ratio is None else ratio_text(*g.ratio)
    # the choice against another configuration in the one grammar (recommend/grammar.py)
    env.globals["compared"] = lambda g, metric: (
        f"vs {g.against}: –" if g.ratio is None else compared(g.ratio, metric, g.against)
    )
    return env


def short_labels(labels: Sequence[str]) -> tuple[list[str], str]:
    """Each label's short name and what every label shares, as the terminal, the answer and "Every
    run" name cells (naming.cell_names: "raw · writeback", "preallocation=off aio=threads …" said
    once): one page, one way of naming a cell."""
    names = cell_names(labels)
    return [names.of(lab) for lab in labels], names.constant_text()


def _summary(samples: list[float]) -> tuple[float, float | None, float | None]:
    s = summarize(samples)
    return s.mean, s.ci_low, s.ci_high


def _is_vm_view(tier: str) -> bool:
    known = known_tier(tier)
    return known is not None and known.vm_view


def ranking_sections(
    store: Store,
    sweep_id: int,
    cws: list[CellWorkload],
    objective: Objective | None = None,
    **rank_kw: Any,
) -> list[dict[str, Any]]:
    """One section per workload and tier, ranked exactly as 'iomatrix rank' ranks them."""
    out = []
    rankings = (
        rank_sweep(store, sweep_id, None, None, objective=objective, **rank_kw)
        if cws
        and (
            objective is None
            or any(objective_metric(objective, c.workload) in c.samples for c in cws)
        )
        else []
    )
    for w in sorted({c.workload for c in cws} - {wr.workload for wr in rankings}):
        what = "primary metric" if objective is None else objective_metric(objective, w)
        out.append({"workload": w, "missing": f"no ranked cells for this workload's {what}"})
    return out + [_ranking_section(wr, cws) for wr in rankings]


def _ranking_section(wr: WorkloadRanking, cws: list[CellWorkload]) -> dict[str, Any]:
    """One ranking's chart, table and notes."""
    w = wr.workload
    rows = wr.ranking.rows
    names = cell_names(r.name for r in rows)
    short, common = [names.of(r.name) for r in rows], names.constant_text()
    # each bar the figure the rank orders by (issue 70: bars of arithmetic means put the shortest
    # latency bar last in a ranking by geometric means); its whiskers the mean's 95% CI, as the
    # table's (charts._err clips them where they do not hold the bar's end)
    bars = [
        charts.Bar(s, _centre(r), r.summary.ci_low, r.summary.ci_high, r.group)
        for s, r in zip(short, rows, strict=True)
    ]
    refs: dict[str, float] = {}
    bm = [
        c
        for c in cws
        if c.workload == w and is_reference(c.axes["tier"]) and wr.metric in c.samples
    ]
    if not is_reference(wr.tier) and bm:
        refs[reference_tier().prose_name()] = max(_summary(c.samples[wr.metric])[0] for c in bm)
    if wr.ceiling:
        refs["ceiling"] = max(m for _, m in wr.ceiling)
    table = []
    bounded = False
    for s, r in zip(short, rows, strict=True):
        p50, p99 = _latency(wr.cells.get(r.name), wr.metric)
        ci, b = ci_text(r.summary.ci_low, r.summary.ci_high)
        bounded |= b
        table.append(
            {
                "cell_label": r.name,
                "rank": r.rank or "–",
                "group": r.group_label or "–",
                "cell": s,
                "n": r.summary.n,
                "mean": fmt(_centre(r)),
                "mean_value": _centre(r),
                "ci": ci,
                "vs_best": to_best(r.ratio_to_best, wr.metric),
                "p50": p50,
                "p99": p99,
                "flags": ", ".join(f.replace("_", " ") for f in r.flags),
            }
        )
    return {
        "workload": wr.title,
        "metric": wr.metric,
        "tier": wr.tier,
        "common": common,
        # the notes name cells as the table does, as `iomatrix rank` prints them
        "notes": [names.rename(n) for n in wr.notes()],
        "better": "higher" if wr.ranking.higher_is_better else "lower",
        "centre": centre_heading(wr.ranking.analysis is not None and wr.ranking.analysis.blocked),
        "svg": charts.ranking_chart(bars, wr.metric, refs),
        "rows": table,
        "bounded": bounded,
        "test": wr.ranking.test_description,
    }


def _centre(r: RankedRow) -> float:
    """The figure a ranked row is ordered by (its geometric mean when blocked), else its mean."""
    return r.summary.mean if r.centre is None else r.centre


def _latency(cw: CellWorkload | None, metric: str) -> tuple[str, str]:
    """The cell's mean completion-latency p50 and p99 over its runs (µs), for the direction its
    ranked metric measures (a write workload: write latency); '–' where fio reported none (a
    filesystem workload)."""
    if cw is None:
        return "–", "–"
    side = metric.split(".")[0]
    sides = [side] if side in ("read", "write") else ["read", "write"]

    def mean_of(pct: str) -> str:
        for d in sides:
            values = cw.samples.get(f"{d}.clat_{pct}_us")
            if values:
                return fmt(sum(values) / len(values))
        return "–"

    return mean_of("p50"), mean_of("p99")


def cost_sections(
    store: Store, sweep_id: int, cws: list[CellWorkload], **rank_kw: Any
) -> list[dict[str, Any]]:
    """Host CPU per I/O per workload and tier, ranked like the speed (lower is better); none for a
    sweep recorded before the sampler followed the I/O path (its runs have no
    cost.cpu_us_per_io)."""
    if not any(COST_METRIC in c.samples for c in cws):
        return []
    return [
        _ranking_section(wr, cws)
        for wr in rank_sweep(store, sweep_id, None, COST_METRIC, **rank_kw)
    ]


def curve_sections(cws: list[CellWorkload]) -> list[dict[str, Any]]:
    """Latency against load: one chart per queue-depth family and tier, one line per
    configuration."""
    by_chart: dict[tuple[str, str], list[LatencyCurve]] = {}
    for curve in latency_curves(cws):
        by_chart.setdefault((curve.family, curve.tier), []).append(curve)
    out = []
    for (family, tier), curves in by_chart.items():
        short, common = short_labels([c.label for c in curves])
        series = [
            charts.CurveSeries(
                s,
                [
                    (
                        p.queue_depth,
                        (p.iops.mean, p.iops.ci_low, p.iops.ci_high),
                        (p.p99_us.mean, p.p99_us.ci_low, p.p99_us.ci_high),
                    )
                    for p in c.points
                ],
                c.knee,
            )
            for s, c in zip(short, curves, strict=True)
        ]
        rows = [
            {
                **row,
                "cell": s,
                "iops": fmt(row["iops"]),
                "p99_us": fmt(row["p99_us"]),
                "iops_ci": ci_text(row["iops_ci95_low"], row["iops_ci95_high"])[0],
                "p99_ci": ci_text(row["p99_ci95_low"], row["p99_ci95_high"])[0],
            }
            for s, c in zip(short, curves, strict=True)
            for row in c.as_rows()
        ]
        out.append(
            {
                "family": family,
                "tier": tier,
                "common": common,
                "svg": charts.latency_curve_chart(series),
                "rows": rows,
                "metrics": f"{curves[0].iops_metric} against {curves[0].latency_metric}",
            }
        )
    return out


def _figure(s: Summary | None) -> charts.Figure | None:
    return None if s is None else (s.mean, s.ci_low, s.ci_high)


def contention_sections(store: Store, sweep_id: int) -> list[dict[str, Any]]:
    """Many clients, one backend: one chart per workload and tier, one line pair per configuration;
    none for a sweep without runs of several clients."""
    by_chart: dict[tuple[str, str], list[ContentionCurve]] = {}
    for curve in sweep_contention(store, sweep_id):
        by_chart.setdefault((curve.workload, curve.tier), []).append(curve)
    out = []
    for (workload, tier), curves in by_chart.items():
        short, common = short_labels([c.label for c in curves])
        series = [
            charts.ContentionSeries(
                s,
                [
                    (
                        p.clients,
                        (p.aggregate.mean, p.aggregate.ci_low, p.aggregate.ci_high),
                        (p.per_client.mean, p.per_client.ci_low, p.per_client.ci_high),
                        _figure(p.per_client_p99_us),
                    )
                    for p in c.points
                ],
                c.saturation,
            )
            for s, c in zip(short, curves, strict=True)
        ]
        rows = [
            {
                "cell": s,
                "clients": row["clients"],
                "n": row["n"],
                "saturation": saturation_word(row),
                **{
                    name: fmt(row[name]) if row[name] is not None else "–"
                    for name in ("aggregate", "per_client", "per_client_p99_us", "worst_p99_us")
                },
                "fairness": "–" if row["fairness"] is None else f"{row['fairness']:.3f}",
                **{
                    f"{name}_ci": ci_text(row[f"{name}_ci95_low"], row[f"{name}_ci95_high"])[0]
                    for name in ("aggregate", "per_client", "per_client_p99_us", "fairness")
                },
            }
            for s, c in zip(short, curves, strict=True)
            for row in c.as_rows()
        ]
        out.append(
            {
                "workload": workload,
                "tier": tier,
                "common": common,
                "metric": curves[0].metric,
                "rows": rows,
                "svg": charts.contention_chart(series, curves[0].metric),
                "client_hosts": client_host_lines(curves),
            }
        )
    return out


def blocksize_sections(cws: list[CellWorkload]) -> list[dict[str, Any]]:
    """Per direction (random read / write): MB/s per block size, per configuration, beside
    references."""
    out = []
    for direction, metric in (("rand-read", "read.bw_mbps"), ("rand-write", "write.bw_mbps")):
        mine = [
            c
            for c in cws
            if (m := SIZE_WORKLOAD.match(c.workload))
            and m.group(1) == direction
            and metric in c.samples
            and len(c.samples[metric]) >= 2
        ]
        sizes = [s for s in BLOCK_SIZES if any(c.workload.endswith(f"-{s}") for c in mine)]
        if not mine:
            continue
        ordered, common = _size_series(mine, metric)
        note = (
            ""
            if len(sizes) > 1
            else f"only {sizes[0]} was swept: add {direction}-512/4k/64k/1m for the sweep"
        )
        out.append(
            {
                "title": f"{direction.replace('-', ' ')} by block size",
                "metric": metric,
                "common": common,
                "svg": charts.blocksize_chart(ordered, sizes, "MB/s"),
                "note": note,
            }
        )
    return out


def _size_series(mine: list[CellWorkload], metric: str) -> tuple[list[charts.SizeSeries], str]:
    """(one series per configuration charted, then the references: bare metal and the ceiling; the
    axes every configuration shares). The configurations charted: a VM's view (the guest tier) when
    the sweep has it, else the reference's."""
    ref = reference_tier()
    tier = next((c.axes["tier"] for c in mine if _is_vm_view(c.axes["tier"])), ref.name)
    bare = ref.prose_name()
    series: dict[str, charts.SizeSeries] = {}
    for c in mine:
        size = c.workload.rsplit("-", 1)[1]
        if c.axes["backing"] == "null":
            name = "ceiling"
        elif c.axes["tier"] != tier:
            name = bare if is_reference(c.axes["tier"]) and c.axes["cache"] in ("none", "-") else ""
        else:
            name = c.label()
        if not name:
            continue
        series.setdefault(name, charts.SizeSeries(name, {})).values.setdefault(
            size, _summary(c.samples[metric])
        )
    configs = [s for n, s in series.items() if n not in (bare, "ceiling")]
    short, common = short_labels([s.label for s in configs]) if configs else ([], "")
    for s, lab in zip(configs, short, strict=True):
        s.label = lab
    return configs + [series[n] for n in (bare, "ceiling") if n in series], common


def host_section(
    store: Store,
    rec: Recommendation,
    cws: list[CellWorkload],
    fallback: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """The host over time for the cells the recommendation compares (chosen vs current/defaults)."""
    by_label = {(c.label(), c.workload): c for c in cws}
    picked: list[tuple[str, int]] = []
    for v in rec.verdicts:
        if v.metric == "score":
            continue
        if v.choice is not None:
            names = [v.choice.cell] + [
                g.label for g in v.gains if g.label and g.label != v.choice.cell
            ]
        else:  # nothing chosen: show the cells with the highest means of this workload
            names = [r["cell_label"] for r in fallback.get(v.workload, [])]
        for name in dict.fromkeys(names):
            c = by_label.get((name, v.workload))
            if c and c.runs and all(p[0] != f"{name} · {v.workload}" for p in picked):
                picked.append((f"{name} · {v.workload}", c.runs[-1]))
        if picked:
            break
    columns = []
    for label, run_id in picked[:MAX_HOST_COLUMNS]:
        series = monitor_series(store, run_id)
        if series:
            columns.append((label, run_id, series))
    if not columns:
        return {"missing": "no monitor samples for the compared cells (was the host sampler off?)"}
    short, _ = short_labels([c[0] for c in columns])
    return {
        "svg": charts.host_panels(
            [(f"{s} (run {c[1]})", c[2]) for s, c in zip(short, columns, strict=True)]
        )
    }


def missing_parts(info: dict[str, Any], cws: list[CellWorkload], rec: Recommendation) -> list[str]:
    out = []  # the sweep's state (empty, unfinished) is in rec.warnings
    cells = [c.axes for c in cws]
    # what a tier misses in the sweep: bare metal absent, the guest tier's ceiling
    for tier in tier_classes():
        out += companion(tier.name).missing_notes(cells)
    out += [
        f"{v.workload}: {v.missing}"
        for v in rec.verdicts
        if v.choice is None and v.metric != "score"
    ]
    return out


def render_report(
    store: Store,
    sweep_id: int,
    *,
    current: CurrentConfig | None = None,
    requirements: Sequence[str] = (),
    min_n: int = 3,
    max_noise: float = 0.10,
    threshold: float = DEFAULT_THRESHOLD,
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    target: str = DEFAULT_TARGET,
    objective: Objective | None = None,
    fleet_group: str | None = None,
    allow_data_loss: bool = False,
) -> str:
    """The report; ``objective`` (report/objective.py) chooses what the recommendation and the
    rankings rank by (None: each workload's primary metric)."""
    info = sweep_info(store, sweep_id)
    cws = cell_workloads(store, sweep_id)
    rank_kw = {
        "min_n": min_n,
        "max_noise": max_noise,
        "threshold": threshold,
        "tie_break": tie_break,
    }
    rec = recommend(
        store,
        sweep_id,
        requirements=requirements,
        current=current,
        objective=objective,
        allow_data_loss=allow_data_loss,
        **rank_kw,
    )
    runs = run_table(store, sweep_id)
    # each run's cell by what sets it apart ('raw · writeback', naming.py), not by the store key's
    # slash form; what every run shares (where it applies) said once above the table
    names = cell_names(r["label"] for r in runs)
    runs_shared = names.constant_text()
    for r in runs:
        r["cell"] = names.of(r["label"])
        m = primary_metric(r["workload"])[0]
        r["primary"] = f"{m} = {fmt(r['metrics'].get(m))}" if m in r["metrics"] else "–"
    verdicts: list[Verdict] = rec.verdicts
    bounded = any(ci_text(*v.ci)[1] for v in verdicts if v.choice)
    rankings = ranking_sections(store, sweep_id, cws, objective=objective, **rank_kw)
    top = {
        r["workload"]: sorted(
            r["rows"],
            key=lambda x: (
                -float(x["mean_value"]) if r["better"] == "higher" else float(x["mean_value"])
            ),
        )[:2]
        for r in rankings
        if "rows" in r
    }
    for k in ("started_at", "finished_at"):
        if isinstance(info.get(k), int | float):
            info[k] = datetime.fromtimestamp(info[k], tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    # The tiers' own sections (the consolidation tier's tiles), in the order the tiers sort.
    extras = [
        s
        for tier in tier_classes()
        if (s := companion(tier.name).report_section(store, sweep_id, cws)) is not None
    ]
    # A fleet's report opens with the group answers; the sweep shown in full is one host's.
    fleet, fleet_sections = fleet_html(store, group=fleet_group, objective=objective, **rank_kw)
    extras += fleet_sections
    extras += history_sections(store)
    # on a phone each table's row stacks its cells under their column's names (html_tables.py)
    return labelled_tables(
        _env()
        .get_template("report.html.j2")
        .render(
            info=info,
            rec=rec,
            head=headline(rec, info["host"]["hostname"], target),
            gain_text=gain_text,
            page_cache_lines=page_cache_lines,
            status_text=status_text,
            verdicts=verdicts,
            rankings=rankings,
            blocksizes=blocksize_sections(cws),
            host=host_section(store, rec, cws, top),
            runs=runs,
            runs_shared=runs_shared,
            curves=curve_sections(cws),
            contention=contention_sections(store, sweep_id),
            costs=cost_sections(store, sweep_id, cws, **rank_kw),
            failures=failures(store, sweep_id),
            missing=missing_parts(info, cws, rec),
            ci_text=ci_text,
            bounded_note=BOUNDED_NOTE if bounded else "",
            extras=extras,
            fleet=fleet,
            objective=None if objective is None else objective_line(objective),
        )
    )


def write_report(store: Store, sweep_id: int, path: Path, **kw: Any) -> int:
    html = render_report(store, sweep_id, **kw)
    Path(path).write_text(html, encoding="utf-8")
    return len(html.encode())
