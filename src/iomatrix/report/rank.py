"""`iomatrix rank` and `iomatrix compare`: orderings with significance, from the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iomatrix.domain import NA, NULL_BACKING
from iomatrix.errors import UserError
from iomatrix.metrics import metric_info
from iomatrix.report.quality import ranked_samples, run_interference
from iomatrix.report.query import CellWorkload, cell_workloads, unit_stops
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
    Decision,
    check_threshold,
    check_tie_break,
    decide,
)
from iomatrix.stats.interference import RunInterference
from iomatrix.store import Store
from iomatrix.tiers import is_reference, tier_order
from iomatrix.workloads import PRESETS


def primary_metric(workload: str) -> tuple[str, bool]:
    """The workload's primary metric and its direction (from the metric registry, iomatrix.metrics)."""
    w = PRESETS.get(workload)
    name = w.primary_metric if w else "total.iops"
    return name, metric_info(name).higher_is_better


def run_rounds(store: Store, run_ids: Sequence[int]) -> dict[int, int]:
    """run id → round.  Schema 2 stores ``runs.round``; older stores have only the attempt number, which
    is the round for a sweep that ran uninterrupted (each round runs every unit once), so it stands in — also
    for the runs of a schema-1 file migrated since (their ``round`` is NULL)."""
    if not run_ids:
        return {}
    cols = {r[1] for r in store.db.execute("PRAGMA table_info(runs)")}
    col = "COALESCE(round, attempt)" if "round" in cols else "attempt"
    out: dict[int, int] = {}
    ids = list(run_ids)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        q = f"SELECT id, {col} FROM runs WHERE id IN ({','.join('?' * len(chunk))})"
        for rid, rnd in store.db.execute(q, chunk):
            if rnd is not None:
                out[int(rid)] = int(rnd)
    return out


def run_boots(store: Store, run_ids: Sequence[int]) -> dict[int, tuple[str, int | None]]:
    """run id → (boot id, position in the boot), for the runs that shared a guest boot (schema 4)."""
    cols = {r[1] for r in store.db.execute("PRAGMA table_info(runs)")}
    if "boot_id" not in cols or not run_ids:
        return {}
    out: dict[int, tuple[str, int | None]] = {}
    ids = list(run_ids)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        q = ("SELECT id, boot_id, boot_position FROM runs WHERE boot_id IS NOT NULL "
             f"AND id IN ({','.join('?' * len(chunk))})")
        for rid, boot, pos in store.db.execute(q, chunk):
            out[int(rid)] = (str(boot), None if pos is None else int(pos))
    return out


def run_values(store: Store, run_ids: Sequence[int], metric: str) -> dict[int, float]:
    """run id → the metric's value, for the runs that have it."""
    out: dict[int, float] = {}
    ids = list(run_ids)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        q = f"SELECT run_id, value FROM samples WHERE metric=? AND run_id IN ({','.join('?' * len(chunk))})"
        for rid, v in store.db.execute(q, [metric, *chunk]):
            out[int(rid)] = float(v)
    return out


