"""Reproducibility of the answer: a plan run k times, how often a decided pair is decided the same
way (not a test).

    python bench/reproducibility.py [PLAN] [--sweeps 5] [--keep DIR] [--analyse DB ...]

PLAN defaults to the built-in `quick`. Each sweep runs as a user runs it (`iomatrix run PLAN --db
…`); then, per pair of ranked cells (workload × tier), each sweep's verdict is +1 (the first
significantly better), −1 (significantly worse) or 0 (not called different) at the decision rule's
levels (docs/statistics.md §10b). Printed: pairs decided in some sweep, decided the same way in
every sweep that decided them, decided in opposite directions (the failure issue 54 is about), and
each workload's answer per sweep. Exit 0 when no pair was decided in opposite directions, else 1.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from decided_pairs import pair_outcomes, rankings, run_plan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", nargs="?", default="quick")
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="keep the databases and logs in this directory")
    ap.add_argument(
        "--analyse", type=Path, nargs="*", help="analyse these databases instead of sweeping"
    )
    args = ap.parse_args()
    dbs: list[Path] = list(args.analyse or [])
    work = args.keep or Path(tempfile.mkdtemp(prefix="iomatrix-bench-repro-"))
    if not dbs:
        work.mkdir(parents=True, exist_ok=True)
        for i in range(1, args.sweeps + 1):
            db, log = work / f"sweep-{i}.sqlite", work / f"sweep-{i}.log"
            t0 = time.monotonic()
            rc = run_plan(Path(args.plan) if args.plan.endswith(".toml") else args.plan, db, log)  # type: ignore
            print(f"sweep {i}: exit {rc}, {time.monotonic() - t0:.0f} s ({log})")
            if rc != 0 or not db.exists():
                print(f"  the sweep failed; see {log}", file=sys.stderr)
                return 2
            dbs.append(db)
    verdicts: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    answers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for db in dbs:
        for o in pair_outcomes(db):
            a, b = sorted((o.a, o.b))
            verdicts[(o.workload, o.tier, a, b)].append(o.direction if a == o.a else -o.direction)
        for wr in rankings(db)[0]:
            d = wr.decision
            said = "-" if d is None else (f"{d.kind}: {d.answer or d.provisional}")
            answers[(wr.workload, wr.tier)].append(said)
    decided = {k: v for k, v in verdicts.items() if any(v)}
    same = [k for k, v in decided.items() if len({x for x in v if x}) == 1]
    opposite = [k for k, v in decided.items() if {1, -1} <= set(v)]
    print(
        f"{len(dbs)} sweeps, {len(verdicts)} pairs; decided in some sweep: "
        f"{len(decided)}; the same way in every "
        f"sweep that decided them: {len(same)}; in opposite directions: {len(opposite)}"
    )
    for k in opposite:
        print(f"  opposite: {k[0]} {k[1]}: {k[2]} vs {k[3]}: {verdicts[k]}")
    for (w, t), said in sorted(answers.items()):
        print(f"  {w} · {t}: " + " | ".join(said))
    if not args.analyse and args.keep is None:
        shutil.rmtree(work)
    return 0 if not opposite else 1


if __name__ == "__main__":
    sys.exit(main())
