"""Compact letter display: group letters that agree with every pairwise decision.

Leader clustering (stats/leader_groups.py) gives each cell one group, but "not significantly
different" is not transitive: A may be unresolved against B and B against C while A is decided
against C. One letter per cell then contradicts a pair (issue 71: `qcow2 · writeback` in group "a"
and `qcow2 · cache=none` in group "b" although the pair was unresolved). A *compact letter display*
(Piepho, "An algorithm for a letter-based representation of all-pairwise comparisons", J. Comput.
Graph. Stat. 13, 2004) gives a cell as many letters as it needs, so that

    two cells share a letter  ⇔  the pair is not significantly different

holds for every pair, by construction. Insert-and-absorb:

1. start with one column holding every cell;
2. for each significant pair (i, j), every column holding both is replaced by the two columns
   column − {i} and column − {j};
3. after each pair, a column that is a subset of another is dropped (absorbed).

A non-significant pair stays inside some column through every step (a split keeps every pair but
(i, j) in one of its halves; only columns contained in another are dropped), and a significant
pair shares none after its own step (later splits only remove cells). The columns are lettered in
the order of their best cell (the caller's order), so the best cell's letters start with "a".

Worked example (issue 71's blocklayer rand-read-4k, cells in rank order A = raw · writeback,
B = qcow2 · writeback, C = qcow2 · cache=none, D = raw · cache=none; decided pairs A–C and A–D):
{A,B,C,D} → A–C: {B,C,D}, {A,B,D} → A–D: {B,C,D}, {A,B}, {B,C} (absorbed into {B,C,D}) →
letters: {A,B} "a", {B,C,D} "b": A "a", B "ab", C "b", D "b". B shares a letter with each of A, C
and D (unresolved with each), A with neither C nor D (decided).

Edge cases: no cells → {}; one cell → "a"; no significant pair → every cell "a"; every pair
significant → one letter per cell. Letters past "z" continue "aa", "ab", … (``group_letter``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence


def compact_letters(
    ordered: Sequence[str],
    significant: Iterable[tuple[str, str]],
    letter: Callable[[int], str],
) -> dict[str, str]:
    """cell → its letters, for the cells of `ordered` (best first); `significant`: the pairs decided
    different (the same decisions the text states); `letter(k)` names the k-th column, 1-based."""
    if not ordered:
        return {}
    pos = {name: i for i, name in enumerate(ordered)}
    columns: list[frozenset[str]] = [frozenset(ordered)]
    for a, b in significant:
        if a not in pos or b not in pos:
            continue
        split: list[frozenset[str]] = []
        for col in columns:
            if a in col and b in col:
                split += [col - {a}, col - {b}]
            else:
                split.append(col)
        columns = _absorbed(split)
    columns.sort(key=lambda col: sorted(pos[n] for n in col))
    out = {name: "" for name in ordered}
    for k, col in enumerate(columns, start=1):
        for name in col:
            out[name] += letter(k)
    return out


def _absorbed(columns: list[frozenset[str]]) -> list[frozenset[str]]:
    """The columns without duplicates and without any contained in another."""
    unique = list(dict.fromkeys(c for c in columns if c))
    return [c for c in unique if not any(c < other for other in unique)]
