from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.store import RunRecord, Store


def _store(tmp_path: Path) -> tuple[Store, int, int]:
    s = Store(tmp_path / "r.sqlite")
    host = s.host_id({"hostname": "h", "kernel": "k", "fio_version": "fio-3.33"})
    sweep = s.create_sweep(host, "p", "fp1", "{}", [], [])
    axes = dict(
        tier="baremetal",
        format="-",
        preallocation="-",
        cache="none",
        aio="threads",
        bus="-",
        backing="dir",
        modifier="none",
    )
    cell = s.cell_id(sweep, "k1", axes, {"fs": "ext4"})
    return s, sweep, cell


def rec(cell: int, status: str = "ok", value: float = 1.0) -> RunRecord:
    return RunRecord(
        cell_id=cell,
        workload="w",
        status=status,
        started_at=1.0,
        finished_at=3.5,
        accel="none (bare metal)",
        cache_state="dropped",
        page_cache_method="direct",
        metrics={"read.iops": value} if status == "ok" else {},
        phases={"wall_s": 2.5},
        error=None if status == "ok" else "boom",
        monitor=[(1.0, {"cpu.usr_pct": 5.0})],
    )


def test_runs_are_numbered_and_counted(tmp_path: Path) -> None:
    s, sweep, cell = _store(tmp_path)
    s.record_run(rec(cell, value=10))
    s.record_run(rec(cell, status="failed"))
    s.record_run(rec(cell, value=12))
    assert s.run_counts(sweep) == {(cell, "w"): (2, 1)}
    assert s.metric_series(cell, "w", "read.iops") == [10, 12]
    attempts = [r[0] for r in s.db.execute("SELECT attempt FROM runs ORDER BY id")]
    assert attempts == [1, 2, 3]
    assert s.sweep_elapsed(sweep) == pytest.approx(7.5)


def test_each_run_is_committed_at_once(tmp_path: Path) -> None:
    s, _, cell = _store(tmp_path)
    s.record_run(rec(cell))
    # A second connection (another process after a crash) sees the run without any close/commit.
    other = sqlite3.connect(tmp_path / "r.sqlite")
    assert other.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    assert other.execute("SELECT COUNT(*) FROM monitor").fetchone()[0] == 1


def test_resumable_sweep_only_when_unfinished(tmp_path: Path) -> None:
    s, sweep, _ = _store(tmp_path)
    assert s.resumable_sweep("fp1")["id"] == sweep
    s.set_sweep_status(sweep, "finished")
    assert s.resumable_sweep("fp1") is None
    assert s.resumable_sweep("other") is None


def test_host_rows_are_shared(tmp_path: Path) -> None:
    s = Store(tmp_path / "r.sqlite")
    assert (
        s.host_id({"hostname": "a"}) == s.host_id({"hostname": "a"}) != s.host_id({"hostname": "b"})
    )


def test_not_a_database_is_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "junk.sqlite"
    bad.write_text("this is not sqlite " * 100)
    with pytest.raises(UserError, match="not an iomatrix results database"):
        Store(bad)
    with pytest.raises(UserError, match="does not exist"):
        Store.open_existing(tmp_path / "missing.sqlite")
