"""This host's pace for the built-in guest's TCG work, for estimates (issue 70: full-matrix-fs's
estimate said 1.6 h on a VM that ran its sweep in about 3 h).

Under TCG a guest's own work is instruction emulation: its boots, mkfs, filling a tree, fio's own
start-up all take longer on a slower CPU, while a time-based fio job takes its runtime anywhere. The
built-in guest tier's costs (tiers/declared/guest.py, matrix.FS_JOB_S_PER_256M) were fitted on a
reference host (2026-11-22). A sweep measures this host's pace as what its quiet built-in guest runs
took beyond their time-based part, against what the reference costs give for the same runs
(matrix.run_parts_s, the split the estimate itself uses):

    pace = Σ (run wall − runtime and ramp) / Σ (reference estimate of the same, its boot included
           for a boot's first run)

over the runs the host did not disturb (a disturbed run says nothing of the host's own pace).
Estimates then scale those costs by it (matrix.estimate_seconds' guest_pace).

Worked example: the 2026-11-29 VM's full-matrix-fs, its first 27 quiet runs (fs-read and fs-write,
two a boot): 398 s of wall against 221 s of reference estimate (fs-read 5.5 + 0.5 s, fs-write 6.5 +
0.5 s, a boot 3.3 s): pace 1.80, and the plan's estimate is 2.9 h, not 1.6.

Boot time alone is no proxy: that VM booted microvm guests in 1.55× the reference's time but did
their filesystem jobs in 2.5–2.7×.

The figure lives in ``<cache root>/guest-pace.json`` (one a host: it names the CPU it was measured
on, and a different CPU reads no pace). Each sweep adds its runs to what is kept, weighted by their
reference seconds, over the last ``WINDOW_S`` of them: a small sweep (a test's 16 MiB jobs, whose
fixed costs the reference fits less well) moves a whole sweep's figure a little, and a new whole
sweep replaces it. Fewer than ``MIN_RUNS`` quiet runs or ``MIN_REFERENCE_S`` of reference work
record nothing, and a figure with less behind it is not read; a pace outside ``PACE_RANGE`` is not
believed (a broken clock, a stalled guest)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from iomatrix.guest.cache import cache_root
from iomatrix.metadata import cpu_model

MIN_RUNS = 5
# and at least this much reference work behind the figure: the suite's small guest sweeps (5 quiet
# runs, 9 s of it, the first time on 2026-11-29) measure their own fixed costs more than the host
MIN_REFERENCE_S = 30.0
PACE_RANGE = (0.2, 10.0)
WINDOW_S = 3600.0  # reference seconds of runs the kept pace stands for, at most
FILE_NAME = "guest-pace.json"


@dataclass(frozen=True)
class GuestPace:
    """How many times the reference host's time the built-in guest's TCG work took here
    (`factor`), measured over `runs` quiet runs, the last sweep of them on `when`."""

    factor: float
    runs: int
    when: str  # the last sweep's
    reference_s: float = 0.0  # what the runs' reference costs add up to: the figure's weight

    def sentence(self) -> str:
        """e.g. "the built-in guest's TCG work at this host's pace: 1.8× the reference host's
        (27 quiet runs to 2026-11-29)"."""
        return (
            f"the built-in guest's TCG work at this host's pace: {self.factor:.1f}× the reference "
            f"host's ({self.runs} quiet runs to {self.when[:10]})"
        )

    def after(self, new: GuestPace) -> GuestPace:
        """This kept pace with a new sweep's added: weighted by reference seconds, over the last
        WINDOW_S of them (the older runs' weight cut first)."""
        kept = min(self.reference_s, max(0.0, WINDOW_S - new.reference_s))
        if kept <= 0 or self.reference_s <= 0:
            return new
        total = kept + new.reference_s
        return GuestPace(
            (self.factor * kept + new.factor * new.reference_s) / total,
            new.runs + round(self.runs * kept / self.reference_s),
            new.when,
            total,
        )


def pace_of_runs(runs: Iterable[tuple[float, float]]) -> GuestPace | None:
    """The pace of quiet runs given as (seconds they took beyond their time-based part, seconds
    the reference costs give for the same), or None: fewer than MIN_RUNS, less than
    MIN_REFERENCE_S of reference work, or outside PACE_RANGE."""
    runs = [(took, ref) for took, ref in runs if took > 0 and ref > 0]
    if len(runs) < MIN_RUNS:
        return None
    reference = sum(ref for _, ref in runs)
    if reference < MIN_REFERENCE_S:
        return None
    factor = sum(took for took, _ in runs) / reference
    pace = GuestPace(factor, len(runs), time.strftime("%Y-%m-%d %H:%M:%S"), reference)
    return pace if PACE_RANGE[0] <= factor <= PACE_RANGE[1] else None


def _path(root: Path | None) -> Path:
    return (root or cache_root()).expanduser() / FILE_NAME


def recorded_pace(root: Path | None = None) -> GuestPace | None:
    """The pace this host's quiet guest sweeps recorded, or None (none recorded, another CPU,
    too little behind it, an unreadable file: estimates then assume the reference host)."""
    try:
        data = json.loads(_path(root).read_text())
        if data.get("cpu_model") != cpu_model():
            return None
        pace = GuestPace(
            float(data["factor"]),
            int(data["runs"]),
            str(data["when"]),
            float(data.get("reference_s", 0.0)),
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if pace.reference_s < MIN_REFERENCE_S:
        return None  # too little behind it (or written before the weights were kept)
    return pace if PACE_RANGE[0] <= pace.factor <= PACE_RANGE[1] else None


def record_pace(pace: GuestPace, root: Path | None = None) -> GuestPace:
    """Add a sweep's `pace` to this host's kept one (GuestPace.after) and keep the result
    (atomically: a reader sees the old file or the new one); returns it. A cache that cannot be
    written keeps the old figure; the sweep's results do not depend on it."""
    path = _path(root)
    old = recorded_pace(root)
    pace = pace if old is None else old.after(pace)
    # as it will be read back
    pace = GuestPace(round(pace.factor, 3), pace.runs, pace.when, round(pace.reference_s, 1))
    data = {**asdict(pace), "cpu_model": cpu_model()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
    return pace
