"""Each workload of a sweep with its shape (fio/shape.py), and how loaded the host was during a pair
of cells' runs: what findings are decided and worded by (issue 53).

Where the shape comes from, per workload:

* a preset (or a fixed-rate rand-*-4k-rateN): its definition (``Workload``), on the region its runs
  used (the ``size`` of the job text stored with its first ok run);
* anything else (a ``file:PATH`` job file, a role's job (a "custom" preset), a workload of a later
  version): the job text stored with its first ok run, read without the cell's own [global]
  (``shape_of_text(rendered=True)``). That text is what fio ran, recorded with every run since the
  first schema, so a database of any age has it: nothing new is stored;
* a guest filesystem job (fs-read, fs-write): no fio job, its steps' shape (guest/fs_shape.py);
* no ok run with a job text (a tier's own trial): not known, and left out of findings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iomatrix.fio.shape import IoShape, shape_of_text, shape_of_workload
from iomatrix.guest.fs_shape import fs_shape
from iomatrix.report.query import CellWorkload
from iomatrix.stats.interference import RunInterference
from iomatrix.store import Store
from iomatrix.workloads import preset

# Short words for each interference cause (stats/interference.py THRESHOLDS keys), and the reason
# text each starts.
_CAUSE_WORDS = {
    "psi.cpu_some_pct": "CPU pressure",
    "cpu.steal_pct": "CPU steal",
    "other_cpu_pct": "other processes' CPU use",
    "mem.writeback_mb": "page-cache writeback",
}
_REASON_WORDS = {
    "CPU pressure": "CPU pressure",
    "CPU steal": "CPU steal",
    "other processes": "other processes' CPU use",
    "page-cache writeback": "page-cache writeback",
}


def workload_shapes(store: Store, cws: Sequence[CellWorkload]) -> dict[str, IoShape]:
    """workload → its shape, for the workloads whose shape is known (module docstring)."""
    first_run: dict[str, int] = {}
    for c in cws:
        if c.runs and c.workload not in first_run:
            first_run[c.workload] = c.runs[0]
    out: dict[str, IoShape] = {}
    for workload, rid in first_run.items():
        defined = preset(workload)
        steps = fs_shape(defined.kind) if defined is not None else None
        if steps is not None:
            out[workload] = steps
            continue
        text = store.run_job_text(rid) or ""
        stored = shape_of_text(workload, text, rendered=True) if "[" in text else None
        if defined is not None and defined.kind == "fio":
            out[workload] = shape_of_workload(defined, stored.working_set if stored else None)
        # a role's job ("database:data") is a job file the plan ships: its stored text is its shape
        elif (defined is None or defined.kind == "custom") and stored is not None and stored.jobs:
            out[workload] = stored
    return out


def _causes(r: RunInterference) -> list[str]:
    if r.causes:
        return [_CAUSE_WORDS.get(c, c) for c in r.causes]
    return [
        next(
            (w for start, w in _REASON_WORDS.items() if reason.startswith(start)),
            reason.split(":")[0],
        )
        for reason in r.reasons
    ]


def load_words(cells: Sequence[CellWorkload], interference: Mapping[int, RunInterference]) -> str:
    """How loaded the host was during these cells' analysed runs: "host quiet (0 of 6 runs
    disturbed)" or "host loaded in 4 of 6 runs: CPU pressure, other processes' CPU use"; "" when no
    run was judged (no monitor samples, no stored verdict). The stored verdicts
    (CellWorkload.disturbed) stand in for runs `interference` lacks."""
    judged: list[tuple[bool, list[str]]] = []
    for c in cells:
        for rid in c.runs:
            r = interference.get(rid)
            if r is not None:
                judged.append((r.disturbed, _causes(r) if r.disturbed else []))
            elif rid in c.disturbed:
                judged.append((True, _causes(RunInterference(True, c.disturbed[rid], None))))
    if not judged:
        return ""
    loaded = [causes for disturbed, causes in judged if disturbed]
    if not loaded:
        return f"host quiet: 0 of {len(judged)} runs disturbed"
    causes = list(dict.fromkeys(c for cs in loaded for c in cs))
    return f"host loaded in {len(loaded)} of {len(judged)} runs: {', '.join(causes)}"
