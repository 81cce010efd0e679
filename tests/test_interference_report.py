"""Disturbed runs and unit stops as the reports show them, from a real SQLite store written through
the store's own API (no sweep needed: the runner's side is tested in test_interference_sweep.py)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from iomatrix.report.export import render_tables
from iomatrix.report.exports import results_table
from iomatrix.report.quality import notes
from iomatrix.report.rank import rank_sweep
from iomatrix.report.results import results_document, to_csv
from iomatrix.store import RunRecord, Store

AXES = {
    "tier": "baremetal",
    "format": "-",
    "preallocation": "-",
    "aio": "threads",
    "bus": "-",
    "backing": "dir",
    "modifier": "none",
}


def _store(tmp_path: Path) -> tuple[Store, int, dict[str, int]]:
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2}), "p", "fp", "{}", [], []
    )
    cells = {
        c: store.cell_id(sid, f"baremetal/-/-/{c}/threads/-/dir/none", {**AXES, "cache": c}, {})
        for c in ("unsafe", "none")
    }
    base = {"unsafe": 100_000.0, "none": 1_000.0}
    for rnd in (1, 2, 3, 4):
        for cache, cid in cells.items():
            value = base[cache] * (1 + 0.01 * rnd)
            disturbed = cache == "none" and rnd == 2
            rid = store.record_run(
                RunRecord(
                    cell_id=cid,
                    workload="db-write-4k-fdatasync",
                    status="ok",
                    started_at=rnd,
                    finished_at=rnd + 1,
                    accel="none (bare metal)",
                    cache_state="dropped",
                    page_cache_method="-",
                    metrics={"write.iops": value / 3 if disturbed else value},
                    phases={},
                    round=rnd,
                    round_position=0,
                    disturbed=disturbed,
                    disturbance=["CPU pressure: PSI cpu some 40% > 10%"] if disturbed else [],
                )
            )
            if disturbed:  # its clean retry at the end of the round
                store.record_run(
                    RunRecord(
                        cell_id=cid,
                        workload="db-write-4k-fdatasync",
                        status="ok",
                        started_at=rnd,
                        finished_at=rnd + 1,
                        accel="none (bare metal)",
                        cache_state="dropped",
                        page_cache_method="-",
                        metrics={"write.iops": value},
                        phases={},
                        round=rnd,
                        round_position=2,
                        disturbed=False,
                        retry_of=rid,
                    )
                )
    store.record_unit_stop(
        cells["none"],
        "db-write-4k-fdatasync",
        "eliminated",
        "eliminated: significantly worse than cache=unsafe by 99%",
        3,
        3,
    )
    store.record_unit_stop(
        cells["unsafe"], "db-write-4k-fdatasync", "settled", "race over: one best left", 4, 4
    )
    return store, sid, cells


def test_results_show_disturbed_and_replaced_runs_and_stops(tmp_path: Path) -> None:
    store, sid, _ = _store(tmp_path)
    doc = results_document(store, [sid], with_monitor=False)
    rows = {r["axes"]["cache"]: r for r in doc["sweeps"][0]["results"]}
    none = rows["none"]
    # The disturbed third-of-normal value was replaced by its retry: 4 runs analysed, none of them
    # slow.
    assert none["n"] == 4 and min(none["samples"]) > 900
    [d] = none["disturbed_runs"]
    assert d["replaced"] and d["reasons"] == ["CPU pressure: PSI cpu some 40% > 10%"]
    assert d["run_id"] not in none["run_ids"]
    assert none["stop"]["kind"] == "eliminated" and rows["unsafe"]["stop"]["kind"] == "settled"
    text = "; ".join(notes(none))
    assert "replaced by its retry" in text and "stopped after round 3: eliminated" in text
    # a settled race is an answer, not a note
    assert "stopped" not in "; ".join(notes(rows["unsafe"]))
    csv_rows = {r["cache"]: r for r in csv.DictReader(io.StringIO(to_csv(doc)))}
    assert (
        csv_rows["none"]["disturbed_runs"] == str(d["run_id"])
        and csv_rows["none"]["stop"] == "eliminated"
    )
    md = render_tables(results_table(doc), "markdown")
    assert "1 (1 replaced)" in md and "eliminated" in md


def test_rank_names_disturbed_replaced_and_eliminated_cells(tmp_path: Path) -> None:
    store, sid, _ = _store(tmp_path)
    [wr] = rank_sweep(store, sid, None, None)
    assert (
        wr.decision is not None
        and wr.decision.answer is not None
        and "unsafe" in wr.decision.answer
    )
    text = "\n".join(wr.notes())
    assert "replaced by a clean retry, not analysed" in text
    assert "stopped after round 3 with 3 runs" in text and "eliminated" in text
    row = {r.name: r for r in wr.ranking.rows}
    assert row["cache=none aio=threads backing=dir"].summary.n == 4


def test_a_race_stopped_as_not_separable_within_the_budget_says_so_in_rank(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2}), "p", "fp", "{}", [], []
    )
    cells = {
        c: store.cell_id(sid, f"baremetal/-/-/{c}/threads/-/dir/none", {**AXES, "cache": c}, {})
        for c in ("writeback", "unsafe")
    }
    # 10% apart, ±25% noise
    swings = {"writeback": [1.0, 1.3, 0.8, 1.1], "unsafe": [1.2, 0.9, 1.25, 0.85]}
    for rnd in range(4):
        for cache, cid in cells.items():
            store.record_run(
                RunRecord(
                    cell_id=cid,
                    workload="seq-write-1m",
                    status="ok",
                    started_at=rnd,
                    finished_at=rnd + 1,
                    accel="none (bare metal)",
                    cache_state="dropped",
                    page_cache_method="-",
                    metrics={
                        "write.bw_mbps": 1000.0
                        * (1.1 if cache == "unsafe" else 1.0)
                        * swings[cache][rnd]
                    },
                    phases={},
                    round=rnd + 1,
                    round_position=0,
                )
            )
    store.record_unit_stop(
        cells["writeback"],
        "seq-write-1m",
        "unresolved",
        "not separable from cache=unsafe within the budget: about 30 more rounds needed",
        4,
        4,
    )
    [wr] = rank_sweep(store, sid, None, None)
    assert wr.decision is not None and wr.decision.answer is None
    assert wr.decision.statement.startswith("not told apart within the budget")
    assert any("stopped after round 4" in n and "within the budget" in n for n in wr.notes())
