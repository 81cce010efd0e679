"""`iomatrix rank` and `iomatrix compare`: orderings with significance, from the store."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from iomatrix.domain import NA, NULL_BACKING, is_ceiling
from iomatrix.errors import UserError
from iomatrix.metrics import metric_info
from iomatrix.report.interference import run_interference
from iomatrix.report.keep import KeepOrder, keep_defaults
from iomatrix.report.objective import Objective, objective_metric
from iomatrix.report.per_backing import answer_backings, answer_groups, answered_on
from iomatrix.report.quality import ranked_samples
from iomatrix.report.query import CellWorkload, cell_workloads, sweep_info, unit_stops
from iomatrix.report.settle_time import run_seconds, settle_text
from iomatrix.roles import decided_at, plan_margins
from iomatrix.stats import (
    Change,
    Ranking,
    RatioCI,
    ScoreCI,
    compare_sweeps,
    rank,
    ratio_ci,
    weighted_mixed_ci,
    weighted_score_ci,
)
from iomatrix.stats.analysis_unit import CellUnit, cell_unit
from iomatrix.stats.decision import (
    DEFAULT_THRESHOLD,
    DEFAULT_TIE_BREAK,
    MORE_TIME,
    Decision,
    check_threshold,
    check_tie_break,
    decide,
)
from iomatrix.stats.equivalence import DEFAULT_MARGIN
from iomatrix.stats.interference import RunInterference
from iomatrix.stats.looks import DECISION_ALPHA
from iomatrix.stop_kinds import StopKind
from iomatrix.store import Store
from iomatrix.store.queries import RunBoot
from iomatrix.tiers import is_reference, tier_order
from iomatrix.workloads import preset

# Stops a ranking's notes call out: racing's eliminations explain a smaller n; limits say the data
# did not settle it. (Not noted: settled and converged, which are answers; baseline; a plug-in
# policy's other.)
NOTED_STOPS = frozenset(
    {
        StopKind.ELIMINATED,
        StopKind.EQUIVALENT,
        StopKind.UNRESOLVED,
        StopKind.BUDGET,
        StopKind.MAX_RUNS,
        StopKind.GAVE_UP,
    }
)


def primary_metric(workload: str) -> tuple[str, bool]:
    """The workload's primary metric and its direction (from the metric registry,
    iomatrix.metrics)."""
    w = preset(workload)
    name = w.primary_metric if w else "total.iops"
    return name, metric_info(name).higher_is_better


def run_rounds(store: Store, run_ids: Sequence[int]) -> dict[int, int]:
    """run id → round (schema 1: the attempt number stands in; ``Store.run_round_numbers``)."""
    return store.run_round_numbers(run_ids) if run_ids else {}


def run_boots(store: Store, run_ids: Sequence[int]) -> dict[int, RunBoot]:
    """run id → (boot id, position in the boot), for the runs that shared a guest boot (schema
    4)."""
    return store.run_boots(run_ids) if run_ids else {}


def run_values(store: Store, run_ids: Sequence[int], metric: str) -> dict[int, float]:
    """run id → the metric's value, for the runs that have it (a damaged value — negative, infinite,
    NaN — is left out, as in `query.cell_workloads`, which names it)."""
    return {
        rid: v
        for rid, v in store.run_metric_values(run_ids, metric).items()
        if math.isfinite(v) and v >= 0
    }


def baremetal_reference(
    cell: CellWorkload, candidates: Sequence[CellWorkload]
) -> CellWorkload | None:
    """The bare-metal cell with the same host-side semantics (every axis that applies to bare metal:
    cache, aio, backing, modifier), else the bare-metal cache=none cell on the same backing, else
    any bare-metal cell."""
    bms = [c for c in candidates if is_reference(c.axes["tier"]) and c.workload == cell.workload]
    for pick in (
        lambda c: all(v == cell.axes.get(a) for a, v in c.axes.items() if v != "-" and a != "tier"),
        lambda c: c.axes["cache"] == "none" and c.axes["backing"] == cell.axes["backing"],
        lambda c: True,
    ):
        found = [c for c in bms if pick(c)]
        if found:
            return found[0]
    return None


@dataclass
class WorkloadRanking:
    workload: str
    metric: str
    tier: str
    ranking: Ranking
    cells: dict[str, CellWorkload]
    to_baremetal: dict[str, RatioCI | None]
    ceiling: list[tuple[CellWorkload, float]]  # null-co cells and their mean
    accel: list[str]
    cold_apart: list[str]  # cells ranked on their warm runs: the first run differed significantly
    decision: Decision | None = None
    # label → flagged runs (id, why)
    disturbed: dict[str, list[tuple[int, RunInterference]]] | None = None
    stops: dict[str, dict[str, Any]] | None = None  # label → why the scheduler stopped repeating it
    replaced: dict[str, list[int]] | None = None  # label → disturbed runs a clean retry replaced
    # label → the analysis unit, for cells whose runs shared boots
    units: dict[str, CellUnit] | None = None
    # label → runs that missed the offered load (id → share)
    unreached: dict[str, dict[int, float]] | None = None
    # The answer this ranking stands for when a shared-storage sweep is answered per backing
    # ("rand-write-4k on iscsi at rtt=2ms": report/per_backing.py), else None; `workload` stays the
    # workload's own name.
    answer: str | None = None
    # What turns the decision's rounds still needed into minutes (report/settle_time.py): one run
    # of this workload in this sweep, set-up included, and the plan's time budget; None: unknown.
    seconds_per_run: float | None = None
    budget: str | None = None
    # label → (round, value) of what the blocked analysis compared (None: not blocked): what an
    # axis's main effect is computed from (report/axis_lines.py)
    series: dict[str, list[tuple[int, float]]] | None = None

    @property
    def title(self) -> str:
        """What the ranking is of, for a heading: the per-backing answer's name, else the
        workload's."""
        return self.answer or self.workload

    def notes(self) -> list[str]:
        """Lines a report prints under the table: the decision, unresolved pairs, disturbed runs."""
        out = []
        if self.decision is not None:
            out.append(self.statement())
        unresolved = self.ranking.unresolved
        if unresolved:
            shown = "; ".join(f"{a} vs {b}" for a, b in unresolved[:6])
            more = f" (+{len(unresolved) - 6} more)" if len(unresolved) > 6 else ""
            out.append(f"unresolved (not separated at the rule's level): {shown}{more}")
        out += self._level_notes()
        an = self.ranking.analysis
        if an is not None and an.round_share is not None:
            out.append(
                f"between-round share of the run-to-run variance: {an.round_share:.0%}"
                + ("" if an.p_rounds is None else f" (F-test p={an.p_rounds:.2g})")
            )
        return out + self._unit_notes() + self._run_notes()

    def _level_notes(self) -> list[str]:
        """Which test decides where the table's 95% interval against the best clears 1 but the
        rule did not separate the pair (issue 70: "0.41× (0.19–0.89)" in the table, "neither
        decided worse nor equivalent (within 5%)" below it): the rule's, at its look's level,
        stricter than 95% because the race looks at the data after every round (stats/looks.py); a
        95% interval read at every look would call a difference that is not there too often."""
        best = self.ranking.best
        d = self.decision
        clear = []
        for row in self.ranking.rows:
            r = row.ratio_to_best
            if row.rank is None or row.name == best or r is None or r.low is None:
                continue
            if r.high is None or (r.low <= 1 <= r.high):
                continue
            if d is not None:
                # the decision's own word: a contender it could not separate from the leader
                if row.name not in d.unresolved:
                    continue
            else:
                pair = next(
                    (c for c in self.ranking.comparisons if {c.a, c.b} == {row.name, best}), None
                )
                if pair is None or pair.significant:
                    continue
            clear.append(row.name)
        if not clear:
            return []
        return [
            f"the 95% interval of {', '.join(clear)} against the best clears 1, but the rule "
            "decides at its look's level, stricter than 95% because it looks after every round "
            "(a 95% interval read at every look would call differences that are not there): "
            "not told apart yet"
        ]

    def statement(self) -> str:
        """The decision's statement, its time still needed in minutes and the budget that would buy
        them where the sweep's pace is known (never a count of rounds: issue 71); "" without a
        decision."""
        d = self.decision
        if d is None:
            return ""
        if d.extra_rounds is None or MORE_TIME not in d.statement:
            return d.statement
        said = settle_text(
            d.extra_rounds,
            self.seconds_per_run,
            self.budget,
            cells=1 + len(d.unresolved),
            what="them",
        )
        return d.statement.replace(MORE_TIME, said) if said else d.statement

    def _unit_notes(self) -> list[str]:
        """A line per cell whose runs were analysed as boot means, and its cold first run."""
        out = []
        for label, cu in (self.units or {}).items():
            out.append(f"unit for {label}: {cu.describe()}")
            if cu.describe_first_run():
                out.append(
                    f"{cu.describe_first_run()} ({label}; reported apart, analysed with the runs)"
                )
        return out

    def _run_notes(self) -> list[str]:
        """Runs left out or flagged: disturbed, replaced by a retry, off their offered load, stopped
        early."""
        out = []
        for label, runs in (self.disturbed or {}).items():
            for rid, why in runs:
                out.append(f"disturbed run {rid} ({label}): {'; '.join(why.reasons)}")
        for label, rids in (self.replaced or {}).items():
            out.append(
                f"replaced by a clean retry, not analysed ({label}): run(s) "
                + ", ".join(map(str, rids))
            )
        for label, runs in (self.unreached or {}).items():
            shown = ", ".join(f"{rid} ({frac:.0%} of it)" for rid, frac in sorted(runs.items()))
            out.append(
                f"offered load not reached, {len(runs)} run(s) not ranked ({label}): "
                f"run(s) {shown}; their "
                "latency is not at the offered load (lower the workload's rate)"
            )
        for label, stop in (self.stops or {}).items():
            if stop["kind"] in NOTED_STOPS:
                out.append(
                    f"stopped after round {stop['round']} with {stop['ok_runs']} runs ({label}): "
                    f"{stop['reason']}"
                )
        return out


