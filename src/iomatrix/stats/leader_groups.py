"""Leader clustering of an ordered list of cells into groups of statistically indistinguishable
ones.

Given the cells in rank order (best first) and the Holm-adjusted p-value of every pair:

* the first cell leads group 1;
* each following cell joins the group of the first leader (in the order the leaders were made) whose
  adjusted p against it is ≥ α (not significantly different);
* a cell significantly different from every leader leads a new group, numbered 1, 2, … in order.

Group 1 is therefore the set of cells indistinguishable from the best.  A cell may be
indistinguishable from cells of a later group too (groups are not equivalence classes: the data may
not order A vs B nor B vs C yet order A vs C); ``Ranking.unresolved`` lists every such pair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def leader_groups(
    ordered: Sequence[str],
    p_adjusted: Mapping[frozenset[str], float],
    alpha: float,
    levels: Mapping[frozenset[str], float] | None = None,
) -> dict[str, int]:
    """cell → 1-based group, for the cells of `ordered` (best first); `p_adjusted[frozenset((a,
    b))]` is the adjusted p of every pair, compared with `levels[pair]` where given (each pair's
    look level, stats/looks.py), else with α. Raises KeyError for a pair without a p-value."""
    group_of: dict[str, int] = {}
    leaders: list[str] = []
    for name in ordered:
        for gi, leader in enumerate(leaders, start=1):
            pair = frozenset((name, leader))
            if p_adjusted[pair] >= (alpha if levels is None else levels[pair]):
                group_of[name] = gi
                break
        else:
            leaders.append(name)
            group_of[name] = len(leaders)
    return group_of
