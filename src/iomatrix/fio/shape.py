"""What a workload asks of the disk, read from its fio options: the shape findings are decided by
(issue 53).

A finding such as librbd's writethrough-until-flush depends on what the workload *does* — whether it
flushes, how much it reads, how large a region it touches — not on its name. This module reads that
from fio options, so a preset, a custom job file and a role's multi-job profile all get one: pure
functions, no fio run.

Per job (a ``[section]`` that is not ``[global]``; options of each ``[global]`` apply to the jobs
after it, as in fio; the unmeasured ``[prefill]`` job iomatrix adds is left out):

* **flushes** — the job asks for its writes to be made durable while it runs: ``fsync=N`` or
  ``fdatasync=N`` (a flush after every N writes), ``write_barrier=N`` (a barrier write every N
  writes), or synchronous writes (``sync=1``/``sync``/``dsync``, ``o_sync``: every write is durable
  before it completes). ``end_fsync`` and ``fsync_on_close`` flush once, after the measured I/O:
  ``final_flush``, not a flushing job (librbd's cache, for one, stays writethrough through the whole
  measurement). ``sync_file_range`` starts write-out of the page cache and asks the device for
  nothing, and ``direct=1`` bypasses the page cache without flushing the device's: neither is a
  flush. A job that never writes never flushes (fio counts its fsync cadence in writes).
* **read share** — the share of its I/Os that are reads: 1 for ``read``/``randread``, 0 for writes
  and trims, ``rwmixread`` (or 100 − ``rwmixwrite``; fio's default 50) for
  ``rw``/``randrw``/``trimwrite``.
* **random share** — 1 for ``rand*``, 0 for sequential, ``percentage_random`` (its first value) for
  either.
* **block sizes** — ``bssplit`` (``8k/90:32k/10``; its first comma-separated part for reads, its
  second for writes), else ``bs``/``blocksize`` (``4k`` or ``4k,64k``: reads, writes), else
  ``bsrange``'s ends (half each), else fio's 4 KiB; each as (bytes, share of I/Os).
* **working set** — the bytes it touches: its region (``filesize`` × ``nrfiles``, else ``size``; a
  share such as ``size=50%`` is not known), at most ``io_size``/``io_limit`` when the job stops
  after that many bytes.

A workload is its jobs (:class:`IoShape`). iomatrix runs every job of a workload on the cell's one
target and region, so the workload's working set is its largest job's, not their sum. Its
**flushing** counts as flushing where any job that writes flushes: the disk sees the flushes of
every job, and a cache that changes on the first flush (librbd's until-flush switch is per image)
changes for all of them; ``mixed`` says when only some do. Its read share weighs each job by its
clones (``numjobs``) × queue depth, the I/O each keeps in flight: a job at queue depth 8 issues
about 8 times what one at depth 1 does when both are bound by the same latency (a paced job,
``rate_iops``, by its rate where every job is paced).

Sizes read with fio's default ``kb_base=1024`` (``4k`` = 4096, ``1m`` = 1048576; ``4KiB``, ``4kb``
alike). Worked example: ``[global] size=1g`` / ``[data] rw=randrw rwmixread=70 bssplit=8k/90:32k/10
iodepth=8`` / ``[log] rw=write bs=32k fdatasync=1`` → data: read share 0.7, random 1, never flushes;
log: flushes every write; the workload: mixed flushing, working set 1 GiB, read share 8·0.7/(8+1) =
0.62."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from iomatrix.domain.workload import Workload

# Jobs iomatrix adds around a workload that are not measured (fio/jobs.py PREFILL_JOB): not part of
# its shape.
UNMEASURED_JOBS = frozenset({"prefill"})
# Options only the cell sets (how it opens and addresses the target); a section naming one of them
# first in a job text iomatrix rendered is the cell's own [global], whose flush options are the
# cache mode's, not the workload's.
CELL_SECTION_MARKERS = ("ioengine", "filename", "uri")
# What the cell's section may still say about the workload: the region every job runs on.
CELL_REGION_OPTIONS = ("size", "filesize", "nrfiles")
_TRUE = frozenset({"", "1", "true", "yes", "on"})
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(?:i?b)?", re.IGNORECASE)
_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SYNC_ON = frozenset({"1", "true", "yes", "on", "sync", "dsync", ""})
DEFAULT_BS = 4096


def fio_bytes(value: str) -> int | None:
    """Bytes of a fio size (``4k`` → 4096, ``1.5m``, ``64KiB``, ``512``); None for what is not one
    (``50%``, a range)."""
    m = _SIZE.fullmatch(value.strip())
    if m is None:
        return None
    return int(float(m.group(1)) * 1024 ** _POWER[m.group(2).lower()])


def _count(value: str | None) -> int:
    """A whole-number option (fsync=N); 0 when absent or not a number."""
    if value is None:
        return 0
    try:
        return max(0, int(value.strip()))
    except ValueError:
        return 0


def _flag(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


@dataclass(frozen=True)
class JobIo:
    """One fio job's shape (module docstring)."""

    name: str
    reads: bool
    writes: bool
    trims: bool = False
    read_share: float = 0.0  # share of its I/Os that are reads
    random_share: float = 0.0  # share of its offsets chosen at random
    read_sizes: tuple[tuple[int, float], ...] = ((DEFAULT_BS, 1.0),)  # (bytes, share of reads)
    write_sizes: tuple[tuple[int, float], ...] = ((DEFAULT_BS, 1.0),)
    iodepth: int = 1
    numjobs: int = 1
    rate_iops: int | None = None  # its offered load (reads + writes), None: as fast as it can
    # writes per flush it asks for (fsync/fdatasync/write_barrier); None: none
    flush_every: int | None = None
    flush_option: str = ""  # how it asks ("fdatasync=32", "sync=1")
    sync_writes: bool = False  # every write synchronous (O_SYNC/O_DSYNC)
    final_flush: bool = False  # one flush after its I/O (end_fsync, fsync_on_close)
    region_bytes: int | None = None  # the region it runs on; None: not known
    io_bytes: int | None = None  # io_size/io_limit: it stops after this many bytes

    @property
    def flushes(self) -> bool:
        """Whether the job asks for durability while it runs (its final flush does not count)."""
        return self.writes and (self.flush_every is not None or self.sync_writes)

    @property
    def working_set(self) -> int | None:
        if self.region_bytes is None:
            return self.io_bytes
        return self.region_bytes if self.io_bytes is None else min(self.region_bytes, self.io_bytes)

    @property
    def weight(self) -> float:
        """The I/O it keeps in flight (clones × queue depth): how much of its workload it is."""
        return float(self.numjobs * self.iodepth)

    def flush_words(self) -> str:
        """How it flushes, in words: "never flushes", "flushes every write (sync=1)", "flushes every
        32 writes (fdatasync=32)"."""
        if not self.writes:
            return "never writes"
        if self.sync_writes:
            return f"flushes every write ({self.flush_option})"
        if self.flush_every is not None:
            every = "every write" if self.flush_every == 1 else f"every {self.flush_every} writes"
            return f"flushes {every} ({self.flush_option})"
        return "never flushes" + (" until its end" if self.final_flush else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "reads": self.reads,
            "writes": self.writes,
            "trims": self.trims,
            "read_share": round(self.read_share, 4),
            "random_share": round(self.random_share, 4),
            "read_sizes": [list(s) for s in self.read_sizes],
            "write_sizes": [list(s) for s in self.write_sizes],
            "iodepth": self.iodepth,
            "numjobs": self.numjobs,
            "rate_iops": self.rate_iops,
            "flushes": self.flushes,
            "flush": self.flush_words(),
            "final_flush": self.final_flush,
            "working_set_bytes": self.working_set,
        }


