"""The kinds of thing iomatrix leaves on the host, one class each: how to name it, how to tell it is
still one a run of this workdir created, whether it is still there, and how to undo it.

Every kind implements `Leftover`: `describe()` (one line for `iomatrix clean`), `identity_problem()`
(why it cannot be shown to be ours, None if it can), `present()` (is it still on the host) and
`remove()` (undo it, returning what was done); `undo()` removes it if it is present. The ledger
(`backing.leftovers`) records a leftover before it is created and builds one from each entry to
clean it up; provision's teardown and the tiers undo the very same objects directly.

The kinds: a temp path (`path`: a scratch directory, an image file), a loop device over a backing
file (`loop`), a mount (`mount`), an LVM logical volume (`lv`), a ZFS dataset or zvol (`zfs`), and a
host setting changed for a sweep (`ksm`: KSM's run switch, restored to its recorded value), and a
child process a sweep started (`process`: fio, qemu-storage-daemon, QEMU, nbdkit, by pid and start
time: killed only while that pid is still the process that was started; ganesha.nfsd and rpcbind
too).

A network protocol's lab half records kinds of its own (`NetworkProtocol.leftover_kinds`, found by
the ledger through the protocol registry), each in its backing module, built on `Leftover` here:
iSCSI's tgtd (`tgtd`, backing.iscsi), NFS's RPC registrations, its file on an existing export and
rpcbind's files in /run (`rpc_registration`, `nfs_file`, `runtime_file`, backing.nfs), and RBD's
image in an existing pool (`rbd_image`, backing.rbd)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import psutil

from iomatrix.mountinfo import parse_mountinfo

EntryKind = Literal[
    "path",
    "loop",
    "mount",
    "lv",
    "zfs",
    "ksm",
    "process",
    "tgtd",
    "rpc_registration",
    "nfs_file",
    "runtime_file",
    "rbd_image",
]
# Names iomatrix gives what it creates: scratch dirs "<label>-<pid>-<hex6>", LVs/datasets
# "iomx-<pid>-<hex6>".
SCRATCH_NAME = re.compile(r"[A-Za-z0-9_.-]+-[0-9]+-[0-9a-f]{6}")
VOLUME_NAME = re.compile(r"iomx-[0-9]+-[0-9a-f]{6}")
TMPFS_SOURCE = re.compile(r"iomatrix-tmpfs-[0-9a-f]+")
LOOP_SOURCE = re.compile(r"/dev/loop[0-9]+")
# A FUSE mount (qemu-storage-daemon's FUSE export of an image, the durability tier's iSCSI LUN
# file): its mountpoint is a file iomatrix created inside the working directory, which is what
# identifies it as ours.
FUSE_SOURCE = "/dev/fuse"
# The kernel detaches a loop device only once its last opener closes it: `losetup --detach` on a
# device a probe still holds (udev's blkid after an unmount, another process's losetup or blkid
# scan) succeeds and only marks it to be cleared. How long to wait for it to let go of the file
# before calling the file still in use.
LOOP_DETACH_WAIT_S = 10.0
# A host setting changed for a sweep (the consolidation tier enables KSM): restored to the recorded
# value.
KSM_RUN = "/sys/kernel/mm/ksm/run"
KSM_RUN_VALUES = ("0", "1", "2")


class LeftoverError(Exception):
    """An undo action could not be completed (the entry is kept)."""


def proc_start(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a live, non-zombie process; None if gone. With the pid
    it names one process for the life of the host: a reused pid has a later start time."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):  # zombie/dead: killed but not yet reaped
        return None
    return int(fields[19])


# ---------------------------------------------------------------------------------------------
# host probes and path checks shared by the kinds
# ---------------------------------------------------------------------------------------------


def run_tool(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def mounts_at(mountpoint: str) -> list[dict[str, str]]:
    return [m for m in parse_mountinfo() if m["mountpoint"] == mountpoint]


def loops_backed_by(backing_file: str) -> list[str]:
    """Loop devices attached to `backing_file` (matched by losetup on device+inode)."""
    if not os.path.exists(backing_file):
        return []
    out = run_tool(["losetup", "--list", "--noheadings", "--output", "NAME", "-j", backing_file])
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _parent_inside(target: str, workdir: str) -> bool:
    """Target lies in the workdir (its directory resolved: no symlinked way out); the last
    component itself is never followed by the undo actions."""
    if not os.path.isabs(target):
        return False
    norm = os.path.normpath(target)
    return _inside(os.path.realpath(os.path.dirname(norm)), workdir) and norm != workdir


def _remove_with_retries(argv: list[str], done: str, failed: str) -> list[str]:
    """Run a removal command, retrying briefly (udev or a closing fd may hold the volume for a
    moment)."""
    for attempt in range(5):
        out = run_tool(argv)
        if out.returncode == 0:
            return [done]
        if attempt < 4:
            time.sleep(0.5)
    raise LeftoverError(f"{failed}: {out.stderr.strip()}")


# ---------------------------------------------------------------------------------------------
# the interface
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leftover(ABC):
    """One thing iomatrix created on the host. `target` is a path (path/mount), the backing file
    (loop), "vg/lv" (lv), "pool/name" (zfs) or the setting's file (ksm); `info` holds what
    identifies it further (a mount's source, a loop backing file's inode, a scratch directory's
    base, the setting's previous value)."""

    kind: ClassVar[EntryKind]
    label: ClassVar[str]  # what it is, in `describe`

    target: str
    info: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.label} {self.target}"

    @abstractmethod
    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        """Why this cannot be shown to be something a run of `workdir` (a real path) created; None
        if it can. `scratch_dirs`: verified scratch directories of `dir` backings outside the
        workdir."""

    @abstractmethod
    def present(self) -> bool:
        """Is it still on the host (anything left to undo)?"""

    @abstractmethod
    def remove(self) -> list[str]:
        """Undo it; returns what was done. Raises LeftoverError when it cannot be completed."""

    def undo(self) -> list[str]:
        """Remove it if it is still there; returns what was done (empty if it was already gone)."""
        return self.remove() if self.present() else []


