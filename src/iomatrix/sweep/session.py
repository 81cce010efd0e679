"""The records the parts of a sweep pass one another: the sweep's result, one run to start, one
session's walk through the scheduler's rounds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from iomatrix.matrix import Cell, Unit
from iomatrix.scheduler import Scheduler, Slot


@dataclass
class SweepResult:
    sweep_id: int
    # ok runs this session that the analysis uses (a run its clean retry replaced is not one)
    runs_done: int
    runs_failed: int
    not_converged: list[tuple[str, str]]  # (unit key, reason)
    gave_up: list[tuple[str, str]]
    accel: dict[str, str]
    resumed: bool
    interrupted: bool = False
    disturbed: int = 0  # ok runs the host disturbed (flagged in the store)
    retried: int = 0  # …of which were started again
    # …by cause (stats.interference.THRESHOLDS keys: a run flagged for several counts under each)
    disturbed_by: dict[str, int] = field(default_factory=dict)
    # ok runs that missed their offered load: not counted by racing nor ranked
    load_not_reached: int = 0
    # Units stopped because most of their runs missed the offered load: (unit key, reason)
    unreached_units: list[tuple[str, str]] = field(default_factory=list)
    # The time budget (a wall-clock limit, set-up included): the plan's, the sweep's wall clock at
    # its end (earlier sessions included) and this session's set-up (backings, lab servers,
    # tiers) within it; None before the session started.
    budget_s: float | None = None
    elapsed_s: float | None = None
    setup_s: float | None = None
    # Units the budget stopped before their minimum runs: (unit key, its cell's label, ok runs)
    short_of_minimum: list[tuple[str, str, int]] = field(default_factory=list)


class RunItem(NamedTuple):
    """One run to start: its unit, the unit's cell in the store, its place in the design, the run it
    retries."""

    unit: Unit  # a rate-of-maximum workload's with its rate set
    cell_id: int
    slot: Slot
    retry_of: int | None
    # where a rate-of-maximum workload's rate came from (rates.py)
    offered_load: dict[str, Any] | None = None


@dataclass
class Session:
    """One session's walk through the scheduler's rounds."""

    sweep_id: int
    sched: Scheduler
    units: dict[str, tuple[Unit, int]]  # unit key → (unit, cell id)
    # unit key → what it is batched by: its cell's key, or its own key (not batched)
    cell_of: dict[str, str]
    max_batch: dict[str, int]  # cell key → runs one batch of it may hold
    cells_order: dict[Cell, int]  # for "cell i of n"
    already: int  # ok runs of earlier sessions
    index: int  # runs started, earlier sessions' included (the progress display's count)
    # (unit, round) → latest run id, for retries
    last_run: dict[tuple[str, int], int] = field(default_factory=dict)
    # seconds from the session's start to its first run: backings (lab servers), tiers, --start-at
    setup_s: float = 0.0
