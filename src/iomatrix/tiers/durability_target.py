"""The durability tier on an iSCSI backing: a LUN whose storage can lose power (issue 34).

On a local backing the power-loss disk is an image behind nbdkit's cache filter, attached to QEMU
over NBD. On an iSCSI backing QEMU must reach that disk as it reaches any LUN, over iSCSI (its
libiscsi driver), so the volatile cache goes under the *target* instead, all in userspace (no NBD or
iSCSI kernel module here):

    image file ← nbdkit --filter=cache (cache=writeback: the target's volatile memory, lost when it is killed)
               ← qemu-storage-daemon, an NBD client node exported as a file through FUSE
               ← a LUN of the sweep's tgtd over that file (the cell's lun_type and lun_write_cache)
               ← QEMU's iscsi driver under the cell's format node ← the guest

tgt's rdwr backing store writes with pwrite() and keeps no data of its own: with the LUN's write
cache off it calls fdatasync() after every write (and for SYNCHRONIZE CACHE and FUA writes with it
on), which reaches nbdkit as an NBD flush through the FUSE file's fsync. **The target power loss**
is SIGKILL of nbdkit (its unflushed cache is gone) and then of the FUSE daemon (the file tgtd writes
to fails from then on); tgtd, holding nothing, keeps serving the sweep's other LUNs. The chain was
first probed by hand (docs/shared-storage.md).

Nothing here models a flush away: QEMU's iscsi driver sends SYNCHRONIZE CACHE for a guest flush
unless the cell's cache mode drops it (cache.no-flush, cache=unsafe), and eatmydata around QEMU
cannot see an iSCSI flush at all, so what a cut finds is what the target had."""  # noqa: E501

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.iscsi import TgtServer
from iomatrix.backing.leftover_kinds import FUSE_SOURCE, MountLeftover, mounts_at
from iomatrix.backing.network import NetworkDisk, NetworkServer
from iomatrix.errors import UserError
from iomatrix.hostcmd import require
from iomatrix.qemu_block import qemu_opt
from iomatrix.textfile import last_lines

FUSE_START_S = 20.0
NODE = "target"  # the NBD client node qemu-storage-daemon exports


def fuse_export_argv(qsd: str, socket: Path, mountpoint: Path, pid_file: Path) -> list[str]:
    """qemu-storage-daemon exporting the NBD server on `socket` as the file `mountpoint` (FUSE,
    writable): what tgtd opens as the LUN's backing file. A file's fsync reaches the NBD node as a
    flush."""
    return [
        qsd,
        "--blockdev",
        f"driver=nbd,node-name={NODE},server.type=unix,server.path={qemu_opt(socket)}",
        "--export",
        f"type=fuse,id=lun,node-name={NODE},mountpoint={qemu_opt(mountpoint)},writable=on",
        "--pidfile",
        str(pid_file),
    ]


def can_cut(server: NetworkServer | None) -> TypeGuard[TgtServer]:
    """Whether the durability tier can cut this server's storage: a tgtd iomatrix started (it makes
    LUNs over files it is handed); an existing target, an NFS server or a Ceph cluster cannot be cut
    this way."""
    return isinstance(server, TgtServer)


@dataclass
class VolatileLun:
    """The power-loss disk of one trial on iSCSI: the LUN QEMU opens, and what dies at the cut."""

    disk: NetworkDisk
    fuse: subprocess.Popen
    export_file: Path

    def lose_power(self) -> None:
        """The target's power loss, after nbdkit (the cache) was killed: the FUSE export dies
        too."""
        children.kill(self.fuse)


def _wait_mounted(proc: subprocess.Popen, pid_file: Path, mountpoint: Path, log: Path) -> None:
    """Until qemu-storage-daemon has written its pid file (it does so once its exports exist) and
    the FUSE mount is on `mountpoint`; a one-line error when it exits or does not get there in
    time."""
    deadline = time.monotonic() + FUSE_START_S
    real = os.path.realpath(mountpoint)
    while True:
        if proc.poll() is not None:
            text = log.read_text(errors="replace").strip() if log.exists() else ""
            raise UserError(
                f"qemu-storage-daemon's FUSE export exited with status {proc.returncode}: "
                f"{last_lines(text, 2) or 'no output'}",
                hint="the durability tier on iSCSI needs FUSE (modprobe fuse; apt-get install "
                "fuse3)",
            )
        with contextlib.suppress(OSError):
            if pid_file.read_text().strip() and mounts_at(real):
                return
        if time.monotonic() > deadline:
            raise UserError(
                f"qemu-storage-daemon's FUSE export was not mounted within {FUSE_START_S:g} s",
                hint=f"see {log}",
            )
        time.sleep(0.01)


@contextlib.contextmanager
def volatile_lun(
    server: TgtServer,
    values: Mapping[str, str],
    socket: Path,
    trial_dir: Path,
    workdir: Path,
    name: str,
) -> Iterator[VolatileLun]:
    """A LUN of `server` made as `values` say (lun_type, lun_write_cache, format) over the NBD
    export on `socket` (nbdkit's volatile cache over the trial's image). Each piece is in the
    leftovers ledger before it exists (the mountpoint file, the FUSE mount, the daemon through
    children.spawn); on every exit the LUN is removed from tgtd, the FUSE daemon stopped, the file
    unmounted and removed."""
    export_file = trial_dir / "lun-over-fuse.img"
    leftovers.register_temp_path(workdir, export_file)
    export_file.touch()
    mount_id = leftovers.record(
        workdir, "mount", Path(os.path.abspath(export_file)), source=FUSE_SOURCE
    )
    pid_file, log_path = trial_dir / "fuse.pid", trial_dir / "fuse.log"
    fuse: subprocess.Popen | None = None
    disk: NetworkDisk | None = None
    try:
        log = open(log_path, "wb")  # noqa: SIM115 - the child keeps it
        try:
            fuse = children.spawn(
                fuse_export_argv(require("qemu-storage-daemon"), socket, export_file, pid_file),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        _wait_mounted(fuse, pid_file, export_file, log_path)
        disk = server.export_file(values, export_file, name=name)
        yield VolatileLun(disk, fuse, export_file)
    finally:
        if disk is not None:
            server.unexport(disk)
        if fuse is not None:
            children.kill(fuse)
        MountLeftover(os.path.abspath(export_file), {"source": FUSE_SOURCE}).undo()
        leftovers.release(workdir, mount_id)
        export_file.unlink(missing_ok=True)
        leftovers.forget(workdir, export_file)
