"""A client cache that stays writethrough until the guest's first flush (issue 35), told in a
sentence of its own when a sweep's figures show it: the renderer; the facts (the client, its
until-flush and policy axes, their defaults) are the protocol's `flush_gated_cache`. Ceph RBD's
librbd is the one: it keeps its cache writethrough until the guest's first flush (ceph.conf `rbd
cache writethrough until flush`, Ceph's default on), so QEMU `cache=writeback` gives a guest that
never flushes nothing over `cache=none`; once the workload flushes now and then, or the setting is
off, the same cache acknowledges writes early and is faster.

Pure functions over a sweep's cells: each `cache=writeback` cell on the protocol's backing is
compared with the `cache=none` cell of the same workload and the same other axes (the client's
cache is off under cache=none, so that cell carries the default policy and until-flush values), as
the ratio of the workload's primary metric with its Fieller interval (stats/compare.py). The
sentence is said only when

* a workload that never flushes shows writeback **no faster than none** under until-flush on: its
  interval holds 1 or lies below it (low ≤ 1; below 1 on a loaded host, where librbd's writethrough
  cache costs CPU and gives nothing back), and
* with the same policy, writeback is **faster by more than the threshold** (low > 1 + threshold) on
  a workload that flushes (until-flush on) or with until-flush off on the non-flushing workload.

Otherwise the trap is not told (an imprecise interval never shows anything). Where workloads that
flush and workloads that never do were both measured precisely (until-flush on), ``figures_finding``
says what writeback measured for each instead, with its shape and the host's load, and that the
figures do not show the trap: two answers that differ, or agree, are explained either way (on a
quiet host here both kinds once gained 1.07–1.11×).

Whether a workload flushes is read from its **shape** (fio/shape.py, report/shapes.py), not its
name: a preset, a custom job file and a role's jobs alike. Flushing means flushes while it runs
(fsync/fdatasync/write_barrier every N writes, or synchronous writes); the final flush every cell
sends after the measurement does not count (librbd stays writethrough through all of it). A workload
whose jobs share one disk counts as flushing where any of its writing jobs flushes: librbd's switch
is per image, so the first flush turns writeback on for every job of the disk; the sentence says so
where its jobs differ. Each workload's figure is told with its shape (how it flushes) and the host's
load during the pair's runs (report/shapes.load_words), so that two job files answered differently —
one cache=none, one writeback — are explained by what they do and what the host was doing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.domain import clients
from iomatrix.fio.shape import IoShape
from iomatrix.protocol_registry import network_protocol
from iomatrix.protocols.base import FlushGatedCache
from iomatrix.report.figures import ratio_text
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import primary_metric
from iomatrix.report.shapes import load_words
from iomatrix.stats.compare import RatioCI, ratio_ci
from iomatrix.stats.interference import RunInterference

# Axes a sweep on one backing may vary that change the figures too (beside the protocol's own,
# FlushGatedCache.context_axes): a finding is stated per value of them.
_CONTEXT_AXES = (clients.NAME, "format", "backing")


@dataclass(frozen=True)
class WritebackGain:
    """cache=writeback over cache=none for one workload and one setting of the writeback cell's
    client cache (its policy, its until-flush switch)."""

    workload: str
    # the workload sends flushes while it runs (its shape: fsync/fdatasync every N writes, sync
    # writes)
    flushes: bool
    policy: str
    until_flush: str
    ratio: RatioCI
    # The pair's other axes that a sweep may vary besides the client cache's (e.g. clients=2): gains
    # are only ever compared within one context
    context: tuple[tuple[str, str], ...] = ()
    # how it flushes, in words (IoShape.flush_words): "flushes every 32 writes (fdatasync=32)"
    how: str = ""
    # the host's load during the pair's runs (report/shapes.load_words); "" when not judged
    load: str = ""
    mixed: bool = False  # some of its writing jobs flush, some never do
    read_share: float = 0.0  # reads' share of its I/O


def writeback_gains(
    cws: Sequence[CellWorkload],
    gate: FlushGatedCache,
    metric_of: Callable[[str], str],
    shape_of: Callable[[str], IoShape | None],
    interference: Mapping[int, RunInterference] | None = None,
) -> list[WritebackGain]:
    """Every cache=writeback cell × workload of `cws` (the sweep's cells on one protocol's backing,
    whose client cache `gate` is: the protocol's `findings` hook is given those) paired with its
    cache=none partner;
    `shape_of` gives a workload's shape (None: not known, as for a guest filesystem job: left out);
    `interference` the runs' load verdicts (report/interference.py)."""

    # the axes a writeback cell may differ in from its cache=none partner (beside its identity)
    varied = ("cache", gate.policy_axis, gate.until_flush_axis)
    context_axes = (*_CONTEXT_AXES, *gate.context_axes)

    def others(c: CellWorkload) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in c.axes.items() if k not in varied))

    def key(c: CellWorkload) -> tuple:
        return (c.workload, others(c))

    cells = list(cws)
    none = {key(c): c for c in cells if c.axes.get("cache") == "none"}
    out = []
    for c in cells:
        partner = none.get(key(c))
        if c.axes.get("cache") != "writeback" or partner is None:
            continue
        metric, shape = metric_of(c.workload), shape_of(c.workload)
        if shape is None or not shape.writes:
            continue
        a, b = c.samples.get(metric, []), partner.samples.get(metric, [])
        if len(a) < 2 or len(b) < 2:
            continue
        out.append(
            WritebackGain(
                workload=c.workload,
                flushes=shape.flushes,
                policy=c.axes.get(gate.policy_axis, gate.default_policy),
                until_flush=c.axes.get(gate.until_flush_axis, gate.default_until_flush),
                ratio=ratio_ci(a, b),
                context=tuple((k, v) for k, v in others(c) if k in context_axes),
                how=shape.flush_words(),
                load=load_words([c, partner], interference or {}),
                mixed=shape.mixed,
                read_share=shape.read_share,
            )
        )
    return out