def baremetal_reference(cell: CellWorkload, candidates: Sequence[CellWorkload]) -> CellWorkload | None:
    """The bare-metal cell with the same host-side semantics (every axis that applies to bare metal: cache, aio,
    backing, modifier), else the bare-metal cache=none cell on the same backing, else any bare-metal cell."""
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
    disturbed: dict[str, list[tuple[int, RunInterference]]] | None = None  # label → flagged runs (id, why)
    stops: dict[str, dict[str, Any]] | None = None  # label → why the scheduler stopped repeating it
    replaced: dict[str, list[int]] | None = None  # label → disturbed runs a clean retry replaced
    units: dict[str, CellUnit] | None = None  # label → the analysis unit, for cells whose runs shared boots

    def notes(self) -> list[str]:
        """Lines a report prints under the table: the decision, unresolved pairs, disturbed runs."""
        out = []
        if self.decision is not None:
            out.append(self.decision.statement)
        unresolved = self.ranking.unresolved
        if unresolved:
            shown = "; ".join(f"{a} vs {b}" for a, b in unresolved[:6])
            more = f" (+{len(unresolved) - 6} more)" if len(unresolved) > 6 else ""
            out.append(f"unresolved (not significantly different): {shown}{more}")
        an = self.ranking.analysis
        if an is not None and an.round_share is not None:
            out.append(f"between-round share of the run-to-run variance: {an.round_share:.0%}"
                       + ("" if an.p_rounds is None else f" (F-test p={an.p_rounds:.2g})"))
        for label, cu in (self.units or {}).items():
            out.append(f"unit for {label}: {cu.describe()}")
            if cu.describe_first_run():
                out.append(f"{cu.describe_first_run()} ({label}; reported apart, analysed with the runs)")
        for label, runs in (self.disturbed or {}).items():
            for rid, why in runs:
                out.append(f"disturbed run {rid} ({label}): {'; '.join(why.reasons)}")
        for label, rids in (self.replaced or {}).items():
            out.append(f"replaced by a clean retry, not analysed ({label}): run(s) "
                       + ", ".join(map(str, rids)))
        for label, stop in (self.stops or {}).items():
            # Racing's eliminations explain a smaller n; limits say the data did not settle it.
            if stop["kind"] in ("eliminated", "equivalent", "unresolved", "budget", "max-runs", "gave-up"):
                out.append(f"stopped after round {stop['round']} with {stop['ok_runs']} runs ({label}): "
                           f"{stop['reason']}")
        return out


def rank_workload(cws: list[CellWorkload], workload: str, metric: str | None, *, min_n: int = 3,
                  max_noise: float = 0.10, alpha: float = 0.05,
                  per_run: Mapping[int, tuple[int, float]] | None = None,
                  threshold: float = DEFAULT_THRESHOLD, tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
                  interference: Mapping[int, RunInterference] | None = None,
                  tier: str | None = None,
                  stops: Mapping[tuple[int, str], dict[str, Any]] | None = None,
                  boots: Mapping[int, tuple[str, int | None]] | None = None) -> WorkloadRanking | None:
    """Rank one workload's cells of one tier (cells of different tiers measure different things and are
    never ranked against each other; by default the tier closest to a real VM that has results).
    ``per_run`` (run id → (round, value of ``metric``)) makes the analysis blocked by round; without it
    runs are independent samples. ``boots`` (run id → (boot id, position)) marks runs that shared a guest
    boot: such a cell's unit is chosen by ``stats.analysis_unit.cell_unit`` (boot means when the
    between-boot variance dominates, else the runs)."""
    m, _ = primary_metric(workload)
    metric = metric or m
    higher = metric_info(metric).higher_is_better
    mine = [c for c in cws if c.workload == workload and metric in c.samples]
    if not mine:
        return None
    if tier is None:
        tier = max({c.axes["tier"] for c in mine}, key=tier_order)
    ranked = [c for c in mine if c.axes["tier"] == tier and c.axes["backing"] != NULL_BACKING]
    if not ranked:
        return None
    groups: dict[str, list[float]] = {}
    rounds: dict[str, list[int]] | None = {} if per_run is not None else None
    cold_apart: list[str] = []
    units: dict[str, CellUnit] = {}
    for c in ranked:
        if per_run is not None and rounds is not None:
            rid_pts = sorted(((rid, *per_run[rid]) for rid in c.runs if rid in per_run), key=lambda p: p[1])
            values, apart = ranked_samples([v for _, _, v in rid_pts])
            rid_pts = rid_pts[len(rid_pts) - len(values):]  # the cold first run, when set apart, is the earliest
            groups[c.label()], rounds[c.label()] = [v for _, _, v in rid_pts], [r for _, r, _ in rid_pts]
            cu = boot_unit(rid_pts, boots)
            if cu is not None:
                units[c.label()] = cu
                groups[c.label()], rounds[c.label()] = list(cu.values), list(cu.rounds)
        else:
            groups[c.label()], apart = ranked_samples(c.samples[metric])
            all_values = c.samples[metric]
            if len(c.runs) == len(all_values):  # run ids line up with the values: the boots can be told
                kept = list(zip(c.runs, all_values, strict=True))[len(all_values) - len(groups[c.label()]):]
                cu = boot_unit([(rid, i, v) for i, (rid, v) in enumerate(kept)], boots)
                if cu is not None:
                    units[c.label()] = cu
                    groups[c.label()] = list(cu.values)
        if apart:
            cold_apart.append(c.label())
    r = rank(groups, higher_is_better=higher, alpha=alpha, min_n=min_n, max_rel_half_width=max_noise,
             rounds=rounds)
    stopped = {c.label(): (stops or {})[(c.cell_id, c.workload)] for c in ranked
               if (c.cell_id, c.workload) in (stops or {})}
    # A race that stopped contenders as not separable within the budget: "yet" would promise more than it can.
    spent = any(st["kind"] == "unresolved" for st in stopped.values())
    decision = decide(r, {c.label(): c.axes for c in ranked}, groups, threshold=threshold, tie_break=tie_break,
                      budget_spent=spent)
    disturbed = {c.label(): [(rid, interference[rid]) for rid in c.runs
                             if interference and rid in interference and interference[rid].disturbed]
                 for c in ranked}
    to_bm: dict[str, RatioCI | None] = {}
    if not is_reference(tier):
        for c in ranked:
            ref = baremetal_reference(c, cws)
            if ref is not None and metric in ref.samples and len(ref.samples[metric]) >= 2 \
                    and len(c.samples[metric]) >= 2:
                to_bm[c.label()] = ratio_ci(c.samples[metric], ref.samples[metric])
            else:
                to_bm[c.label()] = None
    ceiling = [(c, sum(c.samples[metric]) / len(c.samples[metric])) for c in mine
               if c.axes["backing"] == NULL_BACKING and c.axes["tier"] == tier]
    accel = sorted({a for c in mine for a in c.accel})
    return WorkloadRanking(workload, metric, tier, r, {c.label(): c for c in ranked}, to_bm, ceiling, accel,
                           cold_apart, decision, {k: v for k, v in disturbed.items() if v}, stopped,
                           {c.label(): c.replaced for c in ranked if c.replaced}, units or None)


