"""Device and path safety: iomatrix never destroys what the user did not hand over.

`check_destroyable` is called before anything writes to a whole block device
(a `blockdev` backing, or a raw device given to a guest); `check_workdir_path`
before anything writes a file, so nothing lands outside the plan's working
directory.  Both raise `UserError` with a one-line message naming the problem
and the fix.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iomatrix.errors import UserError
from iomatrix.mountinfo import innermost_mount, mounts_of_devnum, parse_mountinfo, unescape
from iomatrix.protocol_registry import network_protocol
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.sysfs import (
    block_sysdir,
    block_sysdir_by_name,
    devnum_of,
    holders,
    is_partition,
    loop_backing_file,
    partitions,
    read_text,
    slaves,
    sysdir_devnum,
    whole_disk,
)

PROC_SWAPS = Path("/proc/swaps")

# ---------------------------------------------------------------------------------------------
# what a device or a path is built on (sysfs steps from iomatrix.sysfs)
# ---------------------------------------------------------------------------------------------


def lower_devices(devnum: tuple[int, int], _depth: int = 0) -> set[tuple[int, int]]:
    """Every block device `devnum` is built on, itself included.

    Follows partition -> disk, dm/md -> slaves, and loop -> the device holding its
    backing file.
    """
    result = {devnum}
    if _depth > 16:
        return result
    sysdir = block_sysdir(*devnum)
    if sysdir is None:
        return result
    parents: list[Path] = []
    if is_partition(sysdir):
        parents.append(whole_disk(sysdir))
    parents.extend(block_sysdir_by_name(name) for name in slaves(sysdir))
    for p in parents:
        num = sysdir_devnum(p)
        if num and num not in result:
            result |= lower_devices(num, _depth + 1)
    backing = loop_backing_file(sysdir)
    if backing:
        try:
            nums = path_devices(backing.removesuffix(" (deleted)"))
        except OSError:
            nums = []
        for num in nums:
            if num not in result:
                result |= lower_devices(num, _depth + 1)
    return result


def fs_devices(major: int, minor: int) -> list[tuple[int, int]]:
    """Block devices behind a filesystem st_dev; btrfs uses anonymous 0:N, so map via mount
    source."""
    if major != 0:
        return [(major, minor)]
    found = []
    for m in mounts_of_devnum(f"{major}:{minor}"):
        if m["source"].startswith("/dev/"):
            with contextlib.suppress(OSError):
                found.append(devnum_of(m["source"]))
    return found


def path_devices(path: str | Path) -> list[tuple[int, int]]:
    """Block devices holding the filesystem of `path` (via st_dev, else the mount source)."""
    st = os.stat(path)
    found = fs_devices(os.major(st.st_dev), os.minor(st.st_dev))
    if found:
        return found
    # btrfs subvolumes report an anonymous st_dev that differs from mountinfo's: use the
    # innermost mount holding the path
    best = innermost_mount(path)
    if best is not None and best["source"].startswith("/dev/"):
        with contextlib.suppress(OSError):
            return [devnum_of(best["source"])]
    return []


def root_devices() -> set[tuple[int, int]]:
    """Device numbers the root filesystem lives on (the device, its disk, dm/md slaves, loops'
    disks)."""
    result: set[tuple[int, int]] = set()
    for num in path_devices("/"):
        result |= lower_devices(num)
        sysdir = block_sysdir(*num)
        if sysdir is not None:
            disk = sysdir_devnum(whole_disk(sysdir))
            if disk:
                result.add(disk)
    return result


# ---------------------------------------------------------------------------------------------
# check_destroyable
# ---------------------------------------------------------------------------------------------


def _refuse(device: Path, problem: str, fix: str) -> UserError:
    return UserError(f"refusing to use {device} as a destroyable device: {problem}", hint=fix)


def _signatures(device: Path) -> list[str]:
    """Filesystem/RAID/LVM/partition-table signatures on the device (wipefs, else blkid -p)."""
    try:
        out = subprocess.run(
            ["wipefs", "--no-act", "--noheadings", "--output", "TYPE", str(device)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode == 0:
            return [t.strip() for t in out.stdout.splitlines() if t.strip()]
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        out = subprocess.run(
            ["blkid", "-p", "-o", "value", "-s", "TYPE", "-s", "PTTYPE", str(device)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _refuse(
            device, f"cannot look for signatures ({exc})", "install util-linux (wipefs, blkid)"
        ) from None
    if out.returncode == 2:  # nothing found
        return []
    if out.returncode != 0:
        raise _refuse(
            device,
            f"cannot look for signatures: {out.stderr.strip()}",
            "check the device is readable by this user",
        )
    return [t.strip() for t in out.stdout.splitlines() if t.strip()]


def check_destroyable(device: Path, allowed: set[Path]) -> None:
    """Raise UserError unless `device` may be overwritten as a whole.

    Requires: named with --allow-destroy (compared by real path), a block device with
    a medium, not mounted (itself or a partition), not swap, not under the root
    filesystem, no holders (dm/md/LVM), no partitions and no filesystem/RAID/LVM/
    partition-table signature.
    """
    device = Path(device)
    real = Path(os.path.realpath(device))
    allowed_real = {Path(os.path.realpath(a)) for a in allowed}
    if real not in allowed_real:
        raise _refuse(
            device,
            "it was not named with --allow-destroy",
            f"pass --allow-destroy {device} if its contents may be destroyed",
        )
    try:
        st = os.stat(real)
    except OSError as exc:
        raise _refuse(device, f"cannot stat it ({exc.strerror})", "check the device path") from None
    if not stat.S_ISBLK(st.st_mode):
        raise _refuse(
            device,
            "it is not a block device",
            "name a whole block device such as /dev/sdX or /dev/loopN",
        )
    devnum = (os.major(st.st_rdev), os.minor(st.st_rdev))
    sysdir = block_sysdir(*devnum)
    if sysdir is None:
        raise _refuse(device, "it has no entry in /sys/dev/block", "name an existing block device")
    name = sysdir.name
    parts = partitions(sysdir)
    family = [(real, devnum, sysdir)]
    for p in parts:
        num = sysdir_devnum(p)
        if num:
            family.append((Path("/dev") / p.name, num, p))
    nums = {f"{n[0]}:{n[1]}" for _, n, _ in family}
    nodes = {str(node) for node, _, _ in family}

    if read_text(sysdir / "size") in (None, "0"):
        raise _refuse(
            device,
            "it has no medium (size 0; an unattached loop device?)",
            "attach it first, e.g. losetup --find --show FILE",
        )

    rootdevs = root_devices()
    if any(n in rootdevs for _, n, _ in family):
        raise _refuse(
            device, "the root filesystem lives on it", "choose a disk that does not hold /"
        )

    for m in parse_mountinfo():
        src = m["source"]
        src_real = os.path.realpath(src) if src.startswith("/") else src
        if m["devnum"] in nums or src_real in nodes:
            raise _refuse(
                device,
                f"it is mounted on {m['mountpoint']} ({src})",
                f"unmount it first (umount {m['mountpoint']}) or choose another device",
            )

    swaps = read_text(PROC_SWAPS) or ""
    for line in swaps.splitlines()[1:]:
        swap = line.split()[0] if line.split() else ""
        if swap and os.path.realpath(unescape(swap)) in nodes:
            raise _refuse(device, f"it is used as swap ({swap})", f"swapoff {swap} first")

    for node, _, d in family:
        users = holders(d)
        if users:
            raise _refuse(
                device,
                f"{node} is in use by {', '.join(users)} (device-mapper/RAID/LVM)",
                "remove those mappings first or choose another device",
            )

    if parts:
        raise _refuse(
            device,
            f"it holds partitions ({', '.join(p.name for p in parts)})",
            f"wipe the partition table first (wipefs -a /dev/{name}) if it really is scratch",
        )

    _check_loop_mapping(device, sysdir)

    sigs = _signatures(real)
    if sigs:
        raise _refuse(
            device,
            f"it carries a {'/'.join(sigs)} signature",
            f"wipe it first (wipefs -a {device}) if its contents may be destroyed",
        )


def check_allowed_devices(paths: Iterable[Path]) -> None:
    """Check every `--allow-destroy` argument before anything runs, whatever the plan.

    A device handed over is a promise that it may be destroyed; a wrong one (the root
    disk, a mounted filesystem, a loop device aliasing a mounted image) is refused at
    once, even when no backing of the plan would use it. An ``iscsi://HOST:PORT/IQN/LUN``
    hands over one LUN of an existing target (an `iscsi` backing with that portal, IQN
    and LUN): only its spelling can be checked here (nothing on the host is that LUN).
    """
    allowed = {Path(p) for p in paths}
    for p in sorted(allowed):
        if (network := _protocol_of(p)) is not None:
            # a disk of a network protocol (iscsi://…, nbd://…): its backing spec checks it
            if (why := network.handed_over_problem(str(p))) is not None:
                raise UserError(f"--allow-destroy: {why}")
            continue
        check_destroyable(p, allowed)


def resolve_allowed(paths: Iterable[Path]) -> set[Path]:
    """The `--allow-destroy` arguments as compared later: devices by real path, a network
    protocol's URLs as written."""
    return {p if _protocol_of(p) is not None else Path(p).resolve() for p in paths}


