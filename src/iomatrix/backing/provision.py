"""Create a backing for the duration of a `with` block, and always take it down.

    with provision(spec, workdir, allowed_devices) as handle:
        # handle.kind == "dir": put images/fio files in handle.path
        # handle.kind == "device": use handle.path (a block device node) whole
        ...

Every created thing is recorded in the leftovers ledger *before* it is created
and dropped from it after teardown, so `iomatrix clean` can finish the job after
a `kill -9`.  Teardown runs on success, on exceptions and on KeyboardInterrupt; a
Ctrl-C that arrives during teardown is held back until teardown is done.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from iomatrix.backing import leftovers
from iomatrix.backing.client_host import ClientHost
from iomatrix.backing.leftover_kinds import (
    Leftover,
    LeftoverError,
    LogicalVolumeLeftover,
    LoopLeftover,
    MountLeftover,
    PathLeftover,
    ZfsDatasetLeftover,
)
from iomatrix.backing.network import NetworkServer
from iomatrix.backing.spec import (
    BackingSpec,
    BlockdevBacking,
    DirBacking,
    LoopfsBacking,
    LvmBacking,
    TmpfsBacking,
    ZfsBacking,
    format_size,
)
from iomatrix.errors import UserError
from iomatrix.mountinfo import innermost_mount
from iomatrix.safety import check_destroyable, path_devices
from iomatrix.storage_clients import client_host_problem
from iomatrix.sysfs import block_sysdir, loop_backing_file, read_text, slaves, whole_disk

BACKINGS_DIR = "backings"


@dataclass
class BackingHandle:
    """A provisioned backing: where to put data, and what to record with every result."""

    label: str
    kind: Literal["dir", "device", "network"]
    path: Path  # the directory for files, or the device node; a network backing's working directory
    metadata: dict[str, Any] = field(default_factory=dict)
    # A network backing's server (iomatrix.backing.network): it makes a fresh disk per run.
    server: NetworkServer | None = None
    # The hosts its contention runs' clients run on (`[[backing.client_host]]`,
    # backing/client_host.py).
    client_hosts: tuple[ClientHost, ...] = ()


# ---------------------------------------------------------------------------------------------
# host metadata
# ---------------------------------------------------------------------------------------------


def _active_scheduler(text: str | None) -> str | None:
    if not text:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.split()[0]


def device_info(devnum: tuple[int, int], _depth: int = 0) -> dict[str, Any] | None:
    """Model, rotational flag, scheduler, size of a block device (from /sys/block/<disk>/...).

    For a loop device also `loop_backing_file` and `underlying` (the disk holding the
    backing file); for dm/md, `slaves`.
    """
    sysdir = block_sysdir(*devnum)
    if sysdir is None:
        return None
    disk = whole_disk(sysdir)
    info: dict[str, Any] = {
        "name": sysdir.name,
        "node": f"/dev/{sysdir.name}",
        "devnum": f"{devnum[0]}:{devnum[1]}",
        "disk": disk.name,
        "model": read_text(disk / "device" / "model") or None,
        "vendor": read_text(disk / "device" / "vendor") or None,
        "rotational": read_text(disk / "queue" / "rotational") == "1",
        "scheduler": _active_scheduler(read_text(disk / "queue" / "scheduler")),
        "size_bytes": int(read_text(sysdir / "size") or 0) * 512,
    }
    backing = loop_backing_file(disk)
    if backing:
        info["loop_backing_file"] = backing
        info["loop_direct_io"] = read_text(disk / "loop" / "dio") == "1"
        if _depth < 4:
            try:
                nums = path_devices(backing.removesuffix(" (deleted)"))
            except OSError:
                nums = []
            if nums:
                info["underlying"] = device_info(nums[0], _depth + 1)
    names = slaves(disk)
    if names:
        info["slaves"] = names
    return info


def physical_of(info: dict[str, Any] | None) -> dict[str, Any] | None:
    """The bottom-most device of a device_info chain (the disk under a loop's file)."""
    while info and info.get("underlying"):
        info = info["underlying"]
    if info:
        return {
            k: info.get(k) for k in ("node", "disk", "model", "vendor", "rotational", "scheduler")
        }
    return None


def fs_metadata(path: Path) -> dict[str, Any]:
    """Filesystem, mount and device facts for a directory."""
    m = innermost_mount(path)
    meta: dict[str, Any] = {
        "fs_type": None,
        "mountpoint": None,
        "source": None,
        "mount_options_effective": None,
        "device": None,
    }
    if m is None:
        return meta
    meta.update(
        fs_type=m["fstype"],
        mountpoint=m["mountpoint"],
        source=m["source"],
        mount_options_effective=",".join(x for x in (m["mount_options"], m["super_options"]) if x),
    )
    try:
        nums = path_devices(path)
    except OSError:
        nums = []
    if nums:
        meta["device"] = device_info(nums[0])
    return meta


def device_metadata(device: Path) -> dict[str, Any]:
    st = os.stat(device)
    info = device_info((os.major(st.st_rdev), os.minor(st.st_rdev)))
    return {
        "fs_type": None,
        "mountpoint": None,
        "source": str(device),
        "mount_options_effective": None,
        "device": info,
    }


def probe_o_direct(directory: Path) -> bool:
    """Can a file in `directory` be opened with O_DIRECT? (tmpfs accepts it since Linux 6.6.)"""
    probe = directory / f".iomatrix-odirect-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
    except OSError:
        return False
    else:
        os.close(fd)
        return True
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


# ---------------------------------------------------------------------------------------------
# teardown machinery
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back SIGINT while tearing down (main thread only); re-raise it afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt  # only reached when teardown itself did not raise


class _Teardown:
    """Undo steps recorded in the ledger; run newest first, stop at the first failure."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.chain = secrets.token_hex(4)
        self.steps: list[tuple[str, Callable[[], object]]] = []  # (entry id, action)

    def record(self, leftover: Leftover, undo: Callable[[], object] | None = None) -> str:
        """Record `leftover` in the ledger (before it is created); teardown undoes it (with `undo`
        when the creator has a better way than the leftover's own: e.g. a child process to reap)."""
        entry_id = leftovers.record(
            self.workdir, leftover.kind, leftover.target, chain=self.chain, **leftover.info
        )
        self.steps.append((entry_id, undo or leftover.undo))
        return entry_id

    def add_step(self, action: Callable[[], object]) -> None:
        """Add an undo step with no ledger entry of its own (stopping a daemon `children.spawn`
        recorded)."""
        self.steps.append(("", action))

    def run(self, in_flight: BaseException | None) -> None:
        """Undo everything; with an exception in flight, report failures as a note on it."""
        with _sigint_deferred():
            while self.steps:
                entry_id, action = self.steps[-1]
                try:
                    action()
                except (LeftoverError, OSError, subprocess.SubprocessError) as exc:
                    msg = (
                        f"teardown incomplete: {exc}; what is left is recorded in "
                        f"{leftovers.state_path(self.workdir)}"
                    )
                    hint = f"run: iomatrix clean --workdir {shlex.quote(str(self.workdir))}"
                    if in_flight is not None:
                        in_flight.add_note(f"{msg} ({hint})")
                        return
                    raise UserError(msg, hint=hint) from exc
                if entry_id:
                    leftovers.release(self.workdir, entry_id)
                self.steps.pop()


def _check(argv: list[str], what: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UserError(f"{what}: '{argv[0]}' is not installed") from None
    if out.returncode != 0:
        err = (out.stderr or out.stdout).strip().splitlines()
        raise UserError(
            f"{what} failed: {' '.join(argv)}: {err[-1] if err else f'exit {out.returncode}'}"
        )
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:40] or "backing"


def _scratch_dir(td: _Teardown, base: Path, label: str) -> Path:
    d = base / f"{_slug(label)}-{os.getpid()}-{secrets.token_hex(3)}"
    # base: lets `clean` verify a dir backing's scratch directory that lies outside the workdir
    td.record(PathLeftover(str(d), {"base": str(base)}))
    d.mkdir(parents=True)
    return d


def _wait_for(path: Path, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise UserError(f"{path} did not appear within {seconds:.0f} s (udev?)")
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# per-type setup
# ---------------------------------------------------------------------------------------------


def _setup_dir(spec: DirBacking, workdir: Path, td: _Teardown) -> tuple[Path, dict[str, Any]]:
    base = spec.path if spec.path is not None else workdir / BACKINGS_DIR
    d = _scratch_dir(td, Path(os.path.realpath(base)), "dir")
    return d, {**fs_metadata(d), "base_dir": str(base), "o_direct_probe": probe_o_direct(d)}


def _mkfs_argv(spec: LoopfsBacking, device: str) -> list[str]:
    opts = list(spec.mkfs_options)
    if spec.fs == "ext4" and not any(o.startswith("-E") for o in opts):
        # no background inode-table/journal zeroing (ext4lazyinit) during measurements
        opts = ["-E", "lazy_itable_init=0,lazy_journal_init=0", *opts]
    return [f"mkfs.{spec.fs}", "-q", *opts, device]


def check_free_space(spec: LoopfsBacking, workdir: Path) -> None:
    """Refuse a loop image larger than the free space where it would live.

    The image is sparse, but the runs fill it: a bigger image only ends in ENOSPC on the
    host filesystem in the middle of a measurement (or EFBIG at creation).
    """
    st = os.statvfs(workdir)
    free = st.f_bavail * st.f_frsize
    if spec.size > free:
        raise UserError(
            f"loopfs {spec.label()}: size {format_size(spec.size)} ({spec.size} bytes) "
            "is larger than "
            f"the free space of the working directory's filesystem ({workdir}: {free} bytes, "
            f"about {free / (1 << 30):.1f} GiB, free): {spec.size} > {free}",
            hint="lower the backing's size or use a --workdir on a filesystem with more room",
        )


def _setup_loopfs(spec: LoopfsBacking, workdir: Path, td: _Teardown) -> tuple[Path, dict[str, Any]]:
    check_free_space(spec, workdir)
    scratch = _scratch_dir(td, workdir / BACKINGS_DIR, spec.label())
    image = scratch / "disk.img"
    fd = os.open(image, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.ftruncate(fd, spec.size)  # sparse
    except OSError as exc:
        raise UserError(
            f"loopfs {spec.label()}: cannot create a {format_size(spec.size)} image in {scratch}: "
            f"{exc.strerror}",
            hint="lower the backing's size",
        ) from None
    finally:
        os.close(fd)

    # recorded by backing file: clean finds the loop device even if we die inside losetup
    st = os.stat(image)
    loop_id = td.record(LoopLeftover(str(image), {"inode": [st.st_dev, st.st_ino]}))
    device = _check(
        ["losetup", "--find", "--show", str(image)], "attaching a loop device"
    ).stdout.strip()
    leftovers.update(workdir, loop_id, device=device)

    mkfs = _mkfs_argv(spec, device)
    _check(mkfs, f"mkfs.{spec.fs}")

    mnt = scratch / "mnt"
    td.record(MountLeftover(str(mnt), {"source": device}))
    mnt.mkdir()
    argv = ["mount", "-t", spec.fs]
    if spec.mount_options:
        argv += ["-o", ",".join(spec.mount_options)]
    _check([*argv, device, str(mnt)], "mounting the loop filesystem")
    meta = fs_metadata(mnt)
    meta.update(
        mkfs_argv=mkfs,
        mkfs_options=list(spec.mkfs_options),
        mount_options=list(spec.mount_options),
        size_bytes=spec.size,
        backing_file=str(image),
        o_direct_probe=probe_o_direct(mnt),
    )
    return mnt, meta


def _setup_tmpfs(spec: TmpfsBacking, workdir: Path, td: _Teardown) -> tuple[Path, dict[str, Any]]:
    scratch = _scratch_dir(td, workdir / BACKINGS_DIR, "tmpfs")
    mnt = scratch / "mnt"
    source = f"iomatrix-tmpfs-{td.chain}"
    td.record(MountLeftover(str(mnt), {"source": source}))
    mnt.mkdir()
    opts = f"size={spec.size},mode=0755"
    _check(["mount", "-t", "tmpfs", "-o", opts, source, str(mnt)], "mounting tmpfs")
    meta = fs_metadata(mnt)
    meta.update(mount_options=[opts], size_bytes=spec.size, o_direct_probe=probe_o_direct(mnt))
    return mnt, meta


def _setup_blockdev(
    spec: BlockdevBacking, workdir: Path, td: _Teardown, allowed: set[Path]
) -> tuple[Path, dict[str, Any]]:
    check_destroyable(spec.device, allowed)
    return spec.device, device_metadata(spec.device)


def _setup_lvm(spec: LvmBacking, workdir: Path, td: _Teardown) -> tuple[Path, dict[str, Any]]:
    lv = f"iomx-{os.getpid()}-{secrets.token_hex(3)}"
    target = f"{spec.vg}/{lv}"
    mib = -(-spec.size // (1 << 20))
    td.record(LogicalVolumeLeftover(target))
    _check(
        ["lvcreate", "--yes", "--wipesignatures", "y", "--name", lv, "--size", f"{mib}m", spec.vg],
        "lvcreate",
    )
    dev = Path("/dev") / spec.vg / lv
    _wait_for(dev)
    meta = device_metadata(dev)
    meta.update(lv=target, size_bytes=mib << 20)
    return dev, meta


def _setup_zfs(spec: ZfsBacking, workdir: Path, td: _Teardown) -> tuple[Path, dict[str, Any]]:
    name = f"{spec.pool}/iomx-{os.getpid()}-{secrets.token_hex(3)}"
    if spec.zfs_kind == "zvol":
        assert spec.size is not None
        mib = -(-spec.size // (1 << 20))
        td.record(ZfsDatasetLeftover(name))
        _check(["zfs", "create", "-V", f"{mib}M", name], "zfs create (zvol)")
        dev = Path("/dev/zvol") / name
        _wait_for(dev)
        meta = device_metadata(dev)
        meta.update(zfs_name=name, size_bytes=mib << 20)
        return dev, meta
    scratch = _scratch_dir(td, workdir / BACKINGS_DIR, "zfs")
    mnt = scratch / "mnt"
    argv = ["zfs", "create", "-o", f"mountpoint={mnt}"]
    if spec.size is not None:
        argv += ["-o", f"quota={format_size(spec.size)}"]
    td.record(ZfsDatasetLeftover(name))  # destroy also unmounts
    _check([*argv, name], "zfs create (dataset)")
    meta = fs_metadata(mnt)
    meta.update(zfs_name=name, size_bytes=spec.size, o_direct_probe=probe_o_direct(mnt))
    return mnt, meta


# ---------------------------------------------------------------------------------------------
# before a sweep: can each network backing serve?
# ---------------------------------------------------------------------------------------------


def cannot_serve(spec: BackingSpec, allowed: set[Path]) -> str | None:
    """Why a network backing this host can use cannot serve a sweep (its existing server, its LUN,
    its client hosts), checked over the network with bounded waits; None when it can or is not a
    network backing."""
    if spec.kind != "network" or spec.availability(allowed) is not None:
        return None  # pruned with its reason by the plan's expansion: nothing to reach
    why = spec.serving_problem(allowed)
    for host in getattr(spec, "client_host", ()):
        why = why or client_host_problem(host)
    return why


def refuse_backings_that_cannot_serve(specs: Iterable[BackingSpec], allowed: set[Path]) -> None:
    """A UserError (one line, exit 2) for the first network backing that cannot serve: a sweep never
    starts to measure only what is left (the null ceiling) and end with nothing to recommend."""
    for spec in specs:
        why = cannot_serve(spec, allowed)
        if why is not None:
            raise UserError(
                f"backing {spec.label()} cannot serve: {why}",
                hint="fix the plan's backing or the server, or drop the backing from the plan",
            )


# ---------------------------------------------------------------------------------------------
# provision
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def provision(
    spec: BackingSpec, workdir: Path, allowed_devices: set[Path]
) -> Iterator[BackingHandle]:
    """Create `spec` under `workdir`, yield a BackingHandle, and tear it down on exit."""
    reason = spec.availability(allowed_devices)
    if reason is not None:
        raise UserError(f"backing {spec.label()} is not available here: {reason}")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    workdir = Path(os.path.realpath(workdir))  # mountinfo shows real paths
    td = _Teardown(workdir)
    server: NetworkServer | None = None
    try:
        if isinstance(spec, DirBacking):
            path, meta = _setup_dir(spec, workdir, td)
        elif isinstance(spec, LoopfsBacking):
            path, meta = _setup_loopfs(spec, workdir, td)
        elif isinstance(spec, TmpfsBacking):
            path, meta = _setup_tmpfs(spec, workdir, td)
        elif isinstance(spec, BlockdevBacking):
            path, meta = _setup_blockdev(spec, workdir, td, allowed_devices)
        elif isinstance(spec, LvmBacking):
            path, meta = _setup_lvm(spec, workdir, td)
        elif isinstance(spec, ZfsBacking):
            path, meta = _setup_zfs(spec, workdir, td)
        elif spec.kind == "network":  # its protocol's spec starts or checks its server
            # (its files: a LUN's, an export's, a cluster's and its per-disk confs, its logs)
            path = _scratch_dir(td, workdir / BACKINGS_DIR, spec.label())
            server, meta = spec.provision_server(workdir, path, td, allowed_devices)
        else:  # pragma: no cover
            raise TypeError(f"unknown backing spec {spec!r}")
        dev = meta.get("device")
        metadata: dict[str, Any] = {
            "backing_type": spec.type,
            "backing_label": spec.label(),
            "backing_spec": spec.model_dump(mode="json", by_alias=True),
            "kind": spec.kind,
            "o_direct_supported": spec.supports_o_direct(),
            "mkfs_options": None,
            "mount_options": None,
            **meta,
            "physical_device": physical_of(dev),
        }
        handle = BackingHandle(
            label=spec.label(),
            kind=spec.kind,
            path=path,
            metadata=metadata,
            server=server,
            client_hosts=tuple(getattr(spec, "client_host", ())),
        )
    except BaseException as exc:
        td.run(in_flight=exc)
        raise
    try:
        yield handle
    except BaseException as exc:
        td.run(in_flight=exc)
        raise
    td.run(in_flight=None)
