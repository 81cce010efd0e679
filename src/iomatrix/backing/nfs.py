"""The NFS backing (issue 34): image files on an NFS export, opened by QEMU's own NFS client
(libnfs, ``driver=nfs``), made fresh for every run.

Two modes (`NfsBacking`, below):

* *lab-started* — iomatrix runs nfs-ganesha (userspace NFS server, FSAL VFS) on 127.0.0.1, exporting
  a directory under the backing's working directory, and rpcbind when the host has none running:
  libnfs finds the server's NFS and MOUNT ports through the portmapper on port 111, which cannot be
  moved. An rpcbind iomatrix starts listens on 0.0.0.0:111 (``rpcbind -h 127.0.0.1`` crashes; see
  docs/backings.md) and is stopped at teardown; one that was already running is used and never
  stopped. A host that already has an NFS server registered with rpcbind is refused: a second
  registration of program 100003 would take the first one's place.
* *existing* — the user names a server and an export; iomatrix creates its own uniquely named file
  there (``iomatrix-<pid>-<hex6>-<name>.<format>``, created with O_EXCL through libnfs, then
  formatted by ``qemu-img create nfs://…``), removes it afterwards through libnfs, and writes
  nothing else.

Everything created is in the leftovers ledger before it exists: the scratch directory and each image
(`path`), rpcbind and ganesha (`process`, recorded by `children.spawn` from just after their fork),
ganesha's RPC registrations (`rpc_registration`: a ganesha killed hard leaves them in rpcbind), a
file on an existing export (`nfs_file`). Teardown stops ganesha with SIGTERM (it unregisters
itself), removes any registration still pointing at its ports, then kills an rpcbind of ours with
SIGKILL (on SIGTERM rpcbind saves its table in /run/rpcbind for a warm start, which a later
``rpcbind -w`` would read back)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

import psutil
from pydantic import Field, field_validator, model_validator

from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.client_host import SharedServer
from iomatrix.backing.leftover_kinds import (
    EntryKind,
    Leftover,
    LeftoverError,
    PathLeftover,
    run_tool,
)
from iomatrix.backing.network import DiskRequest, NetworkDisk
from iomatrix.backing.ports import PortHolder, port_holders, refuse_if_held
from iomatrix.backing.reach import (
    CONNECT_BUDGET_S,
    PORTAL_CONNECT_TIMEOUT_S,
    Budget,
    portal_problem,
    run_bounded,
)
from iomatrix.backing.spec import BackingSpecBase, missing_module, not_root
from iomatrix.domain import Format
from iomatrix.errors import UserError
from iomatrix.hostcmd import version_of
from iomatrix.images import create_image, create_image_argv
from iomatrix.protocols.nfs import Nfs
from iomatrix.protocols.place import address_problem
from iomatrix.storage_clients import filesystems, module_known, nfs_missing

# What a lab-started NFS server and QEMU's NFS client need (backing.nfs): program or file → Debian
# package.
NFS_LAB_PROGRAMS = {
    "ganesha.nfsd": "nfs-ganesha",
    "rpcbind": "rpcbind",
    "rpcinfo": "rpcbind",
    "qemu-img": "qemu-utils",
}
NFS_EXISTING_PROGRAMS = {"rpcinfo": "rpcbind", "qemu-img": "qemu-utils"}
GANESHA_FSAL_VFS = "ganesha/libfsalvfs.so"
QEMU_BLOCK_NFS = "qemu/block-nfs.so"


# An NFS server name as an nfs:// URL and libnfs take it: a host name, an IPv4 address or a bare
# IPv6 address.
NFS_SERVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|[0-9A-Fa-f:]{2,39}")
# An export path: absolute, printable, none of the characters an nfs:// URL gives a meaning (?, #,
# %), and no comma (QEMU's option separator: `path=/srv,file.driver=file` would be read as a second
# option).
NFS_EXPORT = re.compile(r"/[A-Za-z0-9_.+=@~/-]{0,1023}")


class NfsBacking(BackingSpecBase, SharedServer):
    """Disks as image files on NFS, opened by QEMU's own NFS client (libnfs). Lab-started (no keys):
    iomatrix runs nfs-ganesha (FSAL VFS) on 127.0.0.1 with an export under the working directory.
    Existing (`server` + `export`): iomatrix creates its own files on that export and removes them
    afterwards."""

    type: Literal["nfs"] = "nfs"
    server: str | None = Field(default=None, max_length=253)
    export: str | None = Field(default=None, max_length=1024)

    @field_validator("server")
    @classmethod
    def _server_is_a_host(cls, v: str | None) -> str | None:
        if v is not None and not NFS_SERVER.fullmatch(v):
            raise ValueError(
                f"server {v[:60]!r} is not a host name or IP address; write it bare, e.g. "
                'server = "nfs1.example.org" (no nfs://, no port, no path)'
            )
        if v is not None and (why := address_problem(v)) is not None:
            raise ValueError(f"server = {why}")
        return v

    @field_validator("export")
    @classmethod
    def _export_is_a_path(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "," in v:
            raise ValueError(
                f"export {v[:60]!r} holds a ',', which QEMU reads as the start of another option; "
                "export a path without commas (or a directory of it without one)"
            )
        if not NFS_EXPORT.fullmatch(v) or "/../" in f"{v}/" or "//" in v:
            raise ValueError(
                f"export {v[:60]!r} is not an absolute export path of plain characters; write the "
                'path the server exports, e.g. export = "/srv/vmstore"'
            )
        return v.rstrip("/") or "/"

    @model_validator(mode="after")
    def _server_with_export(self) -> NfsBacking:
        if (self.server is None) != (self.export is None):
            have, missing = ("server", "export") if self.export is None else ("export", "server")
            raise ValueError(
                f"'{have}' without '{missing}': an existing NFS server needs both "
                '(server = "HOST", '
                'export = "/path"); leave both out to let iomatrix start its own on 127.0.0.1'
            )
        return self

    @property
    def lab_started(self) -> bool:
        return self.server is None

    def _derived_label(self) -> str:
        return "nfs" if self.lab_started else f"nfs:{self.server}:{self.export}"

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        return "network"

    @property
    def protocol(self) -> str | None:
        return "nfs"

    def availability(self, allowed_devices: set[Path]) -> str | None:
        programs = NFS_LAB_PROGRAMS if self.lab_started else NFS_EXISTING_PROGRAMS
        for prog, package in programs.items():
            if shutil.which(prog) is None:
                return f"'{prog}' is not installed (apt-get install {package})"
        needed = [(QEMU_BLOCK_NFS, "qemu-block-extra")]
        if self.lab_started:
            needed.append((GANESHA_FSAL_VFS, "nfs-ganesha-vfs"))
        for module, package in needed:
            if (why := missing_module(module, package)) is not None:
                return why
        if self.lab_started:
            return not_root("starting nfs-ganesha and rpcbind")
        return None


LOOPBACK = "127.0.0.1"
NFS_PROGRAM, MOUNT_PROGRAM = 100003, 100005
# What ganesha registers with this configuration (NLM and RQUOTA are switched off: libnfs needs
# neither).
GANESHA_PROGRAMS = ((NFS_PROGRAM, 3), (NFS_PROGRAM, 4), (MOUNT_PROGRAM, 1), (MOUNT_PROGRAM, 3))
NFS_VERSION = 3  # what QEMU 7.2's libnfs client speaks (its nfs driver has no version option)
READY_TIMEOUT_S = 120.0  # generous: a loaded 2-core host took 0.4 s; never a fixed sleep
STOP_GRACE_S = 20.0  # ganesha's clean shutdown took ~1 s here
QEMU_IMG_TIMEOUT_S = 600.0


# ---------------------------------------------------------------------------------------------
# libnfs: one file on an export, without a kernel mount
# ---------------------------------------------------------------------------------------------

# Create and remove one file on an NFS export without a kernel mount, through libnfs (the library
# QEMU's ``nfs`` block driver uses), loaded with ctypes. Why not a command: Debian's libnfs-utils
# ships only ``nfs-ls``, ``nfs-cat`` and ``nfs-cp`` — nothing removes a file — and the hosts
# iomatrix runs on often have no kernel NFS client (no ``nfs`` module, no ``mount.nfs``). libnfs
# itself is always there when QEMU can open an ``nfs://`` disk (``qemu-block-extra`` depends on it),
# and four of its synchronous calls are all an existing export needs: mount the export, create a
# file exclusively (``O_EXCL``: a name already taken is an error, never a truncation of someone's
# file), look a file up, remove it. Every call is bounded by libnfs's own RPC timeout
# (``nfs_set_timeout``), so an unreachable server is an error after that many seconds, not a hang.

LIBNFS_SONAME = "libnfs.so.13"  # Debian 12's libnfs13 (libnfs 4.0)
LIBNFS_TIMEOUT_S = 15.0


class NfsError(Exception):
    """A libnfs call failed; `errno` is the (positive) error number libnfs returned."""

    def __init__(self, message: str, err: int) -> None:
        super().__init__(message)
        self.errno = err


_LIBNFS: ctypes.CDLL | None = None


def _libnfs() -> ctypes.CDLL:
    """libnfs, loaded once; NfsError when it is not installed."""
    global _LIBNFS
    if _LIBNFS is None:
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
        _LIBNFS = lib
    return _LIBNFS


def libnfs_available() -> bool:
    try:
        _libnfs()
    except NfsError:
        return False
    return True


@dataclass
class NfsExport:
    """One mounted export (libnfs context); paths are relative to the export's root ("/name")."""

    server: str
    export: str
    _ctx: int

    def _check(self, rc: int, what: str) -> None:
        if rc < 0:
            raw = _libnfs().nfs_get_error(self._ctx)
            detail = raw.decode(errors="replace") if raw else os.strerror(-rc)
            raise NfsError(f"{what} on nfs://{self.server}{self.export}: {detail}", -rc)

    def create_exclusive(self, name: str) -> None:
        """Create the empty file `/name`, failing (EEXIST) if anything of that name is there."""
        fh = ctypes.c_void_p()
        lib = _libnfs()
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
        rc = _libnfs().nfs_stat64(self._ctx, f"/{name}".encode(), buf)
        if rc == -errno.ENOENT:
            return False
        self._check(rc, f"looking up {name}")
        return True

    def unlink(self, name: str) -> None:
        self._check(_libnfs().nfs_unlink(self._ctx, f"/{name}".encode()), f"removing {name}")


