"""Issue 11 benchmarks: answers on a noisy host. Real sweeps (bare metal and QEMU's block layer),
real fio.

    python bench/noisy_host.py dbwrite   # (a) bare-metal db-write-4k-fdatasync over every cache mode:
                                         #     unsafe ranked alone first, significantly ahead of every other mode
    python bench/noisy_host.py load      # (b) the same plan (--plan, default seqwrite) quiet and under a
                                         #     background CPU load that runs half of the time: disturbed runs
                                         #     flagged, and the cell order agrees with the quiet sweep (Kendall
                                         #     tau ≥ 0.8 on the separated cells)
    python bench/noisy_host.py racing    # (c) racing vs a fixed number of repetitions on three plans: the same
                                         #     top group with ≤ 50% of the runs on at least two
    python bench/noisy_host.py repeat    # (d) the same plan (--plan) twice: Kendall tau ≥ 0.8 on the separated
                                         #     cells, and each sweep's choice in the other's top group
    python bench/noisy_host.py flagsim   # the relative interference limit on simulated PSI series (no sweep):
                                         #     false flags on a busy host with no disturbance, and detection
                                         #     in a 50/50 mixture of quiet and disturbed runs
    python bench/noisy_host.py all

"Separated cells": walking the first sweep's ranking from the best, a cell joins when the blocked
analysis found it significantly different (Holm-corrected) from every cell already in; Kendall's tau
(scipy) compares the two sweeps' centres on those cells. The background load is (CPUs + 1) busy-loop
processes, started and stopped by this script in alternating periods (on, off, on, …), so that about
half of every sweep is loaded."""  # noqa: E501

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scipy.stats import kendalltau

from iomatrix.monitor.summary import summarize_samples
from iomatrix.plan.load import plan_from_dict
from iomatrix.report.query import run_monitor_samples, run_table
from iomatrix.report.rank import WorkloadRanking, rank_sweep
from iomatrix.runner import RunOptions, SweepResult, SweepRunner
from iomatrix.stats.interference import interference_flags, interference_scores
from iomatrix.store import Store

DBWRITE: dict[str, Any] = {
    "name": "bench-dbwrite",
    "tier": ["baremetal"],
    "cache": ["none", "writeback", "writethrough", "directsync", "unsafe"],
    "aio": ["threads"],
    "workloads": ["db-write-4k-fdatasync"],
    "size": "64M",
    "runtime": 1,
    "repetitions": {"min": 3, "max": 8},
    "time_budget": "8m",
}
SEQWRITE: dict[str, Any] = {
    "name": "bench-seqwrite",
    "tier": ["baremetal"],
    "cache": ["none", "writeback", "writethrough", "directsync", "unsafe"],
    "aio": ["threads"],
    "workloads": ["seq-write-1m"],
    "size": "64M",
    "runtime": 1,
    "repetitions": {"min": 3, "max": 8},
    "time_budget": "8m",
}
BLOCK: dict[str, Any] = {
    "name": "bench-blocklayer",
    "tier": ["blocklayer"],
    "format": ["raw", "qcow2"],
    "preallocation": ["off"],
    "cache": ["none", "writeback", "unsafe"],
    "aio": ["threads"],
    "workloads": ["rand-write-4k"],
    "size": "64M",
    "image_size": "256M",
    "runtime": 1,
    "null_ceiling": False,
    "repetitions": {"min": 3, "max": 8},
    "time_budget": "8m",
}


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def run_sweep(data: dict[str, Any], tmp: Path, label: str) -> tuple[Store, int, SweepResult, float]:
    plan = plan_from_dict(data, "bench")
    store = Store(tmp / f"{label}.sqlite")
    t0 = time.monotonic()
    result = SweepRunner(
        plan, None, store, RunOptions(workdir=tmp / f"work-{label}", accel="tcg")
    ).run()
    wall = time.monotonic() - t0
    print(
        f"  [{label}] {result.runs_done} runs ok, {result.runs_failed} failed, "
        f"{result.disturbed} disturbed, "
        f"{result.retried} retried, {wall:.0f} s"
    )
    return store, result.sweep_id, result, wall


def ranking(store: Store, sid: int) -> WorkloadRanking:
    [wr] = rank_sweep(store, sid, None, None)
    return wr