def _protocol_of(p: object) -> NetworkProtocol | None:
    """The network protocol whose disk an --allow-destroy argument names (its scheme is a
    registered protocol's name; a Path folds the URL's "//" into "/"), or None for a device."""
    scheme, colon, _ = str(p).strip().partition(":")
    return network_protocol(scheme.lower()) if colon else None


# ---------------------------------------------------------------------------------------------
# loop devices: what bytes of which file they expose
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopMapping:
    """The byte range [start, end) of a backing file (identified by st_dev/st_ino) a loop device
    exposes."""

    device: str
    backing_file: str
    file_id: tuple[int, int] | None  # (st_dev, st_ino); None if the file is gone
    is_block_device: bool
    start: int
    end: int | None  # None: to the end of the file

    def overlaps(self, other: LoopMapping) -> bool:
        if self.file_id is None or self.file_id != other.file_id:
            return False
        a_end = self.end if self.end is not None else 1 << 63
        b_end = other.end if other.end is not None else 1 << 63
        return self.start < b_end and other.start < a_end


def loop_mapping(sysdir: Path) -> LoopMapping | None:
    """How the loop device at `sysdir` maps its backing file (None for a non-loop device)."""
    backing = loop_backing_file(sysdir)
    if not backing:
        return None
    offset = int(read_text(sysdir / "loop" / "offset") or 0)
    limit = int(read_text(sysdir / "loop" / "sizelimit") or 0)
    path = backing.removesuffix(" (deleted)")
    file_id, is_blk = None, False
    if not backing.endswith(" (deleted)"):
        try:
            st = os.stat(path)
            file_id, is_blk = (st.st_dev, st.st_ino), stat.S_ISBLK(st.st_mode)
        except OSError:
            pass
    return LoopMapping(
        device=f"/dev/{sysdir.name}",
        backing_file=path,
        file_id=file_id,
        is_block_device=is_blk,
        start=offset,
        end=offset + limit if limit else None,
    )