@contextlib.contextmanager
def nfs_mounted(
    server: str, export: str, timeout_s: float = LIBNFS_TIMEOUT_S
) -> Iterator[NfsExport]:
    """The export mounted by libnfs (MOUNT protocol + NFSv3, no kernel involved), unmounted on
    exit."""
    lib = _libnfs()
    ctx = lib.nfs_init_context()
    if not ctx:
        raise NfsError("libnfs could not make a context", errno.ENOMEM)
    try:
        lib.nfs_set_timeout(ctx, int(timeout_s * 1000))
        handle = NfsExport(server, export, ctx)
        handle._check(lib.nfs_mount(ctx, server.encode(), export.encode()), "mounting the export")
        yield handle
    finally:
        lib.nfs_destroy_context(ctx)


# ---------------------------------------------------------------------------------------------
# the NFS lab's entries in the leftovers ledger (NetworkProtocol.leftover_kinds)
# ---------------------------------------------------------------------------------------------

# The RPC programs of an NFS server (NFS, MOUNT, NLM, RQUOTA): the only ones an rpc_registration
# entry may remove.
NFS_RPC_PROGRAMS = frozenset({100003, 100005, 100021, 100011})
RPCBIND_HOST = "127.0.0.1"  # a lab-started server registers with the local rpcbind only
RPCINFO_TIMEOUT_S = 20.0


