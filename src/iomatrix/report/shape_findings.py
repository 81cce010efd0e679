"""Findings about the host page cache and an iSCSI LUN's write cache, decided by each workload's
shape (fio/shape.py, report/shapes.py) rather than its name (issue 53). librbd's is
report/flush_gate.py.

Both compare two cells that differ in one axis only (every other axis, the tier and the backing
equal), as the ratio of the workload's primary metric with its Fieller interval (stats/compare.py),
and say nothing when an interval is imprecise or the figures do not show the physics.

**A working set the host page cache holds.** With a cache mode that keeps the host page cache
(cache=writeback, writethrough, unsafe: ``cache.direct=off``) on storage the host kernel reads for
QEMU (a file, a block device, a kernel NFS mount or iSCSI session; not librbd, libiscsi or libnfs,
which bypass it), a workload that reads and whose working set fits in the host's RAM is served from
memory once it has read each block, and under a mode with a write cache (writeback, unsafe) a
workload that writes without making each write durable has its writes taken into memory and written
out after the run: the figure is memory's speed, not the disk's, even though iomatrix drops the
caches before each run. Said when such a workload — reading or writing so, its working set at most
``PAGE_CACHE_SHARE`` of the host's RAM (``mem_bytes`` recorded with the sweep) — runs faster under
the caching mode than under cache=none (interval above 1 + threshold); where such a workload's
caching figures are not shown faster, that they are memory's all the same (issue 70). The workloads
whose working set does not fit are named beside it with their own ratio where the sweep measured
them. The first screen tells it short (the working sets, the workloads, the largest gain, and the
plan key that measures the disk: ``size``); every ratio an answer states between a cell the page
cache served and one it did not carries the same warning (``page_cache_note``).

**An iSCSI LUN's write cache, by flushing.** With the LUN's write cache on (``lun_write_cache=on``),
the target acknowledges writes from its cache and writes it out on each SYNCHRONIZE CACHE (a guest
flush); off, it syncs every write. So the cache speeds up writes nobody flushes, less the more often
a workload flushes, and not at all one that flushes every write (measured here, tgt fileio LUN:
2.32× without flushes, 1.00× with fdatasync after every write, but 4.4× with one every 16 writes:
the cache still absorbs the 15 between). Said when a writing workload that never flushes is faster
with the cache on (interval above 1 + threshold) and one that flushes is not (interval holding 1 +
threshold or below it); a flushing workload that gains is no contrast, and then nothing is said. The
sentence names what is at stake: the unflushed writes the cache holds are lost with the target's
power."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.domain import CACHE, CacheMode
from iomatrix.domain.axes import size_words
from iomatrix.fio.shape import IoShape
from iomatrix.metrics import metric_info
from iomatrix.protocol_registry import network_protocol
from iomatrix.report.figures import ratio_text
from iomatrix.report.query import CellWorkload
from iomatrix.report.shapes import load_words
from iomatrix.stats.compare import RatioCI, ratio_ci
from iomatrix.stats.interference import RunInterference
from iomatrix.tiers import is_reference

# A working set counts as held by the page cache when it is at most this share of the host's RAM:
# the kernel keeps the rest for processes (QEMU, fio, Ceph, the guest's memory) and its own, and a
# shared host's neighbours.
PAGE_CACHE_SHARE = 0.5
# What a caching mode whose working set the page cache held measured, in every page-cache sentence
# (a crowded first screen says it once where a finding already does: report/screen.py).
MEMORY_NOT_DISK = "measured memory, not the disk"


@dataclass(frozen=True)
class Pair:
    """One workload's figure in a cell over its partner that differs in one axis only."""

    workload: str
    shape: IoShape
    cell: CellWorkload
    partner: CellWorkload
    ratio: RatioCI  # oriented: above 1, the cell is better than its partner (`pairs`)
    metric: str  # the workload's primary metric, which the ratio is of