def _flat(r: RatioCI) -> bool:
    """Shown no faster: a precise interval that holds 1 or lies below it."""
    return r.low is not None and r.high is not None and not r.imprecise and r.low <= 1.0


def _faster(r: RatioCI, threshold: float) -> bool:
    return r.low is not None and not r.imprecise and r.low > 1.0 + threshold


def _ratio(g: WritebackGain) -> str:
    """The ratio with its interval, and the host's load during its runs where it was judged."""
    return ratio_text(*g.ratio) + (f" [{g.load}]" if g.load else "")


def _which(g: WritebackGain, gate: FlushGatedCache) -> str:
    """What the workload does, as a relative clause: "which never flushes", "which flushes every 32
    writes …"."""
    if g.mixed:
        return (
            f"which mixes jobs that flush with jobs that never do ({g.how}; on one disk "
            "the first flush turns "
            f"{gate.client}'s cache writeback for all of them)"
        )
    return (
        f"which {g.how}"
        if g.how
        else ("which flushes now and then" if g.flushes else "which never flushes")
    )


def _flat_clause(g: WritebackGain, first: bool, gate: FlushGatedCache) -> str:
    slower = g.ratio.high is not None and g.ratio.high < 1.0
    how = "slower than" if slower else "no faster than"
    if first:
        return (
            f"on {g.workload}, {_which(g, gate)}, QEMU cache=writeback was {how} cache=none "
            f"({_ratio(g)})"
        )
    return f"on {g.workload}, {_which(g, gate)}, it was {how} cache=none ({_ratio(g)})"


def _contrasts(
    mine: Sequence[WritebackGain],
    flat: Sequence[WritebackGain],
    threshold: float,
    gate: FlushGatedCache,
) -> list[str]:
    """Where writeback is clearly faster than none beside the `flat` workloads: the flushing
    workloads (until-flush on), and a flat workload with until-flush off."""
    names = {g.workload for g in flat}
    out = [
        f"with {g.workload}, {_which(g, gate)}, it was {_ratio(g)}"
        for g in mine
        if g.flushes and g.until_flush == "on" and _faster(g.ratio, threshold)
    ]
    return out + [
        f"with {gate.until_flush_axis}=off, on {g.workload}, it was {_ratio(g)}"
        for g in mine
        if g.workload in names and g.until_flush == "off" and _faster(g.ratio, threshold)
    ]


def _unexplained(mine: Sequence[WritebackGain], gate: FlushGatedCache) -> list[str]:
    """Workloads that never flush yet gained under until-flush on: said, not hidden (reads are what
    the client's cache serves while it is writethrough)."""
    out = []
    for g in mine:
        if g.flushes or g.until_flush != "on" or _flat(g.ratio) or g.ratio.imprecise:
            continue
        why = (
            f": it reads {g.read_share:.0%} of its I/O, which {gate.client}'s cache serves even "
            "while writethrough"
            if g.read_share > 0
            else ""
        )
        out.append(f"on {g.workload}, which never flushes either, writeback was {_ratio(g)}{why}")
    return out


