"""Guest boot benchmark: boot-to-workload time and per-run overhead (not a test).

    python bench/guest_boot.py [-n 5] [--accel tcg|kvm] [--cache-dir DIR]

Boots N guests with a trivial job and prints boot-to-workload (median/min/max; target ≤ 2.5 s under
TCG), then runs N short real fio jobs (virtio-blk, qcow2, cache=none) and prints the per-run
overhead = wall − workload (target ≤ 3 s).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from iomatrix.guest.accel import choose_accel
from iomatrix.guest.artifacts import ensure_artifacts
from iomatrix.guest.images import create_image
from iomatrix.guest.qemu import GuestJob, run_guest
from iomatrix.qemu_block import DiskSpec

FIO_JOB = """[bench]
filename=@DISK@
rw=randwrite
bs=4k
direct=1
ioengine=psync
size=64m
runtime=1
time_based=1
"""


def _summary(name: str, values: list[float]) -> str:
    return (f"{name:<24} median {statistics.median(values):6.2f} s   min {min(values):6.2f} s   "
            f"max {max(values):6.2f} s   (n={len(values)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="guests per measurement (default 5)")
    ap.add_argument("--accel", choices=["kvm", "tcg"], default=None, help="skip the KVM probe")
    ap.add_argument("--cache-dir", type=Path, default=None)
    args = ap.parse_args()

    t0 = time.monotonic()
    art = ensure_artifacts(args.cache_dir, log=lambda m: print(f"  [artifacts] {m}"))
    print(f"artifacts: {time.monotonic() - t0:.1f} s; kernel {art.kernel_version}; initramfs "
          f"{art.initramfs_bytes / 1e6:.1f} MB ({art.compression}); {art.fio_source}")
    accel = choose_accel(art, force=args.accel, cache_dir=args.cache_dir)
    print(f"accelerator: {accel.accel} — {accel.reason}")
    if accel.warning:
        print(f"note: {accel.warning}")

    work = Path(tempfile.mkdtemp(prefix="iomx-bench-"))
    try:
        boots, starts, inits = [], [], []
        for i in range(args.n):
            out = run_guest(art, accel.accel, None, GuestJob(kind="boot"), work / f"boot{i}", timeout=60)
            if not out.ok:
                print(f"boot {i} failed: {out.error}\n{out.console_tail}")
                continue
            boots.append(out.phases["boot_to_workload_s"])
            starts.append(out.phases["qemu_start_s"])
            inits.append(out.phases["guest_init_s"])
        if boots:
            print(_summary("qemu start", starts))
            print(_summary("guest kernel → /init", inits))
            print(_summary("boot to workload", boots) + "   target ≤ 2.5 s (TCG)")

        img = work / "disk.qcow2"
        overheads, workloads, walls = [], [], []
        for i in range(args.n):
            img.unlink(missing_ok=True)
            create_image(img, "qcow2", "off", 256 << 20)
            disk = DiskSpec(str(img), "qcow2", "none", "threads", "virtio-blk")
            out = run_guest(art, accel.accel, disk, GuestJob(kind="fio", fio_job=FIO_JOB), work / f"fio{i}",
                            timeout=120)
            if not out.ok:
                print(f"fio run {i} failed: {out.error}\n{out.console_tail}")
                continue
            walls.append(out.phases["wall_s"])
            workloads.append(out.phases["workload_s"])
            overheads.append(out.phases["wall_s"] - out.phases["workload_s"])
        if overheads:
            print(_summary("fio wall", walls))
            print(_summary("fio workload", workloads))
            print(_summary("overhead (wall−workload)", overheads) + "   target ≤ 3 s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