@dataclass(frozen=True)
class CellSamples:
    """What one cell contributes to its ranking."""

    # the analysed values: the runs (warm ones when the cold first run is set apart) or boot means
    values: list[float]
    rounds: list[int] | None  # the round of each value, for a blocked analysis; None without one
    cold_apart: bool  # the cold first run differed significantly and is left out
    unit: CellUnit | None  # the boot-means unit, when the cell's runs shared boots


def blocked_cell_samples(
    cell: CellWorkload,
    per_run: Mapping[int, tuple[int, float]],
    boots: Mapping[int, tuple[str, int | None]] | None,
) -> CellSamples:
    """The cell's values with their rounds, in round order, from ``per_run`` (run id → (round,
    value))."""
    points = sorted(
        ((rid, *per_run[rid]) for rid in cell.runs if rid in per_run), key=lambda p: p[1]
    )
    values, apart = ranked_samples([v for _, _, v in points])
    # the cold first run, when set apart, is the earliest
    points = points[len(points) - len(values) :]
    cu = boot_unit(points, boots)
    if cu is not None:
        return CellSamples(list(cu.values), list(cu.rounds), apart, cu)
    return CellSamples([v for _, _, v in points], [r for _, r, _ in points], apart, None)


def independent_cell_samples(
    cell: CellWorkload, metric: str, boots: Mapping[int, tuple[str, int | None]] | None
) -> CellSamples:
    """The cell's values of ``metric`` in run order, without rounds."""
    values, apart = ranked_samples(cell.samples[metric])
    all_values = cell.samples[metric]
    cu = None
    if len(cell.runs) == len(all_values):  # run ids line up with the values: the boots can be told
        kept = list(zip(cell.runs, all_values, strict=True))[len(all_values) - len(values) :]
        cu = boot_unit([(rid, i, v) for i, (rid, v) in enumerate(kept)], boots)
    return CellSamples(values if cu is None else list(cu.values), None, apart, cu)


