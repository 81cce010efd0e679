"""Bare-metal tier: fio on the host, the baseline every guest number is compared with."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from iomatrix import children
from iomatrix.errors import UserError
from iomatrix.fio.jobs import IOPS_LOG_FILE, baremetal_job
from iomatrix.fio.parse import (
    FioOutputError,
    checked_metrics,
    extract_json,
    fatal_message,
    parse_iops_log,
)
from iomatrix.hostcmd import require
from iomatrix.plan.model import Plan
from iomatrix.textfile import last_lines
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, Tier
from iomatrix.tiers.declared.baremetal import BareMetal
from iomatrix.tiers.network_disks import disk_name, network_disk

DATA_FILE = "iomatrix-baremetal.dat"


def _tail(text: str, lines: int = 40) -> str:
    return last_lines(text, lines)


class BareMetalTier(BareMetal, Tier):
    """Runs the baremetal tier (declared in iomatrix.tiers.declared.baremetal)."""

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        super().__init__(plan, opts)
        self.fio = require("fio")

    def accel(self) -> str:
        return "none (bare metal)"

    def target_path(self, req: RunRequest) -> Path:
        if req.target.kind == "device":
            assert req.target.path is not None
            return req.target.path
        assert req.target.path is not None
        return req.target.path / f"{DATA_FILE}.{os.getpid()}"

    def run(self, req: RunRequest) -> RunOutcome:
        if req.target.kind != "network":
            return self._run_on(req, self.target_path(req))
        # The server-side baseline: fio on the file that holds a network disk's bytes on the server
        # (a LUN's backing file, the image in the export directory), so "vs bare metal" is quoted
        # against the server's own storage, and what the protocol (and QEMU over it) costs is what
        # the other tiers lose to it.
        assert req.target.server is not None
        try:
            with network_disk(
                req.target.server,
                req.cell,
                size_bytes=self.plan.image_size_bytes,
                name=disk_name("bm", req.workload.slug),
                workdir=self.opts.workdir,
            ) as (disk, meta):
                if disk.server_path is None:
                    return RunOutcome(
                        ok=False,
                        meta=meta,
                        error=f"{disk.url}: the server does not show where it "
                        "keeps the disk's bytes (an existing server), so there is no server-side "
                        "baseline to run",
                    )
                outcome = self._run_on(req, disk.server_path)
                outcome.meta.update(meta)
                outcome.meta["baseline"] = (
                    "server side: fio on the network disk's file on the server"
                )
                return outcome
        except UserError as err:
            return RunOutcome(ok=False, error=err.one_line())

    def _run_on(self, req: RunRequest, target: Path) -> RunOutcome:
        custom = req.workload.custom_text  # validated at plan load; never re-read from disk
        job = baremetal_job(
            req.workload,
            cache=req.cell.cache,
            aio=req.cell.aio,
            target=str(target),
            shape=req.shape,
            custom_text=custom,
        )
        req.run_dir.mkdir(parents=True, exist_ok=True)
        job_file = req.run_dir / "job.fio"
        job_file.write_text(job)
        out_file = req.run_dir / "fio.json"
        argv = [
            *req.wrapper,
            self.fio,
            "--output-format=json",
            f"--output={out_file}",
            str(job_file),
        ]
        t0 = time.monotonic()
        log_file = req.run_dir / IOPS_LOG_FILE
        log_file.unlink(missing_ok=True)
        proc: subprocess.Popen | None = None
        try:
            # fio writes its IOPS log into its working directory: the run's scratch dir. Started
            # inside the `try`: an interrupt that lands as it starts still removes the data file
            # below.
            proc = children.spawn(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=req.run_dir
            )
            if req.on_process:
                req.on_process(proc.pid)
            _, stderr = proc.communicate(timeout=req.timeout_s)
        except subprocess.TimeoutExpired:
            assert proc is not None  # only communicate() times out
            children.kill(proc, tree=True, grace_s=1.0)
            proc.communicate()
            return RunOutcome(
                ok=False,
                job_text=job,
                error=f"fio did not finish within {req.timeout_s:g} s; killed",
                phases={"wall_s": time.monotonic() - t0},
            )
        except BaseException:
            # Ctrl-C / SIGTERM: no fio job left behind writing to the backing.
            if proc is not None:
                children.kill(proc, tree=True)
            raise
        finally:
            if proc is not None:
                children.release(proc)
            # a device is the user's; a network disk's file is its server's to remove
            if req.target.kind == "dir":
                target.unlink(missing_ok=True)
        wall = time.monotonic() - t0
        raw = out_file.read_text() if out_file.exists() else ""
        assert proc is not None  # the `try` either started it or raised
        if proc.returncode != 0:
            return RunOutcome(
                ok=False,
                job_text=job,
                raw_output=raw,
                console_tail=_tail(stderr),
                error=f"fio exited with status {proc.returncode}: "
                f"{fatal_message(stderr) or _tail(stderr, 3)}",
                phases={"wall_s": wall},
            )
        try:
            report = extract_json(raw)
            # fio can exit 0 with a report of zeros (killed worker, failed allocation): judged here.
            metrics = checked_metrics(
                report, stderr + raw[: raw.find("{")], req.workload.primary_metric
            )
        except FioOutputError as err:
            return RunOutcome(
                ok=False,
                job_text=job,
                raw_output=raw,
                console_tail=_tail(stderr),
                error=str(err),
                phases={"wall_s": wall},
            )
        workload_s = metrics.get("job.runtime_s", 0.0)
        # The raw per-interval series only: steady state is computed from it at report time.
        series = parse_iops_log(log_file.read_text()) if log_file.exists() else []
        # Kept for a failed run (job, output); a good run's files are all in the store now.
        shutil.rmtree(req.run_dir, ignore_errors=True)
        return RunOutcome(
            ok=True,
            metrics=metrics,
            job_text=job,
            raw_output=raw,
            console_tail=_tail(stderr),
            phases={
                "wall_s": wall,
                "workload_s": workload_s,
                "overhead_s": max(0.0, wall - workload_s),
            },
            meta={"target": str(target), "fio_argv": argv, "iops_series": series},
        )