def pairs(
    cws: Sequence[CellWorkload],
    axis: str,
    over: Callable[[str], bool],
    base: str,
    metric_of: Callable[[str], str],
    shapes: Mapping[str, IoShape],
) -> list[Pair]:
    """Each cell whose `axis` value `over` accepts, with the cell of `base` that equals it in every
    other axis, per workload of known shape with at least 2 runs on each side; its ratio oriented so
    that above 1 is the cell better (faster) than its partner: cell over partner for a throughput,
    partner over cell for a latency or a job's time."""

    def key(c: CellWorkload) -> tuple:
        return (
            c.workload,
            c.backing.get("backing_label"),
            tuple(sorted((k, v) for k, v in c.axes.items() if k != axis)),
        )

    partners = {key(c): c for c in cws if c.axes.get(axis) == base}
    out = []
    for c in cws:
        partner, shape = partners.get(key(c)), shapes.get(c.workload)
        if (
            partner is None
            or shape is None
            or c.axes.get(axis) == base
            or not over(c.axes.get(axis, ""))
        ):
            continue
        metric = metric_of(c.workload)
        a, b = c.samples.get(metric, []), partner.samples.get(metric, [])
        if len(a) >= 2 and len(b) >= 2:
            gain = ratio_ci(a, b) if metric_info(metric).higher_is_better else ratio_ci(b, a)
            out.append(Pair(c.workload, shape, c, partner, gain, metric))
    return out


def _where(p: Pair, among: Sequence[Pair]) -> str:
    """The pair's axes (the tier included) whose values vary among `among`, e.g. " (tier=blocklayer
    aio=native)": what tells two figures of one workload apart; "" when nothing does."""
    keys = sorted({k for q in among for k in q.cell.axes} - {"cache", "lun_write_cache"})
    varied = [k for k in keys if len({q.cell.axes.get(k) for q in among}) > 1]
    return f" ({' '.join(f'{k}={p.cell.axes.get(k)}' for k in varied)})" if varied else ""


def _faster(r: RatioCI, threshold: float) -> bool:
    return r.low is not None and not r.imprecise and r.low > 1.0 + threshold


def _not_faster(r: RatioCI, threshold: float) -> bool:
    return r.low is not None and r.high is not None and not r.imprecise and r.low <= 1.0 + threshold


def _figure(
    p: Pair, interference: Mapping[int, RunInterference], against: str = "", of: str = " of "
) -> str:
    """The pair's ratio with the host's load (`_said`)."""
    load = load_words([p.cell, p.partner], interference)
    return _said(p, against, of, f" [{load}]" if load else "")


def _said(p: Pair, against: str = "", of: str = " of ", loaded: str = "") -> str:
    """The pair's ratio: "3.00× (2.1–4.2)[ load] of cache=none" for a throughput; "1.17×
    (1.05–1.30) faster than cache=none[ load]" for a lower-is-better metric, whose ratio (oriented:
    above 1 better) needs its direction said (recommend/grammar.py). `against`: the partner's name,
    "" to leave it out; `of`: what joins it to a throughput's ratio."""
    info = metric_info(p.metric)
    if info.higher_is_better:
        return ratio_text(*p.ratio) + loaded + (f"{of}{against}" if against else "")
    better, worse = info.lower_words
    up = p.ratio.ratio is None or p.ratio.ratio >= 1
    shown = p.ratio if up else p.ratio.turned()
    than = f" than {against}" if against else ""
    return f"{ratio_text(*shown)} {better if up else worse}{than}{loaded}"


def kernel_client(backing_type: str, axes: Mapping[str, str]) -> bool:
    """The host kernel is the disk's client (a file, a block device, a kernel NFS mount or iSCSI
    session), so a cache mode that keeps the host page cache does keep it; not for QEMU's own
    userspace clients."""
    # (QEMU's own clients have no host page cache whatever the cache mode; each protocol says
    # whether its kernel client has: NetworkProtocol.host_page_cache)
    network = network_protocol(backing_type)
    return network is None or network.host_page_cache(axes)


def _kernel_client(c: CellWorkload) -> bool:
    return kernel_client(str(c.backing.get("backing_type", "")), c.axes)


def _absorbs_writes(shape: IoShape) -> bool:
    """Some job writes without flushing while it runs: the page cache takes those writes into
    memory and writes them out after the run. A job that flushes every N writes has them written
    out at each flush inside its measured time (the page cache only batches N at a time, whatever
    the working set): measured, fs-write (a flush per 128 MiB) put 460 MB on the host disk within
    its runs under cache=writeback, as under cache=none (guest/fs_shape.py)."""
    return any(j.writes and not j.flushes for j in shape.jobs)


