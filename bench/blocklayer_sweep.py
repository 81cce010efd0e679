"""What the block-layer benches share (bench/l2_cache.py, bench/zero_detection.py): run a bench plan
through the real runner into a fresh database in a temporary directory, then rank one workload's
block-layer cells as `iomatrix rank` does."""

from __future__ import annotations

import tempfile
from pathlib import Path

from iomatrix.plan.model import Plan
from iomatrix.report.rank import WorkloadRanking, rank_sweep
from iomatrix.runner import RunOptions, SweepResult, SweepRunner
from iomatrix.store import Store


def sweep_and_rank(
    plan: Plan, workload: str, prefix: str, workdir: Path | None
) -> tuple[SweepResult, WorkloadRanking | None]:
    """The sweep's result and `workload`'s block-layer ranking (None when no block-layer cell ran
    it); images and the database go to a temporary directory under `workdir` (default: the
    system's), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=workdir) as tmp:
        db = Path(tmp) / "bench.sqlite"
        store = Store(db)
        result = SweepRunner(plan, None, store, RunOptions(workdir=Path(tmp) / "work")).run()
        store.close()
        ro = Store.open_existing(db)
        block = next(
            (r for r in rank_sweep(ro, 1, workload, None, min_n=2) if r.tier == "blocklayer"), None
        )
        ro.close()
    return result, block
