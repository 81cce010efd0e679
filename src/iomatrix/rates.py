"""Offered loads set as a fraction of the bare-metal maximum measured in the same sweep
(``rand-*-4k-rateNpct``).

Issue 25: "a fixed IOPS target the plan sets, or a fraction of the bare-metal maximum measured in
the same sweep". A workload ``rand-read-4k-rate50pct`` runs ``rand-read-4k-rate<N>`` with N = ⌊0.50
× M⌋, where M is the bare-metal maximum of its reference, the same job without a rate limit
(``rand-read-4k-qd16``), on the same backing:

    M = max over the bare-metal cells c of the reference on that backing of  mean(total.iops of c's counted runs)

(counted: ok, not replaced by a clean retry). The sweep holds the rate-limited units back until
every bare-metal unit of the reference is done (scheduler: ``UnitState.after``), so M is final
before the first rate-limited run, and recorded with each run (meta ``offered_load``: fraction,
reference, M, the cell it came from, the run ids; the rate itself is ``load.target_iops``). Only
reference runs stored before the first run of the rate-limited workload on that backing count, so a
resumed sweep recomputes the same M from the store."""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iomatrix.domain.workload import RateOfMax, Workload
from iomatrix.errors import UserError


@dataclass(frozen=True)
class ReferenceRun:
    """One counted bare-metal run of the reference workload."""

    run_id: int
    cell: str  # the bare-metal cell's key
    iops: float  # its total.iops


@dataclass(frozen=True)
class ResolvedRate:
    """The offered load of a rate-of-maximum workload on one backing, and where it came from."""

    iops: int  # what fio is given (rate_iops)
    fraction: float
    reference: str
    maximum_iops: float  # M
    maximum_cell: str  # the bare-metal cell that reached M
    runs: tuple[int, ...]  # the runs M is the mean of

    def meta(self) -> dict[str, Any]:
        """As stored with each run (meta key ``offered_load``)."""
        return {
            "rate_iops": self.iops,
            "fraction": self.fraction,
            "of": "bare-metal maximum",
            "reference": self.reference,
            "maximum_iops": round(self.maximum_iops, 3),
            "maximum_cell": self.maximum_cell,
            "runs": list(self.runs),
        }


def resolve_rate(rate: RateOfMax, runs: Iterable[ReferenceRun]) -> ResolvedRate | None:
    """N = max(1, ⌊fraction × M⌋) with M the highest per-cell mean IOPS of `runs` (module
    docstring); None without a run that did any I/O. Ties between cells go to the first cell key in
    sorted order."""
    by_cell: dict[str, list[ReferenceRun]] = {}
    for r in runs:
        by_cell.setdefault(r.cell, []).append(r)
    means = {c: sum(r.iops for r in rs) / len(rs) for c, rs in sorted(by_cell.items())}
    if not means or max(means.values()) <= 0:
        return None
    cell = max(means, key=lambda c: means[c])
    maximum = means[cell]
    return ResolvedRate(
        max(1, math.floor(rate.fraction * maximum)),
        rate.fraction,
        rate.reference,
        maximum,
        cell,
        tuple(r.run_id for r in by_cell[cell]),
    )


def check_plan(
    workloads: Sequence[Workload], reference_tiers: Sequence[str], tier_hint: str
) -> None:
    """A plan with a rate-of-maximum workload must run bare metal (`reference_tiers`: the plan's
    tiers that are the reference) and the reference workload; else a one-line error naming the
    fix."""
    names = {w.name for w in workloads}
    for w in workloads:
        if w.rate_of_max is None:
            continue
        pct = f"{w.rate_of_max.fraction:.0%}"
        if not reference_tiers:
            raise UserError(
                f"workload '{w.name}' sets its rate as {pct} of the bare-metal maximum, "
                "but the plan "
                "runs no bare-metal tier to measure it",
                hint=f'add "{tier_hint}" to tier, or give a fixed rate (e.g. '
                f"{w.name.rsplit('-rate', 1)[0]}-rate2000)",
            )
        if w.rate_of_max.reference not in names:
            raise UserError(
                f"workload '{w.name}' sets its rate as {pct} of the bare-metal maximum of "
                f"{w.rate_of_max.reference}, which the plan does not run",
                hint=f'add "{w.rate_of_max.reference}" to workloads',
            )


def reference_runs(
    runs: Iterable[Any],
    iops: Mapping[int, float],
    reference_cells: Mapping[int, str],
    reference: str,
    dependent_cells: Iterable[int],
    dependent: str,
) -> list[ReferenceRun]:
    """The counted runs of `reference` in the bare-metal cells `reference_cells` (cell id → key),
    from a sweep's stored runs (``Store.runs``: RunRow) and their total.iops (`iops`), stored before
    the first run of `dependent` in `dependent_cells` (every one when it has none yet): what M was,
    or will be, computed from."""
    runs = list(runs)
    mine = set(dependent_cells)
    first = min(
        (r.run_id for r in runs if r.cell_id in mine and r.workload == dependent), default=None
    )
    return [
        ReferenceRun(r.run_id, reference_cells[r.cell_id], iops[r.run_id])
        for r in runs
        if r.cell_id in reference_cells
        and r.workload == reference
        and r.status == "ok"
        and not r.replaced
        and r.run_id in iops
        and (first is None or r.run_id < first)
    ]


__all__ = ["ReferenceRun", "ResolvedRate", "check_plan", "reference_runs", "resolve_rate"]
