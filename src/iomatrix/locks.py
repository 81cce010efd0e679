"""Advisory locks: one sweep per results database and per working directory at a time.

Two sweeps on one database would both join the same sweep and overrun its repetitions;
two on one workdir delete each other's images and loop files. Each sweep holds an
`fcntl.flock` on a lock file (beside the database, and inside the workdir) for as long
as it runs; the kernel drops the lock when the process dies, so a crash or kill -9
never leaves a stale lock behind. The holder writes its pid and command line into the
file so a second sweep can say who is in the way, and removes the file when it is done
(also when it fails), so no `.lock` file is left beside a database.

A database is locked by the file it resolves to, not by the name it was given: `x.db`
and a symlink `alias.db` to it share one lock (`x.db.lock`, beside the real file).

A name is not the file, though: a hard link `hard.db`, a bind mount or a renamed path reaches the
same inode under another name, and a lock beside the name would let two sweeps write one file
through two write-ahead logs (`x.db-wal` and `hard.db-wal`), so that one sweep's runs are lost. So a
sweep also holds an `flock` on the database file itself, its -wal and the workdir
(:func:`exclusive_identity`): keyed on (st_dev, st_ino), whatever the path. The holder is found in
the kernel's lock table (/proc/locks), its command in /proc/PID/cmdline. SQLite locks with fcntl(2)
byte ranges, which on a local filesystem never interact with flock(2); on a network filesystem the
kernel emulates flock with fcntl locks, which would then block SQLite's own, so there only the lock
beside the name is taken."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from iomatrix.errors import UserError
from iomatrix.mountinfo import innermost_mount
from iomatrix.protocol_registry import kernel_fs_types


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
    return UserError(
        f"{what} is in use by {_holder(fd)}",
        hint="wait for that sweep to finish, or use another --db / --workdir",
    )


@contextlib.contextmanager
def exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if missing); `what` names the locked thing."""
    fd = _lock_current_file(lock_path, what)
    try:
        me = f"{os.getpid()} {' '.join(sys.argv)}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        try:
            yield
        finally:
            # Remove the file while the lock is still held: a process that opened it before and
            # locks it after sees that the name no longer leads to its file and starts again (see
            # _lock_current_file).
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.unlink(lock_path)
    finally:
        os.close(fd)


