"""Boot a real distribution image under QEMU and drive it through its guest agent.

Where the built-in guest (`guest.process`) boots a kernel and an initramfs that run one job and
power off, a real guest boots an image's own userspace (systemd, udev, the distribution's kernel and
drivers) and stays up: the host runs commands in it with `guest-exec` (`guest.agent`), reads their
output, and kills QEMU when done.

- **The image is never written.** Each boot makes a fresh qcow2 overlay of it in the run directory
  (`qemu-img create -b`); QEMU opens the image itself only read-only, as the overlay's backing file.
  The overlay is removed when the guest is closed.
- **Launch**: as the built-in guest tier launches (`guest.cmdline.accel_args`: `-accel
  tcg,thread=multi -cpu max` under TCG, `-nodefaults`, `-no-reboot`, the console on ttyS0 into
  `console.log`), machine `pc`, the kernel and initramfs given directly when the image comes with
  them (`BootImage.kernel`).
- **Agent**: a virtio-serial port named org.qemu.guest_agent.0 on a unix socket chardev in the run
  directory (`qga.sock`; under /tmp when the run directory's path is too long for a unix socket).
- **Disks under test**: each `DiskSpec` through `qemu_block.disk_args`, exactly as the guest tier
  attaches its disk (bus, cache, aio, format, queues, iothread, …), the first with the serial
  `iomx-test`, the others `iomx-test1`, `iomx-test2`, … (`disk_serial`: one per run of a shared
  boot); vCPUs from the disks' queues (`qemu_block.guest_cpus`: blk-mq uses at most one queue
  per vCPU).
- **Bounded**: `boot()` waits for `guest-ping` at most the limit its measured boots set
  (`boot_limit_s`: BOOT_LIMIT_FACTOR × the longest of this image's last boots on this host under
  this accelerator, stored in the cache's boot-times.json, never under a floor; without any, a
  limit per accelerator), and never past the caller's own limit. While it waits a line every 30 s
  says how long so far and what the console shows; on the limit or an early QEMU exit, one line
  with the last console lines, or, when the console stayed empty, that the image did not start a
  kernel (no agent can answer then, so blaming the agent misleads).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from iomatrix import children
from iomatrix.errors import UserError
from iomatrix.guest.agent import AgentTimeout, ExecResult, GuestAgent, wait_for_agent
from iomatrix.guest.cache import default_cache_dir
from iomatrix.guest.cmdline import accel_args
from iomatrix.guest.process import console_tail
from iomatrix.hostcmd import require
from iomatrix.qemu_block import DISK_SERIAL, DiskSpec, disk_args, guest_cpus, validate_disk
from iomatrix.qemu_block import qemu_opt as _opt

AGENT_PORT = "org.qemu.guest_agent.0"
ROOT_SERIAL = "iomx-root"
UNIX_PATH_MAX = 107  # sun_path's 108 bytes, with the terminating NUL
# a Debian boot under TCG on a loaded 2-core host: ~1 min; ten times that is a hang
BOOT_LIMIT_S = 600.0
# The limit a boot gets from this image's measured boots: FACTOR × the longest of the last
# KEPT_BOOTS, at least the floor. Measured (tests/test_real_guest.py, load ~3 on 2 cores): the
# Debian image's agent after 83 s under TCG; a loaded host swings a TCG boot about 3-fold, so 4×
# still passes a slow boot, and the floor keeps a short first measurement from failing the next
# under load. Under KVM a boot takes seconds: its floor is lower.
BOOT_LIMIT_FACTOR = 4.0
BOOT_LIMIT_FLOOR_S = {"tcg": 180.0, "kvm": 60.0}
# No boot of this image measured yet under this accelerator.
UNMEASURED_BOOT_LIMIT_S = {"tcg": BOOT_LIMIT_S, "kvm": 180.0}
KEPT_BOOTS = 10
BOOT_TIMES_FILE = "boot-times.json"
# How often a line says the guest is still booting.
BOOT_PROGRESS_S = 30.0


@dataclass(frozen=True)
class BootImage:
    """What to boot: `path` (never written) in `format`, with the kernel, initramfs and command line
    QEMU loads directly when given (else the image's own boot loader through the firmware)."""

    path: Path
    format: str = "qcow2"
    kernel: Path | None = None
    initrd: Path | None = None
    cmdline: str = ""


def overlay_argv(image: BootImage, overlay: Path) -> list[str]:
    return [
        require("qemu-img"),
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        image.format,
        "-b",
        str(image.path.resolve()),
        str(overlay),
    ]


def agent_socket_path(run_dir: Path) -> Path | None:
    """`run_dir`/qga.sock, or None when that path is too long for a unix socket."""
    path = run_dir.resolve() / "qga.sock"
    return path if len(str(path).encode()) <= UNIX_PATH_MAX else None


def real_guest_argv(
    image: BootImage,
    overlay: Path,
    run_dir: Path,
    agent_socket: Path,
    accel: str,
    disks: Sequence[DiskSpec] = (),
    memory_mb: int = 1024,
    wrapper: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The QEMU command line of a real guest (pure: nothing started or written)."""
    argv = [
        *wrapper,
        require("qemu-system-x86_64"),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-machine",
        "pc",
        *accel_args(accel),
        "-smp",
        str(guest_cpus(disks)),
        "-m",
        str(memory_mb),
    ]
    if image.kernel is not None:
        argv += ["-kernel", str(image.kernel)]
        if image.initrd is not None:
            argv += ["-initrd", str(image.initrd)]
        argv += ["-append", image.cmdline]
    argv += [
        "-chardev",
        f"file,id=con,path={_opt(run_dir / 'console.log')}",
        "-serial",
        "chardev:con",
        # The root disk first: the guest's first virtio disk (vda), the disks under test after it.
        "-blockdev",
        f"driver=qcow2,node-name=root,file.driver=file,file.filename={_opt(overlay)}",
        # Through the firmware the root disk is the first boot device (a -kernel boot holds
        # bootindex 0 itself).
        "-device",
        f"virtio-blk-pci,drive=root,serial={ROOT_SERIAL}"
        + (",bootindex=0" if image.kernel is None else ""),
        "-chardev",
        f"socket,id=qga,path={_opt(agent_socket)},server=on,wait=off",
        "-device",
        "virtio-serial-pci,id=vser0",
        "-device",
        f"virtserialport,bus=vser0.0,chardev=qga,name={AGENT_PORT}",
    ]
    for i, disk in enumerate(disks):
        argv += disk_args(disk, f"d{i}", disk_serial(i), machine="pc")
    return argv + list(extra_args)


def disk_serial(position: int) -> str:
    """The serial of the disk under test at `position` of a boot: `iomx-test`, then `iomx-test1`,
    `iomx-test2`, … (the guest finds each by its exact serial: `disk_view`)."""
    return DISK_SERIAL if position == 0 else f"{DISK_SERIAL}{position}"


class RealGuest:
    """A booted real guest: run commands in it, then `close()` (kills QEMU, removes the overlay)."""

    def __init__(
        self,
        proc: subprocess.Popen,
        agent: GuestAgent,
        run_dir: Path,
        overlay: Path,
        socket_dir: Path | None,
        argv: list[str],
    ) -> None:
        self.proc = proc
        self.agent = agent
        self.run_dir = run_dir
        self.overlay = overlay
        self.argv = argv
        self._socket_dir = socket_dir  # a directory of ours under /tmp, removed on close
        self.boot_s = 0.0

    def exec(self, argv: list[str], timeout: float = 60.0) -> ExecResult:
        return self.agent.exec(argv, timeout=timeout)

    def sh(self, script: str, timeout: float = 60.0) -> ExecResult:
        return self.exec(["/bin/sh", "-c", script], timeout=timeout)

    def stopped(self) -> str | None:
        """None while QEMU runs, else how it ended (with its last stderr line)."""
        rc = self.proc.poll()
        if rc is None:
            return None
        err = (self.run_dir / "qemu-stderr.log").read_text(errors="replace").strip().splitlines()
        return f"QEMU exited with status {rc}" + (f": {err[-1]}" if err else "")

    def console_lines(self, n: int = 5, what: str = "last console lines") -> str:
        """`what`: the console's last `n` lines joined by ' | ', each without the control
        characters a terminal would act on (the guest writes them), or '(none)'."""
        tail = console_tail(self.run_dir / "console.log", n).strip().splitlines()
        shown = ("".join(c for c in ln if c.isprintable()).strip() for ln in tail)
        return f"{what}: " + (" | ".join(ln for ln in shown if ln) or "(none)")

    def console_empty(self) -> bool:
        """Whether the guest has written nothing but blanks (and firmware escapes) to its
        console."""
        try:
            data = (self.run_dir / "console.log").read_bytes()[: 1 << 16]
        except OSError:
            return True
        return not any(chr(b).isalnum() for b in data)

    def close(self) -> None:
        self.agent.close()
        children.kill(self.proc)
        children.release(self.proc)
        self.overlay.unlink(missing_ok=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


def start(
    image: BootImage,
    run_dir: Path,
    disks: Sequence[DiskSpec] = (),
    accel: str = "tcg",
    memory_mb: int = 1024,
    wrapper: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> RealGuest:
    """Make the overlay and start QEMU; returns at once (the guest is booting)."""
    if not image.path.is_file():
        raise UserError(
            f"guest image {image.path} does not exist", hint="give the path of a qcow2 or raw image"
        )
    for disk in disks:
        validate_disk(disk)
    run_dir.mkdir(parents=True, exist_ok=True)
    overlay = run_dir / "root-overlay.qcow2"
    overlay.unlink(missing_ok=True)
    res = subprocess.run(overlay_argv(image, overlay), capture_output=True, text=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"cannot make an overlay of {image.path}: {last}",
            hint="is it a readable qcow2 or raw image?",
        )
    sock = agent_socket_path(run_dir)
    socket_dir = None
    if sock is None:
        socket_dir = Path(tempfile.mkdtemp(prefix="iomx-qga-"))
        sock = socket_dir / "qga.sock"
    argv = real_guest_argv(
        image=image,
        overlay=overlay,
        run_dir=run_dir,
        agent_socket=sock,
        accel=accel,
        disks=disks,
        memory_mb=memory_mb,
        wrapper=wrapper,
        extra_args=extra_args,
    )
    (run_dir / "qemu.argv").write_text(" ".join(argv) + "\n")
    (run_dir / "console.log").unlink(missing_ok=True)
    with open(run_dir / "qemu-stderr.log", "wb") as err:
        try:
            proc = children.spawn(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
            )
        except BaseException:
            overlay.unlink(missing_ok=True)
            if socket_dir is not None:
                shutil.rmtree(socket_dir, ignore_errors=True)
            raise
    return RealGuest(proc, GuestAgent(sock), run_dir, overlay, socket_dir, argv)


def accel_kind(accel: str) -> str:
    """'kvm' or 'tcg' (the keys of the boot limits) from an accelerator name."""
    return "kvm" if accel.startswith("kvm") else "tcg"


def measured_boot_limit_s(measured: Sequence[float], accel: str) -> tuple[float, str]:
    """(seconds, how they were found) a boot may take before it is given up, from this image's
    measured boots under `accel`: max(floor, BOOT_LIMIT_FACTOR × the longest), or the accelerator's
    unmeasured limit when there is none.

    >>> measured_boot_limit_s([83.0, 61.5], "tcg")
    (332.0, '4 × the longest of its 2 boots measured here (83 s)')
    >>> measured_boot_limit_s([9.0], "kvm")
    (60.0, 'the floor under kvm (4 × its longest measured boot, 9 s, is less)')
    >>> measured_boot_limit_s([], "tcg")
    (600.0, 'no boot of this image measured yet under tcg')
    """
    kind = accel_kind(accel)
    if not measured:
        return UNMEASURED_BOOT_LIMIT_S[kind], f"no boot of this image measured yet under {kind}"
    longest = max(measured)
    limit = BOOT_LIMIT_FACTOR * longest
    if limit < BOOT_LIMIT_FLOOR_S[kind]:
        return BOOT_LIMIT_FLOOR_S[kind], (
            f"the floor under {kind} ({BOOT_LIMIT_FACTOR:g} × its longest measured boot, "
            f"{longest:.0f} s, is less)"
        )
    return limit, (
        f"{BOOT_LIMIT_FACTOR:g} × the longest of its {len(measured)} boot"
        f"{'s' if len(measured) > 1 else ''} measured here ({longest:.0f} s)"
    )


def _boot_key(image: BootImage, accel: str) -> str:
    return f"{image.path.resolve()}|{image.kernel or 'firmware'}|{accel_kind(accel)}"


def _boot_times_path() -> Path:
    return default_cache_dir() / BOOT_TIMES_FILE


def stored_boot_times(image: BootImage, accel: str) -> list[float]:
    """The seconds this image's last boots took on this host under `accel` (newest last)."""
    try:
        times = json.loads(_boot_times_path().read_text()).get(_boot_key(image, accel), [])
        return [float(t) for t in times if isinstance(t, (int, float)) and t > 0]
    except (OSError, ValueError, AttributeError):
        return []


def store_boot_time(image: BootImage, accel: str, seconds: float) -> None:
    """Keep `seconds` among this image's last KEPT_BOOTS boots (written whole and renamed; a cache
    that cannot be written only means the next boot gets the unmeasured limit)."""
    path = _boot_times_path()
    with contextlib.suppress(OSError):
        try:
            stored = json.loads(path.read_text())
            if not isinstance(stored, dict):
                stored = {}
        except (OSError, ValueError):
            stored = {}
        key = _boot_key(image, accel)
        stored[key] = [*stored.get(key, []), round(seconds, 1)][-KEPT_BOOTS:]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stored, indent=1) + "\n")
        tmp.replace(path)