def memory_served(c: CellWorkload, shape: IoShape) -> str:
    """What of the workload the host page cache serves in this cell: "reads", "writes", "reads and
    writes", or "" (cache.direct on, a userspace client, or a cache mode that writes each write
    through, for the writes)."""
    try:
        mode = CACHE[CacheMode(c.axes.get("cache", ""))]
    except ValueError:
        return ""
    if mode.direct or not _kernel_client(c):
        return ""
    # cache=unsafe drops the guest's flushes: every write stays in memory (measured: fs-write put
    # 1 MB on the host disk within its runs, its dirty pages at 531 MB; guest/fs_shape.py)
    held_writes = shape.writes and (mode.no_flush or _absorbs_writes(shape))
    served = [
        what
        for what, on in (
            ("reads", shape.read_share > 0),
            ("writes", mode.write_cache and held_writes),
        )
        if on
    ]
    return " and ".join(served)


def page_cache_note(
    chosen: CellWorkload, other: CellWorkload, shape: IoShape | None, ram_bytes: int | None
) -> str:
    """What a ratio between two cells of one workload carries when one cell's figure came from the
    host page cache and the other's did not, the working set fitting in RAM (``PAGE_CACHE_SHARE``):
    "cache=writeback measured memory, not the disk (128 MiB working set in RAM)"; "" when both or
    neither were served from it."""
    if shape is None or not shape.held_by(ram_bytes, PAGE_CACHE_SHARE) or chosen is other:
        return ""
    mine, theirs = memory_served(chosen, shape), memory_served(other, shape)
    if bool(mine) == bool(theirs):
        return ""
    cached = chosen if mine else other
    return (
        f"cache={cached.axes.get('cache')} {MEMORY_NOT_DISK} "
        f"({size_words(shape.working_set or 0)} working set in RAM)"
    )


def _io_words(shape: IoShape) -> str:
    return f"{shape.read_share:.0%} reads" if shape.read_share > 0 else "writes"


def _held(
    cws: Sequence[CellWorkload],
    threshold: float,
    shapes: Mapping[str, IoShape],
    metric_of: Callable[[str], str],
    ram_bytes: int,
) -> tuple[list[Pair], list[Pair]]:
    """(the pairs whose caching cell the page cache served, those of them it held and that ran
    faster)."""
    served = [
        p
        for p in pairs(cws, "cache", lambda v: v != "none", "none", metric_of, shapes)
        if memory_served(p.cell, p.shape)
    ]
    held = [
        p
        for p in served
        if p.shape.held_by(ram_bytes, PAGE_CACHE_SHARE) and _faster(p.ratio, threshold)
    ]
    return served, held


def _how_memory_served(held: Sequence[Pair]) -> str:
    """What memory's speed means for the told pairs' reads and writes."""
    parts = []
    reads = [p for p in held if "reads" in memory_served(p.cell, p.shape)]
    if any(p.shape.reads_written for p in reads):
        parts.append(
            "reads came from the host page cache, which kept what the job had just written"
        )
    if any(not p.shape.reads_written for p in reads):
        parts.append("reads ran at memory's speed once each block had been read")
    if any("writes" in memory_served(p.cell, p.shape) for p in held):
        parts.append("writes went to memory, to be written to the disk after the run")
    return " and ".join(parts)


def page_cache_finding(
    cws: Sequence[CellWorkload],
    threshold: float,
    shapes: Mapping[str, IoShape],
    metric_of: Callable[[str], str],
    ram_bytes: int | None,
    interference: Mapping[int, RunInterference] | None = None,
    short: bool = False,
    plan: str = "iomatrix plan",
    brief: bool = False,
) -> str | None:
    """The page-cache sentence, or None when the figures do not show it (module docstring).
    ``short``: the first screen's form, the working sets and workloads named with the largest gain,
    the figures left to --detail; ``brief``: one line, the workloads by name."""
    if not ram_bytes:
        return None
    served, held = _held(cws, threshold, shapes, metric_of, ram_bytes)
    if not held:
        return _memory_served(
            served, ram_bytes, plan, "brief" if brief else "short" if short else "long"
        )
    if brief:
        return _brief_held(held, plan)
    if short:
        return _short_page_cache(held, ram_bytes, plan)
    return _long_held(served, held, interference or {}, ram_bytes)


def _brief_held(held: Sequence[Pair], plan: str) -> str:
    """page_cache_finding's one line where the page cache held working sets that ran faster."""
    workloads = ", ".join(dict.fromkeys(p.workload for p in held))
    sizes = " and ".join(size_words(s) for s in sorted({p.shape.working_set or 0 for p in held}))
    how = _advice(
        held, f"a plan size beyond twice the RAM measures it ('{plan}'; --detail)", brief=True
    )
    return (
        f"the host page cache held the {sizes} working sets of {workloads}: {_modes(held)} "
        f"{MEMORY_NOT_DISK}; {how}"
    )


