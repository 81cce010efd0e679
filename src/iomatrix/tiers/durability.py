"""Durability tier: cut the power and crash QEMU at a seeded random point, and count what survived.

One run is one trial of a configuration (format, preallocation, cache mode, aio, bus, host
modifier):

1. Two fresh images on the cell's backing. The **power-loss disk** is served by ``nbdkit
   --filter=cache file file=IMAGE cache=writeback`` on a private UNIX socket: a volatile write cache
   that honours flushes (and FUA), standing for everything volatile below QEMU on a real host (the
   host page cache and the disk's own cache). QEMU attaches it as an NBD client node *under* the
   cell's graph: the format driver, ``cache.direct``/``cache.no-flush`` and the device's
   ``write-cache`` are the cell's (``qemu_block.blockdev_spec_over_nbd``). The **crash disk** is the
   image file opened exactly as the guest tier opens it (``qemu_block.blockdev_spec``: file
   protocol, the cell's aio and O_DIRECT).
2. A guest (kind script ``kind-durability.sh``) makes a filesystem on both disks (ext4 for the
   workload ``durability``, xfs for ``durability-xfs``: :data:`LAYOUTS`) and runs
   ``iomx-durwriter``: 4 KiB checksummed records in groups, to a raw region of each disk (O_DIRECT +
   fdatasync) and to a file on each filesystem (fsync), acknowledging each flushed group on the
   result port (``@@IOMX:DUR:ACK:<g>@@``).
3. After a seeded number of acknowledged groups plus a seeded delay, the cut: SIGKILL nbdkit (its
   cache is lost: a **power loss** for the first disk), reaped, then SIGKILL QEMU (a **QEMU crash**
   for the second disk: what QEMU handed to the host kernel stays in the page cache, as when QEMU
   dies on a running host).
4. The surviving images are checked on the host (:mod:`iomatrix.durability.records`): every
   acknowledged record intact? how many unacknowledged records were lost? For the file streams the
   journal is replayed on a raw copy (as a reboot would) and the filesystem checked: ext4 with
   ``e2fsck`` (journal replay, ``-fn``) and ``debugfs``; xfs by mounting the copy on a loop device
   (only the kernel replays an XFS log), reading the file, unmounting, then ``xfs_repair -n``. The
   evidence itself is never modified. qcow2/qed images are converted to raw first; an image that
   cannot be read lost everything.

Host modifier eatmydata wraps QEMU (real, for the crash disk). On the power-loss disk, two
configurations need a model rather than the real thing: QEMU's NBD client sends its flush as a
"flush to the OS", which QEMU performs even with cache.no-flush=on (cache=unsafe), and an NBD flush
is invisible to eatmydata. For both, the fact that flushes never reach stable storage on a real host
is modelled by nbdkit's ``fua`` filter with ``fuamode=discard`` in front of the cache
(:func:`nbdkit_argv`; docs/durability.md)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.leftover_kinds import LoopLeftover, MountLeftover
from iomatrix.backing.leftovers import forget, register_temp_path
from iomatrix.backing.network import NetworkDisk
from iomatrix.domain import CACHE, CacheMode, Modifier
from iomatrix.domain.axes import DiskContext, qemu_options
from iomatrix.durability.fscheck import read_xfs_repair
from iomatrix.durability.records import RECORD_BYTES, StreamCheck, check_stream
from iomatrix.durability.verdict import POWER_LOSS, QEMU_CRASH
from iomatrix.errors import UserError
from iomatrix.guest.accel import AccelChoice, choose_accel
from iomatrix.guest.artifacts import GuestArtifacts, ensure_artifacts, has_guest_tool
from iomatrix.guest.job import DISK_SERIAL, GuestJob
from iomatrix.guest.kernel import BUS_MODULES, FS_MODULES
from iomatrix.guest.process import GuestHandle, console_tail, kill_all_guests, start_guest
from iomatrix.guest.stream import parse_result_stream
from iomatrix.hostcmd import require, version_of
from iomatrix.images import create_image, remove_image
from iomatrix.plan.model import Plan
from iomatrix.protocol_registry import protocol
from iomatrix.protocols.base import CUT_CLIENT_CRASH
from iomatrix.qemu_block import DiskSpec, blockdev_args, blockdev_spec_over_nbd, device_args
from iomatrix.textfile import last_lines
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, Tier, fresh_image
from iomatrix.tiers.declared.durability import Durability
from iomatrix.tiers.durability_target import VolatileLun, can_cut, volatile_lun
from iomatrix.tiers.network_disks import disk_name, disk_values, network_disk

WRITER = "usr/bin/iomx-durwriter"
CRASH_SERIAL = "iomx-crash"
RAW_SLOTS = 1024  # 4 MiB of records per stream: more than any cut reaches
# room in the fixed-size NBD export for qcow2/qed metadata the guest's writes allocate
NBD_MARGIN = 16 << 20
GROUP = 4  # records per stream between two flushes (so unflushed writes exist at the cut)
CUT_AFTER_GROUPS = (2, 20)  # the cut comes after this many acknowledged groups (seeded, inclusive)
CUT_DELAY_S = (0.0, 0.040)  # ... plus this much (seeded): the cut lands anywhere in a group
NBDKIT_START_S = 20.0
# (raw stream id, file stream id), as in kind-durability.sh
STREAMS = {POWER_LOSS: (1, 2), QEMU_CRASH: (3, 4)}


@dataclass(frozen=True)
class Layout:
    """Where things are on one trial disk: the guest filesystem in the first `fs_mb` MiB, the raw
    record region at `raw_offset`, the image `image_bytes` long (sparse: only what is written takes
    room)."""

    fs: str
    fs_mb: int
    raw_offset: int
    image_bytes: int


# The workload picks the guest filesystem of the file streams. xfs gets xfsprogs' smallest supported
# filesystem (300 MiB: mkfs.xfs refuses less, and gives it its minimum 64 MiB log).
LAYOUTS = {
    "durability": Layout("ext4", 32, 48 << 20, 64 << 20),
    "durability-xfs": Layout("xfs", 304, 320 << 20, 336 << 20),
}


def layout_for(workload: str) -> Layout:
    """The disk layout (and guest filesystem) of a durability workload; a one-line error for any
    other."""
    try:
        return LAYOUTS[workload]
    except KeyError:
        raise UserError(
            f"'{workload}' is not a durability workload", hint=f"use one of: {', '.join(LAYOUTS)}"
        ) from None


_DUR = re.compile(r"@@IOMX:DUR:(W|ACK|END|ERROR):([^@]*)@@")


@dataclass
class _Watch:
    """Follows the writer's lines on ttyS1 (called from the reader thread) and fires at the cut
    point."""

    cut_after_groups: int
    written: int = -1  # last group reported written
    acked: int = -1  # last group acknowledged
    acked_at_trigger: int = -1
    ended: bool = False
    error: str | None = None
    t_trigger: float | None = None
    fire: threading.Event = field(default_factory=threading.Event)

    def __call__(self, text: str, now: float) -> None:
        for m in _DUR.finditer(text):
            kind, value = m.group(1), m.group(2)
            if kind == "W":
                self.written = max(self.written, int(value))
            elif kind == "ACK":
                self.acked = max(self.acked, int(value))
                if self.acked + 1 >= self.cut_after_groups and not self.fire.is_set():
                    self.acked_at_trigger, self.t_trigger = self.acked, now
                    self.fire.set()
            elif kind == "END":
                self.ended = True
                self.fire.set()
            else:
                self.error = value
                self.fire.set()


@dataclass
class DiskCheck:
    """What one image held after its cut."""

    readable: bool
    fs_clean: bool
    raw: StreamCheck | None
    file: StreamCheck | None
    notes: list[str] = field(default_factory=list)

    def acked_lost(self, acked: int) -> int:
        """Acknowledged records lost over both streams; an unreadable image lost all of them."""
        if not self.readable:
            return 2 * acked
        return sum(s.acked_lost if s is not None else acked for s in (self.raw, self.file))

    def as_meta(self) -> dict[str, Any]:
        return {
            "readable": self.readable,
            "fs_clean": self.fs_clean,
            "notes": self.notes,
            "raw": None if self.raw is None else asdict(self.raw),
            "file": None if self.file is None else asdict(self.file),
        }


@dataclass(frozen=True)
class Evidence:
    """One disk of a trial as the host checks it after the cut: the situation it speaks for, the
    guest's two record streams on it (raw, file) and the image (`read_from`: how qemu-img opens a
    network disk's image, whose `image` then only names the raw copy)."""

    situation: str
    streams: tuple[int, int]
    image: Path
    read_from: str | None = None


