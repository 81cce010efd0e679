"""Run one guest: build the QEMU command line, pass the job in, time the phases, collect results.

How a job travels:
  * host → guest: fw_cfg files `opt/iomatrix/job` (shell assignments read by init.sh) and, for fio,
    `opt/iomatrix/fio` (the job file; `filename=@DISK@` is replaced by the disk under test, which
    init finds by its serial `iomx-test`, never by probe order).
  * guest → host: the second serial port (ttyS1) carries only delimited blocks and timestamps
    (`@@IOMX:MARK:<name>:<uptime>@@`, `@@IOMX:BEGIN:<name>@@ … @@IOMX:END:<name>@@`). It is QEMU's
    stdout (a pipe): a reader thread stamps every line with the host clock as it arrives, which
    splits the run into QEMU start / boot / workload / shutdown. ttyS0 (kernel + init messages) goes
    to `console.log` in the run directory; its tail is reported on failure.

A guest is started with `start_guest` (non-blocking: several can run at once) and finished with
`GuestHandle.wait`; `run_guest` does both. `run_guest_batch` boots one guest for several runs (each
its own fresh disk, serial `iomx-tNN`, own job; see init.sh), kills it when one run exceeds its
timeout, and returns one outcome per run; `machine_for(bus)` picks the smallest machine for a bus.
QEMU is a child of `iomatrix.children`: registered until reaped, killed with iomatrix (parent-death
signal), and killed by `kill_all_guests()` on interrupt.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from iomatrix import children
from iomatrix.domain import BUS, Bus
from iomatrix.errors import UserError
from iomatrix.fio.jobs import GUEST_DISK_PLACEHOLDER as DISK_PLACEHOLDER
from iomatrix.guest.artifacts import GuestArtifacts, kind_scripts
from iomatrix.guest.kernel import BUS_MODULES, FS_MODULES, MMIO_BUS_MODULES
from iomatrix.hostcmd import require
from iomatrix.qemu_block import NULL_FORMAT as NULL_FORMAT
from iomatrix.qemu_block import DiskSpec as DiskSpec
from iomatrix.qemu_block import blockdev_args as blockdev_args
from iomatrix.qemu_block import onoff as _onoff
from iomatrix.qemu_block import qemu_opt as _opt
from iomatrix.qemu_block import validate_disk as validate_disk
from iomatrix.qemu_block import write_cache
from iomatrix.textfile import last_lines

DISK_SERIAL = "iomx-test"
TAR_SERIAL = "iomx-tar"
KERNEL_CMDLINE = (
    "console=ttyS0 quiet panic=-1 rdinit=/init 8250.nr_uarts=2 mitigations=off cryptomgr.notests "
    "tsc=reliable no_timer_check random.trust_cpu=on i8042.noaux i8042.nopnp"
)
CONSOLE_TAIL_LINES = 40

# Machine types. microvm (no PCI, no firmware tables to walk, virtio on virtio-mmio found via ACPI) boots
# ~0.5 s faster under TCG; the virtio-blk/virtio-scsi device models and QEMU's block layer under them are
# the same as on pc, only the transport (MMIO instead of PCI) differs. IDE, SATA and NVMe need pc.
MICROVM_BUSES = frozenset({Bus.VIRTIO_BLK, Bus.VIRTIO_SCSI})
MACHINES = ("pc", "microvm")
# microvm has 8 virtio-mmio transports; one is kept for the tarball disk of the filesystem workloads.
_MICROVM_TRANSPORTS = 8


def host_tsc_khz(cpuinfo: str | None = None) -> int | None:
    """The host's TSC rate in kHz from /proc/cpuinfo ('cpu MHz' with constant_tsc), or None.

    Under TCG the guest reads the host's TSC. microvm has no HPET or ACPI PM timer, so a guest that fails
    its PIT calibration (it does on a loaded host: TCG timing jitters) is left without a clock and hangs in
    early boot; `tsc_early_khz=` on the kernel command line skips that calibration."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    if "constant_tsc" not in cpuinfo:
        return None  # the TSC rate follows the CPU frequency: no single rate to give
    m = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", cpuinfo, re.M)
    return round(float(m.group(1)) * 1000) if m else None


def machine_for(bus: Bus | str) -> str:
    """The smallest machine type that has `bus`: microvm for the virtio buses (when the host's TSC rate is
    known, see host_tsc_khz), pc for the others."""
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
    if machine == "microvm" and bus == Bus.VIRTIO_BLK:
        return _MICROVM_TRANSPORTS - 1
    return 16


def batch_serial(index: int) -> str:
    """The serial of run `index` (1-based) of a multi-run boot. Fixed width: init finds disks with grep,
    and 'iomx-t1' would also match 'iomx-t10'."""
    return f"iomx-t{index:02d}"

# Kinds /init runs itself; any other kind needs src/iomatrix/guest/kinds/kind-<kind>.sh.
BUILTIN_KINDS = ("fio", "fs-read", "fs-write", "boot")
_ENV_NAME = re.compile(r"IOMX_[A-Z0-9_]+")
_FILE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,40}")


