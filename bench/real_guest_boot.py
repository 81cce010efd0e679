"""Real-guest boot benchmark: the Debian image built here, from QEMU's start to its agent answering
(not a test).

    python bench/real_guest_boot.py [-n 3] [--accel tcg|kvm] [--memory 1024]

Builds the image first if it is not cached (`iomatrix guest build debian`: root, minutes; its time
is printed apart). Each boot: a fresh overlay, a 64 MiB raw disk under test on virtio-blk with 2
queues, `guest-ping` answered (boot), then `nproc` through guest-exec (a first command's round
trip). Prints each boot and the median."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from iomatrix.guest.debian_image import cached_image, ensure_debian_image
from iomatrix.guest.realboot import boot, disk_view
from iomatrix.images import create_image
from iomatrix.qemu_block import DiskSpec


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", type=int, default=3, help="boots")
    ap.add_argument("--accel", default="tcg", choices=("tcg", "kvm"))
    ap.add_argument("--memory", type=int, default=1024, help="guest memory, MiB")
    args = ap.parse_args()
    t0 = time.monotonic()
    was_cached = cached_image() is not None
    image = ensure_debian_image(log=print)
    print(
        f"image: {image.qcow2} ({image.distribution}, kernel {image.kernel_version}); "
        f"{'cached' if was_cached else f'built in {time.monotonic() - t0:.0f} s'}"
    )
    boots: list[float] = []
    for i in range(args.n):
        with tempfile.TemporaryDirectory(prefix="iomx-bench-") as tmp:
            disk_img = Path(tmp) / "disk.raw"
            create_image(disk_img, "raw", "off", 64 << 20)
            disk = DiskSpec(
                str(disk_img), "raw", "none", "threads", "virtio-blk", more={"queues": "2"}
            )
            with boot(
                image.boot_image(), Path(tmp) / "run", [disk], args.accel, args.memory
            ) as guest:
                t1 = time.monotonic()
                view = disk_view(guest)
                first = time.monotonic() - t1
                boots.append(guest.boot_s)
                print(
                    f"boot {i + 1}: agent answered after {guest.boot_s:.1f} s; disk view "
                    f"in {first:.2f} s "
                    f"({view['name']}, {view['queues']} queues, scheduler {view['scheduler']})"
                )
    print(
        f"median boot to agent: {statistics.median(boots):.1f} s over {len(boots)} boots "
        f"({args.accel})"
    )


if __name__ == "__main__":
    main()
