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
- **Bounded**: `boot()` waits for `guest-ping` at most `boot_limit_s`; on the limit or an early QEMU
  exit, one line with the last console lines.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from iomatrix import children
from iomatrix.errors import UserError
from iomatrix.guest.agent import ExecResult, GuestAgent, wait_for_agent
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

    def console_lines(self, n: int = 5) -> str:
        tail = console_tail(self.run_dir / "console.log", n).strip().splitlines()
        return "last console lines: " + (
            " | ".join(ln.strip() for ln in tail if ln.strip()) or "(none)"
        )

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
) -> Iterator[RealGuest]:
    """A booted guest whose agent answers `guest-ping` (`guest.boot_s`: QEMU's start to that
    answer), closed (QEMU killed, overlay removed) when the block ends, however it ends."""
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
            wait_for_agent(guest.agent, boot_limit_s, guest.stopped, guest.console_lines)
            guest.boot_s = round(time.monotonic() - t0, 1)
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
