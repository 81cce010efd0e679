"""Issue 34 benchmark: an iSCSI LUN's write cache off vs on at queue depth 1, the null LUN's ceiling
beside it, and the round-trip time each emulated latency achieved, through the real runner
(`iomatrix run`: a lab-started tgtd on 127.0.0.1, qemu-storage-daemon opening the LUN with QEMU's
libiscsi driver, fio's nbd engine).

    python bench/shared_storage.py [--runs 6] [--runtime 2] [--rtt 0,0.5ms,2ms]

Two sweeps in a temporary directory:
1. block layer, raw, cache=none, rand-write-4k (queue depth 1): lun_type fileio with the LUN's write
   cache off and on, the null LUN (the iSCSI protocol's ceiling: nothing stored) and QEMU's null-co
   ceiling (the block layer and NBD alone), `--runs` rounds each. Prints per cell the mean IOPS with
   its 95% CI, qd1 latency and host CPU per I/O (qemu-storage-daemon + tgtd), then write cache on /
   off with its Fieller 95% CI.
2. the same fileio LUN (write cache on) behind the userspace delaying relay for each `--rtt`: per
   value the round-trip time requested, the one measured through the relay (mean over runs) and qd1
   write latency.

Target (issue 34): write cache on ≥ 2× off at queue depth 1, settled (the ratio's CI above 2 or at
    least
above 1 with the point estimate ≥ 2); the null LUN at or above both. The RTT rows have no target:
they say how closely the relay meets each request."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from iomatrix.stats.compare import ratio_ci
from iomatrix.stats.summary import summarize
from iomatrix.store.db import Store

TARGET_RATIO = 2.0
WORKLOAD = "rand-write-4k"


def plan_text(runs: int, runtime: float, rtts: list[str] | None) -> str:
    if rtts is None:  # the write-cache sweep
        axes = (
            'lun_type = ["null", "fileio"]\nlun_write_cache = ["off", "on"]\nnull_ceiling = true\n'
        )
    else:
        axes = (
            'lun_type = ["fileio"]\nlun_write_cache = ["on"]\nnull_ceiling = false\n'
            f"rtt = [{', '.join(json.dumps(r) for r in rtts)}]\n"
        )
    return f"""description = "bench: iSCSI LUN write cache / emulated RTT, block layer"
tier = ["blocklayer"]
format = ["raw"]
preallocation = ["off"]
cache = ["none"]
aio = ["threads"]
{axes}workloads = ["{WORKLOAD}"]
size = "64M"
image_size = "256M"
runtime = {runtime}
time_budget = "40m"

[repetitions]
min = {runs}
max = {runs}

