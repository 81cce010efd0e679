"""Guest boot benchmark: boot-to-workload, per-run overhead and harness efficiency (not a test).

    python bench/guest_boot.py [-n 5] [--accel tcg|kvm] [--cache-dir DIR] [--part boot|sweep|all]
                               [--runtime 5] [--reps 2] [--rounds-per-boot 2,auto] [--no-before] [--no-after]

boot:  N guests per machine type (pc, microvm) each running a 1 s fio job on a fresh qcow2 on
       virtio-blk: boot-to-workload (QEMU spawn → workload start, modules included; target ≤ 2.0 s
       median under TCG), and per-run overhead = wall − workload of a one-run boot.
sweep: real sweeps through the runner (store, host sampler and all): "before" = one pc boot per run
       (how the guest tier ran before runs shared boots), "after" = the runs of one cell share a
       boot each round (microvm for virtio buses), and "after, N rounds per boot"
       (`repetitions_per_boot`; `--rounds-per-boot auto`: chosen after each round from the measured
       variances and costs).
       Plans: the quick plan's guest cells shaped
       like the issue's measurement (qcow2 × none/writeback on virtio-blk + the null ceiling, 3 fio
       workloads, `--reps` rounds, runtime `--runtime`), and a slice of the built-in full-matrix-fs
       plan (raw/qcow2 × none/writeback × virtio-blk/ide, fs-read and fs-write). Reported:
         harness efficiency = completed runs × runtime ÷ sweep wall time (start-up included),
         workload share     = Σ measured workload seconds ÷ sweep wall time (fs jobs have no fixed runtime),
         overhead per run   = (wall − Σ workload) ÷ runs.
Targets (TCG, this host): overhead per run ≤ 1.0 s amortised, efficiency ≥ 85% at runtime 5 s.
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from iomatrix.guest.accel import choose_accel
from iomatrix.guest.artifacts import ensure_artifacts
from iomatrix.guest.job import GuestJob
from iomatrix.guest.process import run_guest
from iomatrix.images import create_image
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

QUICK_GUEST = """
tier = ["guest"]
format = ["qcow2"]
preallocation = ["off"]
cache = ["none", "writeback"]
aio = ["threads"]
bus = ["virtio-blk"]
workloads = ["rand-read-4k", "rand-write-4k", "seq-write-1m"]
size = "128M"
image_size = "512M"
runtime = {runtime}
run_timeout = 300
time_budget = "2h"
[repetitions]
min = {reps}
max = {reps}
[[backing]]
type = "dir"
"""

SEED_SHAPED = """
tier = ["guest"]
format = ["raw", "qcow2"]
preallocation = ["off"]
cache = ["none", "writeback"]
aio = ["threads"]
bus = ["virtio-blk", "ide"]
workloads = ["fs-read", "fs-write"]
guest_fs = "ext4"
image_size = "2G"
size = "256M"
runtime = {runtime}
run_timeout = 300
time_budget = "2h"
[repetitions]
min = 1
max = 1
[[backing]]
type = "dir"
"""


def _summary(name: str, values: list[float]) -> str:
    return (
        f"{name:<34} median {statistics.median(values):6.2f} s   min {min(values):6.2f} s   "
        f"max {max(values):6.2f} s   (n={len(values)})"
    )


def bench_boot(art, accel: str, n: int, work: Path) -> None:
    for machine in ("pc", "microvm"):
        boots, overheads, starts = [], [], []
        for i in range(n):
            img = work / f"{machine}{i}.qcow2"
            create_image(img, "qcow2", "off", 256 << 20)
            out = run_guest(
                art,
                accel,
                DiskSpec(str(img), "qcow2", "none", "threads", "virtio-blk"),
                GuestJob(kind="fio", fio_job=FIO_JOB),
                work / f"{machine}-run{i}",
                timeout=120,
                machine=machine,
            )
            img.unlink()
            if not out.ok:
                print(f"{machine} run {i} failed: {out.error}\n{out.console_tail}")
                continue
            boots.append(out.phases["boot_to_workload_s"])
            starts.append(out.phases["qemu_start_s"])
            overheads.append(out.phases["wall_s"] - out.phases["workload_s"])
        if boots:
            print(_summary(f"{machine}: qemu start", starts))
            print(
                _summary(f"{machine}: boot to workload", boots)
                + "   target ≤ 2.0 s (virtio-blk, TCG)"
            )
            print(_summary(f"{machine}: overhead of a one-run boot", overheads))


@contextmanager
def _one_boot_per_run() -> Iterator[None]:
    """The guest tier as it ran before runs shared boots: every run its own pc boot."""
    import iomatrix.tiers.guest as guest_tier

    saved = guest_tier.GuestTier.batches_runs, guest_tier.machine_for
    guest_tier.GuestTier.batches_runs = False
    guest_tier.machine_for = lambda bus: "pc"  # type: ignore[assignment]
    try:
        yield
    finally:
        guest_tier.GuestTier.batches_runs, guest_tier.machine_for = saved


def bench_sweep(
    name: str,
    toml: str,
    runtime: float,
    accel: str,
    work: Path,
    before: bool,
    rounds_per_boot: int | str = 1,
) -> dict:
    from iomatrix.plan.load import load_plan
    from iomatrix.runner import SweepRunner
    from iomatrix.store import Store
    from iomatrix.tiers.base import RunOptions

    label = "before (one pc boot per run)" if before else "after (runs of a cell share a boot)"
    if rounds_per_boot == "auto":
        label = 'after (rounds per boot chosen by the data: repetitions_per_boot = "auto")'
        toml = 'repetitions_per_boot = "auto"\n' + toml
    elif int(rounds_per_boot) > 1:
        label = f"after ({rounds_per_boot} rounds of a cell per boot)"
        toml = f"repetitions_per_boot = {rounds_per_boot}\n" + toml
    d = work / f"{name}-{'before' if before else 'after'}-{rounds_per_boot}"
    d.mkdir()
    (d / "p.toml").write_text(toml)
    plan, base = load_plan(str(d / "p.toml"))
    store = Store(d / "r.sqlite")
    t0, t0_wall = time.monotonic(), time.time()
    if before:
        with _one_boot_per_run():
            res = SweepRunner(plan, base, store, RunOptions(workdir=d / "work", accel=accel)).run()
    else:
        res = SweepRunner(plan, base, store, RunOptions(workdir=d / "work", accel=accel)).run()
    wall = time.monotonic() - t0
    end_wall = t0_wall + wall
    store.close()
    con = sqlite3.connect(d / "r.sqlite")
    rows = con.execute("SELECT status, phases_json, boot_id, meta_json FROM runs").fetchall()
    spans = con.execute("SELECT MIN(started_at), MAX(finished_at) FROM runs").fetchone()
    # Host-side time around each boot (image creation and removal), once per boot; the
    # rounds-per-boot choices in the order they were made.
    host: dict[str, dict] = {}
    choices: list[int] = []
    for r in rows:
        meta = json.loads(r[3] or "{}")
        if r[2] and "boot_host_s" in meta:
            host[r[2]] = {
                **meta["boot_host_s"],
                **{
                    k: v
                    for k, v in meta.get("boot_phases", {}).items()
                    if k in ("host_ready_s", "gate_wait_s")
                },
            }
        rpb = meta.get("rounds_per_boot")
        if rpb and (not choices or choices[-1] != rpb["rounds"]):
            choices.append(rpb["rounds"])
    ok = [json.loads(r[1]) for r in rows if r[0] == "ok"]
    boots = len({r[2] for r in rows if r[2]}) + sum(1 for r in rows if not r[2])
    work_s = sum(p.get("workload_s", 0.0) for p in ok)
    b2w = [p["boot_to_workload_s"] for p in ok if "boot_to_workload_s" in p]
    out = {
        "plan": name,
        "mode": label,
        "runs_ok": len(ok),
        "runs_failed": res.runs_failed,
        "boots": boots,
        "wall_s": round(wall, 1),
        "workload_s": round(work_s, 1),
        "efficiency": round(len(ok) * runtime / wall, 3),
        "workload_share": round(work_s / wall, 3),
        "overhead_per_run_s": round((wall - work_s) / max(1, len(ok)), 2),
        "boot_to_workload_median_s": round(statistics.median(b2w), 2) if b2w else None,
        "images_create_s": round(sum(h.get("images_create_s", 0.0) for h in host.values()), 2),
        # Removal of a boot's images overlaps the next boot (behind its gate, with sync + drop
        # caches: host_ready_s); gate_wait_s is how long guests waited for it.
        "images_remove_s": round(
            sum(
                h.get("images_remove_s") or h.get("previous_images_remove_s") or 0.0
                for h in host.values()
            ),
            2,
        ),
        "host_ready_s": round(sum(h.get("host_ready_s", 0.0) for h in host.values()), 2),
        "gate_wait_s": round(sum(h.get("gate_wait_s", 0.0) for h in host.values()), 2),
        "rounds_per_boot": choices,
        "load_avg_1m": _load(),
        # Where the sweep's wall went outside its runs: before the first run starts (tiers opened,
        # images, first boot) and after the last one ends (last clean-up, store, tiers closed).
        "before_first_run_s": round(spans[0] - t0_wall, 2) if spans[0] else None,
        "after_last_run_s": round(end_wall - spans[1], 2) if spans[1] else None,
    }
    print(json.dumps(out), flush=True)
    return out


def _load() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "-n", type=int, default=5, help="guests per machine type in the boot part (default 5)"
    )
    ap.add_argument("--accel", choices=["kvm", "tcg"], default=None, help="skip the KVM probe")
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--part", choices=["boot", "sweep", "all"], default="all")
    ap.add_argument(
        "--runtime", type=float, default=5.0, help="fio runtime of the sweeps (default 5 s)"
    )
    ap.add_argument(
        "--reps", type=int, default=2, help="rounds of the quick-shaped sweep (default 2)"
    )
    ap.add_argument(
        "--plans", default="quick-guest,seed-shaped", help="which sweeps, comma-separated"
    )
    ap.add_argument(
        "--rounds-per-boot",
        default="2",
        help="also run the sweeps with this many rounds per boot (in-boot repetition; 1 = skip), "
        "or 'auto' (chosen from the measured variances and costs)",
    )
    ap.add_argument(
        "--no-after",
        action="store_true",
        help="skip the one-round-per-boot sweeps (keep only --rounds-per-boot)",
    )
    ap.add_argument("--no-before", action="store_true", help="skip the one-boot-per-run sweeps")
    ap.add_argument(
        "--keep", action="store_true", help="keep the sweeps' databases and work directories"
    )
    args = ap.parse_args()

    t0 = time.monotonic()
    art = ensure_artifacts(args.cache_dir, log=lambda m: print(f"  [artifacts] {m}"))
    print(
        f"artifacts: {time.monotonic() - t0:.1f} s; kernel {art.kernel_version}; initramfs "
        f"{art.initramfs_bytes / 1e6:.1f} MB ({art.compression}); {art.fio_source}"
    )
    accel = choose_accel(art, force=args.accel, cache_dir=args.cache_dir)
    print(f"accelerator: {accel.accel} — {accel.reason}")

    work = Path(tempfile.mkdtemp(prefix="iomx-bench-"))
    try:
        if args.part in ("boot", "all"):
            bench_boot(art, accel.accel, args.n, work)
        if args.part in ("sweep", "all"):
            plans = {
                "quick-guest": QUICK_GUEST.format(runtime=int(args.runtime), reps=args.reps),
                "seed-shaped": SEED_SHAPED.format(runtime=int(args.runtime)),
            }
            for name in args.plans.split(","):
                if not args.no_before:
                    bench_sweep(name, plans[name], args.runtime, accel.accel, work, before=True)
                if not args.no_after:
                    bench_sweep(name, plans[name], args.runtime, accel.accel, work, before=False)
                for rpb in args.rounds_per_boot.split(","):
                    if rpb == "auto" or int(rpb) > 1:
                        bench_sweep(
                            name,
                            plans[name],
                            args.runtime,
                            accel.accel,
                            work,
                            before=False,
                            rounds_per_boot=rpb if rpb == "auto" else int(rpb),
                        )
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
