"""A ledger of everything iomatrix creates on the host, and `iomatrix clean`.

Before `provision` creates anything (a scratch directory or sparse file, a loop
device, a mount, an LV, a ZFS dataset) it appends an entry to
`<workdir>/.iomatrix/leftovers.json` (written atomically under a lock, with the
creating pid and that process's start time); after a successful teardown the
entry is dropped.  If the run dies — even by `kill -9` — the entries stay, and
`clean(workdir)` undoes them in reverse creation order (unmount, detach, delete),
but only for entries whose creating process is gone, and only after checking
that the thing on the host is still the one recorded (same mount source, loop
device still backed by our file).  Nothing that is not in the ledger is touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from iomatrix.mountinfo import parse_mountinfo

STATE_DIR = ".iomatrix"
STATE_FILE = "leftovers.json"
LOCK_FILE = "leftovers.lock"

EntryKind = Literal["path", "loop", "mount", "lv", "zfs"]


@dataclass
class Entry:
    """One created thing: `target` is a path (path/mount), the backing file (loop),
    "vg/lv" (lv) or "pool/name" (zfs)."""

    id: str
    kind: EntryKind
    target: str
    pid: int
    pid_start: int | None
    created: float
    info: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        what = {"path": "path", "loop": "loop device over", "mount": "mount on",
                "lv": "logical volume", "zfs": "ZFS dataset"}[self.kind]
        return f"{what} {self.target}"


# ---------------------------------------------------------------------------------------------
# process identity
# ---------------------------------------------------------------------------------------------


def _proc_start(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a live, non-zombie process; None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):  # zombie/dead: killed but not yet reaped
        return None
    return int(fields[19])


def process_alive(pid: int, start: int | None) -> bool:
    """Is the process that wrote an entry still running (pid reuse detected via start time)?"""
    now = _proc_start(pid)
    if now is None:
        return False
    return start is None or now == start


# ---------------------------------------------------------------------------------------------
# the state file
# ---------------------------------------------------------------------------------------------


def state_path(workdir: Path) -> Path:
    return Path(workdir) / STATE_DIR / STATE_FILE


@contextlib.contextmanager
def _locked(workdir: Path, *, create: bool = True) -> Iterator[Path | None]:
    sdir = Path(workdir) / STATE_DIR
    if not sdir.is_dir():
        if not create:
            yield None
            return
        sdir.mkdir(parents=True, exist_ok=True)
    fd = os.open(sdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield sdir / STATE_FILE
    finally:
        os.close(fd)  # releases the flock


def _load(path: Path) -> list[Entry]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    return [Entry(**e) for e in data.get("entries", [])]


def _save(path: Path, entries: list[Entry]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    payload = json.dumps({"version": 1, "entries": [asdict(e) for e in entries]}, indent=1)
    with open(tmp, "w") as f:
        f.write(payload + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def record(workdir: Path, kind: EntryKind, target: str | Path, **info: Any) -> str:
    """Append an entry (before creating the thing); returns its id."""
    entry = Entry(id=secrets.token_hex(6), kind=kind, target=str(target), pid=os.getpid(),
                  pid_start=_proc_start(os.getpid()), created=time.time(), info=info)
    with _locked(workdir) as path:
        assert path is not None
        entries = _load(path)
        entries.append(entry)
        _save(path, entries)
    return entry.id


def update(workdir: Path, entry_id: str, **info: Any) -> None:
    """Add details to an entry once they are known (e.g. the loop device name)."""
    with _locked(workdir) as path:
        assert path is not None
        entries = _load(path)
        for e in entries:
            if e.id == entry_id:
                e.info.update(info)
        _save(path, entries)


def _drop(workdir: Path, gone: Callable[[Entry], bool]) -> None:
    """Remove the entries `gone` selects from the ledger, under its lock."""
    with _locked(workdir, create=False) as path:
        if path is None or not path.exists():
            return
        entries = _load(path)
        kept = [e for e in entries if not gone(e)]
        if len(kept) != len(entries):
            _save(path, kept)


def release(workdir: Path, entry_id: str) -> None:
    """Drop an entry after its thing was removed."""
    _drop(workdir, lambda e: e.id == entry_id)


def register_temp_path(workdir: Path, path: Path) -> None:
    """Record a temporary file or directory (e.g. a fresh qcow2 per run) for `clean`."""
    record(workdir, "path", Path(os.path.abspath(path)))


def forget(workdir: Path, path: Path) -> None:
    """Drop the entries for `path` (call after deleting it yourself)."""
    target = str(Path(os.path.abspath(path)))
    _drop(workdir, lambda e: e.target == target)


def pending(workdir: Path) -> list[Entry]:
    """Entries currently recorded (live or dead creators)."""
    with _locked(workdir, create=False) as path:
        return [] if path is None else _load(path)


# ---------------------------------------------------------------------------------------------
# undo actions, shared by provision's teardown and clean
# ---------------------------------------------------------------------------------------------


class LeftoverError(Exception):
    """An undo action could not be completed (the entry is kept)."""


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def mounts_at(mountpoint: str) -> list[dict[str, str]]:
    return [m for m in parse_mountinfo() if m["mountpoint"] == mountpoint]


def loops_backed_by(backing_file: str) -> list[str]:
    """Loop devices attached to `backing_file` (matched by losetup on device+inode)."""
    if not os.path.exists(backing_file):
        return []
    out = _run(["losetup", "--list", "--noheadings", "--output", "NAME", "-j", backing_file])
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def undo_mount(mountpoint: str, source: str | None) -> list[str]:
    """Unmount our mount (checking its source), then remove the empty mountpoint directory."""
    mountpoint = os.path.realpath(mountpoint)
    done = []
    for _ in range(8):  # stacked mounts: unmount the top one each round
        here = mounts_at(mountpoint)
        if not here:
            break
        top = here[-1]
        if source is not None and top["source"] != source:
            raise LeftoverError(f"{mountpoint} is mounted from {top['source']}, not {source}: left alone")
        for attempt in range(10):
            out = _run(["umount", mountpoint])
            if out.returncode == 0:
                break
            if attempt == 9:
                raise LeftoverError(f"cannot unmount {mountpoint}: {out.stderr.strip()}")
            time.sleep(0.2)
        done.append(f"unmounted {mountpoint} ({top['source']})")
    if os.path.isdir(mountpoint) and not mounts_at(mountpoint):
        try:
            os.rmdir(mountpoint)
            done.append(f"removed mountpoint {mountpoint}")
        except OSError:
            pass  # not empty: the enclosing scratch directory entry deals with it
    return done


def undo_loop(backing_file: str) -> list[str]:
    """Detach every loop device over our backing file (never one over someone else's file)."""
    done = []
    mounted = {m["source"] for m in parse_mountinfo()}
    for dev in loops_backed_by(backing_file):
        if dev in mounted:
            raise LeftoverError(f"{dev} (over {backing_file}) is still mounted: left attached")
        out = _run(["losetup", "--detach", dev])
        if out.returncode != 0 and dev in loops_backed_by(backing_file):
            raise LeftoverError(f"cannot detach {dev}: {out.stderr.strip()}")
        done.append(f"detached {dev} (backing file {backing_file})")
    return done


def undo_path(path: str) -> list[str]:
    """Delete our file or directory tree, refusing if anything is mounted or looped inside it."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return []
    if p.resolve() == Path("/") or len(p.resolve().parts) < 3:
        raise LeftoverError(f"refusing to delete {path}: too close to /")
    real = os.path.realpath(path)
    for m in parse_mountinfo():
        if m["mountpoint"] == real or m["mountpoint"].startswith(real.rstrip("/") + "/"):
            raise LeftoverError(f"{m['mountpoint']} is still mounted inside {path}: not deleted")
    if p.is_dir() and not p.is_symlink():
        for f in p.rglob("*"):
            if f.is_file() and loops_backed_by(str(f)):
                raise LeftoverError(f"{f} still backs a loop device: not deleted")
        shutil.rmtree(p)
    else:
        if p.is_file() and loops_backed_by(str(p)):
            raise LeftoverError(f"{p} still backs a loop device: not deleted")
        p.unlink()
    return [f"deleted {path}"]


def _remove_with_retries(argv: list[str], done: str, failed: str) -> list[str]:
    """Run a removal command, retrying briefly (udev or a closing fd may hold the volume for a moment)."""
    for attempt in range(5):
        out = _run(argv)
        if out.returncode == 0:
            return [done]
        if attempt < 4:
            time.sleep(0.5)
    raise LeftoverError(f"{failed}: {out.stderr.strip()}")


def undo_lv(target: str) -> list[str]:
    if shutil.which("lvs") is None:
        raise LeftoverError(f"cannot remove logical volume {target}: lvm2 is not installed")
    if _run(["lvs", "--noheadings", "-o", "lv_name", target]).returncode != 0:
        return []
    return _remove_with_retries(["lvremove", "--yes", "--force", target], f"removed logical volume {target}",
                                f"cannot remove logical volume {target}")


def undo_zfs(target: str) -> list[str]:
    if shutil.which("zfs") is None:
        raise LeftoverError(f"cannot destroy ZFS dataset {target}: zfsutils-linux is not installed")
    if _run(["zfs", "list", "-H", "-o", "name", target]).returncode != 0:
        return []
    return _remove_with_retries(["zfs", "destroy", "-r", target], f"destroyed ZFS dataset {target}",
                                f"cannot destroy ZFS dataset {target}")


def undo(entry: Entry) -> list[str]:
    """Remove the thing an entry records; returns what was done (empty if already gone)."""
    if entry.kind == "mount":
        return undo_mount(entry.target, entry.info.get("source"))
    if entry.kind == "loop":
        return undo_loop(entry.target)
    if entry.kind == "path":
        return undo_path(entry.target)
    if entry.kind == "lv":
        return undo_lv(entry.target)
    if entry.kind == "zfs":
        return undo_zfs(entry.target)
    raise LeftoverError(f"unknown leftover kind {entry.kind!r}")


# ---------------------------------------------------------------------------------------------
# clean
# ---------------------------------------------------------------------------------------------


def clean(workdir: Path, *, mine: bool = False) -> list[str]:
    """Undo everything recorded in `workdir` whose creating process is dead.

    Works in reverse creation order (so: unmount, detach, delete).  Entries of live
    processes are left alone (and reported); entries whose undo fails are kept (and
    reported) so a later `clean` can retry.  `mine=True` also undoes the calling
    process's own entries (a retry after a failed teardown, when none of its
    backings is in use any more).  Returns human-readable lines; an empty list
    means there was nothing to do.
    """
    lines: list[str] = []
    with _locked(Path(workdir), create=False) as path:
        if path is None or not path.exists():
            return []
        entries = _load(path)
        keep: list[Entry] = []
        failed_chain: set[str] = set()
        for entry in reversed(entries):
            own = mine and entry.pid == os.getpid()
            if not own and process_alive(entry.pid, entry.pid_start):
                lines.append(f"left alone: {entry.describe()} (pid {entry.pid} is still running)")
                keep.append(entry)
                continue
            if entry.info.get("chain") is not None and entry.info["chain"] in failed_chain:
                lines.append(f"kept: {entry.describe()} (an earlier step of its teardown failed)")
                keep.append(entry)
                continue
            try:
                did = undo(entry)
            except (LeftoverError, OSError, subprocess.SubprocessError) as exc:
                lines.append(f"failed: {entry.describe()}: {exc}")
                keep.append(entry)
                if entry.info.get("chain") is not None:
                    failed_chain.add(entry.info["chain"])
                continue
            lines.extend(did or [f"forgot {entry.describe()} (already gone)"])
        keep.reverse()
        _save(path, keep)
    return lines
