"""Issue 16 benchmark: time a consolidation sweep end to end through the CLI, and print its answer.

Runs `iomatrix run` on a plan (by default a small one: tiles 1 and 2 of the file-copy pair × cache
none and writeback × 2 repetitions at scale 0.25; `--builtin` runs the built-in `consolidation`
plan, whose target is ≤ 20 minutes on a 2-core host), then prints the sweep's wall time against the
plan's estimate, the wall time of each point (mean per tiles × cache), how long the guests of a
point took to start, and the consolidation section of `iomatrix rank`.

    python bench/consolidation.py [--builtin] [--tiles 1,2] [--caches none,writeback] [--reps 2] [--scale 0.25]
"""  # noqa: E501

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from iomatrix.matrix import estimate_seconds
from iomatrix.plan.load import load_plan
from iomatrix.runner import plan_expansion


def _cli() -> list[str]:
    exe = Path(sys.executable).parent / "iomatrix"
    return (
        [str(exe)]
        if exe.exists()
        else [sys.executable, "-c", "from iomatrix.cli import main; main()"]
    )


def _small_plan(path: Path, tiles: list[int], caches: list[str], reps: int, scale: float) -> Path:
    path.write_text(f"""name = "consolidation-bench"
tier = ["consolidation"]
format = ["qcow2"]
cache = [{", ".join(f'"{c}"' for c in caches)}]
aio = ["threads"]
bus = ["virtio-blk"]
size = "64M"
image_size = "512M"
guest_memory_mb = 256
repetition_policy = "ci-width"
time_budget = "30m"

[repetitions]
min = {reps}
max = {reps}

[consolidation]
tiles = [{", ".join(map(str, tiles))}]
scale = {scale}

[[backing]]
type = "dir"
""")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--builtin", action="store_true", help="run the built-in 'consolidation' plan")
    ap.add_argument("--tiles", default="1,2")
    ap.add_argument("--caches", default="none,writeback")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument(
        "--keep", type=Path, help="copy the results database here (for iomatrix rank/report)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-consol-", dir=os.getcwd()) as tmp:
        scratch = Path(tmp)
        plan_arg = (
            "consolidation"
            if args.builtin
            else str(
                _small_plan(
                    scratch / "plan.toml",
                    [int(t) for t in args.tiles.split(",")],
                    args.caches.split(","),
                    args.reps,
                    args.scale,
                )
            )
        )
        plan, base = load_plan(plan_arg)
        low, _high = estimate_seconds(plan, plan_expansion(plan, base, set()))
        db = scratch / "r.sqlite"
        print(
            f"host: {platform.node()}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f} at start"
        )
        print(f"plan {plan.name}: estimate {low / 60:.1f} min")
        t0 = time.monotonic()
        run = subprocess.run(
            [*_cli(), "run", plan_arg, "--db", str(db), "--workdir", str(scratch / "wd")],
            capture_output=True,
            text=True,
        )
        elapsed = time.monotonic() - t0
        print(
            f"sweep: {elapsed / 60:.1f} min (exit {run.returncode}); load average "
            f"{os.getloadavg()[0]:.2f} at end"
        )
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:])
        con = sqlite3.connect(db)
        rows = con.execute(
            "SELECT c.cache, r.workload, r.status, "
            "(SELECT value FROM samples s WHERE s.run_id=r.id AND s.metric='point.wall_s'), "
            "(SELECT value FROM samples s WHERE s.run_id=r.id AND s.metric='point.start_window_s') "
            "FROM runs r JOIN cells c ON c.id=r.cell_id"
        ).fetchall()
        points: dict[tuple[str, str], list[tuple[float, float]]] = {}
        failed = 0
        for cache, workload, status, wall, window in rows:
            if status != "ok":
                failed += 1
                continue
            points.setdefault((cache, workload), []).append((wall, window))
        print(f"{len(rows)} points, {failed} failed")
        print("cache      point     n  wall s (mean, min-max)   start window s (max)")
        for (cache, workload), vals in sorted(points.items()):
            walls = [w for w, _ in vals]
            print(
                f"{cache:<10} {workload:<8} {len(vals):>2}  {statistics.mean(walls):6.1f} "
                f"({min(walls):.1f}-{max(walls):.1f})        {max(x for _, x in vals):.2f}"
            )
        if args.keep is not None:
            shutil.copyfile(db, args.keep)
        rank = subprocess.run(
            [*_cli(), "rank", "--db", str(db), "--min-runs", "2"],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        section = (
            rank.stdout[rank.stdout.find("Consolidation:") :]
            if "Consolidation:" in rank.stdout
            else ""
        )
        print(section.rstrip() or rank.stdout[-2000:])
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