# ---------------------------------------------------------------------------------------------
# the kinds
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathLeftover(Leftover):
    """A temporary file or directory tree: a fresh image per run, a backing's scratch directory."""

    kind: ClassVar[EntryKind] = "path"
    label: ClassVar[str] = "path"

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        t = self.target
        if _parent_inside(t, workdir) or any(
            _parent_inside(t, os.path.realpath(d)) for d in scratch_dirs
        ):
            return None
        base = self.info.get("base")
        if (
            isinstance(base, str)
            and os.path.isabs(t)
            and os.path.realpath(os.path.dirname(os.path.normpath(t))) == os.path.realpath(base)
            and SCRATCH_NAME.fullmatch(os.path.basename(t))
        ):
            return None  # a dir backing's scratch directory in its own `path`
        return f"{t} is outside the working directory {workdir}"

    def present(self) -> bool:
        p = Path(self.target)
        return p.exists() or p.is_symlink()

    def remove(self) -> list[str]:
        """Delete our file or directory tree, refusing if anything is mounted or looped inside
        it."""
        path = self.target
        p = Path(path)
        if p.resolve() == Path("/") or len(p.resolve().parts) < 3:
            raise LeftoverError(f"refusing to delete {path}: too close to /")
        real = os.path.realpath(path)
        for m in parse_mountinfo():
            if m["mountpoint"] == real or m["mountpoint"].startswith(real.rstrip("/") + "/"):
                raise LeftoverError(
                    f"{m['mountpoint']} is still mounted inside {path}: not deleted"
                )
        if p.is_dir() and not p.is_symlink():
            for f in p.rglob("*"):
                if f.is_file() and loops_backed_by(str(f)):
                    raise LeftoverError(f"{f} still backs a loop device: not deleted")
            shutil.rmtree(p)
        else:
            if p.is_file() and loops_backed_by(str(p)):
                raise LeftoverError(f"{p} still backs a loop device: not deleted")
            p.unlink()
        return [f"deleted {path}"]


@dataclass(frozen=True)
class LoopLeftover(Leftover):
    """Loop devices over our backing file, found by the file (so also when a run died inside
    losetup)."""

    kind: ClassVar[EntryKind] = "loop"
    label: ClassVar[str] = "loop device over"

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        t = self.target
        if not _parent_inside(t, workdir):
            return f"loop backing file {t} is outside the working directory {workdir}"
        ino = self.info.get("inode")
        if ino is not None and os.path.exists(t):
            st = os.stat(t)
            if [st.st_dev, st.st_ino] != list(ino):
                return f"{t} is no longer the file the loop device was attached to"
        return None

    def present(self) -> bool:
        return bool(loops_backed_by(self.target))

    def remove(self) -> list[str]:
        """Detach every loop device over our backing file (never one over someone else's file)."""
        backing_file = self.target
        done = []
        mounted = {m["source"] for m in parse_mountinfo()}
        for dev in loops_backed_by(backing_file):
            if dev in mounted:
                raise LeftoverError(f"{dev} (over {backing_file}) is still mounted: left attached")
            out = run_tool(["losetup", "--detach", dev])
            if out.returncode != 0 and dev in loops_backed_by(backing_file):
                raise LeftoverError(f"cannot detach {dev}: {out.stderr.strip()}")
            deadline = time.monotonic() + LOOP_DETACH_WAIT_S
            while dev in loops_backed_by(backing_file):
                if time.monotonic() > deadline:
                    raise LeftoverError(
                        f"{dev} (over {backing_file}) is still open {LOOP_DETACH_WAIT_S:g} s after "
                        "losetup --detach: something holds it (see: fuser -v " + dev + ")"
                    )
                time.sleep(0.05)
            done.append(f"detached {dev} (backing file {backing_file})")
        return done


