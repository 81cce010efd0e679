"""Workload presets: what a run asks of the disk.

Presets follow the seeds: seed 000's HD-Tune-like sweep (sequential 1 MiB,
random 512 B / 4 KiB / 64 KiB / 1 MiB), a database-like 4 KiB write with an
fdatasync after every write, a 70/30 mix, and seed 001's filesystem-level
read-heavy / write-heavy jobs (guest tier only). A custom workload is an fio
job file, named in a plan as ``file:PATH``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iomatrix.errors import UserError

WorkloadKind = Literal["fio", "fs-read", "fs-write", "custom"]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    kind: WorkloadKind = "fio"
    rw: str = "read"
    bs: str = "4k"
    iodepth: int = 1
    fdatasync: int = 0  # sync every N writes, as the workload itself asks (a database would)
    rwmixread: int | None = None
    custom_path: Path | None = None
    # The figure adaptive repetition converges on and ranking sorts by.
    primary_metric: str = "read.iops"
    higher_is_better: bool = True

    @property
    def reads(self) -> bool:
        if self.kind in ("fs-read", "fs-write"):
            return self.kind == "fs-read"
        return "read" in self.rw or self.rw in ("randrw", "rw")

    @property
    def writes(self) -> bool:
        if self.kind in ("fs-read", "fs-write"):
            return self.kind == "fs-write"
        return "write" in self.rw or self.rw in ("randrw", "rw")

    @property
    def guest_only(self) -> bool:
        return self.kind in ("fs-read", "fs-write")


def _fio(name: str, description: str, rw: str, bs: str, metric: str, **kw: object) -> Workload:
    return Workload(name=name, description=description, rw=rw, bs=bs, primary_metric=metric, **kw)  # type: ignore[arg-type]


def _sizes() -> list[tuple[str, str]]:
    return [("512", "512"), ("4k", "4k"), ("64k", "64k"), ("1m", "1m")]


PRESETS: dict[str, Workload] = {
    w.name: w
    for w in [
        _fio("seq-read-1m", "sequential read, 1 MiB blocks", "read", "1m", "read.bw_mbps"),
        _fio("seq-write-1m", "sequential write, 1 MiB blocks", "write", "1m", "write.bw_mbps"),
        *[
            _fio(f"rand-read-{label}", f"random read, {bs} blocks (seed 000 sweep)", "randread", bs,
                 "read.iops" if label in ("512", "4k") else "read.bw_mbps")
            for label, bs in _sizes()
        ],
        *[
            _fio(f"rand-write-{label}", f"random write, {bs} blocks (seed 000 sweep)", "randwrite", bs,
                 "write.iops" if label in ("512", "4k") else "write.bw_mbps")
            for label, bs in _sizes()
        ],
        _fio("rand-read-4k-qd32", "random read, 4 KiB, queue depth 32", "randread", "4k", "read.iops",
             iodepth=32),
        _fio("db-write-4k-fdatasync", "database-like: 4 KiB random write, fdatasync after every write",
             "randwrite", "4k", "write.iops", fdatasync=1),
        _fio("mixed-70-30", "random 4 KiB mix, 70% read / 30% write", "randrw", "4k", "total.iops",
             rwmixread=70),
        Workload("fs-read", "seed 001 read-heavy: walk a file tree and list a large tarball (guest fs)",
                 kind="fs-read", primary_metric="workload.seconds", higher_is_better=False),
        Workload("fs-write", "seed 001 write-heavy: large sequential writes with sync, then extract a "
                 "tarball and sync (guest fs)", kind="fs-write", primary_metric="workload.seconds",
                 higher_is_better=False),
    ]
}

# Options iomatrix sets from the cell; a custom job file that sets them would
# silently measure something other than the cell it is filed under.
RESERVED_FIO_OPTIONS = {"filename", "directory", "direct", "ioengine", "sync", "buffered", "size",
                        "filesize", "nrfiles"}

_OPTION_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=|$)")


def load_custom(spec: str, base_dir: Path | None = None) -> Workload:
    """Load a ``file:PATH`` workload: an fio job file without target/engine options."""
    raw = spec.removeprefix("file:")
    path = Path(raw)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        raise UserError(f"custom workload '{spec}': no such fio job file {path}",
                        hint="give a path to an fio job file, relative to the plan file")
    text = path.read_text()
    sections = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("[") and line.strip().lower() != "[global]":
            sections += 1
        m = _OPTION_LINE.match(line)
        if m and m.group(1).lower() in RESERVED_FIO_OPTIONS:
            raise UserError(
                f"{path}:{lineno}: option '{m.group(1)}' is set by iomatrix from the matrix cell",
                hint=f"remove it; iomatrix sets {', '.join(sorted(RESERVED_FIO_OPTIONS))}")
    if sections == 0:
        raise UserError(f"{path}: no fio job section found", hint="add a section such as [myjob]")
    reads = bool(re.search(r"^\s*rw\s*=\s*(rand)?(read|rw)", text, re.M))
    return Workload(name=f"file:{path.name}", description=f"custom fio job file {path}", kind="custom",
                    rw="randrw" if reads else "write", custom_path=path,
                    primary_metric="total.iops")


def resolve(name: str, base_dir: Path | None = None) -> Workload:
    """A preset by name, or a custom job file given as ``file:PATH``."""
    if name.startswith("file:"):
        return load_custom(name, base_dir)
    try:
        return PRESETS[name]
    except KeyError:
        raise UserError(f"unknown workload '{name}'",
                        hint=f"valid presets: {', '.join(PRESETS)}; or file:PATH for an fio job file") from None
