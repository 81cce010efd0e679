from __future__ import annotations

import pytest

from iomatrix import workloads as wl
from iomatrix.errors import UserError
from iomatrix.matrix import (
    NA,
    BackingFacts,
    Cell,
    complete,
    estimate_seconds,
    expand,
    from_key,
    prune_reason,
)
from iomatrix.plan.load import plan_from_dict

OK = BackingFacts(unavailable=None, o_direct=True, is_device=False)


def facts(plan, **over):
    return {b.label(): over.get(b.label(), OK) for b in plan.backing}


def plan(**kw):
    return plan_from_dict({"name": "t", **kw}, "test")


def run_expand(p, **over):
    return expand(p, facts(p, **over), [wl.resolve(w) for w in p.workloads])


def test_baremetal_collapses_format_preallocation_bus() -> None:
    p = plan(
        tier=["baremetal"],
        format=["raw", "qcow2", "qed"],
        preallocation=["off", "full"],
        bus=["virtio-blk", "ide"],
        cache=["none", "writeback"],
    )
    e = run_expand(p)
    assert len(e.cells) == 2  # one per cache mode, not 3 × 2 × 2 × 2
    assert all(c.format == NA and c.bus == NA and c.preallocation == NA for c in e.cells)
    assert e.collapsed == {"baremetal": ("format", "preallocation", "bus")}


def test_aio_native_needs_direct_cache() -> None:
    p = plan(
        tier=["guest"],
        cache=["none", "writeback", "directsync", "unsafe"],
        aio=["native"],
        null_ceiling=False,
    )
    e = run_expand(p)
    assert sorted(c.cache for c in e.cells) == ["directsync", "none"]
    reasons = [x.reason for x in e.pruned]
    assert len(reasons) == 2 and all("aio=native" in r and "O_DIRECT" in r for r in reasons)


def test_preallocation_support_per_format() -> None:
    p = plan(
        tier=["guest"],
        format=["raw", "qcow2", "qed"],
        preallocation=["off", "metadata", "falloc", "full"],
        null_ceiling=False,
    )
    e = run_expand(p)
    got = sorted((c.format, c.preallocation) for c in e.cells)
    assert got == sorted(
        [
            ("raw", "off"),
            ("raw", "falloc"),
            ("raw", "full"),
            ("qcow2", "off"),
            ("qcow2", "metadata"),
            ("qcow2", "falloc"),
            ("qcow2", "full"),
            ("qed", "off"),
        ]
    )
    qed_full = next(x for x in e.pruned if x.what.startswith("guest/qed/full"))
    assert "qed does not support preallocation=full" in qed_full.reason


def test_no_o_direct_backing_prunes_none_and_directsync() -> None:
    p = plan(
        tier=["baremetal"],
        cache=["none", "writeback", "directsync"],
        backing=[{"type": "tmpfs", "size": "64M"}],
    )
    label = p.backing[0].label()
    e = run_expand(p, **{label: BackingFacts(None, o_direct=False, is_device=False)})
    assert [c.cache for c in e.cells] == ["writeback"]
    assert all("O_DIRECT" in x.reason and label in x.reason for x in e.pruned)


def test_unavailable_backing_pruned_with_reason() -> None:
    p = plan(
        tier=["baremetal"], backing=[{"type": "dir"}, {"type": "lvm", "vg": "vg0", "size": "1G"}]
    )
    lvm = p.backing[1].label()
    e = run_expand(p, **{lvm: BackingFacts("volume group vg0 not found", True, True)})
    assert [c.backing for c in e.cells] == ["dir"]
    assert "vg0 not found" in e.pruned[0].reason


def test_device_backing_refuses_file_preallocation() -> None:
    cell = Cell.of(
        tier="guest",
        format="qcow2",
        preallocation="full",
        cache="none",
        aio="threads",
        bus="virtio-blk",
        backing="blockdev:/dev/loop9",
        modifier="none",
    )
    reason = prune_reason(cell, BackingFacts(None, True, True))
    assert reason is not None and "block device" in reason


def test_unknown_tier_is_a_clear_error_naming_the_registered_tiers() -> None:
    with pytest.raises(
        UserError, match=r"tier: 'warp' is not valid; valid values: baremetal, .*guest"
    ):
        plan(tier=["warp", "baremetal"])