@dataclass
class GuestJob:
    """What the guest runs. kind="fio": `fio_job` is a fio job file whose filename is `@DISK@`.
    kind="fs-read"/"fs-write": filesystem workloads on `fs` using `tarball`. kind="boot": nothing
    (reports that it booted; used by the accelerator probe and the boot benchmark). Any other kind is
    run by its kind script (`guest/kinds/kind-<kind>.sh`), with `env` added to the job's shell
    assignments and each of `files` readable in the guest at `$FW/<name>/raw` (fw_cfg)."""

    kind: str
    fio_job: str = ""
    fs: Literal["ext4", "xfs"] = "ext4"
    tarball: Path | None = None
    write_mb: int = 128  # fs-write: size of each large sequential write
    write_count: int = 3  # fs-write: how many of them
    env: dict[str, str] = field(default_factory=dict)  # extra IOMX_* assignments for a kind script
    files: dict[str, str] = field(default_factory=dict)  # name -> text, passed as fw_cfg opt/iomatrix/<name>
    modules: tuple[str, ...] = ()  # further guest modules a kind script needs (e.g. its filesystem)


@dataclass
class GuestOutcome:
    ok: bool
    fio_json: dict | None
    fs_result: dict | None
    phases: dict[str, float]  # qemu_start_s, boot_to_workload_s, workload_s, shutdown_s, wall_s
    console_tail: str
    error: str | None
    qemu_argv: list[str]
    qemu_pid: int | None
    disk_info: dict | None = None  # what the guest saw: device name, write_cache, size
    iops_log: str | None = None  # fio's per-interval IOPS log of the measured job, when it wrote one
    marks: dict[str, float] = field(default_factory=dict)  # guest uptime at each init mark


# --------------------------------------------------------------------------- command line


def _device_name(bus: Bus, machine: str) -> str:
    name = BUS[bus].qemu_device
    if machine == "microvm" and name.endswith("-pci"):
        return name[: -len("-pci")] + "-device"  # virtio-blk-device, virtio-scsi-device: the MMIO transport
    return name


def controller_args(bus: Bus | str, machine: str = "pc") -> list[str]:
    """The controller the bus's disks sit on (none for virtio-blk, NVMe and the pc's built-in IDE)."""
    bus = Bus(bus)
    if bus == Bus.VIRTIO_SCSI:
        return ["-device", ("virtio-scsi-device" if machine == "microvm" else "virtio-scsi-pci") + ",id=scsi0"]
    if bus == Bus.SATA:
        return ["-device", "ahci,id=ahci0"]
    return []


def disk_device_args(disk: DiskSpec, node: str, serial: str, index: int = 0, machine: str = "pc",
                     report_errors: bool = True) -> list[str]:
    """`-device` for the `index`-th (0-based) disk on the disk's bus, after `controller_args`."""
    bus = Bus(disk.bus)
    on_bus = {Bus.VIRTIO_SCSI: ",bus=scsi0.0",
              Bus.IDE: f",bus=ide.{index // 2},unit={index % 2}",
              Bus.SATA: f",bus=ahci0.{index}"}.get(bus, "")
    wc = _onoff(write_cache(disk.cache))
    policy = ",werror=report,rerror=report" if report_errors and BUS[bus].error_policy else ""
    return ["-device",
            f"{_device_name(bus, machine)},drive={node}{on_bus},serial={serial},write-cache={wc}{policy}"]


def device_args(disk: DiskSpec, node: str = "d0", serial: str = DISK_SERIAL, report_errors: bool = True,
                machine: str = "pc") -> list[str]:
    """`-device` options attaching `node` on the disk's bus, with write-cache from the cache mode.

    `report_errors`: werror=report,rerror=report, so an I/O error (ENOSPC on the host) fails the guest's
    request instead of pausing the VM (QEMU's default werror=enospc), which would leave the run to time out
    with no reason given.
    """
    return [*controller_args(disk.bus, machine), *disk_device_args(disk, node, serial, 0, machine, report_errors)]


def accel_args(accel: str) -> list[str]:
    if accel == "kvm":
        return ["-accel", "kvm", "-cpu", "host"]
    if accel == "tcg":
        return ["-accel", "tcg,thread=multi", "-cpu", "max"]
    raise UserError(f"unknown accelerator '{accel}'", hint="use kvm or tcg")


def guest_modules(artifacts: GuestArtifacts, disk: DiskSpec | None, job: GuestJob, machine: str = "pc") -> list[str]:
    """Relative .ko paths this run must insmod, dependencies first (qemu_fw_cfg is loaded by init)."""
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


def job_env(artifacts: GuestArtifacts, disk: DiskSpec | None, job: GuestJob, machine: str = "pc") -> str:
    """The shell assignments init.sh sources from fw_cfg opt/iomatrix/job."""
    env = {
        "IOMX_MODULES": " ".join(guest_modules(artifacts, disk, job, machine)),
        "IOMX_TAR_SERIAL": TAR_SERIAL if job.kind in ("fs-read", "fs-write") else "",
        **_job_vars(job, DISK_SERIAL if (disk is not None and job.kind != "boot") else ""),
    }
    return _shell({"IOMX_KIND": env.pop("IOMX_KIND"), **env})


