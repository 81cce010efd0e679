"""Expand a plan into matrix cells; prune what cannot run, with the reason.

Axes that do not apply to a tier are collapsed (shown as "-"), not multiplied:
bare-metal fio has no image format or guest bus, so a plan with three formats
does not run the same bare-metal job three times.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from iomatrix.plan.model import AXES, Plan
from iomatrix.workloads import Workload

NA = "-"

# Axes with no meaning for a tier.
COLLAPSED: dict[str, tuple[str, ...]] = {
    "baremetal": ("format", "preallocation", "bus"),
    "blocklayer": ("bus",),
    "guest": (),
}

IMPLEMENTED_TIERS = ("baremetal", "guest")

PREALLOCATION_SUPPORT = {
    "raw": ("off", "falloc", "full"),
    "qcow2": ("off", "metadata", "falloc", "full"),
    "qed": ("off",),
}

DIRECT_CACHES = ("none", "directsync")
NULL_BACKING = "null"


@dataclass(frozen=True, order=True)
class Cell:
    tier: str
    format: str
    preallocation: str
    cache: str
    aio: str
    bus: str
    backing: str
    modifier: str

    @property
    def key(self) -> str:
        return "/".join(getattr(self, a) for a in AXES)

    @property
    def is_null_ceiling(self) -> bool:
        return self.backing == NULL_BACKING

    def label(self) -> str:
        """Short human label: only the axes that apply."""
        parts = [f"{a}={getattr(self, a)}" for a in AXES if getattr(self, a) != NA]
        return " ".join(parts)

    @classmethod
    def from_key(cls, key: str) -> Cell:
        return cls(*key.split("/"))


@dataclass(frozen=True)
class Pruned:
    what: str  # a cell key, or "cell key × workload"
    reason: str


@dataclass(frozen=True)
class Unit:
    """One cell × workload: the thing that is repeated."""

    cell: Cell
    workload: Workload

    @property
    def key(self) -> str:
        return f"{self.cell.key}::{self.workload.name}"


@dataclass
class Expansion:
    cells: list[Cell]
    units: list[Unit]
    pruned: list[Pruned] = field(default_factory=list)
    collapsed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BackingFacts:
    """What the matrix needs to know of a backing on this host."""

    unavailable: str | None  # reason it cannot run here, or None
    o_direct: bool
    is_device: bool


def prune_reason(cell: Cell, backing: BackingFacts | None) -> str | None:
    """Why `cell` cannot run, or None. Pure: every rule lives here."""
    if cell.tier not in IMPLEMENTED_TIERS:
        return (f"tier '{cell.tier}' (qemu-img bench / qemu-storage-daemon) is not implemented in this "
                "version; use tier 'baremetal' or 'guest'")
    if cell.is_null_ceiling:
        return None
    if backing is not None and backing.unavailable:
        return f"backing {cell.backing} is unavailable here: {backing.unavailable}"
    if cell.aio == "native" and cell.cache not in DIRECT_CACHES:
        return (f"aio=native needs O_DIRECT (cache none or directsync); cache={cell.cache} would make QEMU "
                "refuse to open the image ('aio=native was specified, but it requires cache.direct=on')")
    if backing is not None and not backing.o_direct and cell.cache in DIRECT_CACHES:
        return (f"cache={cell.cache} opens with O_DIRECT, which backing {cell.backing} does not support "
                "(tmpfs and ZFS datasets refuse O_DIRECT)")
    if cell.format != NA and cell.preallocation != NA:
        allowed = PREALLOCATION_SUPPORT[cell.format]
        if cell.preallocation not in allowed:
            return (f"format {cell.format} does not support preallocation={cell.preallocation} "
                    f"(it supports: {', '.join(allowed)})")
        if backing is not None and backing.is_device and cell.preallocation in ("falloc", "full"):
            return (f"preallocation={cell.preallocation} preallocates an image file; backing {cell.backing} is a "
                    "whole block device")
    if cell.modifier == "eatmydata" and cell.cache == "unsafe":
        return "cache=unsafe already drops every flush; eatmydata would change nothing"
    return None


def workload_prune_reason(cell: Cell, workload: Workload) -> str | None:
    if workload.guest_only and cell.tier != "guest":
        return f"workload {workload.name} runs on a guest filesystem: guest tier only"
    if workload.guest_only and cell.is_null_ceiling:
        return "the null ceiling has no data to hold a filesystem"
    return None


def _null_ceiling_cells(plan: Plan) -> list[Cell]:
    # One per bus: null-co has no format, preallocation, host cache or backing;
    # what is left is the emulated device and QEMU's block layer.
    return [Cell("guest", "null", NA, NA, NA, bus, NULL_BACKING, "none") for bus in plan.bus]


def expand(plan: Plan, backings: Mapping[str, BackingFacts], workloads: list[Workload]) -> Expansion:
    """All cells of `plan`, deduplicated after collapsing, with pruned cells and reasons."""
    axis_values = {a: [b.label() for b in plan.backing] if a == "backing" else getattr(plan, a) for a in AXES}
    cells: list[Cell] = []
    pruned: dict[str, Pruned] = {}
    seen: set[Cell] = set()
    for combo in itertools.product(*(axis_values[a] for a in AXES)):
        cell = Cell(*combo)
        collapse = COLLAPSED.get(cell.tier, ())
        cell = replace(cell, **{a: NA for a in collapse})
        if cell in seen:
            continue
        seen.add(cell)
        reason = prune_reason(cell, backings.get(cell.backing))
        if reason:
            pruned[cell.key] = Pruned(cell.key, reason)
        else:
            cells.append(cell)
    if "guest" in plan.tier and plan.null_ceiling:
        cells.extend(_null_ceiling_cells(plan))
    units: list[Unit] = []
    unit_pruned: list[Pruned] = []
    for cell in cells:
        for w in workloads:
            reason = workload_prune_reason(cell, w)
            if reason:
                unit_pruned.append(Pruned(f"{cell.key} × {w.name}", reason))
            else:
                units.append(Unit(cell, w))
    notes = []
    if any(c.modifier == "eatmydata" and c.aio == "io_uring" for c in cells):
        notes.append("eatmydata does not intercept flushes sent through io_uring: cells with aio=io_uring "
                     "still flush under eatmydata")
    return Expansion(
        cells=cells,
        units=units,
        pruned=list(pruned.values()) + unit_pruned,
        collapsed={t: COLLAPSED.get(t, ()) for t in plan.tier if COLLAPSED.get(t)},
        notes=notes,
    )


# Rough per-run overhead (seconds) beyond the workload's runtime, for the
# estimate only: bare-metal fio start + prefill; guest boot under TCG.
OVERHEAD_S = {"baremetal": 1.5, "guest": 4.5}


def estimate_seconds(plan: Plan, expansion: Expansion) -> tuple[float, float]:
    """(with min repetitions, with max repetitions capped by the time budget)."""
    per_rep = 0.0
    for u in expansion.units:
        runtime = 20.0 if u.workload.guest_only else plan.runtime + plan.ramp
        per_rep += runtime + OVERHEAD_S.get(u.cell.tier, 2.0)
    low = per_rep * plan.repetitions.min
    high = max(low, min(per_rep * plan.repetitions.max, plan.time_budget_s))
    return low, high
