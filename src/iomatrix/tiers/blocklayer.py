"""Block-layer tier: QEMU's own storage stack at native speed, without a guest.

Per run: a fresh image on the cell's backing (the guest tier's creation code),
``qemu-storage-daemon`` with the cell's ``--blockdev`` graph (the string the guest tier passes to
``-blockdev``, from
:mod:`iomatrix.qemu_block`), that node exported over NBD on a private UNIX socket in the run's directory,
fio's ``nbd`` engine (libnbd) running the workload against the export, then the daemon stopped and
the image deleted. Format, preallocation, cache mode, aio and host backing are decided by this code
in QEMU; what is missing compared with a guest is the guest kernel, the emulated bus and device, and
the guest page cache.

On a network backing (iSCSI, NFS: docs/shared-storage.md) the run asks the backing's server for a
fresh disk instead of creating an image (`tiers.network_disks`), the daemon opens it with QEMU's own
client (the format node over ``file.driver=iscsi`` or ``nfs``), the server's processes are counted
in the run's CPU per I/O, and the disk is given back after the daemon has stopped.

How a cache mode maps (qemu/qemu ``block/export/export.c`` ``blk_exp_add``:
``blk_set_enable_write_cache(blk, !export->writethrough)``; a guest device's ``write-cache=`` makes
the same call in ``hw/block/block.c`` ``blkconf_apply_backend_options``):

============  ============  ==============  ======================  =============================
cache         cache.direct  cache.no-flush  export writethrough     guest equivalent
============  ============  ==============  ======================  =============================
writeback     off           off             off                     -device …,write-cache=on
none          on            off             off                     -device …,write-cache=on
writethrough  off           off             on                      -device …,write-cache=off
directsync    on            off             on                      -device …,write-cache=off
unsafe        off           on              off                     -device …,write-cache=on
============  ============  ==============  ======================  =============================

With the write cache off, QEMU's BlockBackend marks every write FUA (``block/block-backend.c``) and
the block layer emulates FUA by a flush after the write (``block/io.c``): the same
flush-after-every-write a guest gets from a ``write-cache=off`` device. A workload's own flushes
(``fdatasync=N``, sent as fio ``fsync=N`` because the nbd engine refuses fdatasync, and the final
``end_fsync``) arrive as ``NBD_CMD_FLUSH`` → ``blk_co_flush``: honoured, or dropped by
``cache.no-flush=on`` (unsafe), exactly as a guest's flush is. One difference remains: a guest
kernel sends no flush to a device without a write cache, while fio here still sends its NBD flushes
under writethrough/directsync (QEMU then flushes a file with nothing dirty)."""  # noqa: E501

from __future__ import annotations

import contextlib
import os
import shutil
import socket as socketlib
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from iomatrix import children
from iomatrix.backing.leftovers import forget, register_temp_path
from iomatrix.backing.network import NetworkDisk
from iomatrix.calibration_throttle import Throttle, throttles
from iomatrix.domain import CACHE, CacheMode
from iomatrix.errors import UserError
from iomatrix.fio.jobs import FIO_CLOCKSOURCE, IOPS_LOG_FILE, NbdJob, nbd_job, nbd_uri
from iomatrix.fio.parse import (
    FioOutputError,
    checked_metrics,
    extract_json,
    fatal_message,
    parse_iops_log,
)
from iomatrix.hostcmd import require, version_of
from iomatrix.images import remove_image
from iomatrix.matrix import Cell
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec, blockdev_spec, export_options, object_specs, write_cache
from iomatrix.textfile import last_lines
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, Tier, fresh_image
from iomatrix.tiers.contention import ContentionRun, client_count
from iomatrix.tiers.declared.blocklayer import BlockLayer
from iomatrix.tiers.network_disks import disk_name, follow_server, network_disk