def top_group(wr: WorkloadRanking) -> set[str]:
    d = wr.decision
    if d is None or d.leader is None:
        return set()
    # The answer too: when the tie-break picks another cell than the leader, `tied` is the rest of
    # the group *besides the answer* (the leader among them).
    return {x for x in (d.leader, d.answer) if x is not None} | set(d.tied) | set(d.unresolved)


def show(wr: WorkloadRanking, label: str) -> None:
    d = wr.decision
    print(f"  [{label}] {wr.workload} · {wr.metric}, {wr.ranking.test_description}")
    for row in wr.ranking.rows:
        s = row.summary
        ci = "–" if s.ci_low is None else f"{s.ci_low:,.0f}–{s.ci_high:,.0f}"
        p = "" if row.p_vs_best is None else f"p={row.p_vs_best:.2g}"
        print(
            f"    {row.rank or '–':>2} {row.group_label or '–':<3} {row.name:<45} n={s.n:<2} "
            f"mean={s.mean:>12,.1f}  CI {ci:<22} {p}"
        )
    if d is not None:
        print(f"    decision: {d.statement}")


def separated_cells(wr: WorkloadRanking) -> list[str]:
    resolved = {frozenset((c.a, c.b)) for c in wr.ranking.comparisons if c.significant}
    out: list[str] = []
    for row in wr.ranking.rows:
        if row.rank is not None and all(frozenset((row.name, o)) in resolved for o in out):
            out.append(row.name)
    return out


def tau_on_separated(a: WorkloadRanking, b: WorkloadRanking) -> tuple[float | None, list[str]]:
    cells = [
        c
        for c in separated_cells(a)
        if c in {r.name for r in b.ranking.rows if r.centre is not None}
    ]
    if len(cells) < 2:
        return None, cells
    ca = {r.name: r.centre for r in a.ranking.rows}
    cb = {r.name: r.centre for r in b.ranking.rows}
    res = kendalltau([ca[c] for c in cells], [cb[c] for c in cells])
    return float(res.statistic), cells


def tau_on_resolved_pairs(a: WorkloadRanking, b: WorkloadRanking) -> tuple[float | None, int]:
    """Kendall's tau restricted to the pairs the first sweep resolved (Holm-significant): (C − D)/(C
    + D), C/D = pairs the second sweep orders the same/the other way. Uses every separated pair, not
    only a set of mutually separated cells (which has just 2 cells when the cells form 2 or 3
    overlapping groups)."""
    cb = {r.name: r.centre for r in b.ranking.rows if r.centre is not None}
    ca = {r.name: r.centre for r in a.ranking.rows if r.centre is not None}
    c = d = 0
    for comp in a.ranking.comparisons:
        if (
            not comp.significant
            or comp.a not in cb
            or comp.b not in cb
            or comp.a not in ca
            or comp.b not in ca
        ):
            continue
        same = (ca[comp.a] - ca[comp.b]) * (cb[comp.a] - cb[comp.b])
        c += same > 0
        d += same < 0
    return ((c - d) / (c + d) if c + d else None), c + d


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


# -- (a) -------------------------------------------------------------------------------------------


def bench_dbwrite(tmp: Path) -> bool:
    print("(a) bare-metal db-write-4k-fdatasync over every cache mode (racing, min 3, max 8)")
    store, sid, _, _ = run_sweep(DBWRITE, tmp, "dbwrite")
    wr = ranking(store, sid)
    show(wr, "dbwrite")
    rows = [r for r in wr.ranking.rows if r.rank is not None]
    first = rows[0].name if rows else None
    alone = (
        first is not None
        and "cache=unsafe" in first
        and rows[0].group_label == "a"
        and all(r.group_label != "a" for r in rows[1:])
    )
    ahead = [(r.name, r.p_vs_best) for r in rows[1:]]
    sig = all(p is not None and p < 0.05 for _, p in ahead)
    ratio = (rows[1].centre / rows[0].centre) if len(rows) > 1 and rows[0].centre else None
    print(
        f"  unsafe ranked alone first: {alone}; significantly ahead of all {len(ahead)} others "
        f"(Holm-adjusted p, max {max((p or 1.0) for _, p in ahead):.2g}): {sig}; next best at "
        f"{ratio if ratio is None else f'{ratio:.3f}'}× unsafe → {verdict(alone and sig)}"
    )
    return alone and sig


# -- (b) -------------------------------------------------------------------------------------------


