"""Time `iomatrix plan` on a generated plan of more than 10,000 units (issue 68: a 14,040-unit plan
did not finish in 400 s, busy re-reading the plan for every unit).

    python bench/plan_expansion.py [--runs 3] [--queues 4]

Writes the plan of tests/test_plan_scale.py (two tiers, nine swept axes, five workloads; `--queues`
values of the queues axis: 4 gives 2,022 cells × 5 = 10,110 units) to a temporary directory, runs
`iomatrix plan` on it `--runs` times in fresh processes, and prints the unit count it printed with
the median wall and CPU seconds of a run. Target: the count printed within 10 s. Prints numbers; not
a test (tests/test_plan_scale.py counts the work instead)."""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_plan_scale import BIG_PLAN

TARGET_S = 10.0
QUEUES = ["auto", "1", "2", "4", "8"]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queues", type=int, default=4, choices=range(1, len(QUEUES) + 1))
    args = ap.parse_args()
    cli = shutil.which("iomatrix") or str(Path(sys.executable).parent / "iomatrix")
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "big.toml"
        queues = '", "'.join(QUEUES[: args.queues])
        plan.write_text(BIG_PLAN.format(queues=f'["{queues}"]'))
        walls, cpus, out = [], [], ""
        for _ in range(args.runs):
            start, cpu0 = time.perf_counter(), _children_cpu()
            out = subprocess.run(
                [cli, "plan", str(plan)], capture_output=True, text=True, check=True
            ).stdout
            walls.append(time.perf_counter() - start)
            cpus.append(_children_cpu() - cpu0)
    units = re.search(r"= (\d+) units", out)
    wall = statistics.median(walls)
    print(f"iomatrix plan: {units.group(1) if units else '?'} units")
    print(
        f"  median wall {wall:.2f} s (min {min(walls):.2f}, max {max(walls):.2f}), "
        f"CPU {statistics.median(cpus):.2f} s, {args.runs} runs: "
        f"{'met' if wall <= TARGET_S else 'missed'} (target {TARGET_S:.0f} s)"
    )


if __name__ == "__main__":
    main()
