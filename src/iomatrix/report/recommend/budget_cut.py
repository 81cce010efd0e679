"""The cells the time budget cut before the runs a ranking needs, named in one line of the answer
(issue 70): without it they dropped out of `recommend` silently, and only `run`'s own "budget
reached" line, gone with the terminal, said why.

A cell × workload is cut when the scheduler recorded its stop as the time budget's (StopKind.BUDGET)
with fewer ok runs than the ranking's minimum (`recommend --min-runs`, 3 by default): it is listed
in the tables but not ranked, so no answer can name it. Worked example: a 4.5-minute quick sweep
whose budget ran out in round 2 leaves "qcow2 · cache=none" with 2 ok runs on rand-read-4k; the
answer says "the time budget cut 1 cell before its 3 runs, so it is not ranked: qcow2 ·
cache=none (rand-read-4k); a longer time_budget in the plan gives it its runs"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from iomatrix.report.naming import cell_names
from iomatrix.report.query import CellWorkload
from iomatrix.stop_kinds import StopKind

# How many cut cells the line names before "and N more" (the JSON's and --detail's tables list all).
CUT_NAMED = 3


def budget_cut_line(
    cws: Sequence[CellWorkload],
    stops: Mapping[tuple[int, str], Mapping[str, Any]],
    min_n: int,
) -> str:
    """One line naming how many cells the time budget cut before `min_n` ok runs, and which (by
    what tells them from the sweep's other cells, as the answer names cells), with the workloads
    each lacks; "" when none was. `stops`: (cell id, workload) → the unit's stop
    (report/query.py: unit_stops)."""
    # named among the cells an answer compares: not the baselines (bare metal, the null ceiling),
    # whose backing would otherwise be named too ("qcow2 · cache=none · dir")
    baselines = {cell for (cell, _), st in stops.items() if st.get("kind") == StopKind.BASELINE}
    names = cell_names(c.label() for c in cws if c.cell_id not in baselines)
    label = {c.cell_id: names.of(c.label()) for c in cws}
    cut: dict[str, list[str]] = {}
    for (cell_id, workload), st in stops.items():
        if st.get("kind") != StopKind.BUDGET or int(st.get("ok_runs", 0)) >= min_n:
            continue
        name = label.get(cell_id)
        if name is None:  # no ok run at all: the cell is in no table either
            continue
        workloads = cut.setdefault(name, [])
        workloads += [] if workload in workloads else [workload]
    if not cut:
        return ""
    n = len(cut)
    named = [f"{name} ({', '.join(ws)})" for name, ws in list(cut.items())[:CUT_NAMED]]
    more = f" and {n - CUT_NAMED} more" if n > CUT_NAMED else ""
    one = n == 1
    return (
        f"the time budget cut {n} cell{'' if one else 's'} before {'its' if one else 'their'} "
        f"{min_n} runs, so {'it is' if one else 'they are'} not ranked: {'; '.join(named)}{more}; "
        f"a longer time_budget in the plan gives {'it its' if one else 'them their'} runs"
    )