class BackgroundLoad:
    """(CPUs + 1) busy loops, switched on and off every `period` seconds from a thread (on
    first)."""

    def __init__(self, period: float) -> None:
        self.period = period
        # wall-clock (time.time) spans with the load on
        self.on_intervals: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _start(self) -> None:
        n = (os.cpu_count() or 1) + 1
        self._procs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)
        ]

    def _halt(self) -> None:
        for p in self._procs:
            p.kill()
            p.wait()
        self._procs = []

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.time()
            self._start()
            self._stop.wait(self.period)
            self._halt()
            self.on_intervals.append((t0, time.time()))
            self._stop.wait(self.period)

    @contextmanager
    def running(self) -> Iterator[BackgroundLoad]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self._halt()

    def loaded_share(self, start: float, end: float) -> float:
        overlap = sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.on_intervals)
        return overlap / max(end - start, 1e-9)


def mean_psi(store: Store, run_ids: list[int]) -> float | None:
    """Mean over the runs of PSI cpu some (time-weighted within each run), in %."""
    vals = []
    for rid in run_ids:
        summary = summarize_samples(run_monitor_samples(store, rid))
        if "psi.cpu_some_pct" in summary:
            vals.append(summary["psi.cpu_some_pct"].mean)
    return sum(vals) / len(vals) if vals else None


def absolute_flag(store: Store, run_id: int) -> bool:
    """The run judged by the absolute limits only (no sweep baseline), as before relative flags."""
    means = {k: f.mean for k, f in summarize_samples(run_monitor_samples(store, run_id)).items()}
    return interference_flags(means, os.cpu_count() or 1).disturbed


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}%"


def bench_load(tmp: Path, period: float, plan: str) -> bool:
    fixed = with_(PLANS[plan], name="bench-load", repetitions={"min": 4, "max": 4})
    print(
        f"(b) plan {plan}, 4 rounds: quiet, then with a background load {period:g} s on "
        f"/ {period:g} s off"
    )
    qs, qid, _, _ = run_sweep(fixed, tmp, "quiet")
    load = BackgroundLoad(period)
    with load.running():
        ls, lid, _, _ = run_sweep(fixed, tmp, "loaded")
    quiet, loaded = ranking(qs, qid), ranking(ls, lid)
    show(quiet, "quiet")
    show(loaded, "loaded")
    runs = [r for r in run_table(ls, lid) if r["status"] == "ok"]
    on = [
        r for r in runs if load.loaded_share(r["started_at"], r["started_at"] + r["wall_s"]) >= 0.5
    ]
    off = [
        r for r in runs if load.loaded_share(r["started_at"], r["started_at"] + r["wall_s"]) == 0.0
    ]
    print("  per run of the loaded sweep (load share, scores, flag):")
    for r in runs:
        means = {k: f.mean for k, f in summarize_samples(run_monitor_samples(ls, r["id"])).items()}
        sc = interference_scores(means, os.cpu_count() or 1)
        print(
            f"    run {r['id']:>3} load "
            f"{load.loaded_share(r['started_at'], r['started_at'] + r['wall_s']):4.0%} "
            + " ".join(f"{k.split('.')[-1]}={v:6.1f}" for k, v in sorted(sc.items()))
            + f" {'DISTURBED' if r['disturbed'] else 'clean'}"
        )
    flagged_on = sum(1 for r in on if r["disturbed"])
    flagged_off = sum(1 for r in off if r["disturbed"])
    quiet_flagged = sum(1 for r in run_table(qs, qid) if r["disturbed"])
    total_on = sum(b - a for a, b in load.on_intervals)
    span = (runs[-1]["started_at"] + runs[-1]["wall_s"] - runs[0]["started_at"]) if runs else 0.0
    print(
        f"  load on {total_on:.0f} s of the loaded sweep's {span:.0f} s "
        f"({total_on / max(span, 1):.0%})"
    )
    quiet_ids = [r["id"] for r in run_table(qs, qid) if r["status"] == "ok"]
    print(
        f"  runs mostly under load: {len(on)}, flagged {flagged_on} (mean PSI cpu some "
        f"{pct(mean_psi(ls, [r['id'] for r in on]))}); runs with no load: {len(off)}, "
        f"flagged {flagged_off} "
        f"({pct(mean_psi(ls, [r['id'] for r in off]))}); quiet sweep: {quiet_flagged} flagged of "
        f"{len(quiet_ids)} ({pct(mean_psi(qs, quiet_ids))})"
    )
    for what, group in (("under load", on), ("no load", off)):
        example = next((r for r in group if r["disturbed"]), None)
        if example is not None:
            print(f"  e.g. a flagged run {what}: {'; '.join(example['disturbance'])}")
    # Flags against the sweep's own baseline (the runner's rule) vs the absolute limits alone.
    absolute_on = sum(1 for r in on if absolute_flag(ls, r["id"]))
    absolute_off = sum(1 for r in off if absolute_flag(ls, r["id"]))
    print(
        f"  absolute limits alone would flag {absolute_on} of {len(on)} runs under load "
        f"and {absolute_off} of "
        f"{len(off)} runs with no load"
    )
    tau, cells = tau_on_separated(quiet, loaded)
    print(
        f"  Kendall tau on the {len(cells)} cells the quiet sweep separates: "
        f"{'–' if tau is None else f'{tau:+.2f}'} ({', '.join(cells)})"
    )
    ptau, npairs = tau_on_resolved_pairs(quiet, loaded)
    print(
        f"  Kendall tau on the {npairs} pairs the quiet sweep resolves: "
        f"{'–' if ptau is None else f'{ptau:+.2f}'}"
    )
    flagged_ok = bool(on) and flagged_on >= 0.8 * len(on)
    # Discriminating: runs with our load off are flagged much less often than runs under it.
    share_on = flagged_on / len(on) if on else 0.0
    share_off = flagged_off / len(off) if off else 0.0
    print(
        f"  flagged share under load {share_on:.0%} vs with no load {share_off:.0%}: "
        f"discriminates (gap ≥ 50 points): {share_on - share_off >= 0.5}"
    )
    ok = flagged_ok and tau is not None and tau >= 0.8
    print(
        f"  loaded runs flagged (≥ 80%): {flagged_ok}; tau ≥ 0.8: "
        f"{tau is not None and tau >= 0.8} → {verdict(ok)}"
    )
    return ok


