"""Guest tier: every run boots a fresh QEMU guest on a fresh image and runs the
workload inside it (fio on the raw virtual disk, or seed 001's filesystem jobs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from iomatrix import domain
from iomatrix import workloads as wl
from iomatrix.backing.leftovers import forget
from iomatrix.domain import NA, NULL_BACKING, Aio, Bus, CacheMode
from iomatrix.fio.jobs import guest_job
from iomatrix.fio.parse import FioOutputError, parse_iops_log, report_metrics
from iomatrix.guest.accel import AccelChoice, choose_accel
from iomatrix.guest.artifacts import GuestArtifacts, ensure_artifacts
from iomatrix.guest.images import remove_image
from iomatrix.guest.qemu import GuestJob, GuestOutcome, kill_all_guests, run_guest
from iomatrix.guest.tarball import ensure_tarball
from iomatrix.matrix import Cell
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import NULL_FORMAT, DiskSpec, out_of_space
from iomatrix.tiers import register
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, Tier, fresh_image


@register
class GuestTier(Tier):
    name = "guest"
    summary = "fio inside a freshly booted QEMU guest on a fresh image: the whole virtual I/O path"
    axes = ("tier", "format", "preallocation", "cache", "aio", "bus", "backing", "modifier")
    overhead_s = 4.5  # guest boot under TCG
    order = 20
    runs_fs_workloads = True
    uses_images = True

    @classmethod
    def extra_cells(cls, plan: Plan) -> list[Cell]:
        # One null-co ceiling per bus: no format, preallocation, host cache or backing; what is left is the
        # emulated device and QEMU's block layer.
        if not plan.null_ceiling:
            return []
        return [Cell(cls.name, NULL_FORMAT, NA, NA, NA, bus, NULL_BACKING, domain.Modifier.NONE)
                for bus in plan.bus if domain.bus_rule(bus) is None]

    @classmethod
    def workload_prune_reason(cls, cell: Cell, workload: wl.Workload) -> str | None:
        if workload.guest_only and cell.is_null_ceiling:
            return "the null ceiling has no data to hold a filesystem"
        return super().workload_prune_reason(cell, workload)

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        super().__init__(plan, opts)
        self.workdir = opts.workdir
        self._tarball: Path | None = None

    def open(self) -> None:
        log = self.opts.log
        self.artifacts: GuestArtifacts = ensure_artifacts(kernel=self.opts.kernel, log=log)
        force = self.opts.accel
        if log and force == "auto":
            log("choosing the guest accelerator (a KVM probe boots one guest, ≤ 10 s, cached afterwards)")
        self.choice: AccelChoice = choose_accel(self.artifacts, force=None if force == "auto" else force)

    def accel(self) -> str:
        return self.choice.accel

    def describe(self) -> str:
        return (f"guest tier: accelerator {self.choice.accel} ({self.choice.reason}); kernel "
                f"{self.artifacts.kernel_version}, {self.artifacts.fio_version} ({self.artifacts.fio_source})")

    def close(self) -> None:
        kill_all_guests()

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
        cell = req.cell
        job = self._job(req)
        image, ours = fresh_image(req, self.workdir, self.plan.image_size_bytes, "iomatrix")
        try:
            null = cell.is_null_ceiling
            disk = DiskSpec(
                target=None if image is None else str(image),
                format=NULL_FORMAT if null else cell.format,
                cache=CacheMode.WRITEBACK if null else CacheMode(cell.cache),
                aio=Aio.THREADS if null else Aio(cell.aio),
                bus=Bus(cell.bus),
                null_size_bytes=self.plan.image_size_bytes,
            )
            out = run_guest(self.artifacts, self.choice.accel, disk, job, req.run_dir, req.timeout_s,
                            on_start=req.on_process, wrapper=req.wrapper or None,
                            memory_mb=self.plan.guest_memory_mb)
        finally:
            full = out_of_space(image)  # before the image is removed, which frees the room again
            if ours and image is not None:
                remove_image(image)
                forget(self.workdir, image)
        result = self._outcome(out, job)
        if not result.ok and full:
            result.error = f"{result.error} — {full}"
        if result.ok:
            shutil.rmtree(req.run_dir, ignore_errors=True)
        return result

    def _outcome(self, out: GuestOutcome, job: GuestJob) -> RunOutcome:
        meta = {"qemu_argv": out.qemu_argv, "guest_disk": out.disk_info, "accel_reason": self.choice.reason,
                "guest_artifacts": self.artifacts.as_metadata()}
        job_text = job.fio_job if job.kind == "fio" else f"{job.kind} on {job.fs}"
        raw = "" if out.fio_json is None else json.dumps(out.fio_json)
        if not out.ok:
            return RunOutcome(ok=False, phases=out.phases, job_text=job_text, raw_output=raw,
                              console_tail=out.console_tail, error=out.error, meta=meta)
        metrics: dict[str, float] = {}
        try:
            if out.fio_json is not None:
                metrics.update(report_metrics(out.fio_json))
        except FioOutputError as err:
            return RunOutcome(ok=False, phases=out.phases, job_text=job_text, raw_output=raw,
                              console_tail=out.console_tail, error=f"guest fio: {err}", meta=meta)
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
        return RunOutcome(ok=True, metrics=metrics, phases=out.phases, job_text=job_text, raw_output=raw,
                          console_tail=out.console_tail, meta=meta)
