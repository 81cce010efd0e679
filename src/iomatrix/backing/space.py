"""Does the whole plan fit? The space a sweep writes, per filesystem, against what each one has
free.

Checked before a run starts (`iomatrix run` refuses) and shown by `iomatrix plan` (a warning), with
the arithmetic, so a typo such as `size = "999T"` is caught before fio starts laying out a 999 TiB
file on the host.

What a sweep writes, and where:
- each run's test file or disk image, on its backing: a bare-metal fio file of the plan's `size`; a
  disk image of the plan's `image_size` (or the workload's own image size) when it is preallocated
  (`preallocation = full` or `falloc` allocate it whole at creation), else the region the workload
  writes (`size`, or the workload's own image for the workloads that lay out an image of their own).
  Runs on a backing follow each other and delete their file, so a backing must hold the largest one
  — twice for the block layer, which keeps one image for the next run to delete when there is room
  for it (`DEFER_ROOM_IMAGES`), so it needs room for one at least;
- each loopfs backing's image, in the working directory: its whole `size` (sparse, but the runs fill
  it). Every backing is set up at the start, so their sizes add up;
- the results database: about `DB_BYTES_PER_RUN` per run, up to the plan's maximum repetitions.

- each tmpfs backing's `size`, in this host's memory: a tmpfs takes RAM (then swap) as it fills, so
  the sizes of a plan's tmpfs backings together must fit in MemTotal + SwapTotal (not what is free
  now, which a shared host's other work changes by the second): `size = "999T"` is refused here, not
  found by the kernel's OOM killer;
- each lab-started network backing's disks, in the working directory, where its protocol keeps
  them there (`NetworkProtocol.lab_disks_in_workdir`: iSCSI's LUN files, NFS's export, NBD's
  images).

- each LVM backing's `size`, in its volume group's free extents (`vgs … vg_free`), and each ZFS
  backing's `size` (a zvol, or a dataset's quota), in what its pool or parent dataset has available
  (`zfs get available`): asked of the tools with a bounded wait; where they do not answer (the
  backing is then pruned with its reason), not checked here.

Inside a loopfs, tmpfs or LVM backing, and a zvol, the room is its `size` (a little less in fact:
the filesystem's own metadata). Block devices are not estimated (their size is the device's, checked
when set up)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from iomatrix.backing.spec import (
    DirBacking,
    LoopfsBacking,
    LvmBacking,
    TmpfsBacking,
    ZfsBacking,
)
from iomatrix.domain import NA
from iomatrix.domain.axes import CLUSTER_BYTES, DEFAULT_CLUSTER_BYTES
from iomatrix.domain.axes import size_words as format_size
from iomatrix.errors import UserError
from iomatrix.protocol_registry import network_protocol
from iomatrix.tiers import declaration

if TYPE_CHECKING:
    from iomatrix.matrix import Expansion, Unit
    from iomatrix.plan.model import Plan

# A run's row in the results database: fio's JSON output (raw_output) dominates; measured 20–60 KB
# per run.
DB_BYTES_PER_RUN = 64 * 1024
PREALLOCATED = ("full", "falloc")


@dataclass
class Place:
    """One filesystem a sweep writes on, what it has free and what the sweep would put there."""

    name: str
    free: int
    parts: list[tuple[str, int]] = field(default_factory=list)
    room: str = "free"  # what `free` is: free blocks, or (memory) what the host has at all

    @property
    def need(self) -> int:
        return sum(n for _, n in self.parts)

    def line(self) -> str:
        parts = " + ".join(f"{what} {format_size(n)}" for what, n in self.parts)
        return (
            f"{self.name} needs {format_size(self.need)} ({parts}) but has "
            f"{format_size(self.free)} "
            f"{self.room}: {self.need} > {self.free} bytes"
        )


# Bytes per L2 entry at most (16 with extended L2 entries): the sparse workload's tables are counted
# at that.
L2_ENTRY_BYTES_MAX = 16


def unit_bytes(plan: Plan, unit: Unit) -> tuple[int, str]:
    """The bytes one run of `unit` writes on its backing, and what they are, in words."""
    w, cell = unit.workload, unit.cell
    size = plan.size_bytes
    if not declaration(cell["tier"]).uses_images:
        return size, f"{w.name}: fio file (size)"
    image = w.image_bytes or plan.image_size_bytes
    if cell["preallocation"] in PREALLOCATED:
        return image, f"{w.name}: image preallocated {cell['preallocation']} (image_size)"
    if w.image_bytes and w.prefill_stride:
        # A thin image written one block per stride (the sparse L2 workload): what lands on the
        # backing is one data cluster per written block and the L2 tables mapping the whole virtual
        # size, not the virtual size.
        cluster = CLUSTER_BYTES.get(cell.get("cluster_size", NA), DEFAULT_CLUSTER_BYTES)
        written = (
            w.image_bytes // w.prefill_stride * cluster
            + w.image_bytes // cluster * L2_ENTRY_BYTES_MAX
        )
        return (
            written,
            f"{w.name}: its own thin image, {format_size(w.image_bytes)} virtual, written sparsely",
        )
    if w.image_bytes:
        return w.image_bytes, f"{w.name}: its own image"
    return size, f"{w.name}: image written up to size"


def _free(path: Path) -> tuple[int, int]:
    """(free bytes, filesystem id) of the filesystem `path` is on (or would be: its nearest existing
    parent)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    st = os.statvfs(p)
    # root may use the blocks reserved for root, as every run of a sweep as root does.
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    return free, os.stat(p).st_dev


