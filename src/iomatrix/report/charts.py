"""Charts for the HTML report, rendered by matplotlib's SVG backend to inline SVG text.

Text stays text in the SVG (svg.fonttype=none): small files, searchable, and no embedded font. Every
chart takes plain data (labels, means, intervals, series) and returns an SVG string; nothing here
reads the store. Intervals of quantities that cannot be negative are drawn bounded at 0."""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("svg")  # no display, no GUI toolkit
import matplotlib.pyplot as plt

from iomatrix.backing.spec import parse_size

plt.rcParams.update(
    {
        "svg.fonttype": "none",  # text as <text>, not paths: a fraction of the size
        "svg.hashsalt": "iomatrix",  # stable ids: the same data gives the same file
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)

GROUP_COLOURS = ("#1b7837", "#5aae61", "#a6dba0", "#d9f0d3")
INELIGIBLE = "#bbbbbb"
REFERENCE = {"bare metal": "#2166ac", "ceiling": "#b2182b"}
PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")


def _svg(fig: plt.Figure) -> str:
    buf = io.StringIO()
    fig.savefig(
        buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": "iomatrix"}
    )
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: the SVG is inlined in HTML


def _err(mean: float, low: float | None, high: float | None) -> tuple[float, float]:
    if low is None or high is None:
        return 0.0, 0.0
    # max(0, …): a log-scale interval (docs/statistics.md §1) need not hold the arithmetic mean; an
    # error bar cannot be negative
    return max(0.0, mean - max(0.0, low)), max(0.0, high - mean)


@dataclass
class Bar:
    label: str
    mean: float
    low: float | None
    high: float | None
    group: int | None  # 1 = indistinguishable from the best; None = not ranked


def _legend(ax: Any, **kw: Any) -> None:
    """A legend only when something on the axes has a label: matplotlib otherwise prints "No artists
    with labels found to put in legend" on stderr (a panel whose series were all empty, a chart of
    one unlabelled bar)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def ranking_chart(
    bars: Sequence[Bar], unit: str, references: dict[str, float] | None = None
) -> str:
    """Horizontal bars, best at the top, 95% CI error bars, coloured by significance group."""
    n = len(bars)
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.32 * max(n, 1)))
    ys = list(range(n))[::-1]
    colours = [
        INELIGIBLE if b.group is None else GROUP_COLOURS[min(b.group, len(GROUP_COLOURS)) - 1]
        for b in bars
    ]
    errs = [_err(b.mean, b.low, b.high) for b in bars]
    ax.barh(
        ys,
        [b.mean for b in bars],
        color=colours,
        xerr=[[e[0] for e in errs], [e[1] for e in errs]],
        capsize=3,
        error_kw={"elinewidth": 1},
    )
    ax.set_yticks(ys, [b.label for b in bars])
    ax.set_xlabel(unit)
    right = max(
        [b.mean + e[1] for b, e in zip(bars, errs, strict=True)]
        + list((references or {}).values())
        + [0]
    )
    # the reference lines stay in view even when no cell reaches them
    ax.set_xlim(0, right * 1.05 or 1)
    for (name, value), style in zip((references or {}).items(), ("--", ":"), strict=False):
        ax.axvline(
            value, color=REFERENCE.get(name, "#444"), linestyle=style, linewidth=1.2, label=name
        )
    if references:
        _legend(ax, loc="lower right", fontsize=8)
    return _svg(fig)


@dataclass
class SizeSeries:
    label: str
    values: dict[str, tuple[float, float | None, float | None]]  # block size → (mean, low, high)


def blocksize_positions(sizes: Sequence[str]) -> tuple[dict[str, float], float]:
    """Where each block size's group sits on a log2 axis (x = log2(bytes): 4k → 12, 1m → 20), and
    the width of a group: 0.8 of the closest spacing, so that neighbouring groups never overlap."""
    xs = {s: math.log2(parse_size(s)) for s in sizes}
    ordered = sorted(xs.values())
    gap = min((b - a for a, b in itertools.pairwise(ordered)), default=1.0)
    return xs, 0.8 * gap


def blocksize_chart(series: Sequence[SizeSeries], sizes: Sequence[str], unit: str) -> str:
    """Seed-000-style grouped bars: one group per block size, one bar per configuration (and
    references).

    Block sizes sit on a log2 axis (each doubling is the same distance), so 512 B, 4 KiB, 64 KiB and
    1 MiB are spaced by how far apart they really are, not evenly as categories."""
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    k = max(len(series), 1)
    where, group = blocksize_positions(sizes)
    width = group / k
    for i, s in enumerate(series):
        xs, ms, lo, hi = [], [], [], []
        for size in sizes:
            if size in s.values:
                m, low, high = s.values[size]
                e = _err(m, low, high)
                xs.append(where[size] - group / 2 + width * (i + 0.5))
                ms.append(m)
                lo.append(e[0])
                hi.append(e[1])
        colour = REFERENCE.get(s.label, PALETTE[i % len(PALETTE)])
        ax.bar(
            xs,
            ms,
            width=width,
            color=colour,
            yerr=[lo, hi],
            capsize=2,
            label=s.label,
            error_kw={"elinewidth": 0.8},
        )
    ax.set_xticks([where[s] for s in sizes], [f"{s}" for s in sizes])
    ax.set_xlabel("block size (log₂ scale)")
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    _legend(ax, fontsize=7, loc="upper left", ncols=1 if k < 5 else 2)
    return _svg(fig)


@dataclass
class CurveSeries:
    label: str
    # per point, in load order: (queue depth, (IOPS mean, low, high), (p99 mean, low, high))
    points: list[
        tuple[
            int, tuple[float, float | None, float | None], tuple[float, float | None, float | None]
        ]
    ]
    knee: int | None  # index of the knee point (stats/knee.py), None: none in the measured range


def latency_curve_chart(
    series: Sequence[CurveSeries], latency_unit: str = "p99 completion latency (µs)"
) -> str:
    """IOPS (x) against p99 latency (y), one line per configuration, points labelled by queue depth,
    95% CI error bars both ways, the knee ringed. Latency on a log axis: a queue's tail grows by
    orders of magnitude."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        xs = [p[1][0] for p in s.points]
        ys = [p[2][0] for p in s.points]
        xerr = [_err(*p[1]) for p in s.points]
        yerr = [_err(*p[2]) for p in s.points]
        ax.errorbar(
            xs,
            ys,
            xerr=[[e[0] for e in xerr], [e[1] for e in xerr]],
            yerr=[[e[0] for e in yerr], [e[1] for e in yerr]],
            color=colour,
            marker="o",
            markersize=3,
            capsize=2,
            elinewidth=0.8,
            linewidth=1.2,
            label=s.label,
        )
        for qd, (x, _, _), (y, _, _) in s.points:
            ax.annotate(
                f"qd{qd}",
                (x, y),
                textcoords="offset points",
                xytext=(3, 3),
                fontsize=7,
                color=colour,
            )
        if s.knee is not None:
            ax.plot(
                [xs[s.knee]],
                [ys[s.knee]],
                marker="o",
                markersize=10,
                markerfacecolor="none",
                markeredgecolor=colour,
                markeredgewidth=1.5,
                linestyle="none",
            )
    ax.set_xlabel("IOPS (ringed: the knee, where p99 latency starts growing faster than IOPS)")
    ax.set_ylabel(latency_unit)
    ax.set_yscale("log")
    ax.set_xlim(left=0)
    _legend(ax, fontsize=7, loc="upper left")
    return _svg(fig)


Figure = tuple[float, float | None, float | None]  # mean, CI low, CI high


@dataclass
class ContentionSeries:
    label: str
    # per point, in order of N: (N, aggregate, per-client throughput, per-client p99 or None)
    points: list[tuple[int, Figure, Figure, Figure | None]]
    # N where the aggregate stopped scaling (stats/saturation.py), None: kept scaling
    saturation: int | None


def _errorbars(
    ax: Any, xs: Sequence[int], figs: Sequence[Figure], colour: str, label: str, style: str = "-"
) -> None:
    errs = [_err(*f) for f in figs]
    ax.errorbar(
        xs,
        [f[0] for f in figs],
        yerr=[[e[0] for e in errs], [e[1] for e in errs]],
        color=colour,
        linestyle=style,
        marker="o",
        markersize=3,
        capsize=2,
        elinewidth=0.8,
        linewidth=1.2,
        label=label,
    )


def _contention_lines(left: Any, right: Any, s: ContentionSeries, colour: str, alone: bool) -> None:
    ns = [p[0] for p in s.points]
    prefix = "" if alone else f"{s.label} · "  # one configuration: the section's heading names it
    _errorbars(left, ns, [p[1] for p in s.points], colour, f"{prefix}aggregate")
    _errorbars(left, ns, [p[2] for p in s.points], colour, f"{prefix}per client", "--")
    if s.saturation in ns:
        j = ns.index(s.saturation)
        left.plot(
            [ns[j]],
            [s.points[j][1][0]],
            marker="o",
            markersize=10,
            markerfacecolor="none",
            markeredgecolor=colour,
            markeredgewidth=1.5,
            linestyle="none",
        )
    lat = [(p[0], p[3]) for p in s.points if p[3] is not None]
    if lat:
        _errorbars(right, [n for n, _ in lat], [f for _, f in lat], colour, s.label)


def contention_chart(series: Sequence[ContentionSeries], unit: str) -> str:
    """Many clients, one backend: throughput against the number of clients (left; aggregate solid,
    per client dashed, the saturation point ringed) and the per-client p99 (right), 95% CI error
    bars."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.2))
    for i, s in enumerate(series):
        _contention_lines(left, right, s, PALETTE[i % len(PALETTE)], len(series) == 1)
    for ax in (left, right):
        ax.set_xlabel("clients sharing the backend")
        ax.set_xticks(sorted({p[0] for s in series for p in s.points}))
        ax.set_ylim(bottom=0)
    left.set_ylabel(f"{unit} (ringed: saturation)")
    right.set_ylabel("per-client p99 latency (µs)")
    _legend(left, fontsize=7, loc="upper left")
    return _svg(fig)


# Panels: (title, [(field, legend)], unit)
HOST_PANELS: tuple[tuple[str, tuple[tuple[str, str], ...], str], ...] = (
    ("CPU", (("cpu.usr_pct", "usr"), ("cpu.sys_pct", "sys"), ("cpu.iowait_pct", "iowait")), "%"),
    ("disk", (("disk.util_pct", "util %"), ("disk.await_ms", "await ms")), ""),
    ("memory used without cache", (("mem.used_mb", "used"),), "MiB"),
    (
        "KSM",
        (("ksm.pages_sharing", "pages sharing"), ("ksm.pages_shared", "pages shared")),
        "pages",
    ),
)


def host_panels(columns: Sequence[tuple[str, dict[str, list[tuple[float, float]]]]]) -> str:
    """Seed-002-style host view: one column per compared cell, one row per panel, time on x."""
    ncol = max(len(columns), 1)
    fig, axes = plt.subplots(
        len(HOST_PANELS),
        ncol,
        figsize=(3.6 * ncol, 1.7 * len(HOST_PANELS)),
        squeeze=False,
        sharex="col",
    )
    for c, (label, series) in enumerate(columns):
        for r, (title, fields, unit) in enumerate(HOST_PANELS):
            ax = axes[r][c]
            drawn = False
            for i, (name, legend) in enumerate(fields):
                pts = series.get(name)
                if pts:
                    ax.plot(
                        [t for t, _ in pts],
                        [v for _, v in pts],
                        label=legend,
                        color=PALETTE[i],
                        linewidth=1,
                    )
                    drawn = True
            if not drawn:
                ax.text(
                    0.5,
                    0.5,
                    "not sampled",
                    transform=ax.transAxes,
                    ha="center",
                    va="center",
                    color="#888",
                )
            else:
                _legend(ax, fontsize=7, loc="upper right")
            ax.set_ylim(bottom=0)
            if c == 0:
                ax.set_ylabel(f"{title}\n{unit}" if unit else title, fontsize=8)
            if r == 0:
                ax.set_title(label, fontsize=8)
            if r == len(HOST_PANELS) - 1:
                ax.set_xlabel("s")
    return _svg(fig)


# Seed 002's consolidation panels: (title, [(metric, legend suffix, line style)], unit). Each is
# drawn against the tile count, one colour per configuration.
CONSOLIDATION_PANELS: tuple[tuple[str, tuple[tuple[str, str, str], ...], str], ...] = (
    ("wall time per point", (("point.wall_s", "", "-"),), "s"),
    (
        "QEMU CPU (solid usr, dashed sys)",
        (("qemu.cpu_user_s", " usr", "-"), ("qemu.cpu_sys_s", " sys", "--")),
        "s",
    ),
    ("disk utilisation", (("host.disk_util_pct", "", "-"),), "%"),
    (
        "memory (solid without cache, dashed with)",
        (
            ("host.mem_used_peak_mb", " w/o cache", "-"),
            ("host.mem_with_cache_peak_mb", " w/ cache", "--"),
        ),
        "MiB",
    ),
)


def consolidation_chart(series: Sequence[tuple[str, dict[int, dict[str, float]]]]) -> str:
    """Seed-002-style panels against the number of tiles: wall time, QEMU CPU split, disk
    utilisation and memory, one line per configuration (`series`: label, tiles → metric → mean).
    Panels without data say so."""
    fig, axes = plt.subplots(1, len(CONSOLIDATION_PANELS), figsize=(11, 2.8))
    tiles = sorted({n for _label, host in series for n in host})
    for ax, (title, fields, unit) in zip(axes, CONSOLIDATION_PANELS, strict=True):
        drawn = False
        for i, (label, host) in enumerate(series):
            colour = PALETTE[i % len(PALETTE)]
            for metric, suffix, style in fields:
                pts = [(n, host[n][metric]) for n in sorted(host) if metric in host[n]]
                if pts:
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        style,
                        marker="o",
                        markersize=3,
                        color=colour,
                        label=f"{label}{suffix}" if ax is axes[0] or suffix else None,
                    )
                    drawn = True
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("tiles")
        ax.set_ylabel(unit)
        if tiles:
            ax.set_xticks(tiles)
        ax.set_ylim(bottom=0)
        if not drawn:
            ax.text(
                0.5,
                0.5,
                "not measured",
                transform=ax.transAxes,
                ha="center",
                va="center",
                color="#888888",
            )
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncols=min(len(labels), 3),
            fontsize=7,
            bbox_to_anchor=(0.5, -0.12),
        )
    fig.tight_layout()
    return _svg(fig)


@dataclass
class HistoryLine:
    """One workload's answer over a host's sweeps: (sweep number, the answer's figure as a ratio to
    the first)."""

    label: str
    points: list[tuple[int, float]]
    slower: list[int]  # sweeps the consecutive comparison flagged slower
    steps: list[int]  # sweeps a lasting step starts from


def history_chart(lines: Sequence[HistoryLine]) -> str:
    """A host's history: each workload's answer figure relative to its first sweep, the sweeps
    flagged slower marked ×, a dashed line where a lasting step starts."""
    fig, ax = plt.subplots(figsize=(7.5, 2.6))
    for i, line in enumerate(lines):
        colour = PALETTE[i % len(PALETTE)]
        xs, ys = [p[0] for p in line.points], [p[1] for p in line.points]
        ax.plot(xs, ys, marker="o", markersize=3, color=colour, label=line.label)
        at = dict(line.points)
        flagged = [x for x in line.slower if x in at]
        if flagged:
            ax.plot(flagged, [at[x] for x in flagged], "x", color="#b2182b", markersize=8)
        for x in line.steps:
            ax.axvline(x - 0.5, color=colour, linestyle="--", linewidth=1)
    ax.axhline(1.0, color="#888888", linewidth=0.8)
    ax.set_xlabel("sweep")
    ax.set_ylabel("answer's figure / first sweep")
    ax.xaxis.get_major_locator().set_params(integer=True)
    _legend(ax, fontsize=7, loc="best")
    fig.tight_layout()
    return _svg(fig)
