"""Block-layer tier: QEMU's own storage stack at native speed, without a guest.

Per run: a fresh image on the cell's backing (the guest tier's creation code), ``qemu-storage-daemon`` with
the cell's ``--blockdev`` graph (the string the guest tier passes to ``-blockdev``, from
:mod:`iomatrix.qemu_block`), that node exported over NBD on a private UNIX socket in the run's directory,
fio's ``nbd`` engine (libnbd) running the workload against the export, then the daemon stopped and the image
deleted. Format, preallocation, cache mode, aio and host backing are decided by this code in QEMU; what is
missing compared with a guest is the guest kernel, the emulated bus and device, and the guest page cache.

How a cache mode maps (qemu/qemu ``block/export/export.c`` ``blk_exp_add``: ``blk_set_enable_write_cache(blk,
!export->writethrough)``; a guest device's ``write-cache=`` makes the same call in ``hw/block/block.c``
``blkconf_apply_backend_options``):

============  ============  ==============  ======================  =============================
cache         cache.direct  cache.no-flush  export writethrough     guest equivalent
============  ============  ==============  ======================  =============================
writeback     off           off             off                     -device …,write-cache=on
none          on            off             off                     -device …,write-cache=on
writethrough  off           off             on                      -device …,write-cache=off
directsync    on            off             on                      -device …,write-cache=off
unsafe        off           on              off                     -device …,write-cache=on
============  ============  ==============  ======================  =============================

With the write cache off, QEMU's BlockBackend marks every write FUA (``block/block-backend.c``) and the block
layer emulates FUA by a flush after the write (``block/io.c``): the same flush-after-every-write a guest gets
from a ``write-cache=off`` device. A workload's own flushes (``fdatasync=N``, sent as fio ``fsync=N`` because
the nbd engine refuses fdatasync, and the final ``end_fsync``) arrive as ``NBD_CMD_FLUSH`` →
``blk_co_flush``: honoured, or dropped by ``cache.no-flush=on`` (unsafe), exactly as a guest's flush is. One
difference remains: a guest kernel sends no flush to a device without a write cache, while fio here still
sends its NBD flushes under writethrough/directsync (QEMU then flushes a file with nothing dirty).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

from iomatrix import children, domain
from iomatrix import workloads as wl
from iomatrix.backing.leftovers import forget, register_temp_path
from iomatrix.domain import NA, NULL_BACKING, Aio, CacheMode
from iomatrix.errors import UserError
from iomatrix.fio.jobs import IOPS_LOG_FILE, NbdJob, nbd_job, nbd_uri
from iomatrix.fio.parse import FioOutputError, checked_metrics, extract_json, fatal_message, parse_iops_log
from iomatrix.guest.images import remove_image
from iomatrix.hostcmd import require, version_of
from iomatrix.matrix import Cell
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import NULL_FORMAT, DiskSpec, blockdev_spec, onoff, qemu_opt, write_cache
from iomatrix.textfile import last_lines
from iomatrix.tiers import register
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, Tier, fresh_image

NODE = "d0"
EXPORT_ID = "iomx-export"
EXPORT_NAME = "iomx"
# Relative to the run directory (the daemon's and fio's working directory): a UNIX socket path is limited
# to 108 bytes, and the working directory can be deeper than that.
SOCKET_NAME = "nbd.sock"
# qemu-storage-daemon writes its pid file after the exports and the NBD server exist and before it accepts
# connections (documented order, qemu-storage-daemon(1)): the file appearing means "ready".
PID_FILE = "daemon.pid"
DAEMON_LOG = "daemon.log"
START_TIMEOUT_S = 20.0  # generous: a loaded 2-core host; the daemon is normally ready in ~50 ms
STOP_GRACE_S = 5.0
EXPORT_KIND = "nbd over a private UNIX socket (fio ioengine=nbd, libnbd)"


def _tail(text: str, lines: int = 40) -> str:
    return last_lines(text, lines)


def export_spec(cache: CacheMode | str, node: str = NODE, name: str = EXPORT_NAME) -> str:
    """``--export`` value: the node exported writable over NBD; the write-cache half of the cache mode."""
    writethrough = not write_cache(cache)
    return f"type=nbd,id={EXPORT_ID},node-name={node},name={name},writable=on,writethrough={onoff(writethrough)}"


def daemon_argv(qsd: str, disk: DiskSpec, socket: str | Path, pid_file: str | Path,
                wrapper: list[str] | None = None) -> list[str]:
    """The qemu-storage-daemon command line serving `disk` (the guest's graph) on `socket`."""
    return [*(wrapper or []), qsd,
            "--blockdev", blockdev_spec(disk, NODE),
            "--nbd-server", f"addr.type=unix,addr.path={qemu_opt(socket)}",
            "--export", export_spec(disk.cache),
            "--pidfile", str(pid_file)]


def disk_for(cell: Cell, image: Path | None, null_size_bytes: int) -> DiskSpec:
    if cell.is_null_ceiling:
        # No format, host cache or backing: what is left is QEMU's block layer and the NBD export.
        return DiskSpec(target=None, format=NULL_FORMAT, cache=CacheMode.WRITEBACK, aio=Aio.THREADS,
                        null_size_bytes=null_size_bytes)
    assert image is not None
    return DiskSpec(target=str(image), format=cell.format, cache=CacheMode(cell.cache), aio=Aio(cell.aio))


def fio_has_nbd(fio: str) -> bool:
    try:
        out = subprocess.run([fio, "--enghelp"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "nbd" in {line.strip() for line in out.stdout.splitlines()}


@register
class BlockLayerTier(Tier):
    name = "blocklayer"
    summary = "fio over NBD to qemu-storage-daemon running the cell's block graph: QEMU's storage stack, no guest"
    axes = ("tier", "format", "preallocation", "cache", "aio", "backing", "modifier")
    # Measured on the development host (docs/benchmarks.md): image + daemon start + teardown.
    overhead_s = 0.7
    order = 10
    uses_images = True

    @classmethod
    def extra_cells(cls, plan: Plan) -> list[Cell]:
        if not plan.null_ceiling:
            return []
        return [Cell(cls.name, NULL_FORMAT, NA, NA, NA, NA, NULL_BACKING, domain.Modifier.NONE)]

    @classmethod
    def workload_prune_reason(cls, cell: Cell, workload: wl.Workload) -> str | None:
        if workload.guest_only:
            return (f"workload {workload.name} runs on a guest filesystem; the block-layer tier has no guest "
                    "(and no filesystem): guest tier only")
        return super().workload_prune_reason(cell, workload)

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        super().__init__(plan, opts)
        self.workdir = opts.workdir
        self.qsd = ""
        self.fio = ""
        self.qemu_version = ""
        self._live: dict[int, subprocess.Popen] = {}

    def open(self) -> None:
        self.qsd = require("qemu-storage-daemon")
        self.fio = require("fio")
        if not fio_has_nbd(self.fio):
            raise UserError(f"{self.fio} has no nbd ioengine ('fio --enghelp' does not list it)",
                            hint="install Debian's fio (built with libnbd): apt-get install fio")
        self.qemu_version = version_of([self.qsd, "--version"]) or "unknown"

    def accel(self) -> str:
        return "none (QEMU block layer, no guest)"

    def describe(self) -> str:
        return f"blocklayer tier: {self.qemu_version}, export {EXPORT_KIND}"

    def close(self) -> None:
        for proc in list(self._live.values()):
            children.kill(proc)
        self._live.clear()

    # -- one run ------------------------------------------------------------
    def _job(self, req: RunRequest) -> NbdJob:
        custom = req.workload.custom_text  # validated at plan load; never re-read from disk
        return nbd_job(req.workload, uri=nbd_uri(SOCKET_NAME, EXPORT_NAME), shape=req.shape, custom_text=custom)

    def _wait_ready(self, proc: subprocess.Popen, run_dir: Path, timeout_s: float) -> str | None:
        """None once the daemon serves the export; else why not (it exited, or never got ready)."""
        why = children.wait_listening(proc, run_dir / PID_FILE, run_dir / SOCKET_NAME, timeout_s)
        return None if why is None else f"qemu-storage-daemon {why}"

    def _stop(self, proc: subprocess.Popen, *, grace_s: float) -> None:
        children.kill(proc, grace_s=grace_s)
        self._live.pop(proc.pid, None)

    def run(self, req: RunRequest) -> RunOutcome:
        t0 = time.monotonic()
        run_dir = req.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in (SOCKET_NAME, PID_FILE, IOPS_LOG_FILE, "fio.json"):
            (run_dir / name).unlink(missing_ok=True)
        job = self._job(req)
        (run_dir / "job.fio").write_text(job.text)
        meta: dict[str, object] = {"tier": self.name, "qemu_version": self.qemu_version, "export": EXPORT_KIND,
                                   "substitutions": job.substitutions}
        phases: dict[str, float] = {}
        socket = run_dir / SOCKET_NAME
        image: Path | None = None
        ours = False
        proc: subprocess.Popen | None = None
        log: IO[bytes] | None = None
        with children.SigtermGuard():
            try:
                try:
                    image, ours = fresh_image(req, self.workdir, self.plan.image_size_bytes, "iomatrix-blk")
                except UserError as err:
                    return RunOutcome(ok=False, job_text=job.text, error=err.one_line(), meta=meta,
                                      phases={"wall_s": time.monotonic() - t0})
                disk = disk_for(req.cell, image, self.plan.image_size_bytes)
                argv = daemon_argv(self.qsd, disk, SOCKET_NAME, PID_FILE, req.wrapper or None)
                meta["daemon_argv"] = argv
                meta["export_writethrough"] = not write_cache(disk.cache)
                t_img = time.monotonic()
                phases["image_s"] = t_img - t0
                # The daemon unlinks neither its socket nor (after SIGKILL) its pid file: both are ours.
                register_temp_path(self.workdir, socket)
                log = open(run_dir / DAEMON_LOG, "wb")  # noqa: SIM115 - closed in finally
                proc = children.spawn(argv, cwd=run_dir, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT)
                self._live[proc.pid] = proc
                not_ready = self._wait_ready(proc, run_dir, START_TIMEOUT_S)
                phases["daemon_start_s"] = time.monotonic() - t_img
                if not_ready:
                    self._stop(proc, grace_s=0)
                    log.flush()
                    said = (run_dir / DAEMON_LOG).read_text(errors="replace").strip()
                    why = said.splitlines()[-1] if said else "no message"
                    phases["wall_s"] = time.monotonic() - t0
                    return RunOutcome(ok=False, job_text=job.text, console_tail=_tail(said),
                                      error=f"{not_ready}: {why}", meta=meta, phases=phases)
                if req.on_process:
                    # The host sampler follows the process doing the I/O on the host: QEMU.
                    req.on_process(proc.pid)
                result = self._fio(req, job, meta, phases, proc)
            except BaseException:
                # Ctrl-C / SIGTERM: no daemon left serving (or flushing) the image we are about to delete.
                if proc is not None:
                    self._stop(proc, grace_s=0)
                raise
            finally:
                t_stop = time.monotonic()
                if proc is not None:
                    self._stop(proc, grace_s=STOP_GRACE_S)
                phases["daemon_stop_s"] = time.monotonic() - t_stop
                if log is not None:
                    log.close()
                socket.unlink(missing_ok=True)
                (run_dir / PID_FILE).unlink(missing_ok=True)
                forget(self.workdir, socket)
                if ours and image is not None:
                    remove_image(image)
                    forget(self.workdir, image)
                phases["teardown_s"] = time.monotonic() - t_stop
        phases["wall_s"] = time.monotonic() - t0
        workload_s = phases.get("workload_s", 0.0)
        phases["overhead_s"] = max(0.0, phases["wall_s"] - workload_s)
        result.phases = phases
        if result.ok:
            shutil.rmtree(run_dir, ignore_errors=True)
        return result

    def _fio(self, req: RunRequest, job: NbdJob, meta: dict[str, object], phases: dict[str, float],
             daemon: subprocess.Popen) -> RunOutcome:
        run_dir = req.run_dir
        out_file = run_dir / "fio.json"
        # --output: the nbd engine prints "connected to NBD server" on stdout, which would corrupt JSON there.
        argv = [self.fio, "--output-format=json", f"--output={out_file}", str(run_dir / "job.fio")]
        meta["fio_argv"] = argv
        t0 = time.monotonic()
        proc = children.spawn(argv, cwd=run_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = proc.communicate(timeout=req.timeout_s)
        except subprocess.TimeoutExpired:
            children.kill(proc, tree=True, grace_s=1.0)
            proc.communicate()
            return RunOutcome(ok=False, job_text=job.text, meta=meta,
                              error=f"fio did not finish within {req.timeout_s:g} s; killed")
        except BaseException:
            children.kill(proc, tree=True)
            raise
        finally:
            children.release(proc)
        phases["fio_s"] = time.monotonic() - t0
        raw = out_file.read_text() if out_file.exists() else ""
        if proc.returncode != 0:
            why = fatal_message(stderr) or _tail(stderr, 3)  # names ENOSPC (NBD passes it through) with a fix
            if daemon.poll() is not None:
                why += f" (qemu-storage-daemon exited with status {daemon.returncode}: " \
                       f"{_tail((run_dir / DAEMON_LOG).read_text(errors='replace'), 1)})"
            return RunOutcome(ok=False, job_text=job.text, raw_output=raw, console_tail=_tail(stderr), meta=meta,
                              error=f"fio exited with status {proc.returncode}: {why}")
        try:
            # fio can exit 0 with a report of zeros (killed worker, failed allocation): judged as on bare metal.
            metrics = checked_metrics(extract_json(raw), stderr + raw[:raw.find("{")], req.workload.primary_metric)
        except FioOutputError as err:
            return RunOutcome(ok=False, job_text=job.text, raw_output=raw, console_tail=_tail(stderr), meta=meta,
                              error=str(err))
        phases["workload_s"] = metrics.get("job.runtime_s", 0.0)
        log_file = run_dir / IOPS_LOG_FILE
        # The raw per-interval series only: steady state is computed from it at report time.
        series = parse_iops_log(log_file.read_text()) if log_file.exists() else []
        if series:
            meta["iops_series"] = series
        return RunOutcome(ok=True, metrics=metrics, job_text=job.text, raw_output=raw, console_tail=_tail(stderr),
                          meta=meta)
