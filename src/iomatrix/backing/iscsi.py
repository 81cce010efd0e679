"""iSCSI backings (issue 34): a tgt target iomatrix starts itself, or a LUN of an existing target
handed over.

*Lab-started* (`[[backing]] type = "iscsi"`): ``tgtd -f --iscsi portal=127.0.0.1:PORT -C N`` on a
free TCP port, with a control port N of its own so tgtadm never talks to a system tgtd (control port
0, TCP 3260). Each disk is a target with one LUN (LUN 1) over a sparse file in the backing's
directory, made as the cell's axes say:

    lun_type   null    → --bstype null over /dev/null (no data; tgt presents 1 TiB: the protocol's ceiling)
               fileio  → --bstype rdwr (tgtd's page cache; fdatasync after every write when the cache is off)
               blockio → --bstype rdwr --bsoflags direct (O_DIRECT on the file)
    lun_write_cache on|off → the WCE bit of the SCSI caching mode page 8 (tgt's `write-cache` in targets.conf),
               set with tgtadm and read back over iSCSI (MODE SENSE, the wire in protocols/iscsi.py).

tgtd ignores SIGTERM: it is stopped through its control port (targets deleted, `--mode system --op
delete`), then killed if still alive. It is in the leftovers ledger before it starts
(`TgtdLeftover`, below), and each LUN's file is too, so `iomatrix clean` or the next run
removes everything after a SIGKILL.

*Existing* (`portal`, `iqn`, optional `lun`): iomatrix cannot create a LUN on someone else's target;
it uses the named LUN, and only when it was handed over with ``--allow-destroy
iscsi://HOST:PORT/IQN/LUN``. It talks to the portal only as an initiator (QEMU, libiscsi's tools,
the read-only probes of the wire in protocols/iscsi.py).

The wire (protocols/iscsi.py): just enough of the iSCSI protocol (RFC 3720) to ask a target two questions an initiator sees the
answer to.

* Is the LUN's write cache on? (SCSI MODE SENSE(6) of the caching mode page 8, its WCE bit.) tgtadm
  sets the page but never shows it, and no libiscsi-bin tool reads mode pages: reading it back over
  the wire is the one check that what was asked for is what an initiator (QEMU) is told.
* How long is a round trip through this portal? (NOP-Out/NOP-In pings inside a logged-in session.)
  Used by the delaying relay (`backing.delay_relay`) to measure the RTT it achieved, on the iSCSI
  path itself.

One session, no authentication (CHAP is not used by lab-started targets), no digests, one command at
a time. Read-only: MODE SENSE and NOP never change the LUN.

The rtt relay's iSCSI side (`through_relay`, the protocol's `rtt_relay`): the delaying relay
(`backing.delay_relay`) sits between QEMU's initiator and the portal; the RTT it achieved is
measured with NOP pings through it and directly."""  # noqa: E501

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.client_host import SharedServer
from iomatrix.backing.delay_relay import RELAY_METHOD, start_relay
from iomatrix.backing.leftover_kinds import (
    PROCESS_GONE_S,
    EntryKind,
    Leftover,
    LeftoverError,
    gone_within,
    proc_start,
    run_tool,
)
from iomatrix.backing.network import DiskRequest, NetworkDisk
from iomatrix.backing.ports import refuse_if_held
from iomatrix.backing.reach import PORTAL_CONNECT_TIMEOUT_S, Budget, portal_problem, run_bounded
from iomatrix.backing.spec import BackingSpecBase, missing_module, missing_tools, not_root
from iomatrix.errors import UserError
from iomatrix.hostcmd import version_of
from iomatrix.protocols.iscsi import (
    MAX_LUN,
    IscsiLun,
    IscsiProbeError,
    Portal,
    check_iqn,
    is_iscsi_url,
    nop_rtts,
    parse_iscsi_url,
    parse_portal,
    read_write_cache,
    target_name,
)
from iomatrix.storage_clients import iscsi_missing, module_known

# QEMU's iscsi block driver, a module of Debian's qemu-block-extra (not of qemu-system-*).
QEMU_BLOCK_ISCSI = "qemu/block-iscsi.so"


def _missing_qemu_iscsi() -> str | None:
    return missing_module(QEMU_BLOCK_ISCSI, "qemu-block-extra")


def allowed_iscsi_luns(allowed: set[Path]) -> set[str]:
    """The iSCSI LUNs handed over with --allow-destroy, as canonical iscsi:// URLs (bad ones are
    skipped here: safety.check_allowed_devices refuses them before anything runs)."""
    urls = set()
    for p in allowed:
        if is_iscsi_url(p):
            with contextlib.suppress(ValueError):
                urls.add(parse_iscsi_url(str(p)).url)
    return urls


