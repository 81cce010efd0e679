"""Durability trial benchmark: the time of one cut trial, and the default plan's projected time (not
a test).

    python bench/durability_trial.py [-n 5] [--accel tcg|kvm] [--plan durability] [--fs ext4|xfs]

Runs N trials of each of a few configurations (boot, mkfs, write until the cut, power loss + QEMU
crash, verification) through the real tier and prints the wall time per trial (target ≤ 8 s under
TCG) with its phases, then projects the plan's time as trials × the median trial wall (the tier's
whole `run`: images, nbdkit, boot, cut, verification, cleanup; the runner's own per-run work —
dropping the host caches, storing the run — is not included) (target ≤ 25 min for the built-in
`durability` plan). `--fs` picks the guest filesystem of the file streams (the workload durability
or durability-xfs)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from iomatrix.fio.jobs import JobShape
from iomatrix.hygiene import modifier_wrapper
from iomatrix.matrix import Cell
from iomatrix.plan.load import load_plan
from iomatrix.runner import plan_expansion
from iomatrix.tiers.base import RunOptions, RunRequest, Target
from iomatrix.tiers.durability import LAYOUTS, DurabilityTier
from iomatrix.workloads import resolve

CONFIGS = [("raw", "none"), ("qcow2", "writeback"), ("raw", "unsafe"), ("qcow2", "directsync")]


def _q(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):5.2f} s  min {min(values):5.2f}  max {max(values):5.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="trials per configuration (default 5)")
    ap.add_argument("--accel", choices=["kvm", "tcg", "auto"], default="auto")
    ap.add_argument(
        "--plan", default="durability", help="plan whose time is projected (default durability)"
    )
    ap.add_argument(
        "--fs",
        choices=sorted({lay.fs for lay in LAYOUTS.values()}),
        default="ext4",
        help="guest filesystem of the file streams (default ext4)",
    )
    args = ap.parse_args()
    workload = next(name for name, lay in LAYOUTS.items() if lay.fs == args.fs)

    plan, base = load_plan(args.plan)
    work = Path(tempfile.mkdtemp(prefix="iomx-bench-dur-"))
    tier = DurabilityTier(plan, RunOptions(workdir=work, accel=args.accel))
    tier.open()
    load = Path("/proc/loadavg").read_text().strip()
    print(
        f"{tier.describe()}\nmeasuring {workload} (guest {args.fs}); /proc/loadavg at "
        f"the start: {load}"
    )
    walls: list[float] = []
    gaps: list[float] = []
    phases: dict[str, list[float]] = {}
    failed = 0
    try:
        for fmt, cache in CONFIGS:
            cell = Cell.of(
                tier="durability",
                format=fmt,
                preallocation="off",
                cache=cache,
                aio="threads",
                bus="virtio-blk",
                backing="dir",
                modifier="none",
            )
            for _ in range(args.n):
                req = RunRequest(
                    cell=cell,
                    workload=resolve(workload),
                    target=Target("dir", work / "img"),
                    shape=JobShape(1, 1, 0),
                    run_dir=work / "runs",
                    timeout_s=120,
                    wrapper=modifier_wrapper("none"),
                )
                t0 = time.monotonic()
                out = tier.run(req)
                wall = time.monotonic() - t0
                if not out.ok:
                    failed += 1
                    print(f"  {fmt}/{cache}: FAILED {out.error}")
                    continue
                walls.append(wall)
                gaps.append(max(0.0, wall - out.phases.get("wall_s", wall)))
                for k, v in out.phases.items():
                    phases.setdefault(k, []).append(v)
                marks = out.meta.get("guest_marks", {})
                # both mkfs and mounts, inside boot_to_workload
                if "disks" in marks and "filesystems" in marks:
                    phases.setdefault("guest_mkfs_s", []).append(
                        marks["filesystems"] - marks["disks"]
                    )
                print(
                    f"  {fmt}/{cache}/{args.fs}: {wall:5.2f} s  power-loss acked lost "
                    f"{out.metrics['power_loss.acked_lost']:.0f}, QEMU-crash acked lost "
                    f"{out.metrics['qemu_crash.acked_lost']:.0f}, fs clean "
                    f"{out.metrics['power_loss.fs_clean']:.0f}/"
                    f"{out.metrics['qemu_crash.fs_clean']:.0f}, load {os.getloadavg()[0]:.1f}"
                )
    finally:
        tier.close()
        shutil.rmtree(work, ignore_errors=True)
    if not walls:
        raise SystemExit("no trial completed")
    print(f"\none trial, wall (target ≤ 8 s): {_q(walls)}   ({len(walls)} ok, {failed} failed)")
    for k in ("boot_to_workload_s", "guest_mkfs_s", "writing_s", "verify_s"):
        if k in phases:
            print(f"  {k:<20} {_q(phases[k])}")
    print(f"  images, nbdkit, cleanup (wall − trial) {_q(gaps)}")
    exp = plan_expansion(plan, base, set())
    trials = len(exp.units) * plan.cuts
    per = statistics.median(walls)
    print(
        f"\nplan {plan.name}: {len(exp.units)} configurations × {plan.cuts} cuts = "
        f"{trials} trials; "
        f"projected {trials * per / 60:.1f} min at the median trial, "
        f"{trials * max(walls) / 60:.1f} min at the "
        f"slowest (target ≤ 25 min)"
    )


if __name__ == "__main__":
    main()
