"""The roles' part of the scheduler's decisions: what a role's figures say of the units that decide
its answer, computed from the runs so far without any I/O.

A role (report/roles.py) is decided on its first figure, vetoed on the others, and weighed over all
of them (stats/tradeoff.py). The scheduler (``scheduler.Scheduler._decided``) asks two things of
it here: which units its open weighed trade-off still needs (:func:`role_view`), and which pairs of
a group that is only ever a role's veto job can change an answer at all (:func:`veto_groups`).

Split from ``scheduler.py`` along the seam between *what a role still needs* and *which unit runs
next*, as the budget keeping was (scheduler_budget.py), so that each stays small enough to change
safely (issue 68)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iomatrix.stats.racing import race_step
from iomatrix.stats.tradeoff import RoleFigure, open_tradeoff_cells
from iomatrix.stop_policy import UnitState


@dataclass(frozen=True)
class RoleFigures:
    """A role's figures in one tier as the scheduler sees them (stats/tradeoff.py): per figure, the
    units of its job's group by cell, the metric (the units' primary, or one of their `figures`),
    which way is better and its weight; the first figure decides. `margin`: the role's."""

    figures: tuple[tuple[Mapping[str, str], str, bool, float], ...]  # (cell → unit, metric, …)
    primary: tuple[bool, ...]  # per figure: its metric is the units' primary
    margin: float


@dataclass(frozen=True)
class RoleView:
    """A role as the runs so far show it: the pick of its deciding figure (a cell; None before the
    race names a best) and the units of its open weighed trade-off."""

    pick: str | None
    tradeoff: set[str]


def role_view(
    role: RoleFigures,
    units: Mapping[str, UnitState],
    levels: Callable[[str], dict[str, Any]],
) -> RoleView:
    """The role's pick (the race's best on its deciding figure, judged at `levels(group)`: the
    group's direction, θ, α, margin and least rounds) and the units of its open weighed trade-off
    (stats/tradeoff.py), in every job of the role: the cells the weighing has not settled against
    the weighed leader. Why: on each figure alone those pairs are settled (commits 1.2× faster, a
    p99 1.7× lower), so no group's race names them, yet the role's answer waits on their weighed
    interval."""
    figures = []
    for (cells, metric, higher, weight), primary in zip(role.figures, role.primary, strict=True):
        points = {}
        for cell, key in cells.items():
            u = units.get(key)
            pts = (u.points if primary else u.figures.get(metric, [])) if u else []
            if len(pts) >= 2:
                points[cell] = pts
        figures.append(RoleFigure(points, higher, weight))
    first_units = role.figures[0][0]
    data = {first_units[c]: p for c, p in figures[0].points.items()}
    group = units[next(iter(data))].group if data else ""
    if len(data) < 2 or any(min(v for _, v in p) <= 0 for p in data.values()):
        return RoleView(None, set())
    step = race_step(data, **levels(group))
    if step.best is None:
        return RoleView(None, set())
    pick = next(c for c, k in first_units.items() if k == step.best)
    open_cells = open_tradeoff_cells(figures, pick, role.margin)
    return RoleView(
        pick,
        {cells[c] for cells, *_ in role.figures for c in open_cells if cells.get(c) in units},
    )


def veto_groups(
    roles: Sequence[RoleFigures], views: Sequence[RoleView], units: Mapping[str, UnitState]
) -> dict[str, set[str]]:
    """group → the units its deciding pairs must hold one of, for a group that is only ever a
    role's veto job (the database's data files): its role's pick there. Why: a veto job's pairs
    decide the role only through the pick (is it worse than the best beyond the margin?) and the
    weighing (RoleView.tradeoff); a tie of two other cells on a veto figure (the data files' raw ·
    writeback and qcow2 · writeback p99s) changes no answer, yet ran to 23-24 rounds in the
    quickstarts of issue 53 while the file server's pair waited."""
    deciding = {
        units[key].group for role in roles for key in role.figures[0][0].values() if key in units
    }
    out: dict[str, set[str]] = {}
    for role, view in zip(roles, views, strict=True):
        if view.pick is None:
            continue  # a pick not known yet: every pair of its jobs may still matter
        for cells, *_ in role.figures[1:]:
            key = cells.get(view.pick)
            if key in units and units[key].group not in deciding:
                out.setdefault(units[key].group, set()).add(key)
    return out
