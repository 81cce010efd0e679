"""Issue 10 benchmark: the block-layer tier against the guest tier on the same cells, interleaved.

For each repetition, every (cell, workload) is run once in each tier, in a shuffled order, so drift
of the machine hits both tiers alike. Prints per tier: the per-run wall time and its overhead over
the workload's runtime (target for the block-layer tier: wall ≤ runtime + 0.5 s), the 95% CI
half-width of the primary metric after N runs as a % of the mean (target: ≤ 5%), and, per format ×
workload, whether the two tiers order the cache modes the same way (Kendall's tau between the tiers'
means; 1 = same order), and where the block layer's overhead goes: the median of each phase the tier
records with every run.

    python bench/blocklayer_vs_guest.py [--runs 4] [--runtime 1] [--formats qcow2] [--tiers blocklayer,guest] \
        [--caches none,writeback,unsafe] [--workloads rand-write-4k,db-write-4k-fdatasync]

`--quick-plan` instead runs the built-in `quick` plan through `iomatrix run` (its own repetition
policy, repetitions and time budget) in a temporary directory, restricted to the block-layer tier
unless `--all-tiers`, and prints from the store each block-layer cell's 95% CI half-width as a % of
its mean after the runs the plan gave it (target ≤ 5%), why the scheduler stopped repeating it, and
the per-run phases:

    python bench/blocklayer_vs_guest.py --quick-plan [--all-tiers] [--policy racing|ci-width]
"""  # noqa: E501

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from importlib import resources
from pathlib import Path

from scipy.stats import kendalltau

from iomatrix import workloads as wl
from iomatrix.domain import NA
from iomatrix.fio.jobs import JobShape
from iomatrix.hygiene import prepare_cache
from iomatrix.matrix import Cell
from iomatrix.plan.load import plan_from_dict
from iomatrix.stats.summary import summarize
from iomatrix.store.db import Store
from iomatrix.tiers.base import RunOptions, RunRequest, Target, Tier, tier_implementation