def rpc_registrations(host: str = RPCBIND_HOST) -> list[tuple[int, int, str, int]] | None:
    """(program, version, protocol, port) of every registration rpcbind on `host` lists (``rpcinfo
    -p``), or None when no rpcbind answers there."""
    try:
        out = run_tool(["rpcinfo", "-p", host], timeout=RPCINFO_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    rows = []
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0].isdigit() and f[1].isdigit() and f[3].isdigit():
            rows.append((int(f[0]), int(f[1]), f[2], int(f[3])))
    return rows


@dataclass(frozen=True)
class RpcRegistrationLeftover(Leftover):
    """The RPC programs a lab-started NFS server registers with the local rpcbind (info `programs`:
    [program, version] pairs, `ports`: the ports the server was configured with). ganesha removes
    them when it stops cleanly; killed hard it leaves them, and a client asking rpcbind would be
    sent to a dead port. Only a registration that still points at one of our recorded ports is
    removed (``rpcinfo -d``)."""

    kind: ClassVar[EntryKind] = "rpc_registration"
    label: ClassVar[str] = "RPC registrations with rpcbind on"

    def _programs(self) -> set[tuple[int, int]]:
        raw = self.info.get("programs")
        if not isinstance(raw, list):
            return set()
        return {
            (p[0], p[1])
            for p in raw
            if isinstance(p, list)
            and len(p) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in p)
        }

    def _ports(self) -> set[int]:
        raw = self.info.get("ports")
        return (
            {p for p in raw if isinstance(p, int) and not isinstance(p, bool)}
            if isinstance(raw, list)
            else set()
        )

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        programs, ports = self._programs(), self._ports()
        if self.target != RPCBIND_HOST or not programs or not ports:
            return (
                f"{self.target} with programs {self.info.get('programs')!r} is not a "
                "registration iomatrix makes"
            )
        if any(p not in NFS_RPC_PROGRAMS for p, _ in programs) or any(
            not 1024 <= p <= 65535 for p in ports
        ):
            return (
                f"programs {sorted(programs)} on ports {sorted(ports)} are not an NFS "
                "server's iomatrix starts"
            )
        return None

    def _ours(self) -> set[tuple[int, int]]:
        rows = rpc_registrations(self.target)
        programs, ports = self._programs(), self._ports()
        return {
            (prog, vers)
            for prog, vers, _, port in rows or ()
            if (prog, vers) in programs and port in ports
        }

    def present(self) -> bool:
        return bool(self._ours())

    def remove(self) -> list[str]:
        done = []
        for prog, vers in sorted(self._ours()):
            # every transport of (program, version) at once: rpcbind keeps one mapping per
            # transport, and this one points at our port, so none of them is another server's
            out = run_tool(["rpcinfo", "-d", str(prog), str(vers)], timeout=RPCINFO_TIMEOUT_S)
            if out.returncode != 0:
                raise LeftoverError(
                    f"cannot unregister RPC program {prog} version {vers}: "
                    f"{(out.stderr or out.stdout).strip()}"
                )
            done.append(
                f"unregistered RPC program {prog} version {vers} from rpcbind on {self.target}"
            )
        return done


# Names iomatrix gives its own files on an existing NFS export (backing.nfs:
# "iomatrix-<pid>-<hex6>-<name>").
NFS_FILE_NAME = re.compile(r"iomatrix-[0-9]+-[0-9a-f]{6}(-[A-Za-z0-9_.-]{1,100})?")


