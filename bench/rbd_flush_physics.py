"""librbd's writethrough-until-flush trap, measured on a lab-started Ceph (issue 35): the physics
that tests/test_rbd_flush_finding.py used to assert on 3 runs of 1 s each (issue 67: a speed ratio
in a test failed a loaded CI; the test now checks the sweep's records and that it leaves nothing,
and the decision is tested on a captured database).

    python bench/rbd_flush_physics.py [--runs 3] [--runtime 1] [--workdir DIR]
    python bench/rbd_flush_physics.py --job-files [--runs 5]   # tests/test_findings_by_shape.py's

--job-files: two job files of tests/data/answers/ceph-custom-jobs (never.fio never flushes,
journal.fio flushes every 16 writes) under cache none and writeback, Ceph's defaults; targets:
writeback/none below 1.6 for never.fio, above 1.5 for journal.fio and 1.3 times never.fio's.

Runs the block layer on the lab Ceph (`[[backing]] type = "rbd"`, started and removed by iomatrix)
with cache none and writeback, rbd_cache_writethrough_until_flush on and off, on rand-write-4k
(never flushes) and rand-write-4k-flush32 (flushes every 32 writes), --runs each, and prints the
three writeback/none IOPS ratios. Targets (a quiet host: the never-flushing one measured 1.1-1.3,
the flushing one ~3.6, the option off ~6.5): flushing > 1.5, off > 2.0, and the never-flushing
ratio at least 1.4 times below both (the trap is told against the same sweep's other ratios, not
a fixed bound). Needs root, ceph-mon/ceph-osd and qemu-storage-daemon. Prints numbers; not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PLAN = """
tier = ["blocklayer"]
format = ["raw"]
cache = ["none", "writeback"]
rbd_cache_writethrough_until_flush = ["on", "off"]
workloads = ["rand-write-4k", "rand-write-4k-flush32"]
size = "32M"
image_size = "64M"
runtime = {runtime}
null_ceiling = false
[repetitions]
min = {runs}
max = {runs}
[[backing]]
type = "rbd"
"""


JOB_FILES_PLAN = """
tier = ["blocklayer"]
format = ["raw"]
cache = ["none", "writeback"]
workloads = ["file:never.fio", "file:journal.fio"]
size = "32M"
image_size = "64M"
runtime = {runtime}
null_ceiling = false
[repetitions]
min = {runs}
max = {runs}
[[backing]]
type = "rbd"
"""
JOBS = Path(__file__).resolve().parent.parent / "tests" / "data" / "answers" / "ceph-custom-jobs"


def iomatrix(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "iomatrix"
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per cell (min = max)")
    ap.add_argument("--runtime", type=float, default=1.0, help="seconds per run")
    ap.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    ap.add_argument("--job-files", action="store_true", help="the two job files' sweep instead")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="iomatrix-bench-rbd-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.job_files:
        return job_files(work, args.runs, args.runtime)
    (work / "p.toml").write_text(PLAN.format(runs=args.runs, runtime=args.runtime))
    run = iomatrix("run", "p.toml", "--db", "r.sqlite", cwd=work)
    if run.returncode != 0:
        print(run.stdout[-3000:] + run.stderr[-3000:], file=sys.stderr)
        return 1
    rows = json.loads(iomatrix("results", "--db", "r.sqlite", "--format", "json", cwd=work).stdout)
    iops = {}
    for r in rows["sweeps"][0]["results"]:
        if r["metric"] == "write.iops":
            a = r["axes"]
            key = (a["cache"], a.get("rbd_cache_writethrough_until_flush", "on"), r["workload"])
            iops[key] = r["mean"]
    flat = iops[("writeback", "on", "rand-write-4k")] / iops[("none", "on", "rand-write-4k")]
    flushing = (
        iops[("writeback", "on", "rand-write-4k-flush32")]
        / iops[("none", "on", "rand-write-4k-flush32")]
    )
    off = iops[("writeback", "off", "rand-write-4k")] / iops[("none", "on", "rand-write-4k")]
    met = flushing > 1.5 and off > 2.0 and flat * 1.4 < min(flushing, off)
    print(f"{args.runs} runs of {args.runtime:g} s per cell, in {work}")
    print(f"writeback/none, until-flush on, never flushing (rand-write-4k): {flat:.2f}x")
    print(f"writeback/none, until-flush on, flushing (rand-write-4k-flush32): {flushing:.2f}x")
    print(f"writeback with until-flush off / none, never flushing: {off:.2f}x")
    verdict = "met" if met else "missed"
    print(f"target (flushing > 1.5, off > 2.0, never-flushing 1.4x below both): {verdict}")
    return 0 if met else 1


def job_files(work: Path, runs: int, runtime: float) -> int:
    for name in ("never.fio", "journal.fio"):
        (work / name).write_text((JOBS / name).read_text())
    (work / "p.toml").write_text(JOB_FILES_PLAN.format(runs=runs, runtime=runtime))
    run = iomatrix("run", "p.toml", "--db", "r.sqlite", cwd=work)
    if run.returncode != 0:
        print(run.stdout[-3000:] + run.stderr[-3000:], file=sys.stderr)
        return 1
    rows = json.loads(iomatrix("results", "--db", "r.sqlite", "--format", "json", cwd=work).stdout)
    iops = {
        (r["axes"]["cache"], r["workload"]): r["median"]
        for r in rows["sweeps"][0]["results"]
        if r["metric"] == "total.iops"
    }
    never = iops[("writeback", "file:never.fio")] / iops[("none", "file:never.fio")]
    journal = iops[("writeback", "file:journal.fio")] / iops[("none", "file:journal.fio")]
    met = never < 1.6 and journal > 1.5 and journal > never * 1.3
    print(f"{runs} runs of {runtime:g} s per cell, in {work}")
    print(f"writeback/none (medians): never.fio {never:.2f}x, journal.fio {journal:.2f}x")
    verdict = "met" if met else "missed"
    print(f"target (never < 1.6, journal > 1.5 and > 1.3 x never): {verdict}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