NODE = "d0"
# The cell's graph under a calibration throttle (the filter node is NODE then).
THROTTLED_NODE = "d0-throttled"
EXPORT_ID = "iomx-export"
EXPORT_NAME = "iomx"
# Relative to the run directory (the daemon's and fio's working directory): a UNIX socket path is
# limited to 108 bytes, and the working directory can be deeper than that.
SOCKET_NAME = "nbd.sock"
DAEMON_LOG = "daemon.log"
STOP_GRACE_S = 5.0
EXPORT_KIND = "nbd over a private UNIX socket (fio ioengine=nbd, libnbd)"
# An image is left to later runs' start-ups to delete only if the backing keeps room for this many
# more images of the plan's size (the next one may be fully preallocated).
DEFER_ROOM_IMAGES = 2
# Deleting is done by truncating from the end a slice at a time, so that it can stop within one
# slice's time when the daemon must start. The slice adapts to what one costs on this backing
# (Trash.next_step): while one takes under a quarter of TRASH_SLICE_S it doubles, above it it
# halves. Why not a fixed slice: freeing blocks is paid per request where the filesystem discards
# them at once, and per extent where the image is fragmented. Measured on this host's ext4 without
# a journal, mounted with discard (2026-11-27): a 128 MiB file written in 1 MiB O_DIRECT writes was
# deleted in 0.67 s in 512 KiB slices (the fixed slice before), 0.25 s in 4 MiB ones (≤ 14 ms
# each), 0.21 s in 8 MiB ones (≤ 16 ms) and 0.18 s at once; one written by 4 KiB random writes
# (~16,000 extents) took ~7 s whatever the slice, 48-56 ms a 512 KiB slice, 280 ms a 4 MiB one.
TRASH_SLICE_S = 0.02
TRASH_STEP_MIN_BYTES = 64 << 10
TRASH_STEP_START_BYTES = 512 << 10
TRASH_STEP_MAX_BYTES = 16 << 20
# fio spends ≥ ~0.2 s starting up before it connects (a fixed 100 ms sleep while its job initialises
# and ~100 ms calibrating the CPU clock): the trash is worked on until this long after fio started,
# then the daemon is started (it serves ~20 ms later). Were the daemon later than fio, fio's
# handshake would wait: the run takes longer, what it measures does not change.
TRASH_WINDOW_S = 0.12


def _tail(text: str, lines: int = 40) -> str:
    return last_lines(text, lines)


def export_spec(disk: DiskSpec, node: str = NODE, name: str = EXPORT_NAME) -> str:
    """``--export`` value: the node exported writable over NBD, with what the cell's axes set on the
    export (the write-cache half of the cache mode: writethrough=)."""
    return f"type=nbd,id={EXPORT_ID},node-name={node},name={name},writable=on{export_options(disk)}"


def daemon_argv(
    qsd: str,
    disk: DiskSpec,
    listen_fd: int,
    wrapper: list[str] | None = None,
    throttle: Throttle | None = None,
) -> list[str]:
    """The qemu-storage-daemon command line serving `disk` (the guest's graph) on the listening UNIX
    socket `listen_fd` (inherited: see :func:`listening_socket`); under a calibration `throttle`
    (iomatrix.calibration_throttle), the graph is the throttle filter's child and the filter is
    exported."""
    return [
        *(wrapper or []),
        *_daemon_argv(qsd, disk, f"addr.type=fd,addr.str={listen_fd}", throttle),
    ]


def remote_daemon_argv(disk: DiskSpec) -> list[str]:
    """The command line a client host runs (tiers/remote_client.py): the daemon on the host's PATH,
    serving `disk` on `SOCKET_NAME` in its working directory, which the job's NBD URI names."""
    return _daemon_argv("qemu-storage-daemon", disk, f"addr.type=unix,addr.path={SOCKET_NAME}")


def _daemon_argv(
    qsd: str, disk: DiskSpec, nbd_address: str, throttle: Throttle | None = None
) -> list[str]:
    # an IOThread for the export
    objects = [arg for spec in object_specs(disk) for arg in ("--object", spec)]
    graph = ["--blockdev", blockdev_spec(disk, NODE)]
    if throttle is not None:
        # The cell's graph unchanged under its own node name, the filter on top as NODE (exported).
        objects += ["--object", throttle.object_spec()]
        graph = [
            "--blockdev",
            blockdev_spec(disk, THROTTLED_NODE),
            "--blockdev",
            throttle.filter_spec(NODE, THROTTLED_NODE),
        ]
    return [
        qsd,
        *objects,
        *graph,
        "--nbd-server",
        nbd_address,
        "--export",
        export_spec(disk),
    ]


