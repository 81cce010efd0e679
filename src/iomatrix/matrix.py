"""Expand a plan into matrix cells; prune what cannot run, with the reason.

Axes that do not apply to a tier are collapsed (shown as "-"), not multiplied:
bare-metal fio has no image format or guest bus, so a plan with three formats
does not run the same bare-metal job three times.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from iomatrix import tiers
from iomatrix.domain import NA, NULL_BACKING, axes
from iomatrix.domain.axes import BackingFacts, QemuFacts
from iomatrix.domain.cell import Cell  # re-exported: the matrix's cells
from iomatrix.domain.workload import Workload
from iomatrix.plan.current_cell import CURRENT_PRUNED
from iomatrix.tiers import declaration

if TYPE_CHECKING:
    # a type only: a report completing stored cells (`complete`) does not load the plan model (its
    # pydantic models, every backing's spec)
    from iomatrix.plan.model import Plan


def from_key(key: str) -> Cell:
    """The cell of a key, completed as stored values are (`complete`). A block-device backing's name
    holds slashes (blockdev:/dev/loop0): the six axes before it and the modifier (with any later
    axes after it, "+axis=value") have none."""
    head = key.split("/", 6)
    if len(head) < 7 or "/" not in head[6]:
        raise ValueError(f"not a cell key: {key!r}")
    backing, tail = head[6].rsplit("/", 1)
    modifier, *later = tail.split("+")
    first = [a.name for a in axes.axes() if a.always_named]
    values = dict(zip(first, [*head[:6], backing, modifier], strict=True))
    for item in later:
        axis, sep, value = item.partition("=")
        if not sep or axis not in axes.names():
            raise ValueError(f"not a cell key: {key!r} (unknown axis setting {item!r})")
        values[axis] = value
    return complete(values)


def applying_axes(tier: str) -> tuple[str, ...]:
    """The axes that mean something for `tier` (the others collapse to "-")."""
    layers = declaration(tier).layers
    return tuple(a.name for a in axes.axes() if a.applies_to(layers))


def complete(values: Mapping[str, str]) -> Cell:
    """The cell of stored values: an axis the values do not name (recorded before it existed) reads
    as its default where it applies to the cell's tier, "-" elsewhere (and for the null ceiling,
    which has no disk configuration). A tier this release does not know leaves such axes "-"; a
    stored axis this release does not know (a test's demonstration axis) is left out."""
    filled = {a: v for a, v in values.items() if a in axes.names()}
    missing = [a for a in axes.names() if a not in filled]
    if missing:
        try:
            applying = set(applying_axes(filled.get("tier", NA)))
        except KeyError:
            applying = set()
        null = filled.get("backing") == NULL_BACKING
        for a in missing:
            filled[a] = axes.get(a).default if a in applying and not null else NA
    return Cell(filled)


@dataclass(frozen=True)
class Pruned:
    """A cell, or one workload of a cell, the rules keep out of the sweep. `what` is its store key
    (the sweep's record keeps it); `cell` and `workload` name it for a reader (`plan --explain`
    shows the settings, not the key)."""

    what: str  # a cell key, or "cell key × workload"
    reason: str
    cell: Cell
    workload: str | None = None


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
    # The user's current configuration (plan.current) as it runs in each tier: a cell of its own, or
    # the matrix's own cell where they are the same (current_cells; the pruned ones are in `pruned`,
    # with the reason).
    current: list[Cell] = field(default_factory=list)


def collapsed_axes(tier: str) -> tuple[str, ...]:
    """Axes with no meaning for `tier`: shown as "-", not multiplied."""
    applies = applying_axes(tier)
    return tuple(a for a in axes.names() if a not in applies)


def prune_reason(
    cell: Cell,
    backing: BackingFacts | None,
    qemu: QemuFacts | None = None,
    host_cpus: int | None = None,
) -> str | None:
    """Why `cell` cannot run, or None: the domain's rules between axes, then the tier's own. `qemu`
    and `host_cpus` are the installed QEMU's facts and the host's CPU count (None: rules needing
    them skip)."""
    tier = declaration(cell.tier)
    if cell.is_null_ceiling:
        return tier.prune_reason(cell, backing)
    if backing is not None and backing.unavailable:
        return f"backing {cell.backing} is unavailable here: {backing.unavailable}"
    ctx = axes.RuleContext(backing, cell.backing, qemu=qemu, host_cpus=host_cpus)
    return axes.prune_reason(cell, ctx) or tier.prune_reason(cell, backing)


def workload_prune_reason(cell: Cell, workload: Workload) -> str | None:
    return tiers.workload_prune_reason(cell, workload)


def _named_collapsed(plan: Plan, tier: str) -> tuple[str, ...]:
    """The axes collapsed for `tier` worth telling: the first release's, and later ones the plan
    names away from their default (a plan that does not name a later axis is told what it was told
    before the axis existed)."""
    return tuple(
        a
        for a in collapsed_axes(tier)
        if axes.get(a).always_named or plan.axis_values(a) != [axes.get(a).default]
    )


class PlanValues:
    """What the matrix reads of a plan's axes, read from the plan once per tier (and per workload
    with a workload table there) rather than per cell or unit: the values each axis sweeps
    (Plan.axis_values), and the one value a workload that cannot show an axis runs it at. An
    expansion's work is then linear in its cells and units (issue 68: a 14,040-unit plan)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._values: dict[tuple[str, str | None], dict[str, list[str]]] = {}
        self._kept: dict[tuple[str, str], dict[str, str]] = {}

    def values(self, tier: str, workload: str | None = None) -> dict[str, list[str]]:
        """Axis → the values `tier` sweeps (for `workload`: its workload table's in their place)."""
        key = (tier, workload)
        if key not in self._values:
            self._values[key] = {
                a: self.plan.axis_values(a, tier, workload) for a in axes.names() if a != "tier"
            }
        return self._values[key]

    def kept(self, tier: str, workload: str) -> dict[str, str]:
        """Per axis, the one value a workload that cannot show the axis runs with: the axis's
        default where `tier` sweeps it for the workload, else the first value it lists."""
        key = (tier, workload)
        if key not in self._kept:
            values = self.values(tier, workload)
            self._kept[key] = {
                a.name: a.default if a.default in values[a.name] else values[a.name][0]
                for a in axes.plan_axes()
            }
        return self._kept[key]


def tier_product(
    plan: Plan, tier: str, workload: str | None = None, values: PlanValues | None = None
) -> Iterator[Cell]:
    """The cells of one tier of `plan`: the product of the values the tier sweeps (the plan's, its
    tier table's in their place: Plan.axis_values(axis, tier)), with the axes that do not apply to
    it collapsed to "-" (one value, not multiplied). In the order of the full product with the tier
    first, so a plan without tier tables expands exactly as it did when the matrix was one product
    over every axis. With `workload`: the cells that workload runs in the tier (its workload table's
    values in the tier's place)."""
    collapsed = set(collapsed_axes(tier))
    swept = (values or PlanValues(plan)).values(tier, workload)
    product = {
        a: [tier] if a == "tier" else [NA] if a in collapsed else swept[a] for a in axes.names()
    }
    for combo in itertools.product(*product.values()):
        yield Cell(dict(zip(product, combo, strict=True)))


def _tier_groups(
    values: PlanValues, tier: str, runs: list[Workload]
) -> list[tuple[Iterator[Cell], list[Workload]]]:
    """The tier's cells and the workloads each product of them runs: the tier's product for the
    workloads without a workload table (the tier's product alone when it has no workloads), and each
    tabled workload's own."""
    plan = values.plan
    tables = plan.workload_tables.get(tier, {})
    shared = [w for w in runs if w.name not in tables]
    groups = [(tier_product(plan, tier, values=values), shared)] if shared or not runs else []
    return groups + [
        (tier_product(plan, tier, w.name, values), [w]) for w in runs if w.name in tables
    ]


def expand(
    plan: Plan,
    backings: Mapping[str, BackingFacts],
    workloads: list[Workload],
    qemu: QemuFacts | None = None,
    tier_workloads: Mapping[str, list[Workload]] | None = None,
) -> Expansion:
    """All cells of `plan`, per tier (tier_product), with pruned cells and reasons. `qemu`: the
    installed QEMU's facts (iomatrix.qemu_caps), for the rules that need them. `workloads` run on
    every tier, except a tier in `tier_workloads` (its tier table's own workloads), which runs those
    instead; a workload with a workload table in a tier runs on that table's cells there (a cell of
    several products runs each one's workloads).

    A unit (cell × workload) is pruned where the tier cannot run the workload, or where the workload
    cannot show an axis the cell sets (Axis.shown_by: zero detection with random data): the workload
    then runs with that axis at one value only (the default where the cell's tier sweeps it, else
    the first it lists), not multiplied by values it cannot tell apart. The user's current
    configuration runs every workload of its tier."""
    host_cpus = os.cpu_count()

    def reason_of(c: Cell) -> str | None:
        return prune_reason(c, backings.get(c.backing), qemu, host_cpus)

    tier_runs = {t: list((tier_workloads or {}).get(t, workloads)) for t in plan.tier}
    values = PlanValues(plan)
    products = _checked_products(values, tier_runs, reason_of)
    cells, pruned = products.cells, products.pruned
    current = _add_current(plan, cells, pruned, products.seen, reason_of)
    for tier_name in plan.tier:
        cells.extend(Cell(extra) for extra in declaration(tier_name).extra_cells(plan))
    units, unit_pruned = _units(
        cells,
        values=values,
        tier_runs=tier_runs,
        workloads=workloads,
        backings=backings,
        runs_of=products.runs_of,
        current=set(current),
    )
    return Expansion(
        cells=cells,
        units=units,
        pruned=list(pruned.values()) + unit_pruned,
        collapsed={t: shown for t in plan.tier if (shown := _named_collapsed(plan, t))},
        notes=axes.notes(cells),
        current=current,
    )


@dataclass
class _Products:
    """The tiers' products checked against the rules: the running cells in order, the pruned ones
    by key with their reasons, every cell seen, and each running cell's workloads."""

    cells: list[Cell] = field(default_factory=list)
    pruned: dict[str, Pruned] = field(default_factory=dict)
    seen: set[Cell] = field(default_factory=set)
    runs_of: dict[Cell, list[Workload]] = field(default_factory=dict)


def _checked_products(
    values: PlanValues,
    tier_runs: Mapping[str, list[Workload]],
    reason_of: Callable[[Cell], str | None],
) -> _Products:
    """Every tier's products (_tier_groups), each cell checked once (a cell of several products
    runs each one's workloads)."""
    out = _Products()
    pruned_cells: set[Cell] = set()  # the cells of `pruned`, by value: a key is costly to build
    for tier_name in values.plan.tier:
        for product, group in _tier_groups(values, tier_name, tier_runs[tier_name]):
            for cell in product:
                if cell not in out.seen:
                    out.seen.add(cell)
                    if reason := reason_of(cell):
                        key = cell.key
                        out.pruned[key] = Pruned(key, reason, cell)
                        pruned_cells.add(cell)
                    else:
                        out.cells.append(cell)
                if cell not in pruned_cells:
                    mine = out.runs_of.setdefault(cell, [])
                    mine += [w for w in group if w not in mine]
    return out


def _units(
    cells: list[Cell],
    *,
    values: PlanValues,
    tier_runs: Mapping[str, list[Workload]],
    workloads: list[Workload],
    backings: Mapping[str, BackingFacts],
    runs_of: Mapping[Cell, list[Workload]],
    current: set[Cell],
) -> tuple[list[Unit], list[Pruned]]:
    """(the units that run, the units pruned with their reasons): each cell's workloads in its
    tier's order, where the tier runs them and the workload can show the axes the cell sets (the
    current configuration's cells run every workload of their tier)."""
    units: list[Unit] = []
    unit_pruned: list[Pruned] = []
    image_bytes = values.plan.image_size_bytes
    shapes = {w.name: w.shape for ws in [workloads, *tier_runs.values()] for w in ws}
    for cell in cells:
        everything = tier_runs.get(cell.tier, workloads)
        mine = everything if cell in current or cell not in runs_of else runs_of[cell]
        for w in (w for w in everything if w in mine):  # in the tier's order of workloads
            reason = workload_prune_reason(cell, w) or _own_image_reason(
                cell, w, backings.get(cell.backing)
            )
            if reason is None and cell not in current:
                reason = axes.unshown_reason(
                    cell,
                    shapes[w.name],
                    values.kept(cell.tier, w.name),
                    w.image_bytes or image_bytes,
                )
            if reason:
                unit_pruned.append(Pruned(f"{cell.key} × {w.name}", reason, cell, w.name))
            else:
                units.append(Unit(cell, w))
    return units, unit_pruned


def _own_image_reason(cell: Cell, w: Workload, backing: BackingFacts | None) -> str | None:
    """A workload on an image of its own size (Workload.image_bytes) cannot run where no image is
    created: a raw block device is the disk as it is."""
    if w.image_bytes is None or backing is None or not backing.is_device or cell.format != "raw":
        return None
    return (
        f"workload {w.name} runs on a thin image of its own ({w.image_bytes >> 30} GiB); "
        "a raw block device is "
        "used as it is, not created: run it on a directory backing or with format qcow2"
    )


def current_cells(plan: Plan) -> list[Cell]:
    """The plan's current configuration (plan.current: `run --current`) as a cell of each of its
    tiers, on each of its backings (where the VM's image lives is the plan's choice: the XML's path
    is not a backing), its axes collapsed for the tier as any cell's are. Empty for a plan without
    one."""
    if plan.current is None:
        return []
    values = plan.current.values()
    out: list[Cell] = []
    for tier in plan.tier:
        for backing in plan.axis_values("backing"):
            cell = Cell({**values, "tier": tier, "backing": backing}).replace(
                **{a: NA for a in collapsed_axes(tier)}
            )
            if cell not in out:
                out.append(cell)
    return out


def _add_current(
    plan: Plan,
    cells: list[Cell],
    pruned: dict[str, Pruned],
    seen: set[Cell],
    reason_of: Callable[[Cell], str | None],
) -> list[Cell]:
    """The current cells that run, added to `cells` unless the matrix has them already (then the
    matrix's cell is the current one, not a duplicate); one that cannot run is pruned by the same
    rules as any cell, its reason saying it is the current configuration."""
    running: list[Cell] = []
    for cell in current_cells(plan):
        if cell in seen:  # a cell of the matrix: run, or pruned for the same reason
            if cell.key in pruned:
                pruned[cell.key] = Pruned(cell.key, CURRENT_PRUNED + pruned[cell.key].reason, cell)
            else:
                running.append(cell)
            continue
        seen.add(cell)
        reason = reason_of(cell)
        if reason:
            pruned[cell.key] = Pruned(cell.key, CURRENT_PRUNED + reason, cell)
        else:
            cells.append(cell)
            running.append(cell)
    return running


# A filesystem job's length is set by its data, not by `runtime`: seconds per 256 MiB of `size`
# (mkfs, mount and populating the tree included), measured in guests under TCG on the development
# host (full-matrix-fs slices, docs/benchmarks-history.md, "Quiet-host re-measurement after the
# merges": fs-read 4.4–8.4 s, fs-write 6.0–9.8 s per run wall at 256 MiB), plus a fixed part.
FS_JOB_S_PER_256M = {"fs-read": 5.0, "fs-write": 6.0}
FS_JOB_FIXED_S = 0.5


def fs_job_estimate_s(kind: str, size_bytes: int) -> float:
    """Estimated seconds of one fs-read / fs-write run inside a booted guest."""
    return FS_JOB_FIXED_S + FS_JOB_S_PER_256M.get(kind, 6.0) * size_bytes / (256 << 20)


# A strided prefill (Workload.prefill_stride) allocates a cluster and an L2 table per write: about
# 500 such writes a second through the block layer at cache=none on this host
# (rand-read-4k-sparse-1t's 2048: ~4 s).
STRIDED_PREFILL_WRITES_PER_S = 500.0


def prefill_estimate_s(w: Workload) -> float:
    """Seconds of a workload's unmeasured strided prefill; 0 for any other (a region prefill is in
    the tier's overhead)."""
    if w.prefill_stride is None or w.image_bytes is None:
        return 0.0
    return -(-w.image_bytes // w.prefill_stride) / STRIDED_PREFILL_WRITES_PER_S


# A run of N > 1 clients on one network backing (tiers/contention.py) makes each client's disk on
# the server, starts its qemu-storage-daemon and fio server one after another, and stops them all
# at the end: seconds per client beyond a one-client run's own start-up. Derived, not measured
# alone: the ceph plan took 7.8 min with 1, 2 and 4 clients and 1.3 min with one (loaded host,
# docs/shared-storage.md), about 80 runs of 2 and 4 clients in the difference, 4.9 s a run against
# 1.5 s for one client: 3.4 s for 3 clients on average.
CONTENTION_CLIENT_S = 1.1


def contention_extra_s(cell: Cell) -> float:
    """Seconds a run of `cell` takes beyond a one-client run for its clients (0 for one client)."""
    clients = dict(cell).get("clients", NA)
    return CONTENTION_CLIENT_S * int(clients) if clients not in (NA, "1") else 0.0


def run_parts_s(
    plan: Plan, cell: Cell, workload: Workload, batching: bool = True
) -> tuple[float, float]:
    """One run's estimated seconds in two parts: (its time-based part: runtime, ramp, prefill;
    the tier's own work: a filesystem job, its start-up, or its share of a batch's beyond the
    shared start-up). Under TCG a slower host stretches the second part only (guest/pace.py)."""
    tier = declaration(cell.tier)
    timed = plan.runtime + plan.ramp + prefill_estimate_s(workload) + contention_extra_s(cell)
    work = 0.0
    if workload.guest_only:  # a filesystem job: the guest's work, whatever its runtime
        timed, work = 0.0, fs_job_estimate_s(workload.kind, plan.size_bytes)
    own_start_s, _, in_batch_s = tier.start_up_s(plan)
    # a round's runs of one cell share start-ups (guest boots)
    return timed, work + (in_batch_s if batching and tier.batches_runs else own_start_s)


def estimate_seconds(
    plan: Plan,
    expansion: Expansion,
    batching: bool = True,
    capped: bool = True,
    guest_pace: float = 1.0,
) -> tuple[float, float]:
    """The runs' seconds (with min repetitions, with max repetitions and a tier's precision_max,
    capped by the time budget unless `capped` is False). A tier that batches runs pays its start-up
    once per batch (one per cell and round, split at the tier's limit); `batching=False` estimates
    one start-up per run instead, for comparison. `guest_pace` scales the built-in guest's TCG work
    (its start-ups and filesystem jobs; guest/pace.py), 1.0 the reference host's. The one estimate
    users see is estimate.estimate_sweep's, which builds on this."""
    per_rep = 0.0
    # A tier with a precision_max may run its units up to that many times (after the race, within
    # the budget).
    precise_rep: dict[str, float] = {}
    per_cell: dict[Cell, int] = {}
    for u in expansion.units:
        tier = declaration(u.cell.tier)
        own = tier.estimate_run_s(plan, u.workload)
        # the tier knows better (e.g. a consolidation point: many guests at once)
        if own is not None:
            per_rep += own
            continue
        timed, work = run_parts_s(plan, u.cell, u.workload, batching)
        run_s = timed + (guest_pace if tier.paced_by_guest(plan) else 1.0) * work
        if batching and tier.batches_runs:
            per_cell[u.cell] = per_cell.get(u.cell, 0) + 1
        per_rep += run_s
        # (a batching tier's extra boots are not counted)
        if u.cell.tier in plan.repetitions.precision_max:
            precise_rep[u.cell.tier] = precise_rep.get(u.cell.tier, 0.0) + run_s
    for cell, n in per_cell.items():
        tier = declaration(cell.tier)
        # One boot holds `repetitions_per_boot` rounds of the cell's runs, split at the bus's disk
        # limit.
        per_boot = n * plan.start_rounds_per_boot
        boots = -(-per_boot // max(1, tier.max_batch(cell)))
        pace = guest_pace if tier.paced_by_guest(plan) else 1.0
        per_rep += boots * pace * tier.start_up_s(plan)[1] / plan.start_rounds_per_boot
    reps = plan.repetitions
    low = per_rep * reps.min
    extra = sum(t * (reps.precision_max[tier] - reps.max) for tier, t in precise_rep.items())
    most = per_rep * reps.max + extra
    high = max(low, min(most, plan.time_budget_s) if capped else most)
    return low, high