def boot_unit(points: Sequence[tuple[int, int, float]],
               boots: Mapping[int, tuple[str, int | None]] | None) -> CellUnit | None:
    """The cell's analysis unit from its (run id, round, value) points, when some of its runs shared a boot."""
    if not boots or not any(rid in boots for rid, _, _ in points):
        return None
    cu = cell_unit([(*boots.get(rid, (None, None)), rnd, v) for rid, rnd, v in points])
    return cu if cu.shared else None


def workload_names(cws: Sequence[CellWorkload], sweep_id: int, workload: str | None) -> list[str]:
    """The sweep's workloads, or just `workload` (a one-line error when the sweep has none of it)."""
    names = sorted({c.workload for c in cws})
    if workload is None:
        return names
    if workload not in names:
        raise UserError(f"sweep {sweep_id} has no results for workload '{workload}'",
                        hint=f"workloads in it: {', '.join(names) or 'none'}")
    return [workload]


def rank_sweep(store: Store, sweep_id: int, workload: str | None, metric: str | None, *, min_n: int = 3,
               max_noise: float = 0.10, threshold: float = DEFAULT_THRESHOLD,
               tie_break: Sequence[str] = DEFAULT_TIE_BREAK, blocked: bool = True) -> list[WorkloadRanking]:
    """Rank every workload of a sweep (blocked by round unless ``blocked`` is False)."""
    check_threshold(threshold)
    check_tie_break(tie_break)
    cws = cell_workloads(store, sweep_id)
    names = workload_names(cws, sweep_id, workload)
    all_runs = [rid for c in cws for rid in c.runs]
    rounds = run_rounds(store, all_runs) if blocked else {}
    interference = run_interference(store, sweep_id, all_runs)
    stops = unit_stops(store, sweep_id)
    boots = run_boots(store, all_runs)
    out = []
    for w in names:
        m = metric or primary_metric(w)[0]
        per_run = None
        if blocked:
            ids = [rid for c in cws if c.workload == w for rid in c.runs]
            vals = run_values(store, ids, m)
            per_run = {rid: (rounds[rid], v) for rid, v in vals.items() if rid in rounds}
        # One ranking per tier, reference (bare metal) first: each tier answers for what it measures.
        for tier in sorted({c.axes["tier"] for c in cws if c.workload == w}, key=tier_order):
            wr = rank_workload(cws, w, metric, min_n=min_n, max_noise=max_noise, per_run=per_run,
                               threshold=threshold, tie_break=tie_break, interference=interference, tier=tier,
                               stops=stops, boots=boots)
            if wr is not None:
                out.append(wr)
    if metric is not None and not out:
        raise UserError(f"no results for metric '{metric}'", hint="see metric names with 'iomatrix results "
                        "--metric all'")
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