def _loop_sysdirs() -> list[Path]:
    base = Path("/sys/block")
    return sorted(p for p in base.glob("loop*") if (p / "loop" / "backing_file").exists())


def open_by(file_id: tuple[int, int]) -> list[str]:
    """Processes holding `file_id` open ("pid (comm)"), from /proc/*/fd."""
    users = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(fd)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == file_id:
                comm = read_text(proc / "comm") or "?"
                users.append(f"{proc.name} ({comm})")
                break
    return users


def _check_loop_mapping(device: Path, sysdir: Path) -> None:
    """Refuse a loop device whose bytes are also reachable another way that is in use.

    Another loop device over an overlapping range of the same file (e.g. the image of a
    mounted ext4, aliased at offset 1 MiB), a backing file some process holds open, or a
    backing block device that is mounted or held would all be corrupted by writing here.
    """
    mine = loop_mapping(sysdir)
    if mine is None:
        return
    if mine.file_id is None:
        raise _refuse(
            device,
            f"its backing file {mine.backing_file} is gone or unreadable",
            "detach it (losetup -d) and attach a file that exists",
        )
    for other_dir in _loop_sysdirs():
        if other_dir.name == sysdir.name:
            continue
        other = loop_mapping(other_dir)
        if other is not None and mine.overlaps(other):
            raise _refuse(
                device,
                f"{other.device} maps the same bytes of {mine.backing_file} "
                f"(offsets {mine.start} and {other.start})",
                f"detach {other.device} first, or hand over a loop device over a file "
                "nothing else uses",
            )
    if mine.is_block_device:
        st = os.stat(mine.backing_file)
        under = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if under in root_devices():
            raise _refuse(
                device,
                f"it is a loop over {mine.backing_file}, which holds the root filesystem",
                "choose a disk that does not hold /",
            )
        mounted = mounts_of_devnum(f"{under[0]}:{under[1]}")
        if mounted:
            mp = mounted[0]["mountpoint"]
            raise _refuse(
                device,
                f"it is a loop over {mine.backing_file}, mounted on {mp}",
                f"unmount {mp} first or choose another device",
            )
        under_dir = block_sysdir(*under)
        others = [h for h in (holders(under_dir) if under_dir else []) if h != sysdir.name]
        if others:
            raise _refuse(
                device,
                f"it is a loop over {mine.backing_file}, also used by {', '.join(others)}",
                "remove those first or choose another device",
            )
    users = _lasting_openers(mine.file_id)
    if users:
        raise _refuse(
            device,
            f"its backing file {mine.backing_file} is open by {', '.join(users[:3])}",
            "stop those processes or choose another device",
        )


