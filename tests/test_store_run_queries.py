"""The store's per-run queries that `rank`, `results` and `recommend` use (rounds, shared boots,
metric values) and the stop kinds it reads back: on real SQLite files, the schema-1 fixture of the
first release and stores written through `iomatrix.store.Store`."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from iomatrix.stop_kinds import StopKind
from iomatrix.store import RunRecord, Store
from iomatrix.store import queries as store_queries
from iomatrix.store.queries import RunBoot

SCHEMA1 = Path(__file__).parent / "data" / "schema1" / "iomatrix-schema1.sqlite"
AXES = {
    "tier": "guest",
    "format": "raw",
    "preallocation": "off",
    "cache": "none",
    "aio": "threads",
    "bus": "virtio-blk",
    "backing": "dir",
    "modifier": "none",
}


def _schema1(tmp_path: Path) -> Path:
    db = tmp_path / "old.sqlite"
    shutil.copyfile(SCHEMA1, db)
    return db


def _written(tmp_path: Path) -> tuple[Store, int, list[int]]:
    """Four runs: rounds 1, 2, none, 3; the first two shared boot "b0" (positions 0, 1), the last
    one had boot "b1" with no position; read.iops on all but the third."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(store.host_id({"hostname": "h"}), "p", "fp", "{}", [], [])
    cid = store.cell_id(sid, "k", AXES, {})
    specs = [
        (1, "b0", 0, {"read.iops": 10.0}),
        (2, "b0", 1, {"read.iops": 12.5}),
        (None, None, None, {"x": 1.0}),
        (3, "b1", None, {"read.iops": 7.0}),
    ]
    ids = [
        store.record_run(
            RunRecord(
                cell_id=cid,
                workload="w",
                status="ok",
                started_at=i,
                finished_at=i + 1,
                accel="kvm",
                cache_state="-",
                page_cache_method="-",
                metrics=metrics,
                phases={},
                round=rnd,
                boot_id=boot,
                boot_position=pos,
            )
        )
        for i, (rnd, boot, pos, metrics) in enumerate(specs)
    ]
    return store, cid, ids


def test_run_queries_on_a_new_store(tmp_path: Path) -> None:
    store, _, ids = _written(tmp_path)
    # A run stored without a round reads its attempt (3) as its round, as runs of a schema-1 file
    # do.
    assert store.run_round_numbers(ids) == {ids[0]: 1, ids[1]: 2, ids[2]: 3, ids[3]: 3}
    assert store.run_boots(ids) == {
        ids[0]: RunBoot("b0", 0),
        ids[1]: RunBoot("b0", 1),
        ids[3]: RunBoot("b1", None),
    }
    # a (boot id, position) pair, as the reports unpack it
    boot, position = store.run_boots(ids)[ids[1]]
    assert (boot, position) == ("b0", 1)
    assert store.run_metric_values(ids, "read.iops") == {ids[0]: 10.0, ids[1]: 12.5, ids[3]: 7.0}
    assert store.run_metric_values(ids, "nothing") == {}
    # Only the runs asked about.
    assert store.run_round_numbers(ids[1:2]) == {ids[1]: 2} and store.run_boots([ids[2]]) == {}
    assert (
        store.run_round_numbers([])
        == {}
        == store.run_boots([])
        == store.run_metric_values([], "read.iops")
    )


def test_run_queries_ask_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _, ids = _written(tmp_path)
    monkeypatch.setattr(store_queries, "ID_CHUNK", 1)  # every run in a statement of its own
    assert store.run_round_numbers(ids) == {ids[0]: 1, ids[1]: 2, ids[2]: 3, ids[3]: 3}
    assert set(store.run_boots(ids)) == {ids[0], ids[1], ids[3]}
    assert store.run_metric_values(ids, "read.iops") == {ids[0]: 10.0, ids[1]: 12.5, ids[3]: 7.0}


def test_run_queries_on_a_schema1_file_read_as_it_is(tmp_path: Path) -> None:
    store = Store.open_existing(_schema1(tmp_path))
    assert store.schema_version == 1
    # No rounds in schema 1: the attempt number stands in for the round; no shared boots.
    assert store.run_round_numbers([1, 2, 3, 4]) == {1: 1, 2: 1, 3: 2, 4: 2}
    assert store.run_boots([1, 2, 3, 4]) == {}
    assert store.run_metric_values([1, 4, 99], "read.iops") == {1: 14726.273726, 4: 11510.48951}
    assert store.unit_stops(1) == []


def test_a_migrated_schema1_file_reads_attempts_as_rounds(tmp_path: Path) -> None:
    # migrated to the current schema: round is a column now, NULL for old runs
    store = Store(_schema1(tmp_path))
    assert store.schema_version >= 4
    # As before the migration: the attempt stands in (with no round at all, `rank` had no sample to
    # rank).
    assert store.run_round_numbers([1, 2, 3, 4]) == {1: 1, 2: 1, 3: 2, 4: 2}
    assert store.run_boots([1, 2, 3, 4]) == {}


def test_stop_kinds_read_back_as_the_enum_from_the_same_strings(tmp_path: Path) -> None:
    store, cid, _ = _written(tmp_path)
    for workload, kind in (("w", StopKind.MAX_RUNS), ("v", StopKind.UNRESOLVED)):
        store.record_unit_stop(cid, workload, kind, f"{kind} because", 3, 3)
    store.record_unit_stop(cid, "x", StopKind.ELIMINATED, "eliminated: worse", 3, 3, "raw-key")
    con = sqlite3.connect(store.path)  # what the file holds: the same strings as ever
    assert sorted(r[0] for r in con.execute("SELECT kind FROM unit_stops")) == [
        "eliminated",
        "max-runs",
        "unresolved",
    ]
    con.execute(
        "INSERT INTO unit_stops (cell_id, workload, kind, reason, round, ok_runs, stopped_at) "
        "VALUES (?, 'u', 'from-the-future', 'r', 1, 1, 0)",
        (cid,),
    )
    con.commit()
    con.close()
    stops = {s.workload: s for s in Store.open_existing(store.path).unit_stops(1)}
    assert stops["w"].kind is StopKind.MAX_RUNS and stops["w"].reason == "max-runs because"
    assert stops["v"].kind is StopKind.UNRESOLVED
    assert stops["u"].kind is StopKind.OTHER  # a kind this version does not know
    # an elimination keeps its reference cell's key (schema 8); other stops have none
    assert stops["x"].against == "raw-key" and stops["w"].against is None
    assert [str(k) for k in StopKind] == [
        "eliminated",
        "equivalent",
        "unresolved",
        "settled",
        "baseline",
        "converged",
        "max-runs",
        "budget",
        "gave-up",
        "load-not-reached",
        "other",
    ]