@dataclass(frozen=True)
class NfsFileLeftover(Leftover):
    """iomatrix's own image on an existing NFS export (`target` its nfs:// URL, info `server`,
    `export`, `name`), removed through libnfs: only a file of a name iomatrix generates, at the top
    of the recorded export."""

    kind: ClassVar[EntryKind] = "nfs_file"
    label: ClassVar[str] = "file on NFS export"

    def _where(self) -> tuple[str, str, str]:
        server, export, name = (self.info.get(k) for k in ("server", "export", "name"))
        if not (isinstance(server, str) and isinstance(export, str) and isinstance(name, str)):
            raise LeftoverError(
                f"NFS file entry {self.target} does not name its server, export and file"
            )
        return server, export, name

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        try:
            server, export, name = self._where()
        except LeftoverError as err:
            return str(err)
        if (
            not NFS_FILE_NAME.fullmatch(name)
            or self.target != f"nfs://{server}{export.rstrip('/')}/{name}"
        ):
            return f"{self.target} is not a file name iomatrix gives its images on an NFS export"
        return None

    def present(self) -> bool:
        server, export, name = self._where()
        try:
            with nfs_mounted(server, export) as ex:
                return ex.exists(name)
        except NfsError as err:
            raise LeftoverError(f"cannot reach {self.target}: {err}") from None

    def remove(self) -> list[str]:
        server, export, name = self._where()
        try:
            with nfs_mounted(server, export) as ex:
                ex.unlink(name)
        except NfsError as err:
            if err.errno == errno.ENOENT:
                return []
            raise LeftoverError(f"cannot remove {self.target}: {err}") from None
        return [f"removed {self.target}"]


# Files a daemon iomatrix starts creates in /run and does not remove when it stops (path → the
# daemon's process name). Recorded only when absent before the daemon started: then they are ours.
RUNTIME_FILES = {
    "/run/rpcbind.sock": "rpcbind",
    "/run/rpcbind.lock": "rpcbind",
    "/run/ganesha": "ganesha.nfsd",
}


@dataclass(frozen=True)
class RuntimeFileLeftover(Leftover):
    """A file (or empty directory) in /run that a daemon iomatrix started left there
    (RUNTIME_FILES). Removed only while no process of that daemon runs in this mount namespace: a
    host's own rpcbind started since then uses it, but one in a mount namespace of its own (another
    lab's, with its own /run) does not, and must not keep ours on the host forever."""

    kind: ClassVar[EntryKind] = "runtime_file"
    label: ClassVar[str] = "daemon runtime file"

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        if self.target not in RUNTIME_FILES:
            return f"{self.target} is not a runtime file of a daemon iomatrix starts"
        return None

    def present(self) -> bool:
        owner = RUNTIME_FILES[self.target]
        if not os.path.lexists(self.target):
            return False
        return not any(
            p.info["name"] == owner
            and p.info["status"] != psutil.STATUS_ZOMBIE
            and _sees_our_run(p.pid)
            for p in psutil.process_iter(["name", "status"])
        )

    def remove(self) -> list[str]:
        p = Path(self.target)
        try:
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink()
        except FileNotFoundError:
            return []
        except OSError as exc:  # a directory something was put in since: not ours to empty
            raise LeftoverError(f"cannot remove {p}: {exc.strerror}") from None
        return [f"removed {p} (left by {RUNTIME_FILES[self.target]})"]


def _mount_namespace(pid: int | str) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _sees_our_run(pid: int) -> bool:
    """Whether process `pid` sees this process's /run: it is in the same mount namespace, or that
    cannot be read (then it may, and what it may use is kept)."""
    theirs, ours = _mount_namespace(pid), _mount_namespace("self")
    return theirs is None or ours is None or theirs == ours


class Teardown(Protocol):
    """What the NFS backing needs of provision's teardown: record a leftover before creating it, and
    add a step of its own (stopping a daemon) to be run in reverse order with the others."""

    def record(self, leftover: Leftover) -> str: ...

    def add_step(self, action: Callable[[], object]) -> None: ...


def ganesha_config(export_dir: Path, recovery_dir: Path, nfs_port: int, mount_port: int) -> str:
    """nfs-ganesha's configuration for one lab export (pure).

    127.0.0.1 only; NFSv3 for the export (libnfs's protocol) while the server keeps v4 on, as a
    stock server does; no grace period (a fresh server has no clients to wait for: with one, the
    first I/O would wait 90 s); NFSv4 recovery state under the working directory instead of
    /var/lib/nfs/ganesha; root not squashed (QEMU runs as root and must own its image); the NFS and
    MOUNT ports fixed so that a registration left behind can be told to be ours."""
    return f"""# written by iomatrix for a lab-started NFS backing; removed with its directory
NFS_CORE_PARAM {{
    Bind_addr = {LOOPBACK};
    Protocols = 3, 4;
    NFS_Port = {nfs_port};
    MNT_Port = {mount_port};
    Enable_NLM = false;
    Enable_RQUOTA = false;
}}
NFSV4 {{
    Graceless = true;
    RecoveryBackend = fs;
    RecoveryRoot = "{recovery_dir}";
}}
EXPORT {{
    Export_Id = 1;
    Path = "{export_dir}";
    Pseudo = "{export_dir}";
    Access_Type = RW;
    Squash = No_Root_Squash;
    Protocols = 3;
    FSAL {{
        Name = VFS;
    }}
}}
"""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick); a daemon that loses the race fails to
    start, and says so in one line."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.")[:60] or "disk"


