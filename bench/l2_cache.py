"""Issue 24 benchmark: the qcow2 L2 cache, QEMU's default against one that holds the whole image, in
the block layer.

Runs the block layer (qemu-storage-daemon + fio over NBD) with ``l2_cache`` default and whole-image
on the ``rand-read-4k-sparse-1t`` preset: random 4 KiB reads at queue depth 16 across a 1 TiB thin
qcow2 image with one 4 KiB block written every 512 MiB (an unmeasured prefill), so every L2 table
exists (2048 tables, 128 MiB at 64 KiB clusters) while the image holds 256 MiB. QEMU's default cache
(at most 32 MiB on Linux, QEMU ≥ 3.1) holds a quarter of those tables: three reads in four look
their L2 entry up in a table that is not cached and read it from the image first; with
``whole-image`` (``l2-cache-size`` = 128 MiB) every table stays cached after its first use. A fixed
number of runs per cell in randomised rounds, then ranked as ``iomatrix rank`` ranks them. Prints
each cell's mean, the ratio whole-image/default with its 95% CI (Fieller), and whether the ranking
settles it.

    python bench/l2_cache.py [--cluster-size 64k] [--cache none] [--runs 8] [--runtime 2] [--workdir DIR]

With ``--cluster-size 1M`` the default cache covers 4 TiB: the plan prunes whole-image with the
reason (nothing to measure), which is the point of the axis's rule. Exit status 0 when whole-image
is settled as faster."""  # noqa: E501

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

from blocklayer_sweep import sweep_and_rank
from iomatrix.plan.load import plan_from_dict
from iomatrix.stats.compare import ratio_ci
from iomatrix.workloads import SPARSE_L2_WORKLOAD as WORKLOAD


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cluster-size", default="64k", choices=("64k", "128k", "1M", "2M"))
    ap.add_argument("--cache", default="none", choices=("none", "writeback"))
    ap.add_argument("--runs", type=int, default=8, help="runs per cell (fixed: min = max)")
    ap.add_argument("--runtime", type=float, default=2.0, help="seconds per run")
    ap.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where images go (default: a temporary directory)",
    )
    args = ap.parse_args()
    plan = plan_from_dict(
        {
            "name": "l2-cache-bench",
            "tier": ["blocklayer"],
            "format": ["qcow2"],
            "cache": [args.cache],
            "aio": ["io_uring"],
            "cluster_size": [args.cluster_size],
            "l2_cache": ["default", "whole-image"],
            "workloads": [WORKLOAD],
            "runtime": args.runtime,
            "null_ceiling": False,
            "repetitions": {"min": args.runs, "max": args.runs},
            "time_budget": "2h",
        },
        "bench",
    )
    load_before = os.getloadavg()[0]
    result, block = sweep_and_rank(plan, WORKLOAD, "iomatrix-l2-", args.workdir)
    head = (
        f"\n{datetime.date.today()} {platform.node()} {platform.release()}: block layer, qcow2 "
        f"cluster_size={args.cluster_size}, cache={args.cache}, io_uring, {WORKLOAD}, "
        f"{args.runtime:g} s × "
        f"{args.runs} runs per cell ({result.runs_done} done, {result.runs_failed} failed); load "
        f"{load_before:.2f} → {os.getloadavg()[0]:.2f}"
    )
    print(head)
    whole = (
        None
        if block is None
        else next((c for c in block.cells if "l2_cache=whole-image" in c), None)
    )
    if block is None or whole is None:
        print(
            "  whole-image did not run (pruned: see 'iomatrix plan --explain'): nothing to compare"
        )
        return 1
    default = next(label for label in block.cells if label != whole)
    a, b = block.cells[whole].samples[block.metric], block.cells[default].samples[block.metric]
    r = ratio_ci(a, b)
    decision = block.decision
    settled = (
        decision is not None
        and decision.kind == "single"
        and decision.answer == whole
        and default in decision.separated
    )
    print(f"  l2_cache=default:     {sum(b) / len(b):10.1f} {block.metric}  ({default})")
    print(f"  l2_cache=whole-image: {sum(a) / len(a):10.1f} {block.metric}  ({whole})")
    ci = "undefined" if r.low is None or r.high is None else f"[{r.low:.2f}, {r.high:.2f}]"
    print(
        f"  whole-image/default: {r.ratio:.2f}× (95% CI {ci}); rank: "
        f"{decision.kind if decision else 'none'} — "
        f"{decision.statement if decision else 'no decision'}"
    )
    print(f"  whole-image settled as faster: {'yes' if settled else 'NO'}")
    return 0 if settled else 1


if __name__ == "__main__":
    sys.exit(main())