def trial_seed(plan_fingerprint: str, cell_key: str, trial: int) -> int:
    """Reproducible per (plan, configuration, n-th trial of this session): the cut point and the
    nonce."""
    return int(
        hashlib.sha256(f"{plan_fingerprint}|{cell_key}|{trial}".encode()).hexdigest()[:16], 16
    )


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _tail(text: str, lines: int = 8) -> str:
    return last_lines(text.strip(), lines)


class HostCheckError(Exception):
    """The host could not examine a surviving image (a host tool failed): the trial fails, it is no
    verdict."""


def inspect_image(
    image: Path,
    fmt: str,
    scratch: Path,
    nonce: int,
    streams: tuple[int, int],
    acked: int,
    written: int,
    layout: Layout = LAYOUTS["durability"],
    workdir: Path | None = None,
    read_from: str | None = None,
) -> DiskCheck:
    """Check one surviving image (see the module docstring, step 4) without modifying it: everything
    happens on a raw copy in `scratch`. `workdir` holds the leftovers ledger that records the copy
    (and, for xfs, the loop device and the mount) before each is made, so a killed run leaves
    nothing `iomatrix clean` cannot undo. `read_from`: the image as qemu-img opens it where no file
    holds it (an RBD image's ``rbd:`` filename); `image` then only names the copy."""
    scratch.mkdir(parents=True, exist_ok=True)
    ledger = workdir if workdir is not None else scratch
    copy = scratch / f"{image.stem}.raw"
    notes: list[str] = []
    copy_id = leftovers.record(ledger, "path", Path(os.path.abspath(copy)))
    try:
        if fmt == "raw" and read_from is None:
            res = _run(["cp", "--sparse=always", str(image), str(copy)])
        else:
            res = _run(
                [
                    require("qemu-img"),
                    "convert",
                    "-U",
                    "-f",
                    fmt,
                    "-O",
                    "raw",
                    read_from or str(image),
                    str(copy),
                ]
            )
        if res.returncode != 0:
            return DiskCheck(
                False, False, None, None, [f"image unreadable: {_tail(res.stderr, 2)}"]
            )
        with open(copy, "rb") as f:
            f.seek(layout.raw_offset)
            region = f.read(RAW_SLOTS * RECORD_BYTES)
        raw = check_stream(region, nonce, streams[0], acked, written, RAW_SLOTS)
        if layout.fs == "xfs":
            data, fs_clean = _read_xfs(copy, scratch / f"{image.stem}.mnt", ledger, notes)
        else:
            data, fs_clean = _read_ext4(copy, scratch / f"{image.stem}.records", notes)
        file = check_stream(data, nonce, streams[1], acked, written, RAW_SLOTS)
        return DiskCheck(True, fs_clean, raw, file, notes)
    finally:
        for p in scratch.glob(f"{image.stem}.*"):
            if p.is_dir() and not p.is_symlink():
                with contextlib.suppress(OSError):
                    p.rmdir()  # a mountpoint: undo_mount removed it unless something went wrong
            else:
                p.unlink(missing_ok=True)
        if not copy.exists():
            leftovers.release(ledger, copy_id)