def _long_held(
    served: Sequence[Pair],
    held: Sequence[Pair],
    load: Mapping[int, RunInterference],
    ram_bytes: int,
) -> str:
    """page_cache_finding's --detail form where the page cache held working sets that ran faster:
    each pair's figure, the workloads it also served, those whose working set does not fit."""
    told = [
        f"{p.workload}{_where(p, held)} ({size_words(p.shape.working_set or 0)}, "
        f"{_io_words(p.shape)}): "
        f"cache={p.cell.axes['cache']} {_figure(p, load, 'cache=none')}"
        for p in held
    ]
    beyond = [
        f"{p.workload}{_where(p, served)}, whose {size_words(p.shape.working_set or 0)} "
        "does not fit, "
        f"{_figure(p, load)}"
        for p in served
        if p.shape.held_by(ram_bytes, PAGE_CACHE_SHARE) is False and not p.ratio.imprecise
    ]
    also = _served_not_faster(served, held, ram_bytes)
    fixed = _advice([p for p in (*held, *also) if p.shape.fixed_set], "")
    also_words = ", ".join(
        f"{_modes([q for q in also if q.workload == w])} on {w}"
        for w in dict.fromkeys(q.workload for q in also)
    )
    return (
        "the host page cache held these working sets (at most half of this host's "
        f"{size_words(ram_bytes)} "
        f"of RAM), so the caching mode measured memory, not the disk: {_how_memory_served(held)}: "
        + "; ".join(told)
        + (f"; {also_words} measured memory too, though not shown faster" if also else "")
        + ". A VM whose working set outgrows the host's free memory does not get this"
        + (f" ({'; '.join(beyond)})" if beyond else "")
        + (f"; {fixed}" if fixed else "")
        + "."
    )


def _served_not_faster(served: Sequence[Pair], held: Sequence[Pair], ram_bytes: int) -> list[Pair]:
    """The pairs of the workloads the page cache served, whose working set fits, but that ran no
    faster and are not among `held` (cache=unsafe on fs-write): memory's figures too, said beside
    the held ones (issue 70: full-matrix-fs's fs-write under unsafe)."""
    told = {p.workload for p in held}
    return [
        p for p in served if p.workload not in told and p.shape.held_by(ram_bytes, PAGE_CACHE_SHARE)
    ]


