"""Terminal renderers of `results`, `rank`, `compare` and `monitor` (the default `--format table`).

The report modules produce the data (`results_document`, `WorkloadRanking`, `Change`, monitor
series); these functions lay it out as rich tables with colour markup and print it to the console
they are given. The exporters in `export/` write those commands' other formats (JSON, CSV, Markdown)
from the tables of `exports.py`; nothing here computes a statistic. Each renderer returns the
accelerators of what it showed, so the caller can warn once that TCG numbers are not a KVM host's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from iomatrix.report.figures import IMPRECISE, ci_text, ratio_text
from iomatrix.report.fit import Column, fitted_table
from iomatrix.report.naming import cell_names
from iomatrix.report.quality import notes as quality_notes
from iomatrix.report.rank import ScoreRow, WorkloadRanking, primary_metric
from iomatrix.report.recommend.grammar import centre_heading, to_best
from iomatrix.report.results import MONITOR_HEADLINE, inference_figures
from iomatrix.risk import risk_of
from iomatrix.stats import Change, RatioCI
from iomatrix.ui import fmt


def ratio_short(rc: RatioCI | None) -> str:
    """'1.23× (1.10–1.40)', '1.23×' without an interval, '–' without a ratio."""
    if rc is None or rc.ratio is None:
        return "–"
    if rc.low is None:
        return f"{rc.ratio:.2f}×"
    if rc.imprecise:
        return ratio_text(*rc)
    return f"{rc.ratio:.2f}× ({rc.low:.2f}–{rc.high:.2f})"


def _shown(metric: str | None, r: dict[str, Any]) -> bool:
    """Whether a result row is shown: the workload's primary metric by default, `metric`, or
    'all'."""
    if metric is None:
        return r["metric"] == primary_metric(r["workload"])[0]
    return metric == "all" or r["metric"] == metric


_MONITOR_HEADINGS = {
    "cpu_busy_pct": "host CPU %",
    "cpu_iowait_pct": "iowait %",
    "disk_util_pct": "disk util %",
    "disk_await_ms": "await ms",
    "mem_used_mb": "mem MiB",
    "mem_used_with_cache_mb": "+cache MiB",
    "proc_cpu_pct": "QEMU/fio CPU %",
}


def _print_guests(out: Console, guests: list[dict[str, Any]]) -> None:
    """Whose kernel and driver the guest rows went through (issue 51: report/guests.py)."""
    for g in guests:
        out.print(f"guest: {g['line']}", markup=False, highlight=False)


def print_results(
    out: Console, doc: dict[str, Any], metric: str | None, monitor: bool
) -> list[str]:
    """The first sweep of a `results_document`: one row per cell × workload × metric, then pruned
    and failed. With `metric='all'` one small table per cell × workload (its metrics as rows), so
    the metric, n and CI are never the columns left out; with `monitor` a second table of the
    host-monitor headline per cell."""
    s = doc["sweeps"][0]
    out.print(
        f"sweep {s['id']} · plan {s['plan']} · {s['status']} · host {s['host']['hostname']} "
        f"(kernel {s['host']['kernel']}, {s['host']['fio_version']}, {s['host']['qemu_version']})",
        markup=False,
    )
    _print_guests(out, s.get("guests", []))
    accels: list[str] = []
    shown = [r for r in s["results"] if _shown(metric, r)]
    labels = [
        " ".join(
            f"{k}={v}"
            for k, v in r["axes"].items()
            if v != "-" and k != "tier" and not (k == "modifier" and v == "none")
        )
        for r in shown
    ]
    names = cell_names(labels)
    if names.constant_text():
        out.print(f"all cells, where the axis applies: {names.constant_text()}", markup=False)
    for r in shown:
        accels += r["accel"]
    if metric == "all":
        _print_all_metrics(out, shown, [names.of(label) for label in labels])
    else:
        cols = [
            Column("tier", 0),
            Column("cell", 0, name=True),
            Column("workload", 0),
            Column("metric", 1),
            Column("n", 2),
            Column("mean", 0),
            Column("95% CI", 1),
            Column("±%", 3),
            Column("CV", 4),
            Column("accel", 5),
            Column("notes", 2, wraps=True),
        ]
        rows = [_result_row(r, names.of(label)) for r, label in zip(shown, labels, strict=True)]
        t, left_out = fitted_table(cols, rows, out.width)
        out.print(t)
        if left_out:
            out.print(f"[dim]{left_out}[/]")
    if monitor:
        _print_monitor_headline(out, s, shown, [names.of(label) for label in labels])
    for pr in s["pruned"][:5]:
        out.print(f"[dim]pruned: {escape(pr['what'])}: {escape(pr['reason'])}[/]")
    if len(s["pruned"]) > 5:
        out.print(f"[dim]… {len(s['pruned']) - 5} more pruned (iomatrix plan --explain)[/]")
    for f in s["failures"][:5]:
        out.print(
            f"[red]failed run {f['id']}[/] " + escape(f"{f['key']} · {f['workload']}: {f['error']}")
        )
    return accels


def _print_all_metrics(out: Console, shown: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """`--metric all`: a heading per tier · cell · workload, the notes its metrics share once, then
    its metrics, one per row (with the notes only that metric has)."""
    cols = [
        Column("metric", 0),
        Column("n", 0),
        Column("mean", 0),
        Column("95% CI", 0),
        Column("±%", 3),
        Column("CV", 4),
        Column("accel", 5),
        Column("notes", 2, wraps=True),
    ]
    groups: dict[tuple[str, str, str], list[tuple[list[str], list[str]]]] = {}
    for r, name in zip(shown, names, strict=True):
        tier, cell, workload, *rest = _result_row(r, name)
        notes = [n for n in rest[-1].split("; ") if n]
        groups.setdefault((tier, cell, workload), []).append((rest[:-1], notes))
    for (tier, cell, workload), members in groups.items():
        out.print(f"\n[bold]{escape(workload)}[/] · {escape(cell)} · tier {tier}", highlight=False)
        shared = [n for n in members[0][1] if all(n in notes for _, notes in members)]
        if shared:
            out.print(f"  [dim]{escape('; '.join(shared))}[/]", highlight=False)
        rows = [[*row, "; ".join(n for n in notes if n not in shared)] for row, notes in members]
        t, left_out = fitted_table(cols, rows, out.width)
        out.print(t)
        if left_out:
            out.print(f"[dim]{left_out}[/]")


def _print_monitor_headline(
    out: Console, sweep: dict[str, Any], shown: Sequence[dict[str, Any]], names: Sequence[str]
) -> None:
    """`--monitor`: the host-monitor headline of each shown cell × workload (means over its
    runs)."""
    cells = {(c["cell"], c["workload"]): c for c in sweep.get("cells", [])}
    cols = [
        Column("cell", 0, name=True),
        Column("workload", 0),
        *(Column(_MONITOR_HEADINGS.get(f, f), 1 + i) for i, f in enumerate(MONITOR_HEADLINE)),
    ]
    rows, seen = [], set()
    for r, name in zip(shown, names, strict=True):
        if (r["cell"], r["workload"]) in seen:
            continue
        seen.add((r["cell"], r["workload"]))
        view = cells.get((r["cell"], r["workload"]), {}).get("host_view", {})
        rows.append([name, r["workload"], *(fmt(view.get(f)) for f in MONITOR_HEADLINE)])
    out.print(
        "\n[bold]host monitor[/] (mean over each cell's runs; 'iomatrix monitor --run N' "
        "for one run's "
        "time series)"
    )
    if not any(v != "–" for row in rows for v in row[2:]):
        out.print("[dim]no host monitor samples recorded for these cells[/]")
        return
    t, left_out = fitted_table(cols, rows, out.width)
    out.print(t)
    if left_out:
        out.print(f"[dim]{left_out}[/]")


def _result_row(r: dict[str, Any], name: str) -> list[str]:
    """One result's cells, monitor columns apart."""
    # Runs that shared guest boots: the CI is that of the analysis unit (boot means when boots
    # differ more than runs within a boot do), as in rank, and so is the mean; n and CV stay those
    # of the runs.
    src, unit_note = inference_figures(r)
    ci = ci_text(src["ci95_low"], src["ci95_high"])[0]
    rel = "–" if src["ci95_rel_half_width"] is None else f"{src['ci95_rel_half_width']:.1%}"
    cv = "–" if r["cv"] is None else f"{r['cv']:.1%}"
    n = f"{r['n']}" + (f" (+{r['failed_runs']} failed)" if r["failed_runs"] else "")
    notes = quality_notes(r) + ([unit_note] if unit_note else [])
    return [
        r["axes"]["tier"],
        name,
        r["workload"],
        r["metric"],
        n,
        fmt(src["mean"]),
        ci,
        rel,
        cv,
        ",".join(r["accel"]),
        "; ".join(notes),
    ]


