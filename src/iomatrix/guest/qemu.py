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
`GuestHandle.wait`; `run_guest` does both. QEMU is a child of `iomatrix.children`: registered until
reaped, killed with iomatrix (parent-death signal), and killed by `kill_all_guests()` on interrupt.
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
from iomatrix.guest.kernel import BUS_MODULES, FS_MODULES
from iomatrix.hostcmd import require
from iomatrix.qemu_block import DiskSpec, blockdev_args, validate_disk, write_cache
from iomatrix.qemu_block import onoff as _onoff
from iomatrix.qemu_block import qemu_opt as _opt

DISK_SERIAL = "iomx-test"
TAR_SERIAL = "iomx-tar"
KERNEL_CMDLINE = (
    "console=ttyS0 quiet panic=-1 rdinit=/init 8250.nr_uarts=2 mitigations=off cryptomgr.notests "
    "tsc=reliable no_timer_check random.trust_cpu=on i8042.noaux i8042.nopnp"
)
CONSOLE_TAIL_LINES = 40

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


def device_args(disk: DiskSpec, node: str = "d0", serial: str = DISK_SERIAL, report_errors: bool = True) -> list[str]:
    """`-device` options attaching `node` on the disk's bus, with write-cache from the cache mode.

    `report_errors`: werror=report,rerror=report, so an I/O error (ENOSPC on the host) fails the guest's
    request instead of pausing the VM (QEMU's default werror=enospc), which would leave the run to time out
    with no reason given.
    """
    bus = Bus(disk.bus)
    # Each bus but virtio-blk and nvme needs a controller the disk sits on.
    controller = {Bus.VIRTIO_SCSI: (["-device", "virtio-scsi-pci,id=scsi0"], ",bus=scsi0.0"),
                  Bus.IDE: ([], ",bus=ide.0"),
                  Bus.SATA: (["-device", "ahci,id=ahci0"], ",bus=ahci0.0")}
    extra, on_bus = controller.get(bus, ([], ""))
    wc = _onoff(write_cache(disk.cache))
    policy = ",werror=report,rerror=report" if report_errors and BUS[bus].error_policy else ""
    return [*extra, "-device",
            f"{BUS[bus].qemu_device},drive={node}{on_bus},serial={serial},write-cache={wc}{policy}"]


def accel_args(accel: str) -> list[str]:
    if accel == "kvm":
        return ["-accel", "kvm", "-cpu", "host"]
    if accel == "tcg":
        return ["-accel", "tcg,thread=multi", "-cpu", "max"]
    raise UserError(f"unknown accelerator '{accel}'", hint="use kvm or tcg")


def guest_modules(artifacts: GuestArtifacts, disk: DiskSpec | None, job: GuestJob) -> list[str]:
    """Relative .ko paths this run must insmod, dependencies first (qemu_fw_cfg is loaded by init)."""
    names: list[str] = []
    if disk is not None and job.kind != "boot":
        names += BUS_MODULES[disk.bus]
    if job.kind in ("fs-read", "fs-write"):
        names += BUS_MODULES["virtio-blk"]  # the tarball disk
        names += FS_MODULES[job.fs]
    names += job.modules
    return artifacts.modules_for(names)


def job_env(artifacts: GuestArtifacts, disk: DiskSpec | None, job: GuestJob) -> str:
    """The shell assignments init.sh sources from fw_cfg opt/iomatrix/job."""
    env = {
        "IOMX_KIND": job.kind,
        "IOMX_MODULES": " ".join(guest_modules(artifacts, disk, job)),
        "IOMX_DISK_SERIAL": DISK_SERIAL if (disk is not None and job.kind != "boot") else "",
        "IOMX_TAR_SERIAL": TAR_SERIAL if job.kind in ("fs-read", "fs-write") else "",
        "IOMX_FS": job.fs,
        "IOMX_WRITE_MB": str(int(job.write_mb)),
        "IOMX_WRITE_COUNT": str(int(job.write_count)),
        **job.env,
    }
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items())


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


