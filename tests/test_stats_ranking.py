"""rank() and compare_sweeps()."""

from __future__ import annotations

import pytest

from iomatrix.stats import compare_sweeps, group_letter, rank

A = [100.0, 101.0, 99.0, 100.5, 99.5]  # mean 100.0
B = [100.1, 99.7, 100.5, 99.3, 99.9]  # mean 99.9: indistinguishable from A
C = [80.0, 81.0, 79.0, 80.5, 79.5]  # mean 80: clearly worse
NOISY = [150.0, 60.0, 200.0, 90.0]  # highest mean (125) but CI ± ~100%
FEW = [300.0, 300.5]  # highest of all and precise (±1%), but n = 2 < min_n = 3


def test_ties_share_the_leaders_group_and_worse_cell_is_next_group() -> None:
    r = rank({"C": C, "B": B, "A": A}, higher_is_better=True)
    assert [row.name for row in r.rows] == ["A", "B", "C"]
    assert r.best == "A"
    assert [row.group for row in r.rows] == [1, 1, 2]
    assert [row.group_label for row in r.rows] == ["a", "a", "b"]
    assert [row.rank for row in r.rows] == [1, 2, 3]
    assert r.row("B").same_as_best and not r.row("C").same_as_best
    assert r.n_comparisons == 3
    assert (
        "Welch's t-test, two-sided, Holm-corrected over 3 comparisons, α=0.02" in r.test_description
    )
    assert r.row("A").ratio_to_best == (1.0, 1.0, 1.0)
    c = r.row("C").ratio_to_best
    assert c is not None and c.ratio == pytest.approx(0.8)
    assert c.low is not None and c.high is not None and c.low < 0.8 < c.high < 1.0
    assert r.row("C").p_vs_best is not None and r.row("C").p_vs_best < 0.05
    assert r.row("B").p_vs_best is not None and r.row("B").p_vs_best >= 0.05


def test_noisy_cells_are_ranked_and_flagged_few_run_cells_are_listed_last() -> None:
    """Was: a noisy cell was removed from the ranking ("never wins").  Now noise is a flag and a
    statement of unresolved comparisons; only a cell with too few runs (no variance) stays
    unranked."""
    r = rank({"A": A, "B": B, "C": C, "noisy": NOISY, "few": FEW}, higher_is_better=True)
    assert r.best == "noisy"  # highest mean (125); nothing settles that A beats it
    names = [row.name for row in r.rows]
    assert names == ["noisy", "A", "B", "C", "few"]
    few, noisy = r.row("few"), r.row("noisy")
    assert (
        few.too_few_runs
        and few.flags == ("too_few_runs",)
        and few.rank is None
        and few.group is None
    )
    assert noisy.too_noisy and noisy.rank == 1 and noisy.flags == ("too_noisy",)
    # the noisy best cannot be told apart
    assert r.row("A").same_as_best and r.row("C").same_as_best
    assert ("noisy", "A") in r.unresolved and ("A", "C") not in r.unresolved
    assert r.n_comparisons == 6  # every ranked pair
    assert few.ratio_to_best is not None and few.ratio_to_best.ratio == pytest.approx(
        300.25 / 125.0
    )


def test_lower_is_better_with_seed001_write_times_and_reference() -> None:
    # Seed 001 write times (s); lower is better.
    cells = {
        "qcow2/unsafe/native": [
            213.828,
            210.642,
            220.054,
            210.911,
            206.659,
            221.735,
            213.031,
            209.053,
            209.906,
            226.05,
        ],
        "qcow2/unsafe/threads": [
            212.236,
            223.843,
            221.059,
            210.651,
            208.778,
            219.92,
            213.113,
            212.907,
            211.906,
            210.511,
        ],
        "qcow2/none/threads/ide": [
            572.084,
            692.144,
            677.74,
            628.88,
            638.872,
            715.38,
            681.768,
            672.928,
            762.628,
            704.492,
        ],
        "qcow2/writethrough/threads/ide": [
            1073.265,
            653.21,
            660.449,
            703.049,
            668.19,
            1494.953,
            640.01,
            656.11,
            688.671,
            663.771,
        ],
    }
    reference = [200.0, 202.0, 198.0]
    r = rank(cells, higher_is_better=False, reference=reference)
    assert r.best == "qcow2/unsafe/native"  # 214.19 vs 214.49: tied, same group
    assert r.row("qcow2/unsafe/threads").group == 1
    assert r.row("qcow2/none/threads/ide").group == 2
    # 790 ± 200 s: ±25% > 10%: flagged, still ranked last
    wt = r.row("qcow2/writethrough/threads/ide")
    assert wt.too_noisy and wt.rank == 4
    assert r.rows[-1].name == "qcow2/writethrough/threads/ide"
    assert r.comparison("qcow2/writethrough/threads/ide", "qcow2/unsafe/native").significant
    ref = r.row("qcow2/unsafe/native").ratio_to_reference
    assert ref is not None and ref.ratio == pytest.approx(214.1869 / 200.0)
    assert "lower is better" in r.test_description


def test_identical_constant_cells_tie_and_different_constants_separate() -> None:
    r = rank(
        {"x": [5.0, 5.0, 5.0], "y": [5.0, 5.0, 5.0], "z": [4.0, 4.0, 4.0]}, higher_is_better=True
    )
    assert [row.group for row in r.rows] == [1, 1, 2]
    assert r.comparison("x", "y").p_adjusted == 1.0


def test_no_eligible_cells() -> None:
    r = rank({"a": [1.0], "b": [2.0, 2.5]}, higher_is_better=True)
    assert r.best is None
    assert all(row.rank is None and row.ratio_to_best is None for row in r.rows)
    assert "no cell has enough runs" in r.test_description


def test_bad_parameters() -> None:
    with pytest.raises(ValueError):
        rank({"a": A}, higher_is_better=True, min_n=1)
    with pytest.raises(ValueError, match="cell 'e'"):
        rank({"e": []}, higher_is_better=True)


def test_group_letters() -> None:
    assert [group_letter(i) for i in (1, 2, 26, 27, 28)] == ["a", "b", "z", "aa", "ab"]


def test_compare_sweeps_holm_over_keys_present_in_both() -> None:
    a = {
        "k1": [100.0, 101.0, 99.0, 100.5, 99.5],
        "k2": [50.0, 50.5, 49.5, 50.2, 49.8],
        "only_a": [1.0, 2.0],
        "short": [3.0],
    }
    b = {
        "k1": [110.0, 111.0, 109.0, 110.5, 109.5],
        "k2": [50.1, 49.7, 50.5, 49.3, 49.9],
        "only_b": [1.0, 2.0],
        "short": [3.0, 3.1],
    }
    changes = compare_sweeps(a, b)
    assert [c.key for c in changes] == ["k1", "k2", "short"]
    k1, k2, short = changes
    assert k1.ratio.ratio == pytest.approx(1.1)
    assert k1.significant and not k2.significant
    assert k1.welch is not None and k1.welch.mean_diff == pytest.approx(10.0)  # b − a
    # Holm over the two tested keys: the smaller p doubles, the other is max(p·1, previous)
    assert k1.p_value is not None and k2.p_value is not None
    assert k1.p_adjusted == pytest.approx(min(1.0, 2 * k1.p_value))
    assert k2.p_adjusted == pytest.approx(max(k2.p_value, 2 * k1.p_value))
    assert short.p_value is None and short.p_adjusted is None and not short.significant
