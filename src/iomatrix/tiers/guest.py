"""Guest tier: runs boot a fresh QEMU guest and run the workload inside it (fio on the raw virtual
disk, or the filesystem jobs), each run on its own freshly created image.

Several runs of one cell share a boot (`run_batch`): each gets its own fresh image attached as its
own disk, and they run one after another in the guest, so the boot is paid once per cell and round
instead of once per run. So do the runs in a real image (`[guest] image`: tiers/real_guest.py).
The virtio buses boot the microvm machine (virtio-mmio), the others pc.

On a network backing (iSCSI, NFS: docs/shared-storage.md) each run's disk is made by the backing's
server instead of an image file (`tiers.network_disks`), QEMU opens it with its own client (the
`-blockdev` the block-layer tier gives qemu-storage-daemon), the server's processes are counted in
the CPU per I/O, and the disks are given back once QEMU has exited."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from iomatrix import children
from iomatrix.backing.leftovers import forget
from iomatrix.backing.network import NetworkDisk
from iomatrix.errors import UserError
from iomatrix.fio.jobs import guest_job
from iomatrix.fio.parse import FioOutputError, checked_metrics, parse_iops_log
from iomatrix.guest.accel import AccelChoice, choose_accel
from iomatrix.guest.artifacts import GuestArtifacts, ensure_artifacts
from iomatrix.guest.cache import default_cache_dir
from iomatrix.guest.cmdline import machine_for
from iomatrix.guest.job import BatchRun, GuestJob
from iomatrix.guest.process import BatchInterrupted, kill_all_guests, run_guest, run_guest_batch
from iomatrix.guest.real_image import RealImage, check_image_setting, resolve_image
from iomatrix.guest.static_fio import static_fio
from iomatrix.guest.stream import GuestOutcome
from iomatrix.guest.tarball import ensure_tarball
from iomatrix.images import remove_image
from iomatrix.matrix import Cell
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec, out_of_space
from iomatrix.tiers.base import (
    RunOptions,
    RunOutcome,
    RunRequest,
    RunsInterrupted,
    Tier,
    fresh_image,
)
from iomatrix.tiers.declared.guest import Guest
from iomatrix.tiers.network_disks import disk_name, follow_server, network_disk
from iomatrix.tiers.real_guest import RealRunContext, run_real, run_real_batch


class GuestTier(Guest, Tier):
    """Runs the guest tier (declared in iomatrix.tiers.declared.guest)."""

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        super().__init__(plan, opts)
        self.workdir = opts.workdir
        self._tarball: Path | None = None
        # The last boot's images, being removed while the next boot starts (see _one_boot).
        self._cleanup: threading.Thread | None = None
        self._cleanup_error: BaseException | None = None
        self._last_remove_s: float | None = None
        # `[guest] image`: runs boot that image (tiers/real_guest.py)
        self.real: RealRunContext | None = None

    def open(self) -> None:
        log = self.opts.log
        # a user's image that cannot serve is refused before the guest's build and the KVM probe
        check_image_setting(self.plan.setting("guest_image"))
        self.artifacts: GuestArtifacts = ensure_artifacts(kernel=self.opts.kernel, log=log)
        force = self.opts.accel
        if log and force == "auto":
            log(
                "choosing the guest accelerator (a KVM probe boots one guest, ≤ 10 s, "
                "cached afterwards)"
            )
        self.choice: AccelChoice = choose_accel(
            self.artifacts, force=None if force == "auto" else force
        )
        image = self.plan.setting("guest_image")
        if image is not None:
            if log:
                log(f"guest image {image}: its sha256 (the file is only read) and how it boots")
            real: RealImage = resolve_image(image, log)
            self.real = RealRunContext(
                real,
                self.choice.accel,
                self.workdir,
                max(self.plan.guest_memory_mb, 512),
                filesystem=self.plan.setting("guest_filesystem"),
                fs_workload_fs=self.plan.guest_fs,
                log=log,
            )
            # the NoCloud seed every boot reads, and iomatrix's static fio for an image without one
            # (no network)
            self.real.attach_media(
                static_fio(default_cache_dir(), log or (lambda _: None), build=False)[0]
            )

    def accel(self) -> str:
        return self.choice.accel

    def describe(self) -> str:
        if self.real is not None:
            img = self.real.image
            return (
                f"guest tier in a real image: {img.boot.path} (sha256 "
                f"{img.sha256[:16]}…, {img.source}"
                f"{', ' + img.distribution if img.distribution else ''}); accelerator "
                f"{self.choice.accel} "
                f"({self.choice.reason})"
                + (
                    f"; fio on a file of an {self.real.filesystem} made in the guest on the disk "
                    "under test"
                    if self.real.filesystem not in (None, "none")
                    else ""
                )
            )
        return (
            f"guest tier: accelerator {self.choice.accel} ({self.choice.reason}); kernel "
            f"{self.artifacts.kernel_version}, {self.artifacts.fio_version} "
            f"({self.artifacts.fio_source})"
        )

    def close(self) -> None:
        kill_all_guests()
        if self.real is not None:
            self.real.remove_media()
        self.finish_background_work()

    def finish_background_work(self) -> None:
        """Wait until the last boot's images are removed (re-raising what went wrong there)."""
        if self._cleanup is not None:
            self._cleanup.join()
            self._cleanup = None
        if self._cleanup_error is not None:
            err, self._cleanup_error = self._cleanup_error, None
            raise err

    def _tarball_path(self) -> Path:
        if self._tarball is None:
            self._tarball = ensure_tarball()
        return self._tarball

    def _job(self, req: RunRequest) -> GuestJob:
        w = req.workload
        if w.kind in ("fs-read", "fs-write"):
            return GuestJob(kind=w.kind, fs=self.plan.guest_fs, tarball=self._tarball_path())
        custom = w.custom_text  # validated at plan load; never re-read from disk
        return GuestJob(kind="fio", fio_job=guest_job(w, shape=req.shape, custom_text=custom))

    def run(self, req: RunRequest) -> RunOutcome:
        self.finish_background_work()  # a boot's image removal must not overlap this run
        if self.real is not None:
            result = run_real(req, self.real, self._image_bytes(req), self._network_disks)
            result.meta["accel_reason"] = self.choice.reason
            if result.ok:
                # a failed run keeps its console.log and argv
                shutil.rmtree(req.run_dir, ignore_errors=True)
            return result
        cell = req.cell
        job = self._job(req)
        image_bytes = self._image_bytes(req)
        machine = machine_for(cell.bus, cell.iothread)
        # A network disk is given back to its server when this stack closes: after run_guest has
        # returned, which it does only once QEMU has exited (killed on every way out).
        with children.SigtermGuard(), contextlib.ExitStack() as network_stack:
            image: Path | NetworkDisk | None
            net_meta: dict[str, Any] = {}
            ours = False
            if req.target.kind == "network":
                try:
                    ((image, net_meta),) = self._network_disks([req], network_stack)
                except UserError as err:
                    return RunOutcome(ok=False, error=err.one_line(), meta={"machine": machine})
            else:
                image, ours = fresh_image(req, self.workdir, image_bytes, "iomatrix")
            try:
                disk = self._disk(cell, image, image_bytes)
                out = run_guest(
                    self.artifacts,
                    self.choice.accel,
                    disk,
                    job,
                    req.run_dir,
                    req.timeout_s,
                    on_start=req.on_process,
                    wrapper=req.wrapper or None,
                    memory_mb=self.plan.guest_memory_mb,
                    machine=machine,
                )
            finally:
                # before the image is removed, which frees the room again
                full = out_of_space(image)
                if ours and isinstance(image, Path):
                    remove_image(image)
                    forget(self.workdir, image)
        result = self._outcome(out, job, req.workload.primary_metric)
        if not result.ok and full:
            result.error = f"{result.error} — {full}"
        result.meta["machine"] = machine
        result.meta.update(net_meta)
        if result.ok:
            shutil.rmtree(req.run_dir, ignore_errors=True)
        return result

    def run_batch(
        self, reqs: list[RunRequest], host_ready: Callable[[], None] | None = None
    ) -> list[RunOutcome]:
        """One boot for several runs of one cell (its own fresh image and serial each). Runs that
        never started because the guest died or hung earlier are retried in a new boot; the run that
        hung fails. `host_ready` (sync + drop caches) and the removal of the previous boot's images
        run while this boot starts, behind a gate the guest waits at before its first run (in a real
        image: once its agent answers, before its first run: tiers/real_guest.py)."""
        if len(reqs) <= 1 or any(r.target.kind == "device" for r in reqs):
            self.finish_background_work()
            if host_ready is not None:
                host_ready()
            return [self.run(r) for r in reqs]  # a block device holds one fresh image at a time
        # a real image's boot (tiers/real_guest.py) or the built-in guest's
        boot_once = self._one_real_boot if self.real is not None else self._one_boot
        results: list[RunOutcome | None] = [None] * len(reqs)
        pending = list(range(len(reqs)))
        while pending:
            try:
                done = boot_once([reqs[i] for i in pending], host_ready)
            # with this boot's finished runs: add the earlier boots' ones
            except RunsInterrupted as intr:
                for i, out in zip(pending, intr.outcomes, strict=True):
                    results[i] = out
                raise RunsInterrupted(results) from intr
            # before this boot started: the earlier boots' runs still count
            except KeyboardInterrupt as intr:
                if any(r is not None for r in results):
                    raise RunsInterrupted(results) from intr
                raise
            host_ready = None  # once per batch, as before: a retry boot only waits for the removal
            still: list[int] = []
            for i, out in zip(pending, done, strict=True):
                if out is None:
                    still.append(i)
                else:
                    results[i] = out
            if len(still) == len(pending):  # the boot reached no run: no point in booting again
                for i in still:
                    results[i] = RunOutcome(
                        ok=False,
                        error="guest died before this run started",
                        meta={"machine": machine_for(reqs[i].cell.bus, reqs[i].cell.iothread)},
                    )
                break
            pending = still
        return [r for r in results if r is not None]

    def _one_real_boot(
        self, reqs: list[RunRequest], host_ready: Callable[[], None] | None = None
    ) -> list[RunOutcome | None]:
        """One boot of the real image for several runs of one cell (`run_real_batch`); None for a
        run that did not start (the boot was lost before it)."""
        assert self.real is not None
        self.finish_background_work()
        outs = run_real_batch(
            reqs, self.real, self._image_bytes, host_ready, network_disks=self._network_disks
        )
        for out in outs:
            if out is not None:
                out.meta["accel_reason"] = self.choice.reason
        return outs

    def _one_boot(
        self, reqs: list[RunRequest], host_ready: Callable[[], None] | None = None
    ) -> list[RunOutcome | None]:
        cell = reqs[0].cell
        machine = machine_for(cell.bus, cell.iothread)
        jobs = [self._job(r) for r in reqs]
        boot_id = uuid.uuid4().hex[:12]
        run_dir = reqs[0].run_dir.parent / f"boot-{boot_id}"

        def make(i: int) -> tuple[Path | None, bool]:
            return fresh_image(
                reqs[i], self.workdir, self._image_bytes(reqs[i]), f"iomatrix-{boot_id}-{i}"
            )

        previous = self._cleanup
        self._cleanup = None
        prev_remove_s: list[float | None] = [None]

        def ready() -> None:
            # Behind the guest's gate: the previous boot's images gone (unlinking waits for the
            # host's write-back of their pages, seconds after a cache=writeback run), then sync +
            # drop caches.
            if previous is not None:
                previous.join()
                prev_remove_s[0] = self._last_remove_s
                if self._cleanup_error is not None:
                    err, self._cleanup_error = self._cleanup_error, None
                    raise err
            if host_ready is not None:
                host_ready()

        # Network disks are given back when this stack closes, in the finally below: after
        # run_guest_batch has returned or raised, which it does only once QEMU has exited (it kills
        # QEMU on every way out).
        network_stack = contextlib.ExitStack()
        net_metas: list[dict[str, Any]] = [{} for _ in reqs]
        t_create = time.monotonic()
        with children.SigtermGuard():
            try:
                if reqs[0].target.kind == "network":
                    made = self._network_disks(reqs, network_stack)
                    images: list[tuple[Path | NetworkDisk | None, bool]] = [
                        (disk, False) for disk, _ in made
                    ]
                    net_metas = [meta for _, meta in made]
                else:
                    # Each run's image is created fresh, all of them at once (qemu-img is mostly
                    # waiting on the disk).
                    with ThreadPoolExecutor(max_workers=min(4, len(reqs))) as pool:
                        images = list(pool.map(make, range(len(reqs))))
            # the server could not make a disk: these runs fail, the sweep goes on
            except UserError as err:
                network_stack.close()
                ready()
                return [
                    RunOutcome(ok=False, error=err.one_line(), meta={"machine": machine})
                    for _ in reqs
                ]
            except BaseException:
                network_stack.close()
                raise
            create_s = time.monotonic() - t_create

            t0 = time.time()
            interrupted: BatchInterrupted | None = None
            try:
                runs = [
                    BatchRun(self._disk(cell, img, self._image_bytes(req)), job)
                    for (img, _), job, req in zip(images, jobs, reqs, strict=True)
                ]
                first = reqs[0]
                try:
                    batch = run_guest_batch(
                        self.artifacts,
                        self.choice.accel,
                        runs,
                        run_dir,
                        first.timeout_s,
                        on_start=first.on_process,
                        wrapper=first.wrapper or None,
                        memory_mb=self.plan.guest_memory_mb,
                        machine=machine,
                        host_ready=ready
                        if previous is not None or host_ready is not None
                        else None,
                    )
                # Ctrl-C: QEMU is gone; keep the runs that had finished
                except BatchInterrupted as intr:
                    batch, interrupted = intr.batch, intr
            finally:
                if previous is not None:
                    previous.join()  # normally done behind the gate already
                # Before the images are removed, which frees the room again.
                full = next((f for f in (out_of_space(img) for img, _ in images) if f), None)
                # A server's disks are given back here, not in the background: the next boot asks
                # the same server for its disks meanwhile, and a server is driven from one thread.
                network_stack.close()
                self._remove_in_background(
                    [img for img, ours in images if ours and isinstance(img, Path)]
                )
        outs: list[RunOutcome | None] = []
        clock = t0
        for pos, (out, job) in enumerate(zip(batch.runs, jobs, strict=True)):
            if out is None:
                outs.append(None)
                continue
            result = self._outcome(out, job, reqs[pos].workload.primary_metric)
            if not result.ok and full:
                result.error = f"{result.error} — {full}"
            result.boot_id, result.boot_position = boot_id, pos
            result.meta.update(net_metas[pos])
            result.meta.update(
                {
                    "machine": machine,
                    "boot_runs": len(reqs),
                    "boot_phases": batch.boot_phases,
                    # Host-side time around the boot (not in any run's wall): creating the
                    # images before it, removing them after it.
                    "boot_host_s": {
                        "images_create_s": round(create_s, 3),
                        "previous_images_remove_s": prev_remove_s[0],
                    },
                }
            )
            result.started_at = clock
            clock += out.phases.get("wall_s", 0.0)
            result.finished_at = clock
            outs.append(result)
        if interrupted is not None:
            raise RunsInterrupted(outs) from interrupted
        if all(o is not None and o.ok for o in outs) and batch.error is None:
            shutil.rmtree(run_dir, ignore_errors=True)
        return outs

    def _remove_in_background(self, images: list[Path]) -> None:
        """Remove a boot's images in a thread: the next boot waits for it behind its gate (`ready`
        in _one_boot), any other run in `finish_background_work`."""
        self.finish_background_work()  # at most one removal in flight

        def work() -> None:
            t = time.monotonic()
            try:
                self._remove_images(images)
            except BaseException as err:
                self._cleanup_error = err
            self._last_remove_s = round(time.monotonic() - t, 3)

        self._cleanup = threading.Thread(target=work, name="iomatrix-image-removal")
        self._cleanup.start()

    def _remove_images(self, images: list[Path]) -> None:
        """Remove a boot's images, all at once: unlinking a file whose pages the host is still
        writing back waits for that write-back (seconds after a cache=writeback run), and the waits
        of several images overlap instead of adding up. All are gone before the next boot starts, so
        their write-back never meets a measured run."""

        def one(img: Path) -> None:
            remove_image(img)
            forget(self.workdir, img)

        if len(images) <= 1:
            for img in images:
                one(img)
            return
        with ThreadPoolExecutor(max_workers=min(8, len(images))) as pool:
            list(pool.map(one, images))

    def _network_disks(
        self, reqs: list[RunRequest], stack: contextlib.ExitStack
    ) -> list[tuple[NetworkDisk, dict[str, Any]]]:
        """A fresh disk on the network backing's server for each run of a boot, made as its cell
        says, one after another (a server is driven from one thread), each given back when `stack`
        closes: (the disk as QEMU reaches it, the meta to record with its run). The server's
        processes are followed once per boot (the host sampler is the boot's), and every run records
        which were counted."""
        made: list[tuple[NetworkDisk, dict[str, Any]]] = []
        for i, req in enumerate(reqs):
            server = req.target.server
            assert server is not None
            disk, meta = stack.enter_context(
                network_disk(
                    server,
                    req.cell,
                    size_bytes=self._image_bytes(req),
                    name=disk_name("vm", req.workload.slug),
                    workdir=self.workdir,
                )
            )
            follow_server(server, req.on_server_process if i == 0 else None, meta)
            made.append((disk, meta))
        return made

    def _image_bytes(self, req: RunRequest) -> int:
        return req.shape.image_bytes or self.plan.image_size_bytes

    def _disk(self, cell: Cell, image: Path | NetworkDisk | None, image_bytes: int) -> DiskSpec:
        return DiskSpec.for_cell(cell, image, image_bytes)

    def _outcome(self, out: GuestOutcome, job: GuestJob, primary_metric: str) -> RunOutcome:
        meta = {
            "qemu_argv": out.qemu_argv,
            "guest_disk": out.disk_info,
            "accel_reason": self.choice.reason,
            "guest_artifacts": self.artifacts.as_metadata(),
        }
        job_text = job.fio_job if job.kind == "fio" else f"{job.kind} on {job.fs}"
        raw = "" if out.fio_json is None else json.dumps(out.fio_json)
        if not out.ok:
            return RunOutcome(
                ok=False,
                phases=out.phases,
                job_text=job_text,
                raw_output=raw,
                console_tail=out.console_tail,
                error=out.error,
                meta=meta,
            )
        metrics: dict[str, float] = {}
        try:
            if out.fio_json is not None:
                # As on bare metal: fio can exit 0 with a report of zeros (killed worker, failed
                # allocation); a run counts only with every job error-free and its primary metric
                # measured.
                metrics.update(checked_metrics(out.fio_json, "", primary_metric))
        except FioOutputError as err:
            return RunOutcome(
                ok=False,
                phases=out.phases,
                job_text=job_text,
                raw_output=raw,
                console_tail=out.console_tail,
                error=f"guest fio: {err}",
                meta=meta,
            )
        series = parse_iops_log(out.iops_log) if out.iops_log else []
        if series:
            meta["iops_series"] = series
        if out.fs_result:
            for k, v in out.fs_result.items():
                if isinstance(v, int | float):
                    metrics[f"fs.{k}"] = float(v)
        if "workload_s" in out.phases:
            metrics["workload.seconds"] = out.phases["workload_s"]
        for k, v in out.phases.items():
            metrics[f"phase.{k}"] = float(v)
        return RunOutcome(
            ok=True,
            metrics=metrics,
            phases=out.phases,
            job_text=job_text,
            raw_output=raw,
            console_tail=out.console_tail,
            meta=meta,
        )
