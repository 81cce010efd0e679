"""Answering from another tier: when the tier closest to a VM cannot answer, or its guests ran under
TCG, the tier below it (the block layer) is the basis for the axes it measures, and the verdict says
so."""

from __future__ import annotations

from typing import Any

from iomatrix import domain
from iomatrix.domain import axes
from iomatrix.matrix import applying_axes
from iomatrix.report.durability import MeasuredIndex
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import (
    WorkloadRanking,
    rank_workload,
)
from iomatrix.report.recommend.requirements import Requirement
from iomatrix.report.recommend.verdict import Verdict, workload_verdict
from iomatrix.tiers import declaration, is_reference, tier_order
from iomatrix.vmconfig.reading import CurrentConfig


def verdict_on_its_basis(
    cws: list[CellWorkload],
    wr: WorkloadRanking,
    reqs: list[Requirement],
    current: CurrentConfig | None,
    measured: MeasuredIndex,
    kw: dict[str, Any],
) -> Verdict:
    """The verdict of the tier closest to a VM (`wr`), or of the tier below it when that one cannot
    answer or its guests ran under TCG."""
    v = _tier_verdict(cws, wr, reqs, current, measured, kw)
    emulated = _emulated(cws, wr.workload, wr.tier)
    if v.choice is None or emulated:
        v = (
            _answer_from_another_tier(
                cws,
                wr.workload,
                v,
                reqs=reqs,
                current=current,
                measured=measured,
                kw=kw,
                emulated=emulated,
            )
            or v
        )
    return v


def _tier_verdict(
    cws: list[CellWorkload],
    wr: WorkloadRanking,
    reqs: list[Requirement],
    current: CurrentConfig | None,
    measured: MeasuredIndex,
    kw: dict[str, Any],
) -> Verdict:
    restricted = None
    if reqs:
        keep = [
            c
            for c in cws
            if c.axes["tier"] != wr.tier
            or c.axes["backing"] == domain.NULL_BACKING
            or all(q.met_by(c.axes) for q in reqs)
        ]
        restricted = rank_workload(keep, wr.workload, tier=wr.tier, **kw)
    return workload_verdict(cws, wr, reqs, current, restricted, measured)


def _answer_from_another_tier(
    cws: list[CellWorkload],
    workload: str,
    unanswered: Verdict,
    *,
    reqs: list[Requirement],
    current: CurrentConfig | None,
    measured: MeasuredIndex,
    kw: dict[str, Any],
    emulated: bool = False,
) -> Verdict | None:
    """When the tier closest to a VM cannot answer, or its guests ran under TCG (emulated: 30–50%
    run-to-run swings, timings bound by instruction emulation), the next tier below it (the block
    layer: the same QEMU graph at native speed) is the basis for the axes it measures, and the
    verdict says so and names what it does not decide (the bus). Under TCG that tier is the basis
    even when it has only a tie-break's pick."""
    tiers = {c.axes["tier"] for c in cws if c.workload == workload} - {unanswered.tier}
    for t in sorted((t for t in tiers if not is_reference(t)), key=tier_order, reverse=True):
        wr = rank_workload(cws, workload, tier=t, **kw)
        if wr is None:
            continue
        v = _tier_verdict(cws, wr, reqs, current, measured, kw)
        if v.choice is None and not (emulated and v.provisional is not None):
            continue
        # The axes the sweep names (report.query.shown_axes): a later axis it leaves at its default
        # is not a choice.
        named = {a for c in cws for a in c.axes}
        # A later axis the tier holds at one value for this workload (IOThreads on the block layer
        # of a QEMU whose NBD export cannot have one: pruned) is not among what it decides.
        v.basis = _basis(
            t,
            unanswered.tier,
            workload,
            emulated,
            named,
            held=_held(cws, workload, t, named),
            held_closest=_held(cws, workload, unanswered.tier, named),
        )
        return v
    return None


def _held(cws: list[CellWorkload], workload: str, tier: str, named: set[str]) -> set[str]:
    """The later axes `tier` held at one value for `workload` (IOThreads on the block layer of a
    QEMU whose NBD export cannot have one; zero detection for random writes): not among what it
    decides for the workload."""
    return {
        a
        for a in named
        if a in axes.REGISTRY
        and not axes.get(a).always_named
        and len({c.axes.get(a) for c in cws if c.workload == workload and c.axes["tier"] == tier})
        < 2
    }


def _basis(
    tier: str,
    closest: str,
    workload: str,
    emulated: bool,
    named: set[str],
    *,
    held: set[str] = frozenset(),
    held_closest: set[str] = frozenset(),
) -> str:
    """Why `tier` answers for `closest` (the tier closest to a VM), and which of the `named` axes it
    decides (not those it `held` at one value) and which `closest` varies but it does not."""
    try:
        mine = [a for a in applying_axes(tier) if a in named and a not in held]
        theirs = [a for a in applying_axes(closest) if a in named and a not in held_closest]
    except KeyError:  # a tier this version does not know (an old database): no scope to state
        scope = ""
    else:
        undecided = [a for a in theirs if a not in mine]
        scope = (
            f" ({declaration(tier).summary}): it decides "
            f"{', '.join(a for a in mine if a != 'tier')}"
            + (f", not the {', '.join(undecided)}" if undecided else "")
        )
    if emulated:
        return (
            f"the {closest} tier ran under TCG (emulated, not a KVM host's timings): the "
            f"{tier} tier is the "
            f"basis{scope}"
        )
    return (
        f"the {closest} tier cannot answer yet ('iomatrix rank --workload {workload}' "
        "shows why); answered by "
        f"the {tier} tier{scope}"
    )


def _emulated(cws: list[CellWorkload], workload: str, tier: str) -> bool:
    """Whether `workload`'s runs on `tier` ran under TCG (a guest tier without KVM)."""
    return any(
        "tcg" in a
        for c in cws
        if c.workload == workload and c.axes["tier"] == tier
        for a in c.accel
    )
