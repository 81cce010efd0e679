"""`recommend` when the tier closest to a VM cannot answer, or its guests ran under TCG: the block
layer answers for the axes it measures, and the verdict says so; on KVM a guest tier that can answer
is the basis. A real SQLite store written through the store's API (no sweep needed)."""

from __future__ import annotations

from pathlib import Path

from iomatrix.report.recommend import recommend
from iomatrix.report.render import render_recommendation
from iomatrix.store import RunRecord, Store

WORKLOAD = "rand-write-4k"


def _axes(tier: str, cache: str) -> dict[str, str]:
    return {
        "tier": tier,
        "format": "raw",
        "preallocation": "off",
        "cache": cache,
        "aio": "threads",
        "bus": "virtio-blk" if tier == "guest" else "-",
        "backing": "dir",
        "modifier": "none",
    }


def _store(
    tmp_path: Path,
    guest_spread: float,
    guest_accel: str = "kvm",
    guest_iothreads: tuple[str, ...] = (),
) -> tuple[Store, int]:
    """Guest cells (none vs writeback) that differ by 10% with a run-to-run spread of
    `guest_spread`, and block-layer cells of the same two cache modes 3× apart with 1% spread, over
    4 rounds. `guest_iothreads`: the guests also sweep IOThreads (each value a cell of its own), the
    block layer holds iothread=off (pruned: an NBD export of QEMU 7.2 cannot have one)."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2}), "p", "fp", "{}", [], []
    )
    level = {
        ("guest", "none"): 1000.0,
        ("guest", "writeback"): 1100.0,
        ("blocklayer", "none"): 3000.0,
        ("blocklayer", "writeback"): 9000.0,
    }
    swing = [1.0, 1 + guest_spread, 1 - guest_spread / 2, 1 + guest_spread / 3]
    cells = [
        (tier, cache, base, io)
        for (tier, cache), base in level.items()
        for io in (
            guest_iothreads
            if tier == "guest" and guest_iothreads
            else ("off",)
            if guest_iothreads
            else (None,)
        )
    ]
    for tier, cache, base, io in cells:
        axes = _axes(tier, cache) | ({"iothread": io} if io else {})
        cid = store.cell_id(sid, "/".join(axes.values()), axes, {})
        for rnd in range(4):
            f = swing[rnd] if tier == "guest" else 1 + 0.01 * rnd
            # unrelated swings per cell
            f = f if cache == "none" or tier != "guest" else swing[(rnd + 2) % 4]
            store.record_run(
                RunRecord(
                    cell_id=cid,
                    workload=WORKLOAD,
                    status="ok",
                    started_at=rnd,
                    finished_at=rnd + 1,
                    accel=guest_accel if tier == "guest" else "none (QEMU block layer, no guest)",
                    cache_state="dropped",
                    page_cache_method="-",
                    metrics={"write.iops": base * f},
                    phases={},
                    round=rnd + 1,
                    round_position=0,
                )
            )
    store.set_sweep_status(sid, "finished")
    return store, sid


def test_block_layer_answers_when_the_guest_tier_cannot(tmp_path: Path) -> None:
    store, sid = _store(tmp_path, guest_spread=0.6)
    [v] = [v for v in recommend(store, sid, workload=WORKLOAD).verdicts]
    assert v.tier == "blocklayer" and v.choice is not None
    assert "cache=writeback" in v.choice.cell and "bus" not in v.choice.cell
    assert v.basis.startswith("the guest tier cannot answer yet") and "not the bus" in v.basis
    text = render_recommendation(recommend(store, sid, workload=WORKLOAD), "table")
    assert "tier blocklayer" in text and "note: the guest tier cannot answer yet" in text
    assert recommend(store, sid, workload=WORKLOAD).as_dict()["verdicts"][0]["basis"] == v.basis


def test_the_guest_tier_answers_itself_when_it_can(tmp_path: Path) -> None:
    store, sid = _store(tmp_path, guest_spread=0.0)
    [v] = recommend(store, sid, workload=WORKLOAD).verdicts
    assert v.tier == "guest" and v.choice is not None and "cache=writeback" in v.choice.cell
    assert v.basis == ""


def test_under_tcg_the_block_layer_is_the_basis_even_when_the_guests_could_answer(
    tmp_path: Path,
) -> None:
    store, sid = _store(tmp_path, guest_spread=0.0, guest_accel="tcg")
    [v] = recommend(store, sid, workload=WORKLOAD).verdicts
    assert v.tier == "blocklayer" and v.choice is not None and "cache=writeback" in v.choice.cell
    assert v.basis.startswith("the guest tier ran under TCG") and "not the bus" in v.basis


def test_the_basis_does_not_claim_an_axis_the_block_layer_held_at_one_value(tmp_path: Path) -> None:
    store, sid = _store(
        tmp_path, guest_spread=0.0, guest_accel="tcg", guest_iothreads=("off", "on")
    )
    [v] = recommend(store, sid, workload=WORKLOAD).verdicts
    assert v.tier == "blocklayer" and v.choice is not None
    decides = v.basis.split("it decides ")[1]
    assert decides.endswith("not the bus, iothread"), v.basis
    assert "iothread" not in decides.split(", not the")[0] and "cache" in decides
