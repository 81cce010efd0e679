"""Create and remove one file on an NFS export without a kernel mount, through libnfs (the library
QEMU's ``nfs`` block driver uses), loaded with ctypes.

Why not a command: Debian's libnfs-utils ships only ``nfs-ls``, ``nfs-cat`` and ``nfs-cp`` — nothing
removes a file — and the hosts iomatrix runs on often have no kernel NFS client (no ``nfs`` module,
no ``mount.nfs``). libnfs itself is always there when QEMU can open an ``nfs://`` disk
(``qemu-block-extra`` depends on it), and four of its synchronous calls are all an existing export
needs: mount the export, create a file exclusively (``O_EXCL``: a name already taken is an error,
never a truncation of someone's file), look a file up, remove it. Every call is bounded by libnfs's
own RPC timeout (``nfs_set_timeout``), so an unreachable server is an error after that many seconds,
not a hang."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

LIBNFS_SONAME = "libnfs.so.13"  # Debian 12's libnfs13 (libnfs 4.0)
DEFAULT_TIMEOUT_S = 15.0


class NfsError(Exception):
    """A libnfs call failed; `errno` is the (positive) error number libnfs returned."""

    def __init__(self, message: str, err: int) -> None:
        super().__init__(message)
        self.errno = err


_LIB: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    """libnfs, loaded once; NfsError when it is not installed."""
    global _LIB
    if _LIB is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("nfs") or LIBNFS_SONAME)
        except OSError:
            raise NfsError(
                "libnfs is not installed (apt-get install libnfs13)", errno.ENOENT
            ) from None
        vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        for name, res, args in (
            ("nfs_init_context", vp, []),
            ("nfs_destroy_context", None, [vp]),
            ("nfs_get_error", cp, [vp]),
            ("nfs_set_timeout", None, [vp, i]),
            ("nfs_mount", i, [vp, cp, cp]),
            ("nfs_create", i, [vp, cp, i, i, ctypes.POINTER(vp)]),
            ("nfs_close", i, [vp, vp]),
            ("nfs_unlink", i, [vp, cp]),
            ("nfs_stat64", i, [vp, cp, vp]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _LIB = lib
    return _LIB


def available() -> bool:
    try:
        _lib()
    except NfsError:
        return False
    return True


@dataclass
class Export:
    """One mounted export (libnfs context); paths are relative to the export's root ("/name")."""

    server: str
    export: str
    _ctx: int

    def _check(self, rc: int, what: str) -> None:
        if rc < 0:
            raw = _lib().nfs_get_error(self._ctx)
            detail = raw.decode(errors="replace") if raw else os.strerror(-rc)
            raise NfsError(f"{what} on nfs://{self.server}{self.export}: {detail}", -rc)

    def create_exclusive(self, name: str) -> None:
        """Create the empty file `/name`, failing (EEXIST) if anything of that name is there."""
        fh = ctypes.c_void_p()
        lib = _lib()
        self._check(
            lib.nfs_create(
                self._ctx,
                f"/{name}".encode(),
                os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                0o600,
                ctypes.byref(fh),
            ),
            f"creating {name}",
        )
        lib.nfs_close(self._ctx, fh)

    def exists(self, name: str) -> bool:
        buf = ctypes.create_string_buffer(256)  # struct nfs_stat_64: 16 × 8 bytes; room to spare
        rc = _lib().nfs_stat64(self._ctx, f"/{name}".encode(), buf)
        if rc == -errno.ENOENT:
            return False
        self._check(rc, f"looking up {name}")
        return True

    def unlink(self, name: str) -> None:
        self._check(_lib().nfs_unlink(self._ctx, f"/{name}".encode()), f"removing {name}")


@contextmanager
def mounted(server: str, export: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[Export]:
    """The export mounted by libnfs (MOUNT protocol + NFSv3, no kernel involved), unmounted on
    exit."""
    lib = _lib()
    ctx = lib.nfs_init_context()
    if not ctx:
        raise NfsError("libnfs could not make a context", errno.ENOMEM)
    try:
        lib.nfs_set_timeout(ctx, int(timeout_s * 1000))
        handle = Export(server, export, ctx)
        handle._check(lib.nfs_mount(ctx, server.encode(), export.encode()), "mounting the export")
        yield handle
    finally:
        lib.nfs_destroy_context(ctx)