@dataclass(frozen=True)
class IoShape:
    """A workload's shape: its jobs, and what they add up to (module docstring)."""

    workload: str
    jobs: tuple[JobIo, ...] = field(default_factory=tuple)
    # Its measured reads read what its untimed set-up had just written through the cell's cache
    # mode (a guest filesystem job: guest/fs_shape.py): a mode that keeps the host page cache holds
    # them from the first read.
    reads_written: bool = False
    # What sets its working set when not the plan's size (a guest filesystem job's tree): the plan's
    # size does not change it, so only cache.direct measures the disk. "" for a fio job.
    fixed_set: str = ""

    @property
    def writing(self) -> tuple[JobIo, ...]:
        return tuple(j for j in self.jobs if j.writes)

    @property
    def flushes(self) -> bool:
        """Some job that writes flushes while it runs: the disk gets flushes during the
        measurement."""
        return any(j.flushes for j in self.jobs)

    @property
    def mixed(self) -> bool:
        """Some writing jobs flush and some never do."""
        return self.flushes and any(not j.flushes for j in self.writing)

    @property
    def writes(self) -> bool:
        return bool(self.writing)

    @property
    def sync_writes(self) -> bool:
        return any(j.sync_writes and j.writes for j in self.jobs)

    @property
    def working_set(self) -> int | None:
        """The largest job's working set (every job runs on the cell's one region); None when none
        is known."""
        sets = [j.working_set for j in self.jobs if j.working_set is not None]
        return max(sets) if sets else None

    @property
    def read_share(self) -> float:
        """Reads' share of the workload's I/O, each job weighed by its rate where every job is
        paced, else by the I/O it keeps in flight (module docstring)."""
        if not self.jobs:
            return 0.0
        paced = all(j.rate_iops for j in self.jobs)
        weights = [float(j.rate_iops or 0) * j.numjobs if paced else j.weight for j in self.jobs]
        total = sum(weights)
        return (
            sum(w * j.read_share for w, j in zip(weights, self.jobs, strict=True)) / total
            if total
            else 0.0
        )

    @property
    def random_share(self) -> float:
        total = sum(j.weight for j in self.jobs)
        return sum(j.weight * j.random_share for j in self.jobs) / total if total else 0.0

    def flush_words(self) -> str:
        """The workload's flushing in words (each job named where they differ)."""
        if len(self.jobs) == 1:
            return self.jobs[0].flush_words()
        words = {j.flush_words() for j in self.writing}
        if not words:
            return "never writes"
        if len(words) == 1:
            return f"{next(iter(words))} (all {len(self.writing)} writing jobs)"
        return "; ".join(f"job {j.name} {j.flush_words()}" for j in self.writing)

    def held_by(self, ram_bytes: int | None, share: float) -> bool | None:
        """Whether its working set fits in `share` of the host's RAM (None: either is not known)."""
        ws = self.working_set
        if ws is None or not ram_bytes:
            return None
        return ws <= ram_bytes * share

    def as_dict(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "flushes": self.flushes,
            "mixed": self.mixed,
            "working_set_bytes": self.working_set,
            "read_share": round(self.read_share, 4),
            "random_share": round(self.random_share, 4),
            "reads_written": self.reads_written,
            "fixed_set": self.fixed_set,
            "jobs": [j.as_dict() for j in self.jobs],
        }