def print_scores(
    out: Console, score: str, rows: Sequence[ScoreRow], factors: dict[str, float], top: int
) -> None:
    """`rank --score`: the top cells by a block-size-weighted, bare-metal-relative score."""
    out.print(
        f"[bold]top performers, {score}[/] (block-size-weighted score): factor(s) "
        + ", ".join(f"{k}={v:.3g}" for k, v in factors.items())
    )
    t = Table("#", "cell", "score", "95% CI", box=None)
    for i, r in enumerate(rows[:top], 1):
        # a score CI reaching ≤ 0 or > 10×: not measured precisely
        ci = ci_text(r.score.low, r.score.high)[0]
        t.add_row(str(i), r.label, fmt(r.score.score), ci)
    out.print(t)


def print_rankings(
    out: Console, rankings: Sequence[WorkloadRanking], top: int, min_runs: int
) -> list[str]:
    """One ranking table per workload × tier, with its ceiling, notes and the legend."""
    accels: list[str] = []
    for wr in rankings:
        r = wr.ranking
        accels += wr.accel
        better = "higher" if r.higher_is_better else "lower"
        out.print(
            f"\n[bold]{escape(wr.title)}[/] · {escape(wr.metric)} ({better} is better) · "
            f"tier {wr.tier}"
        )
        cols = [
            Column("rank", 0),
            Column("group", 1),
            Column("cell", 0, name=True),
            Column("n", 2),
            # the figure the order uses and "the best" is the best of (issue 70)
            Column(centre_heading(r.analysis is not None and r.analysis.blocked), 0),
            Column("95% CI", 1),
            Column("vs best", 2),
            Column("vs bare metal", 3),
            Column("power loss", 3),
            Column("flags", 2, wraps=True),
        ]
        names = cell_names(row.name for row in r.rows)
        rows = [_ranking_row(wr, row, names.of(row.name)) for row in r.rows[:top]]
        if names.constant_text():
            out.print(f"  all cells, where the axis applies: {names.constant_text()}", markup=False)
        t, left_out = fitted_table(cols, rows, out.width)
        out.print(t)
        if left_out:
            out.print(f"  [dim]{left_out}[/]")
        for cw, mean in wr.ceiling:
            out.print(
                f"  ceiling (null-co, {cw.axes['bus']}): {fmt(mean)} — the fastest the virtual I/O "
                "path goes on this host"
            )
        for line in wr.notes():
            out.print(f"  {names.rename(line)}", markup=False)
        # the description already says what 'too noisy' and too few runs mean: only the group
        # letters are new (stats/letter_display.py: a cell shares a letter with exactly the cells
        # it is not significantly different from)
        out.print(
            f"  [dim]{r.test_description}. Same group letter = not separated at the rule's "
            "level (a cell may carry several).[/]"
        )
        if wr.cold_apart:
            out.print(
                "  [dim]'cold run apart': the first run differed significantly from the rest "
                "(see 'iomatrix results'); the cell is ranked on its warm runs[/]"
            )
        if r.best is None:
            out.print(
                f"  [yellow]no cell has {min_runs} ok runs yet[/] — run more repetitions "
                "(repetitions.min, time_budget) or lower --min-runs"
            )
    return accels


