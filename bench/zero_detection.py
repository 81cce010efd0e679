"""Issue 24 benchmark: QEMU's zero detection on zero-filled writes, in the block-layer tier.

Runs the block layer (qemu-storage-daemon + fio over NBD) with ``detect_zeroes`` off and on, on
``seq-write-zeroes-1m-first`` (sequential 1 MiB writes of zero-filled buffers across a fresh 16 GiB
thin image of its own, a new one per run: first writes of zeros, what a guest zeroing a new disk
does, and what issue 24 measured: one pass over fresh space), a fixed number of runs each in
randomised rounds, beside the tier's null-co ceiling (the same writes with no disk: what the NBD
transport alone can carry). Then it ranks the two cells as ``iomatrix rank`` does and prints each
cell's mean, the ratio on/off with its 95% CI (Fieller), whether the ranking settles the difference
(one answer, the other cell separated), and the most this tier can show here: ``on`` cannot go
faster than the ceiling, so on/off is bounded by ceiling/off. Target: on ≥ 2× faster than off,
settled.

    python bench/zero_detection.py [--format qcow2] [--runs 8] [--runtime 2] [--workdir DIR]
    python bench/zero_detection.py --rewrites [--size-mib 1024]   # seq-write-zeroes-1m on a region that wraps

``--rewrites`` runs ``seq-write-zeroes-1m`` on a region of ``--size-mib`` instead: a 2 s run passes
over 1 GiB two or three times and its later passes rewrite clusters the first pass already wrote (or
already made zero clusters): a different workload, with a smaller gap (1 GiB: qcow2 1.72×, raw 1.60×
on a quiet host; docs/benchmarks-history.md, "Issue 24: zero detection in the block layer")."""  # noqa: E501

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

from blocklayer_sweep import sweep_and_rank
from iomatrix.plan.load import plan_from_dict
from iomatrix.stats.compare import ratio_ci

FIRST_WRITES = "seq-write-zeroes-1m-first"
REWRITES = "seq-write-zeroes-1m"
TARGET_RATIO = 2.0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--format", default="qcow2", choices=("qcow2", "raw"))
    ap.add_argument("--runs", type=int, default=8, help="runs per cell (fixed: min = max)")
    ap.add_argument("--runtime", type=float, default=2.0, help="seconds per run")
    ap.add_argument(
        "--rewrites",
        action="store_true",
        help=f"run {REWRITES} on a region of --size-mib (wraps around) instead of {FIRST_WRITES}",
    )
    ap.add_argument(
        "--size-mib",
        type=int,
        default=1024,
        help="with --rewrites: the region written, MiB (the image is twice that, thin)",
    )
    ap.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where images go (default: a temporary directory)",
    )
    args = ap.parse_args()
    workload = REWRITES if args.rewrites else FIRST_WRITES
    plan = plan_from_dict(
        {
            "name": "zero-detection-bench",
            "tier": ["blocklayer"],
            "format": [args.format],
            "cache": ["none"],
            "detect_zeroes": ["off", "on"],
            "workloads": [workload],
            "size": f"{args.size_mib}M",
            "image_size": f"{2 * args.size_mib}M",
            "runtime": args.runtime,
            "null_ceiling": True,
            "repetitions": {"min": args.runs, "max": args.runs},
            "time_budget": "2h",
        },
        "bench",
    )
    result, block = sweep_and_rank(plan, workload, "iomatrix-zeroes-", args.workdir)
    if block is None:
        print(
            f"no block-layer ranking of {workload}: no run of it succeeded "
            f"({result.runs_failed} failed)",
            file=sys.stderr,
        )
        return 1
    on = next(label for label in block.cells if "detect_zeroes=on" in label)
    off = next(label for label in block.cells if label != on)
    a, b = block.cells[on].samples[block.metric], block.cells[off].samples[block.metric]
    r = ratio_ci(a, b)
    decision = block.decision
    settled = (
        decision is not None
        and decision.kind == "single"
        and decision.answer == on
        and off in decision.separated
    )
    region = f"{args.size_mib} MiB region" if args.rewrites else "its own fresh image per run"
    print(
        f"\n{datetime.date.today()} {platform.node()} {platform.release()}: block layer, "
        f"{args.format}, cache=none, "
        f"{workload}, {region}, {args.runtime:g} s × {args.runs} runs per cell "
        f"({result.runs_done} done, {result.runs_failed} failed)"
    )
    print(f"  detect_zeroes=off: {sum(b) / len(b):8.1f} {block.metric}  ({off})")
    print(f"  detect_zeroes=on:  {sum(a) / len(a):8.1f} {block.metric}  ({on})")
    for _cw, mean in block.ceiling:
        # on/off cannot exceed ceiling/off: 'on' still carries every zero byte over NBD before QEMU
        # sees it.
        print(
            f"  null-co ceiling: {mean:8.1f} {block.metric}  (the transport alone; on reaches "
            f"{sum(a) / len(a) / mean:.0%} of it; the most on/off can be here: "
            f"{mean / (sum(b) / len(b)):.2f}×)"
        )
    ci = "undefined" if r.low is None or r.high is None else f"[{r.low:.2f}, {r.high:.2f}]"
    print(
        f"  on/off: {r.ratio:.2f}× (95% CI {ci}); rank: {decision.kind if decision else 'none'} — "
        f"{decision.statement if decision else 'no decision'}"
    )
    met = r.ratio is not None and r.ratio >= TARGET_RATIO and settled
    strict = r.low is not None and r.low >= TARGET_RATIO
    bound = (
        f"its CI's lower bound also clears {TARGET_RATIO:g}×"
        if strict
        else f"on the point estimate only: its CI's lower bound does not clear {TARGET_RATIO:g}×"
    )
    print(
        f"  target (on ≥ {TARGET_RATIO:g}× off, ranked as settled): "
        f"{('met, ' + bound) if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
