"""Issue 25 benchmark: host CPU per I/O of aio=threads vs aio=io_uring in the block-layer tier at
one fixed offered load, through the real runner (`iomatrix run`, the host sampler following
qemu-storage-daemon).

    python bench/cpu_per_io.py [--rate 2000] [--runs 20] [--runtime 5] [--workload read|write]

Runs a plan of two block-layer cells (raw, cache=none, aio threads | io_uring) ×
rand-<rw>-4k-rate<N>, `--runs` rounds each, in a temporary directory, then prints from the store per
cell: runs that reached the offered load, achieved IOPS, p99 latency and cost.cpu_us_per_io with its
95% CI (Student t over runs): the half-width in µs and as a % of the mean, the run-to-run CV and the
runs that CV needs for ±10%; then the ratio io_uring / threads with its Fieller 95% CI.

Target: each cell's CPU-per-I/O 95% CI within ±10% of its mean after the plan's runs, so the tool
    can say
which mode costs less (the ratio's CI excludes 1) or that they cost the same within the noise. The
number of runs is fixed before the sweep (no stopping when the CI happens to look tight): 20 runs of
5 s, the latency-cost plan's precision_max for the block layer. Measured 2026-11-23 on this host: 12
runs of 5 s gave ±10.7%
(threads) and ±9.9% (io_uring), a run-to-run CV of 16-17%, so about 13-14 runs are the least, and 20
leave room for a busier host (the half-width shrinks as t_{n-1}/√n).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iomatrix.metrics import load_not_reached
from iomatrix.stats.compare import ratio_ci
from iomatrix.stats.summary import summarize, t_quantile
from iomatrix.store.db import Store

TARGET_REL_HALF_WIDTH = 0.10
METRIC = "cost.cpu_us_per_io"


def plan_text(rate: int, runs: int, runtime: float, rw: str) -> str:
    return f"""description = "bench: CPU per I/O, aio threads vs io_uring, block layer, {rate} IOPS offered"
tier = ["blocklayer"]
format = ["raw"]
preallocation = ["off"]
cache = ["none"]
aio = ["threads", "io_uring"]
workloads = ["rand-{rw}-4k-rate{rate}"]
size = "128M"
image_size = "256M"
runtime = {runtime}
null_ceiling = false
time_budget = "30m"

[repetitions]
min = {runs}
max = {runs}

[[backing]]
type = "dir"
"""  # noqa: E501


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=int, default=2000, help="offered IOPS (default 2000)")
    ap.add_argument("--runs", type=int, default=20, help="runs per cell (default 20)")
    ap.add_argument("--runtime", type=float, default=5.0, help="seconds per run (default 5)")
    ap.add_argument("--workload", choices=("read", "write"), default="read")
    args = ap.parse_args()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')} host {os.uname().nodename} cpus={os.cpu_count()} "
        f"load={Path('/proc/loadavg').read_text().split()[:3]}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-cpu-", dir=os.getcwd()) as tmp:
        scratch = Path(tmp)
        plan = scratch / "cpu.toml"
        plan.write_text(plan_text(args.rate, args.runs, args.runtime, args.workload))
        db = scratch / "bench.sqlite"
        cmd = [
            sys.executable,
            "-c",
            "import sys; from iomatrix.cli import main; main(sys.argv[1:])",
            "run",
            str(plan),
            "--db",
            str(db),
            "--workdir",
            str(scratch / "work"),
        ]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=scratch, text=True, capture_output=True)
        print(f"sweep took {time.monotonic() - t0:.0f} s, exit status {proc.returncode}")
        if proc.returncode not in (0, 3):
            print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
            return 1
        store = Store(db, read_only=True)
        (sweep_id,) = store.sweep_ids()[-1:]
        values: dict[int, dict[str, float]] = {}
        for smp in store.ok_samples(sweep_id):
            values.setdefault(smp.run_id, {})[smp.metric] = smp.value
        cells: dict[str, list[dict[str, float]]] = {}
        for r in store.runs(sweep_id):
            if r.status == "ok" and not r.replaced:
                cells.setdefault(r.axes["aio"], []).append(values.get(r.run_id, {}))
    side = args.workload
    print(
        f"rand-{side}-4k-rate{args.rate}, {args.runtime:g} s per run: {METRIC} (µs of "
        "qemu-storage-daemon CPU "
        "per I/O), 95% CI over the runs that reached the offered load"
    )
    print(
        f"{'aio':>9} {'runs':>5} {'reached':>8} {'IOPS':>7} {'p99 µs':>8} "
        f"{'CPU µs/IO':>10} {'95% CI':>13} "
        f"{'± µs':>6} {'±% mean':>8} {'CV':>6} {'runs for ±10%':>14}"
    )
    kept: dict[str, list[float]] = {}
    met = True
    for aio in ("threads", "io_uring"):
        runs = cells.get(aio, [])
        ok = [m for m in runs if "load.reached" in m and not load_not_reached(m) and METRIC in m]
        kept[aio] = [m[METRIC] for m in ok]
        if len(ok) < 2:
            print(
                f"{aio:>9} {len(runs):>5} {len(ok):>8}  (fewer than 2 runs with the "
                "offered load reached)"
            )
            met = False
            continue
        s = summarize(kept[aio])
        iops = summarize([m["total.iops"] for m in ok]).mean
        p99 = summarize([m[f"{side}.clat_p99_us"] for m in ok if f"{side}.clat_p99_us" in m]).mean
        rel = s.rel_half_width if s.rel_half_width is not None else float("inf")
        met &= rel <= TARGET_REL_HALF_WIDTH
        cv = s.cv or 0.0
        # n with t_{n-1} · CV / √n ≤ target: the runs this spread needs for the target (fixed point
        # from z).
        need = 2
        while t_quantile(0.95, need - 1) * cv / need**0.5 > TARGET_REL_HALF_WIDTH and need < 10_000:
            need += 1
        print(
            f"{aio:>9} {len(runs):>5} {len(ok):>8} {iops:>7.0f} {p99:>8.1f} {s.mean:>10.2f} "
            f"{f'{s.ci_low:.1f}–{s.ci_high:.1f}':>13} {s.half_width:>6.2f} "
            f"{100 * rel:>7.1f}% {100 * cv:>5.1f}% "
            f"{need:>14}"
        )
    if len(kept.get("threads", [])) >= 2 and len(kept.get("io_uring", [])) >= 2:
        r = ratio_ci(kept["io_uring"], kept["threads"])
        ci = "undefined" if r.low is None or r.high is None else f"{r.low:.3f}–{r.high:.3f}"
        verdict = (
            "io_uring costs less"
            if r.high is not None and r.high < 1
            else "threads costs less"
            if r.low is not None and r.low > 1
            else "no significant difference"
        )
        print(f"io_uring / threads CPU per I/O: {r.ratio:.3f} (95% CI {ci}): {verdict}")
    print(
        f"target: each cell's 95% CI within ±{TARGET_REL_HALF_WIDTH:.0%} of its mean -> "
        f"{'met' if met else 'MISSED'}; load at the end "
        f"{Path('/proc/loadavg').read_text().split()[:3]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