def _format(values: Mapping[str, str]) -> str:
    """The cell's image format, checked before it becomes part of a file name."""
    fmt = values.get("format", "")
    if fmt not in {f.value for f in Format}:
        raise UserError(
            f"unknown image format {fmt!r} for an NFS disk",
            hint=f"use one of {[f.value for f in Format]}",
        )
    return fmt


def _preallocation(values: Mapping[str, str]) -> str:
    value = values.get("preallocation")
    return "off" if value in (None, "", "-") else value


def _protocol_options(host: str, path: str) -> tuple[tuple[str, str], ...]:
    # libnfs mounts the export named by the path's directory: the real export path, not an NFSv4
    # pseudo path
    return (("driver", "nfs"), ("server.type", "inet"), ("server.host", host), ("path", path))


def _without_preallocation(argv: list[str]) -> list[str]:
    """qemu-img create argv without its ``preallocation=`` option (and without ``-o`` if nothing
    else is left)."""
    out = list(argv)
    if "-o" in out:
        i = out.index("-o")
        opts = [o for o in out[i + 1].split(",") if not o.startswith("preallocation=")]
        out[i : i + 2] = ["-o", ",".join(opts)] if opts else []
    return out


def _why_it_stopped(log_text: str) -> str:
    """The line of a daemon's log that says why it stopped: ganesha's last FATAL/MAJ message without
    its timestamp and host prefix (its dbus and Kerberos complaints at start are harmless), else the
    last line."""
    lines = [ln for ln in log_text.splitlines() if ":FATAL :" in ln or ":MAJ :" in ln] or [
        _last_line(log_text)
    ]
    return re.sub(r"^.*?\] ", "", lines[-1])


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


# ---------------------------------------------------------------------------------------------
# lab-started: rpcbind + nfs-ganesha on 127.0.0.1
# ---------------------------------------------------------------------------------------------


@dataclass
class LabNfsServer:
    """nfs-ganesha started by iomatrix, exporting `export_dir`; disks are image files made there
    with qemu-img."""

    workdir: Path
    export_dir: Path
    ganesha: subprocess.Popen
    rpcbind: subprocess.Popen | None  # None: the host's own rpcbind was used
    ports: dict[str, int]
    config_sha256: str
    version: str | None
    protocol: Literal["nfs"] = "nfs"
    lab_started: bool = True
    _disks: set[Path] = field(default_factory=set)  # made and not yet removed

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        fmt = _format(want.values)
        path = self.export_dir / f"{_slug(want.name)}.{fmt}"
        # before it exists: clean removes it after a kill
        leftovers.register_temp_path(self.workdir, path)
        self._disks.add(path)
        try:
            create_image(
                path, fmt, _preallocation(want.values), want.size_bytes, want.create_options
            )
        except BaseException:
            self._remove_file(path)
            raise
        return NetworkDisk(
            protocol="nfs",
            protocol_options=_protocol_options(LOOPBACK, str(path)),
            url=f"nfs://{LOOPBACK}{path}",
            format=fmt,
            size_bytes=want.size_bytes,
            server_path=path,
            meta={**self.metadata(), "nfs_file": str(path)},
        )

    def _remove_file(self, path: Path) -> None:
        PathLeftover(str(path)).undo()
        leftovers.forget(self.workdir, path)
        self._disks.discard(path)

    def remove_all_disks(self) -> None:
        """At teardown (also on Ctrl-C): the disks a run did not give back."""
        for path in sorted(self._disks):
            self._remove_file(path)

    def remove_disk(self, disk: NetworkDisk) -> None:
        path = disk.server_path
        if path is None or path not in self._disks:  # only a file this server made is ever removed
            raise UserError(f"{disk.url} was not made by this NFS server: not removed")
        self._remove_file(path)

    def server_pids(self) -> dict[int, str]:
        pids = {self.ganesha.pid: "ganesha.nfsd"}
        if self.rpcbind is not None:
            pids[self.rpcbind.pid] = "rpcbind"
        return pids

    def metadata(self) -> dict[str, Any]:
        return {
            "nfs_mode": "lab-started",
            "nfs_server": LOOPBACK,
            "nfs_export": str(self.export_dir),
            "nfs_server_software": self.version,
            "nfs_version": NFS_VERSION,
            "nfs_client": "libnfs",
            "nfs_ports": dict(self.ports),
            "ganesha_config_sha256": self.config_sha256,
            "rpcbind": "started by iomatrix (0.0.0.0:111)"
            if self.rpcbind is not None
            else "the host's",
        }


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=5):
            return True
    except OSError:
        return False