@contextlib.contextmanager
def boot(
    image: BootImage,
    run_dir: Path,
    disks: Sequence[DiskSpec] = (),
    accel: str = "tcg",
    memory_mb: int = 1024,
    boot_limit_s: float = BOOT_LIMIT_S,
    wrapper: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
    progress_s: float = BOOT_PROGRESS_S,
) -> Iterator[RealGuest]:
    """A booted guest whose agent answers `guest-ping` (`guest.boot_s`: QEMU's start to that
    answer), closed (QEMU killed, overlay removed) when the block ends, however it ends.

    The boot may take what this image's measured boots allow (`measured_boot_limit_s`), at most
    `boot_limit_s` (the caller's: a run's time limit); `log` gets a line every `progress_s` while
    it waits."""
    limit, why = measured_boot_limit_s(stored_boot_times(image, accel), accel)
    if boot_limit_s < limit:
        limit, why = boot_limit_s, "the run's time limit"
    t0 = time.monotonic()
    with children.SigtermGuard():
        guest = start(
            image,
            run_dir,
            disks,
            accel=accel,
            memory_mb=memory_mb,
            wrapper=wrapper,
            extra_args=extra_args,
        )
        try:

            def progress(waited: float) -> None:
                if log is not None:
                    log(
                        f"guest booting: {waited:.0f} s of at most {limit:.0f} s ({why}); "
                        f"{guest.console_lines(1, what='console')}"
                    )

            try:
                wait_for_agent(
                    guest.agent,
                    limit,
                    guest.stopped,
                    guest.console_lines,
                    progress=progress,
                    progress_s=progress_s,
                )
            except AgentTimeout as err:
                if guest.console_empty():
                    raise AgentTimeout(
                        f"no console output in {limit:.0f} s ({why}): the image did not start a "
                        "kernel",
                        hint="its boot loader found nothing to boot, or its kernel writes its "
                        "console elsewhere than the first serial port (console=ttyS0); read the "
                        "run's qemu-stderr.log",
                    ) from None
                raise AgentTimeout(
                    err.message.replace(f"within {limit:g} s", f"within {limit:.0f} s ({why})"),
                    hint=err.hint,
                ) from None
            guest.boot_s = round(time.monotonic() - t0, 1)
            store_boot_time(image, accel, guest.boot_s)
            yield guest
        finally:
            guest.close()