@dataclass(frozen=True)
class MountLeftover(Leftover):
    """A mount on a mountpoint we created, from its recorded source (a loop device, iomatrix's
    tmpfs, or a FUSE export whose daemon may be dead: unmounting a disconnected FUSE mount works);
    the empty mountpoint directory goes with it (a FUSE export's mountpoint is a file, removed with
    the scratch directory that holds it)."""

    kind: ClassVar[EntryKind] = "mount"
    label: ClassVar[str] = "mount on"

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        t = self.target
        if not _parent_inside(t, workdir):
            return f"mountpoint {t} is outside the working directory {workdir}"
        source = self.info.get("source")
        if not isinstance(source, str) or not (
            TMPFS_SOURCE.fullmatch(source) or LOOP_SOURCE.fullmatch(source) or source == FUSE_SOURCE
        ):
            return f"the mount on {t} has no recorded iomatrix source"
        return None

    def present(self) -> bool:
        mountpoint = os.path.realpath(self.target)
        return bool(mounts_at(mountpoint)) or os.path.isdir(mountpoint)

    def remove(self) -> list[str]:
        """Unmount our mount (checking its source), then remove the empty mountpoint directory."""
        mountpoint = os.path.realpath(self.target)
        source = self.info.get("source")
        done = []
        for _ in range(8):  # stacked mounts: unmount the top one each round
            here = mounts_at(mountpoint)
            if not here:
                break
            top = here[-1]
            if source is not None and top["source"] != source:
                raise LeftoverError(
                    f"{mountpoint} is mounted from {top['source']}, not {source}: left alone"
                )
            for attempt in range(10):
                out = run_tool(["umount", mountpoint])
                if out.returncode == 0:
                    break
                if attempt == 9:
                    raise LeftoverError(f"cannot unmount {mountpoint}: {out.stderr.strip()}")
                time.sleep(0.2)
            done.append(f"unmounted {mountpoint} ({top['source']})")
        if os.path.isdir(mountpoint) and not mounts_at(mountpoint):
            try:
                os.rmdir(mountpoint)
                done.append(f"removed mountpoint {mountpoint}")
            except OSError:
                pass  # not empty: the enclosing scratch directory entry deals with it
        return done


@dataclass(frozen=True)
class _VolumeLeftover(Leftover):
    """A volume iomatrix named itself ("iomx-<pid>-<hex6>") in a volume group or pool."""

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        t = self.target
        if (
            not VOLUME_NAME.fullmatch(t.rsplit("/", 1)[-1])
            or t.startswith("/")
            or ".." in t.split("/")
        ):
            return f"{t} is not a name iomatrix gives its volumes"
        return None


@dataclass(frozen=True)
class LogicalVolumeLeftover(_VolumeLeftover):
    """An LVM logical volume ("vg/lv")."""

    kind: ClassVar[EntryKind] = "lv"
    label: ClassVar[str] = "logical volume"

    def present(self) -> bool:
        if shutil.which("lvs") is None:
            raise LeftoverError(
                f"cannot remove logical volume {self.target}: lvm2 is not installed"
            )
        return run_tool(["lvs", "--noheadings", "-o", "lv_name", self.target]).returncode == 0

    def remove(self) -> list[str]:
        target = self.target
        return _remove_with_retries(
            ["lvremove", "--yes", "--force", target],
            f"removed logical volume {target}",
            f"cannot remove logical volume {target}",
        )


