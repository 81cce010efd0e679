"""Cache hygiene before each cell, and host modifiers (eatmydata) around fio/QEMU.

`prepare_cache` drops the host page cache (sync, then drop_caches=3) so every
cell starts cold, unless the user asked to keep it warm; the outcome is recorded
with the result either way.

`modifier_wrapper("eatmydata")` returns an argv prefix, ["eatmydata"].  We use
the Debian wrapper script rather than setting LD_PRELOAD ourselves because (a)
it locates libeatmydata.so itself (/usr/lib/libeatmydata via LD_LIBRARY_PATH,
multiarch-safe) and appends to any LD_PRELOAD already set, and (b) it ends with
`exec "$cmd" "$@"`, so the PID subprocess returns is fio's or QEMU's own (the
host sampler can follow it, signals reach it).  Both fio and qemu-system-x86_64
are dynamically linked, which LD_PRELOAD needs.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from typing import Literal

from iomatrix.errors import MissingTool, UserError

DROP_CACHES = "/proc/sys/vm/drop_caches"
MODIFIERS = ("none", "eatmydata")

CacheStateName = Literal["dropped", "warm-by-request", "not-dropped"]


@dataclass(frozen=True)
class CacheState:
    """What happened to the host page cache before a cell."""

    state: CacheStateName
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def prepare_cache(keep_warm: bool) -> CacheState:
    """Sync and drop the page cache, dentries and inodes (unless keep_warm)."""
    if keep_warm:
        return CacheState("warm-by-request", "page cache kept warm on request (--keep-warm)")
    os.sync()
    try:
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
    except PermissionError:
        why = "not root" if os.geteuid() != 0 else "permission denied (container?)"
        return CacheState("not-dropped", f"{why}: cannot write {DROP_CACHES}")
    except OSError as exc:
        return CacheState("not-dropped", f"cannot write {DROP_CACHES}: {exc.strerror or exc}")
    return CacheState("dropped", f"sync, then 3 > {DROP_CACHES}")


def _check_modifier(name: str) -> None:
    if name not in MODIFIERS:
        raise UserError(
            f"unknown host modifier {name!r}", hint=f"valid modifiers: {', '.join(MODIFIERS)}"
        )


def modifier_wrapper(name: str) -> list[str]:
    """argv prefix that applies a host modifier to fio or qemu-system-x86_64 ([] for "none")."""
    _check_modifier(name)
    if name == "none":
        return []
    if shutil.which("eatmydata") is None:
        raise MissingTool("eatmydata", "eatmydata")
    return ["eatmydata"]


# QEMU aio values and fio ioengines whose flushes bypass the libc fsync/fdatasync calls
_IO_URING = {"io_uring", "io_uring_cmd"}
_LINUX_AIO = {"native", "libaio"}


def modifier_notes(name: str, aio: str | None) -> list[str]:
    """Known limits of a modifier for a cell, recorded with its result.

    `aio` is QEMU's aio (threads/native/io_uring) or fio's ioengine (psync/libaio/io_uring/...).
    """
    _check_modifier(name)
    if name == "none":
        return []
    notes = [
        "eatmydata (LD_PRELOAD libeatmydata): fsync, fdatasync, sync, syncfs, msync and "
        "sync_file_range "
        "become no-ops and open()/open64() drop O_SYNC/O_DSYNC; openat() flags, pwritev2(RWF_DSYNC/"
        "RWF_SYNC), io_uring and linux-aio flush commands are not intercepted",
    ]
    if aio in _IO_URING:
        notes.append(
            "aio=io_uring: flushes are submitted through io_uring (IORING_OP_FSYNC), "
            "which eatmydata "
            "cannot intercept, so this cell still flushes to the device (measured: fio io_uring "
            "fdatasync=1 under eatmydata issued as many device flushes as without it)"
        )
    elif aio in _LINUX_AIO:
        notes.append(
            "aio=native/libaio: fio's libaio engine and QEMU <= 8.x flush with fdatasync(), which "
            "eatmydata removes; a QEMU that sends IOCB_CMD_FDSYNC through linux-aio, or "
            "FUA writes as "
            "RWF_DSYNC (QEMU >= 10 with native/io_uring), would bypass it (not verified here)"
        )
    return notes