def _sections(text: str) -> Iterator[tuple[str, dict[str, str | None]]]:
    """(section name, its options in order, a later line winning) of fio job-file text; comments
    skipped."""
    name: str | None = None
    options: dict[str, str | None] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            if name is not None:
                yield name, options
            name, options = line[1:-1].strip(), {}
            continue
        if name is None:
            continue
        key, eq, value = line.partition("=")
        options[key.strip().lower()] = value.strip() if eq else None
    if name is not None:
        yield name, options


def _sizes(value: str | None) -> tuple[tuple[int, float], ...] | None:
    """A bssplit part (``8k/90:32k/10``, shares in %; a size without one shares what is left) or a
    plain size."""
    if not value:
        return None
    parts = [p for p in value.split(":") if p]
    out: list[tuple[int, float | None]] = []
    for p in parts:
        size, _, pct = p.partition("/")
        b = fio_bytes(size)
        if b is None:
            return None
        out.append((b, float(pct) / 100 if pct.replace(".", "", 1).isdigit() else None))
    given = sum(s for _, s in out if s is not None)
    open_ = [b for b, s in out if s is None]
    rest = max(0.0, 1.0 - given) / len(open_) if open_ else 0.0
    full = [(b, s if s is not None else rest) for b, s in out]
    total = sum(s for _, s in full)
    return tuple((b, s / total) for b, s in full) if total > 0 else None


def _block_sizes(
    o: Mapping[str, str | None],
) -> tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]:
    """(read sizes, write sizes) from bssplit, bs/blocksize or bsrange (module docstring)."""
    default = ((DEFAULT_BS, 1.0),)
    for key in ("bssplit", "bs", "blocksize"):
        if o.get(key):
            # "4k,64k": reads, writes; an empty part keeps fio's default for that direction
            # ("bs=,8k")
            parts = str(o[key]).split(",")
            r = _sizes(parts[0]) or default
            w = (_sizes(parts[1]) or default) if len(parts) > 1 else r
            return r, w
    for key in ("bsrange", "blocksize_range"):
        if o.get(key):
            lo, _, hi = str(o[key]).split(",")[0].partition("-")
            a, b = fio_bytes(lo), fio_bytes(hi or lo)
            if a and b:
                ends = ((a, 1.0),) if a == b else ((a, 0.5), (b, 0.5))
                return ends, ends
    return default, default


_READ_RW = {
    "read": (True, False, False),
    "randread": (True, False, False),
    "write": (False, True, False),
    "randwrite": (False, True, False),
    "rw": (True, True, False),
    "readwrite": (True, True, False),
    "randrw": (True, True, False),
    "trim": (False, False, True),
    "randtrim": (False, False, True),
    "trimwrite": (False, True, True),
    "randtrimwrite": (False, True, True),
}


def _read_share(reads: bool, writes: bool, o: Mapping[str, str | None]) -> float:
    if not reads:
        return 0.0
    if not writes:
        return 1.0
    if o.get("rwmixread") is not None:
        return min(100, _count(o["rwmixread"])) / 100
    if o.get("rwmixwrite") is not None:
        return 1 - min(100, _count(o["rwmixwrite"])) / 100
    return 0.5  # fio's default mix