@dataclass(frozen=True)
class ZfsDatasetLeftover(_VolumeLeftover):
    """A ZFS dataset or zvol ("pool/name"); destroying it also unmounts it."""

    kind: ClassVar[EntryKind] = "zfs"
    label: ClassVar[str] = "ZFS dataset"

    def present(self) -> bool:
        if shutil.which("zfs") is None:
            raise LeftoverError(
                f"cannot destroy ZFS dataset {self.target}: zfsutils-linux is not installed"
            )
        return run_tool(["zfs", "list", "-H", "-o", "name", self.target]).returncode == 0

    def remove(self) -> list[str]:
        target = self.target
        return _remove_with_retries(
            ["zfs", "destroy", "-r", target],
            f"destroyed ZFS dataset {target}",
            f"cannot destroy ZFS dataset {target}",
        )


@dataclass(frozen=True)
class KsmSettingLeftover(Leftover):
    """KSM's run switch, changed for a sweep: put back to its recorded `previous` value."""

    kind: ClassVar[EntryKind] = "ksm"
    label: ClassVar[str] = "KSM setting changed at"

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        if self.target != KSM_RUN or self.info.get("previous") not in KSM_RUN_VALUES:
            return (
                f"{self.target} with previous value {self.info.get('previous')!r} is not "
                "a KSM setting "
                "iomatrix changes"
            )
        return None

    def _previous(self) -> str:
        previous = self.info["previous"]
        if previous not in KSM_RUN_VALUES:
            raise LeftoverError(f"refusing to write {previous!r} to {KSM_RUN}")
        return previous

    def present(self) -> bool:
        previous = self._previous()
        with open(KSM_RUN) as f:
            return f.read().strip() != previous

    def remove(self) -> list[str]:
        previous = self._previous()
        with open(KSM_RUN, "w") as f:
            f.write(previous)
        return [f"restored {KSM_RUN} to {previous}"]


PROGRAM_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
# How long a killed process may take to be gone (a process in uninterruptible I/O dies when the I/O
# returns).
PROCESS_GONE_S = 30.0


@dataclass(frozen=True)
class ProcessLeftover(Leftover):
    """A child process a sweep started (`target` its pid, info `start` its start time, `program` its
    name), still running after the sweep died: the parent-death signal missed it. Killed, with
    whatever it started, only while the pid still names the process recorded (same start time)."""

    kind: ClassVar[EntryKind] = "process"
    label: ClassVar[str] = "process"

    def describe(self) -> str:
        return f"{self.info.get('program', 'process')} process {self.target}"

    def _pid_start(self) -> tuple[int, int]:
        pid, start = self.target, self.info.get("start")
        if (
            not pid.isdigit()
            or int(pid) <= 1
            or not isinstance(start, int)
            or isinstance(start, bool)
        ):
            raise LeftoverError(f"process entry {pid!r} with start {start!r} names no process")
        return int(pid), start

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        try:
            pid, _ = self._pid_start()
        except LeftoverError as err:
            return str(err)
        if pid == os.getpid() or not PROGRAM_NAME.fullmatch(str(self.info.get("program", ""))):
            return f"process {pid} ({self.info.get('program')!r}) is not a child iomatrix starts"
        return None

    def present(self) -> bool:
        pid, start = self._pid_start()
        return proc_start(pid) == start

    def remove(self) -> list[str]:
        pid, start = self._pid_start()
        try:
            proc = psutil.Process(pid)
            # a forked fio job (thread=0) is the process's child
            procs = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        if proc_start(pid) != start:  # the pid was reused between present() and now
            return []
        for p in procs:
            with _suppress_gone():
                p.kill()
        _, alive = psutil.wait_procs(procs, timeout=PROCESS_GONE_S)
        if any(proc_start(p.pid) is not None for p in alive):
            raise LeftoverError(
                f"{self.describe()} did not die within {PROCESS_GONE_S:g} s of SIGKILL"
            )
        more = f" and {len(procs) - 1} process(es) it started" if len(procs) > 1 else ""
        return [f"killed {self.describe()}{more}, left running by a killed sweep"]


def _suppress_gone() -> Any:
    return contextlib.suppress(psutil.NoSuchProcess)


def gone_within(pid_start: tuple[int, int], seconds: float) -> bool:
    """Poll until the process is gone (or a zombie waiting to be reaped by its parent)."""
    deadline = time.monotonic() + seconds
    while proc_start(pid_start[0]) == pid_start[1]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


LEFTOVER_KINDS: dict[str, type[Leftover]] = {
    cls.kind: cls
    for cls in (
        PathLeftover,
        LoopLeftover,
        MountLeftover,
        LogicalVolumeLeftover,
        ZfsDatasetLeftover,
        KsmSettingLeftover,
        ProcessLeftover,
    )
}