[[backing]]
type = "iscsi"
"""


def write_cache_label(a: dict[str, str]) -> str:
    return (
        "null-co ceiling"
        if a["format"] == "null"
        else f"{a['lun_type']} LUN, write cache {a['lun_write_cache']}"
    )


def rtt_label(a: dict[str, str]) -> str:
    return f"rtt {a['rtt']}"


Runs = dict[str, list[dict[str, float]]]  # cell label → the metrics of its ok runs
Metas = dict[str, list[dict]]  # cell label → the meta of its ok runs


def sweep(
    scratch: Path, name: str, text: str, label_of: Callable[[dict[str, str]], str]
) -> tuple[Runs, Metas]:
    """Run one plan; (cell label → metrics of its ok runs, cell label → meta of its ok runs)."""
    plan = scratch / f"{name}.toml"
    plan.write_text(text)
    db = scratch / f"{name}.sqlite"
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
    print(
        f"{name} sweep took {time.monotonic() - t0:.0f} s, exit status {proc.returncode}",
        flush=True,
    )
    if proc.returncode not in (0, 3):
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(1)
    store = Store(db, read_only=True)
    (sweep_id,) = store.sweep_ids()[-1:]
    values: dict[int, dict[str, float]] = {}
    for smp in store.ok_samples(sweep_id):
        values.setdefault(smp.run_id, {})[smp.metric] = smp.value
    metas = {
        int(rid): json.loads(meta)
        for rid, meta in store.db.execute(
            "SELECT r.id, r.meta_json FROM runs r JOIN cells c ON c.id = r.cell_id WHERE "
            "c.sweep_id = ?",
            (sweep_id,),
        )
    }
    cells: Runs = {}
    meta: Metas = {}
    for r in store.runs(sweep_id):
        if r.status == "ok" and not r.replaced:
            label = label_of(r.axes)
            cells.setdefault(label, []).append(values.get(r.run_id, {}))
            meta.setdefault(label, []).append(metas.get(r.run_id, {}))
    store.close()
    return cells, meta


def _mean_ci(xs: list[float]) -> str:
    s = summarize(xs)
    if s.ci_low is None or s.ci_high is None:
        return f"{s.mean:>8.0f} {'':>15}"
    return f"{s.mean:>8.0f} {f'{s.ci_low:.0f}–{s.ci_high:.0f}':>15}"


def write_cache_table(
    cells: dict[str, list[dict[str, float]]], meta: dict[str, list[dict]]
) -> bool:
    print(
        f"\n{WORKLOAD} (queue depth 1), raw, cache=none, block layer over libiscsi → "
        "tgtd on 127.0.0.1"
    )
    print(
        f"{'cell':<30} {'runs':>4} {'IOPS':>8} {'95% CI':>15} {'lat µs':>8} "
        f"{'CPU µs/IO':>10}  counted"
    )
    for label in (
        "fileio LUN, write cache off",
        "fileio LUN, write cache on",
        "null LUN, write cache off",
        "null-co ceiling",
    ):
        runs = cells.get(label, [])
        if not runs:
            print(f"{label:<30} (no ok runs)")
            continue
        lat = summarize([m["write.clat_mean_us"] for m in runs if "write.clat_mean_us" in m]).mean
        cpu = [m["cost.cpu_us_per_io"] for m in runs if "cost.cpu_us_per_io" in m]
        counted = sorted(
            {
                f"{p['name']}"
                for m in meta.get(label, [])
                for p in m.get("processes", [])
                if p.get("role") in ("io", "server")
            }
        )
        print(
            f"{label:<30} {len(runs):>4} {_mean_ci([m['total.iops'] for m in runs])} {lat:>8.0f} "
            f"{summarize(cpu).mean if cpu else float('nan'):>10.1f}  {', '.join(counted)}"
        )
    off = [m["total.iops"] for m in cells.get("fileio LUN, write cache off", [])]
    on = [m["total.iops"] for m in cells.get("fileio LUN, write cache on", [])]
    if len(off) < 2 or len(on) < 2:
        print("write cache on / off: fewer than 2 runs on a side")
        return False
    r = ratio_ci(on, off)
    ci = "undefined" if r.low is None or r.high is None else f"{r.low:.2f}–{r.high:.2f}"
    settled = r.low is not None and r.low > 1
    met = settled and r.ratio is not None and r.ratio >= TARGET_RATIO
    print(
        f"write cache on / off: {r.ratio:.2f}× (95% CI {ci}) -> target ≥ "
        f"{TARGET_RATIO:g}× settled: "
        f"{'met' if met else 'MISSED'}"
    )
    return met


def rtt_table(meta: dict[str, list[dict]], cells: dict[str, list[dict[str, float]]]) -> None:
    print(
        "\nemulated round-trip time (userspace relay between libiscsi and tgtd), fileio "
        "LUN write cache on, "
        f"{WORKLOAD} qd1"
    )
    print(
        f"{'rtt':<10} {'runs':>4} {'requested ms':>13} {'measured ms':>12} "
        f"{'method':<22} {'lat µs':>8} {'IOPS':>8}"
    )
    for label in sorted(
        meta, key=lambda k: float(meta[k][0].get("rtt_requested_ms", 0) if meta[k] else 0)
    ):
        ms = [m for m in meta[label] if "rtt_measured_ms" in m]
        if not ms:
            print(f"{label:<10} (no RTT recorded)")
            continue
        measured = summarize([float(m["rtt_measured_ms"]) for m in ms]).mean
        lat = summarize(
            [m["write.clat_mean_us"] for m in cells[label] if "write.clat_mean_us" in m]
        ).mean
        iops = summarize([m["total.iops"] for m in cells[label]]).mean
        print(
            f"{label:<10} {len(ms):>4} {float(ms[0]['rtt_requested_ms']):>13.3f} {measured:>12.3f} "
            f"{ms[0].get('rtt_method', '')!s:<22} {lat:>8.0f} {iops:>8.0f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=6, help="runs per cell (default 6)")
    ap.add_argument("--runtime", type=float, default=2.0, help="seconds per run (default 2)")
    ap.add_argument(
        "--rtt",
        default="0,0.5ms,2ms",
        help="emulated round-trip times (default 0,0.5ms,2ms; '' skips)",
    )
    args = ap.parse_args()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')} host {os.uname().nodename} cpus={os.cpu_count()} "
        f"load={Path('/proc/loadavg').read_text().split()[:3]}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="iomx-bench-ss-", dir="/tmp") as tmp:
        scratch = Path(tmp)
        cells, meta = sweep(
            scratch, "writecache", plan_text(args.runs, args.runtime, None), write_cache_label
        )
        met = write_cache_table(cells, meta)
        rtts = [r.strip() for r in args.rtt.split(",") if r.strip()]
        if rtts:
            cells, meta = sweep(scratch, "rtt", plan_text(args.runs, args.runtime, rtts), rtt_label)
            rtt_table(meta, cells)
    print(f"\nload at the end {Path('/proc/loadavg').read_text().split()[:3]}")
    return 0 if met else 3


if __name__ == "__main__":
    raise SystemExit(main())
