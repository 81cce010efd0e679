"""Group letters that agree with the pairwise decisions (stats/letter_display.py, issue 71): two
cells share a letter exactly when their pair is not significantly different."""

from __future__ import annotations

import itertools
import random

from iomatrix.stats import group_letter
from iomatrix.stats.leader_groups import leader_groups
from iomatrix.stats.letter_display import compact_letters


def _shares(letters: dict[str, str], a: str, b: str) -> bool:
    return bool(set(letters[a]) & set(letters[b]))


def test_the_worked_example_gives_the_unresolved_cell_both_letters() -> None:
    """Issue 71's blocklayer rand-read-4k: A and B unresolved, B and C, B and D, C and D; A decided
    against C and D. Leader clustering put B in "a" and C in "b" although B–C was unresolved."""
    order = ["A", "B", "C", "D"]
    decided = [("A", "C"), ("A", "D")]
    letters = compact_letters(order, decided, group_letter)
    assert letters == {"A": "a", "B": "ab", "C": "b", "D": "b"}
    # the single letters leader clustering gives contradict the pair B–C
    p = {frozenset(x): 0.5 for x in itertools.combinations(order, 2)}
    p |= {frozenset(x): 0.001 for x in decided}
    groups = leader_groups(order, p, 0.02)
    assert groups["B"] != groups["C"]  # what the table showed: "not significantly different" broken


def test_letters_match_every_pair_whatever_the_decisions() -> None:
    rng = random.Random(71)
    for _ in range(300):
        n = rng.randint(1, 7)
        order = [f"c{i}" for i in range(n)]
        decided = [x for x in itertools.combinations(order, 2) if rng.random() < 0.5]
        letters = compact_letters(order, decided, group_letter)
        assert set(letters) == set(order) and all(letters.values())
        for a, b in itertools.combinations(order, 2):
            different = (a, b) in decided
            assert _shares(letters, a, b) != different, (order, decided, letters)
        assert letters[order[0]].startswith("a")


def test_edges() -> None:
    assert compact_letters([], [], group_letter) == {}
    assert compact_letters(["x"], [], group_letter) == {"x": "a"}
    assert compact_letters(["x", "y", "z"], [], group_letter) == {"x": "a", "y": "a", "z": "a"}
    every = compact_letters(["x", "y", "z"], [("x", "y"), ("x", "z"), ("y", "z")], group_letter)
    assert every == {"x": "a", "y": "b", "z": "c"}
    # a pair naming a cell outside the order (unranked) is ignored
    assert compact_letters(["x", "y"], [("x", "q")], group_letter) == {"x": "a", "y": "a"}