def _lock_current_file(lock_path: Path, what: str) -> int:
    """An fd of `lock_path`, exclusively locked, that is still the file the name leads to (bounded
    retries)."""
    for _ in range(100):
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            raise UserError(
                f"cannot create the lock file {lock_path}: {err.strerror}",
                hint=f"make the directory of {what} writable",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            err = _in_use(fd, what)
            os.close(fd)
            raise err from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock_path, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder before us removed this file as it let go: lock the new one
    raise UserError(
        f"cannot take the lock file {lock_path}: it keeps being replaced", hint="try again"
    )


def refuse_if_held(lock_path: Path, what: str) -> None:
    """Raise the "in use" error now if another process holds `lock_path` (creating nothing when it
    does not exist), so checks that read what the holder may be writing (a results database it is
    creating) never see its half-made state. Not a lock: :func:`exclusive` still takes the real
    one."""
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


def is_held(lock_path: Path) -> bool:
    """Whether some process holds `lock_path` now (creates nothing, takes no lock; a missing file is
    not held).

    Read from the kernel's table of locks (/proc/locks), not by trying a lock: a reader that took
    even a shared lock for an instant could make a sweep starting at that instant think the database
    is in use."""
    try:
        st = os.stat(lock_path, follow_symlinks=False)
    except OSError:
        return False
    holders = _flock_holders(st)
    if holders is None:
        try:
            refuse_if_held(lock_path, "")
        except UserError:
            return True
        return False
    return bool(holders)


# Filesystems on which flock(2) is emulated with fcntl(2) byte-range locks (it would then block
# SQLite's locks): these, and every network protocol's kernel mounts (an NFS mount's types:
# protocols.kernel_fs_types).
_FLOCK_EMULATED = (
    "cifs",
    "smb3",
    "smbfs",
    "ceph",
    "9p",
    "fuse",
    "lustre",
    "gfs2",
    "ocfs2",
    "afs",
    "glusterfs",
)


def _flock_emulated(path: Path) -> bool:
    try:
        mount = innermost_mount(os.path.realpath(path))
    except OSError:
        return False
    fstype = (mount or {}).get("fstype", "")
    name = fstype.split(".")[0]
    return name in _FLOCK_EMULATED or name in kernel_fs_types()


def _flock_holders(st: os.stat_result) -> list[int] | None:
    """The pids that hold an flock on the file `st` describes, from /proc/locks (None: the table is
    unreadable)."""
    me = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; blocked waiters ("-> FLOCK …") hold nothing
    # yet.
    return [
        int(f[4])
        for f in (line.split() for line in table.splitlines())
        if len(f) > 5 and f[0] != "->" and f[1] == "FLOCK" and f[5] == me and f[4].isdigit()
    ]


def _process(pid: int) -> str:
    """ "process PID (its command line)", read from /proc; just "process PID" when it cannot be
    read."""
    try:
        cmd = (
            Path(f"/proc/{pid}/cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode("utf-8", "replace")
            .strip()
        )
    except OSError:
        cmd = ""
    return f"process {pid} ({cmd[:200]})" if cmd else f"process {pid}"


def _identity_in_use(path: Path, st: os.stat_result, what: str) -> UserError:
    holders = _flock_holders(st) or []
    # ourselves only when no one else holds it
    others = [p for p in holders if p != os.getpid()] or holders
    holder = _process(others[0]) if others else "another process"
    return UserError(
        f"{what} is in use by {holder}: {path} is the same file (device {os.major(st.st_dev)}:"
        f"{os.minor(st.st_dev)}, inode {st.st_ino}) under another name",
        hint="wait for that sweep to finish, or use another --db / --workdir (a copy, not a link)",
    )


def refuse_if_identity_held(path: Path, what: str) -> None:
    """Raise the "in use" error now if another process holds an flock on the file or directory
    `path` leads to (a hard link, bind mount or renamed path of a database a sweep is writing);
    opens nothing, locks nothing."""
    try:
        st = os.stat(path)
    except OSError:
        return  # nothing there yet: the lock beside the name covers its creation
    holders = _flock_holders(st)
    if holders is None:
        holders = [] if not _probe_flock(path) else [0]
    if holders:
        raise _identity_in_use(path, st, what)


def _probe_flock(path: Path) -> bool:
    """Whether a shared flock on `path` is refused now (only when /proc/locks cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def identity_held(path: Path) -> bool:
    """Whether some process holds an flock on the file `path` leads to (read from /proc/locks; locks
    nothing)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return bool(_flock_holders(st))


@contextlib.contextmanager
def exclusive_identity(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive flock on the file or directory `path` itself, keyed by its inode, not its
    name: a hard link, a bind mount or a renamed path to it is refused with the holder. The kernel
    drops it when the process dies. A no-op on a filesystem that emulates flock with fcntl locks
    (see the module's docstring).

    The descriptor is closed only when the block ends: closing a descriptor of a file drops every
    fcntl lock this process holds on it, SQLite's included, so close the database before leaving the
    block."""
    if _flock_emulated(path):
        yield
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise UserError(
            f"cannot open {what} to lock it: {err.strerror}",
            hint=f"check the permissions of {path}",
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _identity_in_use(path, os.fstat(fd), what) from None
        yield
    finally:
        os.close(fd)


def db_lock_path(db: Path) -> Path:
    """The lock of the database file `db` resolves to (symlinks followed), beside that file."""
    real = Path(db).resolve()
    return real.with_name(real.name + ".lock")


WORKDIR_LOCK = ".iomatrix.lock"
