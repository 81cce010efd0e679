"""`iomatrix rank` and `iomatrix compare`: orderings with significance, from the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iomatrix.errors import UserError
from iomatrix.report.quality import ranked_samples
from iomatrix.report.query import CellWorkload, cell_workloads
from iomatrix.stats import (
    Change,
    Ranking,
    RatioCI,
    ScoreCI,
    compare_sweeps,
    rank,
    ratio_ci,
    weighted_mixed,
    weighted_score_ci,
)
from iomatrix.store import Store
from iomatrix.workloads import PRESETS

MATCH_AXES = ("cache", "aio", "backing", "modifier")


def primary_metric(workload: str) -> tuple[str, bool]:
    w = PRESETS.get(workload)
    return (w.primary_metric, w.higher_is_better) if w else ("total.iops", True)


def baremetal_reference(cell: CellWorkload, candidates: Sequence[CellWorkload]) -> CellWorkload | None:
    """The bare-metal cell with the same host-side semantics (cache, aio, backing, modifier),
    else the bare-metal cache=none cell on the same backing, else any bare-metal cell."""
    bms = [c for c in candidates if c.axes["tier"] == "baremetal" and c.workload == cell.workload]
    for pick in (
        lambda c: all(c.axes[a] == cell.axes[a] for a in MATCH_AXES),
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


def rank_workload(cws: list[CellWorkload], workload: str, metric: str | None, *, min_n: int = 3,
                  max_noise: float = 0.10, alpha: float = 0.05) -> WorkloadRanking | None:
    m, higher = primary_metric(workload)
    metric = metric or m
    if metric.endswith(("_us", ".seconds", "_s", "_ms")):
        higher = False
    mine = [c for c in cws if c.workload == workload and metric in c.samples]
    if not mine:
        return None
    tiers = {c.axes["tier"] for c in mine}
    tier = "guest" if "guest" in tiers else "baremetal"
    ranked = [c for c in mine if c.axes["tier"] == tier and c.axes["backing"] != "null"]
    if not ranked:
        return None
    groups: dict[str, list[float]] = {}
    cold_apart: list[str] = []
    for c in ranked:
        groups[c.label()], apart = ranked_samples(c.samples[metric])
        if apart:
            cold_apart.append(c.label())
    r = rank(groups, higher_is_better=higher, alpha=alpha, min_n=min_n, max_rel_half_width=max_noise)
    to_bm: dict[str, RatioCI | None] = {}
    if tier != "baremetal":
        for c in ranked:
            ref = baremetal_reference(c, cws)
            if ref is not None and metric in ref.samples and len(ref.samples[metric]) >= 2 \
                    and len(c.samples[metric]) >= 2:
                to_bm[c.label()] = ratio_ci(c.samples[metric], ref.samples[metric])
            else:
                to_bm[c.label()] = None
    ceiling = [(c, sum(c.samples[metric]) / len(c.samples[metric])) for c in mine if c.axes["backing"] == "null"]
    accel = sorted({a for c in mine for a in c.accel})
    return WorkloadRanking(workload, metric, tier, r, {c.label(): c for c in ranked}, to_bm, ceiling, accel,
                           cold_apart)


def rank_sweep(store: Store, sweep_id: int, workload: str | None, metric: str | None, *, min_n: int = 3,
               max_noise: float = 0.10) -> list[WorkloadRanking]:
    cws = cell_workloads(store, sweep_id)
    names = sorted({c.workload for c in cws})
    if workload is not None:
        if workload not in names:
            raise UserError(f"sweep {sweep_id} has no results for workload '{workload}'",
                            hint=f"workloads in it: {', '.join(names) or 'none'}")
        names = [workload]
    out = []
    for w in names:
        wr = rank_workload(cws, w, metric, min_n=min_n, max_noise=max_noise)
        if wr is not None:
            out.append(wr)
    if metric is not None and not out:
        raise UserError(f"no results for metric '{metric}'", hint="see metric names with 'iomatrix results "
                        "--metric all'")
    return out


# -- seed 000's weighted scores --------------------------------------------------------------

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
    """Seed 000: mean of the sequential figure and the 4 KiB random figure × factor, where the factor
    (bare-metal sequential / bare-metal 4 KiB random) makes 4 KiB matter as much as sequential."""
    if score not in (*SCORE_INPUTS, "weighted-mixed"):
        raise UserError(f"unknown score '{score}'", hint="use weighted-read, weighted-write or weighted-mixed")
    parts = list(SCORE_INPUTS) if score == "weighted-mixed" else [score]
    cws = cell_workloads(store, sweep_id)
    factors: dict[str, float] = {}
    per_part: dict[str, dict[str, ScoreCI]] = {}
    for part in parts:
        seq_w, rand_w, metric = SCORE_INPUTS[part]
        bm = {c.workload: c for c in cws if c.axes["tier"] == "baremetal" and c.axes["cache"] in ("none", "-")
              and metric in c.samples}
        if seq_w not in bm or rand_w not in bm:
            raise UserError(f"{score} needs bare-metal results for {seq_w} and {rand_w}",
                            hint="run a plan with tier baremetal and those workloads (e.g. 'salter')")
        bm_seq = sum(bm[seq_w].samples[metric]) / len(bm[seq_w].samples[metric])
        bm_rand = sum(bm[rand_w].samples[metric]) / len(bm[rand_w].samples[metric])
        factors[part] = bm_seq / bm_rand
        by_cell: dict[str, dict[str, CellWorkload]] = {}
        for c in cws:
            if c.axes["tier"] == "guest" and c.axes["backing"] != "null" and metric in c.samples:
                by_cell.setdefault(c.label(), {})[c.workload] = c
        per_part[part] = {
            label: weighted_score_ci(ws[seq_w].samples[metric], ws[rand_w].samples[metric], bm_seq, bm_rand)
            for label, ws in by_cell.items() if seq_w in ws and rand_w in ws
        }
    labels = set.intersection(*(set(v) for v in per_part.values())) if per_part else set()
    rows = []
    for label in labels:
        ps = {p: per_part[p][label] for p in parts}
        if len(parts) == 1:
            total = ps[parts[0]]
        else:
            a, b = ps[parts[0]], ps[parts[1]]
            lo = None if a.low is None or b.low is None else weighted_mixed(a.low, b.low)
            hi = None if a.high is None or b.high is None else weighted_mixed(a.high, b.high)
            total = ScoreCI(weighted_mixed(a.score, b.score), lo, hi, None)
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
