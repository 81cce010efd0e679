"""Advisory locks (locks.py) on real files: who holds what, and refusing early without touching anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.locks import exclusive, refuse_if_held


def test_refuse_if_held_names_the_holder_and_creates_nothing(tmp_path: Path) -> None:
    lock = tmp_path / "r.sqlite.lock"
    refuse_if_held(lock, "results database r.sqlite")  # no lock file: nothing to refuse
    assert not lock.exists()  # and nothing created
    with exclusive(lock, "results database r.sqlite"):
        with pytest.raises(UserError, match=rf"results database r.sqlite is in use by process {os.getpid()}"):
            refuse_if_held(lock, "results database r.sqlite")
        # the real lock still refuses a second holder
        with pytest.raises(UserError, match="in use by"), exclusive(lock, "results database r.sqlite"):
            pass
    refuse_if_held(lock, "results database r.sqlite")  # released: free again
    with exclusive(lock, "results database r.sqlite"):  # and the check took no lock of its own
        pass


def test_a_database_and_a_symlink_to_it_share_one_lock(tmp_path: Path) -> None:
    from iomatrix.locks import db_lock_path

    (tmp_path / "x.db").write_bytes(b"")
    (tmp_path / "alias.db").symlink_to("x.db")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "far.db").symlink_to("../x.db")
    assert db_lock_path(tmp_path / "alias.db") == db_lock_path(sub / "far.db") == tmp_path / "x.db.lock"
    with exclusive(db_lock_path(tmp_path / "x.db"), "results database x.db"), \
            pytest.raises(UserError, match="in use by"), \
            exclusive(db_lock_path(tmp_path / "alias.db"), "results database alias.db"):
        pass


def test_the_lock_file_is_removed_on_release_also_after_a_failure(tmp_path: Path) -> None:
    lock = tmp_path / "r.sqlite.lock"
    with pytest.raises(RuntimeError), exclusive(lock, "results database r.sqlite"):
        assert lock.exists()
        raise RuntimeError("the work failed")
    assert not lock.exists()
    # A holder that opened the old file before it was removed takes the new one instead (no two holders).
    with exclusive(lock, "x"):
        stale = os.open(lock, os.O_RDWR)
    try:
        with exclusive(lock, "x"):
            import fcntl
            fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the removed file: lockable, but no longer the lock
            with pytest.raises(UserError, match="in use by"), exclusive(lock, "x"):
                pass
    finally:
        os.close(stale)
