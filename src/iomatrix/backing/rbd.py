"""The Ceph RBD backing (issue 35): disks as RBD images, opened by QEMU's own Ceph client (librbd,
``driver=rbd``), made fresh for every run.

Two modes (`RbdBacking`, below):

* *lab-started* — iomatrix runs a one-node cluster on 127.0.0.1: one ceph-mon and one ceph-osd on
  free ports, every file (fsid, monmap, mon and OSD data, the BlueStore block file, admin sockets,
  pid files, logs) under the backing's scratch directory, never /var/lib/ceph or /var/run/ceph. No
  ceph-mgr (I/O does not need one), cephx off (`auth ... = none`: nothing but 127.0.0.1 can reach
  it), pool size 1, msgr v1 only. The OSD stores objects with BlueStore on a sparse file (the
  default: what a real OSD does) or in memory (`memstore`: quicker, for tests, labelled as such: its
  figures are not a disk's).
* *existing* — the user names a ceph.conf, a keyring and a pool; iomatrix creates only its own
  images there (``iomatrix-<pid>-<hex6>-<name>``), recorded in the ledger first
  (`RbdImageLeftover`), and removes them afterwards. It never opens any other image.

Each disk gets a ceph.conf of its own: the cluster's (or the user's) with a ``[client.NAME]``
section holding the cell's librbd cache settings (`rbd_cache`, `rbd_cache_policy`,
`rbd_cache_writethrough_until_flush`; absent or "-" = Ceph's default, not written), which QEMU reads
through ``conf=``. A client-specific section outranks ``[client]`` and ``[global]``, so the user's
own settings of other clients are left as they are. Beware: QEMU itself sets ``rbd_cache`` from its
cache mode when it opens the image (false with cache.direct=on, i.e. cache=none or directsync; true
otherwise, block/rbd.c), overriding the file; the metadata records both.

No file holds a disk's bytes where fio could open it (`NetworkDisk.server_path` is None): the
server-side baseline for RBD is fio's own librbd engine (``ioengine=rbd``), noted in the disk's
metadata."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import field_validator, model_validator

from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.client_host import SharedServer
from iomatrix.backing.leftover_kinds import EntryKind, Leftover, LeftoverError
from iomatrix.backing.network import DiskRequest, NetworkDisk
from iomatrix.backing.ports import free_ports_in, port_holders, refuse_if_held
from iomatrix.backing.reach import Budget, greeting_problem
from iomatrix.backing.spec import BackingSpecBase, missing_module, not_root
from iomatrix.errors import UserError
from iomatrix.hostcmd import version_of
from iomatrix.images import create_image_argv
from iomatrix.protocols.place import CEPH_MON_PORT
from iomatrix.protocols.rbd import format_reason, object_order
from iomatrix.storage_clients import krbd_missing, module_known

LOOPBACK = "127.0.0.1"
LAB_POOL = "iomatrix"
MON_ID = "a"
# generous: the cluster was up in 14-18 s on a loaded 2-core host; never a fixed sleep
READY_TIMEOUT_S = 180.0
CONNECT_TIMEOUT_S = 10  # `ceph --connect-timeout`: one probe of the monitor
COMMAND_TIMEOUT_S = 120.0
STOP_GRACE_S = 20.0
BLUESTORE_BLOCK_BYTES = 16 << 30  # sparse: only what is written takes room
MEMSTORE_BYTES = 4 << 30  # memstore's cap; it holds what is written in RAM
# The librbd cache settings a cell may set (axis → ceph option), their values and Ceph 16's defaults
# (`ceph-conf -c /dev/null --show-config-value OPTION` on Debian 12's 16.2.15).
CACHE_OPTIONS = {
    "rbd_cache": "rbd cache",
    "rbd_cache_policy": "rbd cache policy",
    "rbd_cache_writethrough_until_flush": "rbd cache writethrough until flush",
}
CACHE_VALUES = {
    "rbd_cache": ("on", "off"),
    "rbd_cache_policy": ("writeback", "writethrough", "writearound"),
    "rbd_cache_writethrough_until_flush": ("on", "off"),
}
CEPH_DEFAULTS = {
    "rbd_cache": "on",
    "rbd_cache_policy": "writearound",
    "rbd_cache_writethrough_until_flush": "on",
}
OBJECT_SIZE = re.compile(r"(\d+)([KM])")
DEFAULT_OBJECT_SIZE = "4M"  # rbd_default_order 22
# A Ceph log line's timestamp, thread id and level ("2026-11-24T01:04:02.202+0000 7f5c93648640 -1
# "): not the news.
LOG_PREFIX = re.compile(r"^\S+ [0-9a-f]+ +-?\d+ ")
BASELINE_NOTE = (
    "no file holds the image's bytes: the server-side baseline for rbd is fio's ioengine=rbd"
)


# What a lab-started Ceph cluster and QEMU's RBD client need (backing.rbd): program → Debian
# package.
RBD_LAB_PROGRAMS = {
    "ceph-mon": "ceph-mon",
    "ceph-osd": "ceph-osd",
    "monmaptool": "ceph-mon",
    "ceph": "ceph-common",
    "rbd": "ceph-common",
}
RBD_EXISTING_PROGRAMS = {"rbd": "ceph-common"}
QEMU_BLOCK_RBD = "qemu/block-rbd.so"
# A pool or client name as Ceph takes it; a conf or keyring path: absolute, plain characters (it
# goes into QEMU's `conf=` option and an rbd: URL, where ':' and ',' have meanings).
RBD_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
RBD_PATH = re.compile(r"/[A-Za-z0-9_.+=@~/-]{0,1023}")


class RbdBacking(BackingSpecBase, SharedServer):
    """Disks as Ceph RBD images, opened by QEMU's own Ceph client (librbd). Lab-started (no keys):
    iomatrix runs one ceph-mon and one ceph-osd on 127.0.0.1, the OSD on BlueStore over a file
    (`store = "bluestore"`, the default) or in RAM (`store = "memstore"`, for quick tests). Existing
    (`conf`, `pool`, optional `keyring`, `user`): iomatrix creates its own images in that pool and
    removes them afterwards."""

    type: Literal["rbd"] = "rbd"
    store: Literal["bluestore", "memstore"] | None = None
    conf: Path | None = None
    keyring: Path | None = None
    pool: str | None = None
    user: str | None = None

    @field_validator("conf", "keyring")
    @classmethod
    def _plain_path(cls, v: Path | None) -> Path | None:
        if v is not None and not RBD_PATH.fullmatch(str(v)):
            raise ValueError(
                f"{str(v)[:60]!r} is not an absolute path of plain characters (no ':', "
                "',' or spaces: "
                'QEMU\'s conf= option cannot carry them); e.g. conf = "/etc/ceph/ceph.conf"'
            )
        return v

    @field_validator("pool", "user")
    @classmethod
    def _plain_name(cls, v: str | None) -> str | None:
        if v is not None and not RBD_NAME.fullmatch(v):
            raise ValueError(
                f"{v[:60]!r} is not a Ceph name (letters, digits, '_', '.', '-'), e.g. "
                'pool = "rbd"'
            )
        return v

    @model_validator(mode="after")
    def _mode_keys(self) -> RbdBacking:
        if (self.conf is None) != (self.pool is None):
            have, missing = ("conf", "pool") if self.pool is None else ("pool", "conf")
            raise ValueError(
                f"'{have}' without '{missing}': an existing Ceph cluster needs both (conf = "
                '"/etc/ceph/ceph.conf", pool = "rbd"); leave both out to let iomatrix start its own'
            )
        if self.conf is None and (self.keyring is not None or self.user is not None):
            raise ValueError(
                "keyring and user belong to an existing cluster: give conf and pool too "
                "(a lab-started "
                "cluster runs without cephx)"
            )
        if self.conf is not None and self.store is not None:
            raise ValueError(
                "store chooses the OSD store of a lab-started cluster: drop it for an existing one "
                "(its OSDs are what they are)"
            )
        return self

    @property
    def lab_started(self) -> bool:
        return self.conf is None

    def _derived_label(self) -> str:
        if not self.lab_started:
            return f"rbd:{self.pool}"
        return "rbd-memstore" if self.store == "memstore" else "rbd"

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        return "network"

    @property
    def protocol(self) -> str | None:
        return "rbd"

    def availability(self, allowed_devices: set[Path]) -> str | None:
        programs = RBD_LAB_PROGRAMS if self.lab_started else RBD_EXISTING_PROGRAMS
        for prog, package in programs.items():
            if shutil.which(prog) is None:
                return f"'{prog}' is not installed (apt-get install {package})"
        if (why := missing_module(QEMU_BLOCK_RBD, "qemu-block-extra")) is not None:
            return why
        if not self.lab_started:
            for key, path in (("conf", self.conf), ("keyring", self.keyring)):
                if path is not None and not path.is_file():
                    return f"{key} {path} does not exist or is not a file"
            return None
        return not_root("starting ceph-mon and ceph-osd")


# ---------------------------------------------------------------------------------------------
# the RBD backing's entry in the leftovers ledger (NetworkProtocol.leftover_kinds): iomatrix's own
# image in an existing pool, removed with `rbd rm`; a lab-started cluster needs no kind of its own
# (its daemons are `process` entries, its files the scratch directory's `path` entry)
# ---------------------------------------------------------------------------------------------

# Names iomatrix gives its own images in an existing RBD pool (backing.rbd:
# "iomatrix-<pid>-<hex6>-<name>").
RBD_IMAGE_NAME = re.compile(r"iomatrix-[0-9]+-[0-9a-f]{6}(-[A-Za-z0-9_.-]{1,100})?")
RBD_POOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
RBD_TIMEOUT_S = 60.0
RBD_WATCH_TIMEOUT_S = 60.0  # twice Ceph's osd_client_watch_timeout (30 s)


def rbd_argv(conf: str, keyring: str | None, user: str | None, *args: str) -> list[str]:
    """The `rbd` command line reaching a cluster through `conf` (and a keyring and client name, when
    given)."""
    argv = ["rbd", "-c", conf]
    if keyring:
        argv += ["--keyring", keyring]
    if user:
        argv += ["--id", user]
    return [*argv, *args]


@dataclass(frozen=True)
class RbdImageLeftover(Leftover):
    """iomatrix's own image in an RBD pool (`target` "pool/image", info `conf`, `keyring`, `user`),
    removed with `rbd rm`: only an image of a name iomatrix generates (an existing pool's other
    images are never touched)."""

    kind: ClassVar[EntryKind] = "rbd_image"
    label: ClassVar[str] = "RBD image"

    def _where(self) -> tuple[str, str, str]:
        pool, _, image = self.target.partition("/")
        conf = self.info.get("conf")
        if not isinstance(conf, str) or not RBD_POOL_NAME.fullmatch(pool) or not image:
            raise LeftoverError(
                f"RBD image entry {self.target} does not name its pool, image and ceph.conf"
            )
        return pool, image, conf

    def _rbd(self, *args: str) -> subprocess.CompletedProcess[str]:
        _, _, conf = self._where()
        keyring, user = self.info.get("keyring"), self.info.get("user")
        argv = rbd_argv(
            conf,
            keyring if isinstance(keyring, str) else None,
            user if isinstance(user, str) else None,
            *args,
        )
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=RBD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise LeftoverError(
                f"rbd {args[0]} {self.target}: no answer within {RBD_TIMEOUT_S:g} s"
            ) from None

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        try:
            _, image, _ = self._where()
        except LeftoverError as err:
            return str(err)
        if not RBD_IMAGE_NAME.fullmatch(image):
            return f"{self.target} is not a name iomatrix gives its images in an RBD pool"
        return None

    def present(self) -> bool:
        pool, image, _ = self._where()
        out = self._rbd("ls", pool)
        if out.returncode != 0:
            raise LeftoverError(
                f"cannot list RBD pool {pool}: {out.stderr.strip()[-200:] or out.returncode}"
            )
        return image in out.stdout.split()

    def remove(self) -> list[str]:
        # A client killed with the image open leaves a watch the cluster drops after 30 s
        # (osd_client_watch_timeout)
        deadline = time.monotonic() + RBD_WATCH_TIMEOUT_S
        while True:
            out = self._rbd("rm", "--no-progress", self.target)
            if (
                out.returncode == 0
                or "still has watchers" not in out.stderr
                or time.monotonic() > deadline
            ):
                break
            time.sleep(1)
        if out.returncode != 0 and "No such file" not in out.stderr:
            raise LeftoverError(
                f"cannot remove RBD image {self.target}: {out.stderr.strip()[-200:]}"
            )
        return [f"removed RBD image {self.target}"] if out.returncode == 0 else []


class Teardown(Protocol):
    def record(self, leftover: Leftover) -> str: ...

    def add_step(self, action: Callable[[], object]) -> None: ...


# ---------------------------------------------------------------------------------------------
# pure parts
# ---------------------------------------------------------------------------------------------


def lab_conf(*, fsid: str, port: int, scratch: Path, store: str, block_path: Path) -> str:
    """ceph.conf of a lab cluster (pure): everything under `scratch`, 127.0.0.1 only, one OSD, no
    cephx.

    The OSD neither places itself in the CRUSH map nor sets its device class at start (iomatrix
    places it): the monitor refused those commands with EPERM when they came before the monitor map,
    and the OSD exited. The monitor does not refuse to start below 5 % free space (it exited with
    status 28 while other jobs filled this host's disk for a moment)."""
    run = scratch / "run"
    if store == "bluestore":
        store_lines = (
            f"osd objectstore = bluestore\nbluestore block path = {block_path}\n"
            f"bluestore block create = true\nbluestore block size = {BLUESTORE_BLOCK_BYTES}\n"
        )
    else:
        store_lines = f"osd objectstore = memstore\nmemstore device bytes = {MEMSTORE_BYTES}\n"
    return f"""# written by iomatrix for a lab-started RBD backing; removed with its directory
[global]
fsid = {fsid}
mon host = v1:{LOOPBACK}:{port}
mon initial members = {MON_ID}
public addr = {LOOPBACK}
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
keyring = /dev/null
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
osd crush chooseleaf type = 0
osd class update on start = false
osd crush update on start = false
mon data avail crit = 0
run dir = {run}
admin socket = {run}/$cluster-$name-$pid.asok
pid file = {run}/$name.pid
log file = {scratch}/log/$name.log
mon data = {scratch}/mon
osd data = {scratch}/osd
{store_lines}"""


def cache_settings(values: Mapping[str, str]) -> dict[str, str]:
    """The librbd cache settings a cell asks for (axis → on/off/policy); absent or "-" means Ceph's
    default and is left out. Raises UserError on a value the axis does not have."""
    out = {}
    for axis, allowed in CACHE_VALUES.items():
        value = values.get(axis, "-")
        if value in ("-", "", None):
            continue
        if value not in allowed:
            raise UserError(f"{axis} = {value!r} is not one of {', '.join(allowed)}")
        out[axis] = value
    return out


def client_section(
    client: str, settings: Mapping[str, str], run_dir: Path, keyring: Path | None = None
) -> str:
    """The ``[client.NAME]`` section of a per-disk ceph.conf (pure): the cell's cache settings, an
    admin socket under the backing's directory (`config show` on it reads back what librbd uses) and
    the keyring the plan names (QEMU has no keyring option: librbd finds it through the conf)."""
    lines = [f"[client.{client}]", f"admin socket = {run_dir}/$cluster-$name-$pid.asok"]
    if keyring is not None:
        lines.append(f"keyring = {keyring}")
    for axis, value in settings.items():
        ceph_value = {"on": "true", "off": "false"}.get(value, value)
        lines.append(f"{CACHE_OPTIONS[axis]} = {ceph_value}")
    return "\n".join(lines) + "\n"


def object_size(values: Mapping[str, str]) -> str:
    """The cell's RBD object size ("4M" when absent), checked: a power of two from 4K to 32M."""
    value = values.get("rbd_object_size", "-")
    value = DEFAULT_OBJECT_SIZE if value in ("-", "", None) else value
    m = OBJECT_SIZE.fullmatch(value)
    size = int(m.group(1)) << (10 if m.group(2) == "K" else 20) if m else 0
    if not m or size & (size - 1) or not 4 << 10 <= size <= 32 << 20:
        raise UserError(
            f"rbd_object_size = {value!r} is not a power of two from 4K to 32M",
            hint='write it like "4M" (Ceph\'s default), "1M" or "16M"',
        )
    return value


def rbd_options(pool: str, image: str, conf: Path, user: str | None) -> tuple[tuple[str, str], ...]:
    opts = [("driver", "rbd"), ("pool", pool), ("image", image), ("conf", str(conf))]
    if user:
        opts.append(("user", user))
    return tuple(opts)


def rbd_url(pool: str, image: str, conf: Path, user: str | None) -> str:
    return f"rbd:{pool}/{image}" + (f":id={user}" if user else "") + f":conf={conf}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.")[:60] or "disk"


