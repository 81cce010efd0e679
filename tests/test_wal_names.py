"""Which name a results database's last writes wait under (store/wal_names.py, issue 50), on real
SQLite files.

A writer killed with its transactions in NAME-wal leaves a record of NAME; opening the same file by
another name (a hard link, the file moved) is refused with one line naming NAME, until a writer by
NAME closes it."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.store import Store, wal_names


def _killed_writer(db: Path) -> None:
    """What a SIGKILLed sweep leaves: the record, and committed transactions still in db-wal. A
    child process opens the database, commits and ends with os._exit: no close, so no checkpoint, as
    after a kill."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            s = Store(db)  # records the name; the schema goes into the -wal
            s.db.execute("PRAGMA wal_autocheckpoint=0")
            s.db.execute("INSERT INTO meta VALUES ('killed-writer', 'yes')")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOMATRIX_STATE", str(tmp_path / "state"))


def test_a_hard_link_to_a_database_whose_writer_was_killed_is_refused_naming_the_name_to_use(
    tmp_path: Path,
) -> None:
    db, hard = tmp_path / "x.sqlite", tmp_path / "elsewhere" / "hard.sqlite"
    _killed_writer(db)
    assert Path(f"{db}-wal").stat().st_size > 0
    hard.parent.mkdir()
    os.link(db, hard)
    for opening in (lambda: Store(hard), lambda: Store.open_existing(hard)):
        with pytest.raises(UserError) as err:
            opening()
        assert f"same file as {db}" in str(err.value) and f"--db {db}" in err.value.hint
    assert not Path(f"{hard}-wal").exists()
    s = Store(db)  # by its name: SQLite reads the -wal, and closing checkpoints it
    assert s.db.execute("SELECT value FROM meta WHERE key='killed-writer'").fetchone()[0] == "yes"
    s.close()
    assert not list((tmp_path / "state" / "open-databases").iterdir())
    # closed: every write is in the file, which any name now reads whole
    s2 = Store.open_existing(hard)
    try:
        assert (
            s2.db.execute("SELECT value FROM meta WHERE key='killed-writer'").fetchone()[0] == "yes"
        )
    finally:
        s2.close()


def test_a_database_moved_away_from_its_pending_log_says_where_the_log_is(tmp_path: Path) -> None:
    db, moved = tmp_path / "x.sqlite", tmp_path / "moved.sqlite"
    _killed_writer(db)
    os.rename(db, moved)
    with pytest.raises(UserError) as err:
        Store.open_existing(moved)
    assert f"written as {db}, which is gone" in str(err.value) and f"{db}-wal" in str(err.value)


def test_a_record_whose_name_is_another_file_now_or_whose_log_is_gone_says_nothing(
    tmp_path: Path,
) -> None:
    db, link = tmp_path / "x.sqlite", tmp_path / "link.sqlite"
    _killed_writer(db)
    link.hardlink_to(db)
    assert wal_names.recorded_name(link) == db.resolve()
    # the pending log is gone (checkpointed by another tool, or removed): nothing waits
    os.unlink(f"{db}-wal")
    assert wal_names.recorded_name(link) is None
    # The recorded name leads to another file now (x.sqlite replaced; its old inode may be reused by
    # any file):
    os.unlink(db)
    sqlite3.connect(db).execute("PRAGMA journal_mode=WAL").fetchone()
    Path(f"{db}-wal").write_bytes(b"pages")
    assert not os.path.samefile(db, link) and wal_names.recorded_name(link) is None


def test_a_closed_database_leaves_no_record_and_a_read_writes_none(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    Store(db).close()
    state = tmp_path / "state" / "open-databases"
    assert not state.exists() or not list(state.iterdir())
    Store.open_existing(db).close()
    assert not state.exists() or not list(state.iterdir())