TIERS = ("blocklayer", "guest")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--runtime", type=float, default=1.0)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--formats", default="qcow2")
    ap.add_argument("--caches", default="none,writeback,unsafe")
    ap.add_argument("--workloads", default="rand-write-4k,db-write-4k-fdatasync")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tiers", default=",".join(TIERS), help="blocklayer,guest or one of them")
    ap.add_argument(
        "--quick-plan", action="store_true", help="run the built-in quick plan instead (see above)"
    )
    ap.add_argument(
        "--all-tiers", action="store_true", help="with --quick-plan: keep all of the plan's tiers"
    )
    ap.add_argument(
        "--policy", choices=("racing", "ci-width"), help="with --quick-plan: override the policy"
    )
    args = ap.parse_args()
    print(f"load average before: {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    if args.quick_plan:
        return quick_plan(args)
    tiers_run = tuple(t for t in TIERS if t in args.tiers.split(","))
    formats, caches, names = (s.split(",") for s in (args.formats, args.caches, args.workloads))
    works = [wl.resolve(n) for n in names]
    plan = plan_from_dict(
        {
            "name": "bench",
            "tier": list(tiers_run),
            "size": args.size,
            "image_size": "256M",
            "runtime": args.runtime,
            "null_ceiling": False,
        },
        "bench",
    )
    shape = JobShape(size_bytes=plan.size_bytes, runtime_s=args.runtime)
    rng = random.Random(args.seed)
    # value[tier][(format, cache, workload)] = [primary metric per run]; wall[tier] = [wall_s per
    # run]
    value: dict[str, dict[tuple[str, str, str], list[float]]] = {t: {} for t in TIERS}
    wall: dict[str, list[float]] = {t: [] for t in TIERS}
    phases: dict[str, list[dict[str, float]]] = {t: [] for t in TIERS}
    # per run: (time spent deleting earlier images, files left)
    deletions: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-", dir=os.getcwd()) as tmp:
        scratch = Path(tmp)
        opts = RunOptions(workdir=scratch / "work", log=lambda s: print(s, flush=True))
        tiers: dict[str, Tier] = {}
        try:
            for t in tiers_run:
                tiers[t] = tier_implementation(t)(plan, opts)
                tiers[t].open()
                print(tiers[t].describe(), flush=True)
            slots = [(f, c, w) for f in formats for c in caches for w in works]
            for rep in range(args.runs):
                order = [(t, s) for s in slots for t in tiers_run]
                rng.shuffle(order)
                for t, (fmt, cache, w) in order:
                    bus = "virtio-blk" if t == "guest" else NA
                    cell = Cell.of(
                        tier=t,
                        format=fmt,
                        preallocation="off",
                        cache=cache,
                        aio="threads",
                        bus=bus,
                        backing="dir",
                        modifier="none",
                    )
                    prepare_cache(keep_warm=False)
                    req = RunRequest(
                        cell=cell,
                        workload=w,
                        target=Target("dir", scratch),
                        shape=shape,
                        run_dir=scratch / "runs" / f"{t}-{fmt}-{cache}-{w.name}-{rep}",
                        timeout_s=300,
                    )
                    t0 = time.monotonic()
                    out = tiers[t].run(req)
                    took = time.monotonic() - t0
                    if not out.ok:
                        print(f"  {t} {fmt}/{cache} {w.name}: FAILED {out.error}", flush=True)
                        continue
                    wall[t].append(took)
                    phases[t].append(out.phases)
                    if "deletion_work_s" in out.meta:
                        deletions.append(
                            (out.meta["deletion_work_s"], out.meta["deletion_backlog_files"])
                        )
                    v = out.metrics[w.primary_metric]
                    value[t].setdefault((fmt, cache, w.name), []).append(v)
                    print(
                        f"  run {rep + 1} {t:10s} {fmt}/{cache:9s} {w.name:22s} "
                        f"{w.primary_metric}={v:10,.0f} "
                        f"wall {took:5.2f} s",
                        flush=True,
                    )
        finally:
            closing: dict[str, float] = {}
            for name, tier in tiers.items():
                t0 = time.monotonic()
                tier.close()  # the block-layer tier deletes the images still waiting here
                closing[name] = time.monotonic() - t0

    print(
        f"\n{time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cpus), "
        f"runtime {args.runtime:g} s, "
        f"{args.runs} runs per cell and tier, accel "
        f"{tiers['guest'].accel() if 'guest' in tiers else '?'}"
    )
    for t in TIERS:
        if not wall[t]:
            continue
        over = [x - args.runtime for x in wall[t]]
        print(
            f"{t:10s} per-run wall: median {statistics.median(wall[t]):.2f} s, max "
            f"{max(wall[t]):.2f} s; "
            f"over runtime: median {statistics.median(over):.2f} s, max {max(over):.2f} s"
        )
    if phases["blocklayer"]:
        print_phases(phases["blocklayer"], deletions)
        print(
            "  closing the block-layer tier (deleting the images still waiting): "
            f"{closing['blocklayer']:.3f} s"
        )
    print("\n95% CI half-width after N runs, % of the mean (target ≤ 5%):")
    for key in sorted(value["blocklayer"]):
        row = []
        for t in TIERS:
            xs = value[t].get(key, [])
            s = summarize(xs) if len(xs) >= 2 else None
            rel = (
                "-" if s is None or s.rel_half_width is None else f"{100 * s.rel_half_width:5.1f}%"
            )
            mean = "-" if not xs else f"{statistics.mean(xs):,.0f}"
            row.append(f"{t} {mean:>9s} ±{rel:>6s} (n={len(xs)})")
        print(f"  {'/'.join(key):42s} " + "   ".join(row))
    print("\ncache-mode order, block layer vs guest (Kendall tau, 1 = same order):")
    for fmt in formats:
        for w in works:
            keys = [(fmt, c, w.name) for c in caches]
            if len(tiers_run) < 2 or not all(value[t].get(k) for t in TIERS for k in keys):
                continue
            a = [statistics.mean(value["blocklayer"][k]) for k in keys]
            b = [statistics.mean(value["guest"][k]) for k in keys]
            tau = kendalltau(a, b).statistic
            order = {
                t: " > ".join(c for _, c in sorted(zip(v, caches, strict=True), reverse=True))
                for t, v in (("blocklayer", a), ("guest", b))
            }
            print(
                f"  {fmt}/{w.name}: tau {tau:+.2f}; blocklayer {order['blocklayer']}; "
                f"guest {order['guest']}"
            )
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")
    return 0


# The block-layer tier's phases (tiers/blocklayer.py), in the order they happen; fio's start-up
# overlaps the image creation, the deletion of earlier runs' images and the daemon's start.
PHASES = (
    "setup_s",
    "image_s",
    "deletion_wait_s",
    "daemon_spawn_s",
    "fio_s",
    "workload_s",
    "fio_overhead_s",
    "daemon_stop_s",
    "image_remove_s",
    "wall_s",
    "overhead_s",
)


def print_phases(
    runs: list[dict[str, float]], deletions: list[tuple[float, int]] | None = None
) -> None:
    print(f"block-layer phases over {len(runs)} runs, median (max) in s:")
    for k in PHASES:
        xs = [r[k] for r in runs if k in r]
        if xs:
            print(f"  {k:24s} {statistics.median(xs):6.3f} ({max(xs):6.3f})")
    if deletions:
        work = [w for w, _ in deletions]
        left = [n for _, n in deletions]
        print(
            "  deleting earlier runs' images before the daemon starts (mostly under "
            "fio's start-up): median "
            f"{statistics.median(work):.3f} s ({max(work):.3f}), {sum(work):.1f} s in "
            "all; images still waiting "
            f"when the daemon started: median {statistics.median(left):g} (max {max(left)})"
        )


def quick_plan(args: argparse.Namespace) -> int:
    """The quick plan through the real runner: what its block-layer cells reach within its
    budget."""
    # The built-in plan's text, with only the tier list (and, on request, the policy) changed.
    text = (resources.files("iomatrix.plans") / "quick.toml").read_text()
    if not args.all_tiers:
        text = re.sub(r"(?m)^tier = \[.*\]$", 'tier = ["blocklayer"]', text)
    if args.policy:
        head, sep, tail = text.partition("\n[")
        text = f'{head}\nrepetition_policy = "{args.policy}"\n{sep.lstrip(chr(10))}{tail}'
    plan = tomllib.loads(text)
    plan_text = text
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-quick-", dir=os.getcwd()) as tmp:
        scratch = Path(tmp)
        (scratch / "quick-bench.toml").write_text(plan_text)
        db = scratch / "bench.sqlite"
        cmd = [
            sys.executable,
            "-c",
            "import sys; from iomatrix.cli import main; main(sys.argv[1:])",
            "run",
            str(scratch / "quick-bench.toml"),
            "--db",
            str(db),
            "--workdir",
            str(scratch / "work"),
        ]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=scratch, text=True, capture_output=True)
        took_s = time.monotonic() - t0
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
        store = Store(db, read_only=True)
        (sweep_id,) = store.sweep_ids()[-1:]
        runs = [r for r in store.runs(sweep_id) if r.status == "ok" and not r.replaced]
        values: dict[int, dict[str, float]] = {}
        for smp in store.ok_samples(sweep_id):
            values.setdefault(smp.run_id, {})[smp.metric] = smp.value
        stops = {(u.cell_key, u.workload): u for u in store.unit_stops(sweep_id)}
        cells: dict[tuple[str, str], list[float]] = {}
        for r in runs:
            if r.axes["tier"] != "blocklayer":
                continue
            metric = wl.resolve(r.workload).primary_metric
            cells.setdefault((r.cell_key, r.workload), []).append(values[r.run_id][metric])
        print(
            f"\n{time.strftime('%Y-%m-%d %H:%M')} quick plan ({', '.join(plan['tier'])}; "
            f"{plan.get('repetition_policy', 'racing')}, repetitions {plan['repetitions']}, budget "
            f"{plan['time_budget']}): sweep took {took_s:.0f} s; exit status {proc.returncode}"
        )
        print(
            "block-layer cells: 95% CI half-width, % of the mean (target ≤ 5%), and why "
            "repetition stopped:"
        )
        met = 0
        for (key, wname), xs in sorted(cells.items()):
            s = summarize(xs)
            rel = None if s.rel_half_width is None else 100 * s.rel_half_width
            met += rel is not None and rel <= 5.0
            stop = stops.get((key, wname))
            shown = "-" if rel is None else f"{rel:5.1f}%"
            why = "(no stop recorded)"
            # the decision, and what the precision runs after it reached (precision_max)
            if stop is not None:
                decided, _, then = stop.reason.partition("; then run on toward ")
                why = f"{stop.kind}: {decided[:60]}" + (f" → {then}" if then else "")
            print(f"  {key:44s} {wname:15s} n={len(xs)} mean {s.mean:12,.0f} ±{shown:>6s}  {why}")
        print(f"  {met} of {len(cells)} block-layer cells within 5%")
        blk = {r.run_id: r for r in runs if r.axes["tier"] == "blocklayer"}
        took = {
            int(i): (float(w), int(n))
            for i, w, n in store.db.execute(
                "SELECT id, json_extract(meta_json, '$.deletion_work_s'), json_extract(meta_json, "
                "'$.deletion_backlog_files') FROM runs WHERE json_extract(meta_json, "
                "'$.deletion_work_s') IS NOT NULL"
            )
        }
        print_phases([r.phases for r in blk.values()], [took[i] for i in blk if i in took])
        # The runner's own time between one run's end and the next one's start (storing, sampling,
        # the cache drop), which no tier's phases contain.
        spans = [
            tuple(r)
            for r in store.db.execute(
                "SELECT r.started_at, r.finished_at FROM runs r JOIN cells c ON c.id = "
                "r.cell_id WHERE c.sweep_id = ? "
                "ORDER BY r.started_at",
                (sweep_id,),
            )
        ]
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(spans)]
        if gaps:
            print(
                f"runner's time between runs: median {statistics.median(gaps):.3f} s "
                f"(max {max(gaps):.3f}); "
                f"{len(spans)} runs took {sum(b - a for a, b in spans):.0f} s of the "
                f"sweep's {took_s:.0f} s"
            )
        store.close()
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