def _told(
    mine: Sequence[WritebackGain], threshold: float, gate: FlushGatedCache
) -> list[str] | None:
    """The clauses of one context and policy's sentence, or None when its figures do not show the
    trap."""
    flat = [g for g in mine if not g.flushes and g.until_flush == "on" and _flat(g.ratio)]
    contrasts = _contrasts(mine, flat, threshold, gate) if flat else []
    if not contrasts:
        return None
    return (
        [_flat_clause(g, i == 0, gate) for i, g in enumerate(flat)]
        + contrasts
        + _unexplained(mine, gate)
    )


def _short_told(
    mine: Sequence[WritebackGain], threshold: float, gate: FlushGatedCache
) -> list[str]:
    """The first screen's clauses of what `_told` tells: each ratio with its interval and what the
    workload does, the host's load and the shapes' details left to --detail."""
    flat = [g for g in mine if not g.flushes and g.until_flush == "on" and _flat(g.ratio)]
    names = {g.workload for g in flat}
    out = [f"{ratio_text(*g.ratio)} on {g.workload}, which never flushes" for g in flat]
    out += [
        f"{ratio_text(*g.ratio)} on {g.workload}, {_which(g, gate)}"
        for g in mine
        if g.flushes and g.until_flush == "on" and _faster(g.ratio, threshold)
    ]
    return out + [
        f"{ratio_text(*g.ratio)} on {g.workload} with it off"
        for g in mine
        if g.workload in names and g.until_flush == "off" and _faster(g.ratio, threshold)
    ]


def _brief_trap(mine: Sequence[WritebackGain], lead: str, gate: FlushGatedCache) -> str:
    """The trap in one line (trap_finding with ``brief``): the workloads that never flush by name,
    the figures in --detail; `lead`: the conditions and settings it holds at (_lead)."""
    never = ", ".join(
        dict.fromkeys(g.workload for g in mine if not g.flushes and g.until_flush == "on")
    )
    return (
        lead + f"{gate.client} is writethrough until the first flush: cache=writeback speeds up "
        f"{never} (never flushes) only with {gate.until_flush_axis}=off"
    )


