"""A/A calibration of the decision rule: how often the race calls identical cells different (not a
test).

    python bench/aa_calibration.py [--sweeps 4] [--budget 4m] [--tier T ...] [--workload W ...] [--keep DIR]
                                   [--rounds N] [--twins K] [--analyse DB ...]

Each sweep runs the default plan's workloads (rand-read-4k, rand-write-4k, seq-write-1m) on bare
metal and QEMU's block layer, raw under cache=none and writeback, on two `dir` backings that differ
only in their name (twin-a, twin-b): every cell has a twin identical in all but its label. The race
runs as usual, interleaved in rounds, to its end. `--tier` and `--workload` narrow the plan: fewer
cells per round give each pair more rounds (more looks) within the budget. `--rounds N` runs every
unit exactly N rounds instead (no race, no retries, set the budget to fit), on `--twins K` backings:
figures for bench/rejudge.py to replay by today's rule at any race length up to N, and to inject a
known effect into (issue 71's A/B calibration). Per twin pair (workload ×
tier × cache) it records whether the sweep:

* called them different: the final ranking's comparison is significant at its look's level, or the
  race stopped one as "significantly worse than" the other (the false-decision rate,
  docs/statistics.md §10b);
* named one "the answer" over the other (a `single` decision on one twin).

Printed: per sweep and in all, comparisons, called different, named the answer, with the rate and
    its 95 %
Wilson interval, per tier and per workload. Exit 0 when at most 1 in 40 comparisons (2.5 %) was
called different and none named the answer over its twin (issue 54's target), else 1. `--analyse`
re-reads databases of an earlier run instead of sweeping. Runs as root (the sweeps mount nothing,
but drop caches)."""  # noqa: E501

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from decided_pairs import PairOutcome, all_pairs, pair_outcomes, rankings, run_plan, wilson

PLAN = """\
description = "A/A calibration: quick's workloads on twin backings identical but for their name"
tier = {tiers}
format = ["raw"]
preallocation = ["off"]
cache = ["none", "writeback"]
aio = ["threads"]
bus = ["virtio-blk"]
workloads = {workloads}
size = "128M"
image_size = "512M"
runtime = 1
ci_target = 0.05
time_budget = "{budget}"
null_ceiling = false

retry_disturbed = {retry}

[repetitions]
min = {min_runs}
max = {max_runs}
{precision}{backings}"""

BACKING = """
[[backing]]
type = "dir"
name = "twin-{letter}"
"""


def twins(db: Path) -> list[PairOutcome]:
    """The outcomes of the twin pairs only: cells equal in every axis but the backing's name."""
    wrs, _ = rankings(db)

    def same_but_backing(wr, a: str, b: str) -> bool:  # type: ignore[no-untyped-def]
        xa, xb = wr.cells[a].axes, wr.cells[b].axes
        return xa["backing"] != xb["backing"] and all(xa[k] == xb[k] for k in xa if k != "backing")

    return pair_outcomes(
        db, ((wr, a, b) for wr, a, b in all_pairs(wrs) if same_but_backing(wr, a, b))
    )


def report(outcomes: list[PairOutcome]) -> tuple[int, int, int]:
    n = len(outcomes)
    diff = sum(1 for o in outcomes if o.direction != 0 or o.by_race)
    over = sum(1 for o in outcomes if o.answer_over)
    lo, hi = wilson(diff, n)
    print(
        f"  identical-cell comparisons: {n}; called different: {diff} "
        f"({diff / max(n, 1):.1%}, 95% CI "
        f"{lo:.1%}–{hi:.1%}); one twin named the answer over the other: {over}"
    )
    rounds = Counter(o.shared_rounds for o in outcomes)
    print(
        "    shared rounds per pair (looks = rounds − 2): "
        + ", ".join(f"{k}: {rounds[k]}" for k in sorted(rounds))
        + f"; named together (settled as a tie): {sum(o.named_together for o in outcomes)}"
    )
    for key in ("tier", "workload"):
        by = Counter(getattr(o, key) for o in outcomes)
        bad = Counter(getattr(o, key) for o in outcomes if o.direction != 0 or o.by_race)
        print(f"    by {key}: " + ", ".join(f"{k} {bad[k]}/{by[k]}" for k in sorted(by)))
    for o in outcomes:
        if o.direction != 0 or o.by_race or o.answer_over:
            print(
                f"    called different: {o.sweep} {o.tier} {o.workload}: {o.a} vs {o.b} "
                f"(final {o.direction:+d}, race {o.by_race}, answer over {o.answer_over})"
            )
    return n, diff, over


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=4)
    ap.add_argument("--budget", default="4m")
    ap.add_argument("--tier", action="append", choices=["baremetal", "blocklayer"])
    ap.add_argument(
        "--workload", action="append", choices=["rand-read-4k", "rand-write-4k", "seq-write-1m"]
    )
    ap.add_argument("--keep", type=Path, help="keep the databases and logs in this directory")
    ap.add_argument(
        "--rounds",
        type=int,
        help="run every unit exactly this many rounds (no race, no retries): a fixed-round capture "
        "for bench/rejudge.py to replay at any length up to it",
    )
    ap.add_argument("--twins", type=int, default=2, choices=range(2, 7), help="twin backings")
    ap.add_argument(
        "--analyse", type=Path, nargs="*", help="analyse these databases instead of sweeping"
    )
    args = ap.parse_args()
    outcomes: list[PairOutcome] = []
    if args.analyse:
        for db in args.analyse:
            print(f"{db.name}:")
            outcomes += (mine := twins(db))
            report(mine)
    else:
        work = args.keep or Path(tempfile.mkdtemp(prefix="iomatrix-bench-aa-"))
        work.mkdir(parents=True, exist_ok=True)
        plan = work / "aa.toml"
        tiers = args.tier or ["baremetal", "blocklayer"]
        workloads = args.workload or ["rand-read-4k", "rand-write-4k", "seq-write-1m"]
        # quick's precision phase, where the plan has its block layer
        precision = (
            'precision_max = { blocklayer = 30 }\nprecision_for = "contenders"\n'
            if "blocklayer" in tiers and args.rounds is None
            else ""
        )
        plan.write_text(
            PLAN.format(
                budget=args.budget,
                tiers=json.dumps(tiers),
                workloads=json.dumps(workloads),
                precision=precision,
                retry="true" if args.rounds is None else "false",
                min_runs=args.rounds or 3,
                max_runs=args.rounds or 10,
                backings="".join(BACKING.format(letter="abcdef"[i]) for i in range(args.twins)),
            )
        )
        for i in range(1, args.sweeps + 1):
            db, log = work / f"aa-{i}.sqlite", work / f"aa-{i}.log"
            t0 = time.monotonic()
            rc = run_plan(plan, db, log)
            print(f"sweep {i}: exit {rc}, {time.monotonic() - t0:.0f} s ({log})")
            if rc != 0 or not db.exists():
                print(f"  the sweep failed; see {log}", file=sys.stderr)
                return 2
            outcomes += (mine := twins(db))
            report(mine)
        if args.keep is None:
            shutil.rmtree(work)
    print("all sweeps:")
    n, diff, over = report(outcomes)
    return 0 if n and diff <= n / 40 and over == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
