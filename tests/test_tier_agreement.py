"""How far the guest agrees with the block layer (issue 51): Kendall's τ-b between the two tiers'
orders and each cell's guest/block-layer ratio (stats/tier_agreement.py), and the report's section
built from a real sweep with both tiers (tests/data/golden/quick-sweep.sqlite: bare metal, block
layer and TCG guests)."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest
from scipy.stats import kendalltau

from iomatrix.report.query import cell_workloads
from iomatrix.report.tier_agreement import agreement_lines, agreements
from iomatrix.stats.tier_agreement import tier_agreement
from iomatrix.store import Store
from tests.conftest import DATA, run_cli


def test_the_worked_example() -> None:
    block = {
        "none": [890.0, 900, 910],
        "writeback": [2050.0, 2100, 2150],
        "unsafe": [2250.0, 2300, 2350],
    }
    guest = {"none": [390.0, 400, 410], "writeback": [690.0, 700, 710], "unsafe": [640.0, 650, 660]}
    r = tier_agreement(block, guest, higher_is_better=True)
    assert r.tau == pytest.approx(1 / 3) and r.p_value == pytest.approx(1.0) and not r.tested
    assert [(c.cell, c.a_rank, c.b_rank) for c in r.cells] == [
        ("unsafe", 1, 2),
        ("writeback", 2, 1),
        ("none", 3, 3),
    ]
    assert [round(c.ratio.ratio, 2) for c in r.cells] == [0.28, 0.33, 0.44]
    assert all(c.ratio.low < c.ratio.ratio < c.ratio.high for c in r.cells)


def test_five_cells_in_the_same_order_are_a_significant_agreement_and_reversed_ones_minus_one() -> (
    None
):
    block = {f"c{i}": [100.0 * i, 100.0 * i + 5] for i in range(1, 6)}
    same = tier_agreement(
        block, {c: [v / 3 for v in vs] for c, vs in block.items()}, higher_is_better=True
    )
    assert same.tau == pytest.approx(1.0) and same.tested and same.p_value == pytest.approx(2 / 120)
    flipped = tier_agreement(
        block, {c: [1000.0 / v for v in vs] for c, vs in block.items()}, higher_is_better=True
    )
    assert flipped.tau == pytest.approx(-1.0)
    # lower is better (a latency): the best cell has rank 1 in both, and τ does not depend on the
    # direction
    latency = tier_agreement(block, block, higher_is_better=False)
    assert (
        latency.cells[0].cell == "c1"
        and latency.cells[0].a_rank == 1
        and latency.tau == pytest.approx(1.0)
    )


def test_cells_one_tier_cannot_tell_apart_and_cells_only_one_tier_ran_give_no_tau() -> None:
    flat = tier_agreement({"a": [1.0, 2], "b": [3.0, 4]}, {"a": [5.0, 5], "b": [5.0, 5]}, True)
    assert (
        flat.tau is None
        and len(flat.cells) == 2
        and flat.cells[0].b_rank == flat.cells[1].b_rank == 1
    )
    lone = tier_agreement({"a": [1.0], "b": [2.0]}, {"a": [3.0], "c": [4.0]}, True)
    assert lone.tau is None and [c.cell for c in lone.cells] == ["a"]


def test_the_section_on_a_real_sweep_orders_both_tiers_and_matches_their_means(
    tmp_path: Path,
) -> None:
    db = tmp_path / "quick-sweep.sqlite"
    shutil.copy(DATA / "golden" / "quick-sweep.sqlite", db)
    store = Store.open_existing(db)
    cws = cell_workloads(store, 1)
    found = agreements(cws, "blocklayer", "guest")
    assert sorted(a.workload for a in found) == ["rand-read-4k", "rand-write-4k", "seq-write-1m"]
    for a in found:
        # the null ceiling left out
        assert a.guest_setting == "bus=virtio-blk" and len(a.result.cells) == 4
        means = {}
        for tier in ("blocklayer", "guest"):
            means[tier] = [
                statistics.fmean(cw.samples[a.metric])
                for c in a.result.cells
                for cw in cws
                if cw.workload == a.workload
                and cw.axes["tier"] == tier
                and cw.axes["format"] == next(x for x in cws if x.cell_key == c.cell).axes["format"]
                and cw.axes["cache"] == next(x for x in cws if x.cell_key == c.cell).axes["cache"]
            ]
        assert a.result.tau == pytest.approx(
            kendalltau(means["blocklayer"], means["guest"]).statistic
        )
    lines = agreement_lines(found)
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert "under 5 cells: a description, not a test" in "\n".join(lines)
    store.close()
    html = run_cli("report", "--db", str(db), "--html", str(tmp_path / "r.html"), cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "r.html").read_text()
    assert (
        'id="guest-vs-blocklayer"' in page
        and "How far the guest agrees with the block layer" in page
    )
