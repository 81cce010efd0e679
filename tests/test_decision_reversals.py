"""The four captured `quick` sweeps that decided raw against qcow2 (cache=writeback, rand-read-4k,
block layer) in opposite directions, each time "significantly"
(tests/data/quick-reversals/README.md, issue 54), re-analysed by today's decision rule: each pair
over the rounds both ran, its variance moderated toward the race's cell-variance model
(stats/moderated.py; a prior pooled over all pairs reversed sweeps b and d again), α spent over the
looks.

None of them may call the pair different or name one of them the answer over the other; sweeps a, b
and d (3 shared rounds, ±18–24 % per cell) leave it unresolved, and sweep c (21 shared rounds) names
both, within 5 %."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from iomatrix.report.rank import WorkloadRanking, rank_sweep
from iomatrix.store import Store

HERE = Path(__file__).parent / "data" / "quick-reversals"


def _writeback_pair(tmp_path: Path, sweep: str) -> tuple[WorkloadRanking, str, str]:
    db = tmp_path / f"{sweep}.sqlite"
    shutil.copy(HERE / f"{sweep}.sqlite", db)  # a copy: the data files stay as captured
    store = Store.open_existing(db)
    try:
        [wr] = [w for w in rank_sweep(store, 1, "rand-read-4k", None) if w.tier == "blocklayer"]
    finally:
        store.close()
    wb = {
        c.axes["format"]: label for label, c in wr.cells.items() if c.axes["cache"] == "writeback"
    }
    return wr, wb["raw"], wb["qcow2"]


@pytest.mark.parametrize("sweep", ["sweep-a", "sweep-b", "sweep-c", "sweep-d"])
def test_raw_and_qcow2_under_writeback_are_not_called_different(tmp_path: Path, sweep: str) -> None:
    wr, raw, qcow2 = _writeback_pair(tmp_path, sweep)
    pair = wr.ranking.comparison(raw, qcow2)
    assert not pair.significant
    d = wr.decision
    assert raw not in d.separated and qcow2 not in d.separated
    assert d.kind != "single"  # "the answer" only over cells it significantly beats
    if sweep == "sweep-c":
        # 21 shared rounds, 0.96× (0.90–1.03): both named, the tie-break's pick, neither "the
        # answer".
        assert d.kind == "tie" and {d.answer, *d.tied} >= {raw, qcow2}
        assert "is the answer" not in d.statement
    else:
        # 3 shared rounds: too few to tell, and the statement says so.
        assert d.kind == "unresolved" and {d.leader, *d.unresolved} >= {raw, qcow2}
        assert pair.test.paired_rounds == 3


def test_ratios_compare_the_rounds_both_ran(tmp_path: Path) -> None:
    # Sweep d: qcow2 ran 30 rounds, raw 3. The ratio is taken over the 3 rounds both ran, not 30
    # against 3.
    wr, raw, qcow2 = _writeback_pair(tmp_path, "sweep-d")
    test = wr.ranking.comparison(raw, qcow2).test
    assert test.paired_rounds == 3
    assert wr.cells[qcow2].samples and len(wr.cells[qcow2].samples[wr.metric]) == 30