def listening_socket(run_dir: Path) -> socketlib.socket:
    """A UNIX stream socket bound at ``run_dir/SOCKET_NAME`` and already listening, for the daemon
    to inherit.

    Why the socket is ours and not the daemon's: a client's connect() succeeds as soon as the socket
    listens, and the NBD handshake then waits until the daemon accepts, which it does only after it
    has built the graph and the export (it processes its whole command line before its main loop
    runs). So fio can start at the same time as the daemon, without a readiness poll, and fio's
    measured part can only begin once the daemon serves. Bound through /proc/self/fd/N/… so the path
    is short whatever the run directory's length (sun_path holds 108 bytes)."""
    sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    dfd = os.open(run_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.bind(f"/proc/self/fd/{dfd}/{SOCKET_NAME}")
        sock.listen(8)
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(dfd)
    return sock


class Trash:
    """Earlier runs' images waiting to be deleted (renamed, in the leftovers ledger), worked on only
    while no measured I/O can run: in a thread during a run's start-up, stopped before that run's
    daemon starts.

    Why not at the end of each run: see :meth:`BlockLayerTier._defer_removal`. Work that does not
    fit in one start-up carries over to the next ones (a cheap deletion, e.g. a write-cached
    image's, leaves the rest of its window to the backlog); :meth:`BlockLayerTier.run` bounds the
    backlog by waiting."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.files: list[Path] = []
        # deleted, not yet dropped from the ledger (the main thread does that)
        self.gone: list[Path] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.busy_s = 0.0  # time spent deleting since the last reset (recorded with a run)
        self._clock = clock  # a fake one in the tests of the slice's adaptation

    @staticmethod
    def next_step(step: int, took_s: float) -> int:
        """The next slice after one of `step` bytes took `took_s`: halved above TRASH_SLICE_S,
        doubled under a quarter of it (the next then takes about half of it), within
        [TRASH_STEP_MIN_BYTES, TRASH_STEP_MAX_BYTES]. E.g. 512 KiB in 3 ms → 1 MiB; 4 MiB in
        280 ms → 2 MiB."""
        if took_s > TRASH_SLICE_S:
            return max(TRASH_STEP_MIN_BYTES, step // 2)
        if took_s < TRASH_SLICE_S / 4:
            return min(TRASH_STEP_MAX_BYTES, step * 2)
        return step

    def add(self, path: Path) -> None:
        self.files.append(path)

    def allocated_bytes(self) -> int:
        total = 0
        for f in self.files:
            with contextlib.suppress(OSError):
                total += f.stat().st_blocks * 512
        return total

    def work(self, done: Callable[[], bool]) -> None:
        """Truncate the files from the end, a slice at a time, unlinking each once empty, until
        `done()`."""
        clock = self._clock
        t0 = clock()
        try:
            while self.files and not done():
                path = self.files[0]
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                except FileNotFoundError:
                    self.gone.append(self.files.pop(0))
                    continue
                try:
                    size = os.fstat(fd).st_size
                    # Each file starts at TRASH_STEP_START_BYTES: an image may be fragmented where
                    # the last one was not, and its first slice then costs what a 512 KiB one does.
                    step = TRASH_STEP_START_BYTES
                    while size > 0 and not done():
                        size = max(0, size - step)
                        t_slice = clock()
                        os.ftruncate(fd, size)
                        step = self.next_step(step, clock() - t_slice)
                finally:
                    os.close(fd)
                if size == 0:
                    path.unlink(missing_ok=True)
                    self.gone.append(self.files.pop(0))
        finally:
            self.busy_s += clock() - t0

    def start(self) -> None:
        """Work in a thread until :meth:`stop`."""
        if not self.files or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.work, args=(self._stop.is_set,), name="iomatrix-blk-trash", daemon=True
        )
        self._thread.start()

    def wait(self, deadline: float) -> None:
        """Let the thread work until it has nothing left or the monotonic clock reaches
        `deadline`."""
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stop the thread; returns within one slice's time (about TRASH_SLICE_S; a fragmented
        image's slice at the smallest step can take longer). Nothing is deleted after this
        returns."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def empty(self) -> None:
        """Delete everything now (the sweep is over, or a run is being torn down)."""
        self.stop()
        self.work(lambda: False)


def disk_for(cell: Cell, image: Path | NetworkDisk | None, null_size_bytes: int) -> DiskSpec:
    # The null ceiling has no format, host cache or backing: what is left is QEMU's block layer and
    # the export.
    assert image is not None or cell.is_null_ceiling
    return DiskSpec.for_cell(cell, image, null_size_bytes)


def fio_has_nbd(fio: str) -> bool:
    try:
        out = subprocess.run([fio, "--enghelp"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "nbd" in {line.strip() for line in out.stdout.splitlines()}


class BlockLayerTier(BlockLayer, Tier):
    """Runs the blocklayer tier (declared in iomatrix.tiers.declared.blocklayer)."""

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        super().__init__(plan, opts)
        self.workdir = opts.workdir
        self.qsd = ""
        self.fio = ""
        self.qemu_version = ""
        self._live: dict[int, subprocess.Popen] = {}
        # Earlier runs' images whose deletion waits for later runs' start-ups (_defer_removal).
        self._trash = Trash()
        self._removals = 0
        self._throttles: dict[tuple[str, str], Throttle] = {}

    def open(self) -> None:
        self.qsd = require("qemu-storage-daemon")
        self.fio = require("fio")
        if not fio_has_nbd(self.fio):
            raise UserError(
                f"{self.fio} has no nbd ioengine ('fio --enghelp' does not list it)",
                hint="install Debian's fio (built with libnbd): apt-get install fio",
            )
        self.qemu_version = version_of([self.qsd, "--version"]) or "unknown"
        # bench/power_curve.py's known slowdowns, from its environment only (never a plan)
        self._throttles = throttles()

    def accel(self) -> str:
        return "none (QEMU block layer, no guest)"

    def describe(self) -> str:
        return f"blocklayer tier: {self.qemu_version}, export {EXPORT_KIND}"

    def close(self) -> None:
        for proc in list(self._live.values()):
            children.kill(proc, tree=True)
        self._live.clear()
        self._trash.empty()
        self._forget_gone()

    def _forget_gone(self) -> None:
        for path in self._trash.gone:
            forget(self.workdir, path)
        self._trash.gone.clear()

    # -- one run ------------------------------------------------------------
    def _job(self, req: RunRequest) -> NbdJob:
        custom = req.workload.custom_text  # validated at plan load; never re-read from disk
        return nbd_job(
            req.workload, uri=nbd_uri(SOCKET_NAME, EXPORT_NAME), shape=req.shape, custom_text=custom
        )

    def _stop(self, proc: subprocess.Popen, *, grace_s: float, tree: bool = False) -> None:
        children.kill(proc, grace_s=grace_s, tree=tree)
        self._live.pop(proc.pid, None)

    def _can_defer(self, cell: Cell, image: Path) -> bool:
        """Whether this run's image may wait for the next run to be deleted (see
        :meth:`_defer_removal`).

        Not under cache=unsafe: QEMU drops fio's final flush there, so the image can still have
        dirty pages in the host page cache, which the runner's sync before the next run would write
        out; deleting the file now drops them unwritten (and costs little: delayed allocation gives
        such a file few extents). Not when the backing is short of room for the next image next to
        this one."""
        if cell.cache in CACHE and CACHE[CacheMode(cell.cache)].no_flush:
            return False
        try:
            st = os.statvfs(image.parent)
            # A workload on an image of its own (rand-write-4k-first's 16 GiB) can leave more
            # written than the plan's image_size: the room is counted from what this image holds, as
            # the next one will.
            written = os.stat(image).st_blocks * 512
        except OSError:
            return False
        return st.f_bavail * st.f_frsize >= DEFER_ROOM_IMAGES * max(
            self.plan.image_size_bytes, written
        )

    def _defer_removal(self, image: Path) -> None:
        """Rename the image out of the way of the next run's (same name) and leave its deletion to
        the next runs' start-ups.

        Deleting an image can take longer than anything else in a run: on a filesystem mounted with
        ``discard`` whose block frees are not deferred to a journal commit (this host's ext4 has no
        journal), unlink() discards every freed extent synchronously, and an image written by small
        O_DIRECT writes has thousands of extents (0.3–1 s for a 128 MiB region here). The next runs
        of this tier delete it in a thread while fio starts up (≥ ~0.2 s of fio's own start-up
        before it connects) and start their daemon only once that thread has stopped: fio's first
        request waits for the daemon, so no measured I/O overlaps a deletion. Between runs (another
        tier's runs included) the file only sits on the backing;
        :meth:`close` deletes what is left, and the leftovers ledger has it meanwhile.
        """
        self._removals += 1
        moved = image.with_name(f"{image.name}.removing-{self._removals}")
        register_temp_path(self.workdir, moved)
        os.rename(image, moved)
        forget(self.workdir, image)
        self._trash.add(moved)

    def _network_disk(
        self, req: RunRequest, stack: contextlib.ExitStack, size_bytes: int, meta: dict[str, object]
    ) -> NetworkDisk:
        """A fresh disk on the network backing's server for this run, given back when `stack`
        closes."""
        assert req.target.server is not None
        disk, disk_meta = stack.enter_context(
            network_disk(
                req.target.server,
                req.cell,
                size_bytes=size_bytes,
                name=disk_name("blk", req.workload.slug),
                workdir=self.workdir,
            )
        )
        meta.update(disk_meta)
        return disk

    def _spawn_fio(self, run_dir: Path, meta: dict[str, object]) -> subprocess.Popen:
        out_file = run_dir / "fio.json"
        # --output: the nbd engine prints "connected to NBD server" on stdout, which would corrupt
        # JSON there.
        argv = [
            self.fio,
            FIO_CLOCKSOURCE,
            "--output-format=json",
            f"--output={out_file}",
            str(run_dir / "job.fio"),
        ]
        meta["fio_argv"] = argv
        proc = children.spawn(
            argv,
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._live[proc.pid] = proc
        return proc

    def _start_client_daemon(
        self, req: RunRequest, disk: NetworkDisk, client_dir: Path
    ) -> tuple[subprocess.Popen, list[Path]]:
        """One client's daemon of a contention run (tiers/contention.py): the cell's graph on
        `disk`, exported on a listening socket in `client_dir`, as a one-client run starts it."""
        socket = client_dir / SOCKET_NAME
        register_temp_path(self.workdir, socket)  # the daemon never unlinks it
        listener = listening_socket(client_dir)
        try:
            argv = daemon_argv(
                self.qsd,
                disk_for(req.cell, disk, disk.size_bytes),
                listener.fileno(),
                req.wrapper or None,
            )
            with open(client_dir / DAEMON_LOG, "wb") as log:
                daemon = children.spawn(
                    argv,
                    cwd=client_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(listener.fileno(),),
                )
        finally:
            listener.close()
        self._live[daemon.pid] = daemon
        return daemon, [socket]

    def _run_clients(self, req: RunRequest) -> RunOutcome:
        """A run of several clients against the cell's shared network backing at once
        (tiers/contention.py)."""
        req.run_dir.mkdir(parents=True, exist_ok=True)
        job = self._job(req)
        image_bytes = req.shape.image_bytes or self.plan.image_size_bytes
        meta: dict[str, object] = {
            "tier": self.name,
            "qemu_version": self.qemu_version,
            "export": EXPORT_KIND,
            "substitutions": job.substitutions,
            "image_size_bytes": image_bytes,
        }
        run = ContentionRun(
            req,
            self.fio,
            job.text,
            self.workdir,
            image_bytes,
            start_daemon=lambda disk, where: self._start_client_daemon(req, disk, where),
            stop_child=lambda proc, grace: self._stop(proc, grace_s=grace, tree=True),
            meta=meta,
            remote_daemon_argv=lambda disk: remote_daemon_argv(
                disk_for(req.cell, disk, disk.size_bytes)
            ),
        )
        return run.run()

    def run(self, req: RunRequest) -> RunOutcome:
        """One run. Order (docs/blocklayer.md "Per-run overhead"): earlier runs' images are deleted
        in a thread; fio starts (its own start-up takes ≥ ~0.2 s before it connects); meanwhile the
        image is created, the deleting thread stopped and the daemon started on the socket fio
        connects to."""
        throttle = self._throttles.get((req.cell.backing, req.workload.name))
        # clients on other hosts: one is too
        if client_count(req.cell) > 1 or req.target.client_hosts:
            if throttle is not None:
                raise UserError(
                    "the calibration throttle is for one-client runs on this host only",
                    hint="unset IOMATRIX_CALIBRATION_THROTTLE for a plan with several clients",
                )
            return self._run_clients(req)
        t0 = time.monotonic()
        run_dir = req.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in (SOCKET_NAME, IOPS_LOG_FILE, "fio.json"):
            (run_dir / name).unlink(missing_ok=True)
        job = self._job(req)
        (run_dir / "job.fio").write_text(job.text)
        image_bytes = req.shape.image_bytes or self.plan.image_size_bytes
        meta: dict[str, object] = {
            "tier": self.name,
            "qemu_version": self.qemu_version,
            "export": EXPORT_KIND,
            "substitutions": job.substitutions,
            "image_size_bytes": image_bytes,
        }
        if throttle is not None:
            meta["calibration_throttle"] = throttle.meta()
        phases: dict[str, float] = {}
        socket = run_dir / SOCKET_NAME
        image: Path | None = None
        ours = False
        fio: subprocess.Popen | None = None
        daemon: subprocess.Popen | None = None
        listener: socketlib.socket | None = None
        log: IO[bytes] | None = None
        trash = self._trash
        trash.busy_s = 0.0
        outcome: RunOutcome | None = None
        network: NetworkDisk | None = None
        # A network disk is given back to its server after the daemon has stopped (the finally below
        # runs first).
        with children.SigtermGuard(), contextlib.ExitStack() as network_stack:
            try:
                trash.start()
                # The daemon never unlinks the socket (we bound it anyway): it is ours to remove.
                register_temp_path(self.workdir, socket)
                listener = listening_socket(run_dir)
                t_fio = time.monotonic()
                fio = self._spawn_fio(run_dir, meta)
                phases["setup_s"] = t_fio - t0
                try:
                    if req.target.kind == "network":
                        network = self._network_disk(req, network_stack, image_bytes, meta)
                    else:
                        image, ours = fresh_image(req, self.workdir, image_bytes, "iomatrix-blk")
                except UserError as err:
                    outcome = RunOutcome(
                        ok=False, job_text=job.text, error=err.one_line(), meta=meta
                    )
                t_img = time.monotonic()
                phases["image_s"] = t_img - t_fio
                # Earlier images are deleted until fio is about to connect; nothing is deleted once
                # the daemon runs.
                trash.wait(t_fio + TRASH_WINDOW_S)
                trash.stop()
                # A bounded backlog: beyond about two runs' worth of written data, delete down to it
                # now (the rest is deleted by close() at the end of the sweep).
                cap = min(self.plan.image_size_bytes, 2 * self.plan.size_bytes)
                if trash.files and trash.allocated_bytes() > cap:
                    trash.work(lambda: trash.allocated_bytes() <= cap)
                self._forget_gone()
                meta["deletion_work_s"] = round(trash.busy_s, 4)
                meta["deletion_backlog_files"] = len(trash.files)
                t_daemon = time.monotonic()
                phases["deletion_wait_s"] = t_daemon - t_img
                if outcome is None:
                    disk = disk_for(req.cell, network or image, image_bytes)
                    argv = daemon_argv(
                        self.qsd, disk, listener.fileno(), req.wrapper or None, throttle
                    )
                    meta["daemon_argv"] = argv
                    meta["export_writethrough"] = not write_cache(disk.cache)
                    log = open(run_dir / DAEMON_LOG, "wb")  # noqa: SIM115 - closed in finally
                    daemon = children.spawn(
                        argv,
                        cwd=run_dir,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        pass_fds=(listener.fileno(),),
                    )
                    self._live[daemon.pid] = daemon
                    # Only the daemon holds the socket now: if it exits (a graph it refuses), fio's
                    # connection is reset at once instead of waiting in our listen queue.
                    listener.close()
                    listener = None
                    phases["daemon_spawn_s"] = time.monotonic() - t_daemon
                    if req.on_process:
                        # The host sampler follows the processes doing the I/O on the host: QEMU
                        # serving it (the I/O path, whose CPU per I/O is the cost) and fio
                        # generating it (its CPU is the measured work, not another tenant's, but not
                        # the I/O path's cost either: role "load").
                        req.on_process(daemon.pid)
                    if req.on_load_process:
                        with contextlib.suppress(ProcessLookupError):  # fio may have failed already
                            req.on_load_process(fio.pid)
                    if network is not None and req.target.server is not None:
                        follow_server(req.target.server, req.on_server_process, meta)
                    outcome = self._wait_fio(
                        req=req,
                        job=job,
                        meta=meta,
                        phases=phases,
                        proc=fio,
                        t_fio=t_fio,
                        daemon=daemon,
                        run_dir=run_dir,
                    )
                    fio = None
            except BaseException:
                # Ctrl-C / SIGTERM: no fio or daemon left serving (or flushing) the image we are
                # about to delete.
                if fio is not None:
                    self._stop(fio, grace_s=0, tree=True)
                    fio = None
                if daemon is not None:
                    self._stop(daemon, grace_s=0)
                raise
            finally:
                if listener is not None:
                    listener.close()
                if fio is not None:  # the run failed before fio's end was waited for
                    self._stop(fio, grace_s=1.0, tree=True)
                trash.stop()  # an error before the stop above
                self._forget_gone()
                t_stop = time.monotonic()
                if daemon is not None:
                    self._stop(daemon, grace_s=STOP_GRACE_S)
                phases["daemon_stop_s"] = time.monotonic() - t_stop
                if log is not None:
                    log.close()
                socket.unlink(missing_ok=True)
                forget(self.workdir, socket)
                t_rm = time.monotonic()
                if ours and image is not None:
                    if outcome is not None and outcome.ok and self._can_defer(req.cell, image):
                        self._defer_removal(image)
                        meta["image_removal"] = "deferred: deleted during later runs' start-ups"
                    else:
                        remove_image(image)
                        forget(self.workdir, image)
                        meta["image_removal"] = "at the end of the run"
                phases["image_remove_s"] = time.monotonic() - t_rm
                phases["teardown_s"] = time.monotonic() - t_stop
        assert outcome is not None
        phases["wall_s"] = time.monotonic() - t0
        phases["overhead_s"] = max(0.0, phases["wall_s"] - phases.get("workload_s", 0.0))
        outcome.phases = phases
        if outcome.ok:
            shutil.rmtree(run_dir, ignore_errors=True)
        return outcome

    def _wait_fio(
        self,
        req: RunRequest,
        job: NbdJob,
        meta: dict[str, object],
        phases: dict[str, float],
        proc: subprocess.Popen,
        t_fio: float,
        daemon: subprocess.Popen,
        run_dir: Path,
    ) -> RunOutcome:
        out_file = run_dir / "fio.json"
        try:
            _, stderr = proc.communicate(
                timeout=max(1.0, req.timeout_s - (time.monotonic() - t_fio))
            )
        except subprocess.TimeoutExpired:
            self._stop(proc, grace_s=1.0, tree=True)
            return RunOutcome(
                ok=False,
                job_text=job.text,
                meta=meta,
                error=f"fio did not finish within {req.timeout_s:g} s; killed",
            )
        finally:
            children.release(proc)
            self._live.pop(proc.pid, None)
        phases["fio_s"] = time.monotonic() - t_fio
        raw = out_file.read_text() if out_file.exists() else ""
        if proc.returncode != 0:
            # A daemon that refused the graph exits at once, and fio then fails to connect or its
            # connection is reset: QEMU's message is the one that says why.
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.wait(timeout=1.0)
            if daemon.returncode is not None:
                said = (run_dir / DAEMON_LOG).read_text(errors="replace").strip()
                why = said.splitlines()[-1] if said else "no message"
                return RunOutcome(
                    ok=False,
                    job_text=job.text,
                    raw_output=raw,
                    console_tail=_tail(said),
                    meta=meta,
                    error=f"qemu-storage-daemon exited with status {daemon.returncode}: {why} "
                    f"(fio exited with status {proc.returncode})",
                )
            # names ENOSPC (NBD passes it through) with a fix
            why = fatal_message(stderr) or _tail(stderr, 3)
            return RunOutcome(
                ok=False,
                job_text=job.text,
                raw_output=raw,
                console_tail=_tail(stderr),
                meta=meta,
                error=f"fio exited with status {proc.returncode}: {why}",
            )
        try:
            # fio can exit 0 with a report of zeros (killed worker, failed allocation): judged as on
            # bare metal.
            metrics = checked_metrics(
                extract_json(raw), stderr + raw[: raw.find("{")], req.workload.primary_metric
            )
        except FioOutputError as err:
            return RunOutcome(
                ok=False,
                job_text=job.text,
                raw_output=raw,
                console_tail=_tail(stderr),
                meta=meta,
                error=str(err),
            )
        phases["workload_s"] = metrics.get("job.runtime_s", 0.0)
        # fio's start-up (or the wait for the image and the daemon, if longer), final flush and
        # exit.
        phases["fio_overhead_s"] = max(0.0, phases["fio_s"] - phases["workload_s"])
        log_file = run_dir / IOPS_LOG_FILE
        # The raw per-interval series only: steady state is computed from it at report time.
        series = parse_iops_log(log_file.read_text()) if log_file.exists() else []
        if series:
            meta["iops_series"] = series
        return RunOutcome(
            ok=True,
            metrics=metrics,
            job_text=job.text,
            raw_output=raw,
            console_tail=_tail(stderr),
            meta=meta,
        )
