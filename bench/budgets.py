"""Budgets and estimates that hold (issue 70; not a test): built-in plans run end to end through
`iomatrix run`, each sweep's wall clock against its time budget and against the one estimate
(`iomatrix plans`, estimate.py; at this host's recorded guest pace, as `plans` gives it).

    python bench/budgets.py [PLAN ...]        # default: quick-micro

Per plan: `iomatrix run PLAN --db DB` (a fresh database in a temporary directory, left with the
run's log, written as it goes: `tail -f` it) with this checkout's sources, timed from the command's
start to its exit (the answer printed, lab servers stopped); the host's load average before, every
10 s during and after; the set-up the sweep reported; its "time:" and "budget reached" lines.
Printed per plan: wall, budget, wall ÷ budget (target ≤ 1.10), estimate, wall ÷ estimate (target
0.75–1.25), load. Exit status 0 when every plan met both targets, else 1. Run as root (the block
layer and lab servers need it), on a quiet host for figures worth recording."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "src"))
IOMATRIX = [sys.executable, "-c", "import sys; from iomatrix.cli import main; sys.exit(main())"]
BUDGET_SLACK = 1.10  # issue 70: a budget is never passed by more than 10 %
ESTIMATE_TOLERANCE = 0.25  # issue 70: estimate and wall time within ±25 %


def estimate_of(name: str) -> tuple[float, float]:
    """(the plan's time budget, its estimate), seconds, as `iomatrix plans` shows it."""
    from iomatrix.estimate import estimate_sweep
    from iomatrix.guest.pace import recorded_pace
    from iomatrix.plan.load import load_plan
    from iomatrix.sweep.expansion import plan_expansion

    plan, base = load_plan(name)
    # at this host's pace for the built-in guest where a quiet sweep recorded it, as `plans` says
    estimate = estimate_sweep(plan, plan_expansion(plan, base, set()), recorded_pace())
    return plan.time_budget_s, estimate.wall_s


def run_plan(
    name: str, tmp: Path, env: dict[str, str]
) -> tuple[float, list[float], list[str], int]:
    """(wall seconds, 1-minute load averages sampled, the run's output lines, its exit status)."""
    loads = [os.getloadavg()[0]]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(10.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log = tmp / f"{name}.log"
    # the log is written as the sweep goes (its progress lines every 5 minutes), so an hours-long
    # sweep can be followed with `tail -f`, and what it said survives an interrupted bench
    with log.open("w") as out:
        t0 = time.monotonic()
        proc = subprocess.run(
            [*IOMATRIX, "run", name, "--db", str(tmp / f"{name}.sqlite")],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        wall = time.monotonic() - t0
    done.set()
    sampler.join()
    loads.append(os.getloadavg()[0])
    if proc.returncode != 0:
        print(f"{name}: exit status {proc.returncode}; log in {log}")
    return wall, loads, log.read_text().splitlines(), proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("plans", nargs="*", default=["quick-micro"])
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("budgets bench: run as root (the block layer and lab servers need it)")
        return 2
    env = {**os.environ, "PYTHONPATH": str(HERE / "src"), "COLUMNS": "100"}
    tmp = Path(tempfile.mkdtemp(prefix="iomatrix-budgets-"))
    met = True
    for name in args.plans:
        budget, estimate = estimate_of(name)
        started = time.strftime("%H:%M:%S", time.gmtime())
        wall, loads, lines, status = run_plan(name, tmp, env)
        said = [
            line.strip()
            for line in lines
            if line.strip().startswith(("time:", "budget reached:")) or "set up in" in line
        ]
        within = wall <= BUDGET_SLACK * budget
        holds = abs(wall / estimate - 1) <= ESTIMATE_TOLERANCE
        # a sweep that failed (its answer an internal error, 2026-11-28) met nothing, however fast
        met = met and within and holds and status == 0
        print(
            f"{name} (from {started} UTC): wall {wall / 60:.2f} min, budget {budget / 60:.2f} min "
            f"({wall / budget:.2f}×, {'met' if within else 'MISSED'} ≤ {BUDGET_SLACK:.2f}×), "
            f"estimate {estimate / 60:.2f} min ({wall / estimate:.2f}×, "
            f"{'met' if holds else 'MISSED'} ±{ESTIMATE_TOLERANCE:.0%}); load average "
            f"{loads[0]:.1f} at the start, {min(loads):.1f}–{max(loads):.1f} during, "
            f"{loads[-1]:.1f} at the end"
        )
        for line in said:
            print(f"  {line}")
    print(f"databases and logs: {tmp}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
