"""How far a sweep's guest agrees with its block layer, cell by cell (issue 51): both orders side by
side, Kendall's τ between them and each cell's guest/block-layer ratio (stats/tier_agreement.py).

A guest cell and a block-layer cell are the same configuration when every axis the block layer names
agrees (the null-co ceiling, the transport alone, is left out); what only the guest has (its bus,
IOThreads, queues: the block layer records "-") groups the guest's cells, so each guest setting is
compared with the block layer apart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from iomatrix.domain import NULL_BACKING
from iomatrix.report.figures import ratio_text
from iomatrix.report.naming import cell_names
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import primary_metric
from iomatrix.stats.tier_agreement import CELLS_TO_TEST, TierAgreement, tier_agreement
from iomatrix.ui import fmt


@dataclass(frozen=True)
class Agreement:
    workload: str
    metric: str
    guest_setting: str  # what only the guest varies ("bus=virtio-blk"), "" when nothing
    result: TierAgreement
    names: dict[str, str]  # cell key → short name


def _shared_key(axes: dict[str, str], block_axes: set[str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((a, v) for a, v in axes.items() if a in block_axes))


def _guest_setting(axes: dict[str, str], named: set[str]) -> str:
    """What only the guest varies in this cell ("bus=virtio-blk"): the axes the block layer does not
    name."""
    return " ".join(
        f"{a}={v}" for a, v in sorted(axes.items()) if a not in named and a != "tier" and v != "-"
    )


def _label(axes: dict[str, str], named: set[str]) -> str:
    return " ".join(f"{a}={v}" for a, v in sorted(axes.items()) if a in named and v != "-")


def _one_setting(
    workload: str, own: str, pairs: list[tuple[CellWorkload, CellWorkload]], named: set[str]
) -> Agreement | None:
    metric, higher = primary_metric(workload)
    labels = {b.cell_key: _label(b.axes, named) for b, _ in pairs}
    short = cell_names(labels.values())
    result = tier_agreement(
        {b.cell_key: b.samples.get(metric, []) for b, _ in pairs},
        {b.cell_key: g.samples.get(metric, []) for b, g in pairs},
        higher,
    )
    if not result.cells:
        return None
    return Agreement(workload, metric, own, result, {k: short.of(v) for k, v in labels.items()})


def _workload_agreements(
    workload: str, block: list[CellWorkload], guest: list[CellWorkload]
) -> list[Agreement]:
    named = {a for cw in block for a, v in cw.axes.items() if v != "-" and a != "tier"}
    by_key = {_shared_key(cw.axes, named): cw for cw in block}
    settings: dict[str, list[tuple[CellWorkload, CellWorkload]]] = defaultdict(list)
    for g in guest:
        if (k := _shared_key(g.axes, named)) in by_key:
            settings[_guest_setting(g.axes, named)].append((by_key[k], g))
    found = [
        _one_setting(workload, own, pairs, named)
        for own, pairs in settings.items()
        if len(pairs) >= 2
    ]
    return [a for a in found if a is not None]


def agreements(cws: list[CellWorkload], base: str, vm: str) -> list[Agreement]:
    """Every workload × guest setting with at least two cells measured in both tiers: `base` (the
    block layer) and `vm` (a guest tier), named by the guest tier's report companion."""
    out: list[Agreement] = []
    for workload in dict.fromkeys(cw.workload for cw in cws):
        # the null-co ceiling is the transport alone, first in both tiers: not a configuration to
        # order
        mine = [
            cw
            for cw in cws
            if cw.workload == workload and cw.runs and cw.axes.get("backing") != NULL_BACKING
        ]
        block = [cw for cw in mine if cw.axes.get("tier") == base]
        guest = [cw for cw in mine if cw.axes.get("tier") == vm]
        if block and guest:
            out += _workload_agreements(workload, block, guest)
    return out


def _tau_line(r: TierAgreement) -> str:
    n = len(r.cells)
    if r.tau is None:
        return f"Kendall τ: not defined over these {n} cells (one tier measured them all alike)"
    p = "" if r.p_value is None else f", p = {r.p_value:.2f}"
    notes = ["the same order"] if r.tau == 1 else ["the reversed order"] if r.tau == -1 else []
    if not r.tested:
        notes.append(f"under {CELLS_TO_TEST} cells: a description, not a test")
    return f"Kendall τ {r.tau:+.2f} over {n} cells{p}" + (f" ({'; '.join(notes)})" if notes else "")


def agreement_lines(items: list[Agreement]) -> list[str]:
    """The section's text: per workload and guest setting, τ, then each cell's two ranks and its
    ratio."""
    lines: list[str] = []
    for item in items:
        heading = f"{item.workload} · {item.metric}" + (
            f" · guest {item.guest_setting}" if item.guest_setting else ""
        )
        width = max(len("cell"), *(len(item.names[c.cell]) for c in item.result.cells))
        lines += [
            heading,
            f"  {_tau_line(item.result)}",
            f"  {'cell':<{width}}  {'block layer':>11} rank  {'in guest':>9} rank"
            "  guest/block layer",
        ]
        for c in item.result.cells:
            lines.append(
                f"  {item.names[c.cell]:<{width}}  {fmt(c.a_mean):>11} {c.a_rank:>4}  "
                f"{fmt(c.b_mean):>9} {c.b_rank:>4}  {ratio_text(*c.ratio)}"
            )
        lines.append("")
    return lines[:-1]