def _and(names: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def _flushes_dropped(p: Pair) -> bool:
    """The page cache served the pair's caching cell only because the mode drops the guest's
    flushes (cache=unsafe on a writer that flushes): no plan size measures the disk for it."""
    return p.shape.read_share == 0 and not _absorbs_writes(p.shape) and not p.shape.fixed_set


def _advice(told: Sequence[Pair], sized: str, brief: bool = False) -> str:
    """What measures the disk for the told workloads: `sized` (a plan size beyond twice the RAM)
    for those the plan's size sets; for a guest filesystem job, whose working set is fixed
    (IoShape.fixed_set), that cache=none does; for a flushing writer under cache=unsafe, that no
    size does; "" when none applies. `brief`: the fixed ones' part in a few words."""
    dropped = list(dict.fromkeys(p.workload for p in told if _flushes_dropped(p)))
    sized_by_plan = [p for p in told if not p.shape.fixed_set and not _flushes_dropped(p)]
    parts = [sized] if sized and sized_by_plan else []
    fixed = list(dict.fromkeys(p.workload for p in told if p.shape.fixed_set))
    if fixed and brief:
        parts.append("cache=none measures the disk")
    elif fixed:
        sets = " and ".join(dict.fromkeys(p.shape.fixed_set for p in told if p.shape.fixed_set))
        parts.append(
            f"{_and(fixed)} work{'s' if len(fixed) == 1 else ''} on {sets} whatever the "
            "plan's size: cache=none's figures are the disk's"
        )
    if dropped:
        parts.append(
            f"cache=unsafe drops the flushes of {_and(dropped)}"
            + ("" if brief else ", so no plan size measures the disk with it")
        )
    return "; ".join(parts)


def _modes(pairs: Sequence[Pair]) -> str:
    """The caching cells' cache modes (cache_modes_text)."""
    return cache_modes_text(str(p.cell.axes.get("cache")) for p in pairs)


def cache_modes_text(modes: Iterable[str]) -> str:
    """Cache modes, each once, in QEMU's order: "cache=writeback/writethrough/unsafe"."""
    seen = set(modes)
    order = [m.value for m in CacheMode if m.value in seen] + sorted(
        seen - {m.value for m in CacheMode}
    )
    return "cache=" + "/".join(order)


def _memory_served(
    served: Sequence[Pair], ram_bytes: int, plan: str, form: str = "long"
) -> str | None:
    """Where the page cache served a caching cell whose working set fits in RAM but the figures do
    not show it faster (a quickstart on a slow host, or a workload that reads what fio just wrote):
    its figures are memory's all the same, and the answer says so (issue 70: the README promised
    it, no quickstart output said it); None when no such pair. `form`: "long" (--detail), "short"
    (the first screen) or "brief" (one line of a crowded first screen)."""
    fits = [p for p in served if p.shape.held_by(ram_bytes, PAGE_CACHE_SHARE)]
    if not fits:
        return None
    sizes = " and ".join(size_words(s) for s in sorted({p.shape.working_set or 0 for p in fits}))
    per: dict[str, list[Pair]] = {}
    for p in fits:
        per.setdefault(p.workload, []).append(p)
    modes = {w: _modes(ps) for w, ps in per.items()}
    if len(set(modes.values())) == 1:
        served_by = f"{next(iter(modes.values()))} on {_and(list(per))}"
        said = (
            f"{next(iter(modes.values()))} figures are the host page cache's: the {sizes} "
            f"working set{'s' if len(per) > 1 else ''} of {', '.join(per)} "
            f"fit{'' if len(per) > 1 else 's'} in RAM, so they measured memory, not the disk"
        )
    else:  # modes that differ per workload (fs-write's writes stay in memory under unsafe only)
        served_by = " and ".join(f"{m} on {w}" for w, m in modes.items())
        said = (
            f"the host page cache served {served_by}, whose {sizes} working sets fit in RAM: "
            "those figures measured memory, not the disk"
        )
    if form == "brief":
        how = _advice(fits, f"a plan size beyond twice the RAM measures it ('{plan}')", brief=True)
        # (a guest filesystem job's advice is whole: nothing of it left to --detail)
        more = "" if all(p.shape.fixed_set for p in fits) else " (--detail)"
        return f"{served_by} {MEMORY_NOT_DISK}; {how}{more}"
    if form == "short":
        sized = f"a plan size beyond twice the RAM measures the disk ('{plan}'; --detail)"
        how = _advice(fits, sized)
        return f"{said}; {how}" + ("" if how.startswith(sized) else " (--detail)")
    how = _advice(
        fits,
        f"a plan size beyond twice the RAM ({size_words(2 * ram_bytes)}) measures the disk "
        f"('{plan}')",
    )
    return (
        f"{said}, though not shown faster than cache=none here. A VM whose working set outgrows "
        f"the host's free memory does not get memory's speed; {how}."
    )


def _short_page_cache(held: Sequence[Pair], ram_bytes: int, plan: str) -> str:
    """The first screen's page-cache sentence (page_cache_finding with ``short``)."""
    sizes = sorted({p.shape.working_set or 0 for p in held})
    workloads = list(dict.fromkeys(p.workload for p in held))
    modes = _modes(held)
    # The largest gain of the tiers that answer (bare metal's buffered fio is the page cache too,
    # but no answer)
    top = max(
        held,
        key=lambda p: (not is_reference(str(p.cell.axes.get("tier", ""))), p.ratio.ratio or 0.0),
    )
    return (
        f"the host page cache held the {' and '.join(size_words(s) for s in sizes)} working "
        f"set{'s' if len(workloads) > 1 else ''} of {', '.join(workloads)} (at most half "
        "of this host's "
        f"{size_words(ram_bytes)} of RAM): {modes} measured memory, not the disk (up to "
        f"{_said(top, 'cache=none', of=' ')}); a working set beyond the "
        "host's free memory does not get this. "
        "To measure the disk: "
        + _advice(held, f"a plan size beyond twice the RAM ('{plan}' says how and its cost)")
        + "; figures: --detail."
    )


def _server_write_cache(backing_type: object, axis: str) -> bool:
    """Whether `axis` switches the volatile write cache of the server's disk of `backing_type`."""
    network = network_protocol(str(backing_type or ""))
    return network is not None and network.server_write_cache_axis == axis


def lun_write_cache_finding(
    cws: Sequence[CellWorkload],
    threshold: float,
    shapes: Mapping[str, IoShape],
    metric_of: Callable[[str], str],
    interference: Mapping[int, RunInterference] | None = None,
    short: bool = False,
    brief: bool = False,
) -> str | None:
    """The LUN write-cache sentence, or None when the figures do not show it (module docstring);
    ``short``: the first screen's form (the hosts' load: --detail); ``brief``: one line, the
    workloads by name."""
    load = interference or {}
    writing = [
        p
        for p in pairs(cws, "lun_write_cache", lambda v: v == "on", "off", metric_of, shapes)
        if _server_write_cache(p.cell.backing.get("backing_type"), "lun_write_cache")
        and p.shape.writes
    ]
    gained = [p for p in writing if not p.shape.flushes and _faster(p.ratio, threshold)]
    flat = [p for p in writing if p.shape.flushes and _not_faster(p.ratio, threshold)]
    if not gained or not flat:
        return None

    def told(p: Pair) -> str:
        return (
            f"{p.workload}{_where(p, writing)}, which {p.shape.flush_words()}, {_figure(p, load)}"
        )

    if brief:
        fast = ", ".join(dict.fromkeys(p.workload for p in gained))
        slow = ", ".join(dict.fromkeys(p.workload for p in flat))
        return (
            f"the LUN's write cache sped up {fast}, not {slow} (flushed): a target power "
            "loss takes the writes it holds (--detail)"
        )
    if short:  # one figure (or the range of them) per workload: every pair's is in --detail
        fast, slow = _per_workload(gained), _per_workload(flat)
        return (
            f"the iSCSI LUN's write cache (lun_write_cache=on over off) sped up {fast}, "
            f"but not {slow}: the "
            "target writes its cache out at each flush, so it gains by holding unflushed "
            "writes, which a power "
            "loss of the target takes; figures: --detail."
        )
    fast, slow = "; ".join(told(p) for p in gained), "; ".join(told(p) for p in flat)
    return (
        "the iSCSI LUN's write cache (lun_write_cache=on over off) sped up writes nobody flushes — "
        + fast
        + " — but not writes that are flushed — "
        + slow
        + ": the target writes its cache out at each flush, "
        "so what the cache gains is the writes it holds unflushed, which a power loss of "
        "the target takes."
    )


def _per_workload(told: Sequence[Pair]) -> str:
    """The short finding's figures: per workload, its pair's ratio, or the range of its pairs'
    ratios ("2.96–3.23× over 8 cell pairs": the LUN types, formats and cache modes the sweep crossed
    the write cache with)."""
    out = []
    for workload in dict.fromkeys(p.workload for p in told):
        mine = [p for p in told if p.workload == workload]
        if len(mine) == 1:
            figure = ratio_text(*mine[0].ratio)
        else:
            points = sorted(p.ratio.ratio for p in mine if p.ratio.ratio is not None)
            figure = f"{points[0]:.2f}–{points[-1]:.2f}× over {len(mine)} cell pairs"
        out.append(f"{workload}, which {mine[0].shape.flush_words()}, {figure}")
    return "; ".join(out)


def shape_findings(
    cws: Sequence[CellWorkload],
    threshold: float,
    shapes: Mapping[str, IoShape],
    metric_of: Callable[[str], str],
    ram_bytes: int | None,
    interference: Mapping[int, RunInterference] | None = None,
    short: bool = False,
    plan: str = "iomatrix plan",
    brief: bool = False,
) -> list[str]:
    """The page-cache and LUN write-cache findings of a sweep (zero, one or two sentences);
    ``short``: their first-screen forms; ``brief``: one line each (a crowded first screen's)."""
    found = [
        page_cache_finding(
            cws=cws,
            threshold=threshold,
            shapes=shapes,
            metric_of=metric_of,
            ram_bytes=ram_bytes,
            interference=interference,
            short=short,
            plan=plan,
            brief=brief,
        ),
        lun_write_cache_finding(
            cws=cws,
            threshold=threshold,
            shapes=shapes,
            metric_of=metric_of,
            interference=interference,
            short=short,
            brief=brief,
        ),
    ]
    return [f for f in found if f is not None]