def validate_job(job: GuestJob) -> None:
    if job.kind == "fio":
        if DISK_PLACEHOLDER not in job.fio_job:
            raise UserError(f"the guest fio job must use filename={DISK_PLACEHOLDER}",
                            hint="the guest replaces it with the disk under test")
    elif job.kind in ("fs-read", "fs-write"):
        if job.fs not in FS_MODULES:
            raise UserError(f"unknown guest filesystem '{job.fs}'", hint="use ext4 or xfs")
        if job.tarball is None or not Path(job.tarball).is_file():
            raise UserError(f"filesystem job needs a tarball, got {job.tarball}",
                            hint="create one with iomatrix.guest.tarball.ensure_tarball()")
    elif job.kind != "boot" and f"kind-{job.kind}.sh" not in kind_scripts():
        raise UserError(f"unknown guest job kind '{job.kind}'",
                        hint="use fio, fs-read, fs-write, boot or a kind with a script in iomatrix/guest/kinds/")
    for name in job.env:
        if not _ENV_NAME.fullmatch(name):
            raise UserError(f"guest job variable '{name}' is not IOMX_<NAME>", hint="prefix it with IOMX_")
    for name in job.files:
        if not _FILE_NAME.fullmatch(name) or name in ("job", "fio"):
            raise UserError(f"guest job file name '{name}' is not allowed",
                            hint="use lower-case letters, digits, '-' and '_' (not 'job' or 'fio')")


def _machine_argv(artifacts: GuestArtifacts, accel: str, run_dir: Path, memory_mb: int,
                  wrapper: list[str] | None, machine: str) -> list[str]:
    """QEMU, the machine, kernel, consoles and the job's fw_cfg entry: what every boot has."""
    if machine not in MACHINES:
        raise UserError(f"unknown guest machine type '{machine}'", hint=f"use one of {', '.join(MACHINES)}")
    # microvm creates one ISA serial port by itself; the results port is added as a second one.
    results_port = (["-device", "isa-serial,chardev=res"] if machine == "microvm"
                    else ["-serial", "chardev:res"])
    return [
        *(wrapper or []),
        require("qemu-system-x86_64"),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-machine", machine, *accel_args(accel), "-smp", "1", "-m", str(memory_mb),
        "-kernel", str(artifacts.kernel), "-initrd", str(artifacts.initramfs),
        "-append", kernel_cmdline(machine, accel),
        "-chardev", f"file,id=con,path={_opt(run_dir / 'console.log')}", "-serial", "chardev:con",
        "-chardev", "stdio,id=res,signal=off", *results_port,
        "-fw_cfg", f"name=opt/iomatrix/job,file={_opt(run_dir / 'job.env')}",
    ]


def _tarball_args(tarball: Path, machine: str) -> list[str]:
    dev = "virtio-blk-device" if machine == "microvm" else "virtio-blk-pci"
    return ["-blockdev", f"driver=raw,node-name=tar0,read-only=on,file.driver=file,"
                         f"file.filename={_opt(tarball)},file.read-only=on",
            "-device", f"{dev},drive=tar0,serial={TAR_SERIAL}"]


def build_argv(artifacts: GuestArtifacts, accel: str, disk: DiskSpec | None, job: GuestJob, run_dir: Path,
               memory_mb: int = 512, wrapper: list[str] | None = None,
               extra_args: list[str] | None = None, machine: str = "pc") -> list[str]:
    """The full QEMU command line for one run (files referenced live in `run_dir`); `extra_args` (e.g. a
    further disk a kind script uses) go at the end."""
    run_dir = Path(run_dir)
    argv = _machine_argv(artifacts, accel, run_dir, memory_mb, wrapper, machine)
    if job.kind == "fio":
        argv += ["-fw_cfg", f"name=opt/iomatrix/fio,file={_opt(run_dir / 'job.fio')}"]
    for name in job.files:
        argv += ["-fw_cfg", f"name=opt/iomatrix/{name},file={_opt(run_dir / f'file-{name}')}"]
    if disk is not None:
        argv += blockdev_args(disk) + device_args(disk, machine=machine)
    if job.kind in ("fs-read", "fs-write"):
        assert job.tarball is not None
        argv += _tarball_args(job.tarball, machine)
    return argv + list(extra_args or [])


@dataclass
class BatchRun:
    """One run of a multi-run boot: its own fresh disk and its job (kind fio, fs-read or fs-write)."""

    disk: DiskSpec
    job: GuestJob


BATCH_KINDS = ("fio", "fs-read", "fs-write")