def _refuse_existing_nfs_server(rows: list[tuple[int, int, str, int]] | None) -> None:
    taken = sorted(
        {port for prog, _, proto, port in rows or () if prog == NFS_PROGRAM and proto == "tcp"}
    )
    if taken and not any(_listening(port) for port in taken):
        # a server killed hard (kill -9 of another workdir's run, not yet cleaned) left its
        # registration
        versions = sorted({vers for prog, vers, _, _ in rows or () if prog == NFS_PROGRAM})
        raise UserError(
            "rpcbind on this host still lists an NFS server on port "
            f"{', '.join(map(str, taken))}, but "
            "nothing listens there: a server that was killed left its registration",
            hint="run 'iomatrix clean --workdir DIR' for the run that left it, or remove it: "
            + "; ".join(f"rpcinfo -d {NFS_PROGRAM} {v}" for v in versions),
        )
    if taken:
        raise UserError(
            "an NFS server is already registered with rpcbind on this host (program "
            f"{NFS_PROGRAM}, "
            f"port {', '.join(map(str, taken))}): a lab-started one would take over its "
            "registration",
            hint='use it as an existing server: [[backing]] type = "nfs", server = "127.0.0.1", '
            'export = "/its/export"',
        )


RPCBIND_PORT = 111  # rpcbind's fixed port (TCP and UDP, on every address): clients find it there
# What may hold port 111 and answer as rpcbind: rpcbind itself, or systemd holding it for
# rpcbind.socket.
RPCBIND_COMMANDS = ("rpcbind", "systemd")
RPCBIND_WAY_OUT = (
    "port 111 is rpcbind's fixed port: stop that program, or run the host's rpcbind there "
    "(apt-get install rpcbind; iomatrix then uses it), or name an existing NFS server; "
    "see docs/shared-storage.md"
)


def _rpcbind_port_holders() -> list[PortHolder]:
    return port_holders(RPCBIND_PORT, "0.0.0.0", ("tcp", "udp"))


def _refuse_foreign_rpcbind_port(holders: list[PortHolder], rows: list | None) -> None:
    """One line naming what holds port 111 when it is not an rpcbind that answers: a lab NFS server
    needs rpcbind there, and neither ours could bind it nor would theirs register ganesha (it sat
    120 s otherwise)."""
    foreign = [h for h in holders if h.command is not None and h.command not in RPCBIND_COMMANDS]
    if foreign or (holders and rows is None):
        holder = (foreign or holders)[0]
        answers = "" if foreign else ", which does not answer as rpcbind (rpcinfo -p 127.0.0.1)"
        raise UserError(
            f"rpcbind cannot start: port {RPCBIND_PORT} is in use by {holder.describe()}{answers}",
            hint=RPCBIND_WAY_OUT,
        )


