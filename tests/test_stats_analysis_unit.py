"""The analysis unit of a cell whose runs shared guest boots, pinned against values computed by
hand."""

from __future__ import annotations

import pytest

from iomatrix.stats.analysis_unit import cell_unit


def test_between_boot_variance_dominating_makes_the_boot_the_unit() -> None:
    # Boots a (rounds 1–2), b (3–4), c (5–6): σ_b² = 73/3, σ_w² = 2 (see test_stats_two_level),
    # share (73/3)/(73/3 + 2) = 73/79 = 92.4%. Boot means 11, 15, 21 at the boots' first rounds 1,
    # 3, 5.
    runs = [
        ("a", 0, 1, 10.0),
        ("a", 1, 2, 12.0),
        ("b", 0, 3, 14.0),
        ("b", 1, 4, 16.0),
        ("c", 0, 5, 20.0),
        ("c", 1, 6, 22.0),
    ]
    cu = cell_unit(runs)
    assert (
        cu.unit == "boot-means"
        and cu.values == pytest.approx((11, 15, 21))
        and cu.rounds == (1, 3, 5)
    )
    assert cu.between_share == pytest.approx(73 / 79)
    assert (cu.boots, cu.runs, cu.shared) == (3, 6, True)
    # Cold − later per boot: −2, −2, −2; later runs' mean 50/3 → −2 / (50/3) = −12%.
    assert cu.first_run_effect == pytest.approx(-0.12) and cu.first_run_boots == 3
    assert cu.describe() == "boot means (3 boots of 6 runs): between-boot variance 92% of total"
    assert (
        cu.describe_first_run()
        == "cold first run of a boot vs its later runs: -12.0% (mean over 3 boots)"
    )


def test_within_boot_noise_dominating_keeps_the_runs() -> None:
    # Boot means equal (5, 5): σ_b² = 0, share 0 → every run is a value, with its own round.
    runs = [("x", 0, 1, 1.0), ("x", 1, 2, 9.0), ("y", 0, 1, 9.0), ("y", 1, 2, 1.0)]
    cu = cell_unit(runs)
    assert cu.unit == "runs" and cu.values == (1, 9, 9, 1) and cu.rounds == (1, 2, 1, 2)
    assert cu.between_share == 0.0
    assert cu.describe() == "runs (4 runs in 2 boots): between-boot variance 0% of total"
    # (1 − 9) and (9 − 1) cancel: no first-run effect.
    assert cu.first_run_effect == pytest.approx(0.0)


def test_boot_order_follows_the_boots_first_round_not_the_input_order() -> None:
    # Positions out of order within a boot and boots listed late-first: the means are in round
    # order.
    runs = [
        ("late", 1, 4, 30.0),
        ("early", 1, 2, 12.0),
        ("late", 0, 3, 28.0),
        ("early", 0, 1, 10.0),
        ("mid", 0, 2, 20.0),
        ("mid", 1, 3, 21.0),
    ]
    cu = cell_unit(runs)
    assert cu.unit == "boot-means"
    assert cu.values == pytest.approx((11.0, 20.5, 29.0)) and cu.rounds == (1, 2, 3)


def test_runs_without_shared_boots_have_nothing_to_say() -> None:
    cu = cell_unit([(None, None, 1, 5.0), (None, None, 2, 6.0), ("b", 0, 3, 7.0)])
    assert (
        cu.unit == "runs"
        and not cu.shared
        and cu.describe() == ""
        and cu.describe_first_run() == ""
    )
    assert cu.values == (5.0, 6.0, 7.0) and cu.rounds == (1, 2, 3)
    cu = cell_unit([("one", 0, 1, 5.0), ("one", 1, 2, 6.0)])  # one boot: no between-boot estimate
    assert cu.unit == "runs" and not cu.shared
    with pytest.raises(ValueError):
        cell_unit([])