class IscsiBacking(BackingSpecBase, SharedServer):
    """iSCSI LUNs: served by a tgtd iomatrix starts on 127.0.0.1 (no keys), or one LUN of an
    existing target (`portal`, `iqn`, `lun`), written only when handed over with --allow-destroy
    iscsi://PORTAL/IQN/LUN."""

    type: Literal["iscsi"] = "iscsi"
    portal: str | None = None
    iqn: str | None = None
    # strict: TOML's `true` or "1" is a mistake, not LUN 1
    lun: int | None = Field(default=None, ge=0, le=MAX_LUN, strict=True)

    @field_validator("portal")
    @classmethod
    def _portal_ok(cls, v: str | None) -> str | None:
        return None if v is None else str(parse_portal(v))

    @field_validator("iqn")
    @classmethod
    def _iqn_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_iqn(v)

    @model_validator(mode="after")
    def _existing_needs_both(self) -> IscsiBacking:
        if (self.portal is None) != (self.iqn is None):
            raise ValueError(
                "an existing iSCSI target needs both portal and iqn (drop both for a lab-started "
                "tgtd)"
            )
        if self.lun is not None and self.portal is None:
            raise ValueError(
                "lun names a LUN of an existing target: give portal and iqn too (a lab-started "
                "tgtd makes its own LUNs)"
            )
        return self

    @property
    def lab_started(self) -> bool:
        return self.portal is None

    def existing_lun(self) -> IscsiLun | None:
        """The LUN of an existing target this backing names (LUN 0 when `lun` is not given, as in
        QEMU)."""
        if self.portal is None or self.iqn is None:
            return None
        return IscsiLun(parse_portal(self.portal), self.iqn, 0 if self.lun is None else self.lun)

    def _derived_label(self) -> str:
        lun = self.existing_lun()
        return "iscsi" if lun is None else f"iscsi:{lun.portal}/{lun.iqn}/{lun.lun}"

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        return "network"

    @property
    def protocol(self) -> str | None:
        return "iscsi"

    def availability(self, allowed_devices: set[Path]) -> str | None:
        if self.existing_lun() is None:
            return (
                missing_tools("tgtd", "tgtadm")
                or _missing_qemu_iscsi()
                or not_root("starting tgtd (its control socket is in /run/tgtd)")
            )
        return _missing_qemu_iscsi() or missing_tools("iscsi-readcapacity16")

    @property
    def plan_checks_server(self) -> bool:
        # a connect and a READ CAPACITY: nothing is logged in to stay, mapped or written
        return True

    def serving_problem(self, allowed_devices: set[Path]) -> str | None:
        lun = self.existing_lun()
        if lun is None or self.availability(allowed_devices) is not None:
            return None
        if lun.url not in allowed_iscsi_luns(allowed_devices):
            return (
                f"LUN {lun.url} was not handed over: pass --allow-destroy {lun.url} if "
                "its contents may be "
                "destroyed"
            )
        why = iscsi_lun_problem(lun)
        return None if why is None else f"LUN {lun.url} does not answer: {why}"


LOOPBACK = "127.0.0.1"
LUN_TYPES = ("null", "fileio", "blockio")
DEFAULT_LUN_TYPE = "fileio"
DEFAULT_WRITE_CACHE = "off"  # the safe one: nothing acknowledged is lost when the target dies
# tgt's bstype and bsoflags per LUN type (docs/backings.md, iSCSI).
BSTYPE: dict[str, tuple[str, str | None]] = {
    "null": ("null", None),
    "fileio": ("rdwr", None),
    "blockio": ("rdwr", "direct"),
}
# The caching mode page as tgt writes it (tgt-admin's write-cache on/off): page 8, subpage 0, 18
# bytes; byte 2 is 0x14 (DISC|WCE: write cache on) or 0x10 (DISC: off). Checked by reading WCE back
# over iSCSI.
_CACHING_PAGE_TAIL = "0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0"
WCE_BYTE = {"on": "0x14", "off": "0x10"}
NULL_LUN_BYTES = 1 << 40  # what tgt's null backing store presents
READY_S = 30.0
LUN = 1  # LUN 0 of a tgt target is its controller