def validate_batch(runs: list[BatchRun], machine: str) -> None:
    if not runs:
        raise UserError("a multi-run boot needs at least one run", hint="pass one BatchRun per run")
    buses = {Bus(r.disk.bus) for r in runs}
    if len(buses) != 1:
        raise UserError(f"the runs of one boot must share a bus, got {', '.join(sorted(buses))}",
                        hint="batch the runs of one cell")
    bus = buses.pop()
    if machine == "microvm" and bus not in MICROVM_BUSES:
        raise UserError(f"bus {bus} does not exist on the microvm machine", hint="use machine pc")
    cap = max_runs_per_boot(bus, machine)
    if len(runs) > cap:
        raise UserError(f"{len(runs)} runs in one boot, but {bus} on {machine} carries at most {cap} disks",
                        hint="split the batch")
    for r in runs:
        if r.job.kind not in BATCH_KINDS:
            raise UserError(f"job kind '{r.job.kind}' cannot share a boot",
                            hint=f"batch only {', '.join(BATCH_KINDS)} runs")
        if r.job.files:
            raise UserError("jobs with extra fw_cfg files cannot share a boot", hint="run them one per boot")
        validate_job(r.job)
        validate_disk(r.disk)


def batch_env(artifacts: GuestArtifacts, runs: list[BatchRun], machine: str,
              gate: bool = False) -> tuple[str, list[str]]:
    """(the boot's assignments, one set of assignments per run) for a multi-run boot. `gate`: the guest
    waits for a line on ttyS1 before its first run (see `HostGate`)."""
    modules: list[str] = []
    for r in runs:
        for m in guest_modules(artifacts, r.disk, r.job, machine):
            if m not in modules:
                modules.append(m)
    fs_jobs = any(r.job.kind in ("fs-read", "fs-write") for r in runs)
    boot = {"IOMX_KIND": "batch", "IOMX_RUNS": str(len(runs)), "IOMX_MODULES": " ".join(modules),
            "IOMX_TAR_SERIAL": TAR_SERIAL if fs_jobs else "", "IOMX_DISK_SERIAL": ""}
    if gate:
        boot["IOMX_GATE"] = "1"
    per_run = [_shell(_job_vars(r.job, batch_serial(i))) for i, r in enumerate(runs, 1)]
    return _shell(boot), per_run


def build_batch_argv(artifacts: GuestArtifacts, accel: str, runs: list[BatchRun], run_dir: Path,
                     memory_mb: int = 512, wrapper: list[str] | None = None, machine: str = "pc") -> list[str]:
    """The QEMU command line of a multi-run boot: one disk, serial and job per run."""
    run_dir = Path(run_dir)
    argv = _machine_argv(artifacts, accel, run_dir, memory_mb, wrapper, machine)
    argv += controller_args(runs[0].disk.bus, machine)
    tarballs = {r.job.tarball for r in runs if r.job.kind in ("fs-read", "fs-write")}
    if len(tarballs) > 1:
        raise UserError("the filesystem runs of one boot must share a tarball", hint="use ensure_tarball()")
    for i, r in enumerate(runs, 1):
        argv += ["-fw_cfg", f"name=opt/iomatrix/job{i},file={_opt(run_dir / f'job{i}.env')}"]
        if r.job.kind == "fio":
            argv += ["-fw_cfg", f"name=opt/iomatrix/fio{i},file={_opt(run_dir / f'job{i}.fio')}"]
        node = f"d{i}"
        argv += blockdev_args(r.disk, node) + disk_device_args(r.disk, node, batch_serial(i), i - 1, machine)
    if tarballs:
        tarball = tarballs.pop()
        assert tarball is not None
        argv += _tarball_args(tarball, machine)
    return argv


# --------------------------------------------------------------------------- results


_MARK = re.compile(r"@@IOMX:MARK:([A-Za-z0-9_]+):([0-9.]+)@@")
_BEGIN = re.compile(r"@@IOMX:BEGIN:([A-Za-z0-9_]+)@@")


@dataclass
class ResultStream:
    marks: dict[str, float]
    blocks: dict[str, str]


def parse_result_stream(text: str) -> ResultStream:
    """Marks and delimited blocks from the ttyS1 capture (CRs and stray text tolerated)."""
    text = text.replace("\r", "")
    marks: dict[str, float] = {}
    for m in _MARK.finditer(text):
        marks.setdefault(m.group(1), float(m.group(2)))
    blocks: dict[str, str] = {}
    for m in _BEGIN.finditer(text):
        name = m.group(1)
        end = text.find(f"@@IOMX:END:{name}@@", m.end())
        if end >= 0:
            blocks.setdefault(name, text[m.end():end].strip("\n"))
    return ResultStream(marks, blocks)


