"""Advisory locks: one sweep per results database and per working directory at a time.

Two sweeps on one database would both join the same sweep and overrun its repetitions;
two on one workdir delete each other's images and loop files. Each sweep holds an
`fcntl.flock` on a lock file (beside the database, and inside the workdir) for as long
as it runs; the kernel drops the lock when the process dies, so a crash or kill -9
never leaves a stale lock behind. The holder writes its pid and command line into the
file so a second sweep can say who is in the way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from iomatrix.errors import UserError


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    pid, _, cmd = text.partition(" ")
    if not pid.isdigit():
        return "another process"
    return f"process {pid} ({cmd[:200]})" if cmd else f"process {pid}"


def _in_use(fd: int, what: str) -> UserError:
    return UserError(f"{what} is in use by {_holder(fd)}",
                     hint="wait for that sweep to finish, or use another --db / --workdir")


@contextlib.contextmanager
def exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if missing); `what` names the locked thing."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise UserError(f"cannot create the lock file {lock_path}: {err.strerror}",
                        hint=f"make the directory of {what} writable") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(fd, what) from None
        me = f"{os.getpid()} {' '.join(sys.argv)}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        try:
            yield
        finally:
            # Empty the file before the lock goes, so a stale pid is never reported.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def refuse_if_held(lock_path: Path, what: str) -> None:
    """Raise the "in use" error now if another process holds `lock_path` (creating nothing when it does not
    exist), so checks that read what the holder may be writing (a results database it is creating) never
    see its half-made state. Not a lock: :func:`exclusive` still takes the real one."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return  # no lock file (or unreadable): exclusive() decides later
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(fd, what) from None
    finally:
        os.close(fd)  # drops the shared lock, if taken


def db_lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


WORKDIR_LOCK = ".iomatrix.lock"