def _axis(values: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = values.get(name, "-")
    value = default if value in ("-", "", None) else value
    if value not in allowed:
        raise UserError(f"{name} = {value!r} is not one of {', '.join(allowed)}")
    return value


def _lun_settings(values: Mapping[str, str]) -> tuple[str, str, str]:
    """(LUN type, write cache, image format) a lab-started LUN is made with, from the cell's
    values."""
    fmt = values.get("format", "raw") or "raw"
    return (
        _axis(values, "lun_type", DEFAULT_LUN_TYPE, LUN_TYPES),
        _axis(values, "lun_write_cache", DEFAULT_WRITE_CACHE, ("on", "off")),
        "raw" if fmt == "-" else fmt,
    )


def caching_page(write_cache: str) -> str:
    """tgtadm's `mode_page=` parameter that sets the LUN's write cache on or off."""
    return f"mode_page=8:0:18:{WCE_BYTE[write_cache]}:{_CACHING_PAGE_TAIL}"


def free_tcp_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_bound(port: int, host: str = LOOPBACK) -> bool:
    """Whether something listens on host:port (a connect succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0


def free_control_port() -> int:
    """A tgtd control port no tgtd uses and no socket file of which is left."""
    for _ in range(200):
        n = random.choice(TGTD_CONTROL_PORTS)
        if not any(f.exists() for f in tgtd_socket_files(n)) and not tgtd_lock_held(n):
            return n
    raise UserError(
        "no free tgtd control port found (200 tries)", hint="remove stale /run/tgtd/socket.* files"
    )


def _check(out: subprocess.CompletedProcess[str], what: str) -> str:
    if out.returncode != 0:
        err = (out.stderr or out.stdout).strip().splitlines()
        raise UserError(f"{what} failed: {err[-1] if err else f'exit {out.returncode}'}")
    return out.stdout


# ---------------------------------------------------------------------------------------------
# tgtd in the leftovers ledger (a NetworkProtocol.leftover_kinds of iSCSI)
# ---------------------------------------------------------------------------------------------

# tgtd's control sockets: /run/tgtd/socket.N and socket.N.lock for `tgtd -C N` (N = 0 is a system
# tgtd's).
TGTD_SOCKET_DIR = "/run/tgtd"
# The control ports iomatrix gives its own tgtd: far from 0 (the distribution's service) and small
# ones.
TGTD_CONTROL_PORTS = range(20000, 32000)  # tgtd refuses -C above 32767 (a short)
TGTD_GONE_S = 10.0


def tgtd_socket_files(control_port: int) -> list[Path]:
    base = Path(TGTD_SOCKET_DIR) / f"socket.{control_port}"
    return [base, base.with_name(base.name + ".lock")]


def tgtd_lock_held(control_port: int) -> bool:
    """Whether a live tgtd holds the lock of control port N (tgtd takes a lockf lock on
    socket.N.lock)."""
    lock = tgtd_socket_files(control_port)[1]
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def tgtadm(control_port: int, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """tgtadm against the tgtd of control port N only (never the system's on port 0)."""
    return run_tool(["tgtadm", "-C", str(control_port), "--lld", "iscsi", *args], timeout=timeout)


def tgtd_target_ids(control_port: int) -> list[int]:
    out = tgtadm(control_port, "--mode", "target", "--op", "show")
    return (
        [int(m.group(1)) for m in re.finditer(r"^Target (\d+):", out.stdout, re.M)]
        if out.returncode == 0
        else []
    )


@dataclass(frozen=True)
class TgtdLeftover(Leftover):
    """A tgtd iomatrix started (`target` its control port; info `pid`/`start` once it runs,
    `portal`). tgtd ignores SIGTERM: its targets are deleted and it is told to exit through its own
    control port, then it is killed if still alive (only while the pid is still the process
    started); its control socket files go with it. Recorded before it is started, so a kill between
    the two leaves only socket files to remove."""

    kind: ClassVar[EntryKind] = "tgtd"
    label: ClassVar[str] = "iSCSI target daemon tgtd, control port"

    def _port(self) -> int:
        if not self.target.isdigit() or int(self.target) not in TGTD_CONTROL_PORTS:
            raise LeftoverError(f"tgtd control port {self.target!r} is not one iomatrix uses")
        return int(self.target)

    def _pid_start(self) -> tuple[int, int] | None:
        pid, start = self.info.get("pid"), self.info.get("start")
        if (
            isinstance(pid, int)
            and isinstance(start, int)
            and not isinstance(pid, bool)
            and pid > 1
        ):
            return pid, start
        return None

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        try:
            self._port()
        except LeftoverError as err:
            return str(err)
        return None

    def _alive(self) -> bool:
        ps = self._pid_start()
        return ps is not None and proc_start(ps[0]) == ps[1]

    def present(self) -> bool:
        return self._alive() or any(p.exists() for p in tgtd_socket_files(self._port()))

    def remove(self) -> list[str]:
        port = self._port()
        done = []
        if self._alive():
            ps = self._pid_start()
            assert ps is not None
            for tid in tgtd_target_ids(port):
                tgtadm(port, "--mode", "target", "--op", "delete", "--force", "--tid", str(tid))
            tgtadm(port, "--mode", "system", "--op", "delete")
            if not gone_within(ps, TGTD_GONE_S):
                with contextlib.suppress(ProcessLookupError):
                    if proc_start(ps[0]) == ps[1]:
                        os.kill(ps[0], 9)
                if not gone_within(ps, PROCESS_GONE_S):
                    raise LeftoverError(
                        f"tgtd {ps[0]} (control port {port}) did not die within "
                        f"{PROCESS_GONE_S:g} s of SIGKILL"
                    )
            done.append(
                f"stopped tgtd {ps[0]} (control port {port}, portal {self.info.get('portal')})"
            )
        if tgtd_lock_held(port):
            raise LeftoverError(
                f"a tgtd still holds control port {port}: its socket files are left alone"
            )
        for f in tgtd_socket_files(port):
            if f.exists() or f.is_symlink():
                f.unlink()
                done.append(f"deleted {f}")
        return done


class TgtServer:
    """A lab-started tgtd on 127.0.0.1 (implements backing.network.NetworkServer)."""

    protocol: Literal["iscsi"] = "iscsi"
    lab_started = True

    def __init__(self, workdir: Path, directory: Path) -> None:
        self.workdir = workdir
        self.directory = directory
        self.control_port = free_control_port()
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.entry_id: str | None = None
        self.version = version_of(["tgtd", "--version"])
        self._next_tid = 1
        self._tids: dict[str, int] = {}  # target IQN → tid
        self._file_entries: dict[str, str] = {}  # LUN file → ledger entry

    # -- life cycle ------------------------------------------------------------------------------
    def leftover(self) -> TgtdLeftover:
        return TgtdLeftover(str(self.control_port), {"portal": f"{LOOPBACK}:{self.port}"})

    def start(self, record: Callable[[Leftover], str]) -> None:
        """Start tgtd, recorded (by `record`, the provision teardown's) before it starts; wait until
        it serves."""
        self.port = free_tcp_port()
        # taken since it was chosen: named, not a tgtd that dies
        refuse_if_held(self.port, "tgtd", LOOPBACK)
        self.entry_id = record(self.leftover())
        log = open(self.directory / "tgtd.log", "wb")  # noqa: SIM115 - the child keeps it
        try:
            self.proc = children.spawn(
                [
                    "tgtd",
                    "-f",
                    "--iscsi",
                    f"portal={LOOPBACK}:{self.port}",
                    "-C",
                    str(self.control_port),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        start = proc_start(self.proc.pid)
        leftovers.update(self.workdir, self.entry_id, pid=self.proc.pid, start=start)
        deadline = time.monotonic() + READY_S
        while True:
            if self.proc.poll() is not None:
                raise UserError(
                    f"tgtd exited with status {self.proc.returncode} at start: {self._log_tail()}",
                    hint=f"see {self.directory / 'tgtd.log'}",
                )
            if tgtadm(
                self.control_port, "--mode", "target", "--op", "show"
            ).returncode == 0 and port_bound(self.port):
                return
            if time.monotonic() > deadline:
                raise UserError(
                    f"tgtd did not serve {LOOPBACK}:{self.port} within {READY_S:g} s",
                    hint=f"see {self.directory / 'tgtd.log'}",
                )
            time.sleep(0.05)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = (self.directory / "tgtd.log").read_text(errors="replace").strip().splitlines()
            return lines[-1] if lines else "no output"
        return "no output"

    def stop(self) -> list[str]:
        """Stop tgtd (through its control port, then SIGKILL), reap it, remove its control socket
        files and the files of disks a tier did not give back (an interrupted run)."""
        done = self.leftover_with_pid().undo()
        if self.proc is not None:
            children.kill(self.proc)  # reaps it (already gone: nothing is sent)
        self._tids.clear()
        for path in list(self._file_entries):
            self._remove_file(Path(path))
            done.append(f"deleted {path}")
        return done

    def leftover_with_pid(self) -> TgtdLeftover:
        info: dict[str, Any] = {"portal": f"{LOOPBACK}:{self.port}"}
        if self.proc is not None:
            info.update(pid=self.proc.pid, start=proc_start(self.proc.pid))
        return TgtdLeftover(str(self.control_port), info)

    # -- NetworkServer ---------------------------------------------------------------------------
    def server_pids(self) -> dict[int, str]:
        return {self.proc.pid: "tgtd"} if self.proc is not None and self.proc.poll() is None else {}

    def metadata(self) -> dict[str, Any]:
        return {
            "iscsi_mode": "lab-started",
            "iscsi_server": "tgt",
            "tgtd_version": self.version,
            "portal": f"{LOOPBACK}:{self.port}",
            "tgtd_control_port": self.control_port,
            "tgtd_pid": self.proc.pid if self.proc else None,
        }

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        lun_type, write_cache, fmt = _lun_settings(want.values)
        if lun_type == "null" and fmt != "raw":
            raise UserError(
                f"a null LUN holds no data: format {fmt!r} cannot live on it",
                hint='use format = "raw" with lun_type = "null"',
            )
        path: Path | None = None
        if lun_type != "null":
            path = self._make_file(
                want.name, fmt, want.size_bytes, want.values, want.create_options
            )
        return self._export(
            want.name, lun_type, write_cache, fmt, path, want.size_bytes, owned=True
        )

    def export_file(self, values: Mapping[str, str], path: Path, *, name: str) -> NetworkDisk:
        """A LUN of the cell's type and write cache over a file iomatrix made elsewhere (the
        durability tier's volatile disk, a FUSE export): the file is not this server's, so
        :meth:`unexport` leaves it alone. Its size is the file's, as tgt reads it."""
        lun_type, write_cache, fmt = _lun_settings(values)
        if lun_type == "null":
            raise UserError(
                "a null LUN has no backing file to export", hint="use lun_type fileio or blockio"
            )
        return self._export(
            name, lun_type, write_cache, fmt, path, path.stat().st_size, owned=False
        )

    def unexport(self, disk: NetworkDisk) -> None:
        """Remove a LUN made by :meth:`export_file` (its target), leaving its file."""
        self.remove_disk_by(dict(disk.protocol_options)["target"], None)

    def _export(
        self,
        name: str,
        lun_type: str,
        write_cache: str,
        fmt: str,
        path: Path | None,
        size_bytes: int,
        *,
        owned: bool,
    ) -> NetworkDisk:
        """A target with one LUN over `path` (None: the null LUN), its write cache set and read
        back; `owned`: the file is this server's, removed with the LUN on every failure."""
        iqn = target_name(f"{name}-{os.getpid()}-{self._next_tid}")
        bstype, bsoflags = BSTYPE[lun_type]
        tid = self._next_tid
        self._next_tid += 1
        try:
            self._add_target(tid, iqn, path, bstype, bsoflags, write_cache)
        except BaseException:
            self._drop_target(tid)
            if path is not None and owned:
                self._remove_file(path)
            raise
        self._tids[iqn] = tid
        read_back = self._read_back_cache(iqn)
        if read_back != (write_cache == "on"):
            self.remove_disk_by(iqn, path if owned else None)
            raise UserError(
                f"tgtd did not take the write cache setting {write_cache!r}: the LUN reports "
                f"WCE={int(read_back)}",
                hint="check the tgt version (tgtd --version)",
            )
        portal = f"{LOOPBACK}:{self.port}"
        meta = {
            "lun_type": lun_type,
            "tgt_bstype": bstype,
            "tgt_bsoflags": bsoflags,
            "lun_write_cache_requested": write_cache,
            "lun_write_cache_read_back": "on" if read_back else "off",
            "tgtd_version": self.version,
            "portal": portal,
            "target": iqn,
            "lun": LUN,
            "iscsi_mode": "lab-started",
            "lun_backing_file": str(path) if path else "/dev/null",
        }
        return NetworkDisk(
            protocol="iscsi",
            protocol_options=iscsi_options(portal, iqn, LUN),
            url=IscsiLun(Portal(LOOPBACK, self.port), iqn, LUN).url,
            format=fmt,
            size_bytes=NULL_LUN_BYTES if path is None else size_bytes,
            server_path=path,
            meta=meta,
        )

    def remove_disk(self, disk: NetworkDisk) -> None:
        self.remove_disk_by(dict(disk.protocol_options)["target"], disk.server_path)

    def remove_disk_by(self, iqn: str, path: Path | None) -> None:
        tid = self._tids.pop(iqn, None)
        if tid is not None:
            self._drop_target(tid)
        if path is not None:
            self._remove_file(path)

    # -- pieces ----------------------------------------------------------------------------------
    def _make_file(
        self,
        name: str,
        fmt: str,
        size_bytes: int,
        values: Mapping[str, str],
        create_options: tuple[tuple[str, str], ...],
    ) -> Path:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "disk"
        path = self.directory / f"lun-{slug}-{self._next_tid}.img"
        self._file_entries[str(path)] = leftovers.record(self.workdir, "path", path)
        prealloc = values.get("preallocation", "-")
        if fmt == "raw":
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.ftruncate(fd, size_bytes)  # sparse, unless the cell asks for preallocation
                if prealloc in ("falloc", "full"):
                    os.posix_fallocate(fd, 0, size_bytes)
            finally:
                os.close(fd)
            return path
        opts = [f"{k}={v}" for k, v in create_options]
        if prealloc not in ("-", "", None) and not any(
            o.startswith("preallocation=") for o in opts
        ):
            opts.append(f"preallocation={prealloc}")
        argv = [
            "qemu-img",
            "create",
            "-q",
            "-f",
            fmt,
            *(["-o", ",".join(opts)] if opts else []),
            str(path),
            str(size_bytes),
        ]
        _check(
            subprocess.run(argv, capture_output=True, text=True, timeout=600),
            f"qemu-img create ({fmt})",
        )
        # The LUN's size is the file's at LUN creation: room for the image to grow into (data +
        # metadata).
        os.truncate(path, max(path.stat().st_size, _room_for(size_bytes)))
        return path

    def _remove_file(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        entry = self._file_entries.pop(str(path), None)
        if entry is not None:
            leftovers.release(self.workdir, entry)

    def _add_target(
        self,
        tid: int,
        iqn: str,
        path: Path | None,
        bstype: str,
        bsoflags: str | None,
        write_cache: str,
    ) -> None:
        n = self.control_port
        _check(
            tgtadm(n, "--mode", "target", "--op", "new", "--tid", str(tid), "--targetname", iqn),
            "tgtadm target new",
        )
        lun = [
            "--mode",
            "logicalunit",
            "--op",
            "new",
            "--tid",
            str(tid),
            "--lun",
            str(LUN),
            "--bstype",
            bstype,
            "--backing-store",
            str(path) if path else "/dev/null",
        ]
        if bsoflags:
            lun += ["--bsoflags", bsoflags]
        _check(tgtadm(n, *lun), f"tgtadm logicalunit new ({bstype})")
        _check(
            tgtadm(
                n,
                "--mode",
                "logicalunit",
                "--op",
                "update",
                "--tid",
                str(tid),
                "--lun",
                str(LUN),
                "--params",
                caching_page(write_cache),
            ),
            "tgtadm logicalunit update (write cache)",
        )
        _check(
            tgtadm(
                n,
                "--mode",
                "target",
                "--op",
                "bind",
                "--tid",
                str(tid),
                "--initiator-address",
                LOOPBACK,
            ),
            "tgtadm target bind",
        )

    def _drop_target(self, tid: int) -> None:
        tgtadm(
            self.control_port, "--mode", "target", "--op", "delete", "--force", "--tid", str(tid)
        )

    def _read_back_cache(self, iqn: str) -> bool:
        try:
            return read_write_cache(LOOPBACK, self.port, iqn, LUN)
        except IscsiProbeError as exc:
            raise UserError(f"cannot read the write cache back from {iqn}: {exc}") from None


def _room_for(size_bytes: int) -> int:
    """Bytes a qcow2 image of virtual size `size_bytes` may reach: data, L2 and refcount tables,
    slack."""
    mib = 1 << 20
    return -(-(size_bytes + size_bytes // 256 + 64 * mib) // mib) * mib


def iscsi_options(portal: str, iqn: str, lun: int) -> tuple[tuple[str, str], ...]:
    return (
        ("driver", "iscsi"),
        ("transport", "tcp"),
        ("portal", portal),
        ("target", iqn),
        ("lun", str(lun)),
    )


# ---------------------------------------------------------------------------------------------
# existing targets
# ---------------------------------------------------------------------------------------------


def read_capacity(lun: IscsiLun, budget: Budget | None = None) -> tuple[int | None, str | None]:
    """(capacity in bytes or None where it was not printed, None) of `lun`, or (None, why not):
    its portal does not connect, or libiscsi's iscsi-readcapacity16 (a login and a READ CAPACITY,
    read-only) fails: a wrong IQN, a LUN the target does not have, an ACL that shuts this host
    out, or a target that accepts and never answers. All within `budget`; the caller has checked
    that the tool is installed."""
    budget = budget or Budget()
    host, port = lun.portal.host.strip("[]"), lun.portal.port
    why = portal_problem(host, port, budget.left(PORTAL_CONNECT_TIMEOUT_S))
    if why is not None:
        return None, why
    timeout = budget.left()
    out = run_bounded(["iscsi-readcapacity16", "-s", lun.url], timeout=timeout)
    if out is None:
        return None, (
            f"the iSCSI target at {host}:{port} accepted the connection but did not answer a "
            f"login and READ CAPACITY within {timeout:.0f} s (iscsi-readcapacity16)"
        )
    if out.returncode != 0:
        err = (out.stderr or out.stdout).strip().splitlines()
        return None, (
            f"{err[-1].strip() if err else f'iscsi-readcapacity16 exit {out.returncode}'} "
            "(check the IQN, the LUN number and the target's ACL)"
        )
    m = re.search(r"^(\d+)\s*$", out.stdout.strip(), re.M)
    return (int(m.group(1)) if m else None), None


def iscsi_lun_problem(lun: IscsiLun, budget: Budget | None = None) -> str | None:
    """Why `lun` cannot serve (see `read_capacity`); None when it answers."""
    return read_capacity(lun, budget)[1]


def probe_lun(lun: IscsiLun) -> tuple[int | None, str | None]:
    """(capacity in bytes, None) of a LUN read with libiscsi's iscsi-readcapacity16, or (None, why
    not), within reach.CONNECT_BUDGET_S."""
    if shutil.which("iscsi-readcapacity16") is None:
        return None, "'iscsi-readcapacity16' is not installed (apt-get install libiscsi-bin)"
    capacity, why = read_capacity(lun)
    return capacity, None if why is None else f"{lun.url} did not answer: {why}"


class ExistingIscsiServer:
    """A LUN of a target iomatrix did not start, handed over with --allow-destroy
    (NetworkServer)."""

    protocol: Literal["iscsi"] = "iscsi"
    lab_started = False

    def __init__(self, lun: IscsiLun, workdir: Path) -> None:
        self.lun = lun
        self.workdir = workdir
        capacity, why = probe_lun(lun)
        if why is not None:
            raise UserError(
                f"iSCSI LUN {lun.url}: {why}", hint="check the portal, the IQN and the target's ACL"
            )
        self.capacity = capacity

    def server_pids(self) -> dict[int, str]:
        return {}

    def metadata(self) -> dict[str, Any]:
        return {
            "iscsi_mode": "existing",
            "portal": str(self.lun.portal),
            "target": self.lun.iqn,
            "lun": self.lun.lun,
            "lun_capacity_bytes": self.capacity,
        }

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        for axis, default in (
            ("lun_type", DEFAULT_LUN_TYPE),
            ("lun_write_cache", DEFAULT_WRITE_CACHE),
        ):
            if want.values.get(axis, "-") not in ("-", "", None, default):
                raise UserError(
                    f"{axis} = {want.values[axis]!r} cannot be set on an existing target "
                    f"({self.lun.url}): iomatrix does not administer it",
                    hint=f"drop the {axis} axis for this backing, or use a lab-started one",
                )
        if self.capacity is not None and want.size_bytes > self.capacity:
            raise UserError(
                f"disk of {want.size_bytes} bytes does not fit on {self.lun.url} "
                f"({self.capacity} bytes)",
                hint="lower the plan's image size",
            )
        fmt = want.values.get("format", "raw") or "raw"
        fmt = "raw" if fmt == "-" else fmt
        if fmt != "raw":  # the LUN was handed over: writing a fresh image header onto it is allowed
            opts = [f"{k}={v}" for k, v in want.create_options]
            argv = [
                "qemu-img",
                "create",
                "-q",
                "-f",
                fmt,
                *(["-o", ",".join(opts)] if opts else []),
                # qemu-img create takes the URL, not a json: name
                self.lun.url,
                str(want.size_bytes),
            ]
            _check(
                subprocess.run(argv, capture_output=True, text=True, timeout=600),
                f"qemu-img create ({fmt})",
            )
        try:
            write_cache: str | None = (
                "on"
                if read_write_cache(
                    self.lun.portal.host, self.lun.portal.port, self.lun.iqn, self.lun.lun
                )
                else "off"
            )
        except IscsiProbeError:
            write_cache = None
        meta = {
            "iscsi_mode": "existing",
            "portal": str(self.lun.portal),
            "target": self.lun.iqn,
            "lun": self.lun.lun,
            "lun_write_cache_read_back": write_cache,
            "lun_type": None,
        }
        return NetworkDisk(
            protocol="iscsi",
            protocol_options=iscsi_options(str(self.lun.portal), self.lun.iqn, self.lun.lun),
            url=self.lun.url,
            format=fmt,
            size_bytes=want.size_bytes,
            server_path=None,
            meta=meta,
        )

    def remove_disk(self, disk: NetworkDisk) -> None:
        """Nothing to remove: the LUN stays the user's (what was written on it is theirs to
        discard)."""


@functools.cache
def probe_kernel_client() -> str | None:
    """Why this host's kernel initiator cannot be used (open-iscsi's iscsiadm and the iscsi_tcp
    module), read once per process; None where it can (the protocol's ``kernel_probe``)."""
    return iscsi_missing(shutil.which("iscsiadm"), module_known("iscsi_tcp"))


def provision_iscsi(
    spec: IscsiBacking, workdir: Path, scratch: Path, td: Any, allowed: set[Path]
) -> tuple[TgtServer | ExistingIscsiServer, dict[str, Any]]:
    """The target of an iSCSI backing (tgtd started in `scratch`, or the existing LUN checked
    handed over again right before use) and the metadata every result of it carries."""
    lun = spec.existing_lun()
    if lun is not None:
        if lun.url not in allowed_iscsi_luns(allowed):
            raise UserError(
                f"refusing to use iSCSI LUN {lun.url}: it was not named with --allow-destroy",
                hint=f"pass --allow-destroy {lun.url} if its contents may be destroyed",
            )
        existing = ExistingIscsiServer(lun, workdir)
        return existing, existing.metadata()
    server = TgtServer(workdir, scratch)
    server.start(lambda leftover: td.record(leftover, server.stop))
    return server, server.metadata()


# ---------------------------------------------------------------------------------------------
# the rtt relay's iSCSI side (backing.delay_relay is the relay itself)
# ---------------------------------------------------------------------------------------------

PINGS = 30
RTT_PROBE = f"median of {PINGS} iSCSI NOP-Out/NOP-In round trips in one session"


def _median_rtt_ms(portal: Portal, target: str, meta: dict[str, Any]) -> float | None:
    """Median NOP round trip in ms; None (and why, in meta["rtt_probe_error"]) when the target
    refuses the probe's login, e.g. an existing target with CHAP or an initiator ACL: the disk is
    still usable by QEMU."""
    try:
        return round(
            statistics.median(nop_rtts(portal.host, portal.port, target, count=PINGS)) * 1000, 4
        )
    except IscsiProbeError as exc:
        meta["rtt_probe_error"] = f"{portal}: {exc}"
        return None


def with_portal(disk: NetworkDisk, portal: Portal) -> NetworkDisk:
    """The same disk reached through another portal (the relay's)."""
    old = dict(disk.protocol_options)["portal"]
    options = tuple((k, str(portal) if k == "portal" else v) for k, v in disk.protocol_options)
    return replace(
        disk, protocol_options=options, url=disk.url.replace(f"//{old}/", f"//{portal}/", 1)
    )


@contextlib.contextmanager
def through_relay(
    disk: NetworkDisk, rtt_ms: float, workdir: Path
) -> Iterator[tuple[NetworkDisk, dict[str, Any]]]:
    """`disk` reached through a relay adding `rtt_ms` (0: the disk unchanged, with the direct
    path's RTT measured), and what was achieved: the protocol's `rtt_relay`. The RTT is measured on
    the iSCSI path itself (NOP-Out/NOP-In pings in a logged-in session to the disk's target),
    through the relay and directly; it includes tgtd's time to answer a NOP (small), not the
    disk's."""
    options = dict(disk.protocol_options)
    portal, target = parse_portal(options["portal"]), options["target"]
    meta: dict[str, Any] = {
        "rtt_requested_ms": rtt_ms,
        "rtt_method": RELAY_METHOD if rtt_ms else "direct",
        "rtt_probe": RTT_PROBE,
    }
    direct_ms = meta["rtt_direct_ms"] = _median_rtt_ms(portal, target, meta)
    if rtt_ms == 0:
        meta["rtt_measured_ms"] = direct_ms
        yield disk, meta
        return
    # The relay costs time of its own (threads handing chunks over, sleep overshoot: 0.3-0.5 ms on a
    # loaded 2-core host). A first relay without delay measures it, and the delay asked of the real
    # one is lowered by it, so the RTT achieved lands near the one asked for instead of always above
    # it.
    with start_relay(str(portal), 0.0, workdir) as (bare_at, _):
        bare = Portal(*bare_at)
        bare_ms = _median_rtt_ms(bare, target, meta)
    overhead_ms = None if bare_ms is None or direct_ms is None else max(0.0, bare_ms - direct_ms)
    one_way_ms = max(0.0, rtt_ms - (overhead_ms or 0.0)) / 2
    meta.update(
        relay_overhead_ms=None if overhead_ms is None else round(overhead_ms, 4),
        relay_one_way_delay_ms=round(one_way_ms, 4),
    )
    with start_relay(str(portal), one_way_ms / 1000, workdir) as (relay_at, pid):
        relay = Portal(*relay_at)
        measured = _median_rtt_ms(relay, target, meta)
        meta.update(
            rtt_measured_ms=measured,
            relay_portal=str(relay),
            relay_pid=pid,
            rtt_added_ms=None
            if measured is None or direct_ms is None
            else round(measured - direct_ms, 4),
        )
        yield with_portal(disk, relay), meta