def weighted_scores(store: Store, sweep_id: int, score: str) -> tuple[list[ScoreRow], dict[str, float]]:
    """Mean of the sequential figure and the 4 KiB random figure × factor, where the factor
    (bare-metal sequential / bare-metal 4 KiB random) makes 4 KiB matter as much as sequential."""
    if score not in (*SCORE_INPUTS, "weighted-mixed"):
        raise UserError(f"unknown score '{score}'", hint="use weighted-read, weighted-write or weighted-mixed")
    parts = list(SCORE_INPUTS) if score == "weighted-mixed" else [score]
    cws = cell_workloads(store, sweep_id)
    factors: dict[str, float] = {}
    per_part: dict[str, dict[str, ScoreCI]] = {}
    for part in parts:
        seq_w, rand_w, metric = SCORE_INPUTS[part]
        bm = {c.workload: c for c in cws if is_reference(c.axes["tier"]) and c.axes["cache"] in ("none", NA)
              and metric in c.samples}
        if seq_w not in bm or rand_w not in bm:
            raise UserError(f"{score} needs bare-metal results for {seq_w} and {rand_w}",
                            hint="run a plan with tier baremetal and those workloads (e.g. 'block-size-sweep')")
        bm_seq = sum(bm[seq_w].samples[metric]) / len(bm[seq_w].samples[metric])
        bm_rand = sum(bm[rand_w].samples[metric]) / len(bm[rand_w].samples[metric])
        factors[part] = bm_seq / bm_rand
        by_cell: dict[str, dict[str, CellWorkload]] = {}
        for c in cws:
            if not is_reference(c.axes["tier"]) and c.axes["backing"] != NULL_BACKING and metric in c.samples:
                by_cell.setdefault(c.label(), {})[c.workload] = c
        per_part[part] = {
            label: weighted_score_ci(ws[seq_w].samples[metric], ws[rand_w].samples[metric], bm_seq, bm_rand)
            for label, ws in by_cell.items() if seq_w in ws and rand_w in ws
        }
    labels = set.intersection(*(set(v) for v in per_part.values())) if per_part else set()
    rows = []
    for label in labels:
        ps = {p: per_part[p][label] for p in parts}
        total = ps[parts[0]] if len(parts) == 1 else weighted_mixed_ci(ps[parts[0]], ps[parts[1]])
        rows.append(ScoreRow(label, total, ps))
    rows.sort(key=lambda r: -r.score.score)
    return rows, factors


# -- two sweeps ----------------------------------------------------------------------------------

def compare_stores(a: Store, sweep_a: int, b: Store, sweep_b: int, metric: str | None) -> list[Change]:
    def series(store: Store, sid: int) -> dict[str, list[float]]:
        out = {}
        for c in cell_workloads(store, sid):
            m = metric or primary_metric(c.workload)[0]
            if m in c.samples:
                out[f"{c.label()} · {c.workload} · {m}"] = c.samples[m]
        return out

    sa, sb = series(a, sweep_a), series(b, sweep_b)
    common = {k: v for k, v in sa.items() if k in sb and len(v) >= 2 and len(sb[k]) >= 2}
    if not common:
        raise UserError("the two sweeps share no cell × workload with ≥ 2 runs each",
                        hint="compare sweeps of the same plan (before/after, or two hosts)")
    return compare_sweeps(common, {k: sb[k] for k in common})
