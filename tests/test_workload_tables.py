"""Axis values per workload: a tier table's workload table ([blocklayer.seq-write-zeroes-1m]) runs
one workload on cells of its own, and a workload that cannot show an axis (zero detection with
random data) runs with it at one value only, pruned with the reason, instead of being multiplied by
values it cannot tell apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix import qemu_caps
from iomatrix import workloads as wl
from iomatrix.domain import axes
from iomatrix.errors import UserError
from iomatrix.matrix import BackingFacts, Expansion, expand
from iomatrix.plan.current_cell import CurrentDisk
from iomatrix.plan.load import plan_from_dict
from iomatrix.plan.model import Plan
from iomatrix.store import RunRecord, Store
from iomatrix.workloads import Workload

OK = BackingFacts(unavailable=None, o_direct=True, is_device=False)

BASE = {
    "name": "t",
    "tier": ["blocklayer"],
    "format": ["qcow2"],
    "cache": ["none", "writeback"],
    "aio": ["threads", "io_uring"],
    "workloads": ["rand-read-4k"],
    "null_ceiling": False,
    "blocklayer": {
        "workloads": ["rand-read-4k", "seq-write-zeroes-1m"],
        "seq-write-zeroes-1m": {"cache": ["none"], "detect_zeroes": ["off", "on"]},
    },
}


def plan(**kw: object) -> Plan:
    return plan_from_dict({k: v for k, v in {**BASE, **kw}.items() if v is not None}, "p.toml")


def expansion(p: Plan, workloads: list[Workload] | None = None) -> Expansion:
    own = {t: [wl.resolve(n) for n in names] for t, names in p.tier_workloads().items()}
    return expand(
        p,
        {b.label(): OK for b in p.backing},
        workloads or [wl.resolve(n) for n in p.workloads],
        tier_workloads=own,
    )


def cells_of(e: Expansion, workload: str) -> set[str]:
    return {
        u.cell.label().removeprefix("tier=blocklayer ")
        for u in e.units
        if u.workload.name == workload
    }


# --------------------------------------------------------------------------- workload tables


def test_a_workload_table_runs_its_workload_on_its_own_cells() -> None:
    p = plan()
    assert p.axis_values("cache", "blocklayer", "seq-write-zeroes-1m") == ["none"]
    assert p.axis_values("cache", "blocklayer", "rand-read-4k") == ["none", "writeback"]
    assert p.axis_values("detect_zeroes", "blocklayer") == ["off"]
    e = expansion(p)
    # The reads on the tier's cache × aio product; the zero-filled writes on cache=none × aio × zero
    # detection.
    assert len(cells_of(e, "rand-read-4k")) == 4
    zero = cells_of(e, "seq-write-zeroes-1m")
    assert len(zero) == 4 and all("cache=none" in c for c in zero)
    assert sum("detect_zeroes=on" in c for c in zero) == 2
    # A cell both products hold is one cell running both workloads, not two cells.
    assert len(e.cells) == 6 and len(e.units) == 8
    shared = [
        c
        for c in e.cells
        if {u.workload.name for u in e.units if u.cell == c}
        == {"rand-read-4k", "seq-write-zeroes-1m"}
    ]
    assert len(shared) == 2 and all(c.cache == "none" and c.detect_zeroes == "off" for c in shared)
    # Units keep the tier's order of workloads for each cell.
    assert [u.workload.name for u in e.units if u.cell == shared[0]] == [
        "rand-read-4k",
        "seq-write-zeroes-1m",
    ]


def test_every_workload_tabled_leaves_no_cell_of_the_tier_product_alone() -> None:
    p = plan(
        blocklayer={
            "workloads": ["seq-write-zeroes-1m"],
            "seq-write-zeroes-1m": {
                "cache": ["none"],
                "aio": ["io_uring"],
                "detect_zeroes": ["off", "on"],
            },
        }
    )
    e = expansion(p)
    assert {c.label() for c in e.cells} == {u.cell.label() for u in e.units} and len(e.units) == 2


def test_workload_tables_dump_inside_their_tier_table_and_change_the_fingerprint() -> None:
    p = plan()
    dumped = p.model_dump(mode="json")
    assert dumped["blocklayer"] == {
        "workloads": ["rand-read-4k", "seq-write-zeroes-1m"],
        "seq-write-zeroes-1m": {"cache": ["none"], "detect_zeroes": ["off", "on"]},
    }
    again = Plan.model_validate(json.loads(json.dumps(dumped)))
    assert again == p and again.fingerprint() == p.fingerprint()
    assert [u.key for u in expansion(again).units] == [u.key for u in expansion(p).units]
    other = plan(
        blocklayer={**BASE["blocklayer"], "seq-write-zeroes-1m": {"detect_zeroes": ["off", "on"]}}
    )
    assert other.fingerprint() != p.fingerprint()


def test_a_workload_table_naming_a_new_axis_probes_qemu() -> None:
    assert qemu_caps.plan_needs_facts(plan())
    assert not qemu_caps.plan_needs_facts(
        plan(
            blocklayer={
                "workloads": ["rand-read-4k", "seq-write-zeroes-1m"],
                "seq-write-zeroes-1m": {"cache": ["none"]},
            }
        )
    )


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            {"rand-write-4k": {"cache": ["none"]}},
            "blocklayer.rand-write-4k: a [blocklayer.rand-write-4k] table, but the "
            "blocklayer tier does not run workload "
            "rand-write-4k (its workloads: rand-read-4k); add it to the workloads",
        ),
        (
            {"rand-read-4k": {"cahce": ["none"]}},
            "blocklayer.rand-read-4k: unknown key 'cahce' — did you mean 'cache'",
        ),
        (
            {"rand-read-4k": {"workloads": ["x"]}},
            "blocklayer.rand-read-4k: unknown key 'workloads'",
        ),
        ({"rand-read-4k": {}}, "the [blocklayer.rand-read-4k] table is empty"),
        (
            {"rand-read-4k": {"cache": ["fast"]}},
            "blocklayer.rand-read-4k.cache.0: 'fast' is not valid",
        ),
        (
            {"rand-read-4k": {"bus": ["virtio-blk"]}},
            "blocklayer.rand-read-4k.bus: the blocklayer tier does not act on bus",
        ),
    ],
)
def test_bad_workload_tables_are_one_line_errors(table: dict, expected: str) -> None:
    with pytest.raises(UserError) as e:
        plan(blocklayer=table)
    msg = e.value.one_line()
    assert expected in msg and "\n" not in msg, msg


# --------------------------------------------------------------------------- axes a workload cannot
# show


def image_plan(**axes_: object) -> Plan:
    return plan(**{"blocklayer": None, "cache": ["none"], "aio": ["threads"], **axes_})


def test_zero_detection_runs_at_one_value_for_workloads_without_zero_filled_writes() -> None:
    p = image_plan(detect_zeroes=["off", "on"])
    reads, zeroes = wl.resolve("rand-read-4k"), wl.resolve("seq-write-zeroes-1m")
    e = expansion(p, [reads, zeroes, wl.resolve("rand-write-4k")])
    assert cells_of(e, "seq-write-zeroes-1m") == {
        "format=qcow2 preallocation=off cache=none aio=threads backing=dir modifier=none",
        "format=qcow2 preallocation=off cache=none "
        "aio=threads backing=dir modifier=none detect_zeroes=on",
    }
    assert all(
        "detect_zeroes" not in c for w in ("rand-read-4k", "rand-write-4k") for c in cells_of(e, w)
    )
    reasons = {p.what.split(" × ")[1]: p.reason for p in e.pruned}
    assert reasons == {
        "rand-read-4k": "rand-read-4k only reads, so detect_zeroes cannot change its result: it "
        "runs at "
        "detect_zeroes=off only",
        "rand-write-4k": "rand-write-4k writes no zero-filled blocks, so detect_zeroes cannot "
        "change its result: it "
        "runs at detect_zeroes=off only",
    }


def test_the_value_kept_is_the_default_where_listed_else_the_first() -> None:
    p = image_plan(detect_zeroes=["on", "unmap"], discard=["unmap"])
    e = expansion(p, [wl.resolve("rand-read-4k")])
    assert {u.cell.detect_zeroes for u in e.units} == {"on"}
    assert "it runs at detect_zeroes=on only" in e.pruned[0].reason


def test_discard_shows_with_trims_and_with_zero_writes_turned_into_discards() -> None:
    p = image_plan(discard=["ignore", "unmap"], detect_zeroes=["off", "unmap"])
    e = expansion(
        p,
        [
            wl.resolve("rand-trim-64k"),
            wl.resolve("seq-write-zeroes-1m"),
            wl.resolve("rand-read-4k"),
        ],
    )
    cell = "format=qcow2 preallocation=off cache=none aio=threads backing=dir modifier=none"
    # trims: discard matters, detect_zeroes not (no zero-filled writes)
    assert cells_of(e, "rand-trim-64k") == {cell, f"{cell} discard=unmap"}
    # zero writes: detect_zeroes matters; discard only where detect_zeroes=unmap turns them into
    # discards
    assert cells_of(e, "seq-write-zeroes-1m") == {cell, f"{cell} discard=unmap detect_zeroes=unmap"}
    assert cells_of(e, "rand-read-4k") == {cell}
    why = [p.reason for p in e.pruned if p.what.endswith("× seq-write-zeroes-1m")]
    assert why == [
        "seq-write-zeroes-1m sends no discards (trims), so discard cannot change its "
        "result: it runs at "
        "discard=ignore only"
    ]


def test_cluster_layout_shows_with_writes_and_trims_and_with_reads_beyond_the_default_l2_cache() -> (  # noqa: E501
    None
):
    p = image_plan(cluster_size=["64k", "1M"], extended_l2=["off", "on"])
    e = expansion(
        p,
        [
            wl.resolve(n)
            for n in (
                "rand-read-4k",
                "rand-write-4k-first",
                "rand-write-4k-rewrite",
                "rand-trim-64k",
            )
        ],
    )
    for w in ("rand-write-4k-first", "rand-write-4k-rewrite", "rand-trim-64k"):
        assert len(cells_of(e, w)) == 4, w
    assert len(cells_of(e, "rand-read-4k")) == 1
    assert any(
        "rand-read-4k only reads blocks written before it, through an L2 cache that "
        "holds the whole image's "
        "mapping, so cluster_size cannot change its result" in p.reason
        for p in e.pruned
    )
    # An image larger than QEMU's default L2 cache covers at 64 KiB clusters (256 GiB): reads show
    # the layout.
    big = image_plan(cluster_size=["64k", "1M"], image_size="300G")
    assert axes.default_l2_cache_covers_bytes(64 << 10) < big.image_size_bytes
    assert len(cells_of(expansion(big, [wl.resolve("rand-read-4k")]), "rand-read-4k")) == 2


def test_workloads_iomatrix_cannot_see_into_run_on_every_cell(tmp_path: Path) -> None:
    job = tmp_path / "zeroes.fio"
    job.write_text("[job]\nrw=write\nbs=1m\nzero_buffers=1\n")
    p = image_plan(detect_zeroes=["off", "on"])
    custom = wl.resolve(f"file:{job}")
    assert not custom.shape.known
    assert len(cells_of(expansion(p, [custom]), custom.name)) == 2


def test_the_current_configuration_runs_every_workload() -> None:
    # Proxmox turns zero detection on by default: the user's cell is measured for reads too (the
    # headline compares against it), while the matrix's own detect_zeroes=on cell is not.
    current = CurrentDisk(
        source="vm.conf",
        axes={"format": "qcow2", "cache": "none", "aio": "io_uring", "detect_zeroes": "on"},
    )
    p = image_plan(detect_zeroes=["off", "on"], current=current.model_dump())
    e = expansion(p, [wl.resolve("rand-read-4k")])
    assert {(u.cell.aio, u.cell.detect_zeroes) for u in e.units} == {
        ("threads", "off"),
        ("io_uring", "on"),
    }
    assert [c.aio for c in e.current] == ["io_uring"]


def test_qemus_default_twin_holds_the_later_axes_at_their_defaults() -> None:
    # QEMU without detect-zeroes= runs zero detection off: a detect_zeroes=on cell is quoted against
    # the writeback/threads cell with zero detection off, not against writeback/threads with it on.
    from iomatrix.domain import BASELINES
    from iomatrix.matrix import Cell, Unit
    from iomatrix.runner import compared_with

    p = image_plan(cache=["none", "writeback"], detect_zeroes=["off", "on"])
    zeroes = wl.resolve("seq-write-zeroes-1m")
    e = expansion(p, [zeroes])
    on = next(u for u in e.units if u.cell.cache == "none" and u.cell.detect_zeroes == "on")
    twin = axes.baseline_values(on.cell, BASELINES[0])
    assert (twin["cache"], twin["aio"], twin["detect_zeroes"], twin["format"]) == (
        "writeback",
        "threads",
        "off",
        "qcow2",
    )
    default = Unit(Cell(twin), zeroes).key
    assert compared_with(e.units)[on.key] == (default,)
    assert "bus" not in {k for k, v in twin.items() if v != on.cell[k]}  # "-" axes stay "-"


def test_a_question_on_one_cell_is_quoted_against_its_own_axes_at_qemus_defaults() -> None:
    from iomatrix.runner import compared_with

    p = plan(
        blocklayer={
            "workloads": ["seq-write-zeroes-1m"],
            "seq-write-zeroes-1m": {
                "cache": ["none"],
                "aio": ["io_uring"],
                "detect_zeroes": ["off", "on"],
            },
        }
    )
    e = expansion(p)
    on, off = (next(u for u in e.units if u.cell.detect_zeroes == v) for v in ("on", "off"))
    assert (
        axes.later_at_default(on.cell) == {"detect_zeroes": "off"}
        and axes.later_at_default(off.cell) == {}
    )
    assert compared_with(e.units) == {on.key: (off.key,)}


def _zero_detection_sweep(tmp_path: Path, *, off_mbps: float, on_mbps: float) -> tuple[Store, int]:
    """A finished block-layer sweep of zero detection off/on on one cache=none × io_uring cell, 4
    runs each."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2}), "p", "fp", "{}", [], []
    )
    for dz, mbps in (("off", off_mbps), ("on", on_mbps)):
        values = {
            "tier": "blocklayer",
            "format": "qcow2",
            "preallocation": "off",
            "cache": "none",
            "aio": "io_uring",
            "bus": "-",
            "backing": "dir",
            "modifier": "none",
            "detect_zeroes": dz,
        }
        cid = store.cell_id(sid, "/".join(values.values()), values, {})
        for rnd in range(4):
            store.record_run(
                RunRecord(
                    cell_id=cid,
                    workload="seq-write-zeroes-1m",
                    status="ok",
                    started_at=rnd,
                    finished_at=rnd + 1,
                    accel="none (QEMU block layer, no guest)",
                    cache_state="dropped",
                    page_cache_method="-",
                    metrics={"write.bw_mbps": mbps * (1 + 0.01 * rnd)},
                    phases={},
                    round=rnd + 1,
                    round_position=0,
                )
            )
    store.set_sweep_status(sid, "finished")
    return store, sid