def _ranking_row(wr: WorkloadRanking, row: Any, name: str) -> list[str | Text]:
    """One ranked cell's columns (`row`: a row of `wr.ranking`)."""
    s = row.summary
    ci = ci_text(s.ci_low, s.ci_high)[0]
    cell = wr.cells[row.name]
    risk = risk_of(cell.axes["cache"], cell.axes["modifier"])
    unit = (wr.units or {}).get(row.name)
    flags = ", ".join(
        [f.replace("_", " ") for f in row.flags]
        + (["cold run apart"] if row.name in wr.cold_apart else [])
        + (["n = boots"] if unit is not None and unit.unit == "boot-means" else [])
    )
    return [
        str(row.rank) if row.rank else "–",
        row.group_label or "–",
        name,
        str(s.n),
        fmt(s.mean if row.centre is None else row.centre),
        ci,
        to_best(row.ratio_to_best, wr.metric),
        ratio_short(wr.to_baremetal.get(row.name)),
        risk.level if risk else "–",
        Text(flags, style="yellow"),
    ]


def compare_notes(
    sa: dict[str, list[float]],
    sb: dict[str, list[float]],
    shared: int,
    plan_a: tuple[str, str],
    plan_b: tuple[str, str],
) -> list[str]:
    """What `compare` says before its table about what it compares: that A and B ran different plans
    (`plan_a`, `plan_b`: name and fingerprint), and that they share few figures (fewer than half of
    either's figures with ≥ 2 runs): without it, two sweeps of different plans are compared on the
    few figures they happen to share as if that were all (issue 49)."""
    notes = []
    if plan_a[1] != plan_b[1]:
        which = (
            f"plan '{plan_a[0]}' changed between them"
            if plan_a[0] == plan_b[0]
            else f"A ran plan '{plan_a[0]}', B plan '{plan_b[0]}'"
        )
        notes.append(f"different plans: {which}; only the figures both measured are compared")
    n_a, n_b = (sum(len(v) >= 2 for v in x.values()) for x in (sa, sb))
    if 2 * shared < n_a or 2 * shared < n_b:
        notes.append(
            f"few figures in common: A and B share {shared} of A's {n_a} and B's {n_b} "
            "cell × workload "
            "figures (with ≥ 2 runs each); the others are in one sweep only and are not compared"
        )
    return notes


