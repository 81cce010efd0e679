"""Issue 2 benchmark: one fio job standalone vs the same job through iomatrix.

Pairs are interleaved (standalone, iomatrix, standalone, iomatrix, …) so drift
of the machine hits both sides alike. Prints the ratio of their results
(target: within ±5%) and iomatrix's own overhead per run: the wall time of a
run as the runner records it minus the fio process's own wall time
(target: < 0.5 s). Both sides drop the page cache first when root.

    python bench/baremetal_overhead.py [--pairs 8] [--workload rand-read-4k] [--runtime 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iomatrix import workloads as wl
from iomatrix.fio.jobs import JobShape, baremetal_job
from iomatrix.fio.parse import extract_json, report_metrics
from iomatrix.hygiene import prepare_cache
from iomatrix.plan.load import plan_from_dict
from iomatrix.runner import RunOptions, SweepRunner
from iomatrix.store import Store


def standalone(job_text: str, scratch: Path) -> tuple[float, float]:
    """(primary metric, fio wall seconds) of plain fio on the same job file."""
    prepare_cache(keep_warm=False)
    job = scratch / "standalone.fio"
    job.write_text(job_text)
    t0 = time.monotonic()
    out = subprocess.run(
        ["fio", "--output-format=json", str(job)], check=True, capture_output=True, text=True
    )
    wall = time.monotonic() - t0
    Path(scratch / "standalone.dat").unlink(missing_ok=True)
    return report_metrics(extract_json(out.stdout)), wall


def through_iomatrix(plan_data: dict, scratch: Path, i: int) -> tuple[dict, float, float]:
    """(metrics, whole one-run sweep wall, fio wall) through the sweep runner.

    The sweep's wall includes everything iomatrix does around fio: plan
    expansion, host metadata, backing set-up and teardown, cache drop, the
    sampler, the SQLite commit — an upper bound on its per-run overhead.
    """
    plan = plan_from_dict({**plan_data, "name": f"bench-{i}"}, "bench")
    store = Store(scratch / "bench.sqlite")
    t0 = time.monotonic()
    SweepRunner(plan, None, store, RunOptions(workdir=scratch / "work")).run()
    sweep_wall = time.monotonic() - t0
    row = store.db.execute(
        "SELECT r.id, r.wall_s, r.phases_json FROM runs r ORDER BY r.id DESC LIMIT 1"
    ).fetchone()
    metrics = {
        m: v
        for m, v in store.db.execute("SELECT metric, value FROM samples WHERE run_id=?", (row[0],))
    }
    store.close()
    return metrics, sweep_wall, float(json.loads(row[2])["wall_s"])


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--workload", default="rand-read-4k")
    ap.add_argument("--cache", default="none")
    ap.add_argument("--runtime", type=float, default=2.0)
    ap.add_argument("--size", default="64M")
    args = ap.parse_args()
    w = wl.resolve(args.workload)
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-", dir=os.getcwd()) as tmp:
        scratch = Path(tmp)
        plan_data = {
            "tier": ["baremetal"],
            "cache": [args.cache],
            "workloads": [args.workload],
            "size": args.size,
            "runtime": args.runtime,
            "repetitions": {"min": 1, "max": 1},
        }
        shape = JobShape(
            size_bytes=plan_from_dict({**plan_data, "name": "x"}, "bench").size_bytes,
            runtime_s=args.runtime,
        )
        job_text = baremetal_job(
            w, cache=args.cache, aio="threads", target=str(scratch / "standalone.dat"), shape=shape
        )
        plain, mine, overhead = [], [], []
        for i in range(args.pairs):
            m, _ = standalone(job_text, scratch)
            plain.append(m[w.primary_metric])
            mm, sweep_wall, fio_wall = through_iomatrix(plan_data, scratch, i)
            mine.append(mm[w.primary_metric])
            overhead.append(sweep_wall - fio_wall)
            print(
                f"pair {i + 1}: standalone {plain[-1]:,.0f}  iomatrix {mine[-1]:,.0f}  "
                f"overhead {overhead[-1]:.3f} s",
                flush=True,
            )
    ratio = statistics.mean(mine) / statistics.mean(plain)
    print(
        f"\nworkload {args.workload}, cache={args.cache}, {args.pairs} interleaved "
        f"pairs, {w.primary_metric}"
    )
    print(f"standalone fio: mean {statistics.mean(plain):,.1f} (sd {statistics.stdev(plain):,.1f})")
    print(f"through iomatrix: mean {statistics.mean(mine):,.1f} (sd {statistics.stdev(mine):,.1f})")
    print(f"ratio iomatrix/standalone: {ratio:.3f} ({(ratio - 1) * 100:+.1f}%; target within ±5%)")
    print(
        f"iomatrix overhead per run: mean {statistics.mean(overhead):.3f} s, max "
        f"{max(overhead):.3f} s "
        "(target < 0.5 s; a whole one-run sweep minus fio's own wall)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