def build_argv(artifacts: GuestArtifacts, accel: str, disk: DiskSpec | None, job: GuestJob, run_dir: Path,
               memory_mb: int = 512, wrapper: list[str] | None = None,
               extra_args: list[str] | None = None) -> list[str]:
    """The full QEMU command line for one run (files referenced live in `run_dir`); `extra_args` (e.g. a
    further disk a kind script uses) go at the end."""
    run_dir = Path(run_dir)
    argv = [
        *(wrapper or []),
        require("qemu-system-x86_64"),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-machine", "pc", *accel_args(accel), "-smp", "1", "-m", str(memory_mb),
        "-kernel", str(artifacts.kernel), "-initrd", str(artifacts.initramfs),
        "-append", KERNEL_CMDLINE,
        "-chardev", f"file,id=con,path={_opt(run_dir / 'console.log')}", "-serial", "chardev:con",
        "-chardev", "stdio,id=res,signal=off", "-serial", "chardev:res",
        "-fw_cfg", f"name=opt/iomatrix/job,file={_opt(run_dir / 'job.env')}",
    ]
    if job.kind == "fio":
        argv += ["-fw_cfg", f"name=opt/iomatrix/fio,file={_opt(run_dir / 'job.fio')}"]
    for name in job.files:
        argv += ["-fw_cfg", f"name=opt/iomatrix/{name},file={_opt(run_dir / f'file-{name}')}"]
    if disk is not None:
        argv += blockdev_args(disk) + device_args(disk)
    if job.kind in ("fs-read", "fs-write"):
        assert job.tarball is not None
        argv += ["-blockdev", f"driver=raw,node-name=tar0,read-only=on,file.driver=file,"
                              f"file.filename={_opt(job.tarball)},file.read-only=on",
                 "-device", f"virtio-blk-pci,drive=tar0,serial={TAR_SERIAL}"]
    return argv + list(extra_args or [])


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
    text = data.decode("utf-8", "replace").replace("\r", "")
    return "\n".join(text.splitlines()[-lines:])


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
        if "error" in stream.blocks:
            error = (error + "; " if error else "") + "guest: " + " | ".join(stream.blocks["error"].splitlines())
        disk_info = None
        if "disk" in stream.blocks:
            with contextlib.suppress(ValueError):
                disk_info = json.loads(stream.blocks["disk"])
        fio_json = extract_fio_json(stream.blocks["fio"]) if "fio" in stream.blocks else None
        fs_result = fs_result_from_block(stream.blocks["fs"]) if "fs" in stream.blocks else None
        if error is None:
            if "done" not in stream.marks:
                error = "guest stopped without reporting completion"
            elif job.kind == "fio" and fio_json is None:
                error = "guest fio produced no parsable JSON"
            elif job.kind in ("fs-read", "fs-write") and fs_result is None:
                error = "guest filesystem job produced no result"
        return GuestOutcome(
            ok=error is None, fio_json=fio_json, fs_result=fs_result, phases=phases,
            iops_log=stream.blocks.get("iopslog"),
            console_tail=console_tail(self.run_dir / "console.log"), error=error, qemu_argv=self.argv,
            qemu_pid=self.proc.pid, disk_info=disk_info, marks=stream.marks,
        )


def start_guest(artifacts: GuestArtifacts, accel: str, disk: DiskSpec | None, job: GuestJob,
                run_dir: Path, wrapper: list[str] | None = None, memory_mb: int = 512,
                extra_args: list[str] | None = None,
                on_line: Callable[[str, float], None] | None = None) -> GuestHandle:
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
    (run_dir / "job.env").write_text(job_env(artifacts, disk, job))
    if job.kind == "fio":
        (run_dir / "job.fio").write_text(job.fio_job if job.fio_job.endswith("\n") else job.fio_job + "\n")
    for name, text in job.files.items():
        (run_dir / f"file-{name}").write_text(text)
    argv = build_argv(artifacts, accel, disk, job, run_dir, memory_mb, wrapper, extra_args)
    (run_dir / "qemu.argv").write_text(shlex.join(argv) + "\n")
    (run_dir / "console.log").unlink(missing_ok=True)
    err = open(run_dir / "qemu-stderr.log", "wb")  # noqa: SIM115 - closed by the handle
    try:
        t_spawn = time.monotonic()
        proc = children.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
    except BaseException:
        err.close()
        raise
    reader = _Reader(proc.stdout, run_dir / "results.log", on_line)
    reader.start()
    return GuestHandle(proc, reader, argv, run_dir, job, t_spawn, err)


def run_guest(artifacts: GuestArtifacts, accel: str, disk: DiskSpec | None, job: GuestJob,
              run_dir: Path, timeout: float, on_start: Callable[[int], None] | None = None,
              wrapper: list[str] | None = None, memory_mb: int = 512) -> GuestOutcome:
    """Boot one guest, run `job` against `disk`, and return what happened.

    The guest is killed by its pid after `timeout` seconds (ok=False, console tail kept).
    """
    with children.SigtermGuard():
        handle = start_guest(artifacts, accel, disk, job, run_dir, wrapper=wrapper, memory_mb=memory_mb)
        try:
            if on_start is not None:
                on_start(handle.pid)
            return handle.wait(timeout)
        finally:
            handle.kill()
