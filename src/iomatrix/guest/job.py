"""What a guest runs and what it is told: the job, its checks, and the shell assignments it reads.

Pure: nothing here starts a process or writes a file (the checks read which kind scripts exist and
    whether a
filesystem job's tarball is there).

How a job travels host → guest: fw_cfg files `opt/iomatrix/job` (the shell assignments built here,
sourced by init.sh) and, for fio, `opt/iomatrix/fio` (the job file; `filename=@DISK@` is replaced by
the disk under test, which init finds by its serial `iomx-test`, never by probe order). A multi-run
boot has one `job<i>` (and `fio<i>`) per run, each run its own disk with serial `iomx-tNN` (see
init.sh). The command line that carries these files is built by `guest.cmdline`."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from iomatrix.errors import UserError
from iomatrix.fio.jobs import GUEST_DISK_PLACEHOLDER as DISK_PLACEHOLDER
from iomatrix.guest.artifacts import GuestArtifacts, kind_scripts
from iomatrix.guest.fs_shape import FS_WRITE_COUNT, FS_WRITE_MB
from iomatrix.guest.kernel import BUS_MODULES, FS_MODULES, MMIO_BUS_MODULES
from iomatrix.qemu_block import DISK_SERIAL, DiskSpec

# DISK_SERIAL, the serial the guest's init finds the disk under test by, is the QEMU disk builder's
# default.
TAR_SERIAL = "iomx-tar"


def batch_serial(index: int) -> str:
    """The serial of run `index` (1-based) of a multi-run boot. Fixed width: init finds disks with
    grep, and 'iomx-t1' would also match 'iomx-t10'."""
    return f"iomx-t{index:02d}"


# Kinds /init runs itself; any other kind needs src/iomatrix/guest/kinds/kind-<kind>.sh.
BUILTIN_KINDS = ("fio", "fs-read", "fs-write", "boot")
_ENV_NAME = re.compile(r"IOMX_[A-Z0-9_]+")
_FILE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,40}")


@dataclass
class GuestJob:
    """What the guest runs. kind="fio": `fio_job` is a fio job file whose filename is `@DISK@`.
    kind="fs-read"/"fs-write": filesystem workloads on `fs` using `tarball`. kind="boot": nothing
    (reports that it booted; used by the accelerator probe and the boot benchmark). Any other kind
    is run by its kind script (`guest/kinds/kind-<kind>.sh`), with `env` added to the job's shell
    assignments and each of `files` readable in the guest at `$FW/<name>/raw` (fw_cfg)."""

    kind: str
    fio_job: str = ""
    fs: Literal["ext4", "xfs"] = "ext4"
    tarball: Path | None = None
    write_mb: int = FS_WRITE_MB  # fs-write: size of each large sequential write
    write_count: int = FS_WRITE_COUNT  # fs-write: how many of them
    env: dict[str, str] = field(default_factory=dict)  # extra IOMX_* assignments for a kind script
    # name -> text, passed as fw_cfg opt/iomatrix/<name>
    files: dict[str, str] = field(default_factory=dict)
    modules: tuple[str, ...] = ()  # further guest modules a kind script needs (e.g. its filesystem)


@dataclass
class BatchRun:
    """One run of a multi-run boot: its own fresh disk and its job (kind fio, fs-read or
    fs-write)."""

    disk: DiskSpec
    job: GuestJob


BATCH_KINDS = ("fio", "fs-read", "fs-write")


def guest_modules(
    artifacts: GuestArtifacts, disk: DiskSpec | None, job: GuestJob, machine: str = "pc"
) -> list[str]:
    """Relative .ko paths this run must insmod, dependencies first (qemu_fw_cfg is loaded by
    init)."""
    bus_modules = MMIO_BUS_MODULES if machine == "microvm" else BUS_MODULES
    names: list[str] = []
    if disk is not None and job.kind != "boot":
        names += bus_modules.get(disk.bus, BUS_MODULES[disk.bus])
    if job.kind in ("fs-read", "fs-write"):
        names += bus_modules["virtio-blk"]  # the tarball disk
        names += FS_MODULES[job.fs]
    names += job.modules
    return artifacts.modules_for(names)


def _job_vars(job: GuestJob, serial: str) -> dict[str, str]:
    return {
        "IOMX_KIND": job.kind,
        "IOMX_DISK_SERIAL": serial,
        "IOMX_FS": job.fs,
        "IOMX_WRITE_MB": str(int(job.write_mb)),
        "IOMX_WRITE_COUNT": str(int(job.write_count)),
        **job.env,
    }


def _shell(env: dict[str, str]) -> str:
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items())


def job_env(
    artifacts: GuestArtifacts, disk: DiskSpec | None, job: GuestJob, machine: str = "pc"
) -> str:
    """The shell assignments init.sh sources from fw_cfg opt/iomatrix/job."""
    env = {
        "IOMX_MODULES": " ".join(guest_modules(artifacts, disk, job, machine)),
        "IOMX_TAR_SERIAL": TAR_SERIAL if job.kind in ("fs-read", "fs-write") else "",
        **_job_vars(job, DISK_SERIAL if (disk is not None and job.kind != "boot") else ""),
    }
    return _shell({"IOMX_KIND": env.pop("IOMX_KIND"), **env})


def batch_env(
    artifacts: GuestArtifacts, runs: list[BatchRun], machine: str, gate: bool = False
) -> tuple[str, list[str]]:
    """(the boot's assignments, one set of assignments per run) for a multi-run boot. `gate`: the
    guest waits for a line on ttyS1 before its first run (see `guest.process.HostGate`)."""
    modules: list[str] = []
    for r in runs:
        for m in guest_modules(artifacts, r.disk, r.job, machine):
            if m not in modules:
                modules.append(m)
    fs_jobs = any(r.job.kind in ("fs-read", "fs-write") for r in runs)
    boot = {
        "IOMX_KIND": "batch",
        "IOMX_RUNS": str(len(runs)),
        "IOMX_MODULES": " ".join(modules),
        "IOMX_TAR_SERIAL": TAR_SERIAL if fs_jobs else "",
        "IOMX_DISK_SERIAL": "",
    }
    if gate:
        boot["IOMX_GATE"] = "1"
    per_run = [_shell(_job_vars(r.job, batch_serial(i))) for i, r in enumerate(runs, 1)]
    return _shell(boot), per_run


def validate_job(job: GuestJob) -> None:
    if job.kind == "fio":
        if DISK_PLACEHOLDER not in job.fio_job:
            raise UserError(
                f"the guest fio job must use filename={DISK_PLACEHOLDER}",
                hint="the guest replaces it with the disk under test",
            )
    elif job.kind in ("fs-read", "fs-write"):
        if job.fs not in FS_MODULES:
            raise UserError(f"unknown guest filesystem '{job.fs}'", hint="use ext4 or xfs")
        if job.tarball is None or not Path(job.tarball).is_file():
            raise UserError(
                f"filesystem job needs a tarball, got {job.tarball}",
                hint="create one with iomatrix.guest.tarball.ensure_tarball()",
            )
    elif job.kind != "boot" and f"kind-{job.kind}.sh" not in kind_scripts():
        raise UserError(
            f"unknown guest job kind '{job.kind}'",
            hint="use fio, fs-read, fs-write, boot or a kind with a script in "
            "iomatrix/guest/kinds/",
        )
    for name in job.env:
        if not _ENV_NAME.fullmatch(name):
            raise UserError(
                f"guest job variable '{name}' is not IOMX_<NAME>", hint="prefix it with IOMX_"
            )
    for name in job.files:
        if not _FILE_NAME.fullmatch(name) or name in ("job", "fio"):
            raise UserError(
                f"guest job file name '{name}' is not allowed",
                hint="use lower-case letters, digits, '-' and '_' (not 'job' or 'fio')",
            )
