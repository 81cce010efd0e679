"""How a run's length trades against the rounds a decision needs: the file-server role's deciding
pair (raw · writeback against qcow2 · writeback on QEMU's block layer) swept at several run
lengths (not a test).

    python bench/run_length_noise.py [--runtimes 1 3] [--rounds 10] [--keep DIR] [--analyse DB ...]

Each run length is one `iomatrix run` of a plan with only those two cells and the file-server role,
every unit run exactly `--rounds` times (min = max: no race, so both cells share every round).
Per sweep, from the store (report.query.cell_workloads: the ranked runs, a disturbed run's clean
retry in its place) it prints

* the mean throughput of each cell and the ratio qcow2/raw with its paired 95 % interval;
* s_d, the SD over rounds of the paired difference ln(qcow2/raw): the noise a decision must beat;
* the wall time per run (fio's start-up, the region's prefill, the daemon, the run itself);
* the rounds the decision would need to rule raw out (stats/ruling_out.py: against r ≥ 1/(1 − m),
  m the role's margin) at this gap and noise, with the race's α spending (stats/looks.py), and
  their wall time: n · 2 runs · wall per run.

Why: the quickstart's file server stayed unsettled in 10 of 10 sweeps (docs/benchmarks-history.md,
"Issue 53: the file server's pair against run length"): its pair differs by about the role's
margin while 1 s runs differ by ~15 % round to round. Whether longer runs buy the decision sooner
per second of the budget is what this measures. Runs as root (the sweeps drop caches)."""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from pathlib import Path

from decided_pairs import run_plan  # puts src/ on the path
from iomatrix.report.query import cell_workloads
from iomatrix.roles import builtin
from iomatrix.stats.looks import DECISION_ALPHA, rounds_needed
from iomatrix.stats.paired import paired_comparison
from iomatrix.store import Store

PLAN = """\
description = "run length against noise: the file server's deciding pair at runtime = {runtime} s"
tier = ["blocklayer"]
format = ["raw", "qcow2"]
preallocation = ["off"]
cache = ["writeback"]
aio = ["threads"]
bus = ["virtio-blk"]
roles = ["file-server"]
size = "128M"
image_size = "512M"
runtime = {runtime}
null_ceiling = false
time_budget = "30m"
[repetitions]
min = {rounds}
max = {rounds}
[[backing]]
type = "dir"
"""

METRIC = "total.bw_mbps"  # the figure that decides the file-server role (roles/file-server.toml)
WORKLOAD = "file-server:files"


def _margin() -> float:
    """The file-server role's margin of practical equivalence (roles/file-server.toml)."""
    role = builtin("file-server")
    assert role is not None
    return role.margin


def analyse(db: Path) -> dict[str, float]:
    """The pair's figures in the newest sweep of `db`."""
    store = Store.open_existing(db)
    try:
        sid = max(store.sweep_ids())
        cws = [c for c in cell_workloads(store, sid) if c.workload == WORKLOAD]
        rounds = store.run_round_numbers([r for c in cws for r in c.runs])
    finally:
        store.close()
    by_format: dict[str, dict[int, float]] = {}
    wall: list[float] = []
    runtime: list[float] = []
    for c in cws:
        fmt = c.axes.get("format", "")
        if fmt not in ("raw", "qcow2"):
            continue  # the null-co ceiling of a sweep made before null_ceiling = false
        by_format[fmt] = {rounds[rid]: v for rid, v in zip(c.runs, c.samples[METRIC], strict=True)}
        wall += c.phases.get("wall_s", [])
        runtime += c.phases.get("workload_s", [])
    raw, qcow2 = by_format["raw"], by_format["qcow2"]
    # the decision's own paired comparison over the rounds both ran (stats/paired.py)
    pc = paired_comparison(qcow2, raw)
    assert pc.ratio is not None and pc.se_log is not None, "fewer than 2 shared rounds"
    n, mean = pc.rounds, math.log(pc.ratio)
    sd = pc.se_log * math.sqrt(n)  # s_d of the paired ln differences
    # Ruling raw out: its log ratio to qcow2 against the margin that would make it the better one.
    gap = abs(-mean - math.log(1 / (1 - _margin())))
    # rounds_needed takes the residual SD of one cell (√2 · s = s_d of the paired difference).
    need = rounds_needed(gap, sd / math.sqrt(2), 0, DECISION_ALPHA, 0.8, two_sided=False)
    per_run = sum(wall) / len(wall)
    return {
        "runtime_s": sum(runtime) / len(runtime),
        "rounds": n,
        "raw_mbps": sum(raw.values()) / len(raw),
        "qcow2_mbps": sum(qcow2.values()) / len(qcow2),
        "ratio": pc.ratio,
        "low": pc.ratio_low,
        "high": pc.ratio_high,
        "sd_d": sd,
        "wall_per_run_s": per_run,
        # the decision's tie: the means within the margin (stats/decision.py, θ = the role's margin)
        "tied": float(abs(math.exp(mean) - 1.0) <= _margin()),
        "rounds_to_rule_out": float(need or math.inf),
        "seconds_to_rule_out": (need or math.inf) * 2 * per_run,
    }


def show(f: dict[str, float]) -> None:
    print(
        f"runtime {f['runtime_s']:.1f} s: {f['rounds']:.0f} rounds, raw {f['raw_mbps']:.0f} MB/s, "
        f"qcow2 {f['qcow2_mbps']:.0f} MB/s, qcow2/raw {f['ratio']:.3f} "
        f"({f['low']:.3f}-{f['high']:.3f})"
    )
    then = (
        f"within the margin ({_margin():.0%}): tied"
        if f["tied"]
        else f"ruling raw out needs ~{f['rounds_to_rule_out']:.0f} rounds, "
        f"~{f['seconds_to_rule_out']:.0f} s of runs"
    )
    print(f"  s_d {f['sd_d']:.3f} · {f['wall_per_run_s']:.2f} s of wall per run · {then}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtimes", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="keep the databases here")
    ap.add_argument("--analyse", type=Path, nargs="+", help="re-read these databases")
    args = ap.parse_args()
    if args.analyse:
        for db in args.analyse:
            show(analyse(db))
        return 0
    work = Path(tempfile.mkdtemp(prefix="iomatrix-runlength-"))
    try:
        for runtime in args.runtimes:
            plan = work / f"runtime-{runtime:g}.toml"
            plan.write_text(PLAN.format(runtime=f"{runtime:g}", rounds=args.rounds))
            db = work / f"runtime-{runtime:g}.sqlite"
            log = work / f"runtime-{runtime:g}.log"
            if run_plan(plan, db, log) != 0:
                print(f"the sweep at runtime {runtime:g} s failed: see {log}", file=sys.stderr)
                return 1
            show(analyse(db))
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for p in work.glob("*.sqlite"):
                shutil.copy2(p, args.keep / p.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
