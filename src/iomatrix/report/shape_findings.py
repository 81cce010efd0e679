"""Findings about the host page cache and an iSCSI LUN's write cache, decided by each workload's shape
(fio/shape.py, report/shapes.py) rather than its name (issue 53). librbd's is report/rbd_flush.py.

Both compare two cells that differ in one axis only (every other axis, the tier and the backing equal), as the
ratio of the workload's primary metric with its Fieller interval (stats/compare.py), and say nothing when an
interval is imprecise or the figures do not show the physics.

**A working set the host page cache holds.** With a cache mode that keeps the host page cache (cache=writeback,
writethrough, unsafe: ``cache.direct=off``) on storage the host kernel reads for QEMU (a file, a block device, a
kernel NFS mount or iSCSI session; not librbd, libiscsi or libnfs, which bypass it), a workload that reads and whose
working set fits in the host's RAM is served from memory once it has read each block: the figure is memory's speed,
not the disk's, even though iomatrix drops the caches before each run. Said when such a workload — reading, its
working set at most ``PAGE_CACHE_SHARE`` of the host's RAM (``mem_bytes`` recorded with the sweep) — reads faster
under the caching mode than under cache=none (interval above 1 + threshold). The reading workloads whose working set
does not fit are named beside it with their own ratio where the sweep measured them.

**An iSCSI LUN's write cache, by flushing.** With the LUN's write cache on (``lun_write_cache=on``), the target
acknowledges writes from its cache and writes it out on each SYNCHRONIZE CACHE (a guest flush); off, it syncs every
write. So the cache speeds up writes nobody flushes, less the more often a workload flushes, and not at all one
that flushes every write (measured here, tgt fileio LUN: 2.32× without flushes, 1.00× with fdatasync after every
write, but 4.4× with one every 16 writes: the cache still absorbs the 15 between). Said when a writing workload that
never flushes is faster with the cache on (interval above 1 + threshold) and one that flushes is not (interval
holding 1 + threshold or below it); a flushing workload that gains is no contrast, and then nothing is said. The
sentence names what is at stake: the unflushed writes the cache holds are lost with the target's power.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.domain import CACHE, CacheMode
from iomatrix.domain.axes import size_words
from iomatrix.fio.shape import IoShape
from iomatrix.report.figures import ratio_text
from iomatrix.report.query import CellWorkload
from iomatrix.report.shapes import load_words
from iomatrix.stats.compare import RatioCI, ratio_ci
from iomatrix.stats.interference import RunInterference

# A working set counts as held by the page cache when it is at most this share of the host's RAM: the kernel keeps
# the rest for processes (QEMU, fio, Ceph, the guest's memory) and its own, and a shared host's neighbours.
PAGE_CACHE_SHARE = 0.5
# Storage QEMU reaches through its own userspace client: no host page cache whatever the cache mode (backing
# type → the axis naming the client, and its userspace value). librbd has a cache of its own (report/rbd_flush.py).
_USERSPACE = {"iscsi": ("initiator", "libiscsi"), "nfs": ("nfs_client", "libnfs")}
_NO_PAGE_CACHE = frozenset({"rbd"})


@dataclass(frozen=True)
class Pair:
    """One workload's figure in a cell over its partner that differs in one axis only."""

    workload: str
    shape: IoShape
    cell: CellWorkload
    partner: CellWorkload
    ratio: RatioCI


def pairs(cws: Sequence[CellWorkload], axis: str, over: Callable[[str], bool], base: str,
          metric_of: Callable[[str], str], shapes: Mapping[str, IoShape]) -> list[Pair]:
    """Each cell whose `axis` value `over` accepts, with the cell of `base` that equals it in every other axis,
    per workload of known shape with at least 2 runs on each side."""
    def key(c: CellWorkload) -> tuple:
        return (c.workload, c.backing.get("backing_label"), tuple(sorted((k, v) for k, v in c.axes.items()
                                                                         if k != axis)))

    partners = {key(c): c for c in cws if c.axes.get(axis) == base}
    out = []
    for c in cws:
        partner, shape = partners.get(key(c)), shapes.get(c.workload)
        if partner is None or shape is None or c.axes.get(axis) == base or not over(c.axes.get(axis, "")):
            continue
        metric = metric_of(c.workload)
        a, b = c.samples.get(metric, []), partner.samples.get(metric, [])
        if len(a) >= 2 and len(b) >= 2:
            out.append(Pair(c.workload, shape, c, partner, ratio_ci(a, b)))
    return out


def _where(p: Pair, among: Sequence[Pair]) -> str:
    """The pair's axes (the tier included) whose values vary among `among`, e.g. " (tier=blocklayer aio=native)":
    what tells two figures of one workload apart; "" when nothing does."""
    keys = sorted({k for q in among for k in q.cell.axes} - {"cache", "lun_write_cache"})
    varied = [k for k in keys if len({q.cell.axes.get(k) for q in among}) > 1]
    return f" ({' '.join(f'{k}={p.cell.axes.get(k)}' for k in varied)})" if varied else ""


