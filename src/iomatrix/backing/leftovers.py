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

The ledger is not trusted just because it is there (issue #14: a hand-written entry
made `clean` delete a path outside the workdir and unmount a foreign mount). Every
entry carries an HMAC-SHA256 made with a per-workdir secret (`.iomatrix/ledger.key`,
32 random bytes, mode 0600, owned by the user running iomatrix) over the entry and
the workdir's real path; `clean` acts only on entries whose MAC verifies *and* whose
recorded identity still holds: temp paths, loop backing files and mountpoints inside
the workdir (a `dir` backing's scratch directory may sit in its own `path`, then it
must be an iomatrix-named child of the recorded base), mounts with their recorded
source (a loop device or iomatrix's own tmpfs), loop backing files with the recorded
inode, LV/ZFS names iomatrix generates. Anything else is refused, listed and left in
place; a malformed ledger is a one-line error.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from iomatrix.errors import UserError
from iomatrix.mountinfo import parse_mountinfo

STATE_DIR = ".iomatrix"
STATE_FILE = "leftovers.json"
LOCK_FILE = "leftovers.lock"
KEY_FILE = "ledger.key"
LEDGER_VERSION = 2
# Names iomatrix gives what it creates: scratch dirs "<label>-<pid>-<hex6>", LVs/datasets "iomx-<pid>-<hex6>".
SCRATCH_NAME = re.compile(r"[A-Za-z0-9_.-]+-[0-9]+-[0-9a-f]{6}")
VOLUME_NAME = re.compile(r"iomx-[0-9]+-[0-9a-f]{6}")
TMPFS_SOURCE = re.compile(r"iomatrix-tmpfs-[0-9a-f]+")
LOOP_SOURCE = re.compile(r"/dev/loop[0-9]+")

EntryKind = Literal["path", "loop", "mount", "lv", "zfs", "ksm"]
# A host setting changed for a sweep (the consolidation tier enables KSM): restored to the recorded value.
KSM_RUN = "/sys/kernel/mm/ksm/run"
KSM_RUN_VALUES = ("0", "1", "2")


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
    mac: str = ""  # HMAC-SHA256 over the other fields and the workdir, with the workdir's ledger key

    def describe(self) -> str:
        what = {"path": "path", "loop": "loop device over", "mount": "mount on",
                "lv": "logical volume", "zfs": "ZFS dataset", "ksm": "KSM setting changed at"}[self.kind]
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


class LedgerError(UserError):
    """The ledger (or its key) is not one iomatrix wrote for this workdir: nothing is done with it."""


def _state_dir(workdir: Path, *, create: bool) -> Path | None:
    """`.iomatrix` of the workdir: a real directory owned by us (created 0700), never a symlink."""
    sdir = Path(workdir) / STATE_DIR
    try:
        st = os.lstat(sdir)
    except FileNotFoundError:
        if not create:
            return None
        os.makedirs(workdir, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(sdir, 0o700)
        st = os.lstat(sdir)
    except NotADirectoryError:
        return None  # the "workdir" is a file: nothing was ever recorded there
    if not stat.S_ISDIR(st.st_mode):
        raise LedgerError(f"{sdir} is not a directory (a symlink or a file): the ledger there is not trusted",
                          hint=f"remove {sdir} by hand after checking it")
    if st.st_uid != os.geteuid():
        raise LedgerError(f"{sdir} belongs to uid {st.st_uid}, not to this user ({os.geteuid()}): not trusted",
                          hint="run iomatrix as the user who ran the sweep")
    return sdir


def _key(sdir: Path, *, create: bool) -> bytes | None:
    """The workdir's ledger key: 32 random bytes, mode 0600, owned by us."""
    path = sdir / KEY_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        # Written under a name of its own, then linked into place: a thread or process that finds the key
        # must never read it half-written (the guest tier creates a boot's images from several threads).
        tmp = sdir / f"{KEY_FILE}.{os.getpid()}.{threading.get_ident()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another one won: use its key
        finally:
            tmp.unlink(missing_ok=True)
        return _key(sdir, create=False)
    except OSError as exc:
        raise LedgerError(f"cannot open the ledger key {path}: {exc.strerror}",
                          hint=f"remove {sdir} by hand after checking it") from None
    try:
        st = os.fstat(fd)
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077 or not stat.S_ISREG(st.st_mode) or len(data) != 32:
        raise LedgerError(f"ledger key {path} is not a 32-byte file of mode 0600 owned by this user: the ledger "
                          "is not trusted", hint=f"remove {sdir} by hand after checking what it lists")
    return data


def _mac(key: bytes, workdir: Path, entry: Entry) -> str:
    fields = asdict(entry)
    fields.pop("mac")
    fields["workdir"] = os.path.realpath(workdir)
    return hmac.new(key, json.dumps(fields, sort_keys=True, default=str).encode(), hashlib.sha256).hexdigest()


@dataclass
class _Ledger:
    path: Path
    key: bytes | None
    workdir: Path

    def sign(self, entry: Entry) -> None:
        assert self.key is not None
        entry.mac = _mac(self.key, self.workdir, entry)

    def verified(self, entry: Entry) -> bool:
        return (self.key is not None and bool(entry.mac)
                and hmac.compare_digest(entry.mac, _mac(self.key, self.workdir, entry)))


@contextlib.contextmanager
def _locked(workdir: Path, *, create: bool = True) -> Iterator[_Ledger | None]:
    sdir = _state_dir(workdir, create=create)
    if sdir is None:
        yield None
        return
    key = _key(sdir, create=create)
    fd = os.open(sdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield _Ledger(sdir / STATE_FILE, key, Path(workdir))
    finally:
        os.close(fd)  # releases the flock


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "kind": (str,), "target": (str,), "pid": (int,), "pid_start": (int, type(None)),
    "created": (int, float), "info": (dict,), "mac": (str,),
}


def _entry_ok(e: object) -> bool:
    if not isinstance(e, dict) or set(e) - set(_FIELD_TYPES):
        return False
    if any(k not in e for k in _FIELD_TYPES if k not in ("info", "mac")):
        return False
    for k, types in _FIELD_TYPES.items():
        if k in e and (not isinstance(e[k], types) or isinstance(e[k], bool)):
            return False
    return e["kind"] in ("path", "loop", "mount", "lv", "zfs", "ksm")


def _load(path: Path) -> list[Entry]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger {path}: {exc.strerror}") from None
    hint = f"it was not written by iomatrix; check what it lists, then remove {path} by hand"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise LedgerError(f"the ledger {path} is not valid JSON", hint=hint) from None
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list):
        raise LedgerError(f"the ledger {path} has no list of entries", hint=hint)
    entries = []
    for i, e in enumerate(data.get("entries", []), 1):
        if not _entry_ok(e):
            raise LedgerError(f"the ledger {path}: entry {i} is malformed", hint=hint)
        entries.append(Entry(**e))
    return entries


def _save(path: Path, entries: list[Entry]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    payload = json.dumps({"version": LEDGER_VERSION, "entries": [asdict(e) for e in entries]}, indent=1)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "w") as f:
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
    """Append a signed entry (before creating the thing); returns its id."""
    entry = Entry(id=secrets.token_hex(6), kind=kind, target=str(target), pid=os.getpid(),
                  pid_start=_proc_start(os.getpid()), created=time.time(), info=info)
    with _locked(workdir) as ledger:
        assert ledger is not None
        ledger.sign(entry)
        entries = _load(ledger.path)
        entries.append(entry)
        _save(ledger.path, entries)
    return entry.id


def update(workdir: Path, entry_id: str, **info: Any) -> None:
    """Add details to an entry once they are known (e.g. the loop device name); re-signs it."""
    _edit(workdir, lambda e: e.info.update(info) if e.id == entry_id else None)


def _edit(workdir: Path, change: Callable[[Entry], object]) -> None:
    """Apply `change` to every verified entry and re-sign it; unverified entries stay as they are."""
    with _locked(workdir) as ledger:
        assert ledger is not None
        entries = _load(ledger.path)
        for e in entries:
            if ledger.verified(e):
                change(e)
                ledger.sign(e)
        _save(ledger.path, entries)


def _drop(workdir: Path, gone: Callable[[Entry], bool]) -> None:
    """Remove the (verified) entries `gone` selects from the ledger, under its lock."""
    with _locked(workdir, create=False) as ledger:
        if ledger is None or not ledger.path.exists():
            return
        entries = _load(ledger.path)
        kept = [e for e in entries if not (ledger.verified(e) and gone(e))]
        if len(kept) != len(entries):
            _save(ledger.path, kept)


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
    """Entries currently recorded (live or dead creators, verified or not)."""
    with _locked(workdir, create=False) as ledger:
        return [] if ledger is None else _load(ledger.path)


# ---------------------------------------------------------------------------------------------
# identity: is the recorded thing one this workdir's run created?
# ---------------------------------------------------------------------------------------------


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _parent_inside(target: str, workdir: str) -> bool:
    """Target lies in the workdir (its directory resolved: no symlinked way out); the last
    component itself is never followed by the undo actions."""
    if not os.path.isabs(target):
        return False
    norm = os.path.normpath(target)
    return _inside(os.path.realpath(os.path.dirname(norm)), workdir) and norm != workdir


def identity_problem(entry: Entry, workdir: Path, scratch_dirs: tuple[str, ...] = ()) -> str | None:
    """Why `entry` cannot be shown to be something this workdir's run created (None if it can).

    `scratch_dirs`: verified scratch directories of `dir` backings outside the workdir;
    temp files inside them (guest images) are theirs.
    """
    wd = os.path.realpath(workdir)
    t = entry.target
    if entry.kind == "path":
        if _parent_inside(t, wd) or any(_parent_inside(t, os.path.realpath(d)) for d in scratch_dirs):
            return None
        base = entry.info.get("base")
        if (isinstance(base, str) and os.path.isabs(t)
                and os.path.realpath(os.path.dirname(os.path.normpath(t))) == os.path.realpath(base)
                and SCRATCH_NAME.fullmatch(os.path.basename(t))):
            return None  # a dir backing's scratch directory in its own `path`
        return f"{t} is outside the working directory {wd}"
    if entry.kind == "loop":
        if not _parent_inside(t, wd):
            return f"loop backing file {t} is outside the working directory {wd}"
        ino = entry.info.get("inode")
        if ino is not None and os.path.exists(t):
            st = os.stat(t)
            if [st.st_dev, st.st_ino] != list(ino):
                return f"{t} is no longer the file the loop device was attached to"
        return None
    if entry.kind == "mount":
        if not _parent_inside(t, wd):
            return f"mountpoint {t} is outside the working directory {wd}"
        source = entry.info.get("source")
        if not isinstance(source, str) or not (TMPFS_SOURCE.fullmatch(source) or LOOP_SOURCE.fullmatch(source)):
            return f"the mount on {t} has no recorded iomatrix source"
        return None
    if entry.kind in ("lv", "zfs"):
        if not VOLUME_NAME.fullmatch(t.rsplit("/", 1)[-1]) or t.startswith("/") or ".." in t.split("/"):
            return f"{t} is not a name iomatrix gives its volumes"
        return None
    if entry.kind == "ksm":
        if t != KSM_RUN or entry.info.get("previous") not in KSM_RUN_VALUES:
            return f"{t} with previous value {entry.info.get('previous')!r} is not a KSM setting iomatrix changes"
        return None
    return f"unknown kind {entry.kind!r}"


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


def undo_ksm(previous: str) -> list[str]:
    """Put KSM's run setting back to what it was before a sweep enabled it."""
    if previous not in KSM_RUN_VALUES:
        raise LeftoverError(f"refusing to write {previous!r} to {KSM_RUN}")
    with open(KSM_RUN) as f:
        if f.read().strip() == previous:
            return []
    with open(KSM_RUN, "w") as f:
        f.write(previous)
    return [f"restored {KSM_RUN} to {previous}"]


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
    if entry.kind == "ksm":
        return undo_ksm(entry.info["previous"])
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
    with _locked(Path(workdir), create=False) as ledger:
        if ledger is None or not ledger.path.exists():
            return []
        entries = _load(ledger.path)
        keep: list[Entry] = []
        failed_chain: set[str] = set()
        scratch = tuple(e.target for e in entries if e.kind == "path" and "base" in e.info and ledger.verified(e)
                        and identity_problem(e, Path(workdir)) is None)
        for entry in reversed(entries):
            problem = (None if ledger.verified(entry) else "its signature does not verify with this workdir's "
                       "ledger key (not written by iomatrix for this workdir)")
            problem = problem or identity_problem(entry, Path(workdir), scratch)
            if problem is not None:
                lines.append(f"refused: {entry.describe()}: {problem}; not touched (check it, then remove it "
                             f"from {ledger.path} by hand)")
                keep.append(entry)
                continue
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
        _save(ledger.path, keep)
    return lines
