"""Real-guest benchmark (not a test): the Debian image built here, from QEMU's start to its agent
answering; and the `real-guest` plan end to end, with the boots its guest runs share.

    python bench/real_guest_boot.py [-n 3] [--accel tcg|kvm] [--memory 1024]
    python bench/real_guest_boot.py --plan [--db PATH]     # iomatrix run real-guest, timed
    python bench/real_guest_boot.py --summarise PATH      # the same figures of a finished sweep

Boots: builds the image first if it is not cached (`iomatrix guest build debian`: root, minutes;
its time is printed apart). Each boot: a fresh overlay, a 64 MiB raw disk under test on
virtio-blk with 2 queues, `guest-ping` answered (boot), then `nproc` through guest-exec (a first
command's round trip). Prints each boot and the median.

--plan: `iomatrix run real-guest` in a child process (Ctrl-C stops it as it stops the CLI: the
finished runs are kept and summarised; from a script, whose background jobs ignore SIGINT, send
the `iomatrix` child SIGTERM), the load average sampled every 30 s. Prints the plan's
estimate, the wall, then from the database: boots, runs, runs per boot, QEMU's start to the agent
(each boot), the first run's wall with its boot and the later runs' wall in the same boot."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

PLAN = "real-guest"


def boots(n: int, accel: str, memory: int) -> None:
    from iomatrix.guest.debian_image import cached_image, ensure_debian_image
    from iomatrix.guest.realboot import boot, disk_view
    from iomatrix.images import create_image
    from iomatrix.qemu_block import DiskSpec

    t0 = time.monotonic()
    was_cached = cached_image() is not None
    image = ensure_debian_image(log=print)
    print(
        f"image: {image.qcow2} ({image.distribution}, kernel {image.kernel_version}); "
        f"{'cached' if was_cached else f'built in {time.monotonic() - t0:.0f} s'}"
    )
    boot_s: list[float] = []
    for i in range(n):
        with tempfile.TemporaryDirectory(prefix="iomx-bench-") as tmp:
            disk_img = Path(tmp) / "disk.raw"
            create_image(disk_img, "raw", "off", 64 << 20)
            disk = DiskSpec(
                str(disk_img), "raw", "none", "threads", "virtio-blk", more={"queues": "2"}
            )
            with boot(image.boot_image(), Path(tmp) / "run", [disk], accel, memory) as guest:
                t1 = time.monotonic()
                view = disk_view(guest)
                first = time.monotonic() - t1
                boot_s.append(guest.boot_s)
                print(
                    f"boot {i + 1}: agent answered after {guest.boot_s:.1f} s; disk view "
                    f"in {first:.2f} s "
                    f"({view['name']}, {view['queues']} queues, scheduler {view['scheduler']})"
                )
    print(f"median boot to agent: {statistics.median(boot_s):.1f} s over {n} boots ({accel})")


def plan_estimate() -> str:
    """What `iomatrix plan real-guest` estimates: with shared boots, and with one boot per run."""
    from iomatrix.commands.common import load_plan
    from iomatrix.matrix import estimate_seconds
    from iomatrix.sweep.expansion import plan_expansion

    p, base = load_plan(PLAN)
    exp = plan_expansion(p, base, set())
    shared, _ = estimate_seconds(p, exp)
    unshared, _ = estimate_seconds(p, exp, batching=False)
    return (
        f"{shared / 60:.1f} min ({p.start_rounds_per_boot} rounds per boot; one boot per run "
        f"{unshared / 60:.1f} min)"
    )


class LoadSampler(threading.Thread):
    """The 1-minute load average every `period` seconds while the sweep runs: the host is shared,
    and a TCG guest's wall follows the load."""

    def __init__(self, period: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.period, self.samples = period, []  # type: ignore[var-annotated]
        self.stop = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self.stop.wait(self.period):
                return


def run_plan(db: Path) -> float | None:
    """`iomatrix run real-guest` into `db`; its wall in seconds (None: it did not end cleanly)."""
    iomatrix = Path(sys.executable).with_name("iomatrix")
    sampler = LoadSampler()
    sampler.start()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="iomx-bench-") as work:
        cmd = [str(iomatrix), "run", PLAN, "--db", str(db), "--workdir", work]
        proc = subprocess.Popen(cmd)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:  # the child had it too (same process group): let it stop
            rc = proc.wait()
    wall = time.monotonic() - t0
    sampler.stop.set()
    sampler.join()
    load = sampler.samples
    print(
        f"wall {wall / 60:.1f} min (exit {rc}); load average (1 min) {min(load):.1f}–"
        f"{max(load):.1f}, median {statistics.median(load):.1f} over {len(load)} samples"
    )
    return wall if rc == 0 else None