def check_host_reads_xfs() -> None:
    """The host replays a guest xfs's log by mounting a copy on a loop device: that needs root, the
    tools and the kernel's xfs. Checked up front, so a host that cannot is a one-line error, never
    an "unclean" verdict."""
    for tool in ("xfs_repair", "losetup", "mount"):
        require(tool)
    if os.geteuid() != 0:
        raise UserError(
            "the durability workload durability-xfs checks the guest's xfs by mounting a "
            "copy of the "
            "image on a loop device, which needs root",
            hint="run as root, or drop durability-xfs from the plan's workloads",
        )
    if "xfs" not in Path("/proc/filesystems").read_text().split():
        if shutil.which("modprobe"):
            _run(["modprobe", "xfs"])
        if "xfs" not in Path("/proc/filesystems").read_text().split():
            raise UserError(
                "the host kernel cannot mount xfs (no xfs in /proc/filesystems, modprobe "
                "xfs failed): "
                "the durability workload durability-xfs needs it to replay the guest's XFS log",
                hint="load the xfs module (modprobe xfs), or drop durability-xfs from the plan",
            )


def _read_ext4(copy: Path, dumped: Path, notes: list[str]) -> tuple[bytes, bool]:
    """The records file of an ext4 copy and whether it checks clean: the journal is replayed as the
    guest's next mount would (only then is "clean" a fair question), e2fsck -fn, the file read with
    debugfs."""
    replay = _run([require("e2fsck"), "-p", "-E", "journal_only", str(copy)])
    if replay.returncode >= 4:
        notes.append(
            f"journal replay: rc {replay.returncode}: {_tail(replay.stdout + replay.stderr, 3)}"
        )
    dump = _run([require("debugfs"), "-R", f"dump /records {dumped}", str(copy)])
    data = dumped.read_bytes() if dumped.is_file() else b""
    if not data:
        notes.append(f"no /records file: {_tail(dump.stderr, 2)}")
    fsck = _run([require("e2fsck"), "-fn", str(copy)])
    if fsck.returncode != 0:
        notes.append(f"e2fsck -fn: rc {fsck.returncode}: {_tail(fsck.stdout + fsck.stderr, 6)}")
    return data, fsck.returncode == 0


def _read_xfs(copy: Path, mnt: Path, ledger: Path, notes: list[str]) -> tuple[bytes, bool]:
    """The records file of an xfs copy and whether it checks clean.

    xfs_repair -n cannot judge a filesystem with a dirty log, and only the kernel replays an XFS
    log: the copy is attached to a loop device and mounted (the replay, as the guest's next mount
    would do it), the records file read, the filesystem unmounted, and then ``xfs_repair -n`` checks
    it. A filesystem the kernel refuses to mount is not clean (xfs_repair -n then reports the log it
    could not replay)."""
    st = os.stat(copy)
    # found by backing file
    loop_id = leftovers.record(ledger, "loop", copy, inode=[st.st_dev, st.st_ino])
    try:
        att = _run(["losetup", "--find", "--show", str(copy)])
        if att.returncode != 0:
            raise HostCheckError(f"losetup could not attach the image copy: {_tail(att.stderr, 2)}")
        dev = att.stdout.strip()
        leftovers.update(ledger, loop_id, device=dev)
        data = b""
        mount_id = leftovers.record(ledger, "mount", mnt, source=dev)
        try:
            mnt.mkdir()
            # nouuid: the power-loss and crash copies may be checked while another helper's XFS is
            # mounted.
            mounted = _run(["mount", "-t", "xfs", "-o", "nouuid", dev, str(mnt)])
            if mounted.returncode == 0:
                records = mnt / "records"
                if records.is_file():
                    data = records.read_bytes()
                else:
                    notes.append("no /records file")
            # the host's fault, not the filesystem's
            elif "unknown filesystem type" in mounted.stderr:
                raise HostCheckError(f"the host cannot mount xfs: {_tail(mounted.stderr, 1)}")
            else:
                notes.append(f"mount (log replay) failed: {_tail(mounted.stderr, 2)}")
        finally:
            MountLeftover(str(mnt), {"source": dev}).undo()
            leftovers.release(ledger, mount_id)
        repair = _run([require("xfs_repair"), "-n", dev], timeout=300)
        check = read_xfs_repair(repair.returncode, repair.stdout + repair.stderr)
        if not check.clean:
            notes.append(f"xfs_repair -n: rc {repair.returncode}: {check.summary()}")
        return data, check.clean
    finally:
        LoopLeftover(str(copy)).undo()
        leftovers.release(ledger, loop_id)


