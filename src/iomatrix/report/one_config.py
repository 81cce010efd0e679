"""One configuration per backing group (issue 49): the workloads measured on one shared storage (one
iSCSI LUN, one Ceph cluster's [client] section) are answered with one configuration where their
decisions allow it.

A LUN's write cache, or librbd's writethrough-until-flush, is one setting of the storage, not of a
workload: an answer that says "write cache off" for one workload and "on" for another on the same
LUN contradicts itself when the first workload could not tell the two apart. So, within one backing
group (the answers `recommend` gives per backing: report/per_backing.py), a workload whose decision
is a tie (or not settled yet, or kept as equivalent) that includes another workload's answer is
answered with that answer, and its line says it is tied there. Where no one configuration is
acceptable to every workload — each significantly better on its own workload — the answers conflict:
the group is a trade-off and both are named, never one picked silently.

Pure: decisions in, the group's configuration(s) out; the headline (report/headline.py) lays them
    out.

Example: on iscsi, file:commit.fio tied lun_write_cache=off with on (the tie-break's pick: off),
    file:never.fio
answered on (2.31×, significantly better): on is in commit.fio's tie, so the LUN's one configuration
is on, and commit.fio's line says it is tied there. Had commit.fio answered off significantly too,
the group would be a trade-off between on (never.fio) and off (commit.fio)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# How strongly a workload's decision backs its cell: a settled answer (significantly best) first,
# then a tie the tie-break broke or a configuration kept as equivalent, then a pick not settled yet
# (answer_of's statuses).
STRENGTH = {"answer": 0, "tied": 1, "equivalent": 1, "provisional": 2}


@dataclass(frozen=True)
class Decision:
    """One workload's decision in a backing group: its cell (answer or tie-break's pick),
    answer_of's status and the cells its decision did not tell apart from that cell."""

    workload: str
    # the backing group (a protocol's name, or "NAME at rtt=2ms"); "" where the sweep answers across
    # its backings
    group: str
    cell: str
    status: str
    tied: tuple[str, ...] = ()

    def accepts(self, cell: str) -> bool:
        """`cell` is this workload's own pick, or one its decision could not tell apart from it."""
        return cell == self.cell or cell in self.tied


@dataclass(frozen=True)
class GroupConfig:
    """A backing group's configuration(s): `assigned` gives each workload the cell it is answered
    with."""

    group: str
    cells: tuple[str, ...]  # one cell, or several where the answers differ
    assigned: dict[str, str]
    # "one" (one configuration for the group), "trade-off" (several, at least two of them
    # significantly best on a workload of their own) or "differ" (several, not settled enough to
    # call it a trade-off)
    kind: str

    def joined(self, d: Decision) -> bool:
        """`d` is answered with another workload's answer, its own pick tied with it."""
        return self.assigned[d.workload] != d.cell


def _ranked(mine: Sequence[Decision]) -> list[str]:
    """The group's cells (each some workload's own pick), strongest first: the best status any
    workload gives it, then how many workloads picked it, then the plan's order."""
    cells = list(dict.fromkeys(d.cell for d in mine))

    def key(cell: str) -> tuple[int, int, int]:
        own = [d for d in mine if d.cell == cell]
        return min(STRENGTH.get(d.status, 3) for d in own), -len(own), cells.index(cell)

    return sorted(cells, key=key)


def group_config(mine: Sequence[Decision]) -> GroupConfig:
    """One group's configuration: the strongest cell every workload accepts; else each workload's
    strongest acceptable cell (its own pick at worst), the group a trade-off where two remaining
    cells are settled answers."""
    ranked = _ranked(mine)
    common = next((c for c in ranked if all(d.accepts(c) for d in mine)), None)
    if common is not None:
        return GroupConfig(mine[0].group, (common,), {d.workload: common for d in mine}, "one")
    assigned = {d.workload: next(c for c in ranked if d.accepts(c)) for d in mine}
    cells = tuple(c for c in ranked if c in assigned.values())
    settled = {d.cell for d in mine if d.status == "answer" and assigned[d.workload] == d.cell}
    return GroupConfig(
        mine[0].group, cells, assigned, "trade-off" if len(settled) >= 2 else "differ"
    )


def one_config(decisions: Sequence[Decision]) -> list[GroupConfig]:
    """Every backing group's configuration(s), in the order the groups first appear (module
    docstring)."""
    groups = list(dict.fromkeys(d.group for d in decisions))
    return [group_config([d for d in decisions if d.group == g]) for g in groups]
