"""A ledger of everything iomatrix creates on the host, and `iomatrix clean`.

Before `provision` creates anything (a scratch directory or sparse file, a loop
device, a mount, an LV, a ZFS dataset) it appends an entry to
`<workdir>/.iomatrix/leftovers.json` (written atomically under a lock, with the
creating pid and that process's start time); after a successful teardown the
entry is dropped.  Each child process a sweep starts (fio, qemu-storage-daemon, QEMU,
nbdkit: `children.spawn`) is recorded too, by pid and start time, from just after its
fork until it is reaped; `clean` kills one still running once its sweep is dead.
If the run dies — even by `kill -9` — the entries stay, and
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

This module is the ledger: the signed entries, the key, the JSON file and its lock, and `clean`.
What each kind of entry is, how its identity is checked and how it is undone lives in
`backing.leftover_kinds`, one class per kind."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import hmac
import json
import os
import secrets
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from iomatrix.backing.leftover_kinds import (
    LEFTOVER_KINDS,
    EntryKind,
    Leftover,
    LeftoverError,
    proc_start,
)
from iomatrix.errors import UserError
from iomatrix.plugins import load_object
from iomatrix.protocol_registry import protocols


@functools.cache
def _protocol_kinds() -> dict[str, type[Leftover]]:
    """The leftover kinds the network protocols' lab halves record (`NetworkProtocol.
    leftover_kinds`: a tgtd, an RPC registration, an image in an RBD pool), imported when a ledger
    first names a kind that is not the host's own."""
    found: dict[str, type[Leftover]] = {}
    for network in protocols():
        for where in network.leftover_kinds:
            cls = load_object(where)
            found[cls.kind] = cls
    return found


def kind_class(kind: str) -> type[Leftover] | None:
    """The class of a leftover kind the ledger may name: the host's own (leftover_kinds) or a
    network protocol's; None for a kind iomatrix does not know."""
    return LEFTOVER_KINDS.get(kind) or _protocol_kinds().get(kind)


STATE_DIR = ".iomatrix"
STATE_FILE = "leftovers.json"
LOCK_FILE = "leftovers.lock"
KEY_FILE = "ledger.key"
LEDGER_VERSION = 2


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
    # HMAC-SHA256 over the other fields and the workdir, with the workdir's ledger key
    mac: str = ""

    def leftover(self) -> Leftover | None:
        """The thing this entry records, as its kind's class (None for a kind iomatrix does not
        know)."""
        kind = kind_class(self.kind)
        return None if kind is None else kind(self.target, self.info)

    def describe(self) -> str:
        kind = kind_class(self.kind)
        return f"{kind.label if kind is not None else self.kind} {self.target}"


# ---------------------------------------------------------------------------------------------
# process identity
# ---------------------------------------------------------------------------------------------


def process_alive(pid: int, start: int | None) -> bool:
    """Is the process that wrote an entry still running (pid reuse detected via start time)?"""
    now = proc_start(pid)
    if now is None:
        return False
    return start is None or now == start


# ---------------------------------------------------------------------------------------------
# the state file
# ---------------------------------------------------------------------------------------------


def state_path(workdir: Path) -> Path:
    return Path(workdir) / STATE_DIR / STATE_FILE


class LedgerError(UserError):
    """The ledger (or its key) is not one iomatrix wrote for this workdir: nothing is done with
    it."""


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
        raise LedgerError(
            f"{sdir} is not a directory (a symlink or a file): the ledger there is not trusted",
            hint=f"remove {sdir} by hand after checking it",
        )
    if st.st_uid != os.geteuid():
        raise LedgerError(
            f"{sdir} belongs to uid {st.st_uid}, not to this user ({os.geteuid()}): not trusted",
            hint="run iomatrix as the user who ran the sweep",
        )
    return sdir


def _key(sdir: Path, *, create: bool) -> bytes | None:
    """The workdir's ledger key: 32 random bytes, mode 0600, owned by us."""
    path = sdir / KEY_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        # Written under a name of its own, then linked into place: a thread or process that finds
        # the key must never read it half-written (the guest tier creates a boot's images from
        # several threads).
        tmp = sdir / f"{KEY_FILE}.{os.getpid()}.{threading.get_ident()}"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
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
        raise LedgerError(
            f"cannot open the ledger key {path}: {exc.strerror}",
            hint=f"remove {sdir} by hand after checking it",
        ) from None
    try:
        st = os.fstat(fd)
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    if (
        st.st_uid != os.geteuid()
        or st.st_mode & 0o077
        or not stat.S_ISREG(st.st_mode)
        or len(data) != 32
    ):
        raise LedgerError(
            f"ledger key {path} is not a 32-byte file of mode 0600 owned by this user: the ledger "
            "is not trusted",
            hint=f"remove {sdir} by hand after checking what it lists",
        )
    return data


def _mac(key: bytes, workdir: Path, entry: Entry) -> str:
    fields = asdict(entry)
    fields.pop("mac")
    fields["workdir"] = os.path.realpath(workdir)
    return hmac.new(
        key, json.dumps(fields, sort_keys=True, default=str).encode(), hashlib.sha256
    ).hexdigest()


@dataclass
class _Ledger:
    path: Path
    key: bytes | None
    workdir: Path

    def sign(self, entry: Entry) -> None:
        assert self.key is not None
        entry.mac = _mac(self.key, self.workdir, entry)

    def verified(self, entry: Entry) -> bool:
        return (
            self.key is not None
            and bool(entry.mac)
            and hmac.compare_digest(entry.mac, _mac(self.key, self.workdir, entry))
        )


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
    "id": (str,),
    "kind": (str,),
    "target": (str,),
    "pid": (int,),
    "pid_start": (int, type(None)),
    "created": (int, float),
    "info": (dict,),
    "mac": (str,),
}


def _entry_ok(e: object) -> bool:
    if not isinstance(e, dict) or set(e) - set(_FIELD_TYPES):
        return False
    if any(k not in e for k in _FIELD_TYPES if k not in ("info", "mac")):
        return False
    for k, types in _FIELD_TYPES.items():
        if k in e and (not isinstance(e[k], types) or isinstance(e[k], bool)):
            return False
    return isinstance(e["kind"], str) and kind_class(e["kind"]) is not None


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


def _save(path: Path, entries: list[Entry], *, durable: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    payload = json.dumps(
        {"version": LEDGER_VERSION, "entries": [asdict(e) for e in entries]}, indent=1
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "w") as f:
        f.write(payload + "\n")
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if not durable:
        return
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def record(
    workdir: Path, kind: EntryKind, target: str | Path, *, durable: bool = True, **info: Any
) -> str:
    """Append a signed entry (before creating the thing); returns its id. `durable=False` skips the
    fsyncs, for what cannot outlive the host anyway (a process): the rename is still atomic against
    a kill."""
    entry = Entry(
        id=secrets.token_hex(6),
        kind=kind,
        target=str(target),
        pid=os.getpid(),
        pid_start=proc_start(os.getpid()),
        created=time.time(),
        info=info,
    )
    with _locked(workdir) as ledger:
        assert ledger is not None
        ledger.sign(entry)
        entries = _load(ledger.path)
        entries.append(entry)
        _save(ledger.path, entries, durable=durable)
    return entry.id


def record_process(workdir: Path, pid: int, program: str) -> str | None:
    """Record a child just forked (children.spawn), by pid and start time, so that a `clean` after a
    kill stops exactly it; None when it is already gone (nothing to reclaim). A process cannot be
    recorded before it exists: until this returns, the parent-death signal alone stands for it."""
    start = proc_start(pid)
    if start is None:
        return None
    return record(workdir, "process", str(pid), durable=False, start=start, program=program)


def update(workdir: Path, entry_id: str, **info: Any) -> None:
    """Add details to an entry once they are known (e.g. the loop device name); re-signs it."""
    _edit(workdir, lambda e: e.info.update(info) if e.id == entry_id else None)


def _edit(workdir: Path, change: Callable[[Entry], object]) -> None:
    """Apply `change` to every verified entry and re-sign it; unverified entries stay as they
    are."""
    with _locked(workdir) as ledger:
        assert ledger is not None
        entries = _load(ledger.path)
        for e in entries:
            if ledger.verified(e):
                change(e)
                ledger.sign(e)
        _save(ledger.path, entries)


def _drop(workdir: Path, gone: Callable[[Entry], bool], *, durable: bool = True) -> None:
    """Remove the (verified) entries `gone` selects from the ledger, under its lock."""
    with _locked(workdir, create=False) as ledger:
        if ledger is None or not ledger.path.exists():
            return
        entries = _load(ledger.path)
        kept = [e for e in entries if not (ledger.verified(e) and gone(e))]
        if len(kept) != len(entries):
            _save(ledger.path, kept, durable=durable)


def release(workdir: Path, entry_id: str, *, durable: bool = True) -> None:
    """Drop an entry after its thing was removed."""
    _drop(workdir, lambda e: e.id == entry_id, durable=durable)


def register_temp_path(workdir: Path, path: Path) -> None:
    """Record a temporary file or directory (e.g. a fresh qcow2 per run) for `clean`."""
    record(workdir, "path", Path(os.path.abspath(path)))


def short_scratch_dir(workdir: Path, label: str) -> Path:
    """A private directory under the system's temporary directory, recorded before it is made: for
    what needs a short path (a UNIX socket's is limited to 108 bytes, and a working directory may be
    deep). Named like a backing's scratch directory (``iomx-<label>-<pid>-<hex6>``) with the
    temporary directory as its recorded base, so `iomatrix clean` can show it is ours although it
    lies outside the working directory."""
    base = Path(os.path.realpath(tempfile.gettempdir()))
    path = base / f"iomx-{label}-{os.getpid()}-{secrets.token_hex(3)}"
    record(workdir, "path", path, base=str(base))
    path.mkdir(mode=0o700)
    return path


def forget(workdir: Path, path: Path) -> None:
    """Drop the entries for `path` (call after deleting it yourself)."""
    target = str(Path(os.path.abspath(path)))
    _drop(workdir, lambda e: e.target == target)


def pending(workdir: Path) -> list[Entry]:
    """Entries currently recorded (live or dead creators, verified or not)."""
    with _locked(workdir, create=False) as ledger:
        return [] if ledger is None else _load(ledger.path)


# ---------------------------------------------------------------------------------------------
# identity and undo, by the entry's kind (backing.leftover_kinds)
# ---------------------------------------------------------------------------------------------


def identity_problem(entry: Entry, workdir: Path, scratch_dirs: tuple[str, ...] = ()) -> str | None:
    """Why `entry` cannot be shown to be something this workdir's run created (None if it can).

    `scratch_dirs`: verified scratch directories of `dir` backings outside the workdir;
    temp files inside them (guest images) are theirs.
    """
    leftover = entry.leftover()
    if leftover is None:
        return f"unknown kind {entry.kind!r}"
    return leftover.identity_problem(os.path.realpath(workdir), scratch_dirs)


def undo(entry: Entry) -> list[str]:
    """Remove the thing an entry records; returns what was done (empty if already gone)."""
    leftover = entry.leftover()
    if leftover is None:
        raise LeftoverError(f"unknown leftover kind {entry.kind!r}")
    return leftover.undo()


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
        scratch = tuple(
            e.target
            for e in entries
            if e.kind == "path"
            and "base" in e.info
            and ledger.verified(e)
            and identity_problem(e, Path(workdir)) is None
        )
        for entry in reversed(entries):
            problem = (
                None
                if ledger.verified(entry)
                else "its signature does not verify with this workdir's "
                "ledger key (not written by iomatrix for this workdir)"
            )
            problem = problem or identity_problem(entry, Path(workdir), scratch)
            if problem is not None:
                lines.append(
                    f"refused: {entry.describe()}: {problem}; not touched (check it, "
                    "then remove it "
                    f"from {ledger.path} by hand)"
                )
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