def test_the_headline_quotes_zero_detection_against_it_off_when_qemus_default_cache_was_not_run(
    tmp_path: Path,
) -> None:
    from iomatrix.report.headline import headline
    from iomatrix.report.recommend import recommend
    from iomatrix.report.render import headline_text

    store, sid = _zero_detection_sweep(tmp_path, off_mbps=100.0, on_mbps=300.0)
    [v] = recommend(store, sid).verdicts
    assert v.choice is not None and "detect_zeroes=on" in v.choice.cell
    own = [g for g in v.gains if g.against == "QEMU default detect_zeroes=off"]
    assert len(own) == 1 and own[0].ratio is not None and 2.9 < own[0].ratio.ratio < 3.1
    text = headline_text(headline(recommend(store, sid), "h"), 100)
    assert (
        "seq-write-zeroes-1m: 3.00× (" in text
        and ") QEMU's default detect_zeroes=off · decided" in text
    ), text


def test_a_question_answered_by_qemus_default_value_says_so(tmp_path: Path) -> None:
    # Zero detection asked on one cache × aio cell where off wins: the answer is itself QEMU's
    # default for the question (detect_zeroes=off), not "QEMU's default: not in this sweep" (its
    # cache and aio were not run).
    from iomatrix.report.headline import headline
    from iomatrix.report.recommend import recommend
    from iomatrix.report.render import headline_text

    store, sid = _zero_detection_sweep(tmp_path, off_mbps=300.0, on_mbps=100.0)
    [v] = recommend(store, sid).verdicts
    assert v.choice is not None and "detect_zeroes=on" not in v.choice.cell
    own = [g for g in v.gains if g.against == "QEMU default detect_zeroes=off"]
    assert len(own) == 1 and own[0].note == "same cell"
    text = headline_text(headline(recommend(store, sid), "h"), 100)
    assert "seq-write-zeroes-1m: 1.00×: it is QEMU's default detect_zeroes=off · decided" in text, (
        text
    )