def extract_fio_json(text: str) -> dict | None:
    """The fio JSON object in `text`, skipping anything fio printed around it (fio#731: error or log
    lines can land in --output before or after the JSON). Returns None if there is none."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^\{", text)]
    starts += [i for i in (m.start() for m in re.finditer(r"\{", text)) if i not in set(starts)]
    for i in starts:
        try:
            obj, _end = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(obj, dict) and "jobs" in obj:
            return obj
    return None


def fs_result_from_block(text: str) -> dict | None:
    """The fs block → {"fs", "steps": {name: seconds}, "timed_s", "untimed_s"}."""
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    steps = {s["name"]: round(float(s["end"]) - float(s["start"]), 3) for s in raw.get("steps", [])}
    untimed = {"mkfs", "mount", "populate_extract", "populate_copy", "drop_caches"}
    return {
        "fs": raw.get("fs"),
        "steps": steps,
        "timed_s": round(sum(v for k, v in steps.items() if k not in untimed), 3),
        "untimed_s": round(sum(v for k, v in steps.items() if k in untimed), 3),
    }


def console_tail(path: Path, lines: int = CONSOLE_TAIL_LINES) -> str:
    try:
        data = path.read_bytes()[-64 * 1024:]
    except OSError:
        return ""
    return last_lines(data.decode("utf-8", "replace").replace("\r", ""), lines)


# --------------------------------------------------------------------------- live children


def kill_all_guests() -> int:
    """SIGKILL every child still running (QEMU, and whatever else this process started)."""
    return children.kill_all()


def live_guest_pids() -> list[int]:
    return children.live_pids()


# --------------------------------------------------------------------------- run


class _Reader(threading.Thread):
    """Reads QEMU's stdout (ttyS1), keeps it, and stamps each mark with the host clock on arrival."""

    def __init__(self, stream, sink: Path, on_line: Callable[[str, float], None] | None = None) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.sink = sink
        self.on_line = on_line
        self.chunks: list[bytes] = []
        self.host_marks: dict[str, float] = {}

    def run(self) -> None:
        with open(self.sink, "wb") as out:
            for line in iter(self.stream.readline, b""):
                now = time.monotonic()
                self.chunks.append(line)
                out.write(line)
                text = line.decode("utf-8", "replace")
                for m in _MARK.finditer(text):
                    self.host_marks.setdefault(m.group(1), now)
                if self.on_line is not None:
                    self.on_line(text, now)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def _phases(t_spawn: float, t_exit: float, host: dict[str, float], guest: dict[str, float]) -> dict[str, float]:
    ph: dict[str, float] = {"wall_s": round(t_exit - t_spawn, 3)}
    if "init" in host and "init" in guest:
        # Before the guest clock starts: process start, firmware, kernel/initrd load.
        ph["qemu_start_s"] = round(max(0.0, host["init"] - t_spawn - guest["init"]), 3)
        ph["guest_init_s"] = round(guest["init"], 3)  # guest kernel start -> /init
    if "modules" in guest and "init" in guest:
        ph["module_load_s"] = round(guest["modules"] - guest["init"], 3)
    if "workload_start" in host and "qemu_start_s" in ph:
        ph["boot_to_workload_s"] = round(host["workload_start"] - t_spawn - ph["qemu_start_s"], 3)
    if "workload_start" in guest and "workload_end" in guest:
        ph["workload_s"] = round(guest["workload_end"] - guest["workload_start"], 3)
    if "workload_end" in host:
        ph["shutdown_s"] = round(max(0.0, t_exit - host["workload_end"]), 3)
    return ph


class GuestHandle:
    """A started guest: `wait` for it (with a timeout), or `kill` it. Several may run at once."""

    def __init__(self, proc: subprocess.Popen, reader: _Reader, argv: list[str], run_dir: Path, job: GuestJob,
                 t_spawn: float, stderr_file: object) -> None:
        self.proc = proc
        self.reader = reader
        self.argv = argv
        self.run_dir = run_dir
        self.job = job
        self.t_spawn = t_spawn
        self._stderr_file = stderr_file
        self._error: str | None = None
        self._t_exit: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self, why: str | None = None) -> None:
        if self.proc.poll() is None and why and self._error is None:
            self._error = why
        self._finish(kill=True)

    def _finish(self, kill: bool = False) -> None:
        if self._t_exit is None:
            self._t_exit = time.monotonic()
        if kill:
            children.kill(self.proc)
        children.release(self.proc)
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self._stderr_file.close()  # type: ignore[attr-defined]

    def wait(self, timeout: float) -> GuestOutcome:
        """Wait until the guest powers off (or kill it after `timeout` s) and read what it reported."""
        try:
            rc = self.proc.wait(timeout=timeout)
            self._t_exit = time.monotonic()
            if rc != 0 and self._error is None:
                self._error = f"QEMU exited with status {rc}"
        except subprocess.TimeoutExpired:
            self._t_exit = time.monotonic()
            self._error = f"guest did not finish within {timeout:g} s: killed QEMU (pid {self.proc.pid})"
        finally:
            self._finish(kill=True)
        return self._outcome()

    def _outcome(self) -> GuestOutcome:
        job, reader, error = self.job, self.reader, self._error
        stream = parse_result_stream(reader.text())
        assert self._t_exit is not None
        phases = _phases(self.t_spawn, self._t_exit, reader.host_marks, stream.marks)
        stderr_text = (self.run_dir / "qemu-stderr.log").read_text(errors="replace").strip()
        if error and stderr_text and "exited with status" in error:
            error += f": {stderr_text.splitlines()[-1]}"
        if error is None and "done" not in stream.marks and "error" not in stream.blocks:
            error = "guest stopped without reporting completion"
        return _run_outcome(stream, job, phases, error, self.argv, self.proc.pid,
                            console_tail(self.run_dir / "console.log"))

    def wait_batch(self, n_runs: int, run_timeout: float, poll_s: float = 0.2) -> int:
        """Wait for a multi-run boot: kill QEMU once a run (the first one with the boot) has taken longer
        than `run_timeout` s since the previous run ended. Returns how many runs reported their end."""
        def ended() -> int:
            return sum(1 for i in range(1, n_runs + 1) if f"run_end_r{i}" in self.reader.host_marks)

        try:
            while True:
                done = ended()
                last = max([self.t_spawn] + [self.reader.host_marks[f"run_end_r{i}"] for i in range(1, done + 1)
                                             if f"run_end_r{i}" in self.reader.host_marks])
                left = last + run_timeout - time.monotonic()
                if left <= 0:
                    self._t_exit = time.monotonic()
                    self._error = (f"guest run {done + 1} of {n_runs} did not finish within {run_timeout:g} s: "
                                   f"killed QEMU (pid {self.proc.pid})")
                    break
                try:
                    rc = self.proc.wait(timeout=min(poll_s, left))
                except subprocess.TimeoutExpired:
                    continue
                self._t_exit = time.monotonic()
                if rc != 0 and self._error is None:
                    self._error = f"QEMU exited with status {rc}"
                break
        finally:
            self._finish(kill=True)
        return ended()