def test_tier_axes_come_from_the_tier_plugin() -> None:
    from iomatrix.domain import axes
    from iomatrix.matrix import collapsed_axes

    baremetal = collapsed_axes("baremetal")
    assert tuple(a for a in baremetal if axes.get(a).always_named) == (
        "format",
        "preallocation",
        "bus",
    )
    # The image-layer axes (issue 24) act on QEMU's block graph, which bare metal does not run.
    assert {"discard", "detect_zeroes", "cluster_size", "extended_l2", "l2_cache"} <= set(baremetal)
    # no guest device, no block export on bare metal
    assert {"iothread", "queues"} <= set(baremetal)
    assert collapsed_axes("guest") == ()
    assert "iothread" not in collapsed_axes("blocklayer") and "queues" in collapsed_axes(
        "blocklayer"
    )


def test_sata_is_pruned_with_the_reason_not_rejected() -> None:
    e = run_expand(plan(tier=["guest"], bus=["sata", "virtio-blk"]))
    assert {c.bus for c in e.cells} == {"virtio-blk"}
    assert any("ahci" in x.reason for x in e.pruned)


def test_null_ceiling_one_per_bus_and_no_fs_workloads() -> None:
    p = plan(tier=["guest"], bus=["virtio-blk", "nvme"], workloads=["rand-read-4k", "fs-write"])
    e = run_expand(p)
    nulls = [c for c in e.cells if c.is_null_ceiling]
    assert sorted(c.bus for c in nulls) == ["nvme", "virtio-blk"]
    assert not any(u.cell.is_null_ceiling and u.workload.name == "fs-write" for u in e.units)
    assert any("null ceiling" in x.reason for x in e.pruned)


def test_fs_workloads_are_guest_only() -> None:
    p = plan(tier=["baremetal", "guest"], workloads=["fs-read"], null_ceiling=False)
    e = run_expand(p)
    assert {u.cell.tier for u in e.units} == {"guest"}
    assert any("guest tier only" in x.reason for x in e.pruned)


def test_eatmydata_rules() -> None:
    p = plan(
        tier=["baremetal"],
        cache=["unsafe", "writeback"],
        aio=["threads", "io_uring"],
        modifier=["none", "eatmydata"],
    )
    e = run_expand(p)
    assert not any(c.modifier == "eatmydata" and c.cache == "unsafe" for c in e.cells)
    assert any("io_uring" in n for n in e.notes)


def test_cell_key_roundtrip_and_estimate() -> None:
    (p,) = [plan(tier=["baremetal", "guest"], cache=["none", "writeback"], runtime=2)]
    e = run_expand(p)
    for c in e.cells:
        assert from_key(c.key) == c
    # A block-device backing's name has slashes of its own.
    # (complete: a guest cell also holds the later axes, at their defaults)
    dev = complete(
        dict(
            tier="guest",
            format="raw",
            preallocation="off",
            cache="none",
            aio="threads",
            bus="virtio-blk",
            backing="blockdev:/dev/loop0",
            modifier="none",
        )
    )
    assert from_key(dev.key) == dev
    with pytest.raises(ValueError, match="not a cell key"):
        from_key("baremetal/none")
    low, high = estimate_seconds(p, e)
    assert 0 < low <= high


def test_estimate_pays_one_guest_boot_per_cell_and_round() -> None:
    from iomatrix.tiers.guest import GuestTier

    p = plan(
        tier=["guest"],
        cache=["none"],
        format=["raw"],
        bus=["virtio-blk"],
        null_ceiling=False,
        runtime=5,
        workloads=["rand-read-4k", "rand-write-4k", "seq-write-1m"],
    )
    e = run_expand(p)
    assert len(e.cells) == 1 and len(e.units) == 3
    low, _ = estimate_seconds(p, e)
    alone, _ = estimate_seconds(p, e, batching=False)
    reps = p.repetitions.min
    assert low == pytest.approx(
        reps * (3 * (5 + GuestTier.batch_run_overhead_s) + GuestTier.batch_overhead_s)
    )
    assert alone == pytest.approx(reps * 3 * (5 + GuestTier.overhead_s))