def _wait_until(
    ready: Callable[[], bool], proc: subprocess.Popen, what: str, log: Path | None
) -> None:
    """Poll `ready` until it holds (bounded by READY_TIMEOUT_S), failing in one line if `proc` exits
    first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    delay = 0.02
    while not ready():
        if proc.poll() is not None:
            detail = ""
            with contextlib.suppress(OSError):
                detail = f": {_why_it_stopped(log.read_text(errors='replace'))}" if log else ""
            # no "see the log": it goes with the backing's directory at teardown
            raise UserError(
                f"{what} exited with status {proc.returncode} while starting{detail}",
                hint="another program took the port between iomatrix choosing it and the server "
                "binding it: run again"
                if "bind" in detail.lower()
                else None,
            )
        if time.monotonic() > deadline:
            raise UserError(
                f"{what} was not ready within {READY_TIMEOUT_S:g} s",
                hint=f"see {log}" if log else "check the host's load",
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _record_runtime_files(daemon: str, td: Teardown) -> None:
    """Record the files `daemon` will create in /run and leave there, those not there yet (then they
    are ours)."""
    for path, owner in RUNTIME_FILES.items():
        if owner == daemon and not os.path.lexists(path):
            td.record(RuntimeFileLeftover(path))


def _start_rpcbind(scratch: Path, td: Teardown) -> subprocess.Popen:
    """rpcbind in the foreground (-f); no warm start (-w would read back a table an earlier rpcbind
    saved)."""
    _record_runtime_files("rpcbind", td)
    with open(scratch / "rpcbind.log", "wb") as log:
        proc = children.spawn(
            ["rpcbind", "-f"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    # SIGKILL, not SIGTERM: on SIGTERM rpcbind writes its table to /run/rpcbind for a warm start
    td.add_step(lambda: children.kill(proc))
    _wait_until(lambda: rpc_registrations() is not None, proc, "rpcbind", scratch / "rpcbind.log")
    return proc


def start_lab_server(workdir: Path, scratch: Path, td: Teardown) -> LabNfsServer:
    """Start rpcbind (if the host runs none) and nfs-ganesha exporting `scratch`/export; every step
    is recorded in the ledger and in `td` before it is taken, so a failure half-way undoes what was
    done."""
    holders = _rpcbind_port_holders()
    # at once: asking a program that is not rpcbind waits 20 s
    _refuse_foreign_rpcbind_port(holders, [])
    rows = rpc_registrations()
    _refuse_foreign_rpcbind_port(holders, rows)
    _refuse_existing_nfs_server(rows)
    rpcbind = None
    with children.record_in(workdir):
        if rows is None:
            rpcbind = _start_rpcbind(scratch, td)
            _refuse_existing_nfs_server(rpc_registrations())  # one registered while ours started
        export_dir, recovery_dir = scratch / "export", scratch / "recovery"
        export_dir.mkdir()
        recovery_dir.mkdir()
        ports = {"nfs": free_port(), "mount": free_port()}
        while ports["mount"] == ports["nfs"]:
            ports["mount"] = free_port()
        # taken since they were chosen: named, not a ganesha that never registers
        for port in ports.values():
            refuse_if_held(port, "nfs-ganesha", LOOPBACK)
        config = ganesha_config(export_dir, recovery_dir, ports["nfs"], ports["mount"])
        conf_path, log = scratch / "ganesha.conf", scratch / "ganesha.log"
        conf_path.write_text(config)
        _record_runtime_files("ganesha.nfsd", td)
        td.record(
            RpcRegistrationLeftover(
                LOOPBACK,
                {"programs": [list(p) for p in GANESHA_PROGRAMS], "ports": sorted(ports.values())},
            )
        )
        ganesha = children.spawn(
            [
                "ganesha.nfsd",
                "-F",
                "-f",
                str(conf_path),
                "-L",
                str(log),
                "-p",
                str(scratch / "ganesha.pid"),
                "-N",
                "NIV_EVENT",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
    # SIGTERM first: ganesha then unregisters from rpcbind itself
    td.add_step(lambda: children.kill(ganesha, grace_s=STOP_GRACE_S))

    def registered() -> bool:
        want = {(NFS_PROGRAM, ports["nfs"]), (MOUNT_PROGRAM, ports["mount"])}
        have = {
            (prog, port) for prog, _, proto, port in rpc_registrations() or () if proto == "tcp"
        }
        return want <= have

    _wait_until(registered, ganesha, "ganesha.nfsd", log)
    return LabNfsServer(
        workdir=workdir,
        export_dir=export_dir,
        ganesha=ganesha,
        rpcbind=rpcbind,
        ports=ports,
        config_sha256=hashlib.sha256(config.encode()).hexdigest(),
        version=version_of(["ganesha.nfsd", "-v"]),
    )


# ---------------------------------------------------------------------------------------------
# existing: someone else's server and export
# ---------------------------------------------------------------------------------------------


@dataclass
class ExistingNfsServer:
    """A server and export the user named: iomatrix makes only its own files there and removes
    them."""

    workdir: Path
    server: str
    export: str
    protocol: Literal["nfs"] = "nfs"
    lab_started: bool = False
    _entries: dict[str, str] = field(default_factory=dict)  # URL → ledger entry id

    def _url(self, name: str) -> str:
        return f"nfs://{self.server}{self.export.rstrip('/')}/{name}"

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        fmt, prealloc = _format(want.values), _preallocation(want.values)
        if fmt == "raw" and prealloc != "off":
            raise UserError(
                f"raw with preallocation={prealloc} cannot be made on an existing NFS "
                "export: QEMU's "
                "nfs driver has no preallocation option",
                hint="use preallocation off (or qcow2 with metadata) for this backing",
            )
        fname = f"iomatrix-{os.getpid()}-{secrets.token_hex(3)}-{_slug(want.name)}.{fmt}"
        url = self._url(fname)
        argv = create_image_argv(Path(fname), fmt, prealloc, want.size_bytes, want.create_options)
        assert argv is not None  # only a raw disk on a block device needs no creation
        # validated as a file name; qemu-img itself takes the URL (a Path would fold its "//")
        argv[-2] = url
        # raw hands preallocation to the protocol driver, and nfs refuses even "off"
        if fmt == "raw":
            argv = _without_preallocation(argv)
        leftover = NfsFileLeftover(
            url, {"server": self.server, "export": self.export, "name": fname}
        )
        self._entries[url] = leftovers.record(self.workdir, leftover.kind, url, **leftover.info)
        created = False
        try:
            # exclusively first: a name somebody else holds is an error here, never a file qemu-img
            # truncates
            with nfs_mounted(self.server, self.export, CONNECT_BUDGET_S) as ex:
                ex.create_exclusive(fname)
            created = True
            out = subprocess.run(argv, capture_output=True, text=True, timeout=QEMU_IMG_TIMEOUT_S)
            if out.returncode != 0:
                raise UserError(
                    f"qemu-img create {fmt} {url} failed: {_last_line(out.stderr)}",
                    hint="check that the export is writable by this host's root (no_root_squash)",
                )
        except NfsError as err:
            self._abandon(url, leftover, created)
            raise UserError(
                f"cannot create {url}: {err}",
                hint="check that the export is writable by this host's root (no_root_squash)",
            ) from None
        except BaseException:
            self._abandon(url, leftover, created)
            raise
        path = f"{self.export.rstrip('/')}/{fname}"
        return NetworkDisk(
            protocol="nfs",
            protocol_options=_protocol_options(self.server, path),
            url=url,
            format=fmt,
            size_bytes=want.size_bytes,
            server_path=None,
            meta={**self.metadata(), "nfs_file": fname},
        )

    def _abandon(self, url: str, leftover: NfsFileLeftover, created: bool) -> None:
        """A disk that could not be made: remove the file only if this run created it (a failed
        exclusive create means the name is someone else's), then forget it; a removal that fails
        stays recorded for `clean`."""
        with contextlib.suppress(LeftoverError):
            if created:
                leftover.undo()
            leftovers.release(self.workdir, self._entries.pop(url))

    def remove_disk(self, disk: NetworkDisk) -> None:
        if disk.url not in self._entries:  # only a file this server made is ever removed
            raise UserError(f"{disk.url} was not made by this NFS backing: not removed")
        self._remove_url(disk.url)

    def _remove_url(self, url: str) -> None:
        NfsFileLeftover(
            url, {"server": self.server, "export": self.export, "name": url.rsplit("/", 1)[-1]}
        ).undo()
        entry = self._entries.pop(url, None)
        if entry is not None:
            leftovers.release(self.workdir, entry)

    def remove_all_disks(self) -> None:
        """At teardown (also on Ctrl-C): the files a run did not give back."""
        for url in sorted(self._entries):
            self._remove_url(url)

    def server_pids(self) -> dict[int, str]:
        return {}

    def metadata(self) -> dict[str, Any]:
        return {
            "nfs_mode": "existing",
            "nfs_server": self.server,
            "nfs_export": self.export,
            "nfs_server_software": None,
            "nfs_version": NFS_VERSION,
            "nfs_client": "libnfs",
        }


def existing_server_problem(server: str, export: str, budget: Budget | None = None) -> str | None:
    """Why the named server does not serve `export` over NFSv3, in one line naming the host, the
    port and what did not answer, with what to check; None when it does. Three steps within one
    `budget` (reach.CONNECT_BUDGET_S unless given): a TCP connect to rpcbind (port 111),
    `rpcinfo -t` (rpcbind answers where NFS listens, and NFS answers a null call), a libnfs mount.
    Read-only: nothing is created on the export."""
    budget = budget or Budget()
    silent = f"NFS server {server} does not answer NFSv{NFS_VERSION} over TCP"
    checks = "check the server name, that it runs rpcbind and NFSv3, and the firewall"
    why = portal_problem(server, RPCBIND_PORT, budget.left(PORTAL_CONNECT_TIMEOUT_S))
    if why is not None:
        return f"{silent}: rpcbind: {why}; {checks}"
    timeout = budget.left()
    out = run_bounded(["rpcinfo", "-t", server, "nfs", str(NFS_VERSION)], timeout)
    if out is None:
        return (
            f"{silent}: rpcbind at {server}:{RPCBIND_PORT} accepted the connection but rpcinfo -t "
            f"{server} nfs {NFS_VERSION} got no answer within {timeout:.0f} s; {checks}"
        )
    if out.returncode != 0:
        return (
            f"{silent} (rpcinfo -t {server} nfs {NFS_VERSION}: "
            f"{_last_line(out.stderr or out.stdout)}); {checks}"
        )
    timeout = budget.left()
    try:
        with nfs_mounted(server, export, timeout):
            pass
    except NfsError as err:
        return (
            f"cannot mount export {export} of {server} within {timeout:.0f} s (NFSv"
            f"{NFS_VERSION}, found through rpcbind at {server}:{RPCBIND_PORT}): {err}; check "
            f"the export path (showmount -e {server}) and its client list"
        )
    return None


def connect_existing(spec: NfsBacking, workdir: Path) -> ExistingNfsServer:
    """Check, within bounded time, that the named server answers NFSv3 and exports what was
    named."""
    assert spec.server is not None and spec.export is not None
    why = existing_server_problem(spec.server, spec.export)
    if why is not None:
        raise UserError(why)
    return ExistingNfsServer(workdir=workdir, server=spec.server, export=spec.export)


def existing_problem(spec: NfsBacking) -> str | None:
    """Why the existing server an NFS backing names cannot serve it (NfsBacking.existing_check)."""
    assert spec.server is not None and spec.export is not None
    return existing_server_problem(spec.server, spec.export)


def provision_nfs(
    spec: NfsBacking,
    workdir: Path,
    scratch: Path,
    td: Teardown,
    allowed_devices: set[Path] | None = None,
) -> tuple[LabNfsServer | ExistingNfsServer, dict[str, Any]]:
    """The server of an NFS backing (started or checked) and the metadata every result of it
    carries."""
    if not libnfs_available():
        raise UserError(
            "libnfs is not installed: QEMU's NFS client needs it", hint="apt-get install libnfs13"
        )
    server = (
        start_lab_server(workdir, scratch, td)
        if spec.lab_started
        else connect_existing(spec, workdir)
    )
    td.add_step(server.remove_all_disks)  # first undone: before the server stops
    return server, server.metadata()


@functools.cache
def probe_kernel_client() -> str | None:
    """Why this host's kernel NFS client cannot be used (mount.nfs, and the nfs filesystem listed in
    /proc/filesystems or installed as a module), read once per process; None where it can (the
    protocol's ``kernel_probe``)."""
    fs_type = Nfs.kernel_fs_types[0]
    try:
        listed = fs_type in filesystems(Path("/proc/filesystems").read_text())
    except OSError:
        listed = False
    return nfs_missing(shutil.which("mount.nfs"), listed or module_known(fs_type))
