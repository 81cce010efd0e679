"""The QEMU command line of a guest, built from its inputs: machine, accelerator, memory, kernel and
initramfs, the job's fw_cfg files and the disks.

Pure: nothing is started and nothing written. It reads two host facts, both read-only lookups: where
qemu-system-x86_64 is (`hostcmd.require`) and the host's TSC rate (`host_tsc_khz`, for microvm under
TCG). The files the command line names (job.env, job.fio, console.log, …) are written by
`guest.process` into the run directory before QEMU starts.

The disk under test reaches the command line through one place, `iomatrix.qemu_block.disk_args` (its
`-blockdev` graph, then its `-device` on the bus, the QEMU disk builder every tier and the snippets
share); a multi-disk boot puts the bus's controller (`controller_args`) up front once.

ttyS0 (kernel + init messages) goes to `console.log` in the run directory; ttyS1 (the results, see
`guest.stream`) is QEMU's stdout.
"""

from __future__ import annotations

import re
from pathlib import Path

from iomatrix.domain import Bus
from iomatrix.errors import UserError
from iomatrix.guest.artifacts import GuestArtifacts
from iomatrix.guest.job import (
    BATCH_KINDS,
    TAR_SERIAL,
    BatchRun,
    GuestJob,
    batch_serial,
    validate_job,
)
from iomatrix.hostcmd import require

# The disk's -blockdev/-device/controller builder is qemu_block's (the one QEMU disk builder); its
# names are re-exported here for the guest package's callers.
from iomatrix.qemu_block import (
    DiskSpec,
    controller_args,
    device_args,
    disk_args,
    disk_device_args,
    guest_cpus,
    validate_disk,
)
from iomatrix.qemu_block import qemu_opt as _opt

__all__ = [
    "build_argv",
    "build_batch_argv",
    "controller_args",
    "device_args",
    "disk_args",
    "disk_device_args",
    "guest_cpus",
    "host_tsc_khz",
    "machine_for",
    "max_runs_per_boot",
    "validate_batch",
]

KERNEL_CMDLINE = (
    "console=ttyS0 quiet panic=-1 rdinit=/init 8250.nr_uarts=2 mitigations=off cryptomgr.notests "
    "tsc=reliable no_timer_check random.trust_cpu=on i8042.noaux i8042.nopnp"
)

# Machine types. microvm (no PCI, no firmware tables to walk, virtio on virtio-mmio found via ACPI)
# boots ~0.5 s faster under TCG; the virtio-blk/virtio-scsi device models and QEMU's block layer
# under them are the same as on pc, only the transport (MMIO instead of PCI) differs. IDE, SATA and
# NVMe need pc.
MICROVM_BUSES = frozenset({Bus.VIRTIO_BLK, Bus.VIRTIO_SCSI, Bus.VIRTIO_SCSI_SINGLE})
MACHINES = ("pc", "microvm")
# microvm has 8 virtio-mmio transports; one is kept for the tarball disk of the filesystem
# workloads.
_MICROVM_TRANSPORTS = 8


# --------------------------------------------------------------------------- machine