def cell_samples(
    cell: CellWorkload,
    metric: str,
    per_run: Mapping[int, tuple[int, float]] | None,
    boots: Mapping[int, tuple[str, int | None]] | None,
) -> CellSamples:
    """Blocked by round with ``per_run``, else independent."""
    if per_run is not None:
        return blocked_cell_samples(cell, per_run, boots)
    return independent_cell_samples(cell, metric, boots)


def tier_cells(
    cws: Sequence[CellWorkload], workload: str, metric: str, tier: str | None
) -> tuple[list[CellWorkload], str, list[CellWorkload]] | None:
    """(the workload's cells with ``metric``, the tier to rank — by default the one closest to a
    real VM among theirs —, that tier's cells to rank: all but the null-backing ceiling); None when
    either list is empty."""
    mine = [c for c in cws if c.workload == workload and metric in c.samples]
    if not mine:
        return None
    if tier is None:
        tier = max({c.axes["tier"] for c in mine}, key=tier_order)
    ranked = [c for c in mine if c.axes["tier"] == tier and not is_ceiling(c.axes)]
    return (mine, tier, ranked) if ranked else None


def cell_stops(
    cells: Sequence[CellWorkload], stops: Mapping[tuple[int, str], dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """label → why the scheduler stopped repeating the cell, for the cells that have a stop. An
    elimination's reason names the cell it was eliminated against by its label, as every other line
    of the ranking does: the scheduler stored its unit key ("significantly worse than
    blocklayer/raw/off/writeback/threads/-/dir/none::rand-read-4k by 88%", a word a line could only
    cut), which stays in `against` and in the JSON of `results`."""
    label = {c.cell_key: c.label() for c in cells}
    out = {}
    for c in cells:
        if (stop := (stops or {}).get((c.cell_id, c.workload))) is None:
            continue
        # (by any ranked cell's key the reason holds: a stop stored before schema 8 has no
        # `against`, and its reason names the cell all the same)
        reason = stop["reason"]
        for key in sorted((k for k in label if k in reason), key=len, reverse=True):
            reason = reason.replace(f"{key}::{c.workload}", label[key]).replace(key, label[key])
        out[c.label()] = {**stop, "reason": reason} if reason != stop["reason"] else stop
    return out


def eliminations(
    cells: Sequence[CellWorkload], stopped: Mapping[str, dict[str, Any]]
) -> dict[str, str]:
    """label → the label of the cell the race eliminated it against, for the cells of ``cells``
    eliminated against another of them (a stop recorded before schema 8 has no reference: none)."""
    label = {c.cell_key: c.label() for c in cells}
    return {
        name: label[st["against"]]
        for name, st in stopped.items()
        if st["kind"] == StopKind.ELIMINATED and st.get("against") in label
    }


def disturbed_runs(
    cells: Sequence[CellWorkload], interference: Mapping[int, RunInterference] | None
) -> dict[str, list[tuple[int, RunInterference]]]:
    """label → its analysed runs flagged as disturbed (id, why), for the cells that have any."""
    out = {
        c.label(): [
            (rid, interference[rid])
            for rid in c.runs
            if interference and rid in interference and interference[rid].disturbed
        ]
        for c in cells
    }
    return {k: v for k, v in out.items() if v}


def ratios_to_baremetal(
    cells: Sequence[CellWorkload], candidates: Sequence[CellWorkload], metric: str
) -> dict[str, RatioCI | None]:
    """label → mean(cell)/mean(its bare-metal reference) with a Fieller CI; None without a reference
    of ≥ 2 runs or with fewer than 2 runs of the cell."""
    out: dict[str, RatioCI | None] = {}
    for c in cells:
        ref = baremetal_reference(c, candidates)
        if (
            ref is not None
            and metric in ref.samples
            and len(ref.samples[metric]) >= 2
            and len(c.samples[metric]) >= 2
        ):
            out[c.label()] = ratio_ci(c.samples[metric], ref.samples[metric])
        else:
            out[c.label()] = None
    return out


def replaced_runs(cells: Sequence[CellWorkload]) -> dict[str, list[int]]:
    """label → the ok runs a clean retry replaced (not analysed), for the cells that have any."""
    return {c.label(): c.replaced for c in cells if c.replaced}


def accelerators(cells: Sequence[CellWorkload]) -> list[str]:
    """The accelerators the cells' runs used (kvm, tcg, …), sorted."""
    return sorted({a for c in cells for a in c.accel})


def null_ceiling(
    cells: Sequence[CellWorkload], tier: str, metric: str
) -> list[tuple[CellWorkload, float]]:
    """The tier's ceiling cells with their mean: what the stack can do without a disk (a null iSCSI
    LUN, the protocol's own ceiling, first: it is the nearer one for a LUN's cells; then QEMU's
    null-co)."""
    found = [
        (c, sum(c.samples[metric]) / len(c.samples[metric]))
        for c in cells
        if is_ceiling(c.axes) and c.axes["tier"] == tier and c.samples.get(metric)
    ]
    return sorted(found, key=lambda cm: cm[0].axes["backing"] == NULL_BACKING)


def rank_workload(
    cws: list[CellWorkload],
    workload: str,
    metric: str | None,
    *,
    min_n: int = 3,
    max_noise: float = 0.10,
    alpha: float = DECISION_ALPHA,
    per_run: Mapping[int, tuple[int, float]] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    interference: Mapping[int, RunInterference] | None = None,
    tier: str | None = None,
    stops: Mapping[tuple[int, str], dict[str, Any]] | None = None,
    boots: Mapping[int, tuple[str, int | None]] | None = None,
    margin: float = DEFAULT_MARGIN,
    keep_order: KeepOrder = keep_defaults,
    seconds_per_run: float | None = None,
    budget: str | None = None,
) -> WorkloadRanking | None:
    """Rank one workload's cells of one tier (cells of different tiers measure different things and
    are never ranked against each other; by default the tier closest to a real VM that has results).
    ``per_run`` (run id → (round, value of ``metric``)) makes the analysis blocked by round; without
    it runs are independent samples. ``boots`` (run id → (boot id, position)) marks runs that shared
    a guest boot: such a cell's unit is chosen by ``stats.analysis_unit.cell_unit`` (boot means when
    the between-boot variance dominates, else the runs). ``margin``: the margin of practical
    equivalence; ``keep_order``: what an equivalent decision keeps (report/keep.py: the current
    configuration, the defaults). ``seconds_per_run``, ``budget``: the sweep's pace and the plan's
    time budget, which say the time still needed in minutes (WorkloadRanking.statement)."""
    metric = metric or primary_metric(workload)[0]
    found = tier_cells(cws, workload, metric, tier)
    if found is None:
        return None
    mine, tier, ranked = found
    samples = [(c.label(), cell_samples(c, metric, per_run, boots)) for c in ranked]
    groups = {label: cs.values for label, cs in samples}
    rounds = {label: cs.rounds or [] for label, cs in samples} if per_run is not None else None
    r = rank(
        groups,
        higher_is_better=metric_info(metric).higher_is_better,
        alpha=alpha,
        min_n=min_n,
        max_rel_half_width=max_noise,
        rounds=rounds,
    )
    stopped = cell_stops(ranked, stops)
    # A race that stopped contenders as not separable within the budget: "yet" would promise more
    # than it can.
    spent = any(st["kind"] == StopKind.UNRESOLVED for st in stopped.values())
    cells = {c.label(): c for c in ranked}
    kept = keep_order(ranked, cells[r.best]) if r.best in cells else []
    decision = decide(
        r,
        {c.label(): c.axes for c in ranked},
        groups,
        threshold=threshold,
        tie_break=tie_break,
        budget_spent=spent,
        margin=margin,
        keep=kept,
        eliminated=eliminations(ranked, stopped),
    )
    units = {label: cs.unit for label, cs in samples if cs.unit is not None}
    return WorkloadRanking(
        workload=workload,
        metric=metric,
        tier=tier,
        ranking=r,
        cells={c.label(): c for c in ranked},
        to_baremetal={} if is_reference(tier) else ratios_to_baremetal(ranked, cws, metric),
        ceiling=null_ceiling(mine, tier, metric),
        accel=accelerators(mine),
        cold_apart=[label for label, cs in samples if cs.cold_apart],
        decision=decision,
        disturbed=disturbed_runs(ranked, interference),
        stops=stopped,
        replaced=replaced_runs(ranked),
        units=units or None,
        unreached=unreached_runs(cws, workload, tier),
        seconds_per_run=seconds_per_run,
        budget=budget,
        series=None
        if rounds is None
        else {label: list(zip(rounds[label], groups[label], strict=False)) for label in rounds},
    )


def unreached_runs(
    cws: Sequence[CellWorkload], workload: str, tier: str
) -> dict[str, dict[int, float]] | None:
    """label → the runs of the workload's cells of ``tier`` that did not reach their offered load,
    or None."""
    out = {
        c.label(): dict(c.unreached)
        for c in cws
        if c.workload == workload and c.axes["tier"] == tier and c.unreached
    }
    return out or None


def boot_unit(
    points: Sequence[tuple[int, int, float]], boots: Mapping[int, tuple[str, int | None]] | None
) -> CellUnit | None:
    """The cell's analysis unit from its (run id, round, value) points, when some of its runs shared
    a boot."""
    if not boots or not any(rid in boots for rid, _, _ in points):
        return None
    cu = cell_unit([(*boots.get(rid, (None, None)), rnd, v) for rid, rnd, v in points])
    return cu if cu.shared else None


def workload_names(cws: Sequence[CellWorkload], sweep_id: int, workload: str | None) -> list[str]:
    """The sweep's workloads, or just `workload` (a one-line error when the sweep has none of
    it)."""
    names = sorted({c.workload for c in cws})
    if workload is None:
        return names
    if workload not in names:
        raise UserError(
            f"sweep {sweep_id} has no results for workload '{workload}'",
            hint=f"workloads in it: {', '.join(names) or 'none'}",
        )
    return [workload]


@dataclass
class SweepReading:
    """What ranking one sweep reads from the store, read once: a fleet answer ranks each host's
    sweep with and without its requirements (report/fleet.py), and the store is the same for both.
    Every map covers all of the sweep's runs; a ranking filters the cells (``keep``) and looks up
    only its own runs."""

    store: Store
    sweep_id: int
    cells: list[CellWorkload]
    blocked: bool
    rounds: dict[int, int]  # run id → round ({} when not blocked)
    interference: dict[int, RunInterference]
    stops: dict[tuple[int, str], dict[str, Any]]
    boots: dict[int, RunBoot]
    plan: dict[str, Any]
    # workload → seconds one of its runs cost in this sweep (settle_time.run_seconds)
    run_seconds: dict[str, float] = field(default_factory=dict)
    # (workload, metric) → run id → (round, value): what the blocked analysis pairs, read on first
    # use
    values: dict[tuple[str, str], dict[int, tuple[int, float]]] = field(default_factory=dict)

    def blocked_values(self, workload: str, metric: str) -> dict[int, tuple[int, float]]:
        """run id → (its round, its value of `metric`) of the workload's runs (every cell's: a
        ranking pairs only its cells' runs)."""
        key = (workload, metric)
        if key not in self.values:
            self.values[key] = _blocked_values(
                self.store, self.cells, workload, metric, self.rounds
            )
        return self.values[key]


def read_sweep(store: Store, sweep_id: int, blocked: bool = True) -> SweepReading:
    """Everything `rank_reading` needs of one sweep, from the store."""
    # once for both: the cells' runs and their stored interference verdicts
    runs = store.runs(sweep_id)
    info = sweep_info(store, sweep_id)
    cws = cell_workloads(store, sweep_id, runs)
    all_runs = [rid for c in cws for rid in c.runs]
    return SweepReading(
        store=store,
        sweep_id=sweep_id,
        cells=cws,
        blocked=blocked,
        rounds=run_rounds(store, all_runs) if blocked else {},
        interference=run_interference(store, sweep_id, all_runs, runs),
        stops=unit_stops(store, sweep_id),
        boots=run_boots(store, all_runs),
        plan=info["plan_definition"],
        run_seconds=sweep_run_seconds(store, sweep_id, info),
    )


def sweep_run_seconds(store: Store, sweep_id: int, info: Mapping[str, Any]) -> dict[str, float]:
    """Seconds one run of each workload cost in this sweep, its share of set-up included
    (settle_time.run_seconds): what turns a decision's rounds still needed into minutes."""
    runs = [(r.workload, r.wall_s) for r in store.run_listing(sweep_id) if r.status == "ok"]
    start, end = info.get("started_at"), info.get("finished_at")
    return run_seconds(runs, end - start if start and end else None)


def check_rank_options(
    metric: str | None, objective: Objective | None, threshold: float, tie_break: Sequence[str]
) -> None:
    """One-line errors for ranking options that cannot be used together or are out of range."""
    if metric is not None and objective is not None:
        raise UserError(
            "--metric and --objective both choose what to rank by", hint="give one of them"
        )
    check_threshold(threshold)
    check_tie_break(tie_break)


def rank_sweep(
    store: Store,
    sweep_id: int,
    workload: str | None,
    metric: str | None,
    *,
    min_n: int = 3,
    max_noise: float = 0.10,
    threshold: float = DEFAULT_THRESHOLD,
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    blocked: bool = True,
    objective: Objective | None = None,
    keep: Callable[[Mapping[str, str]], bool] | None = None,
) -> list[WorkloadRanking]:
    """Rank every workload of a sweep (blocked by round unless ``blocked`` is False), by ``metric``,
    else by what ``objective`` ranks each workload by (report/objective.py), else by each workload's
    primary metric. ``keep``: only the cells whose axes it accepts are ranked (a fleet's
    requirements, as one host's answer ranks only the cells meeting them). A sweep with a network
    backing is ranked in the groups `recommend` answers (per backing, RTT and client count:
    report/per_backing.py), each ranking named by its answer, so no table puts an iSCSI cell against
    an NFS one."""
    check_rank_options(metric, objective, threshold, tie_break)
    return rank_reading(
        read_sweep(store, sweep_id, blocked),
        workload,
        metric,
        min_n=min_n,
        max_noise=max_noise,
        threshold=threshold,
        tie_break=tie_break,
        objective=objective,
        keep=keep,
    )


def rank_reading(
    reading: SweepReading,
    workload: str | None,
    metric: str | None,
    *,
    min_n: int = 3,
    max_noise: float = 0.10,
    threshold: float = DEFAULT_THRESHOLD,
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    objective: Objective | None = None,
    keep: Callable[[Mapping[str, str]], bool] | None = None,
) -> list[WorkloadRanking]:
    """`rank_sweep` on a sweep already read (`read_sweep`): the same rankings, the store not read
    again."""
    check_rank_options(metric, objective, threshold, tie_break)
    cws = [c for c in reading.cells if keep is None or keep(c.axes)]
    names = workload_names(cws, reading.sweep_id, workload)
    backings = answer_backings(reading.plan)  # None: no network backing
    # a role's jobs at its margin, as recommend decides them
    default_margin, margins = plan_margins(reading.plan)
    out = []
    for w in names:
        theta, margin = decided_at(w, margins, default_margin, threshold)
        chosen = metric if objective is None else objective_metric(objective, w)
        m = chosen or primary_metric(w)[0]
        per_run = reading.blocked_values(w, m) if reading.blocked else None
        out += _rank_in_groups(
            cws,
            w,
            chosen,
            backings,
            min_n=min_n,
            max_noise=max_noise,
            per_run=per_run,
            threshold=theta,
            tie_break=tie_break,
            interference=reading.interference,
            stops=reading.stops,
            boots=reading.boots,
            margin=margin,
            seconds_per_run=reading.run_seconds.get(w),
            budget=reading.plan.get("time_budget"),
        )
    if not out:
        _refuse_nothing_ranked(reading.sweep_id, metric, objective)
    return out


def _blocked_values(
    store: Store, cws: list[CellWorkload], workload: str, metric: str, rounds: Mapping[int, int]
) -> dict[int, tuple[int, float]]:
    """run id → (its round, its value of `metric`) of the workload's runs: what the blocked analysis
    pairs."""
    ids = [rid for c in cws if c.workload == workload for rid in c.runs]
    return {
        rid: (rounds[rid], v) for rid, v in run_values(store, ids, metric).items() if rid in rounds
    }


def _refuse_nothing_ranked(sweep_id: int, metric: str | None, objective: Objective | None) -> None:
    """A one-line error when a metric or objective the user asked for ranked nothing (by the primary
    metrics, an empty ranking is an empty answer, not a mistake)."""
    if metric is not None:
        raise UserError(
            f"no results for metric '{metric}'",
            hint="see metric names with 'iomatrix results --metric all'",
        )
    if objective is not None:
        raise UserError(
            f"no results for the objective '{objective.value}' in sweep {sweep_id}",
            hint="cpu-per-io needs runs recorded by this version (the host sampler following "
            "the I/O "
            "path); p99-latency needs fio workloads",
        )


def _rank_in_groups(
    cws: list[CellWorkload],
    workload: str,
    metric: str | None,
    backings: Sequence[str] | None,
    **rank_kw: Any,
) -> list[WorkloadRanking]:
    """One workload's rankings: one per tier, reference (bare metal) first (each tier answers for
    what it measures), and per answer group where the sweep is answered per backing."""
    out = []
    groups = answer_groups(cws, workload, backings)
    for tier in sorted({c.axes["tier"] for c in cws if c.workload == workload}, key=tier_order):
        own = [
            frozenset(c.cell_id for c in mine if c.workload == workload and c.axes["tier"] == tier)
            for _, mine in groups
        ]
        for i, ((answer, mine), ids) in enumerate(zip(groups, own, strict=True)):
            # none of the tier's cells, or ranked already
            if (answer is not None and not ids) or ids in own[:i]:
                continue
            if answer is not None and own.count(ids) > 1:
                # The same cells in every RTT or client-count group (the server-side baseline has
                # neither): one ranking, named by the backing alone
                answer = answered_on(
                    workload, next(c.axes["backing"] for c in mine if c.cell_id in ids)
                )
            wr = rank_workload(mine, workload, metric, tier=tier, **rank_kw)
            if wr is not None:
                out.append(replace(wr, answer=answer))
    return out


# -- weighted read/write scores (sequential and 4 KiB random weighed equally) -------------------

SCORE_INPUTS = {
    "weighted-read": ("seq-read-1m", "rand-read-4k", "read.bw_mbps"),
    "weighted-write": ("seq-write-1m", "rand-write-4k", "write.bw_mbps"),
}


@dataclass
class ScoreRow:
    label: str
    score: ScoreCI
    parts: dict[str, ScoreCI]


def weighted_scores(
    store: Store, sweep_id: int, score: str
) -> tuple[list[ScoreRow], dict[str, float]]:
    """Mean of the sequential figure and the 4 KiB random figure × factor, where the factor
    (bare-metal sequential / bare-metal 4 KiB random) makes 4 KiB matter as much as sequential."""
    if score not in (*SCORE_INPUTS, "weighted-mixed"):
        raise UserError(
            f"unknown score '{score}'", hint="use weighted-read, weighted-write or weighted-mixed"
        )
    parts = list(SCORE_INPUTS) if score == "weighted-mixed" else [score]
    cws = cell_workloads(store, sweep_id)
    factors: dict[str, float] = {}
    per_part: dict[str, dict[str, ScoreCI]] = {}
    for part in parts:
        factors[part], per_part[part] = _part_scores(score, part, cws)
    labels = set.intersection(*(set(v) for v in per_part.values())) if per_part else set()
    rows = []
    for label in labels:
        ps = {p: per_part[p][label] for p in parts}
        total = ps[parts[0]] if len(parts) == 1 else weighted_mixed_ci(ps[parts[0]], ps[parts[1]])
        rows.append(ScoreRow(label, total, ps))
    rows.sort(key=lambda r: -r.score.score)
    return rows, factors


def _part_scores(
    score: str, part: str, cws: list[CellWorkload]
) -> tuple[float, dict[str, ScoreCI]]:
    """(the bare-metal factor, every cell's score) of one part of a weighted score (weighted-read or
    -write)."""
    seq_w, rand_w, metric = SCORE_INPUTS[part]
    bm = {
        c.workload: c
        for c in cws
        if is_reference(c.axes["tier"]) and c.axes["cache"] in ("none", NA) and metric in c.samples
    }
    if seq_w not in bm or rand_w not in bm:
        raise UserError(
            f"{score} needs bare-metal results for {seq_w} and {rand_w}",
            hint="run a plan with tier baremetal and those workloads (e.g. 'block-size-sweep')",
        )
    bm_seq = sum(bm[seq_w].samples[metric]) / len(bm[seq_w].samples[metric])
    bm_rand = sum(bm[rand_w].samples[metric]) / len(bm[rand_w].samples[metric])
    by_cell: dict[str, dict[str, CellWorkload]] = {}
    for c in cws:
        if not is_reference(c.axes["tier"]) and not is_ceiling(c.axes) and metric in c.samples:
            by_cell.setdefault(c.label(), {})[c.workload] = c
    return bm_seq / bm_rand, {
        label: weighted_score_ci(
            ws[seq_w].samples[metric], ws[rand_w].samples[metric], bm_seq, bm_rand
        )
        for label, ws in by_cell.items()
        if seq_w in ws and rand_w in ws
    }


# -- two sweeps ----------------------------------------------------------------------------------


def figure_series(store: Store, sid: int, metric: str | None) -> dict[str, list[float]]:
    """A sweep's figures as `compare` pairs them: 'cell · workload · metric' → that metric's samples
    (`metric`, or each workload's primary one)."""
    out = {}
    for c in cell_workloads(store, sid):
        m = metric or primary_metric(c.workload)[0]
        if m in c.samples:
            out[f"{c.label()} · {c.workload} · {m}"] = c.samples[m]
    return out


def compare_stores(
    a: Store, sweep_a: int, b: Store, sweep_b: int, metric: str | None
) -> list[Change]:
    return compare_series(figure_series(a, sweep_a, metric), figure_series(b, sweep_b, metric))


def compare_series(sa: dict[str, list[float]], sb: dict[str, list[float]]) -> list[Change]:
    """The changes between the figures two sweeps share with ≥ 2 runs each (figure_series)."""
    common = {k: v for k, v in sa.items() if k in sb and len(v) >= 2 and len(sb[k]) >= 2}
    if not common:
        raise UserError(
            "the two sweeps share no cell × workload with ≥ 2 runs each",
            hint="compare sweeps of the same plan (before/after, or two hosts)",
        )
    return compare_sweeps(common, {k: sb[k] for k in common})