def summarise(db: Path) -> None:
    """The sweep's figures from its database: wall, boots, runs per boot, boot to agent, runs'
    wall by position in their boot."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    started, finished, status = con.execute(
        "SELECT started_at, finished_at, status FROM sweeps ORDER BY id DESC LIMIT 1"
    ).fetchone()
    rows = con.execute(
        "SELECT c.tier, r.status, r.boot_id, r.boot_position, r.phases_json, r.meta_json,"
        " r.finished_at, r.disturbed, r.retry_of FROM runs r JOIN cells c ON c.id = r.cell_id"
        " ORDER BY r.id"
    ).fetchall()
    last = max((r[6] for r in rows if r[6] is not None), default=started)
    wall = (finished or last) - started
    until = "its end" if finished else "its last run"
    print(f"sweep {status}: {wall / 60:.1f} min from its start to {until}")
    by_tier: dict[str, list[tuple[str, bool, bool]]] = defaultdict(list)
    for tier, st, *_, disturbed, retry_of in rows:
        by_tier[tier].append((st, bool(disturbed), retry_of is not None))
    for tier, runs in sorted(by_tier.items()):
        print(
            f"  {tier}: {len(runs)} runs, {sum(r[0] == 'ok' for r in runs)} ok, "
            f"{sum(r[1] for r in runs)} flagged disturbed, {sum(r[2] for r in runs)} retries"
        )
    guest = [r for r in rows if r[0] != "blocklayer"]
    per_boot: dict[str, list[tuple[int, dict, dict]]] = defaultdict(list)
    unshared = 0
    images: set[tuple[str, str]] = set()
    for _, st, boot_id, pos, phases, meta, *_ in guest:
        m = json.loads(meta or "{}")
        if gi := m.get("guest_image"):
            images.add((gi.get("image", ""), gi.get("image_sha256", "")))
        if boot_id is None:  # a run booted alone (run_real): a boot of its own, position 0
            unshared += 1
            boot_id, pos = f"alone-{unshared}", 0
        per_boot[boot_id].append((pos, json.loads(phases or "{}") | {"status": st}, m))
    for path, digest in sorted(images):
        print(f"  guest image: {path} (sha256 {digest})")
    n_runs = sum(len(v) for v in per_boot.values())
    print(
        f"guest: {len(per_boot)} boots, {n_runs} runs in them ({unshared} booted alone, "
        "without a boot_id), "
        f"runs per boot {sorted(len(v) for v in per_boot.values())}"
    )
    to_agent, first, later = [], [], []
    for runs in per_boot.values():
        for pos, ph, _ in sorted(runs, key=lambda r: r[0]):
            if "wall_s" not in ph:
                continue  # a failed run: no phases
            if pos == 0:
                to_agent.append(ph["boot_s"])
                first.append(ph["wall_s"])
            else:
                later.append(ph["wall_s"])

    def span(xs: list[float]) -> str:
        if not xs:
            return "none"
        return f"median {statistics.median(xs):.1f} s ({min(xs):.1f}–{max(xs):.1f}, n={len(xs)})"

    print(f"  QEMU's start to the agent: {span(to_agent)}")
    print(f"  first run in its boot, wall with the boot: {span(first)}")
    print(f"  later runs in the same boot, wall: {span(later)}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", type=int, default=3, help="boots")
    ap.add_argument("--accel", default="tcg", choices=("tcg", "kvm"))
    ap.add_argument("--memory", type=int, default=1024, help="guest memory, MiB")
    ap.add_argument("--plan", action="store_true", help="run the real-guest plan end to end")
    ap.add_argument("--db", type=Path, help="--plan: the results database (default: a temporary)")
    ap.add_argument("--summarise", type=Path, metavar="DB", help="a finished sweep's figures")
    args = ap.parse_args()
    if args.summarise:
        print(f"plan estimate now: {plan_estimate()}")
        summarise(args.summarise)
    elif args.plan:
        print(f"plan estimate: {plan_estimate()}")
        with tempfile.TemporaryDirectory(prefix="iomx-bench-db-") as tmp:
            db = args.db or Path(tmp) / "rg.sqlite"
            run_plan(db)
            summarise(db)
    else:
        boots(args.n, args.accel, args.memory)


if __name__ == "__main__":
    main()