# --------------------------------------------------------------------------- the guest's view of a
# disk

# Finds the disk by its serial (virtio-blk: /sys/block/X/serial; NVMe: device/serial; SCSI/ATA: VPD
# page 0x80) and prints what the guest's block layer made of it, one key=value a line.
_DISK_VIEW = r"""
want="$1"
for d in /sys/block/*; do
    s=$(cat "$d/serial" 2>/dev/null || cat "$d/device/serial" 2>/dev/null ||
        tail -c +5 "$d/device/vpd_pg80" 2>/dev/null)
    s=$(echo "$s" | tr -d '[:space:]')
    [ "$s" = "$want" ] || continue
    echo "name=${d##*/}"
    echo "driver=$(basename "$(readlink "$d/device/driver")" 2>/dev/null)"
    echo "devpath=$(readlink -f "$d/device")"
    echo "queues=$(ls "$d/mq" 2>/dev/null | wc -l)"
    echo "scheduler=$(cat "$d/queue/scheduler")"
    echo "write_cache=$(cat "$d/queue/write_cache")"
    echo "sectors=$(cat "$d/size")"
    echo "nproc=$(nproc)"
    exit 0
done
echo "no disk with serial $want" >&2
exit 3
"""


def parse_disk_view(text: str) -> dict[str, str | int]:
    """The key=value lines of the disk view; `queues`, `sectors` and `nproc` as ints, `scheduler`
    the active one (the bracketed name of queue/scheduler, e.g. '[none] mq-deadline' -> 'none').

    >>> parse_disk_view("name=vdb\\nqueues=2\\nscheduler=[none] mq-deadline\\n")
    {'name': 'vdb', 'queues': 2, 'scheduler': 'none', 'schedulers': '[none] mq-deadline'}
    """
    view: dict[str, str | int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if key in ("queues", "sectors", "nproc") and value.isdigit():
            view[key] = int(value)
        elif key == "scheduler":
            active = value[value.find("[") + 1 : value.find("]")] if "[" in value else value
            view["scheduler"], view["schedulers"] = active, value
        else:
            view[key] = value
    return view


def disk_view(
    guest: RealGuest, serial: str = DISK_SERIAL, timeout: float = 60.0
) -> dict[str, str | int]:
    """The guest's own view of the disk with `serial`, from its sysfs (through guest-exec)."""
    res = guest.exec(["/bin/sh", "-c", _DISK_VIEW, "disk-view", serial], timeout=timeout)
    if not res.ok:
        raise UserError(
            f"the guest cannot see the disk under test: {res.stderr.strip() or res.exitcode}",
            hint="check the disk's bus has a driver in the guest's kernel",
        )
    return parse_disk_view(res.stdout)
