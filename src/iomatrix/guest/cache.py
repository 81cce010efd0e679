"""The guest cache directory: where it lives and how an entry is built and published.

Layout (root: `default_cache_dir()`, `$IOMATRIX_CACHE/guest` or `~/.cache/iomatrix/guest`)::

    kernels/<package>_<version>/      unpacked Debian kernel package (kernel.py)
    fio-static/fio_<version>          static fio built from Debian's source package (static_fio.py)
    builds/<cache_key>/               vmlinuz or vmlinux, initramfs.cpio.<ext>, manifest.json (artifacts.py)
    accel.json                        accelerator probe results (accel.py)
    tarballs/                         filesystem-workload tarballs (tarball.py)

Several iomatrix processes may build into one cache at once (`scripts/setup.sh` beside
`scripts/test`, two `iomatrix guest build`). Each entry is built under its own lock
(`entry_lock`: a `.NAME.lock` beside it), checked again once the lock is held (another builder may
have finished it meanwhile), staged in a directory of this process's own (`staged_dir`) and renamed
into place: a reader sees the whole entry or none of it, and a second builder waits, saying so, then
reuses what the first built.
"""  # noqa: E501

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from iomatrix.errors import UserError

# How long a builder waits for another that builds the same entry: past a static fio build from
# source on a loaded 2-core host (~1–5 min) and a kernel download on a slow mirror, with room.
ENTRY_WAIT_S = 1800.0
# How often the waiting builder says it is still waiting.
ENTRY_WAIT_NOTE_S = 60.0


def cache_root() -> Path:
    """iomatrix's cache: `$IOMATRIX_CACHE` or `~/.cache/iomatrix` (the guest's artifacts, the fleet
    hosts' fio)."""
    env = os.environ.get("IOMATRIX_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "iomatrix"


def default_cache_dir() -> Path:
    return cache_root() / "guest"


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        pid = ""
    return f"process {pid}" if pid.isdigit() else "another process"


@contextlib.contextmanager
def entry_lock(
    dest: Path,
    what: str,
    log: Callable[[str], None] | None = None,
    wait_s: float = ENTRY_WAIT_S,
) -> Iterator[None]:
    """Hold the lock of the cache entry `dest` (`what` names it to a person) for the block.

    When another process holds it, one line says so (and another every ENTRY_WAIT_NOTE_S), and this
    one waits up to `wait_s`. An flock: the kernel drops it when its holder dies, so a killed build
    never leaves a stale lock. The lock file stays (a few bytes): removing it while another process
    has it open would let two builders hold two different files' locks."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock = dest.parent / f".{dest.name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise UserError(
            f"cannot create the lock file {lock}: {err.strerror}",
            hint=f"make {dest.parent} writable, or set IOMATRIX_CACHE to a directory of yours",
        ) from None
    try:
        t0 = time.monotonic()
        next_note = t0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                if now - t0 >= wait_s:
                    raise UserError(
                        f"{what} is still being built by {_holder(fd)} after {wait_s:.0f} s",
                        hint="wait for that build to finish (or stop it), then run this again",
                    ) from None
                if log is not None and now >= next_note:
                    waited = f" ({now - t0:.0f} s so far)" if next_note > t0 else ""
                    log(f"waiting for {_holder(fd)}, which is building {what}{waited}")
                    next_note = now + ENTRY_WAIT_NOTE_S
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # drops the lock


@contextlib.contextmanager
def staged_dir(dest: Path, prefix: str) -> Iterator[Path]:
    """A private scratch directory beside `dest` that replaces `dest` only if the block completes,
    so a half-built cache entry is never visible (and an interrupted build leaves nothing behind).

    Hold `entry_lock(dest)` around it: an entry being replaced (a rebuild) is moved aside first, so
    the new one can be renamed in (rename cannot replace a non-empty directory)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent))
    try:
        yield tmp
        old = None
        if dest.exists():
            old = dest.parent / f"{prefix}old-{os.getpid()}"
            dest.rename(old)
        tmp.rename(dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