def _run_outcome(stream: ResultStream, job: GuestJob, phases: dict[str, float], error: str | None,
                 argv: list[str], pid: int | None, tail: str) -> GuestOutcome:
    """One run's outcome from its marks and blocks (names without a run suffix)."""
    if "error" in stream.blocks:
        error = (error + "; " if error else "") + "guest: " + " | ".join(stream.blocks["error"].splitlines())
    disk_info = None
    if "disk" in stream.blocks:
        with contextlib.suppress(ValueError):
            disk_info = json.loads(stream.blocks["disk"])
    fio_json = extract_fio_json(stream.blocks["fio"]) if "fio" in stream.blocks else None
    fs_result = fs_result_from_block(stream.blocks["fs"]) if "fs" in stream.blocks else None
    if error is None:
        if job.kind == "fio" and fio_json is None:
            error = "guest fio produced no parsable JSON"
        elif job.kind in ("fs-read", "fs-write") and fs_result is None:
            error = "guest filesystem job produced no result"
    return GuestOutcome(
        ok=error is None, fio_json=fio_json, fs_result=fs_result, phases=phases,
        iops_log=stream.blocks.get("iopslog"), console_tail=tail, error=error, qemu_argv=argv,
        qemu_pid=pid, disk_info=disk_info, marks=stream.marks,
    )


def _run_view(stream: ResultStream, index: int) -> ResultStream:
    """Run `index`'s marks and blocks of a multi-run boot, with the `_r<index>` suffix removed."""
    sfx = f"_r{index}"
    return ResultStream({k[: -len(sfx)]: v for k, v in stream.marks.items() if k.endswith(sfx)},
                        {k[: -len(sfx)]: v for k, v in stream.blocks.items() if k.endswith(sfx)})


