"""The consolidation section of rank / recommend: per cache mode (and the other disk axes), how many
tiles stay within the slowdown bound, and the consolidation article's host view (wall time, CPU
split, disk, memory, KSM) per tile count. Reads the store through report.query; the statistics are
`stats.consolidation`."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from iomatrix.consolidation.roles import TIMED_ROLES
from iomatrix.consolidation.spec import SECTION, ConsolidationSpec, tiles_of
from iomatrix.report.query import CellWorkload, cell_workloads
from iomatrix.stats.consolidation import ConsolidationAnswer, consolidation_answer
from iomatrix.store import Store
from iomatrix.tiers import tier_workload, workload_owner

# Host-view columns per tile count: (metric, heading, decimals).
HOST_COLUMNS = (
    ("point.wall_s", "wall s", 1),
    ("qemu.cpu_user_s", "QEMU usr s", 1),
    ("qemu.cpu_sys_s", "QEMU sys s", 1),
    ("host.cpu_iowait_pct", "iowait %", 1),
    ("host.disk_util_pct", "disk util %", 1),
    ("host.disk_await_ms", "await ms", 2),
    ("host.mem_used_peak_mb", "mem w/o cache MiB", 0),
    ("host.mem_with_cache_peak_mb", "mem w/ cache MiB", 0),
    ("host.ksm_pages_sharing", "KSM sharing", 0),
)
TCG_NOTE = (
    "guests ran under TCG emulation: every guest's CPU is emulated on the host's cores, "
    "so this scaling "
    "is bound by emulation CPU, not by the disk or the cache mode; rerun on a KVM host "
    "for the I/O answer"
)


@dataclass
class ConsolidationGroup:
    label: str  # the cell's axes other than tier (cache=none format=qcow2 ...)
    answer: ConsolidationAnswer
    host: dict[int, dict[str, float]] = field(default_factory=dict)  # tiles -> metric -> mean
    failed: dict[int, int] = field(default_factory=dict)  # tiles -> failed points
    accel: list[str] = field(default_factory=list)


def slowdown_bound(store: Store, sweep_id: int) -> float:
    """The bound the sweep's plan asked for (the default when the plan has no consolidation
    table)."""
    s = store.sweep(sweep_id)
    try:
        plan = json.loads(s.plan_definition) if s is not None else {}
        spec = plan.get(SECTION) or {}
        return float(spec.get("slowdown_bound", ConsolidationSpec().slowdown_bound))
    except (TypeError, ValueError, AttributeError):
        return ConsolidationSpec().slowdown_bound


def _mean(xs: list[float]) -> float | None:
    vals = [x for x in xs if math.isfinite(x)]
    return sum(vals) / len(vals) if vals else None


def groups_from(
    cws: list[CellWorkload], bound: float, confidence: float = 0.95
) -> list[ConsolidationGroup]:
    """Group the consolidation tier's cell × workloads (its tile counts, on the tier that owns them)
    by cell, and answer each group."""
    by_cell: dict[str, list[tuple[int, CellWorkload]]] = defaultdict(list)
    for cw in cws:
        w = tier_workload(cw.workload)
        owner = workload_owner(w) if w is not None else None
        tiles = tiles_of(cw.workload)
        if (
            w is not None
            and tiles is not None
            and owner is not None
            and cw.axes.get("tier") == owner.name
        ):
            by_cell[cw.cell_key].append((tiles, cw))
    out: list[ConsolidationGroup] = []
    for _key, items in sorted(by_cell.items()):
        times: dict[int, dict[str, list[float]]] = {}
        host: dict[int, dict[str, float]] = {}
        failed: dict[int, int] = {}
        accel: list[str] = []
        for n, cw in sorted(items, key=lambda x: x[0]):
            times[n] = {
                role: list(cw.samples.get(f"role.{role}.seconds_max", []))
                for role in TIMED_ROLES
                if cw.samples.get(f"role.{role}.seconds_max")
            }
            host[n] = {
                m: v
                for m, _h, _d in HOST_COLUMNS
                if (v := _mean(cw.samples.get(m, []))) is not None
            }
            failed[n] = cw.failed
            accel += [a for a in cw.accel if a not in accel]
        label = items[0][1].label()
        out.append(
            ConsolidationGroup(
                label, consolidation_answer(times, bound, confidence), host, failed, accel
            )
        )
    return out


def consolidation_groups(store: Store, sweep_id: int) -> list[ConsolidationGroup]:
    return groups_from(cell_workloads(store, sweep_id), slowdown_bound(store, sweep_id))


def _fmt(x: float | None, decimals: int = 2) -> str:
    return "–" if x is None else f"{x:.{decimals}f}"


def consolidation_lines(groups: list[ConsolidationGroup]) -> list[str]:
    """Plain-text section (no markup): the answer per group, then the host view per tile count."""
    if not groups:
        return []
    bound = groups[0].answer.bound
    lines = [
        "",
        f"Consolidation: the most tiles whose roles stay within {bound:g}× their one-tile time "
        f"({int(groups[0].answer.confidence * 100)}% CI of the slowest tile's role time)",
    ]
    for g in groups:
        a = g.answer
        if a.answer is None:
            lines.append(f"  {g.label}: no answer ({'; '.join(a.notes)})")
            continue
        tested = max(a.tested) if a.tested else 1
        answer = f"{a.answer} tile{'s' if a.answer != 1 else ''}"
        if a.answer == tested and tested > 1:
            answer += " (all tested; the limit is higher)"
        est = "" if a.estimate == a.answer else f"; by point estimates {a.estimate}"
        lines.append(f"  {g.label}: {answer}{est}")
        for n in a.tested:
            if n == 1:
                continue
            w = a.worst(n)
            if w is None:
                lines.append(f"    {n} tiles: no successful point")
                continue
            ci = "" if w.low is None else f" [{_fmt(w.low)}–{_fmt(w.high)}]"
            lines.append(
                f"    {n} tiles: slowest role {w.role} ×{_fmt(w.ratio)}{ci} ({w.verdict}, n={w.n})"
            )
        for note in a.notes:
            lines.append(f"    note: {note}")
        header = "    tiles  " + "  ".join(h for _m, h, _d in HOST_COLUMNS) + "  failed"
        lines.append(header)
        for n in sorted(g.host):
            row = g.host[n]
            cells = [_fmt(row.get(m), d).rjust(len(h)) for m, h, d in HOST_COLUMNS]
            lines.append(
                f"    {str(n).rjust(5)}  "
                + "  ".join(cells)
                + f"  {str(g.failed.get(n, 0)).rjust(6)}"
            )
    if any("tcg" in a for g in groups for a in g.accel):
        lines.append(f"  note: {TCG_NOTE}")
    return lines


def html_section(store: Store, sweep_id: int, cws: list[CellWorkload]) -> dict[str, Any] | None:
    """The HTML report's consolidation section (the consolidation tier's report extra): the host
    view per tile count as a chart, and the text section; None when the sweep has no tile counts."""
    # matplotlib behind both (report.charts imports it at module level): `recommend` and `rank` load
    # this module through the tier's report companion, and a refused command must not write
    # matplotlib's font cache.
    from iomatrix.report import charts
    from iomatrix.report.html import short_labels

    groups = groups_from(cws, slowdown_bound(store, sweep_id))
    if not groups:
        return None
    # Legends name only the axes the configurations differ in (the cache mode, usually).
    short = short_labels([g.label for g in groups])[0]
    return {
        "title": "Consolidation",
        "svg": charts.consolidation_chart(list(zip(short, (g.host for g in groups), strict=True))),
        "svg_caption": "Per configuration against the number of tiles started together: wall "
        "time,\n"
        "QEMU CPU, disk utilisation, memory (means of the repeated points).",
        "lines": consolidation_lines(groups),
    }


def consolidation_json(groups: list[ConsolidationGroup]) -> list[dict[str, Any]]:
    return [
        {
            "cell": g.label,
            "bound": g.answer.bound,
            "max_tiles": g.answer.answer,
            "max_tiles_estimate": g.answer.estimate,
            "tested": g.answer.tested,
            "accel": g.accel,
            "notes": g.answer.notes,
            "slowdowns": [
                {
                    "role": s.role,
                    "tiles": s.tiles,
                    "ratio": s.ratio,
                    "ci_low": s.low,
                    "ci_high": s.high,
                    "n": s.n,
                    "verdict": s.verdict,
                }
                for s in g.answer.slowdowns
            ],
            "host": {str(n): v for n, v in g.host.items()},
            "failed": {str(n): v for n, v in g.failed.items()},
        }
        for g in groups
    ]


__all__ = [
    "ConsolidationGroup",
    "consolidation_groups",
    "consolidation_json",
    "consolidation_lines",
    "groups_from",
    "html_section",
    "slowdown_bound",
]