# -- (c) -------------------------------------------------------------------------------------------

PLANS = {"dbwrite": DBWRITE, "seqwrite": SEQWRITE, "block": BLOCK}


def bench_racing(tmp: Path, plans: list[str]) -> bool:
    print(
        "(c) racing (min 3, max 8) vs fixed 8 repetitions, on the plans "
        f"{', '.join(plans)} (target: met on at "
        "least two)"
    )
    met = 0
    for base in (PLANS[p] for p in plans):
        name = base["name"]
        rs, rid, rres, rwall = run_sweep(with_(base, name=f"{name}-racing"), tmp, f"{name}-racing")
        fs, fid, fres, fwall = run_sweep(
            with_(base, name=f"{name}-fixed", repetitions={"min": 8, "max": 8}),
            tmp,
            f"{name}-fixed",
        )
        race, fixed = ranking(rs, rid), ranking(fs, fid)
        show(race, "racing")
        for st in rs.unit_stops(rid):
            print(
                f"    stop after round {st.round} ({st.ok_runs} runs), {st.kind}: "
                f"{st.cell_key}: {st.reason}"
            )
        show(fixed, "fixed")
        rt, ft = top_group(race), top_group(fixed)
        same = rt == ft
        share = rres.runs_done / max(fres.runs_done, 1)
        ok = same and share <= 0.5
        met += ok
        print(
            f"  {name}: top group racing {sorted(rt)} vs fixed {sorted(ft)}: same={same}; runs "
            f"{rres.runs_done} vs {fres.runs_done} = {share:.0%} (wall {rwall:.0f} s vs "
            f"{fwall:.0f} s) "
            f"→ {verdict(ok)}"
        )
    print(f"  met on {met} of {len(plans)} plans → {verdict(met >= 2)}")
    return met >= 2


# -- (d) -------------------------------------------------------------------------------------------


