"""Under which name a results database's last writes are (issue 50): one job, a record per open
database file.

SQLite keeps a WAL database's recent transactions in `NAME-wal`, beside the name it was opened by,
until a checkpoint copies them into the file (at the latest when the last connection closes). A
sweep killed with SIGKILL leaves them there: nothing is lost, the next sweep opened by that name
reads them and resumes. Opened by another name of the same file (a hard link, or the file renamed or
moved), SQLite looks for `OTHER-wal`, finds none, and reads the file without those transactions.
Reading, it shows an older sweep, or no iomatrix table at all ("not an iomatrix results database",
the wrong reason). Writing, it starts a log of its own, and the pending one replayed later over the
changed file damages it.

Promises:
- a writer records, while it has the file open, the name it opened it by (symlinks resolved, as
  SQLite does), keyed by the file's identity (device, inode), in a directory of this host
  (`state_dir()`), before its first write; and removes the record once it closed the database and
  its -wal holds no page (checkpointed);
- opening a file by another name than its record's while the recorded name's -wal holds pages is
  refused, for reading and writing, with one line naming the name to use;
- a record whose name leads to another file now (the inode reused) or whose -wal is gone says
  nothing;
- read-only commands only read records: a stale one is removed by the next writer of the same file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from iomatrix.errors import UserError


def state_dir() -> Path:
    """Where the records are: `$IOMATRIX_STATE` (tests), `/var/lib/iomatrix/open-databases` for root
    (a WAL outlives a reboot, so not /run), else `$XDG_STATE_HOME/iomatrix/open-databases`
    (~/.local/state)."""
    if env := os.environ.get("IOMATRIX_STATE"):
        return Path(env) / "open-databases"
    if os.geteuid() == 0:
        return Path("/var/lib/iomatrix/open-databases")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "iomatrix" / "open-databases"


def _key(st: os.stat_result) -> str:
    return f"{os.major(st.st_dev)}-{os.minor(st.st_dev)}-{st.st_ino}"


def _wal_pages(name: Path) -> bool:
    wal = name.with_name(name.name + "-wal")
    try:
        return wal.stat().st_size > 0
    except OSError:
        return False


def recorded_name(path: Path) -> Path | None:
    """The name the file at `path` was opened by when its writer did not close it, if that name's
    -wal still holds pages and the name is not `path` itself; None otherwise (also when `path` does
    not exist yet)."""
    try:
        st = os.stat(path)
        text = (state_dir() / _key(st)).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    other = Path(text)
    if (
        not text
        or not other.is_absolute()
        or other == Path(os.path.realpath(path))
        or not _wal_pages(other)
    ):
        return None
    try:
        same = os.path.samefile(other, path)
    except OSError:
        same = False  # the name is gone (renamed away), its -wal left beside where it was
    if not same and other.exists():
        # that name is another file now: the record outlived its file, and the inode was reused
        return None
    return other


def refuse_if_written_elsewhere(path: Path) -> None:
    """One line, exit 2, when the last writes of the file at `path` wait in a -wal under another
    name."""
    other = recorded_name(path)
    if other is None:
        return
    if other.exists():
        raise UserError(
            f"results database {path} is the same file as {other} (a hard link), whose "
            "sweep did not "
            f"close it: its last writes are in {other}-wal, which SQLite reads only "
            "under that name",
            hint=f"use --db {other} once (a run resumes that sweep and closes it), then "
            "either name",
        )
    raise UserError(
        f"results database {path} was written as {other}, which is gone (renamed or "
        "moved) with its "
        f"last writes left in {other}-wal, which SQLite reads only under that name",
        hint=f"move {path} back to {other} and open it there once, or move {other}-wal beside it "
        f"as {path}-wal",
    )


def record(path: Path) -> None:
    """Record that this process writes the file at `path` by that name (best effort: a host where
    the state directory cannot be written only loses the better message)."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        where = state_dir()
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".{_key(st)}.{os.getpid()}"
        tmp.write_text(os.path.realpath(path) + "\n", encoding="utf-8")
        os.replace(tmp, where / _key(st))


def forget(path: Path) -> None:
    """Remove the record of the file at `path`, after its writer closed the database, unless its
    -wal still holds pages (another connection kept the checkpoint from finishing): then the record
    still says where they are."""
    if _wal_pages(Path(os.path.realpath(path))):
        return
    with contextlib.suppress(OSError):
        (state_dir() / _key(os.stat(path))).unlink()
