"""Whether each run of a sweep was disturbed by other work on the host: the runner's stored verdict,
else judged now from the run's stored monitor samples. Read by the rankings and `recommend` (moved
out of report/quality.py, which report/query.py imports: reading the store here closed a loop
between them)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.monitor.summary import summarize_samples
from iomatrix.report.query import run_monitor_samples, sweep_info
from iomatrix.stats.interference import RunInterference, interference_flags
from iomatrix.store import Store
from iomatrix.store.queries import RunRow


def run_interference(
    store: Store, sweep_id: int, run_ids: Sequence[int], runs: Sequence[RunRow] | None = None
) -> dict[int, RunInterference]:
    """Interference flags of each run: the verdict the runner stored with it (schema 3), else judged
    now from its stored monitor series (runs without samples are skipped). `runs`: the sweep's
    `store.runs`, when the caller has read them already."""
    cpus = int(sweep_info(store, sweep_id)["host"].get("cpu_count") or 1)
    stored = {
        r.run_id: r
        for r in (store.runs(sweep_id) if runs is None else runs)
        if r.disturbed is not None
    }
    out: dict[int, RunInterference] = {}
    for rid in run_ids:
        if rid in stored:
            out[rid] = RunInterference(bool(stored[rid].disturbed), stored[rid].disturbance, None)
            continue
        samples = run_monitor_samples(store, rid)
        if samples:
            out[rid] = interference_flags(
                {k: f.mean for k, f in summarize_samples(samples).items()}, cpus
            )
    return out