def _faster(r: RatioCI, threshold: float) -> bool:
    return r.low is not None and not r.imprecise and r.low > 1.0 + threshold


def _not_faster(r: RatioCI, threshold: float) -> bool:
    return r.low is not None and r.high is not None and not r.imprecise and r.low <= 1.0 + threshold


def _figure(p: Pair, interference: Mapping[int, RunInterference]) -> str:
    load = load_words([p.cell, p.partner], interference)
    return ratio_text(*p.ratio) + (f" [{load}]" if load else "")


def _page_cached(c: CellWorkload) -> bool:
    """The cell's cache mode keeps the host page cache, and the host kernel is the disk's client."""
    try:
        direct = CACHE[CacheMode(c.axes.get("cache", ""))].direct
    except ValueError:
        return False
    kind = str(c.backing.get("backing_type", ""))
    axis, userspace = _USERSPACE.get(kind, ("", ""))
    return not direct and kind not in _NO_PAGE_CACHE and not (axis and c.axes.get(axis, userspace) == userspace)


def page_cache_finding(cws: Sequence[CellWorkload], threshold: float, shapes: Mapping[str, IoShape],
                       metric_of: Callable[[str], str], ram_bytes: int | None,
                       interference: Mapping[int, RunInterference] | None = None) -> str | None:
    """The page-cache sentence, or None when the figures do not show it (module docstring)."""
    if not ram_bytes:
        return None
    load = interference or {}
    reading = [p for p in pairs(cws, "cache", lambda v: v != "none", "none", metric_of, shapes)
               if _page_cached(p.cell) and p.shape.read_share > 0]
    held = [p for p in reading if p.shape.held_by(ram_bytes, PAGE_CACHE_SHARE) and _faster(p.ratio, threshold)]
    if not held:
        return None
    told = [f"{p.workload}{_where(p, held)} ({size_words(p.shape.working_set or 0)}, {p.shape.read_share:.0%} reads): "
            f"cache={p.cell.axes['cache']} {_figure(p, load)} of cache=none" for p in held]
    beyond = [f"{p.workload}{_where(p, reading)}, whose {size_words(p.shape.working_set or 0)} does not fit, "
              f"{_figure(p, load)}" for p in reading
              if p.shape.held_by(ram_bytes, PAGE_CACHE_SHARE) is False and not p.ratio.imprecise]
    return (f"the host page cache held these working sets (at most half of this host's {size_words(ram_bytes)} "
            "of RAM), so their reads ran at memory's speed, not the disk's, once each block had been read: "
            + "; ".join(told) + ". A VM whose working set outgrows the host's free memory does not get this"
            + (f" ({'; '.join(beyond)})" if beyond else "") + ".")


def lun_write_cache_finding(cws: Sequence[CellWorkload], threshold: float, shapes: Mapping[str, IoShape],
                            metric_of: Callable[[str], str],
                            interference: Mapping[int, RunInterference] | None = None) -> str | None:
    """The LUN write-cache sentence, or None when the figures do not show it (module docstring)."""
    load = interference or {}
    writing = [p for p in pairs(cws, "lun_write_cache", lambda v: v == "on", "off", metric_of, shapes)
               if p.cell.backing.get("backing_type") == "iscsi" and p.shape.writes]
    gained = [p for p in writing if not p.shape.flushes and _faster(p.ratio, threshold)]
    flat = [p for p in writing if p.shape.flushes and _not_faster(p.ratio, threshold)]
    if not gained or not flat:
        return None
    fast = "; ".join(f"{p.workload}{_where(p, writing)}, which {p.shape.flush_words()}, {_figure(p, load)}"
                     for p in gained)
    slow = "; ".join(f"{p.workload}{_where(p, writing)}, which {p.shape.flush_words()}, {_figure(p, load)}"
                     for p in flat)
    return ("the iSCSI LUN's write cache (lun_write_cache=on over off) sped up writes nobody flushes — " + fast
            + " — but not writes that are flushed — " + slow + ": the target writes its cache out at each flush, "
            "so what the cache gains is the writes it holds unflushed, which a power loss of the target takes.")


def shape_findings(cws: Sequence[CellWorkload], threshold: float, shapes: Mapping[str, IoShape],
                   metric_of: Callable[[str], str], ram_bytes: int | None,
                   interference: Mapping[int, RunInterference] | None = None) -> list[str]:
    """The page-cache and LUN write-cache findings of a sweep (zero, one or two sentences)."""
    found = [page_cache_finding(cws, threshold, shapes, metric_of, ram_bytes, interference),
             lun_write_cache_finding(cws, threshold, shapes, metric_of, interference)]
    return [f for f in found if f is not None]