def host_tsc_khz(cpuinfo: str | None = None) -> int | None:
    """The host's TSC rate in kHz from /proc/cpuinfo ('cpu MHz' with constant_tsc), or None.

    Under TCG the guest reads the host's TSC. microvm has no HPET or ACPI PM timer, so a guest that
    fails its PIT calibration (it does on a loaded host: TCG timing jitters) is left without a clock
    and hangs in early boot; `tsc_early_khz=` on the kernel command line skips that calibration."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    if "constant_tsc" not in cpuinfo:
        return None  # the TSC rate follows the CPU frequency: no single rate to give
    m = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", cpuinfo, re.M)
    return round(float(m.group(1)) * 1000) if m else None


def machine_for(bus: Bus | str, iothread: str = "off") -> str:
    """The smallest machine type that has `bus`: microvm for the virtio buses (when the host's TSC
    rate is known, see host_tsc_khz), pc for the others. A disk with an IOThread (`iothread` other
    than off or "-") boots pc under every accelerator: an IOThread needs ioeventfd, which
    virtio-mmio has only under KVM (QEMU under TCG: "ioeventfd is required for iothread") and
    virtio-pci always."""
    if iothread not in ("off", "-"):
        return "pc"
    return "microvm" if Bus(bus) in MICROVM_BUSES and host_tsc_khz() is not None else "pc"


def kernel_cmdline(machine: str, accel: str) -> str:
    if machine == "microvm" and accel == "tcg":
        khz = host_tsc_khz()
        if khz is not None:
            return f"{KERNEL_CMDLINE} tsc_early_khz={khz}"
    return KERNEL_CMDLINE


def max_runs_per_boot(bus: Bus | str, machine: str = "pc") -> int:
    """How many test disks one guest can carry on `bus`: IDE has 2 channels × 2 units, AHCI 6 ports,
    microvm's virtio-blk one transport per disk; otherwise enough slots for any sensible batch."""
    bus = Bus(bus)
    if bus == Bus.IDE:
        return 4
    if bus == Bus.SATA:
        return 6
    # a transport per disk
    if machine == "microvm" and bus in (Bus.VIRTIO_BLK, Bus.VIRTIO_SCSI_SINGLE):
        return _MICROVM_TRANSPORTS - 1
    return 16


def validate_batch(runs: list[BatchRun], machine: str) -> None:
    """Can `runs` share one boot on `machine`: one bus that exists there, no more disks than it
    carries, and jobs a multi-run boot can run."""
    if not runs:
        raise UserError("a multi-run boot needs at least one run", hint="pass one BatchRun per run")
    buses = {Bus(r.disk.bus) for r in runs}
    if len(buses) != 1:
        raise UserError(
            f"the runs of one boot must share a bus, got {', '.join(sorted(buses))}",
            hint="batch the runs of one cell",
        )
    bus = buses.pop()
    if machine == "microvm" and bus not in MICROVM_BUSES:
        raise UserError(f"bus {bus} does not exist on the microvm machine", hint="use machine pc")
    cap = max_runs_per_boot(bus, machine)
    if len(runs) > cap:
        raise UserError(
            f"{len(runs)} runs in one boot, but {bus} on {machine} carries at most {cap} disks",
            hint="split the batch",
        )
    for r in runs:
        if r.job.kind not in BATCH_KINDS:
            raise UserError(
                f"job kind '{r.job.kind}' cannot share a boot",
                hint=f"batch only {', '.join(BATCH_KINDS)} runs",
            )
        if r.job.files:
            raise UserError(
                "jobs with extra fw_cfg files cannot share a boot", hint="run them one per boot"
            )
        validate_job(r.job)
        validate_disk(r.disk)


def accel_args(accel: str) -> list[str]:
    if accel == "kvm":
        return ["-accel", "kvm", "-cpu", "host"]
    if accel == "tcg":
        return ["-accel", "tcg,thread=multi", "-cpu", "max"]
    raise UserError(f"unknown accelerator '{accel}'", hint="use kvm or tcg")


def _machine_argv(
    artifacts: GuestArtifacts,
    accel: str,
    run_dir: Path,
    memory_mb: int,
    wrapper: list[str] | None,
    machine: str,
    cpus: int = 1,
) -> list[str]:
    """QEMU, the machine, kernel, consoles and the job's fw_cfg entry: what every boot has."""
    if machine not in MACHINES:
        raise UserError(
            f"unknown guest machine type '{machine}'", hint=f"use one of {', '.join(MACHINES)}"
        )
    # microvm creates one ISA serial port by itself; the results port is added as a second one.
    results_port = (
        ["-device", "isa-serial,chardev=res"]
        if machine == "microvm"
        else ["-serial", "chardev:res"]
    )
    return [
        *(wrapper or []),
        require("qemu-system-x86_64"),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-machine",
        machine,
        *accel_args(accel),
        "-smp",
        str(cpus),
        "-m",
        str(memory_mb),
        "-kernel",
        str(artifacts.kernel),
        "-initrd",
        str(artifacts.initramfs),
        "-append",
        kernel_cmdline(machine, accel),
        "-chardev",
        f"file,id=con,path={_opt(run_dir / 'console.log')}",
        "-serial",
        "chardev:con",
        "-chardev",
        "stdio,id=res,signal=off",
        *results_port,
        "-fw_cfg",
        f"name=opt/iomatrix/job,file={_opt(run_dir / 'job.env')}",
    ]


