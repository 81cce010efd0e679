"""librbd's writethrough-until-flush trap (issue 35), told in a sentence of its own when a sweep's figures show it.

librbd keeps its cache writethrough until the guest's first flush (ceph.conf `rbd cache writethrough until flush`,
Ceph's default on), so QEMU `cache=writeback` gives a guest that never flushes nothing over `cache=none`; once the
workload flushes now and then, or the setting is off, the same cache acknowledges writes early and is faster.

Pure functions over a sweep's cells: each `cache=writeback` cell on an rbd backing is compared with the
`cache=none` cell of the same workload and the same other axes (librbd's cache is off under cache=none, so that
cell carries the default policy and until-flush values), as the ratio of the workload's primary metric with its
Fieller interval (stats/compare.py). The sentence is said only when

* a workload that never flushes shows writeback **equal to none within the interval** (low ≤ 1 ≤ high) under
  until-flush on, and
* with the same policy, writeback is **faster by more than the threshold** (low > 1 + threshold) on a workload that
  flushes (until-flush on) or with until-flush off on the non-flushing workload.

Otherwise nothing is said: the sweep did not show it (an imprecise interval never shows anything).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from iomatrix.domain import ceph
from iomatrix.report.figures import ratio_text
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import primary_metric
from iomatrix.stats.compare import RatioCI, ratio_ci
from iomatrix.workloads import PRESETS

UNTIL_FLUSH = "rbd_cache_writethrough_until_flush"
POLICY = "rbd_cache_policy"
# The axes a writeback cell may differ in from its cache=none partner (besides the cell's identity).
_VARIED = ("cache", POLICY, UNTIL_FLUSH)
# Axes a sweep on one rbd backing may vary that change the figures too: a finding is stated per value of them.
_CONTEXT_AXES = ("clients", "format", "rbd_object_size", "backing")


@dataclass(frozen=True)
class WritebackGain:
    """cache=writeback over cache=none for one workload and one librbd setting of the writeback cell."""

    workload: str
    flushes: bool  # the workload sends flushes itself (fdatasync/fsync every N writes)
    policy: str
    until_flush: str
    ratio: RatioCI
    # The pair's other axes that a sweep may vary besides the librbd ones (e.g. clients=2): gains are only ever
    # compared within one context
    context: tuple[tuple[str, str], ...] = ()


def writeback_gains(cws: Sequence[CellWorkload], metric_of: Callable[[str], str],
                    flushes: Callable[[str], bool | None]) -> list[WritebackGain]:
    """Every cache=writeback cell × workload on an rbd backing paired with its cache=none partner; `flushes`
    says whether a workload sends flushes itself (None: not known, as for a custom job file: left out)."""
    def others(c: CellWorkload) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in c.axes.items() if k not in _VARIED))

    def key(c: CellWorkload) -> tuple:
        return (c.workload, others(c))

    rbd = [c for c in cws if c.backing.get("backing_type") == ceph.RBD]
    none = {key(c): c for c in rbd if c.axes.get("cache") == "none"}
    out = []
    for c in rbd:
        partner = none.get(key(c))
        if c.axes.get("cache") != "writeback" or partner is None:
            continue
        metric, flushing = metric_of(c.workload), flushes(c.workload)
        if flushing is None:
            continue
        a, b = c.samples.get(metric, []), partner.samples.get(metric, [])
        if len(a) < 2 or len(b) < 2:
            continue
        out.append(WritebackGain(c.workload, flushing, c.axes.get(POLICY, ceph.DEFAULTS[POLICY]),
                                 c.axes.get(UNTIL_FLUSH, ceph.DEFAULTS[UNTIL_FLUSH]), ratio_ci(a, b),
                                 tuple((k, v) for k, v in others(c) if k in _CONTEXT_AXES)))
    return out


def _equal(r: RatioCI) -> bool:
    return r.low is not None and r.high is not None and not r.imprecise and r.low <= 1.0 <= r.high


def _faster(r: RatioCI, threshold: float) -> bool:
    return r.low is not None and not r.imprecise and r.low > 1.0 + threshold


def _ratio(r: RatioCI) -> str:
    return ratio_text(*r)


def _contrasts(mine: Sequence[WritebackGain], flat: WritebackGain, threshold: float) -> list[str]:
    """Where writeback is clearly faster than none beside `flat`: the flushing workloads (until-flush on), and
    `flat`'s own workload with until-flush off."""
    out = [f"with {g.workload}, which flushes now and then, it was {_ratio(g.ratio)}"
           for g in mine if g.flushes and g.until_flush == "on" and _faster(g.ratio, threshold)]
    return out + [f"with {UNTIL_FLUSH}=off it was {_ratio(g.ratio)} on {g.workload}"
                  for g in mine if g.workload == flat.workload and g.until_flush == "off"
                  and _faster(g.ratio, threshold)]


def trap_finding(gains: Sequence[WritebackGain], threshold: float) -> str | None:
    """The sentence, or None when the figures do not show the trap (module docstring)."""
    # Ceph's default policy first, then the simplest context (one client before several)
    groups = sorted({(g.context, g.policy) for g in gains}, key=lambda cp: (cp[1] != ceph.DEFAULTS[POLICY], cp[0]))
    for context, policy in groups:
        mine = [g for g in gains if g.policy == policy and g.context == context]
        flat = next((g for g in mine if not g.flushes and g.until_flush == "on" and _equal(g.ratio)), None)
        contrasts = [] if flat is None else _contrasts(mine, flat, threshold)
        if flat is None or not contrasts:
            continue
        # the context is named only where the sweep varies it
        where = ", ".join(f"{k}={v}" for k, v in context if len({dict(g.context).get(k) for g in gains}) > 1)
        return ((f"with {where}: " if where else "")
                + f"librbd stays writethrough until the guest's first flush ({UNTIL_FLUSH}=on, Ceph's "
                f"default; rbd_cache_policy={policy}): on {flat.workload}, which never flushes, QEMU "
                f"cache=writeback was no faster than cache=none ({_ratio(flat.ratio)}); "
                + "; ".join(contrasts) + ". A guest that never sends a flush never gets librbd's writeback "
                "cache: cache=writeback alone does not speed up its writes.")
    return None


def _flushes(workload: str) -> bool | None:
    preset = PRESETS.get(workload)
    return None if preset is None else preset.fdatasync > 0


def rbd_findings(cws: Sequence[CellWorkload], threshold: float) -> list[str]:
    """The sweep's findings about librbd's cache (zero or one sentence), by each workload's primary metric."""
    found = trap_finding(writeback_gains(cws, lambda w: primary_metric(w)[0], _flushes), threshold)
    return [] if found is None else [found]
