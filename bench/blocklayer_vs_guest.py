"""Issue 10 benchmark: the block-layer tier against the guest tier on the same cells, interleaved.

For each repetition, every (cell, workload) is run once in each tier, in a shuffled order, so drift of the
machine hits both tiers alike. Prints per tier: the per-run wall time and its overhead over the workload's
runtime (target for the block-layer tier: wall ≤ runtime + 0.5 s), the 95% CI half-width of the primary
metric after N runs as a % of the mean (target: ≤ 5%), and, per format × workload, whether the two tiers
order the cache modes the same way (Kendall's tau between the tiers' means; 1 = same order).

    python bench/blocklayer_vs_guest.py [--runs 4] [--runtime 1] [--formats qcow2] \
        [--caches none,writeback,unsafe] [--workloads rand-write-4k,db-write-4k-fdatasync]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scipy.stats import kendalltau

from iomatrix import workloads as wl
from iomatrix.domain import NA
from iomatrix.fio.jobs import JobShape
from iomatrix.hygiene import prepare_cache
from iomatrix.matrix import Cell
from iomatrix.plan.load import plan_from_dict
from iomatrix.stats.summary import summarize
from iomatrix.tiers import tier_class
from iomatrix.tiers.base import RunOptions, RunRequest, Target, Tier

TIERS = ("blocklayer", "guest")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--runtime", type=float, default=1.0)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--formats", default="qcow2")
    ap.add_argument("--caches", default="none,writeback,unsafe")
    ap.add_argument("--workloads", default="rand-write-4k,db-write-4k-fdatasync")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    formats, caches, names = (s.split(",") for s in (args.formats, args.caches, args.workloads))
    works = [wl.resolve(n) for n in names]
    plan = plan_from_dict({"name": "bench", "tier": list(TIERS), "size": args.size, "image_size": "256M",
                           "runtime": args.runtime, "null_ceiling": False}, "bench")
    shape = JobShape(size_bytes=plan.size_bytes, runtime_s=args.runtime)
    rng = random.Random(args.seed)
    # value[tier][(format, cache, workload)] = [primary metric per run]; wall[tier] = [wall_s per run]
    value: dict[str, dict[tuple[str, str, str], list[float]]] = {t: {} for t in TIERS}
    wall: dict[str, list[float]] = {t: [] for t in TIERS}
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-", dir=os.getcwd()) as tmp:
        scratch = Path(tmp)
        opts = RunOptions(workdir=scratch / "work", log=lambda s: print(s, flush=True))
        tiers: dict[str, Tier] = {}
        try:
            for t in TIERS:
                tiers[t] = tier_class(t)(plan, opts)
                tiers[t].open()
                print(tiers[t].describe(), flush=True)
            slots = [(f, c, w) for f in formats for c in caches for w in works]
            for rep in range(args.runs):
                order = [(t, s) for s in slots for t in TIERS]
                rng.shuffle(order)
                for t, (fmt, cache, w) in order:
                    bus = "virtio-blk" if t == "guest" else NA
                    cell = Cell(t, fmt, "off", cache, "threads", bus, "dir", "none")
                    prepare_cache(keep_warm=False)
                    req = RunRequest(cell=cell, workload=w, target=Target("dir", scratch), shape=shape,
                                     run_dir=scratch / "runs" / f"{t}-{fmt}-{cache}-{w.name}-{rep}", timeout_s=300)
                    t0 = time.monotonic()
                    out = tiers[t].run(req)
                    took = time.monotonic() - t0
                    if not out.ok:
                        print(f"  {t} {fmt}/{cache} {w.name}: FAILED {out.error}", flush=True)
                        continue
                    wall[t].append(took)
                    v = out.metrics[w.primary_metric]
                    value[t].setdefault((fmt, cache, w.name), []).append(v)
                    print(f"  run {rep + 1} {t:10s} {fmt}/{cache:9s} {w.name:22s} {w.primary_metric}={v:10,.0f} "
                          f"wall {took:5.2f} s", flush=True)
        finally:
            for tier in tiers.values():
                tier.close()

    print(f"\n{time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cpus), runtime {args.runtime:g} s, "
          f"{args.runs} runs per cell and tier, accel {tiers['guest'].accel() if 'guest' in tiers else '?'}")
    for t in TIERS:
        if not wall[t]:
            continue
        over = [x - args.runtime for x in wall[t]]
        print(f"{t:10s} per-run wall: median {statistics.median(wall[t]):.2f} s, max {max(wall[t]):.2f} s; "
              f"over runtime: median {statistics.median(over):.2f} s, max {max(over):.2f} s")
    print("\n95% CI half-width after N runs, % of the mean (target ≤ 5%):")
    for key in sorted(value["blocklayer"]):
        row = []
        for t in TIERS:
            xs = value[t].get(key, [])
            s = summarize(xs) if len(xs) >= 2 else None
            rel = "-" if s is None or s.rel_half_width is None else f"{100 * s.rel_half_width:5.1f}%"
            mean = "-" if not xs else f"{statistics.mean(xs):,.0f}"
            row.append(f"{t} {mean:>9s} ±{rel:>6s} (n={len(xs)})")
        print(f"  {'/'.join(key):42s} " + "   ".join(row))
    print("\ncache-mode order, block layer vs guest (Kendall tau, 1 = same order):")
    for fmt in formats:
        for w in works:
            keys = [(fmt, c, w.name) for c in caches]
            if not all(value[t].get(k) for t in TIERS for k in keys):
                continue
            a = [statistics.mean(value["blocklayer"][k]) for k in keys]
            b = [statistics.mean(value["guest"][k]) for k in keys]
            tau = kendalltau(a, b).statistic
            order = {t: " > ".join(c for _, c in sorted(zip(v, caches, strict=True), reverse=True))
                     for t, v in (("blocklayer", a), ("guest", b))}
            print(f"  {fmt}/{w.name}: tau {tau:+.2f}; blocklayer {order['blocklayer']}; guest {order['guest']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
