"""rank uses boot means as the unit when a guest cell's runs shared boots and the between-boot
variance dominates; from a real SQLite store written through the store's own API, values pinned by
hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from iomatrix.report.rank import rank_sweep
from iomatrix.store import RunRecord, Store

AXES = {
    "tier": "guest",
    "format": "qcow2",
    "preallocation": "off",
    "aio": "threads",
    "bus": "virtio-blk",
    "backing": "dir",
    "modifier": "none",
}
# Three boots of two runs each (rounds 1–2, 3–4, 5–6): boot means 11, 15, 21 for cache=none; twice
# that for writeback. σ_b² = 73/3, σ_w² = 2 → between-boot share 73/79 = 92%.
VALUES = [10.0, 12.0, 14.0, 16.0, 20.0, 22.0]
T_975_2 = 4.302652729911275  # Student t, 0.975 quantile, 2 df


def _store(tmp_path: Path, shared_boots: bool) -> tuple[Store, int]:
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2}), "p", "fp", "{}", [], []
    )
    for cache, factor in (("none", 1.0), ("writeback", 2.0)):
        cid = store.cell_id(
            sid,
            f"guest/qcow2/off/{cache}/threads/virtio-blk/dir/none",
            {**AXES, "cache": cache},
            {},
        )
        for i, v in enumerate(VALUES):
            rnd = i + 1
            store.record_run(
                RunRecord(
                    cell_id=cid,
                    workload="rand-read-4k",
                    status="ok",
                    started_at=rnd,
                    finished_at=rnd + 1,
                    accel="tcg",
                    cache_state="dropped",
                    page_cache_method="-",
                    metrics={"read.iops": v * factor},
                    phases={},
                    round=rnd,
                    round_position=0,
                    boot_id=f"{cache}-boot{i // 2}" if shared_boots else None,
                    boot_position=i % 2 if shared_boots else None,
                )
            )
    return store, sid


def test_boot_means_are_the_unit_when_between_boot_variance_dominates(tmp_path: Path) -> None:
    store, sid = _store(tmp_path, shared_boots=True)
    [wr] = rank_sweep(store, sid, None, None)
    none = next(r for r in wr.ranking.rows if "cache=none" in r.name).summary
    # Boot means 11, 15, 21: mean 47/3, sample SD √(152/6) = √(76/3), half-width t · SD / √3.
    assert none.n == 3
    assert none.mean == pytest.approx(47 / 3)
    assert none.half_width == pytest.approx(T_975_2 * math.sqrt(76 / 3) / math.sqrt(3))
    text = "\n".join(wr.notes())
    assert "boot means (3 boots of 6 runs): between-boot variance 92% of total" in text
    assert "cold first run of a boot vs its later runs: -12.0% (mean over 3 boots)" in text


def test_runs_stay_the_unit_without_shared_boots(tmp_path: Path) -> None:
    store, sid = _store(tmp_path, shared_boots=False)
    [wr] = rank_sweep(store, sid, None, None)
    none = next(r for r in wr.ranking.rows if "cache=none" in r.name).summary
    assert none.n == 6 and none.mean == pytest.approx(94 / 6)
    assert "boot means" not in "\n".join(wr.notes())


def test_rank_tables_say_which_unit(tmp_path: Path) -> None:
    from iomatrix.report.exports import rank_tables

    store, sid = _store(tmp_path, shared_boots=True)
    [table] = rank_tables(rank_sweep(store, sid, None, None))
    assert all(r["n"] == 3 and "n = boots" in (r["flags"] or "") for r in table.rows)
    assert any("boot means (3 boots of 6 runs)" in n for n in table.notes)


def test_results_carry_the_unit_and_its_ci(tmp_path: Path) -> None:
    from iomatrix.report.results import results_document, to_csv

    store, sid = _store(tmp_path, shared_boots=True)
    doc = results_document(store, [sid], with_monitor=False)
    row = next(r for r in doc["sweeps"][0]["results"] if r["axes"]["cache"] == "none")
    # The row's own figures describe the six runs; the unit's are the three boot means 11, 15, 21.
    assert row["n"] == 6 and row["mean"] == pytest.approx(94 / 6)
    u = row["analysis_unit"]
    assert u["unit"] == "boot-means" and u["n"] == 3 and u["boots"] == 3 and u["runs"] == 6
    assert u["between_boot_share"] == pytest.approx(73 / 79)
    assert u["mean"] == pytest.approx(47 / 3)
    half = T_975_2 * math.sqrt(76 / 3) / math.sqrt(3)
    assert (u["ci95_low"], u["ci95_high"]) == (
        pytest.approx(47 / 3 - half),
        pytest.approx(47 / 3 + half),
    )
    line = next(x for x in to_csv(doc).splitlines() if "/none/" in x)
    assert line.endswith(f",boot-means,3,{u['ci95_low']},{u['ci95_high']}")


def test_results_without_shared_boots_have_no_unit(tmp_path: Path) -> None:
    from iomatrix.report.results import results_document

    store, sid = _store(tmp_path, shared_boots=False)
    doc = results_document(store, [sid], with_monitor=False)
    assert all(r["analysis_unit"] is None for r in doc["sweeps"][0]["results"])


def test_results_table_shows_the_boot_means_ci(tmp_path: Path) -> None:
    from rich.console import Console

    from iomatrix.report.results import results_document
    from iomatrix.report.terminal import print_results

    store, sid = _store(tmp_path, shared_boots=True)
    doc = results_document(store, [sid], with_monitor=False)
    con = Console(width=400, record=True)
    print_results(con, doc, None, False)
    text = con.export_text()
    u = next(r for r in doc["sweeps"][0]["results"] if r["axes"]["cache"] == "none")[
        "analysis_unit"
    ]
    assert f"{u['ci95_rel_half_width']:.1%}" in text
    assert "CI over boot means (3 boots of 6 runs): between-boot variance 92% of total" in text


def test_results_markdown_uses_the_boot_means_ci(tmp_path: Path) -> None:
    from iomatrix.report.export import render_tables
    from iomatrix.report.exports import results_table
    from iomatrix.report.results import results_document

    store, sid = _store(tmp_path, shared_boots=True)
    doc = results_document(store, [sid], with_monitor=False)
    [table] = results_table(doc)
    row = next(r for r in table.rows if r["cache"] == "none")
    assert row["mean"] == pytest.approx(47 / 3) and row["n"] == 6
    assert "CI over boot means (3 boots of 6 runs)" in render_tables([table], "markdown")