def test_estimate_with_repetitions_per_boot_shares_a_boot_among_rounds() -> None:
    from iomatrix.tiers.guest import GuestTier

    p = plan(
        tier=["guest"],
        cache=["none"],
        format=["raw"],
        bus=["virtio-blk"],
        null_ceiling=False,
        runtime=5,
        workloads=["rand-read-4k", "rand-write-4k", "seq-write-1m"],
        repetitions_per_boot=2,
    )
    low, _ = estimate_seconds(p, run_expand(p))
    reps = p.repetitions.min
    # 6 runs per boot (≤ 7 disks on microvm virtio-blk): one boot every second round.
    assert low == pytest.approx(
        reps * (3 * (5 + GuestTier.batch_run_overhead_s) + GuestTier.batch_overhead_s / 2)
    )


def test_a_filesystem_job_is_estimated_from_its_data_size_not_from_runtime() -> None:
    from iomatrix.matrix import FS_JOB_FIXED_S, FS_JOB_S_PER_256M
    from iomatrix.tiers.guest import GuestTier

    def est(size: str, runtime: int) -> float:
        p = plan(
            tier=["guest"],
            cache=["none"],
            format=["raw"],
            bus=["virtio-blk"],
            null_ceiling=False,
            runtime=runtime,
            workloads=["fs-read", "fs-write"],
            size=size,
            image_size="2G",
        )
        return estimate_seconds(p, run_expand(p))[0] / p.repetitions.min

    per_boot = GuestTier.batch_overhead_s + 2 * GuestTier.batch_run_overhead_s
    assert est("256M", 5) == pytest.approx(
        per_boot + 2 * FS_JOB_FIXED_S + sum(FS_JOB_S_PER_256M.values())
    )
    assert est("256M", 30) == est("256M", 5)  # runtime does not bound a filesystem job
    assert est("512M", 5) - est("256M", 5) == pytest.approx(sum(FS_JOB_S_PER_256M.values()))


def test_estimate_counts_a_tiers_precision_runs_up_to_the_budget() -> None:
    from iomatrix.tiers.blocklayer import BlockLayerTier

    base = {
        "tier": ["baremetal", "blocklayer"],
        "cache": ["none"],
        "format": ["raw"],
        "null_ceiling": False,
        "runtime": 1,
        "workloads": ["rand-read-4k"],
        "time_budget": "1h",
    }
    reps = {"min": 3, "max": 6}
    p = plan(**base, repetitions=reps)
    q = plan(**base, repetitions={**reps, "precision_max": {"blocklayer": 20}})
    (low_p, high_p), (low_q, high_q) = (
        estimate_seconds(p, run_expand(p)),
        estimate_seconds(q, run_expand(q)),
    )
    assert low_p == low_q  # the minimum is the same promise
    assert high_q - high_p == pytest.approx((20 - 6) * (1 + BlockLayerTier.overhead_s))
    capped = plan(
        **{**base, "time_budget": "40s"}, repetitions={**reps, "precision_max": {"blocklayer": 20}}
    )
    assert estimate_seconds(capped, run_expand(capped))[1] == 40.0


def test_a_real_image_estimate_counts_its_boots_not_its_runs() -> None:
    """A real image's boot (minutes under TCG) is paid once per boot: with repetitions_per_boot = 3
    a cell's three rounds cost one boot, and a cell's workloads share each boot too."""
    from iomatrix.tiers.declared.guest import REAL_IMAGE_BOOT_S, REAL_IMAGE_RUN_OVERHEAD_S

    def per_rep(rounds_per_boot: int, workloads: list[str]) -> tuple[float, float]:
        p = plan(
            tier=["guest"],
            cache=["none"],
            format=["raw"],
            bus=["virtio-blk"],
            null_ceiling=False,
            runtime=2,
            ramp=0,
            workloads=workloads,
            repetitions_per_boot=rounds_per_boot,
            guest_image="debian",
        )
        e = run_expand(p)
        low, _ = estimate_seconds(p, e)
        alone, _ = estimate_seconds(p, e, batching=False)
        return low / p.repetitions.min, alone / p.repetitions.min

    run_s = 2 + REAL_IMAGE_RUN_OVERHEAD_S
    one, alone = per_rep(1, ["rand-write-4k"])
    assert one == pytest.approx(run_s + REAL_IMAGE_BOOT_S) == alone  # a boot per run
    assert per_rep(3, ["rand-write-4k"])[0] == pytest.approx(run_s + REAL_IMAGE_BOOT_S / 3)
    two, alone = per_rep(1, ["rand-write-4k", "rand-read-4k"])
    assert two == pytest.approx(2 * run_s + REAL_IMAGE_BOOT_S)
    assert alone == pytest.approx(2 * (run_s + REAL_IMAGE_BOOT_S))