@dataclass
class BatchOutcome:
    """A multi-run boot. `runs[i]` is None for a run that never started (the guest died before it):
    the caller retries those in a new boot."""

    runs: list[GuestOutcome | None]
    boot_phases: dict[str, float]  # qemu_start_s, guest_init_s, module_load_s, boot_to_workload_s, wall_s
    machine: str
    error: str | None  # what ended the boot early, if anything
    console_tail: str = ""
    qemu_argv: list[str] = field(default_factory=list)


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a multi-run boot, after QEMU was killed: `batch` has the runs that reported
    their end (the run in flight and the ones after it are None)."""

    def __init__(self, batch: BatchOutcome) -> None:
        super().__init__()
        self.batch = batch


def _batch_outcome(handle: GuestHandle, runs: list[BatchRun], machine: str) -> BatchOutcome:
    reader = handle.reader
    stream = parse_result_stream(reader.text())
    host = dict(reader.host_marks)
    assert handle._t_exit is not None
    boot = _phases(handle.t_spawn, handle._t_exit, host, stream.marks)
    boot.pop("workload_s", None)
    if "run_start_r1" in host and "qemu_start_s" in boot:
        boot["boot_to_workload_s"] = round(host["run_start_r1"] - handle.t_spawn - boot["qemu_start_s"], 3)
    error = handle._error
    stderr_text = (handle.run_dir / "qemu-stderr.log").read_text(errors="replace").strip()
    if error and stderr_text and "exited with status" in error:
        error += f": {stderr_text.splitlines()[-1]}"
    tail = console_tail(handle.run_dir / "console.log")
    outs: list[GuestOutcome | None] = []
    prev_end = handle.t_spawn
    for i, r in enumerate(runs, 1):
        if f"run_start_r{i}" not in host:
            outs.append(None)
            continue
        view = _run_view(stream, i)
        end = host.get(f"run_end_r{i}")
        ph: dict[str, float] = {}
        if "workload_start" in view.marks and "workload_end" in view.marks:
            ph["workload_s"] = round(view.marks["workload_end"] - view.marks["workload_start"], 3)
        # The run's share of the boot's wall time: from the previous run's end (the QEMU spawn for the
        # first run, so it carries the boot) to its own end; the last run carries the shutdown.
        stop = end if end is not None else handle._t_exit
        if i == len(runs) and end is not None:
            stop = handle._t_exit
            ph["shutdown_s"] = round(max(0.0, handle._t_exit - end), 3)
        ph["wall_s"] = round(stop - prev_end, 3)
        if i == 1:
            ph.update({k: v for k, v in boot.items() if k in ("qemu_start_s", "guest_init_s", "module_load_s",
                                                              "boot_to_workload_s")})
        elif "run_start" in view.marks and f"run_end_r{i - 1}" in stream.marks:
            ph["between_runs_s"] = round(view.marks["run_start"] - stream.marks[f"run_end_r{i - 1}"], 3)
        if "run_start" in view.marks and "workload_start" in view.marks:
            ph["run_setup_s"] = round(view.marks["workload_start"] - view.marks["run_start"], 3)
        run_error = None if end is not None else (error or "guest stopped during this run")
        outs.append(_run_outcome(view, r.job, ph, run_error, handle.argv, handle.proc.pid, tail))
        if end is not None:
            prev_end = end
    if error is None and "done" not in stream.marks:
        error = "guest stopped without reporting completion"
    return BatchOutcome(outs, boot, machine, error, tail, handle.argv)


class HostGate:
    """Holds a multi-run guest before its first run until `ready()` has returned on the host.

    `ready` (e.g. removing the previous boot's images, sync + drop caches) runs in a thread from QEMU's
    spawn on, so it overlaps QEMU's start and the guest's boot; the guest marks `gate_wait` and reads a
    line from ttyS1, which the host writes once `ready` is done and the guest waits (repeatedly, until
    `gate_open` arrives: input sent before the guest opens the port is lost). So the host's own work never
    meets a measured run. `ready_s`: how long `ready` took; `waited_s`: how long the guest waited for it."""

    def __init__(self, ready: Callable[[], None]) -> None:
        self._ready = ready
        self._at_gate = threading.Event()
        self._opened = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.ready_s: float | None = None
        self.waited_s: float | None = None
        self._t_at_gate: float | None = None

    def on_line(self, text: str, now: float) -> None:
        if "@@IOMX:MARK:gate_wait:" in text:
            self._t_at_gate = now
            self._at_gate.set()
        if "@@IOMX:MARK:gate_open:" in text:
            self._opened.set()

    def start(self, proc: subprocess.Popen) -> None:
        self._thread = threading.Thread(target=self._run, args=(proc,), name="iomatrix-host-gate", daemon=True)
        self._thread.start()

    def _run(self, proc: subprocess.Popen) -> None:
        t0 = time.monotonic()
        try:
            self._ready()
        except BaseException as err:  # reported by the caller; the guest still runs (its runs are judged)
            self.error = err
        t_ready = time.monotonic()
        self.ready_s = round(t_ready - t0, 3)
        while proc.poll() is None and not self._at_gate.wait(0.1):
            pass
        if self._t_at_gate is not None:
            self.waited_s = round(max(0.0, t_ready - self._t_at_gate), 3)
        while proc.poll() is None and not self._opened.is_set():
            try:
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                break
            self._opened.wait(0.2)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()


def start_guest_batch(artifacts: GuestArtifacts, accel: str, runs: list[BatchRun], run_dir: Path,
                      wrapper: list[str] | None = None, memory_mb: int = 512, machine: str = "pc",
                      gate: HostGate | None = None) -> GuestHandle:
    """Boot one guest that runs `runs` one after another, each on its own disk, and return at once."""
    validate_batch(runs, machine)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    boot_env, per_run = batch_env(artifacts, runs, machine, gate=gate is not None)
    (run_dir / "job.env").write_text(boot_env)
    for i, (r, env) in enumerate(zip(runs, per_run, strict=True), 1):
        (run_dir / f"job{i}.env").write_text(env)
        if r.job.kind == "fio":
            text = r.job.fio_job
            (run_dir / f"job{i}.fio").write_text(text if text.endswith("\n") else text + "\n")
    argv = build_batch_argv(artifacts, accel, runs, run_dir, memory_mb, wrapper, machine)
    handle = _spawn(argv, run_dir, GuestJob(kind="batch"), None if gate is None else gate.on_line,
                    stdin_pipe=gate is not None)
    if gate is not None:
        gate.start(handle.proc)
    return handle


def run_guest_batch(artifacts: GuestArtifacts, accel: str, runs: list[BatchRun], run_dir: Path,
                    run_timeout: float, on_start: Callable[[int], None] | None = None,
                    wrapper: list[str] | None = None, memory_mb: int = 512, machine: str = "pc",
                    host_ready: Callable[[], None] | None = None) -> BatchOutcome:
    """Boot one guest for several runs. A run that takes longer than `run_timeout` s (the first one
    including the boot) gets QEMU killed: runs that ended are kept, the run in flight fails, the runs that
    never started come back as None. `host_ready`: host work that may overlap the boot but no run (see
    `HostGate`); it has returned when this returns, and its time is in `boot_phases` (`host_ready_s`,
    `gate_wait_s`: how long the guest waited for it)."""
    gate = None if host_ready is None else HostGate(host_ready)
    with children.SigtermGuard():
        try:
            handle = start_guest_batch(artifacts, accel, runs, run_dir, wrapper=wrapper, memory_mb=memory_mb,
                                       machine=machine, gate=gate)
        except BaseException:
            if host_ready is not None:
                host_ready()  # it must have run when this returns, boot or not
            raise
        try:
            if on_start is not None:
                on_start(handle.pid)
            handle.wait_batch(len(runs), run_timeout)  # kills QEMU on its way out, interrupted or not
        except KeyboardInterrupt as intr:
            handle.kill()  # also when the interrupt came before wait_batch
            if gate is not None:
                gate.join()
            try:
                partial = _batch_outcome(handle, runs, machine)
            except Exception:  # what the guest reported cannot be read: the interrupt itself still stops us
                raise intr from None
            partial.runs = [r if f"run_end_r{i}" in handle.reader.host_marks else None
                            for i, r in enumerate(partial.runs, 1)]
            raise BatchInterrupted(partial) from intr
        finally:
            handle.kill()
            if gate is not None:
                gate.join()
        out = _batch_outcome(handle, runs, machine)
        if gate is not None:
            if gate.ready_s is not None:
                out.boot_phases["host_ready_s"] = gate.ready_s
            if gate.waited_s is not None:
                out.boot_phases["gate_wait_s"] = gate.waited_s
            if gate.error is not None:
                raise gate.error
        return out


def _spawn(argv: list[str], run_dir: Path, job: GuestJob,
           on_line: Callable[[str, float], None] | None = None, stdin_pipe: bool = False) -> GuestHandle:
    (run_dir / "qemu.argv").write_text(shlex.join(argv) + "\n")
    (run_dir / "console.log").unlink(missing_ok=True)
    err = open(run_dir / "qemu-stderr.log", "wb")  # noqa: SIM115 - closed by the handle
    try:
        t_spawn = time.monotonic()
        # stdin is ttyS1's input: a pipe only when the host opens a gate with it (HostGate).
        proc = children.spawn(argv, stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=err)
    except BaseException:
        err.close()
        raise
    reader = _Reader(proc.stdout, run_dir / "results.log", on_line)
    reader.start()
    return GuestHandle(proc, reader, argv, run_dir, job, t_spawn, err)


def start_guest(artifacts: GuestArtifacts, accel: str, disk: DiskSpec | None, job: GuestJob,
                run_dir: Path, wrapper: list[str] | None = None, memory_mb: int = 512,
                extra_args: list[str] | None = None,
                on_line: Callable[[str, float], None] | None = None, machine: str = "pc") -> GuestHandle:
    """Boot one guest that will run `job` against `disk`, and return at once.

    `on_line(text, host_monotonic_time)` is called from the reader thread for every ttyS1 line as it arrives
    (a tier that acts on the guest's progress, e.g. cuts it at an acknowledgement).

    Files written to `run_dir`: console.log, results.log (ttyS1), job.env, job.fio, qemu-stderr.log,
    qemu.argv.
    """
    validate_job(job)
    if disk is not None:
        validate_disk(disk)
    if disk is None and job.kind in BUILTIN_KINDS and job.kind != "boot":  # kind scripts decide for themselves
        raise UserError(f"a {job.kind} job needs a disk", hint="pass a DiskSpec")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.env").write_text(job_env(artifacts, disk, job, machine))
    if job.kind == "fio":
        (run_dir / "job.fio").write_text(job.fio_job if job.fio_job.endswith("\n") else job.fio_job + "\n")
    for name, text in job.files.items():
        (run_dir / f"file-{name}").write_text(text)
    argv = build_argv(artifacts, accel, disk, job, run_dir, memory_mb, wrapper, extra_args, machine)
    return _spawn(argv, run_dir, job, on_line)


def run_guest(artifacts: GuestArtifacts, accel: str, disk: DiskSpec | None, job: GuestJob,
              run_dir: Path, timeout: float, on_start: Callable[[int], None] | None = None,
              wrapper: list[str] | None = None, memory_mb: int = 512, machine: str = "pc") -> GuestOutcome:
    """Boot one guest, run `job` against `disk`, and return what happened.

    The guest is killed by its pid after `timeout` seconds (ok=False, console tail kept).
    """
    with children.SigtermGuard():
        handle = start_guest(artifacts, accel, disk, job, run_dir, wrapper=wrapper, memory_mb=memory_mb,
                             machine=machine)
        try:
            if on_start is not None:
                on_start(handle.pid)
            return handle.wait(timeout)
        finally:
            handle.kill()
