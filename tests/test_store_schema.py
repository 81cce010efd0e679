"""The results database: read-only reports, foreign files refused, schema-1 files read and migrated.

Uses a real schema-1 database written by the first release (tests/data/schema1, see its README)
and real `iomatrix` invocations.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.store import SCHEMA_VERSION, Store
from iomatrix.store.schema import COLUMNS
from tests.conftest import DATA, iomatrix_argv, root_only, run_cli

SCHEMA1 = DATA / "schema1" / "iomatrix-schema1.sqlite"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def schema1_copy(tmp_path: Path, name: str = "old.sqlite") -> Path:
    db = tmp_path / name
    shutil.copyfile(SCHEMA1, db)
    return db


def tables(db: Path) -> set[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def test_every_report_command_reads_a_schema1_database_without_writing(tmp_path: Path) -> None:
    db = schema1_copy(tmp_path)
    before = digest(db)
    runs = {
        ("results",): "read.iops",
        ("results", "--format", "json"): '"iomatrix-results"',
        ("results", "--format", "csv"): "rand-read-4k",
        ("results", "--monitor"): "iowait %",
        ("rank", "--min-runs", "2"): "higher is better",
        ("monitor", "--run", "1", "--fields", "cpu.usr"): "usr %",
    }
    for args, needle in runs.items():
        proc = run_cli(*args, "--db", str(db))
        assert proc.returncode == 0, (args, proc.stderr)
        assert needle in proc.stdout, (args, proc.stdout[:500])
    doc = json.loads(run_cli("results", "--format", "json", "--db", str(db)).stdout)
    assert [s["id"] for s in doc["sweeps"]] == [1]
    assert sum(r["n"] for r in doc["sweeps"][0]["results"] if r["metric"] == "read.iops") == 4
    proc = run_cli("compare", str(db), str(db), "--all")
    assert proc.returncode == 0 and "0 of 2" in proc.stdout, proc.stderr
    assert digest(db) == before
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "1"
    assert con.execute("PRAGMA user_version").fetchone()[0] == 0


def test_run_migrates_schema1_in_place_after_a_backup(tmp_path: Path) -> None:
    db = schema1_copy(tmp_path)
    store = Store(db)  # what `iomatrix run` opens
    assert store.schema_version == SCHEMA_VERSION == 8  # 1 → 2 → … → 8, one transaction
    backup = tmp_path / "old.sqlite.schema1.bak"
    assert backup.is_file()
    old = sqlite3.connect(backup)
    assert old.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "1"
    assert old.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 4
    old.close()
    # another connection sees the committed migration (WAL: not yet in the file)
    other = sqlite3.connect(db)
    assert other.execute("PRAGMA user_version").fetchone()[0] == 8
    assert other.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "8"
    # Schema 5 gives every old cell its axes as rows, copied from the cells table's columns.
    assert (
        other.execute("SELECT COUNT(*) FROM cell_axes").fetchone()[0]
        == 8 * other.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
    )
    other.close()
    # A migrated file has exactly the columns of a new one.
    fresh = Store(tmp_path / "new.sqlite")
    for table in COLUMNS[SCHEMA_VERSION]:
        cols = [r[1] for r in store.db.execute(f"PRAGMA table_info({table})")]
        assert cols == [r[1] for r in fresh.db.execute(f"PRAGMA table_info({table})")], table
    # Old runs read back with no round; the old sweep with an empty metric registry.
    assert {r.round for r in store.runs(1)} == {None}
    # …and not judged for interference, nothing replaced, no recorded stops.
    assert {(r.disturbed, r.disturbance, r.replaced) for r in store.runs(1)} == {(None, (), False)}
    assert store.unit_stops(1) == []
    # …and not from a shared guest boot.
    assert {(r.boot_id, r.boot_position) for r in store.runs(1)} == {(None, None)}
    assert store.sweep(1).metric_registry == {}  # type: ignore[union-attr]
    assert store.sweep(1).group is None  # type: ignore[union-attr]  # schema 6: no group recorded before it
    sid = store.create_sweep(
        store.host_id({"hostname": "h"}),
        "p",
        "fp",
        "{}",
        [],
        [],
        metric_registry={"read.iops": {"unit": "IO/s", "direction": "higher"}},
    )
    assert store.sweep(sid).metric_registry == {
        "read.iops": {"unit": "IO/s", "direction": "higher"}
    }  # type: ignore[union-attr]
    store.close()
    # Reopening does not migrate again or overwrite the backup.
    bak = digest(backup)
    Store(db).close()
    assert digest(backup) == bak
    assert run_cli("results", "--db", str(db), "--sweep", "1").returncode == 0


def _schema2_copy(tmp_path: Path) -> Path:
    """A schema-2 database as the previous release left it: the schema-1 fixture taken through
    migration 1 only."""
    from iomatrix.store.schema import MIGRATIONS

    db = schema1_copy(tmp_path, "v2.sqlite")
    con = sqlite3.connect(db, isolation_level=None)
    for stmt in MIGRATIONS[1]:
        con.execute(stmt)
    con.execute("UPDATE runs SET round = attempt, round_position = 0")
    con.close()
    return db


def test_schema2_migrates_to_3_after_its_own_backup_and_reads_before(tmp_path: Path) -> None:
    db = _schema2_copy(tmp_path)
    before = digest(db)
    # Read-only commands read schema 2 as it is (no stops, nothing judged) and write nothing.
    ro = Store.open_existing(db)
    assert ro.schema_version == 2
    assert ro.unit_stops(1) == [] and ro.replaced_runs(1) == set()
    assert {r.round for r in ro.runs(1)} == {1, 2}
    ro.close()
    for args in (("results",), ("results", "--format", "json"), ("rank", "--min-runs", "2")):
        proc = run_cli(*args, "--db", str(db))
        assert proc.returncode == 0, (args, proc.stderr)
    assert digest(db) == before
    store = Store(db)
    assert store.schema_version == 8
    backup = tmp_path / "v2.sqlite.schema2.bak"
    assert backup.is_file() and not (tmp_path / "v2.sqlite.schema1.bak").exists()
    old = sqlite3.connect(backup)
    assert old.execute("PRAGMA user_version").fetchone()[0] == 2
    old.close()
    # The new table and columns work on the migrated file.
    run = store.runs(1)[0]
    store.record_unit_stop(run.cell_id, run.workload, "max-runs", "max runs reached", 2, 2)
    [stop] = store.unit_stops(1)
    assert (stop.cell_key, stop.kind, stop.round, stop.ok_runs) == (run.cell_key, "max-runs", 2, 2)
    store.close()


def test_a_clean_retry_replaces_the_disturbed_run_of_its_round(tmp_path: Path) -> None:
    from iomatrix.store import RunRecord

    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(store.host_id({"hostname": "h"}), "p", "fp", "{}", [], [])
    axes = dict.fromkeys(
        ("tier", "format", "preallocation", "cache", "aio", "bus", "backing", "modifier"), "-"
    )
    cid = store.cell_id(sid, "c", axes, {})

    def run(
        rnd: int, value: float, disturbed: bool, retry_of: int | None = None, status: str = "ok"
    ) -> int:
        return store.record_run(
            RunRecord(
                cell_id=cid,
                workload="w",
                status=status,
                started_at=0,
                finished_at=1,
                accel="none",
                cache_state="-",
                page_cache_method="-",
                metrics={"m": value} if status == "ok" else {},
                phases={},
                round=rnd,
                round_position=0,
                disturbed=disturbed,
                disturbance=["CPU pressure"] if disturbed else [],
                retry_of=retry_of,
            )
        )

    a = run(1, 10.0, True)
    b = run(1, 20.0, False, retry_of=a)  # round 1: the clean retry counts
    c = run(2, 30.0, True)
    run(2, 40.0, True, retry_of=c)  # round 2: both disturbed, the latest counts
    run(3, 50.0, False)
    e = run(4, 60.0, True)
    # a failed retry leaves the disturbed run counting
    run(4, 0.0, False, retry_of=e, status="failed")
    assert store.replaced_runs(sid) == {a, c}
    assert store.metric_points(cid, "w", "m") == [(1, 20.0), (2, 40.0), (3, 50.0), (4, 60.0)]
    assert store.run_counts(sid) == {(cid, "w"): (4, 1)}
    rows = {r.run_id: r for r in store.runs(sid)}
    assert rows[a].replaced and rows[a].disturbance == ("CPU pressure",) and rows[b].retry_of == a
    assert not rows[b].replaced and rows[b].disturbed is False
    store.close()


def _foreign_files(tmp_path: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    p = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.commit()
    con.close()
    files["foreign tables"] = p
    p = tmp_path / "sweeps-other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE sweeps (id INTEGER PRIMARY KEY, broom TEXT)")
    con.commit()
    con.close()
    files["a sweeps table of other columns"] = p
    p = tmp_path / "iomatrix-and-more.sqlite"
    shutil.copyfile(SCHEMA1, p)
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE extra (x)")
    con.commit()
    con.close()
    files["iomatrix tables plus a foreign one"] = p
    p = tmp_path / "empty.sqlite"
    p.touch()
    files["an empty file"] = p
    p = tmp_path / "text.sqlite"
    p.write_text("hello\n" * 100)
    files["a text file"] = p
    p = tmp_path / "notables.sqlite"
    con = sqlite3.connect(p)
    con.execute("PRAGMA user_version=7")
    con.close()
    files["an SQLite file without tables"] = p
    return files


def test_foreign_databases_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    files = _foreign_files(tmp_path)
    for what, path in files.items():
        before = digest(path)
        schema = tables(path) if path.stat().st_size and what != "a text file" else set()
        for read_only in (True, False):
            with pytest.raises(UserError, match="not an iomatrix results database"):
                Store(path, read_only=read_only)
        assert digest(path) == before, what
        if schema:
            assert tables(path) == schema, what
    # The CLI says so in one line and exits 2, for a report and for a sweep; no workdir is created.
    path = files["a sweeps table of other columns"]
    before = digest(path)
    for args in (
        ("results", "--db", str(path)),
        ("rank", "--db", str(path)),
        ("run", "quick", "--db", str(path), "--workdir", str(tmp_path / "w")),
    ):
        proc = run_cli(*args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "not an iomatrix results database" in lines[0], proc.stderr
        assert "no iomatrix 'meta' table" in lines[0]
    assert digest(path) == before
    assert not (tmp_path / "w").exists()
    assert not list(tmp_path.glob("*.lock"))


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = schema1_copy(tmp_path)
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='9' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(UserError, match="newer iomatrix"):
        Store.open_existing(db)


def _as_root_without_dac(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run iomatrix as root but without the capabilities that bypass file permissions, so a 0555
    directory and a 0444 file are as read-only to it as to any user."""
    drop = "-dac_override,-dac_read_search"
    return subprocess.run(
        ["setpriv", "--bounding-set", drop, "--inh-caps", drop, *iomatrix_argv(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


@root_only
def test_database_in_an_unwritable_directory_is_readable(tmp_path: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not installed")
    ro = tmp_path / "ro"
    ro.mkdir()
    db = ro / "r.sqlite"
    shutil.copyfile(SCHEMA1, db)
    db.chmod(0o444)
    ro.chmod(0o555)
    try:
        proc = _as_root_without_dac("results", "--db", str(db), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "read.iops" in proc.stdout
        proc = _as_root_without_dac(
            "run",
            str(DATA / "schema1" / "tiny.toml"),
            "--db",
            str(db),
            "--workdir",
            str(tmp_path / "w"),
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "cannot write results database" in proc.stderr
        assert sorted(p.name for p in ro.iterdir()) == ["r.sqlite"]
        assert not (tmp_path / "w").exists()
    finally:
        ro.chmod(0o755)


@root_only
def test_immutable_database_gives_a_clean_error(tmp_path: Path) -> None:
    db = schema1_copy(tmp_path)
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("filesystem does not support chattr +i")
    try:
        proc = run_cli(
            "run",
            str(DATA / "schema1" / "tiny.toml"),
            "--db",
            str(db),
            "--workdir",
            str(tmp_path / "w"),
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
        assert "immutable" in proc.stderr
        assert not (tmp_path / "w").exists()
        proc = run_cli("results", "--db", str(db))
        assert proc.returncode == 0 and "read.iops" in proc.stdout, proc.stderr
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=False)
