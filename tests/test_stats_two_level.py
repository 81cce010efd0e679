"""Two-level repetition (between-boot / within-boot variance), pinned against values computed by
hand."""

from __future__ import annotations

import pytest

from iomatrix.stats.two_level import (
    boots_needed,
    boots_of,
    optimal_runs_per_boot,
    variance_components,
)


def test_balanced_boots_by_hand() -> None:
    # Boot means 11, 15, 21; grand mean 94/6; SSW = 6, MSW = 2; SSB = 2·(21.7778 + 0.4444 + 28.4444)
    # = 101.333, MSB = 50.667; n0 = 2; σ_b² = (50.667 − 2)/2 = 24.333.
    tl = variance_components({"a": [10, 12], "b": [14, 16], "c": [20, 22]})
    assert (tl.boots, tl.runs) == (3, 6)
    assert tl.grand_mean == pytest.approx(94 / 6)
    assert tl.within_var == pytest.approx(2.0)
    assert tl.between_var == pytest.approx(73 / 3)
    assert tl.n0 == pytest.approx(2.0)
    assert tl.icc == pytest.approx((73 / 3) / (73 / 3 + 2))
    assert tl.unit == "boot-means" and tl.values == pytest.approx((11, 15, 21))
    assert tl.cold_mean == pytest.approx(44 / 3) and tl.warm_mean == pytest.approx(50 / 3)
    assert tl.first_run_effect == pytest.approx(-2.0) and tl.first_run_boots == 3


def test_unbalanced_boots_by_hand() -> None:
    # means 2, 5, 6; grand 4.5; SSW = 10, MSW = 10/3; SSB = 19.5, MSB = 9.75; n0 = (6 − 14/6)/2 =
    # 11/6; σ_b² = (9.75 − 10/3)/(11/6) = 3.5 ≥ σ_w² → boot means.
    tl = variance_components([[1, 3], [5], [4, 6, 8]])
    assert tl.within_var == pytest.approx(10 / 3)
    assert tl.n0 == pytest.approx(11 / 6)
    assert tl.between_var == pytest.approx(3.5)
    assert tl.unit == "boot-means" and tl.values == pytest.approx((2, 5, 6))
    assert tl.cold_mean == pytest.approx(10 / 3) and tl.warm_mean == pytest.approx(17 / 3)
    # (1 − 3) and (4 − 7): the single-run boot has no later run to compare with.
    assert tl.first_run_effect == pytest.approx(-2.5) and tl.first_run_boots == 2


def test_within_boot_noise_dominating_keeps_the_runs_and_clamps_between_at_zero() -> None:
    # Boot means equal (5, 5): MSB = 0 < MSW → σ_b² = 0; the runs are the unit.
    tl = variance_components([[1, 9], [9, 1]])
    assert tl.between_var == 0.0 and tl.within_var == pytest.approx(32.0)
    assert tl.unit == "runs" and tl.values == (1, 9, 9, 1)


def test_one_run_per_boot_cannot_separate_the_levels() -> None:
    tl = variance_components([[1], [2], [4]])
    assert tl.within_var is None and tl.between_var is None and tl.unit == "runs"
    tl = variance_components([[1, 2, 4]])  # one boot: no between-boot estimate
    assert tl.between_var is None and tl.within_var == pytest.approx(7 / 3)
    with pytest.raises(ValueError):
        variance_components([])


def test_optimal_runs_per_boot_by_hand() -> None:
    assert optimal_runs_per_boot(1.0, 16.0, 4.0, 1.0, 16) == 8  # √(4·16) = 8
    # √(5·10) = 7.07: (5+7)(1+10/7) = 29.14 < (5+8)(1+10/8) = 29.25 → 7
    assert optimal_runs_per_boot(1.0, 10.0, 5.0, 1.0, 16) == 7
    assert optimal_runs_per_boot(1.0, 10.0, 5.0, 1.0, 3) == 3  # the bus's limit
    assert optimal_runs_per_boot(0.0, 10.0, 5.0, 1.0, 6) == 6  # boots add nothing: fill the boot
    # boots vary, runs repeat: one per boot
    assert optimal_runs_per_boot(100.0, 1.0, 1.0, 5.0, 6) == 1
    with pytest.raises(ValueError):
        optimal_runs_per_boot(1.0, 1.0, 1.0, 0.0, 4)


def test_boots_needed_by_hand() -> None:
    # Var(boot mean) = 1 + 10/7 = 2.4286; 1.96² · 2.4286 / (0.05 · 20)² = 9.33 → 10
    assert boots_needed(1.0, 10.0, 7, 20.0, 0.05) == 10
    assert boots_needed(0.0, 0.0, 1, 20.0, 0.05) == 2


def test_stored_runs_group_by_boot_in_boot_order() -> None:
    runs = [
        ("b1", 1, 12.0),
        ("b2", 0, 14.0),
        ("b1", 0, 10.0),
        (None, None, 7.0),
        ("b2", 1, 16.0),
        (None, None, 8.0),
    ]
    groups = boots_of(runs)
    assert groups["b1"] == [10.0, 12.0] and groups["b2"] == [14.0, 16.0]
    assert sorted(v for k, v in groups.items() if k.startswith("#")) == [[7.0], [8.0]]
    tl = variance_components(groups)
    assert tl.boots == 4 and tl.cold_mean == pytest.approx((10 + 14 + 7 + 8) / 4)