def _lasting_openers(file_id: tuple[int, int], *, looks: int = 3, pause: float = 0.1) -> list[str]:
    """The openers of `file_id` that still hold it after `looks` looks `pause` s apart.

    Why: scanners open every loop device for milliseconds (`losetup --find`, udev's blkid,
    lsblk); a user of the bytes (a VM, dd, a mount helper) holds them for its whole job. A
    single look refused a free device whenever a scanner passed by at that instant.
    """
    users = open_by(file_id)
    for _ in range(looks - 1):
        if not users:
            break
        time.sleep(pause)
        still = set(open_by(file_id))
        users = [u for u in users if u in still]
    return users


# ---------------------------------------------------------------------------------------------
# check_workdir_path
# ---------------------------------------------------------------------------------------------


def check_workdir_path(path: Path, workdir: Path, *, also_allowed: Iterable[Path] = ()) -> Path:
    """Return the resolved `path`, or raise UserError if it lies outside `workdir`.

    Symlinks are resolved (a link inside the workdir pointing outside is refused).
    `also_allowed` adds roots the user named explicitly, e.g. the directory of a
    `dir` backing with its own `path`.
    """
    resolved = Path(os.path.realpath(path))
    roots = [Path(os.path.realpath(workdir)), *(Path(os.path.realpath(r)) for r in also_allowed)]
    for root in roots:
        if resolved == root or resolved.is_relative_to(root):
            return resolved
    raise UserError(
        f"refusing to write {path}: it is outside the plan's working directory {workdir}",
        hint="keep outputs and images under the working directory (--workdir)",
    )