def _flushing(o: Mapping[str, str | None]) -> tuple[int | None, str, bool]:
    """(writes per flush, the option that asks, every write synchronous)."""
    for key in ("sync", "o_sync"):
        if key in o and (o[key] or "").strip().lower() in _SYNC_ON:
            return 1, f"{key}={o[key]}" if o[key] else key, True
    for key in ("fsync", "fdatasync", "write_barrier"):
        n = _count(o.get(key))
        if n:
            return n, f"{key}={n}", False
    return None, "", False


def _region(o: Mapping[str, str | None]) -> int | None:
    files = _count(o.get("nrfiles")) or 1
    if o.get("filesize"):
        size = fio_bytes(str(o["filesize"]).split("-")[-1])  # a range: its upper end
        return None if size is None else size * files
    return fio_bytes(str(o["size"])) if o.get("size") else None


def job_io(name: str, o: Mapping[str, str | None]) -> JobIo:
    """One job's shape from its options (its [global]s' merged under its own)."""
    rw = (o.get("rw") or o.get("readwrite") or "read").split(":", 1)[0].strip().lower()
    reads, writes, trims = _READ_RW.get(rw, (True, False, False))
    random = 1.0 if rw.startswith("rand") else 0.0
    if o.get("percentage_random") is not None:
        random = min(100, _count(str(o["percentage_random"]).split(",")[0])) / 100
    read_sizes, write_sizes = _block_sizes(o)
    every, how, sync = _flushing(o)
    rates = [_count(v) for v in str(o.get("rate_iops") or "").split(",") if v.strip()]
    io = o.get("io_size") or o.get("io_limit")
    return JobIo(
        name=name,
        reads=reads,
        writes=writes,
        trims=trims,
        read_share=_read_share(reads, writes, o),
        random_share=random,
        read_sizes=read_sizes,
        write_sizes=write_sizes,
        iodepth=_count(o.get("iodepth")) or 1,
        numjobs=_count(o.get("numjobs")) or 1,
        rate_iops=sum(rates) or None,
        flush_every=every if writes else None,
        flush_option=how,
        sync_writes=sync and writes,
        final_flush=_flag(o.get("end_fsync")) or _flag(o.get("fsync_on_close")),
        region_bytes=_region(o),
        io_bytes=fio_bytes(io) if io else None,
    )


def _is_cell_section(name: str, options: Mapping[str, str | None]) -> bool:
    return name == "global" and any(k in options for k in CELL_SECTION_MARKERS)


def shape_of_text(workload: str, text: str, *, rendered: bool = False) -> IoShape:
    """The shape of an fio job text. ``rendered``: the text is one iomatrix gave fio (stored with
    each run), whose [global] naming the target (CELL_SECTION_MARKERS) is the cell's: only its
    region is the workload's, its flush options are the cache mode's (cache=writethrough on bare
    metal adds fdatasync=1, every cell a final flush)."""
    defaults: dict[str, str | None] = {}
    jobs: list[JobIo] = []
    for name, options in _sections(text):
        if name == "global":
            if rendered and _is_cell_section(name, options):
                options = {k: v for k, v in options.items() if k in CELL_REGION_OPTIONS}
            defaults = {**defaults, **options}
        elif name.lower() not in UNMEASURED_JOBS:
            jobs.append(job_io(name, {**defaults, **options}))
    return IoShape(workload, tuple(jobs))


def shape_of_workload(w: Workload, region_bytes: int | None = None) -> IoShape:
    """A preset's shape (its fields say it: fio/jobs.py renders them), on `region_bytes` (the plan's
    size; a workload with an image of its own runs on all of it). A custom job file's is its
    text's."""
    if w.custom_text is not None:
        head = f"[global]\nsize={region_bytes}\n" if region_bytes else ""
        return shape_of_text(w.name, head + w.custom_text)
    options: dict[str, str | None] = {"rw": w.rw, "bs": w.bs, "iodepth": str(w.iodepth)}
    if w.fdatasync:
        options["fdatasync"] = str(w.fdatasync)
    if w.rwmixread is not None:
        options["rwmixread"] = str(w.rwmixread)
    if w.rate_iops is not None:
        options["rate_iops"] = str(w.rate_iops)
    region = w.image_bytes or region_bytes
    if region:
        options["size"] = str(region)
    return IoShape(w.name, (job_io("measure", options),))


def combined(workload: str, shapes: Sequence[IoShape]) -> IoShape:
    """Several shapes' jobs as one workload's (a role made of job files)."""
    return IoShape(workload, tuple(j for s in shapes for j in s.jobs))
