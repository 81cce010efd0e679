"""The lab half of NBD over TCP (issue 48; the protocol's spellings: :mod:`iomatrix.protocols.nbd`):
the backing spec of ``[[backing]] type = "nbd"`` and its two servers.

Lab-started (no keys): iomatrix runs nbdkit's file plugin on 127.0.0.1 on a free port, serving a
directory under the working directory (``dir=``: each file is an export of its own name); a run's
disk is an image file made there with qemu-img (raw or qcow2: QEMU's format node sits over the nbd
node), removed when the run gives it back. nbdkit is a child of the sweep (recorded in the leftovers
ledger by pid, killed by ``iomatrix clean`` once the sweep is dead); the files are recorded as paths
before they exist, as an NFS export's are: no leftover kind of its own.

Existing (``url = "nbd://HOST:PORT/EXPORT"``): that export is the disk (raw only: an NBD export is a
volume of fixed size, whose bytes the runs overwrite), handed over with ``--allow-destroy URL``.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.leftover_kinds import PathLeftover
from iomatrix.backing.network import DiskRequest, NetworkDisk
from iomatrix.backing.reach import Budget, greeting_problem
from iomatrix.backing.spec import BackingSpecBase
from iomatrix.errors import UserError
from iomatrix.hostcmd import version_of
from iomatrix.images import create_image
from iomatrix.protocols.nbd import NAME, NBD_PORT

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 60.0  # nbdkit listens within milliseconds; generous for a loaded host
STOP_GRACE_S = 10.0
# What an NBD server sends first, old and new style alike (the protocol's "NBDMAGIC").
NBD_GREETING = b"NBDMAGIC"
# nbd://HOST[:PORT]/EXPORT, as qemu-img and QEMU's -drive take it (an export name of plain
# characters: it becomes a file name on a lab server and a QEMU option value).
NBD_URL = re.compile(
    r"nbd://(?P<host>[A-Za-z0-9.-]{1,253})(?::(?P<port>\d{1,5}))?"
    r"/(?P<export>[A-Za-z0-9_.+=@~-]{1,200})"
)


def parse_nbd_url(url: str) -> tuple[str, int, str]:
    """(host, port, export) of an nbd:// URL; a ValueError naming the fix for another string."""
    m = NBD_URL.fullmatch(url)
    if m is None or not 0 < int(m["port"] or NBD_PORT) < 65536:
        raise ValueError(
            f"url {url[:80]!r} is not an NBD export; write nbd://HOST:PORT/EXPORT, e.g. "
            f'url = "nbd://127.0.0.1:{NBD_PORT}/vm-disk"'
        )
    return m["host"], int(m["port"] or NBD_PORT), m["export"]


class NbdBacking(BackingSpecBase):
    """Disks on NBD exports, opened by QEMU's nbd driver. Lab-started (no keys): nbdkit on
    127.0.0.1. Existing (`url`): that export, named with --allow-destroy too."""

    type: Literal["nbd"] = "nbd"
    url: str | None = None

    @field_validator("url")
    @classmethod
    def _url_ok(cls, v: str | None) -> str | None:
        if v is not None:
            parse_nbd_url(v)
        return v

    @property
    def lab_started(self) -> bool:
        return self.url is None

    def _derived_label(self) -> str:
        return NAME if self.url is None else self.url.replace("://", ":", 1)

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        return "network"

    @property
    def protocol(self) -> str | None:
        return NAME

    def availability(self, allowed_devices: set[Path]) -> str | None:
        needed = ["qemu-img", "nbdkit"] if self.lab_started else ["qemu-img"]
        for prog in needed:
            if version_of([prog, "--version"]) is None:
                package = "nbdkit" if prog == "nbdkit" else "qemu-utils"
                return f"'{prog}' is not installed (apt-get install {package})"
        # (a Path folds the URL's "//": compared as written, scheme aside)
        handed = {
            str(p).split(":", 1)[1].lstrip("/")
            for p in allowed_devices
            if str(p).lower().startswith(f"{NAME}:")
        }
        if self.url is not None and self.url.split(":", 1)[1].lstrip("/") not in handed:
            return (
                f"the export {self.url} was not handed over: its bytes are overwritten; pass "
                f"--allow-destroy {self.url}"
            )
        return None

    def serving_problem(self, allowed_devices: set[Path]) -> str | None:
        if self.url is None:
            return None
        out = _qemu_img_info(self.url)
        return None if isinstance(out, int) else out

    def provision_server(
        self, workdir: Path, scratch: Path, td: Any, allowed_devices: set[Path]
    ) -> tuple[Any, dict[str, Any]]:
        if self.url is None:
            server: LabNbdServer | ExistingNbdServer = LabNbdServer.start(workdir, scratch, td)
        else:
            server = ExistingNbdServer(self.url)
        td.add_step(server.remove_all_disks)  # first undone: before the server stops
        return server, server.metadata()


