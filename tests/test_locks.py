"""Advisory locks (locks.py) on real files: who holds what, and refusing early without touching
anything."""

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
        with pytest.raises(
            UserError, match=rf"results database r.sqlite is in use by process {os.getpid()}"
        ):
            refuse_if_held(lock, "results database r.sqlite")
        # the real lock still refuses a second holder
        with (
            pytest.raises(UserError, match="in use by"),
            exclusive(lock, "results database r.sqlite"),
        ):
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
    assert (
        db_lock_path(tmp_path / "alias.db")
        == db_lock_path(sub / "far.db")
        == tmp_path / "x.db.lock"
    )
    with (
        exclusive(db_lock_path(tmp_path / "x.db"), "results database x.db"),
        pytest.raises(UserError, match="in use by"),
        exclusive(db_lock_path(tmp_path / "alias.db"), "results database alias.db"),
    ):
        pass


def test_the_lock_file_is_removed_on_release_also_after_a_failure(tmp_path: Path) -> None:
    lock = tmp_path / "r.sqlite.lock"
    with pytest.raises(RuntimeError), exclusive(lock, "results database r.sqlite"):
        assert lock.exists()
        raise RuntimeError("the work failed")
    assert not lock.exists()
    # A holder that opened the old file before it was removed takes the new one instead (no two
    # holders).
    with exclusive(lock, "x"):
        stale = os.open(lock, os.O_RDWR)
    try:
        with exclusive(lock, "x"):
            import fcntl

            # the removed file: lockable, but no longer the lock
            fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(UserError, match="in use by"), exclusive(lock, "x"):
                pass
    finally:
        os.close(stale)


def test_is_held_reads_the_kernels_lock_table_without_locking(tmp_path: Path) -> None:
    import subprocess
    import sys

    from iomatrix.locks import is_held

    lock = tmp_path / "r.sqlite.lock"
    assert not is_held(lock) and not lock.exists()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # an event, not a delay
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert is_held(lock)
    finally:
        holder.communicate("", timeout=60)
    assert not is_held(lock)  # released with the process: the file is there, unlocked
    # and asking took no lock that would stand in the way
    with exclusive(lock, "results database r.sqlite"):
        assert is_held(lock)
