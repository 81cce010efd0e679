"""One guest-tier run in a real image (`[guest] image`, iomatrix.guest.real_image): boot the image
on a fresh overlay with the cell's disk under test, run the workload's fio job in it through the
guest agent, and turn what fio reported into a `RunOutcome` like the built-in guest's.

One boot per run (the built-in guest's shared boots are not done here yet). The fio job is the
built-in guest's (`fio.jobs.guest_job`: O_DIRECT, libaio) with the disk the guest found by its
serial; it is written into the guest with guest-file-write and run by the image's own fio, its JSON
read from guest-exec's captured output. Recorded with every run: the image (path, sha256, source,
distribution, kernel) and the guest's own view of the disk under test (driver, queues, scheduler,
write cache).

Every workload runs so, a role's jobs (``database:data``, ``database:log``: custom jobs) included:
the same job builder as the built-in guest's, each job a run of its own.

`[guest] filesystem = "ext4"` (the plan setting ``guest_filesystem``): the guest makes an ext4 on
the disk under test (its inode tables and journal written at once, so no background
initialisation runs beside fio), mounts it, and the job runs on a file of it instead of the raw
disk, with O_DIRECT and the job's own fdatasync, through the guest's filesystem and journal; the
filesystem (mkfs options, mount options, free space) is recorded in the run's
``guest_filesystem``."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix.backing.leftovers import forget
from iomatrix.errors import UserError
from iomatrix.fio.jobs import GUEST_DISK_PLACEHOLDER, IOPS_LOG_PREFIX, guest_job
from iomatrix.fio.parse import FioOutputError, checked_metrics, extract_json, parse_iops_log
from iomatrix.guest.real_image import RealImage
from iomatrix.guest.realboot import RealGuest, boot, disk_view
from iomatrix.guest.seed import TOOLS_SERIAL, seed_args, tools_args, write_seed, write_tools
from iomatrix.images import remove_image
from iomatrix.qemu_block import DiskSpec, out_of_space
from iomatrix.tiers.base import RunOutcome, RunRequest, fresh_image

GUEST_RUN_DIR = "/run/iomatrix"
TOOLS_MOUNT = "/run/iomx-tools"
# iomatrix's first-boot set-up, the NoCloud seed's user-data (cloud-init runs it once, as does the
# Debian image's own seed unit): a cloud image may carry qemu-guest-agent without starting it; the
# marker says the seed was read.
SEED_USER_DATA = f"""#!/bin/sh
command -v systemctl >/dev/null 2>&1 && systemctl start qemu-guest-agent 2>/dev/null
mkdir -p {GUEST_RUN_DIR} && echo seeded > {GUEST_RUN_DIR}/seeded
"""
# The fio to run, with where it comes from: the image's own, else iomatrix's static fio on the
# read-only tools disk (no network needed); and whether the seed's user-data has run.
_FIO = f"""
seed=$([ -f {GUEST_RUN_DIR}/seeded ] && echo seed-read || echo seed-not-read-yet)
if command -v fio >/dev/null 2>&1; then echo "fio image $seed"; exit 0; fi
mkdir -p {TOOLS_MOUNT}
mountpoint -q {TOOLS_MOUNT} || mount -o ro /dev/disk/by-id/virtio-{TOOLS_SERIAL} {TOOLS_MOUNT} 2>/dev/null
[ -x {TOOLS_MOUNT}/fio ] && echo "{TOOLS_MOUNT}/fio tools-disk $seed" && exit 0
echo "the image has no fio and no tools disk is attached" >&2
exit 3
"""  # noqa: E501
# The least time a step in the guest gets, even past the run's time limit: the fio log's read after
# a job that ran to its limit.
STEP_FLOOR_S = 30.0
# The guest filesystem's mount point and the file fio runs on there.
FS_MOUNT = "/mnt/iomx-test"
FS_FILE = "iomatrix.fio"
# Inode tables and journal zeroed by mkfs itself: lazily, ext4lazyinit would write them in the
# background during the measurement.
MKFS_EXT4 = "mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0"
# os-release's PRETTY_NAME and the kernel release, one a line.
_FACTS = '. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}"; uname -r'


@dataclass
class RealRunContext:
    """What a real-guest run needs from its tier."""

    image: RealImage
    accel: str
    workdir: Path
    memory_mb: int
    # "ext4": the job runs on a file of an ext4 made on the disk under test in the guest; None or
    # "none": on the raw disk.
    filesystem: str | None = None
    # QEMU arguments every boot gets: the NoCloud seed and the tools disk (`attach_media`).
    extra_args: list[str] = field(default_factory=list)
    media_dir: Path | None = None

    def attach_media(self, fio: Path | None) -> None:
        """Write the seed (and, with iomatrix's static fio, the tools disk) for this sweep's
        boots."""
        self.media_dir = self.workdir / "real-guest-media"
        self.media_dir.mkdir(parents=True, exist_ok=True)
        seed = write_seed(
            self.media_dir / "seed.iso", "iomatrix-run", "iomatrix-guest", SEED_USER_DATA
        )
        self.extra_args = seed_args(seed)
        if fio is not None:
            self.extra_args += tools_args(write_tools(self.media_dir / "tools.iso", fio))

    def remove_media(self) -> None:
        if self.media_dir is not None:
            shutil.rmtree(self.media_dir, ignore_errors=True)
            self.media_dir = None


def _refusal(req: RunRequest, filesystem: str | None) -> str | None:
    if filesystem not in (None, "none") and req.cell.is_null_ceiling:
        return "the null ceiling has no data to hold a filesystem"
    if req.workload.kind in ("fs-read", "fs-write"):
        return (
            "filesystem workloads do not run in a real guest image yet (issue 51): run them "
            "in the built-in guest"
        )
    if req.target.kind == "network":
        return "network backings do not run in a real guest image yet (issue 51)"
    return None


def guest_filesystem(
    guest: RealGuest, filesystem: str, device: str, size_bytes: int, timeout_s: float = 600.0
) -> tuple[str, dict[str, Any]]:
    """(the file the job runs on, what to record) once `filesystem` (ext4) is made on `device`
    inside the guest and mounted; one line when it cannot be, or holds less than the run's
    region."""
    res = guest.sh(
        f"{MKFS_EXT4} {device} && mkdir -p {FS_MOUNT} && mount -t {filesystem} {device} "
        f"{FS_MOUNT} && stat -f -c '%a %S' {FS_MOUNT} && grep ' {FS_MOUNT} ' /proc/mounts",
        timeout=timeout_s,
    )
    lines = res.stdout.splitlines()
    if res.exitcode != 0 or len(lines) < 2:
        last = ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"guest: {filesystem} on the disk under test ({device}) failed: {last}",
            hint="the image needs e2fsprogs (mkfs.ext4) and a kernel with ext4",
        )
    blocks, block_bytes = (int(w) for w in lines[0].split())
    free = blocks * block_bytes
    if free < size_bytes:
        raise UserError(
            f"guest: the {filesystem} on the disk under test has {free >> 20} MiB free, the "
            f"run's region (size) is {size_bytes >> 20} MiB",
            hint="raise image_size or lower size in the plan",
        )
    record = {
        "type": filesystem,
        "device": device,
        "mkfs": f"{MKFS_EXT4} {device}",
        "mount_options": lines[1].split()[3] if len(lines[1].split()) > 3 else "",
        "file": f"{FS_MOUNT}/{FS_FILE}",
        "free_bytes": free,
    }
    return record["file"], record


def run_in_guest(
    guest: RealGuest, ctx: RealRunContext, job: str, timeout_s: float, size_bytes: int
) -> tuple[dict[str, Any], str, str]:
    """(meta, fio's stdout and stderr, its iops log) of the job run in the booted guest, on the
    raw disk under test or (`ctx.filesystem`) on a file of a filesystem made on it. Every step
    gets what is left of `timeout_s`: right after its boot a TCG guest on a loaded host can take
    minutes for a command (a fixed 60 s failed a run at load 7)."""
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(STEP_FLOOR_S, deadline - time.monotonic())

    facts = guest.sh(_FACTS, timeout=left()).stdout.splitlines()
    if len(facts) >= 2 and not (ctx.image.distribution and ctx.image.kernel_version):
        ctx.image = ctx.image.with_guest_facts(facts[0], facts[1])
    view = disk_view(guest, timeout=left())
    fio, fio_from, seed = which_fio(guest, left())
    target, fs_meta = f"/dev/{view['name']}", None
    if ctx.filesystem not in (None, "none"):
        target, fs_meta = guest_filesystem(guest, str(ctx.filesystem), target, size_bytes, left())
    text = job.replace(GUEST_DISK_PLACEHOLDER, target)
    guest.sh(f"mkdir -p {GUEST_RUN_DIR}", timeout=left())
    guest.agent.write_file(f"{GUEST_RUN_DIR}/job.fio", text.encode())
    t0 = time.monotonic()
    res = guest.sh(f"cd {GUEST_RUN_DIR} && exec {fio} --output-format=json job.fio", timeout=left())
    meta = {
        "guest_disk": view,
        "guest_image": ctx.image.as_metadata(),
        "workload_host_s": round(time.monotonic() - t0, 3),
        "fio_exit": res.exitcode,
        "guest_fio": fio_from,
        "guest_seed": seed,
    }
    if fs_meta is not None:
        meta["guest_filesystem"] = fs_meta
    log = guest.sh(
        f"cat {GUEST_RUN_DIR}/{IOPS_LOG_PREFIX}_iops.log 2>/dev/null", timeout=left()
    ).stdout
    return meta, res.stdout + res.stderr, log


def which_fio(guest: RealGuest, timeout_s: float = 60.0) -> tuple[str, str, str]:
    """(the fio command, where it came from: "image" or "tools-disk", whether the seed's user-data
    has run: "seed-read" or "seed-not-read-yet": cloud-init runs it late in the boot, and a run does
    not wait for it); one line when the image has no fio and no tools disk brings one."""
    res = guest.sh(_FIO, timeout=timeout_s)
    words = res.stdout.split()
    if res.exitcode != 0 or len(words) != 3:
        raise UserError(
            f"guest: {res.stderr.strip() or 'no fio found'}",
            hint="install fio in the image, or let iomatrix build its static fio "
            "(scripts/setup.sh)",
        )
    return words[0], words[1], words[2]


def run_real(req: RunRequest, ctx: RealRunContext, image_bytes: int) -> RunOutcome:
    """One run of `req` in the real image: a fresh disk under test, one boot, the fio job, the
    outcome."""
    refused = _refusal(req, ctx.filesystem)
    job = (
        ""
        if refused
        else guest_job(req.workload, shape=req.shape, custom_text=req.workload.custom_text)
    )
    meta: dict[str, Any] = {
        "machine": "pc",
        "guest_kind": "real image",
        "guest_image": ctx.image.as_metadata(),
    }
    if refused:
        return RunOutcome(ok=False, error=refused, meta=meta)
    image, ours = fresh_image(req, ctx.workdir, image_bytes, "iomatrix")
    t0 = time.monotonic()
    console = ""
    try:
        disk = DiskSpec.for_cell(req.cell, image, image_bytes)
        with boot(
            ctx.image.boot,
            req.run_dir,
            [disk],
            ctx.accel,
            ctx.memory_mb,
            boot_limit_s=req.timeout_s,
            wrapper=req.wrapper,
            extra_args=ctx.extra_args,
        ) as guest:
            if req.on_process is not None:
                req.on_process(guest.proc.pid)
            boot_s = guest.boot_s
            meta["qemu_argv"] = guest.argv
            run_meta, output, log = run_in_guest(
                guest, ctx, job, max(1.0, req.timeout_s - boot_s), req.shape.size_bytes
            )
            console = guest.console_lines(40)
        meta.update(run_meta)
    except (UserError, OSError) as err:  # OSError: the agent's socket closed under it (QEMU died)
        full = out_of_space(image)
        line = err.one_line() if isinstance(err, UserError) else f"guest agent: {err}"
        return RunOutcome(
            ok=False, error=line + (f" — {full}" if full else ""), job_text=job, meta=meta
        )
    finally:
        if ours and isinstance(image, Path):
            remove_image(image)
            forget(ctx.workdir, image)
    wall_s = round(time.monotonic() - t0, 3)
    phases = {"boot_s": boot_s, "workload_s": meta["workload_host_s"], "wall_s": wall_s}
    return fio_outcome(req.workload.primary_metric, job, meta, (output, log, console), phases)


def fio_outcome(
    primary_metric: str,
    job: str,
    meta: dict[str, Any],
    guest_output: tuple[str, str, str],
    phases: dict[str, float],
) -> RunOutcome:
    """The outcome of a job run in the guest from what it left (`guest_output`: fio's output, its
    iops log, the console's last lines): its metrics when fio measured the workload's primary
    metric, else one line saying what fio reported."""
    output, log, console = guest_output
    try:
        metrics = checked_metrics(extract_json(output), output, primary_metric)
    except FioOutputError as err:
        return RunOutcome(
            ok=False,
            phases=phases,
            job_text=job,
            raw_output=output,
            console_tail=console,
            error=f"guest fio: {err}",
            meta=meta,
        )
    series = parse_iops_log(log) if log else []
    if series:
        meta["iops_series"] = series
    metrics["workload.seconds"] = phases["workload_s"]
    metrics.update({f"phase.{k}": float(v) for k, v in phases.items()})
    return RunOutcome(
        ok=True,
        metrics=metrics,
        phases=phases,
        job_text=job,
        raw_output=output,
        console_tail=console,
        meta=meta,
    )