def _qemu_img_info(url: str) -> int | str:
    """The export's size in bytes, or why it cannot be read (one line naming the server's host and
    port and what did not answer), within reach.CONNECT_BUDGET_S: first the server's greeting
    (an NBD server sends it as soon as it accepts: a server that accepts and stays silent is told
    within seconds), then qemu-img info."""
    budget = Budget()
    host, port, _ = parse_nbd_url(url)
    if (why := greeting_problem(host, port, "NBD server", NBD_GREETING)) is not None:
        return f"cannot open {url}: {why}"
    timeout = budget.left()
    try:
        out = subprocess.run(
            ["qemu-img", "info", "--output=json", "-f", "raw", url],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return (
            f"cannot open {url}: the NBD server at {host}:{port} greeted but did not open the "
            f"export within {timeout:.0f} s (qemu-img info)"
        )
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        return f"cannot open {url}: {last[-200:]}"
    m = re.search(r'"virtual-size":\s*(\d+)', out.stdout)
    return int(m[1]) if m else f"qemu-img info {url} gave no size"


def _options(host: str, port: int, export: str) -> tuple[tuple[str, str], ...]:
    return (
        ("driver", NAME),
        ("server.type", "inet"),
        ("server.host", host),
        ("server.port", str(port)),
        ("export", export),
    )


# ---------------------------------------------------------------------------------- the lab server
def _qcow2_room(size_bytes: int) -> int:
    """Bytes a qcow2 image of `size_bytes` may fill on an export: its data and its metadata, with
    margin (`qemu-img measure -O qcow2`, QEMU 7.2: fully allocated 64 MiB takes 67,436,544 bytes,
    10 GiB 10,739,318,784: under 0.5 % over the data)."""
    return size_bytes + size_bytes // 8 + (16 << 20)


class LabNbdServer:
    """nbdkit's file plugin started by iomatrix on 127.0.0.1, serving `exports` (one export per
    file); disks are image files made there with qemu-img."""

    def __init__(self, workdir: Path, exports: Path, port: int, proc: subprocess.Popen) -> None:
        self.workdir, self.exports, self.port, self.proc = workdir, exports, port, proc
        self.protocol, self.lab_started = NAME, True
        self.version = version_of(["nbdkit", "--version"])
        self._disks: set[Path] = set()

    @classmethod
    def start(cls, workdir: Path, scratch: Path, td: Any) -> LabNbdServer:
        exports = scratch / "exports"
        exports.mkdir()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        pid_file, log = scratch / "nbdkit.pid", scratch / "nbdkit.log"
        argv = ["nbdkit", "-f", "-i", LOOPBACK, "-p", str(port), "-P", str(pid_file)]
        with children.record_in(workdir), log.open("w") as err:
            proc = children.spawn(
                [*argv, "file", f"dir={exports}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        td.add_step(lambda: children.kill(proc, grace_s=STOP_GRACE_S))
        if (why := _wait_listening(proc, pid_file, port)) is not None:
            last = (log.read_text(errors="replace").strip().splitlines() or [""])[-1][-200:]
            raise UserError(
                f"nbdkit on {LOOPBACK}:{port} {why}" + (f": {last}" if last else ""),
                hint="see the log under the workdir's backings directory, or drop the nbd backing",
            )
        return cls(workdir, exports, port, proc)

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        fmt = want.values.get("format", "raw")
        prealloc = want.values.get("preallocation", "off")
        prealloc = "off" if prealloc in ("", "-") else prealloc
        export = f"{re.sub(r'[^A-Za-z0-9_.-]', '-', want.name)[:100]}.{fmt}"
        path = self.exports / export
        leftovers.register_temp_path(self.workdir, path)  # before it exists
        self._disks.add(path)
        try:
            create_image(path, fmt, prealloc, want.size_bytes, want.create_options)
            if fmt != "raw":
                # An NBD export has the size the file has when a client connects, and a qcow2 file
                # grows as it is written: the file is extended (sparse) to room for the image and
                # its metadata, as a qcow2 on a fixed-size volume (an LV, a LUN) has.
                os.truncate(path, max(path.stat().st_size, _qcow2_room(want.size_bytes)))
        except BaseException:
            self._remove(path)
            raise
        return NetworkDisk(
            protocol=NAME,
            protocol_options=_options(LOOPBACK, self.port, export),
            url=f"nbd://{LOOPBACK}:{self.port}/{export}",
            format=fmt,
            size_bytes=want.size_bytes,
            server_path=path,
            meta={**self.metadata(), "nbd_export": export},
        )

    def _remove(self, path: Path) -> None:
        PathLeftover(str(path)).undo()
        leftovers.forget(self.workdir, path)
        self._disks.discard(path)

    def remove_disk(self, disk: NetworkDisk) -> None:
        if disk.server_path is None or disk.server_path not in self._disks:
            raise UserError(f"{disk.url} was not made by this NBD server: not removed")
        self._remove(disk.server_path)

    def remove_all_disks(self) -> None:
        for path in sorted(self._disks):
            self._remove(path)

    def server_pids(self) -> dict[int, str]:
        return {self.proc.pid: "nbdkit"}

    def metadata(self) -> dict[str, Any]:
        return {
            "nbd_mode": "lab-started",
            "nbd_server": f"{LOOPBACK}:{self.port}",
            "nbd_server_software": self.version,
            "nbd_client": "qemu",
        }


def _wait_listening(proc: subprocess.Popen, pid_file: Path, port: int) -> str | None:
    """None once nbdkit accepts connections on `port` (its pid file is written after it binds);
    else why not."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while proc.poll() is None:
        if pid_file.exists():
            with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 1):
                return None
        if time.monotonic() > deadline:
            return f"was not listening within {READY_TIMEOUT_S:g} s"
        time.sleep(0.01)
    return f"exited with status {proc.returncode}"


class ExistingNbdServer:
    """An export the user named (and handed over): it is the disk, raw, of its own size."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.host, self.port, self.export = parse_nbd_url(url)
        self.protocol, self.lab_started = NAME, False
        size = _qemu_img_info(url)
        if isinstance(size, str):
            raise UserError(size, hint="check the server and the export name, or drop the backing")
        self.size = size

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        if want.values.get("format", "raw") != "raw":
            raise UserError(
                f"{self.url} is an existing export: only raw is measured on it (a qcow2 header "
                "would be written over its bytes)",
                hint='use format = ["raw"] for this backing',
            )
        if want.size_bytes > self.size:
            raise UserError(
                f"{self.url} holds {self.size} bytes, fewer than the {want.size_bytes} the plan "
                "needs",
                hint="lower the plan's image_size or name a larger export",
            )
        return NetworkDisk(
            protocol=NAME,
            protocol_options=_options(self.host, self.port, self.export),
            url=self.url,
            format="raw",
            size_bytes=self.size,
            meta=self.metadata(),
        )

    def remove_disk(self, disk: NetworkDisk) -> None:
        """Nothing: the export is the user's, handed over; it stays."""

    def remove_all_disks(self) -> None:
        """Nothing made."""

    def server_pids(self) -> dict[int, str]:
        return {}

    def metadata(self) -> dict[str, Any]:
        return {
            "nbd_mode": "existing",
            "nbd_server": f"{self.host}:{self.port}",
            "nbd_client": "qemu",
        }
