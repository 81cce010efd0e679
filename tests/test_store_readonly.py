"""Read-only commands never write: no -wal, -shm or lock file appears beside a database they read,
and the database's bytes stay the same, whether it was copied after a sweep, copied with a -wal
holding runs, or is being written by a sweep at the time."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from iomatrix.store import Store
from tests.conftest import run_cli
from tests.test_merge import make_sweep

READERS = (
    ("results",),
    ("rank",),
    ("recommend",),
    ("monitor", "--run", "1", "--fields", "cpu."),
    ("results", "--format", "json"),
)


def listing(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def reader_commands(db: Path, out: Path) -> list[list[str]]:
    return [
        *([*r, "--db", str(db)] for r in READERS),
        ["compare", str(db), str(db)],
        ["report", "--db", str(db), "--html", str(out / "r.html")],
    ]


def a_database(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    s = Store(src / "r.sqlite")
    make_sweep(s, "host-a", "quick", cells=2)
    s.close()
    return src / "r.sqlite"


@pytest.mark.parametrize("command", range(len(READERS) + 2))
def test_a_copied_database_is_read_without_creating_a_file(tmp_path: Path, command: int) -> None:
    db = a_database(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copyfile(db, copy / "r.sqlite")
    out = tmp_path / "out"
    out.mkdir()
    before = listing(copy)
    argv = reader_commands(copy / "r.sqlite", out)[command]
    proc = run_cli(*argv)
    assert proc.returncode == 0, proc.stderr
    assert listing(copy) == before, argv


def test_a_copy_with_a_wal_holding_runs_is_read_whole_and_left_unchanged(tmp_path: Path) -> None:
    # Copied while a sweep had it open: the newest runs are only in the -wal, and no -shm came
    # along.
    src = tmp_path / "src"
    src.mkdir()
    s = Store(src / "r.sqlite")
    make_sweep(s, "host-a", "quick", cells=2)
    wal = src / "r.sqlite-wal"
    assert wal.stat().st_size > 0
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copyfile(src / "r.sqlite", copy / "r.sqlite")
    shutil.copyfile(wal, copy / "r.sqlite-wal")
    runs = s.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    s.close()
    before = listing(copy)
    reader = Store.open_existing(copy / "r.sqlite")
    assert reader.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == runs
    reader.close()
    for argv in reader_commands(copy / "r.sqlite", tmp_path):
        proc = run_cli(*argv)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert listing(copy) == before, argv


def test_a_database_a_sweep_holds_is_read_as_it_is_committed(tmp_path: Path) -> None:
    # A sweep holds the lock and has the file open: reading it must see committed runs (not an
    # immutable snapshot of the main file alone) and create nothing beside what the sweep made.
    from iomatrix.locks import db_lock_path, exclusive

    db = tmp_path / "r.sqlite"
    with exclusive(db_lock_path(db), "results database r.sqlite"):
        s = Store(db)
        make_sweep(s, "host-a", "quick", cells=1)
        names = sorted(p.name for p in tmp_path.iterdir())
        reader = Store.open_existing(db)
        want = sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        assert reader.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == want > 0
        reader.close()
        assert sorted(p.name for p in tmp_path.iterdir()) == names
        s.close()