def _base(context: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A gain's context without its number of clients: the condition a finding is told across
    rather than per value (issue 70), said in words ("at 1, 2 and 4 clients on the backend"),
    never as a setting ("with clients=1")."""
    return tuple((k, v) for k, v in context if k != clients.NAME)


def _count(context: tuple[tuple[str, str], ...]) -> str | None:
    return dict(context).get(clients.NAME)


def _lead(
    base: tuple[tuple[str, str], ...], gains: Sequence[WritebackGain], counts: Sequence[str]
) -> str:
    """What a finding holds at, before its sentence: the settings of its context the sweep varies
    ("with format=qcow2, "), and where the sweep varies the number of clients, the counts it holds
    at in words ("at 1 and 4 clients on the backend, "); "" where it varies neither."""
    where = ", ".join(
        f"{k}={v}" for k, v in base if len({dict(g.context).get(k) for g in gains}) > 1
    )
    on = f"at {clients.in_words(counts)} on the backend" if counts else ""
    said = ", ".join(x for x in (f"with {where}" if where else "", on) if x)
    return f"{said}, " if said else ""


def _not_shown(
    gains: Sequence[WritebackGain], counts: Sequence[str], policy: str, short: bool
) -> str:
    """The counts of clients whose figures do not show the trap (under the finding's `policy`),
    with what writeback measured there on each workload that never flushes ("At 2 clients the
    figures do not show it: …"); "" where every count shows it."""
    out = []
    for count in counts:
        mine = [
            g
            for g in gains
            if _count(g.context) == count
            and g.policy == policy
            and not g.flushes
            and g.until_flush == "on"
        ]
        told = ", ".join(
            f"{ratio_text(*g.ratio) if short else _ratio(g)} on {g.workload}" for g in mine
        )
        measured = f": cache=writeback over cache=none was {told} with it on" if told else ""
        out.append(f"at {clients.in_words([count])} the figures do not show it{measured}")
    said = "; ".join(out)
    return f"{said[:1].upper()}{said[1:]}. " if out else ""


@dataclass(frozen=True)
class _Shown:
    """Where one policy's figures show the trap (trap_finding): its context without the number of
    clients, its policy, the gains of each client count that shows it (`per`, in order), the
    counts that do not (`others`), and every gain of the context (`rest`)."""

    base: tuple[tuple[str, str], ...]
    policy: str
    per: list[tuple[str | None, list[WritebackGain]]]
    held: list[str]  # the counts named, where the sweep varies them ([] where it does not)
    others: list[str]
    rest: list[WritebackGain]


def _shown(
    gains: Sequence[WritebackGain],
    base: tuple[tuple[str, str], ...],
    policy: str,
    threshold: float,
    gate: FlushGatedCache,
) -> _Shown | None:
    """Which client counts of `base` and `policy` show the trap (_told), None where none does."""
    rest = [g for g in gains if _base(g.context) == base]
    counts = sorted({_count(g.context) for g in rest}, key=clients.by_number)
    told = _told_per_count(rest, counts, policy, threshold, gate)
    if not told:
        return None
    # the counts are named only where the sweep varies them
    named = [c for c in counts if c is not None] if len(counts) > 1 else []
    held = [c for c in named if c in told]
    per = [(c, told[c]) for c in (held or [next(iter(told))])]
    return _Shown(base, policy, per, held, [c for c in named if c not in told], rest)


def _told_per_count(
    rest: Sequence[WritebackGain],
    counts: Sequence[str | None],
    policy: str,
    threshold: float,
    gate: FlushGatedCache,
) -> dict[str | None, list[WritebackGain]]:
    """The gains under `policy` of each client count whose figures show the trap (_told)."""
    told: dict[str | None, list[WritebackGain]] = {}
    for count in counts:
        mine = [g for g in rest if g.policy == policy and _count(g.context) == count]
        if _told(mine, threshold, gate) is not None:
            told[count] = mine
    return told


def _short_trap(s: _Shown, lead: str, threshold: float, gate: FlushGatedCache) -> str:
    """The first screen's form of the trap (trap_finding with ``short``)."""
    named = "" if s.policy == gate.default_policy else f"; {gate.policy_axis}={s.policy}"
    figures = "; ".join(
        (f"at {clients.in_words([c])}, " if s.held else "")
        + (", " if s.held else "; ").join(_short_told(m, threshold, gate))
        for c, m in s.per
    )
    return (
        lead + f"{gate.client} stays writethrough until the guest's first flush "
        f"({gate.until_flush_axis}=on, {gate.defaults_of}'s default"
        f"{named}): cache=writeback over cache=none was "
        + figures
        + ". "
        + _not_shown(s.rest, s.others, s.policy, True)
        + f"A guest that never flushes gets {gate.client}'s writeback cache only with it "
        "off; figures: --detail."
    )


def _full_trap(s: _Shown, lead: str, threshold: float, gate: FlushGatedCache) -> str:
    """The trap in full (--detail): each count's clauses with the host's load."""
    both = any(
        g.flushes and g.until_flush == "on" and _faster(g.ratio, threshold)
        for _, m in s.per
        for g in m
    )
    clauses = ". ".join(
        (f"{'w' if i == 0 else 'W'}ith {clients.in_words([c])}, " if s.held else "")
        + "; ".join(_told(m, threshold, gate) or [])
        for i, (c, m) in enumerate(s.per)
    )
    return (
        lead + f"{gate.client} stays writethrough until the guest's first flush "
        f"({gate.until_flush_axis}=on, {gate.defaults_of}'s "
        f"default; {gate.policy_axis}={s.policy}): "
        + clauses
        + ". "
        + _not_shown(s.rest, s.others, s.policy, False)
        + f"A guest that never sends a "
        f"flush never gets {gate.client}'s writeback cache: cache=writeback alone does not "
        "speed up its writes"
        + (
            ". On one disk together they would all get it once any of them flushes "
            f"({gate.client}'s switch is "
            f"per {gate.scope}): a VM holding both kinds counts as flushing"
            if both
            else ""
        )
        + "."
    )


def trap_finding(
    gains: Sequence[WritebackGain],
    threshold: float,
    gate: FlushGatedCache,
    short: bool = False,
    brief: bool = False,
) -> str | None:
    """The sentence, or None when the figures do not show the trap (module docstring); ``short``:
    the first screen's form (each ratio and what its workload does; the load and the rest:
    --detail); ``brief``: one line, the workloads it concerns by name (a crowded first screen's).
    Where the sweep varies the number of clients, one sentence says every count the figures show
    it at, in words, each count's figures in turn, and what the others measured (issue 70: it said
    "with clients=1:", one count picked as if a setting)."""
    # the default policy first, then the simplest context; the client counts within each
    groups = sorted(
        {(_base(g.context), g.policy) for g in gains},
        key=lambda bp: (bp[1] != gate.default_policy, bp[0]),
    )
    for base, policy in groups:
        s = _shown(gains, base, policy, threshold, gate)
        if s is None:
            continue
        lead = _lead(base, gains, s.held)
        if brief:
            missed = f"; not shown at {clients.in_words(s.others)}" if s.others else ""
            return _brief_trap(s.per[0][1], lead, gate) + f"{missed} (--detail)"
        return (_short_trap if short else _full_trap)(s, lead, threshold, gate)
    return None


def _verb(g: WritebackGain, threshold: float) -> str:
    if _faster(g.ratio, threshold):
        return "faster"
    if g.ratio.high is not None and g.ratio.high < 1.0:
        return "slower"
    return "no faster" if _flat(g.ratio) else f"a little faster (not shown above {threshold:.0%})"


def figures_finding(
    gains: Sequence[WritebackGain], threshold: float, gate: FlushGatedCache
) -> str | None:
    """Where workloads that flush and workloads that never do were both measured precisely on the
    protocol under until-flush on, but the figures do not show the trap (trap_finding is None): what
    writeback measured for each, by its shape and the host's load, so that their answers are
    explained all the same; None otherwise."""
    groups = sorted(
        {(g.context, g.policy) for g in gains},
        key=lambda cp: (cp[1] != gate.default_policy, cp[0]),
    )
    for context, policy in groups:
        mine = [
            g
            for g in gains
            if g.policy == policy
            and g.context == context
            and g.until_flush == "on"
            and not g.ratio.imprecise
            and g.ratio.low is not None
        ]
        if not (any(g.flushes for g in mine) and any(not g.flushes for g in mine)):
            continue
        count = _count(context)
        varied = len({_count(g.context) for g in gains}) > 1
        lead = _lead(_base(context), gains, [count] if varied and count is not None else [])
        told = "; ".join(
            f"{g.workload}, {_which(g, gate)}: {_ratio(g)}, {_verb(g, threshold)}"
            for g in sorted(mine, key=lambda g: g.flushes)
        )
        return (
            lead + f"on {gate.where} ({gate.client}, {gate.until_flush_axis}=on, "
            f"{gate.policy_axis}={policy}) QEMU "
            "cache=writeback over "
            f"cache=none, by what each workload does: {told}. These figures do not show "
            f"{gate.client}'s "
            "writethrough-until-flush as its rule asks (a workload that never flushes no "
            "faster than "
            f"cache=none, one that flushes faster by more than {threshold:.0%})."
        )
    return None


def flush_gate_findings(
    cws: Sequence[CellWorkload],
    threshold: float,
    shapes: Mapping[str, IoShape],
    interference: Mapping[int, RunInterference] | None = None,
    short: bool = False,
    brief: bool = False,
) -> list[str]:
    """The findings about a protocol's flush-gated client cache on a sweep's cells on its backing
    (zero or one sentence; the `findings` hook of a protocol that sets `flush_gated_cache`: Ceph
    RBD's librbd), by each workload's primary metric and shape (report/shapes.workload_shapes);
    ``short``: the trap in its first-screen form; ``brief``: in one line (a crowded first screen's;
    the figures' own finding: --detail)."""
    kinds = {c.backing.get("backing_type") for c in cws}
    network = network_protocol(kinds.pop()) if len(kinds) == 1 else None
    gate = network.flush_gated_cache if network is not None else None
    if gate is None:
        return []
    gains = writeback_gains(cws, gate, lambda w: primary_metric(w)[0], shapes.get, interference)
    if brief:
        found = trap_finding(gains, threshold, gate, True, True)
        if found is None and figures_finding(gains, threshold, gate) is not None:
            found = f"{gate.client}'s cache: what cache=writeback measured per workload: --detail"
        return [] if found is None else [found]
    found = trap_finding(gains, threshold, gate, short) or figures_finding(gains, threshold, gate)
    return [] if found is None else [found]