def trial_metrics(
    checks: dict[str, list[DiskCheck]], acked: int, delay: float, phases: dict[str, float]
) -> dict[str, float]:
    """A trial's metrics from the checks of its disks per situation: a situation several disks speak
    for (both RBD images of a Ceph client crash) adds up their losses, and is clean or readable only
    if all of them are."""
    metrics: dict[str, float] = {}
    for situation, disks in checks.items():
        streams = [s for chk in disks for s in (chk.raw, chk.file) if s is not None]
        metrics[f"{situation}.acked_lost"] = float(sum(chk.acked_lost(acked) for chk in disks))
        metrics[f"{situation}.unacked_lost"] = float(sum(s.unacked_lost for s in streams))
        metrics[f"{situation}.unacked_kept"] = float(sum(s.unacked_kept for s in streams))
        metrics[f"{situation}.fs_clean"] = float(all(chk.fs_clean for chk in disks))
        metrics[f"{situation}.image_readable"] = float(all(chk.readable for chk in disks))
    metrics["fs.clean"] = float(all(chk.fs_clean for disks in checks.values() for chk in disks))
    metrics["durability.acked_records"] = float(acked)
    metrics["durability.cut_delay_ms"] = round(delay * 1000, 1)
    for key, value in phases.items():
        metrics[f"phase.{key}"] = value
    return metrics


def _short_socket_path(trial_dir: Path, workdir: Path) -> tuple[Path, Path | None]:
    """A UNIX socket path under the 108-byte limit: in the trial directory if it fits, else in a
    private temporary directory (returned second, for removal), recorded in `workdir`'s ledger
    before it is made: a killed sweep's `clean` removes it (it lies outside the working directory,
    under a recorded base)."""
    sock = trial_dir / "nbd.sock"
    if len(str(sock)) < 100:
        return sock, None
    tmp = leftovers.short_scratch_dir(workdir, "nbd")
    return tmp / "nbd.sock", tmp


def drops_flushes_below_qemu(cache: str, modifier: str) -> bool:
    """Whether, on a real host, this configuration's flushes never reach stable storage
    (cache=unsafe, or eatmydata around QEMU): then the NBD path must drop them too (see
    nbdkit_argv)."""
    return CACHE[CacheMode(cache)].no_flush or modifier == Modifier.EATMYDATA


def nbdkit_argv(
    nbdkit: str, image: Path, socket: Path, pid_file: Path, drop_flushes: bool
) -> list[str]:
    """nbdkit serving `image` behind a volatile write-back cache that honours flushes and FUA.

    With `drop_flushes`, nbdkit's fua filter (fuamode=discard) in front of the cache discards every
    flush and FUA flag before the cache sees them. Why it is needed: QEMU's NBD client sends its
    flush as "flush to the OS", which QEMU does even with cache.no-flush=on (on a file that step is
    a no-op and the data waits in the host page cache, which a power loss wipes); and eatmydata
    cannot see an NBD flush at all. Measured without it, cache=unsafe kept every acknowledged write
    (docs/durability.md)."""
    filters = ["--filter=fua", "--filter=cache"] if drop_flushes else ["--filter=cache"]
    extra = ["fuamode=discard"] if drop_flushes else []
    return [
        nbdkit,
        "-f",
        "--exit-with-parent",
        "-U",
        str(socket),
        "-P",
        str(pid_file),
        *filters,
        "file",
        f"file={image}",
        "cache=writeback",
        *extra,
    ]


def _two_disk_args(power: DiskSpec, socket: Path | None, crash: DiskSpec) -> list[str]:
    """-blockdev/-device for the power-loss disk (d0: over NBD on `socket`, or a LUN when its target
    is a network disk and `socket` None) and the crash disk (d1: its file, or its LUN)."""
    power_node = (
        blockdev_args(power, "d0")
        if socket is None
        else ["-blockdev", blockdev_spec_over_nbd(power, socket, "d0")]
    )
    first = [*power_node, *device_args(power, "d0", DISK_SERIAL)]
    second = device_args(crash, "d1", CRASH_SERIAL)
    # A controller both disks sit on (virtio-scsi, ahci) is created once.
    controllers = {
        first[i + 1]
        for i in range(len(first) - 1)
        if first[i] == "-device" and ",id=" in first[i + 1]
    }
    pairs = [second[i : i + 2] for i in range(0, len(second), 2)]
    second = [x for p in pairs if not (p[0] == "-device" and p[1] in controllers) for x in p]
    return [*first, *blockdev_args(crash, "d1"), *second]


