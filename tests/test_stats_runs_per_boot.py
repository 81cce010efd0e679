"""The adaptive rounds-per-boot choice from scripted outcomes (no QEMU), pinned by hand."""

from __future__ import annotations

import pytest

from iomatrix.stats.runs_per_boot import choose_rounds_per_boot


def _runs(*boots: list[float]) -> list[tuple[str | None, int | None, float]]:
    return [(f"b{i}", pos, v) for i, vals in enumerate(boots) for pos, v in enumerate(vals)]


# A: means 12, 18; MSW = 16/2 = 8 = σ_w²; MSB = 36; n0 = 2 → σ_b² = (36 − 8)/2 = 14.
#    c_boot 14 s, c_round 2 s: r* = √(7 · 8/14) = 2.
UNIT_A = _runs([10, 14], [16, 20])
# B: boot means equal → σ_b² = 0 → the cap (boots add nothing).
UNIT_B = _runs([10, 14], [11, 15], [12, 10])
# C: σ_b² = 73/3, σ_w² = 2: r* = √(7 · 2/(73/3)) = 0.76 → 1.
UNIT_C = _runs([10, 12], [14, 16], [20, 22])


def test_median_of_the_units_optimum() -> None:
    choice = choose_rounds_per_boot(
        {"a": UNIT_A, "b": UNIT_B, "c": UNIT_C}, 14.0, 2.0, current=2, cap=6
    )
    assert choice.per_unit == {"a": 2, "b": 6, "c": 1}
    assert choice.rounds == 2
    assert choice.reason.startswith("2 rounds per boot: median of 3 units' optimum")
    assert "range 1–6" in choice.reason and "boot 14.0 s, round 2.0 s" in choice.reason


def test_even_count_takes_the_lower_middle_and_boot_cost_moves_the_choice() -> None:
    choice = choose_rounds_per_boot(
        {"a": UNIT_A, "b": UNIT_B, "b2": UNIT_B, "c": UNIT_C}, 14.0, 2.0, 2, 6
    )
    assert choice.rounds == 2  # sorted 1, 2, 6, 6 → the lower middle
    # A boot 4× dearer: A's r* = √(28 · 8/14) = 4 and C's √(28 · 2 · 3/73) = 1.52 → 1 or 2:
    # (56 + 2)(73/3 + 2) = 1527.3 vs (56 + 4)(73/3 + 1) = 1520 → 2. Sorted 2, 4, 6 → 4.
    choice = choose_rounds_per_boot({"a": UNIT_A, "b": UNIT_B, "c": UNIT_C}, 56.0, 2.0, 2, 6)
    assert choice.per_unit == {"a": 4, "b": 6, "c": 2} and choice.rounds == 4


def test_keeps_the_current_value_until_the_data_can_say() -> None:
    one_run_boots = _runs([10], [12], [14])
    choice = choose_rounds_per_boot({"a": one_run_boots, "b": []}, 14.0, 2.0, current=2, cap=6)
    assert choice.rounds == 2 and choice.per_unit == {} and "not estimable yet" in choice.reason
    choice = choose_rounds_per_boot({"a": UNIT_A}, None, None, current=5, cap=3)
    # the cap bounds the start too
    assert choice.rounds == 3 and "no boot measured yet" in choice.reason
    with pytest.raises(ValueError):
        choose_rounds_per_boot({}, 1.0, 1.0, current=2, cap=0)


def test_one_round_is_singular() -> None:
    # C alone: r* = 1 (see above).
    choice = choose_rounds_per_boot({"c": UNIT_C}, 14.0, 2.0, current=2, cap=6)
    assert choice.rounds == 1 and choice.reason.startswith(
        "1 round per boot: median of 1 units' optimum"
    )