def bench_repeat(tmp: Path, plan: str) -> bool:
    print(f"(d) plan {plan} twice (racing, the default)")
    s1, id1, _, _ = run_sweep(with_(PLANS[plan], name="bench-repeat"), tmp, "first")
    s2, id2, _, _ = run_sweep(with_(PLANS[plan], name="bench-repeat"), tmp, "second")
    a, b = ranking(s1, id1), ranking(s2, id2)
    show(a, "first")
    show(b, "second")
    tau_ab, cells_ab = tau_on_separated(a, b)
    tau_ba, cells_ba = tau_on_separated(b, a)
    # The choice: the decision's answer, else (not separable yet) the tie-break's provisional pick —
    # said so.
    ca = (a.decision.answer or a.decision.provisional or a.decision.leader) if a.decision else None
    cb = (b.decision.answer or b.decision.provisional or b.decision.leader) if b.decision else None
    for wr, what in ((a, "first"), (b, "second")):
        if wr.decision is not None and wr.decision.answer is None:
            print(
                f"  the {what} sweep gave no answer ({wr.decision.kind}); its "
                "provisional pick stands in"
            )
    cross = ca is not None and cb is not None and ca in top_group(b) and cb in top_group(a)
    print(
        f"  Kendall tau, cells the first separates: {'–' if tau_ab is None else f'{tau_ab:+.2f}'} "
        f"(n={len(cells_ab)}); cells the second separates: "
        f"{'–' if tau_ba is None else f'{tau_ba:+.2f}'} "
        f"(n={len(cells_ba)})"
    )
    for x, y, what in ((a, b, "first"), (b, a, "second")):
        ptau, npairs = tau_on_resolved_pairs(x, y)
        print(
            f"  Kendall tau on the {npairs} pairs the {what} resolves: "
            f"{'–' if ptau is None else f'{ptau:+.2f}'}"
        )
    print(f"  choices: first {ca!r}, second {cb!r}; each in the other's top group: {cross}")
    ok = tau_ab is not None and tau_ab >= 0.8 and tau_ba is not None and tau_ba >= 0.8 and cross
    print(f"  → {verdict(ok)}")
    return ok


# -- relative flags, simulated ---------------------------------------------------------------------


def bench_flagsim(reps: int = 300, runs: int = 40, seed: int = 0) -> bool:
    """Judge simulated PSI series run by run with stats.interference.baseline_limit (as the runner
    does)."""
    import numpy as np

    from iomatrix.stats.interference import BASELINE_MIN_RUNS, baseline_limit

    rng = np.random.default_rng(seed)

    def flags(xs: list[float]) -> list[bool]:
        return [
            x > baseline_limit("psi.cpu_some_pct", xs[:i], 10.0).value for i, x in enumerate(xs)
        ][BASELINE_MIN_RUNS:]

    false_busy = [float(np.mean(flags(list(rng.normal(50, 8, runs))))) for _ in range(reps)]
    det, fa = [], []
    for _ in range(reps):
        lab = rng.random(runs) < 0.5
        xs = np.where(lab, rng.normal(88, 6, runs), rng.normal(50, 8, runs))
        f = np.array(flags(list(xs)))
        det.append(float(f[lab[BASELINE_MIN_RUNS:]].mean()))
        fa.append(float(f[~lab[BASELINE_MIN_RUNS:]].mean()))
    print(
        f"flagsim ({reps} series of {runs} runs, judged from run "
        f"{BASELINE_MIN_RUNS + 1}): busy host N(50, 8) "
        f"with no disturbance: {np.mean(false_busy):.1%} flagged; 50/50 mixture N(50, 8) "
        "+ N(88, 6): "
        f"{np.mean(det):.0%} of the disturbed runs flagged, {np.mean(fa):.1%} of the others"
    )
    return True


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("bench", choices=["dbwrite", "load", "racing", "repeat", "flagsim", "all"])
    ap.add_argument(
        "--period", type=float, default=6.0, help="background load: seconds on, then seconds off"
    )
    ap.add_argument(
        "--plan", default="seqwrite", choices=list(PLANS), help="load and repeat: which plan"
    )
    ap.add_argument(
        "--plans",
        default="dbwrite,seqwrite,block",
        help="racing: which plans (comma-separated): " + ", ".join(PLANS),
    )
    args = ap.parse_args()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} host {platform.node()}: {os.cpu_count()} "
        "CPUs, kernel "
        f"{platform.release()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    results: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="iomatrix-noisy-", dir=os.getcwd()) as d:
        tmp = Path(d)
        if args.bench in ("dbwrite", "all"):
            results["dbwrite"] = bench_dbwrite(tmp)
        if args.bench in ("load", "all"):
            results["load"] = bench_load(tmp, args.period, args.plan)
        if args.bench in ("racing", "all"):
            results["racing"] = bench_racing(tmp, [p for p in args.plans.split(",") if p])
        if args.bench in ("repeat", "all"):
            results["repeat"] = bench_repeat(tmp, args.plan)
        if args.bench in ("flagsim", "all"):
            results["flagsim"] = bench_flagsim()
    print(
        "summary: "
        + ", ".join(f"{k} {verdict(v)}" for k, v in results.items())
        + f"; load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