def _image_format(values: Mapping[str, str]) -> str:
    fmt = values.get("format", "raw") or "raw"
    fmt = "raw" if fmt == "-" else fmt
    reason = format_reason(fmt, "rbd", values.get("preallocation", "-") or "-")
    if reason:
        raise UserError(
            reason, hint='use format = "raw" or "qcow2" (preallocation off or metadata) on rbd'
        )
    return fmt


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _run(argv: list[str], what: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(
            f"{what} did not finish within {timeout:g} s", hint="check the Ceph cluster's health"
        ) from None
    if out.returncode != 0:
        raise UserError(f"{what} failed: {_last_line(out.stderr or out.stdout)}")
    return out.stdout


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# disks: shared by both modes
# ---------------------------------------------------------------------------------------------


@dataclass
class _RbdPool:
    """A pool disks are made in, and how to reach it (conf, client name, keyring)."""

    workdir: Path
    directory: Path  # per-disk confs and client admin sockets go here
    pool: str
    conf: Path
    user: str | None
    keyring: Path | None
    ceph_version: str | None
    _disks: dict[str, Path] = field(default_factory=dict)  # image → its per-disk conf

    @property
    def client(self) -> str:
        return self.user or "admin"

    def rbd(self, *args: str) -> list[str]:
        return rbd_argv(
            str(self.conf), str(self.keyring) if self.keyring else None, self.user, *args
        )

    def _image_name(self, name: str) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def _record_image(self, image: str) -> None:
        """Record the image in the ledger before it exists (existing mode only: a lab cluster dies
        whole)."""

    def _forget_image(self, image: str) -> None:
        """Drop the image's ledger entry once it is gone."""

    def metadata(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        fmt = _image_format(want.values)
        settings = cache_settings(want.values)
        obj = object_size(want.values)
        image = self._image_name(want.name)
        run_dir = self.directory / "run"
        run_dir.mkdir(exist_ok=True)
        disk_conf = self.directory / f"{image}.conf"
        # the cluster's (or user's) conf, then the cell's client section: per disk, so cells never
        # share one
        disk_conf.write_text(
            self.conf.read_text()
            + "\n# the cell's librbd settings (iomatrix)\n"
            + client_section(self.client, settings, run_dir, self.keyring)
        )
        self._record_image(image)
        self._disks[image] = disk_conf
        try:
            if fmt == "raw":
                _run(
                    self.rbd(
                        "create",
                        f"{self.pool}/{image}",
                        "--size",
                        f"{want.size_bytes}B",
                        "--object-size",
                        obj,
                    ),
                    f"rbd create {self.pool}/{image}",
                )
            else:
                # QEMU creates the image itself through librbd: the object size goes in as
                # rbd_default_order, a Ceph option of the rbd: filename (rbd create would clash with
                # it)
                target = (
                    f"{rbd_url(self.pool, image, disk_conf, self.user)}:rbd_default_order="
                    f"{object_order(obj)}"
                )
                argv = create_image_argv(
                    Path(target),
                    fmt,
                    want.values.get("preallocation", "off") or "off",
                    want.size_bytes,
                    want.create_options,
                )
                assert argv is not None  # never None for a qcow2 image
                _run(argv, f"qemu-img create -f {fmt} {self.pool}/{image}")
        except BaseException:
            self._drop(image)
            raise
        written = {
            axis: settings.get(axis, f"{CEPH_DEFAULTS[axis]} (Ceph's default)")
            for axis in CACHE_VALUES
        }
        meta = {
            **self.metadata(),
            "rbd_pool": self.pool,
            "rbd_image": image,
            "rbd_object_size": obj,
            "rbd_client": "librbd",
            "rbd_conf": str(disk_conf),
            "rbd_cache_settings": written,
            "rbd_cache_note": "QEMU sets rbd_cache itself: off with cache=none/directsync, on "
            "otherwise",
            "server_side_baseline": BASELINE_NOTE,
        }
        return NetworkDisk(
            protocol="rbd",
            protocol_options=rbd_options(self.pool, image, disk_conf, self.user),
            url=rbd_url(self.pool, image, disk_conf, self.user),
            format=fmt,
            size_bytes=want.size_bytes,
            server_path=None,
            meta=meta,
        )

    def _drop(self, image: str) -> None:
        """Remove an image this pool made (and its conf); a removal that fails stays recorded for
        `clean`."""
        RbdImageLeftover(f"{self.pool}/{image}", self._leftover_info()).undo()
        conf = self._disks.pop(image, None)
        if conf is not None:
            with contextlib.suppress(FileNotFoundError):
                conf.unlink()
        self._forget_image(image)

    def _leftover_info(self) -> dict[str, Any]:
        return {
            "conf": str(self.conf),
            "keyring": str(self.keyring) if self.keyring else None,
            "user": self.user,
        }

    def remove_disk(self, disk: NetworkDisk) -> None:
        image = dict(disk.protocol_options).get("image", "")
        if image not in self._disks:  # only an image this backing made is ever removed
            raise UserError(f"{disk.url} was not made by this RBD backing: not removed")
        self._drop(image)

    def remove_all_disks(self) -> None:
        """At teardown (also on Ctrl-C): the images a run did not give back."""
        for image in sorted(self._disks):
            self._drop(image)


# ---------------------------------------------------------------------------------------------
# lab-started: one ceph-mon + one ceph-osd on 127.0.0.1
# ---------------------------------------------------------------------------------------------


@dataclass
class LabRbdServer(_RbdPool):
    """A one-node Ceph cluster iomatrix started (implements backing.network.NetworkServer)."""

    store: str = "bluestore"
    fsid: str = ""
    port: int = 0
    mon: subprocess.Popen | None = None
    osd: subprocess.Popen | None = None
    startup_s: float | None = None
    protocol: Literal["rbd"] = "rbd"
    lab_started: bool = True
    _next: int = 1

    def _image_name(self, name: str) -> str:
        self._next += 1
        return f"img-{self._next - 1}-{_slug(name)}"

    def server_pids(self) -> dict[int, str]:
        return {
            p.pid: role
            for p, role in ((self.mon, "ceph-mon"), (self.osd, "ceph-osd"))
            if p is not None and p.poll() is None
        }

    def metadata(self) -> dict[str, Any]:
        return {
            "rbd_mode": "lab-started",
            "ceph_version": self.ceph_version,
            "ceph_fsid": self.fsid,
            "ceph_mon": f"{LOOPBACK}:{self.port}",
            "ceph_store": self.store,
            "ceph_store_note": None
            if self.store == "bluestore"
            else "memstore: objects in the OSD's RAM, for quick tests; not a disk's figures",
            "ceph_startup_s": self.startup_s,
            "rbd_pool": self.pool,
        }

    def ceph(self, *args: str) -> list[str]:
        return ["ceph", "-c", str(self.conf), "--connect-timeout", str(CONNECT_TIMEOUT_S), *args]

    def fence(self, disks: list[NetworkDisk]) -> list[str]:
        """Tell the cluster that the clients still watching `disks` are dead (`ceph osd blocklist
        add`), as a Ceph admin fences a crashed client: the OSDs refuse anything more from them, and
        the images can be removed at once instead of after osd_client_watch_timeout (30 s). Only for
        disks of this cluster; returns the addresses fenced (the durability tier's client crash,
        tiers/durability.py)."""
        fenced: list[str] = []
        for disk in disks:
            image = dict(disk.protocol_options).get("image", "")
            if image not in self._disks:
                raise UserError(
                    f"{disk.url} was not made by this RBD backing: its clients are not fenced"
                )
            status = json.loads(
                _run(
                    self.rbd("status", f"{self.pool}/{image}", "--format", "json"),
                    f"rbd status {self.pool}/{image}",
                )
                or "{}"
            )
            for watcher in status.get("watchers", []):
                address = str(watcher.get("address", ""))
                if address and address not in fenced:
                    self._blocklist(address)
                    fenced.append(address)
        return fenced

    def _blocklist(self, address: str) -> None:
        """`ceph osd blocklist add`, tried up to FENCE_TRIES times: on a loaded host the monitor has
        answered the CLI's first request ("get command descriptions") with EPERM while it was busy,
        and a second try a moment later went through; a refusal that lasts is the one line it
        gives."""
        for attempt in range(1, FENCE_TRIES + 1):
            try:
                _run(
                    self.ceph("osd", "blocklist", "add", address),
                    f"ceph osd blocklist add {address}",
                )
                return
            except UserError:
                if attempt == FENCE_TRIES:
                    raise
                time.sleep(FENCE_RETRY_S)


FENCE_TRIES = 3
FENCE_RETRY_S = 2.0


def _wait_until(
    ready: Callable[[], bool], procs: list[subprocess.Popen], what: str, log: Path
) -> None:
    """Poll `ready` (bounded by READY_TIMEOUT_S) until it holds; one line if a daemon exits
    first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    delay = 0.1
    while not ready():
        for proc in procs:
            if proc.poll() is not None:
                tail = "no log"
                with contextlib.suppress(OSError):
                    tail = _last_line(log.read_text(errors="replace"))
                # no "see the log": it goes with the backing's directory at teardown
                raise UserError(
                    f"{Path(str(proc.args[0])).name} exited with status {proc.returncode} while "
                    f"{what}: {LOG_PREFIX.sub('', tail)}",
                    hint="another program took the port between iomatrix choosing it and the "
                    "daemon "
                    "binding it: run again"
                    if "bind" in tail
                    else None,
                )
        if time.monotonic() > deadline:
            raise UserError(
                f"the lab Ceph cluster was not {what} within {READY_TIMEOUT_S:g} s",
                hint=f"see {log}",
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


def _retried(argv: list[str], what: str, procs: list[subprocess.Popen], log: Path) -> str:
    """A cluster command run until it succeeds (bounded): a client that reaches the monitor before
    it has the monitor map sends a zero fsid, which the monitor refuses with EPERM (seen here under
    load); it is harmless to repeat each command used here (a refused one changed nothing; pool
    create accepts an existing pool)."""
    result: list[str] = []
    last: list[str] = ["no attempt"]

    def attempt() -> bool:
        try:
            result.append(_run(argv, what, timeout=CONNECT_TIMEOUT_S + 30))
            return True
        except UserError as err:
            last[0] = err.one_line()
            return False

    try:
        _wait_until(attempt, procs, f"answering {what}", log)
    except UserError as err:
        raise UserError(f"{err.one_line()} (last error: {last[0]})") from None
    return result[-1]


def _succeeds(argv: list[str], want: str | None = None) -> bool:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=CONNECT_TIMEOUT_S + 20)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and (want is None or want in out.stdout)


# The ports a Ceph daemon binds its messenger to (ms_bind_port_min/max, Ceph's defaults): the OSD
# takes the first free ones, four with msgr v1 (public, cluster, heartbeat front and back).
OSD_PORTS = (6800, 7300)
OSD_PORTS_NEEDED = 4


def refuse_busy_lab_ports(mon_port: int) -> None:
    """One line naming the holder when the monitor's port was taken since it was chosen, or when the
    OSD's port range has fewer free ports than the OSD binds; before either daemon starts."""
    refuse_if_held(mon_port, "ceph-mon", LOOPBACK)
    first, last = OSD_PORTS
    free = free_ports_in(first, last, LOOPBACK)
    if free < OSD_PORTS_NEEDED:
        holders = [h for p in range(first, last + 1) for h in port_holders(p, LOOPBACK)][:2]
        raise UserError(
            f"ceph-osd cannot start: {free} of ports {first}-{last} are free and it binds "
            f"{OSD_PORTS_NEEDED}; in use by {'; '.join(h.describe() for h in holders)} and others",
            hint=f"free some of ports {first}-{last} (Ceph's ms_bind_port_min/max), then run again",
        )


def start_lab_cluster(workdir: Path, scratch: Path, td: Teardown, store: str) -> LabRbdServer:
    """Start ceph-mon then ceph-osd (each in the ledger before it starts, stopped at teardown), make
    the pool, and wait, polling with bounds, until an image can be made."""
    t0 = time.monotonic()
    for sub in ("mon", "osd", "run", "log"):
        (scratch / sub).mkdir()
    fsid, port = str(uuid.uuid4()), free_port()
    refuse_busy_lab_ports(port)
    conf = scratch / "ceph.conf"
    # the BlueStore block file outside the OSD data directory: inside it, mkfs fails with ELOOP (its
    # symlink)
    conf.write_text(
        lab_conf(
            fsid=fsid, port=port, scratch=scratch, store=store, block_path=scratch / "osd-block"
        )
    )
    server = LabRbdServer(
        workdir=workdir,
        directory=scratch,
        pool=LAB_POOL,
        conf=conf,
        user=None,
        keyring=None,
        ceph_version=version_of(["ceph-mon", "--version"]),
        store=store,
        fsid=fsid,
        port=port,
    )
    c = ["-c", str(conf)]
    _run(
        [
            "monmaptool",
            "--create",
            "--fsid",
            fsid,
            "--addv",
            MON_ID,
            f"[v1:{LOOPBACK}:{port}]",
            str(scratch / "monmap"),
        ],
        "monmaptool --create",
    )
    _run(
        ["ceph-mon", *c, "--mkfs", "-i", MON_ID, "--monmap", str(scratch / "monmap")],
        "ceph-mon --mkfs",
    )
    with children.record_in(workdir):
        server.mon = children.spawn(
            ["ceph-mon", *c, "-f", "-i", MON_ID],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    mon = server.mon
    td.add_step(lambda: children.kill(mon, grace_s=STOP_GRACE_S))
    mon_log = scratch / "log" / f"mon.{MON_ID}.log"
    _wait_until(lambda: _succeeds(server.ceph("mon", "stat")), [mon], "answering", mon_log)
    osd_id = _retried(server.ceph("osd", "create"), "ceph osd create", [mon], mon_log).strip()
    osd_log = scratch / "log" / f"osd.{osd_id}.log"
    _retried(
        server.ceph("osd", "crush", "add", f"osd.{osd_id}", "1.0", "host=lab", "root=default"),
        "ceph osd crush add",
        [mon],
        mon_log,
    )
    _run(
        ["ceph-osd", *c, "--mkfs", "-i", osd_id],
        f"ceph-osd --mkfs ({store})",
        timeout=READY_TIMEOUT_S,
    )
    with children.record_in(workdir):
        server.osd = children.spawn(
            ["ceph-osd", *c, "-f", "-i", osd_id],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    osd = server.osd
    td.add_step(lambda: children.kill(osd, grace_s=STOP_GRACE_S))
    _wait_until(
        lambda: _succeeds(server.ceph("osd", "stat"), "1 up"), [mon, osd], "serving an OSD", osd_log
    )
    _retried(
        server.ceph("osd", "pool", "create", LAB_POOL, "8"),
        "ceph osd pool create",
        [mon, osd],
        mon_log,
    )
    _retried(server.rbd("pool", "init", LAB_POOL), "rbd pool init", [mon, osd], mon_log)
    server.startup_s = round(time.monotonic() - t0, 1)
    return server


# ---------------------------------------------------------------------------------------------
# existing: someone else's cluster and pool
# ---------------------------------------------------------------------------------------------


@dataclass
class ExistingRbdPool(_RbdPool):
    """A pool of a cluster the user named: iomatrix makes only its own images there and removes
    them."""

    protocol: Literal["rbd"] = "rbd"
    lab_started: bool = False
    _entries: dict[str, str] = field(default_factory=dict)  # image → ledger entry

    def _image_name(self, name: str) -> str:
        return f"iomatrix-{os.getpid()}-{secrets.token_hex(3)}-{_slug(name)}"

    def _record_image(self, image: str) -> None:
        leftover = RbdImageLeftover(f"{self.pool}/{image}", self._leftover_info())
        self._entries[image] = leftovers.record(
            self.workdir, leftover.kind, leftover.target, **leftover.info
        )

    def _forget_image(self, image: str) -> None:
        entry = self._entries.pop(image, None)
        if entry is not None:
            leftovers.release(self.workdir, entry)

    def server_pids(self) -> dict[int, str]:
        return {}

    def metadata(self) -> dict[str, Any]:
        return {
            "rbd_mode": "existing",
            "ceph_version": self.ceph_version,
            "ceph_conf": str(self.conf),
            "rbd_pool": self.pool,
            "ceph_user": self.client,
        }


# A Ceph monitor's first bytes to a client: msgr v1's banner "ceph v027", msgr v2's "ceph v2\n".
MON_GREETING = b"ceph v"
MSGR_V2_PORT = 3300  # a monitor's msgr v2 port (IANA), where `v2:` names no port
# `mon host` (or mon_host, mon-host) in a ceph.conf, and its addresses: v1:/v2: prefixed or bare,
# bracketed lists, IPv6 in brackets, an optional port and /nonce.
_MON_HOST = re.compile(r"^\s*mon[ _-]host\s*=\s*(?P<value>[^#;\n]*)", re.I | re.M)
_MON_ADDR = re.compile(
    r"(?:(?P<msgr>v[12]):)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)"
    r"(?::(?P<port>\d{1,5}))?(?:/\d+)?"
)


def monitor_addresses(conf_text: str) -> list[tuple[str, int]]:
    """The (host, port) of each monitor a ceph.conf's `mon host` names, in order, without
    repeats; empty where it names none (a cluster found through DNS SRV records)."""
    found: dict[tuple[str, int], None] = {}
    for line in _MON_HOST.finditer(conf_text):
        for m in _MON_ADDR.finditer(line["value"].replace("[v", " v").replace("] ", " ")):
            default = MSGR_V2_PORT if m["msgr"] == "v2" else CEPH_MON_PORT
            found[(m["host"].strip("[]"), int(m["port"] or default))] = None
    return list(found)


def _monitor_problem(conf: Path, budget: Budget) -> str | None:
    """Why no monitor the conf names greets a client (each asked in turn until one does, within
    `budget`), naming each monitor's host and port; None when one greets or none is named."""
    try:
        monitors = monitor_addresses(conf.read_text(errors="replace"))
    except OSError as err:
        return f"cannot read {conf} ({err.strerror})"
    problems = []
    for host, port in monitors:
        if budget.spent:
            break
        why = greeting_problem(host, port, "Ceph monitor", MON_GREETING, budget.left(5.0))
        if why is None:
            return None
        problems.append(why)
    return "; ".join(problems) or None


def existing_pool_problem(spec: RbdBacking, budget: Budget | None = None) -> str | None:
    """Why the cluster of the backing's conf does not list its pool, in one line naming what did
    not answer and what to check; None when it does. Within `budget` (reach.CONNECT_BUDGET_S
    unless given): a monitor's greeting (a monitor that accepts and stays silent is told within
    seconds), then a read-only `rbd ls` whose own mount timeout is what is left."""
    assert spec.conf is not None and spec.pool is not None
    budget = budget or Budget()
    checks = "check the conf's mon host, the keyring, the user and the pool name"
    if (why := _monitor_problem(spec.conf, budget)) is not None:
        return (
            f"the Ceph cluster of {spec.conf} does not list pool {spec.pool!r}: no monitor "
            f"answers: {why}; {checks}"
        )
    timeout = budget.left()
    argv = rbd_argv(
        str(spec.conf),
        str(spec.keyring) if spec.keyring else None,
        spec.user,
        # librados gives up on the monitors itself, before the process is killed
        f"--client_mount_timeout={max(1, int(timeout) - 1)}",
        "ls",
        spec.pool,
    )
    # (read: _monitor_problem found the conf readable)
    monitors = ", ".join(
        f"{h}:{p}" for h, p in monitor_addresses(spec.conf.read_text("utf-8", "replace"))
    )
    what = f"rbd ls {spec.pool}" + (f" (monitors {monitors})" if monitors else "")
    try:
        _run(argv, what, timeout=timeout)
    except UserError as err:
        return (
            f"the Ceph cluster of {spec.conf} does not list pool {spec.pool!r}: "
            f"{err.one_line()}; {checks}"
        )
    return None


def connect_existing(spec: RbdBacking, workdir: Path, scratch: Path) -> ExistingRbdPool:
    """Check, within bounded time, that the named cluster answers and the pool exists (a read-only
    `rbd ls`)."""
    assert spec.conf is not None and spec.pool is not None
    if (why := existing_pool_problem(spec)) is not None:
        raise UserError(why)
    return ExistingRbdPool(
        workdir=workdir,
        directory=scratch,
        pool=spec.pool,
        conf=spec.conf,
        user=spec.user,
        keyring=spec.keyring,
        ceph_version=version_of(["rbd", "--version"]),
    )


def provision_rbd(
    spec: RbdBacking,
    workdir: Path,
    scratch: Path,
    td: Teardown,
    allowed_devices: set[Path] | None = None,
) -> tuple[LabRbdServer | ExistingRbdPool, dict[str, Any]]:
    """The cluster of an RBD backing (started or checked) and the metadata every result of it
    carries."""
    server: LabRbdServer | ExistingRbdPool
    if spec.lab_started:
        server = start_lab_cluster(workdir, scratch, td, spec.store or "bluestore")
    else:
        server = connect_existing(spec, workdir, scratch)
    td.add_step(server.remove_all_disks)  # first undone: before the cluster stops
    return server, server.metadata()


def rbd_image_checksum(pool: ExistingRbdPool | LabRbdServer, image: str) -> str:
    """sha256 of an image's contents (`rbd export - | sha256sum`), read-only: what tests compare."""
    argv = pool.rbd("export", f"{pool.pool}/{image}", "-")
    out = subprocess.run(argv, capture_output=True, timeout=COMMAND_TIMEOUT_S)
    if out.returncode != 0:
        raise LeftoverError(
            f"rbd export {image} failed: {_last_line(out.stderr.decode(errors='replace'))}"
        )
    return hashlib.sha256(out.stdout).hexdigest()


@functools.cache
def probe_kernel_client() -> str | None:
    """Why this host's kernel RBD client (krbd) cannot be used (the rbd tool that maps images, and
    the rbd kernel module), read once per process; None where it can (the protocol's
    ``kernel_probe``)."""
    return krbd_missing(shutil.which("rbd"), module_known("rbd"))
