"""What a sweep decided about each pair of its cells: shared by bench/aa_calibration.py and
bench/reproducibility.py (not a benchmark itself).

A pair is *called different* when the final ranking's comparison is significant at its look's level
(docs/statistics.md §10b), or when the race stopped one of the two as "significantly worse than" the
other. A cell is *the answer over* another when the decision is `single` (every other cell
significantly worse) and names it."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "src"))

from iomatrix.report.query import unit_stops  # noqa: E402
from iomatrix.report.rank import WorkloadRanking, rank_sweep  # noqa: E402
from iomatrix.store import Store  # noqa: E402


@dataclass(frozen=True)
class PairOutcome:
    sweep: str  # the database file's name
    workload: str
    tier: str
    a: str  # cell labels, as the ranking names them
    b: str
    direction: int  # +1 a significantly better than b, −1 worse, 0 not called different
    by_race: bool  # the race's elimination called it (the final ranking may not)
    answer_over: bool  # the decision named one of the two the answer, the other significantly worse
    # the rounds both ran: how many looks the decision had (docs/statistics.md §10b)
    shared_rounds: int = 0
    # the decision names both (a tie): settled without calling either better
    named_together: bool = False


def iomatrix_command() -> str:
    """The `iomatrix` a user of this checkout runs: its own .venv's, else the one beside the Python
    running this bench (a worktree using a shared venv, with PYTHONPATH naming its src/)."""
    own = HERE / ".venv" / "bin" / "iomatrix"
    return str(own if own.exists() else Path(sys.executable).parent / "iomatrix")


def run_plan(plan: Path, db: Path, log: Path, env: dict[str, str] | None = None) -> int:
    """`iomatrix run PLAN --db DB` as a user runs it (in `env`, else this process's environment),
    output to LOG; its exit status."""
    cmd = [iomatrix_command(), "run", str(plan), "--db", str(db)]
    with log.open("w") as out:
        return subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, check=False, env=env
        ).returncode


def rankings(db: Path) -> tuple[list[WorkloadRanking], dict[tuple[int, str], str]]:
    """The newest sweep's rankings, and its race's stop reasons by (cell id, workload)."""
    store = Store.open_existing(db)
    try:
        sid = max(store.sweep_ids())
        stops = {k: v["reason"] or "" for k, v in unit_stops(store, sid).items()}
        return rank_sweep(store, sid, None, None), stops
    finally:
        store.close()


def pair_outcomes(
    db: Path, pairs: Iterator[tuple[WorkloadRanking, str, str]] | None = None
) -> list[PairOutcome]:
    """Every pair of ranked cells of every ranking (or the ``pairs`` given), with what the sweep
    decided."""
    wrs, stops = rankings(db)
    out = []
    for wr, a, b in pairs if pairs is not None else all_pairs(wrs):
        cmp = wr.ranking.comparison(a, b)
        sign = 1 if wr.ranking.higher_is_better else -1
        ratio = cmp.test.ratio if cmp.a == a else 1.0 / cmp.test.ratio
        direction = 0
        if cmp.significant and math.isfinite(ratio) and ratio != 1.0:
            direction = sign if ratio > 1.0 else -sign
        ca, cb = wr.cells[a], wr.cells[b]
        by_race = _names_worse(
            stops.get((ca.cell_id, wr.workload), ""), cb.cell_key
        ) or _names_worse(stops.get((cb.cell_id, wr.workload), ""), ca.cell_key)
        d = wr.decision
        answer_over = d is not None and d.kind == "single" and d.answer in (a, b)
        together = d is not None and d.kind == "tie" and {a, b} <= {d.answer, *d.tied}
        out.append(
            PairOutcome(
                db.name,
                wr.workload,
                wr.tier,
                a,
                b,
                direction,
                by_race,
                answer_over,
                cmp.test.paired_rounds,
                together,
            )
        )
    return out


def _names_worse(reason: str, other_key: str) -> bool:
    """A race stop "eliminated: significantly worse than UNIT" whose UNIT (the cell's key, "::", the
    workload) is the other cell."""
    _, found, than = reason.partition("significantly worse than ")
    return bool(found) and than.split("::")[0] == other_key


def all_pairs(wrs: list[WorkloadRanking]) -> Iterator[tuple[WorkloadRanking, str, str]]:
    for wr in wrs:
        ranked = [r.name for r in wr.ranking.rows if r.rank is not None]
        for i, a in enumerate(ranked):
            for b in ranked[i + 1 :]:
                yield wr, a, b


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (95 %)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