def print_changes(out: Console, changes: Sequence[Change], show_all: bool) -> None:
    """`compare`: the figures that changed significantly (all of them with `show_all`)."""
    sig = [c for c in changes if c.significant]
    out.print(
        f"{len(sig)} of {len(changes)} cell × workload figures changed significantly "
        "(Welch's t-test, Holm-corrected, α=0.05)"
    )
    t = Table(box=None)
    # The key wraps (at spaces; a name longer than the column folds rather than loses its end); a
    # figure never splits across lines: the key column gives way first.
    t.add_column("cell · workload · metric", overflow="fold", ratio=1)
    for heading in ("A mean", "B mean", "B/A", "95% CI", "p (Holm)", ""):
        t.add_column(heading, no_wrap=True)
    for c in sorted(
        changes, key=lambda c: (not c.significant, c.p_adjusted if c.p_adjusted is not None else 1)
    ):
        if not (c.significant or show_all):
            continue
        ci = (
            "–"
            if c.ratio.low is None
            else (IMPRECISE if c.ratio.imprecise else f"{c.ratio.low:.3f}–{c.ratio.high:.3f}")
        )
        t.add_row(
            c.key,
            fmt(c.a.mean),
            fmt(c.b.mean),
            f"{c.ratio.ratio:.3f}" if c.ratio.ratio else "–",
            ci,
            "–" if c.p_adjusted is None else f"{c.p_adjusted:.3g}",
            Text("changed", style="bold") if c.significant else "",
        )
    if t.row_count:  # no header over nothing: the line above already says that nothing changed
        out.print(t)


_UNIT_SUFFIXES = (
    ("_pct", " %"),
    ("_mbps", " MB/s"),
    ("_iops", " IOPS"),
    ("_mb", " MiB"),
    ("_ms", " ms"),
)


def monitor_heading(field: str) -> str:
    """'disk.write_mbps' → 'write MB/s': a column heading inside its group's table (the group is its
    title)."""
    name = field.split(".", 1)[-1]
    for suffix, unit in _UNIT_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)] + unit
            break
    return name.replace("_", " ")


def _fit_columns(
    fields: Sequence[str], widths: Mapping[str, int], lead: int, limit: int
) -> list[list[str]]:
    """`fields` in order, cut into tables no wider than `limit` each, every table starting with a
    column `lead` wide (the time); a field wider than `limit` on its own gets a table of its own."""
    chunks: list[list[str]] = [[]]
    used = lead
    for f in fields:
        if chunks[-1] and used + widths[f] > limit:
            chunks.append([])
            used = lead
        chunks[-1].append(f)
        used += widths[f]
    return chunks


def print_monitor(
    out: Console, series: dict[str, list[tuple[float, float]]], names: Sequence[str]
) -> None:
    """`monitor`: one table per field group (cpu, disk, mem, …), one row per sample time, one column
    per field. A group wider than the terminal is split into several tables, each repeating the time
    column, so no heading or value is ever cut."""
    times = sorted({t for n in names for t, _ in series[n]})
    index = {n: dict(series[n]) for n in names}
    time_col = [f"{ts:.2f}" for ts in times]
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(n.split(".")[0], []).append(n)
    # rich's box-less table: one space either side of every cell, so each column takes its text + 2
    time_width = max(len("t (s)"), *(len(v) for v in time_col)) + 2 if time_col else 7
    for group, fields in groups.items():
        cols = {f: [fmt(index[f].get(ts)) for ts in times] for f in fields}
        widths = {
            f: max(len(monitor_heading(f)), *(len(v) for v in cols[f])) + 2 if times else 0
            for f in fields
        }
        chunks = _fit_columns(fields, widths, time_width, out.width)
        for i, chunk in enumerate(chunks):
            part = f" ({i + 1}/{len(chunks)})" if len(chunks) > 1 else ""
            out.print(f"\n[bold]{escape(group)}[/]{part}")
            t = Table(box=None)
            t.add_column("t (s)", no_wrap=True, justify="right")
            for f in chunk:
                t.add_column(monitor_heading(f), no_wrap=True, justify="right")
            for row, ts in enumerate(time_col):
                t.add_row(ts, *(cols[f][row] for f in chunk))
            out.print(t)