class DurabilityTier(Durability, Tier):
    """Runs the durability tier (declared in iomatrix.tiers.declared.durability)."""

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        super().__init__(plan, opts)
        self.workdir = opts.workdir
        self._trials: dict[str, int] = {}
        self._fingerprint = plan.fingerprint()

    def open(self) -> None:
        log = self.opts.log
        self.nbdkit = require("nbdkit")
        for tool in ("qemu-img", "e2fsck", "debugfs"):
            require(tool)
        if any(LAYOUTS[n].fs == "xfs" for n in self.plan.workloads if n in LAYOUTS):
            check_host_reads_xfs()
        self.artifacts: GuestArtifacts = ensure_artifacts(kernel=self.opts.kernel, log=log)
        if not has_guest_tool(self.artifacts, WRITER):
            raise UserError(
                "the guest initramfs has no iomx-durwriter (the durability tier's writer)",
                hint="install build-essential (gcc, static libc), then run: iomatrix guest build",
            )
        force = self.opts.accel
        self.choice: AccelChoice = choose_accel(
            self.artifacts, force=None if force == "auto" else force
        )

    def accel(self) -> str:
        return self.choice.accel

    def describe(self) -> str:
        return (
            f"durability tier: accelerator {self.choice.accel} ({self.choice.reason}); "
            f"{version_of([self.nbdkit, '--version']) or 'nbdkit'} cache filter as the "
            "volatile cache (on Ceph "
            f"RBD: a Ceph client crash, no power loss); "
            f"kernel {self.artifacts.kernel_version}; guest filesystem per workload "
            "(durability: ext4, "
            f"durability-xfs: xfs)"
        )

    def close(self) -> None:
        kill_all_guests()

    # -- one trial ------------------------------------------------------------
    def run(self, req: RunRequest) -> RunOutcome:
        cell = req.cell
        layout = layout_for(req.workload.name)
        k = self._trials.get(f"{cell.key}|{req.workload.name}", 0) + 1
        self._trials[f"{cell.key}|{req.workload.name}"] = k
        seed = trial_seed(self._fingerprint, cell.key, k)
        rng = random.Random(seed)
        nonce = rng.getrandbits(62)
        cut_after = rng.randint(*CUT_AFTER_GROUPS)
        delay = rng.uniform(*CUT_DELAY_S)
        trial_dir = req.run_dir / f"trial-{k}"
        shutil.rmtree(trial_dir, ignore_errors=True)
        trial_dir.mkdir(parents=True)
        meta: dict[str, Any] = {
            "trial": k,
            "seed": seed,
            "guest_fs": layout.fs,
            "nonce": nonce,
            "group_records": GROUP,
            "cut_after_groups": cut_after,
            "cut_delay_ms": round(delay * 1000, 1),
        }
        images: list[Path] = []
        tmp_sock_dir: Path | None = None
        with children.SigtermGuard():
            try:
                if (
                    req.target.kind == "network"
                    and req.target.server is not None
                    and protocol(req.target.server.protocol).durability_cut == CUT_CLIENT_CRASH
                ):
                    outcome = self._trial_on_rbd(
                        req=req,
                        layout=layout,
                        trial_dir=trial_dir,
                        nonce=nonce,
                        cut_after=cut_after,
                        delay=delay,
                        meta=meta,
                    )
                    return self._tidy(req, trial_dir, outcome)
                if req.target.kind == "network":
                    power: Path | None = self._power_image_on_target(req, layout, trial_dir)
                    images.append(power)
                    crash: Path | None = None  # a LUN of the sweep's target, made in _trial
                else:
                    power, _ = fresh_image(
                        req, self.workdir, layout.image_bytes, "iomatrix-dur-power"
                    )
                    if power is not None:
                        images.append(power)
                    crash, _ = fresh_image(
                        req, self.workdir, layout.image_bytes, "iomatrix-dur-crash"
                    )
                    if crash is not None:
                        images.append(crash)
                    if power is None or crash is None:
                        return RunOutcome(
                            ok=False, error="the durability tier needs image files", meta=meta
                        )
                if cell.format != "raw":
                    # The NBD export has a fixed size: leave room for the metadata the guest's
                    # writes allocate.
                    with open(power, "r+b") as f:
                        f.truncate(max(os.path.getsize(power), layout.image_bytes + NBD_MARGIN))
                sock, tmp_sock_dir = _short_socket_path(trial_dir, self.workdir)
                outcome = self._trial(
                    req=req,
                    layout=layout,
                    power=power,
                    crash=crash,
                    sock=sock,
                    trial_dir=trial_dir,
                    nonce=nonce,
                    cut_after=cut_after,
                    delay=delay,
                    meta=meta,
                )
            finally:
                for img in images:
                    remove_image(img)
                    forget(self.workdir, img)
                if tmp_sock_dir is not None:
                    shutil.rmtree(tmp_sock_dir, ignore_errors=True)
                    forget(self.workdir, tmp_sock_dir)
        return self._tidy(req, trial_dir, outcome)

    @staticmethod
    def _tidy(req: RunRequest, trial_dir: Path, outcome: RunOutcome) -> RunOutcome:
        """A trial that went well leaves no directory (a failed one keeps its logs for the user)."""
        if outcome.ok:
            shutil.rmtree(trial_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                req.run_dir.rmdir()
        return outcome

    def _start_nbdkit(
        self, image: Path, sock: Path, trial_dir: Path, drop_flushes: bool
    ) -> subprocess.Popen:
        pid_file = trial_dir / "nbdkit.pid"
        log = open(trial_dir / "nbdkit.log", "wb")  # noqa: SIM115 - closed below
        try:
            proc = children.spawn(
                nbdkit_argv(self.nbdkit, image, sock, pid_file, drop_flushes),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={**os.environ, "TMPDIR": str(trial_dir)},
            )  # the cache's file
        finally:
            log.close()
        if children.wait_listening(proc, pid_file, sock, NBDKIT_START_S, poll_s=0.01) is not None:
            children.kill(proc)
            text = (trial_dir / "nbdkit.log").read_text(errors="replace")
            raise UserError(
                f"nbdkit did not start: {_tail(text, 2) or 'no output'}",
                hint="check that nbdkit's file plugin and cache filter are installed (apt-get "
                "install nbdkit)",
            )
        return proc

    def _power_image_on_target(self, req: RunRequest, layout: Layout, trial_dir: Path) -> Path:
        """On an iSCSI backing the power-loss image is the target's storage: a file of the trial, in
        the working directory like the target's own files, served through the volatile chain
        (tiers.durability_target)."""
        cell = req.cell
        # In a directory of its own: inspect_image makes its raw copy (<stem>.raw) in the trial
        # directory.
        (trial_dir / "target").mkdir(exist_ok=True)
        image = trial_dir / "target" / f"storage.{cell.format}"
        register_temp_path(self.workdir, image)
        create_image(
            image,
            cell.format,
            cell.preallocation,
            layout.image_bytes,
            qemu_options(cell, DiskContext(layout.image_bytes)).create,
        )
        return image

    def _trial(
        self,
        req: RunRequest,
        layout: Layout,
        power: Path,
        crash: Path | None,
        sock: Path,
        trial_dir: Path,
        nonce: int,
        cut_after: int,
        delay: float,
        meta: dict[str, Any],
    ) -> RunOutcome:
        """One trial: nbdkit's volatile cache over the power-loss image, the guest on both disks,
        the cut. `crash` is the crash disk's image on a local backing; None on an iSCSI one, where
        both disks are LUNs of the sweep's target (the power-loss one over the volatile chain) and
        the cut is a target power loss."""
        cell = req.cell
        t0 = time.monotonic()
        on_target = crash is None
        # Over NBD, QEMU still sends flushes its cache mode drops: the lab drops them below it as a
        # real host would (nbdkit_argv). Over iSCSI nothing needs modelling: QEMU sends SYNCHRONIZE
        # CACHE or does not.
        drop = not on_target and drops_flushes_below_qemu(cell.cache, cell.modifier)
        meta["nbd_drops_flushes"] = drop
        nbd = self._start_nbdkit(power, sock, trial_dir, drop)
        # Unwound last-in first-out: QEMU dies before its LUNs go, the LUNs before the chain under
        # them.
        with contextlib.ExitStack() as stack:
            stack.callback(children.kill, nbd)
            cuts: list[Callable[[], None]] = [lambda: children.kill(nbd)]
            if on_target:
                lun, crash_lun, crash = self._luns(req, layout, sock, trial_dir, stack, meta)
                power_disk, crash_disk = (
                    DiskSpec.for_cell(cell, lun.disk, layout.image_bytes),
                    DiskSpec.for_cell(cell, crash_lun, layout.image_bytes),
                )
                cuts.append(lun.lose_power)
            else:
                power_disk = DiskSpec.for_cell(cell, power, layout.image_bytes)
                crash_disk = DiskSpec.for_cell(cell, crash, layout.image_bytes)
            watch = _Watch(cut_after)
            handle = self._start_writer(
                req,
                layout,
                nonce,
                trial_dir,
                watch,
                _two_disk_args(power_disk, None if on_target else sock, crash_disk),
            )
            # nothing of this trial outlives it, whatever happened (Ctrl-C, SIGTERM, an error)
            stack.callback(handle.kill)
            evidence = [
                Evidence(POWER_LOSS, STREAMS[POWER_LOSS], power),
                Evidence(QEMU_CRASH, STREAMS[QEMU_CRASH], crash),
            ]
            return self._cut_and_check(
                req=req,
                layout=layout,
                handle=handle,
                cuts=cuts,
                watch=watch,
                evidence=evidence,
                trial_dir=trial_dir,
                nonce=nonce,
                delay=delay,
                meta=meta,
                t0=t0,
            )

    def _start_writer(
        self,
        req: RunRequest,
        layout: Layout,
        nonce: int,
        trial_dir: Path,
        watch: _Watch,
        disk_args: list[str],
    ) -> GuestHandle:
        """The guest that makes the filesystems and writes the acknowledged records on the trial's
        two disks."""
        cell = req.cell
        job = GuestJob(
            kind="durability",
            modules=(*BUS_MODULES[cell.bus], *FS_MODULES[layout.fs]),
            env={
                "IOMX_DISK_SERIAL": DISK_SERIAL,
                "IOMX_DUR_CRASH_SERIAL": CRASH_SERIAL,
                "IOMX_DUR_NONCE": str(nonce),
                "IOMX_DUR_GROUP": str(GROUP),
                "IOMX_DUR_MAX": str(RAW_SLOTS),
                "IOMX_DUR_FS": layout.fs,
                "IOMX_DUR_FS_MB": str(layout.fs_mb),
                "IOMX_DUR_RAW_OFFSET": str(layout.raw_offset),
            },
        )
        return start_guest(
            self.artifacts,
            self.choice.accel,
            None,
            job,
            trial_dir,
            wrapper=req.wrapper or None,
            memory_mb=self.plan.guest_memory_mb,
            extra_args=disk_args,
            on_line=watch,
        )

    def _trial_on_rbd(
        self,
        req: RunRequest,
        layout: Layout,
        trial_dir: Path,
        nonce: int,
        cut_after: int,
        delay: float,
        meta: dict[str, Any],
    ) -> RunOutcome:
        """One trial on Ceph RBD: both disks are RBD images with the cell's librbd settings, opened
        by QEMU's rbd driver; the cut is a Ceph client crash (QEMU SIGKILLed: the writes librbd's
        cache holds are memory of that process), both disks speak for it. The cluster is then told
        the client is dead (`fence`: its watches would otherwise block the images' removal for 30
        s), and the images are read back through qemu-img."""
        server = req.target.server
        assert server is not None  # a network target always has its server
        fence = getattr(server, "fence", None)
        if fence is None:
            raise UserError(
                "the durability tier crashes Ceph clients on a cluster it started itself",
                hint="use a lab-started rbd backing (no conf/pool) for durability",
            )
        cell = req.cell
        t0 = time.monotonic()
        with contextlib.ExitStack() as stack:
            disks = [
                stack.enter_context(
                    network_disk(
                        server,
                        cell,
                        size_bytes=layout.image_bytes,
                        name=disk_name(f"dur-{which}", req.workload.slug),
                        workdir=self.workdir,
                    )
                )
                for which in ("d0", "d1")
            ]
            meta.update(disks[1][1])
            meta["client_crash"] = {
                "disks": [d.url for d, _ in disks],
                "client": "librbd in QEMU (driver=rbd)",
                "cut": "SIGKILL QEMU: a Ceph client crash; librbd's cache is lost with it, the "
                "OSDs keep running",
                "after": "ceph osd blocklist add <the dead client's address>, then the images "
                "read with qemu-img",
            }
            specs = [DiskSpec.for_cell(cell, d, layout.image_bytes) for d, _ in disks]
            watch = _Watch(cut_after)
            handle = self._start_writer(
                req, layout, nonce, trial_dir, watch, _two_disk_args(specs[0], None, specs[1])
            )
            stack.callback(handle.kill)
            evidence = [
                Evidence(QEMU_CRASH, STREAMS[situation], trial_dir / f"rbd-{which}", disk.url)
                for (disk, _), situation, which in zip(
                    disks, (POWER_LOSS, QEMU_CRASH), ("d0", "d1"), strict=True
                )
            ]
            return self._cut_and_check(
                req=req,
                layout=layout,
                handle=handle,
                cuts=[],
                watch=watch,
                evidence=evidence,
                trial_dir=trial_dir,
                nonce=nonce,
                delay=delay,
                meta=meta,
                t0=t0,
                after_crash=lambda: meta["client_crash"].update(
                    fenced=fence([d for d, _ in disks])
                ),
            )

    def _luns(
        self,
        req: RunRequest,
        layout: Layout,
        sock: Path,
        trial_dir: Path,
        stack: contextlib.ExitStack,
        meta: dict[str, Any],
    ) -> tuple[VolatileLun, NetworkDisk, Path]:
        """The two LUNs of a trial on iSCSI, each removed by `stack`: the power-loss one over the
        volatile chain, the crash one an ordinary LUN of the cell's type and write cache (its file
        is inspected after the QEMU crash, while tgtd still holds it: a QEMU crash leaves the target
        running)."""
        server = req.target.server
        if not can_cut(server):
            raise UserError(
                "the durability tier cuts the power of an iSCSI target it started itself",
                hint="use a lab-started iscsi backing (no portal/iqn) for durability",
            )
        cell = req.cell
        lun = stack.enter_context(
            volatile_lun(
                server,
                disk_values(cell),
                sock,
                trial_dir,
                self.workdir,
                disk_name("dur-power", req.workload.slug),
            )
        )
        # rtt is pruned to 0 for this tier: no relay between QEMU and either LUN
        crash_lun, crash_meta = stack.enter_context(
            network_disk(
                server,
                {a: v for a, v in cell.items() if a != "rtt"},
                size_bytes=layout.image_bytes,
                name=disk_name("dur-crash", req.workload.slug),
                workdir=self.workdir,
            )
        )
        assert crash_lun.server_path is not None  # a lab-started target's LUN has its file here
        meta["target_cut"] = {
            "power_loss_lun": dict(lun.disk.meta),
            "chain": "nbdkit cache filter (writeback) <- "
            "qemu-storage-daemon FUSE export <- tgt LUN <- QEMU iscsi driver",
            "cut": "SIGKILL nbdkit (the target's volatile cache), then the FUSE export; tgtd "
            "keeps no data",
        }
        meta.update(crash_meta)
        return lun, crash_lun, crash_lun.server_path

    def _cut_and_check(
        self,
        req: RunRequest,
        layout: Layout,
        handle: GuestHandle,
        cuts: list[Callable[[], None]],
        watch: _Watch,
        evidence: list[Evidence],
        trial_dir: Path,
        nonce: int,
        delay: float,
        meta: dict[str, Any],
        t0: float,
        after_crash: Callable[[], object] | None = None,
    ) -> RunOutcome:
        """The cut (each of `cuts`, then QEMU killed, then `after_crash`) and the check of every
        disk's evidence; a situation several disks speak for adds up their losses."""
        cell = req.cell
        meta["qemu_argv"] = handle.argv
        if req.on_process is not None:
            req.on_process(handle.pid)
        deadline = t0 + req.timeout_s
        while not watch.fire.wait(0.02):
            if handle.proc.poll() is not None or time.monotonic() > deadline:
                break
        failed: str | None = None
        if not watch.fire.is_set():
            failed = (
                "guest stopped before the cut"
                if handle.proc.poll() is not None
                else f"no cut point reached within {req.timeout_s:g} s"
            )
        elif watch.error is not None:
            failed = f"guest writer failed before the cut: {watch.error}"
        else:
            time.sleep(delay)
        # The cut: power loss for the first disk (its volatile cache dies with nbdkit; on iSCSI the
        # rest of the target's storage chain after it), then a QEMU crash for the second. nbdkit is
        # reaped before QEMU is killed, so nothing more can reach the first image.
        t_cut = time.monotonic()
        for cut in cuts:
            cut()
        handle.kill()
        if after_crash is not None:
            after_crash()
        stream = parse_result_stream(handle.reader.text())
        tail = console_tail(trial_dir / "console.log")
        marks = handle.reader.host_marks
        # guest uptime at init, modules, disks, mkfs, workload_start
        meta["guest_marks"] = stream.marks
        phases: dict[str, float] = {}
        if "workload_start" in marks:
            phases["boot_to_workload_s"] = round(marks["workload_start"] - handle.t_spawn, 3)
            phases["writing_s"] = round(max(0.0, t_cut - marks["workload_start"]), 3)
        if failed is None and "workload_start" not in marks:
            failed = "the guest never started writing"
        if failed is not None:
            if "error" in stream.blocks:
                failed += "; guest: " + " | ".join(stream.blocks["error"].splitlines())
            stderr = (trial_dir / "qemu-stderr.log").read_text(errors="replace").strip()
            if stderr:
                failed += f"; QEMU: {stderr.splitlines()[-1]}"
            phases["wall_s"] = round(time.monotonic() - t0, 3)
            return RunOutcome(
                ok=False,
                phases=phases,
                console_tail=tail,
                error=failed,
                meta=meta,
                job_text="durability trial",
            )
        acked = (watch.acked + 1) * GROUP
        written = (watch.written + 1) * GROUP
        meta["cut"] = {
            "acked_groups_at_trigger": watch.acked_at_trigger + 1,
            "acked_groups": watch.acked + 1,
            "written_groups": watch.written + 1,
            "writer_finished": watch.ended,
            "trigger_to_cut_ms": round((t_cut - (watch.t_trigger or t_cut)) * 1000, 1),
        }
        t_verify = time.monotonic()
        checks: dict[str, list[DiskCheck]] = {}
        try:
            for ev in evidence:
                checks.setdefault(ev.situation, []).append(
                    inspect_image(
                        image=ev.image,
                        fmt=cell.format,
                        scratch=trial_dir,
                        nonce=nonce,
                        streams=ev.streams,
                        acked=acked,
                        written=written,
                        layout=layout,
                        workdir=self.workdir,
                        read_from=ev.read_from,
                    )
                )
        # the host failed, not the configuration: no verdict from this trial
        except HostCheckError as err:
            phases["wall_s"] = round(time.monotonic() - t0, 3)
            return RunOutcome(
                ok=False,
                phases=phases,
                console_tail=tail,
                meta=meta,
                job_text="durability trial",
                error=f"checking the surviving images failed: {err}",
            )
        phases["verify_s"] = round(time.monotonic() - t_verify, 3)
        phases["wall_s"] = round(time.monotonic() - t0, 3)
        metrics = trial_metrics(checks, acked, delay, phases)
        for situation, disks in checks.items():
            meta[situation] = (
                disks[0].as_meta() if len(disks) == 1 else [chk.as_meta() for chk in disks]
            )
        return RunOutcome(
            ok=True,
            metrics=metrics,
            phases=phases,
            console_tail=tail,
            meta=meta,
            job_text=f"durability trial: cut after {watch.cut_after_groups} acknowledged groups of "
            f"{GROUP} records + {delay * 1000:.1f} ms",
            raw_output=handle.reader.text()[-20000:],
        )