def memory_and_swap(meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemTotal + SwapTotal of this host, in bytes (0 when /proc/meminfo cannot be read: then
    nothing fits)."""
    total = 0
    try:
        for line in meminfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("MemTotal", "SwapTotal"):
                total += int(value.split()[0]) * 1024  # the file's unit is kB (KiB)
    except (OSError, ValueError, IndexError):
        return 0
    return total


# vgs and zfs answer in well under a second; a hung device-mapper must not hang `plan`
TOOL_TIMEOUT_S = 10


def parse_size_answer(text: str) -> int | None:
    """The one number of bytes `vgs --noheadings --nosuffix --units b -o vg_free VG` or `zfs get -Hp
    -o value available NAME` prints ("  1073741824" → 1073741824); None for anything else (an error,
    two lines, "-")."""
    words = text.split()
    if len(words) != 1:
        return None
    try:
        n = int(float(words[0]))  # vgs may print a decimal point even in bytes ("1073741824.00")
    except ValueError:
        return None
    return n if n >= 0 else None


def _ask(argv: list[str]) -> int | None:
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_size_answer(out.stdout) if out.returncode == 0 else None


def vg_free_bytes(vg: str) -> int | None:
    """The free bytes of volume group `vg` (None: vgs is missing, the group does not exist, or no
    answer)."""
    return _ask(["vgs", "--noheadings", "--nosuffix", "--units", "b", "-o", "vg_free", vg])


def zfs_available_bytes(name: str) -> int | None:
    """What ZFS pool or dataset `name` has available, in bytes (None: zfs missing, no such name, or
    no answer)."""
    return _ask(["zfs", "get", "-Hp", "-o", "value", "available", name])


def _volume_places(plan: Plan) -> list[Place]:
    """The LVM and ZFS backings' sizes in their volume group or pool, summed per group or pool: a
    plan's backings are all set up at the start of the sweep."""
    places: dict[str, Place] = {}
    for spec in plan.backing:
        if isinstance(spec, LvmBacking):
            key, name, room, size = f"vg:{spec.vg}", f"volume group {spec.vg}", "free", spec.size
            free = vg_free_bytes(spec.vg) if key not in places else places[key].free
        elif isinstance(spec, ZfsBacking) and spec.size is not None:
            key, name, room, size = f"zfs:{spec.pool}", f"ZFS {spec.pool}", "available", spec.size
            free = zfs_available_bytes(spec.pool) if key not in places else places[key].free
        else:
            continue
        if free is None:
            continue  # not answered: the backing's availability says why, and it is pruned
        place = places.setdefault(key, Place(name, free, room=room))
        place.parts.append((f"backing {spec.label()} size", size))
    return list(places.values())


def _tmpfs_place(plan: Plan) -> Place | None:
    """This host's memory and swap, and the tmpfs backings' sizes in it (None: the plan has no
    tmpfs)."""
    parts = [
        (f"backing {b.label()} (tmpfs) size", b.size)
        for b in plan.backing
        if isinstance(b, TmpfsBacking)
    ]
    if not parts:
        return None
    return Place(
        "this host's memory (a tmpfs lives in RAM and swap)",
        memory_and_swap(),
        parts,
        room="of RAM and swap in all",
    )


def shortfalls(plan: Plan, expansion: Expansion, workdir: Path, db: Path | None) -> list[Place]:
    """Every filesystem the sweep would not fit on, with the arithmetic (empty when the plan
    fits)."""
    specs = {b.label(): b for b in plan.backing}
    largest: dict[str, tuple[int, str]] = {}
    for unit in expansion.units:
        n, what = unit_bytes(plan, unit)
        label = unit.cell["backing"]
        if n > largest.get(label, (-1, ""))[0]:
            largest[label] = (n, what)
    places: list[Place] = []
    host: dict[int, Place] = {}

    def on_host(path: Path, what: str, n: int) -> None:
        free, dev = _free(path)
        place = host.setdefault(dev, Place(f"the filesystem of {path}", free))
        place.parts.append((what, n))

    for label, (n, what) in largest.items():
        spec = specs.get(label)
        if isinstance(spec, LoopfsBacking | TmpfsBacking | LvmBacking | ZfsBacking) and getattr(
            spec, "size", None
        ):
            kind = "volume" if isinstance(spec, LvmBacking | ZfsBacking) else "filesystem"
            places.append(
                Place(f"backing {label} ({format_size(spec.size)} {kind})", spec.size, [(what, n)])
            )
        elif isinstance(spec, ZfsBacking):  # a dataset without a quota: the runs' files in its pool
            if (avail := zfs_available_bytes(spec.pool)) is not None:
                places.append(
                    Place(
                        f"ZFS {spec.pool}",
                        avail,
                        [(f"backing {label}: {what}", n)],
                        room="available",
                    )
                )
        elif isinstance(spec, DirBacking):
            on_host(spec.path if spec.path is not None else workdir, f"backing {label}: {what}", n)
        # a lab-started server's disks (LUN files, an export's images): in the workdir, where its
        # protocol keeps them there
        elif _lab_disks_in_workdir(spec):
            on_host(workdir, f"backing {label}: {what}", n)
    for spec in plan.backing:
        if isinstance(spec, LoopfsBacking):
            on_host(workdir, f"loopfs {spec.label()} image", spec.size)
    if db is not None:
        runs = len(expansion.units) * plan.repetitions.max
        on_host(db, f"results database (~{runs} runs)", runs * DB_BYTES_PER_RUN)
    places += host.values()
    places += _volume_places(plan)
    if (memory := _tmpfs_place(plan)) is not None:
        places.append(memory)
    return [p for p in places if p.need > p.free]


def _lab_disks_in_workdir(spec: object) -> bool:
    """Whether `spec` is a network backing whose lab-started server keeps each run's disk as a file
    in the working directory (its protocol's `lab_disks_in_workdir`)."""
    network = network_protocol(getattr(spec, "protocol", None))
    return (
        network is not None and network.lab_disks_in_workdir and getattr(spec, "lab_started", False)
    )


def refuse_if_short(plan: Plan, expansion: Expansion, workdir: Path, db: Path | None) -> None:
    """A UserError with the arithmetic when the sweep would not fit (see the module's docstring)."""
    short = shortfalls(plan, expansion, workdir, db)
    if short:
        raise UserError(
            "the plan does not fit: " + "; ".join(p.line() for p in short),
            hint="lower the plan's size/image_size or the backing's size, enlarge the "
            "backing, or use "
            "a --workdir/--db with more room",
        )


def warnings(plan: Plan, expansion: Expansion, workdir: Path, db: Path | None) -> Iterable[str]:
    """The same check as lines for `iomatrix plan`."""
    return [f"does not fit: {p.line()}" for p in shortfalls(plan, expansion, workdir, db)]