def tarball_args(tarball: Path, machine: str) -> list[str]:
    """The filesystem workloads' tarball as a read-only raw disk with serial `TAR_SERIAL`."""
    dev = "virtio-blk-device" if machine == "microvm" else "virtio-blk-pci"
    return [
        "-blockdev",
        f"driver=raw,node-name=tar0,read-only=on,file.driver=file,"
        f"file.filename={_opt(tarball)},file.read-only=on",
        "-device",
        f"{dev},drive=tar0,serial={TAR_SERIAL}",
    ]


# --------------------------------------------------------------------------- whole command lines


def build_argv(
    artifacts: GuestArtifacts,
    accel: str,
    disk: DiskSpec | None,
    job: GuestJob,
    run_dir: Path,
    memory_mb: int = 512,
    wrapper: list[str] | None = None,
    extra_args: list[str] | None = None,
    machine: str = "pc",
) -> list[str]:
    """The full QEMU command line for one run (files referenced live in `run_dir`); `extra_args`
    (e.g. a further disk a kind script uses) go at the end."""
    run_dir = Path(run_dir)
    argv = _machine_argv(
        artifacts=artifacts,
        accel=accel,
        run_dir=run_dir,
        memory_mb=memory_mb,
        wrapper=wrapper,
        machine=machine,
        cpus=guest_cpus([disk] if disk is not None else []),
    )
    if job.kind == "fio":
        argv += ["-fw_cfg", f"name=opt/iomatrix/fio,file={_opt(run_dir / 'job.fio')}"]
    for name in job.files:
        argv += ["-fw_cfg", f"name=opt/iomatrix/{name},file={_opt(run_dir / f'file-{name}')}"]
    if disk is not None:
        argv += disk_args(disk, machine=machine)
    if job.kind in ("fs-read", "fs-write"):
        assert job.tarball is not None
        argv += tarball_args(job.tarball, machine)
    return argv + list(extra_args or [])


def build_batch_argv(
    artifacts: GuestArtifacts,
    accel: str,
    runs: list[BatchRun],
    run_dir: Path,
    memory_mb: int = 512,
    wrapper: list[str] | None = None,
    machine: str = "pc",
) -> list[str]:
    """The QEMU command line of a multi-run boot: one disk, serial and job per run."""
    run_dir = Path(run_dir)
    argv = _machine_argv(
        artifacts=artifacts,
        accel=accel,
        run_dir=run_dir,
        memory_mb=memory_mb,
        wrapper=wrapper,
        machine=machine,
        cpus=guest_cpus(r.disk for r in runs),
    )
    argv += controller_args(runs[0].disk.bus, machine, runs[0].disk)
    tarballs = {r.job.tarball for r in runs if r.job.kind in ("fs-read", "fs-write")}
    if len(tarballs) > 1:
        raise UserError(
            "the filesystem runs of one boot must share a tarball", hint="use ensure_tarball()"
        )
    for i, r in enumerate(runs, 1):
        argv += ["-fw_cfg", f"name=opt/iomatrix/job{i},file={_opt(run_dir / f'job{i}.env')}"]
        if r.job.kind == "fio":
            argv += ["-fw_cfg", f"name=opt/iomatrix/fio{i},file={_opt(run_dir / f'job{i}.fio')}"]
        argv += disk_args(r.disk, f"d{i}", batch_serial(i), i - 1, machine, controller=False)
    if tarballs:
        tarball = tarballs.pop()
        assert tarball is not None
        argv += tarball_args(tarball, machine)
    return argv
