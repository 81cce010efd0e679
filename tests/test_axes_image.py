"""QEMU's image-layer axes (issue 24): discard, detect_zeroes, cluster_size, extended_l2, l2_cache.

Their rules prune with the reason, their options reach ``qemu-img create`` and the ``-blockdev``
graph both tiers use, a value at its default adds nothing to any command line, and the presets that
make them visible render the fio jobs the block layer and the guest run. The slow tests run real
qemu-storage-daemon + fio."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from iomatrix.domain import axes
from iomatrix.domain.axes import DiskContext, RuleContext
from iomatrix.fio.jobs import JobShape, baremetal_job, guest_job, nbd_job
from iomatrix.fio.parse import job_metrics
from iomatrix.images import create_image_argv
from iomatrix.matrix import complete, estimate_seconds, expand
from iomatrix.plan.load import plan_from_dict
from iomatrix.qemu_block import DiskSpec, blockdev_spec
from iomatrix.runner import RunOptions, SweepRunner
from iomatrix.store import Store
from iomatrix.tiers.blocklayer import daemon_argv
from iomatrix.workloads import PRESETS, resolve
from tests.conftest import DATA, needs, run_cli

IMAGE_DEFAULTS = {
    "discard": "ignore",
    "detect_zeroes": "off",
    "cluster_size": "64k",
    "extended_l2": "off",
    "l2_cache": "default",
}
SHAPE = JobShape(size_bytes=64 << 20, runtime_s=1.0)


def _cell(**over: str) -> dict[str, str]:
    base = {
        "tier": "blocklayer",
        "format": "qcow2",
        "preallocation": "off",
        "cache": "none",
        "aio": "threads",
        "bus": "-",
        "backing": "dir",
        "modifier": "none",
        **IMAGE_DEFAULTS,
    }
    return {**base, **over}


def _reason(**over: str) -> str | None:
    return axes.prune_reason(_cell(**over), RuleContext())


# --------------------------------------------------------------------------- registry entries and
# rules


def test_entries_declare_default_plan_default_layer_and_every_tool() -> None:
    for name, default in IMAGE_DEFAULTS.items():
        a = axes.get(name)
        assert a.default == default and a.plan_default == (default,) and a.simpler[0] == default
        assert a.layers == frozenset({axes.Layer.IMAGE}) and not a.always_named
        assert set(a.tools) == {"libvirt", "proxmox", "virt-install", "nova"}
        for v in a.values:
            for spell in a.tools.values():
                t = spell(v)
                assert t.options or t.note or t.unavailable or v == default, (name, v)


def test_detect_zeroes_unmap_needs_discard_unmap_with_qemus_message() -> None:
    why = _reason(detect_zeroes="unmap")
    assert why is not None and why.startswith("detect_zeroes=unmap needs discard=unmap")
    assert (
        "setting detect-zeroes to unmap is not allowed without setting discard operation to unmap"
        in why
    )
    assert _reason(detect_zeroes="unmap", discard="unmap") is None
    assert _reason(detect_zeroes="on") is None


@pytest.mark.parametrize(
    ("axis", "value"),
    [
        ("cluster_size", "1M"),
        ("cluster_size", "128k"),
        ("extended_l2", "on"),
        ("l2_cache", "whole-image"),
    ],
)
@pytest.mark.parametrize("fmt", ["raw", "qed"])
def test_qcow2_options_are_pruned_on_other_formats(axis: str, value: str, fmt: str) -> None:
    assert _reason(format=fmt, **{axis: value}) == f"{axis} applies to qcow2 images only"
    assert _reason(format="qcow2", **{axis: value}) is None
    # the default value applies to every format (QEMU's own behaviour)
    assert _reason(format=fmt) is None


def test_every_cluster_size_allows_extended_l2() -> None:
    # QEMU refuses extended L2 entries below 16 KiB clusters; a smaller value added here would need
    # a rule.
    assert min(axes.CLUSTER_BYTES.values()) >= axes.EXTENDED_L2_MIN_CLUSTER_BYTES


def test_a_plan_multiplies_formats_by_cluster_size_only_where_it_applies() -> None:
    plan = plan_from_dict(
        {
            "name": "c",
            "tier": ["baremetal", "blocklayer"],
            "format": ["raw", "qcow2"],
            "cache": ["none"],
            "cluster_size": ["64k", "1M"],
            "workloads": ["rand-write-4k-first"],
            "null_ceiling": False,
        },
        "c.toml",
    )
    exp = expand(plan, {}, [resolve(w) for w in plan.workloads])
    keys = sorted(c.key for c in exp.cells)
    assert keys == [
        "baremetal/-/-/none/threads/-/dir/none",
        "blocklayer/qcow2/off/none/threads/-/dir/none",
        "blocklayer/qcow2/off/none/threads/-/dir/none+cluster_size=1M",
        "blocklayer/raw/off/none/threads/-/dir/none",
    ]
    assert [p.reason for p in exp.pruned] == [
        "cluster_size applies to qcow2 images only",
        "workload rand-write-4k-first allocates in a fresh thin disk image through QEMU; "
        "fio on the host writes a "
        "file it lays out (fallocates) first",
    ]
    assert "cluster_size" in exp.collapsed["baremetal"]


def test_a_plan_without_the_new_axes_shows_no_new_collapsed_axes() -> None:
    plan = plan_from_dict(
        {
            "name": "p",
            "tier": ["baremetal", "blocklayer"],
            "cache": ["none"],
            "workloads": ["seq-write-1m"],
            "null_ceiling": False,
        },
        "p.toml",
    )
    exp = expand(plan, {}, [resolve(w) for w in plan.workloads])
    assert exp.collapsed == {
        "baremetal": ("format", "preallocation", "bus"),
        "blocklayer": ("bus",),
    }
    assert all("+" not in c.key for c in exp.cells)


# --------------------------------------------------------------------------- QEMU options


def test_defaults_add_nothing_to_any_command_line() -> None:
    assert axes.qemu_options(_cell(), DiskContext(1 << 30)) == axes.qemu_options(
        {k: v for k, v in _cell().items() if k not in IMAGE_DEFAULTS}
    )
    disk = DiskSpec.for_cell(complete(_cell()), "/img/x.qcow2", 1 << 30)
    assert blockdev_spec(disk) == (
        "driver=qcow2,node-name=d0,cache.direct=on,cache.no-flush=off,file.driver=file,"
        "file.filename=/img/x.qcow2,file.aio=threads,file.cache.direct=on,"
        "file.cache.no-flush=off"
    )


def test_discard_and_detect_zeroes_reach_the_blockdev_graph() -> None:
    disk = DiskSpec.for_cell(
        complete(_cell(discard="unmap", detect_zeroes="unmap")), "/img/x.qcow2", 1 << 30
    )
    spec = blockdev_spec(disk)
    fmt, _, file = spec.partition(",file.driver=")
    assert "discard=unmap" in fmt.split(",") and "detect-zeroes=unmap" in fmt.split(",")
    assert "file.discard=unmap" in file.split(",") and "detect-zeroes" not in file
    argv = daemon_argv("qemu-storage-daemon", disk, 3)
    assert argv[argv.index("--blockdev") + 1] == spec
    on = blockdev_spec(
        DiskSpec.for_cell(complete(_cell(detect_zeroes="on")), "/img/x.qcow2", 1 << 30)
    )
    assert ",detect-zeroes=on," in on and "discard" not in on


def test_cluster_layout_reaches_qemu_img_create(tmp_path: Path) -> None:
    opts = axes.qemu_options(
        _cell(cluster_size="1M", extended_l2="on"), DiskContext(1 << 30)
    ).create
    argv = create_image_argv(tmp_path / "x.qcow2", "qcow2", "off", 1 << 30, opts)
    assert argv is not None
    assert argv[argv.index("-o") + 1] == "preallocation=off,cluster_size=1M,extended_l2=on"


@pytest.mark.parametrize(
    ("size", "cluster", "extl2", "expected"),
    [
        (1 << 30, "64k", "off", 128 << 10),  # 16384 entries × 8 B = 128 KiB, two clusters
        # 160 KiB rounded up to whole clusters (QEMU commit b70d0820)
        (1280 << 20, "64k", "off", 192 << 10),
        (1 << 30, "64k", "on", 256 << 10),  # extended L2 entries are 16 B
        (1 << 30, "1M", "off", 1 << 20),  # 8 KiB of entries, one 1 MiB table
        # 37.5 MiB, past the 32 MiB default: where the two differ
        (300 << 30, "64k", "off", 39_321_600),
    ],
)
def test_whole_image_l2_cache_is_qemus_own_bound(
    size: int, cluster: str, extl2: str, expected: int
) -> None:
    opts = axes.qemu_options(
        _cell(l2_cache="whole-image", cluster_size=cluster, extended_l2=extl2), DiskContext(size)
    )
    assert dict(opts.format_node)["l2-cache-size"] == str(expected)


def test_default_l2_cache_covers_256_gib_at_64k_clusters() -> None:
    assert axes.default_l2_cache_covers_bytes(64 << 10) == 256 << 30
    assert axes.default_l2_cache_covers_bytes(64 << 10, 16) == 128 << 30
    assert axes.whole_image_l2_cache_bytes(256 << 30, 64 << 10) == axes.DEFAULT_L2_CACHE_MAX_BYTES


def test_whole_image_l2_cache_without_an_image_size_is_a_bound_qemu_caps() -> None:
    # A snippet for the user's image (size unknown): 1 GiB, capped by QEMU at what the image needs.
    assert dict(axes.qemu_options(_cell(l2_cache="whole-image")).format_node)[
        "l2-cache-size"
    ] == str(1 << 30)
    assert (
        axes.default_l2_cache_covers_bytes(64 << 10)
        * (axes.L2_CACHE_ANY_IMAGE_BYTES // axes.DEFAULT_L2_CACHE_MAX_BYTES)
        == 8 << 40
    )
    disk = DiskSpec.for_cell(complete(_cell(l2_cache="whole-image")), "/img/x.qcow2", 1 << 30)
    assert ",l2-cache-size=131072," in blockdev_spec(disk)


def test_whole_image_cells_carry_a_sweep_note() -> None:
    notes = axes.notes([_cell(l2_cache="whole-image")])
    assert (
        len(notes) == 1
        and "256 GiB at 64 KiB clusters" in notes[0]
        and "rand-read-4k-sparse-1t" in notes[0]
    )


# --------------------------------------------------------------------------- tool spellings


def _spell(tool: str, **over: str) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    return axes.tool_options({k: v for k, v in _cell(**over).items() if k in IMAGE_DEFAULTS}, tool)


def test_tool_spellings() -> None:
    opts, _, unavail = _spell("libvirt", discard="unmap", detect_zeroes="unmap")
    assert opts == [("discard", "unmap"), ("detect_zeroes", "unmap")] and not unavail
    opts, notes, _ = _spell("proxmox", discard="unmap", detect_zeroes="unmap")
    assert opts == [("discard", "on"), ("detect_zeroes", "1")]
    assert any("no detect_zeroes=unmap" in n for n in notes)
    opts, notes, _ = _spell("proxmox")
    assert ("detect_zeroes", "0") in opts and any(
        "unless a disk says detect_zeroes=0" in n for n in notes
    )
    opts, _, unavail = _spell("nova", discard="unmap", detect_zeroes="on")
    assert opts == [("hw_disk_discard", "unmap")] and unavail == [
        "Nova has no zero-detection setting (libvirt's detect_zeroes is not exposed)"
    ]
    # A pre-created image is still a valid libvirt disk: a note with the command, not "unavailable".
    opts, notes, unavail = _spell("libvirt", cluster_size="1M", extended_l2="on")
    assert opts == [("discard", "ignore"), ("detect_zeroes", "off")] and not unavail
    assert any("qemu-img create -f qcow2 -o cluster_size=1M" in n for n in notes)
    assert any("-o extended_l2=on" in n for n in notes)
    _, _, unavail = _spell("nova", cluster_size="1M")
    assert unavail and "cluster_size" in unavail[0]
    _, _, unavail = _spell("proxmox", l2_cache="whole-image")
    assert unavail and "256 GiB" in unavail[0]


# --------------------------------------------------------------------------- presets


def test_zero_filled_writes_preset() -> None:
    w = PRESETS["seq-write-zeroes-1m"]
    text = nbd_job(w, uri="nbd+unix:///x?socket=s", shape=SHAPE).text
    measure = text.split("[measure]")[1]
    assert "rw=write\n" in measure and "bs=1m\n" in measure and "zero_buffers=1\n" in measure
    assert "[prefill]" not in text
    assert "zero_buffers=1" in guest_job(w, shape=SHAPE)
    assert "zero_buffers" not in nbd_job(PRESETS["seq-write-1m"], uri="u", shape=SHAPE).text


def test_zero_filled_first_writes_run_on_an_image_of_their_own_through_qemu() -> None:
    # The same writes as seq-write-zeroes-1m, across a fresh 16 GiB thin image: a run at the NBD
    # transport's ceiling (~1.3 GB/s here) never wraps around to rewrite what it wrote.
    w, wrapping = PRESETS["seq-write-zeroes-1m-first"], PRESETS["seq-write-zeroes-1m"]
    shape = JobShape.for_workload(w, size_bytes=128 << 20, image_bytes=512 << 20, runtime_s=2.0)
    assert shape.size_bytes == shape.image_bytes == 16 << 30
    first = nbd_job(w, uri="u", shape=shape).text
    assert "[prefill]" not in first and "size=17179869184\n" in first
    plain = JobShape.for_workload(
        wrapping, size_bytes=128 << 20, image_bytes=512 << 20, runtime_s=2.0
    )
    assert first.split("[measure]")[1].replace("17179869184", "X") == nbd_job(
        wrapping, uri="u", shape=plain
    ).text.split("[measure]")[1].replace(str(128 << 20), "X")
    assert w.shape.zero_writes and w.needs_layer is not None
    plan = plan_from_dict(
        {
            "name": "z",
            "tier": ["baremetal", "blocklayer"],
            "cache": ["none"],
            "detect_zeroes": ["off", "on"],
            "workloads": ["seq-write-zeroes-1m-first"],
            "null_ceiling": False,
        },
        "z.toml",
    )
    exp = expand(plan, {}, [resolve(x) for x in plan.workloads])
    assert sorted(u.cell.key for u in exp.units) == [
        "blocklayer/raw/off/none/threads/-/dir/none",
        "blocklayer/raw/off/none/threads/-/dir/none+detect_zeroes=on",
    ]
    assert any("zero detection is QEMU's" in p.reason for p in exp.pruned)


def test_trim_preset_trims_a_written_region_and_needs_qemus_image_layer() -> None:
    w = PRESETS["rand-trim-64k"]
    for text in (nbd_job(w, uri="u", shape=SHAPE).text, guest_job(w, shape=SHAPE)):
        prefill, measure = text.split("[measure]")
        assert (
            "[prefill]\nrw=write" in prefill
            and "rw=randtrim\n" in measure
            and "bs=64k\n" in measure
        )
    assert w.primary_metric == "trim.iops" and not w.reads and not w.writes
    plan = plan_from_dict(
        {
            "name": "t",
            "tier": ["baremetal", "blocklayer"],
            "cache": ["none"],
            "workloads": ["rand-trim-64k"],
            "null_ceiling": False,
        },
        "t.toml",
    )
    exp = expand(plan, {}, [resolve(x) for x in plan.workloads])
    assert [u.cell.tier for u in exp.units] == ["blocklayer"]
    assert any("fio on the host cannot trim an image file" in p.reason for p in exp.pruned)


def test_first_writes_and_rewrites_differ_only_by_the_prefill() -> None:
    first, rewrite = PRESETS["rand-write-4k-first"], PRESETS["rand-write-4k-rewrite"]
    a = nbd_job(first, uri="u", shape=SHAPE).text
    b = nbd_job(rewrite, uri="u", shape=SHAPE).text
    assert "[prefill]" not in a and "[prefill]" in b
    assert a.split("[measure]")[1] == b.split("[measure]")[1]
    assert "rw=randwrite\nbs=4k\niodepth=16\n" in a
    assert "[prefill]" in baremetal_job(
        rewrite, cache="none", aio="threads", target="/t/f", shape=SHAPE
    )


def test_sparse_reads_preset_allocates_every_l2_table_of_a_wide_thin_image() -> None:
    w = PRESETS["rand-read-4k-sparse-1t"]
    shape = JobShape.for_workload(w, size_bytes=64 << 20, image_bytes=512 << 20, runtime_s=1.0)
    # The workload's own image is its whole region, whatever the plan's size and image_size.
    assert shape.size_bytes == shape.image_bytes == 1 << 40 and shape.runtime_s == 1.0
    plain = JobShape.for_workload(
        PRESETS["rand-read-4k-qd32"], size_bytes=64 << 20, image_bytes=512 << 20, runtime_s=1.0
    )
    assert (plain.size_bytes, plain.image_bytes) == (64 << 20, 512 << 20)
    for text in (nbd_job(w, uri="u", shape=shape).text, guest_job(w, shape=shape)):
        prefill, measure = text.split("[measure]")
        # 4 KiB written, then 512 MiB − 4 KiB skipped: one block at the start of every 512 MiB (2048
        # writes).
        assert f"size={1 << 40}\n" in text
        assert "[prefill]\nrw=write:536866816\nbs=4096\nnumber_ios=2048\n" in prefill
        assert (
            "rw=randread\n" in measure
            and "iodepth=16\n" in measure
            and "norandommap=1\n" in measure
        )
    assert "norandommap" not in nbd_job(PRESETS["rand-read-4k-qd32"], uri="u", shape=SHAPE).text
    assert w.needs_layer == axes.Layer.IMAGE and w.reads and not w.writes


def test_l2_cache_runs_only_where_the_default_cache_cannot_hold_the_image() -> None:
    plan = plan_from_dict(
        {
            "name": "l2",
            "tier": ["baremetal", "blocklayer"],
            "format": ["qcow2"],
            "cache": ["none"],
            "cluster_size": ["64k", "1M"],
            "l2_cache": ["default", "whole-image"],
            "workloads": ["rand-read-4k-sparse-1t", "rand-read-4k-qd32"],
            "null_ceiling": False,
        },
        "l2.toml",
    )
    exp = expand(plan, {}, [resolve(x) for x in plan.workloads])
    runs = {
        (u.cell.tier, u.cell.get("cluster_size"), u.cell.get("l2_cache"), u.workload.name)
        for u in exp.units
    }
    # The 1 TiB image outgrows the default cache at 64 KiB clusters (256 GiB), not at 1 MiB (4 TiB);
    # the plan's 1 GiB image never does; the host's fio has no image layer.
    assert ("blocklayer", "64k", "whole-image", "rand-read-4k-sparse-1t") in runs
    assert ("blocklayer", "64k", "default", "rand-read-4k-sparse-1t") in runs
    assert not any(
        r[2] == "whole-image" and (r[1] == "1M" or r[3] == "rand-read-4k-qd32") for r in runs
    )
    assert not any(r[0] == "baremetal" and r[3] == "rand-read-4k-sparse-1t" for r in runs)
    reasons = [p.reason for p in exp.pruned]
    assert any(
        "rand-read-4k-qd32 runs on a 1 GiB image, whose whole L2 metadata QEMU's default "
        "cache already "
        "holds (up to 256 GiB at this cluster size), so l2_cache cannot change its result" in r
        for r in reasons
    ), reasons
    assert any(
        "rand-read-4k-sparse-1t runs on a 1 TiB image" in r and "up to 4 TiB" in r for r in reasons
    ), reasons


def test_a_workload_with_its_own_image_is_pruned_on_a_raw_block_device() -> None:
    plan = plan_from_dict(
        {
            "name": "d",
            "tier": ["blocklayer"],
            "format": ["raw", "qcow2"],
            "cache": ["none"],
            "workloads": ["rand-read-4k-sparse-1t", "rand-read-4k-qd32"],
            "null_ceiling": False,
        },
        "d.toml",
    )
    device = axes.BackingFacts(unavailable=None, o_direct=True, is_device=True)
    exp = expand(plan, {"dir": device}, [resolve(x) for x in plan.workloads])
    runs = {(u.cell.format, u.workload.name) for u in exp.units}
    assert ("raw", "rand-read-4k-sparse-1t") not in runs and (
        "qcow2",
        "rand-read-4k-sparse-1t",
    ) in runs
    assert ("raw", "rand-read-4k-qd32") in runs
    assert any("a raw block device is used as it is" in p.reason for p in exp.pruned)


def test_the_strided_prefill_is_in_the_estimate() -> None:
    def estimate(workload: str) -> float:
        plan = plan_from_dict(
            {
                "name": "e",
                "tier": ["blocklayer"],
                "format": ["qcow2"],
                "cache": ["none"],
                "workloads": [workload],
                "null_ceiling": False,
                "repetitions": {"min": 3, "max": 3},
            },
            "e.toml",
        )
        return estimate_seconds(plan, expand(plan, {}, [resolve(workload)]))[0]

    # 2048 allocating writes at ~500 a second, in each of the 3 runs.
    assert estimate("rand-read-4k-sparse-1t") - estimate("rand-read-4k-qd16") == pytest.approx(
        3 * 2048 / 500
    )


def test_trim_metrics_are_parsed() -> None:
    job = {
        "trim": {"total_ios": 10, "bw_bytes": 640_000, "iops": 10.0, "clat_ns": {"mean": 1000.0}}
    }
    m = job_metrics(job)
    assert m["trim.iops"] == 10.0 and m["trim.bw_mbps"] == 0.64 and m["total.iops"] == 0.0


# --------------------------------------------------------------------------- measured in the block
# layer


def _sweep(
    tmp_path: Path, plan_dict: dict[str, object]
) -> tuple[sqlite3.Connection, dict[str, list[float]]]:
    plan = plan_from_dict(plan_dict, "p.toml")
    tmp_path.mkdir(exist_ok=True)
    store = Store(tmp_path / "r.sqlite")
    result = SweepRunner(
        plan, None, store, RunOptions(workdir=tmp_path / "work", monitor_interval=0.5)
    ).run()
    store.close()
    assert result.runs_failed == 0, result
    con = sqlite3.connect(tmp_path / "r.sqlite")
    metric = resolve(plan.workloads[0]).primary_metric
    values: dict[str, list[float]] = {}
    for key, value in con.execute(
        "SELECT c.key, s.value FROM runs r JOIN cells c ON c.id=r.cell_id JOIN samples s "
        "ON s.run_id=r.id WHERE r.status='ok' AND c.tier='blocklayer' AND s.metric=? "
        "AND r.workload=?",
        (metric, plan.workloads[0]),
    ):
        values.setdefault(key, []).append(value)
    return con, values


BASE = {
    "tier": ["blocklayer"],
    "cache": ["none"],
    "size": "256M",
    "image_size": "512M",
    "runtime": 1.0,
    "null_ceiling": False,
    "retry_disturbed": False,
    "repetitions": {"min": 3, "max": 3},
}


@pytest.mark.slow
@needs("fio")
@needs("qemu-storage-daemon")
def test_block_layer_zero_detection_runs_on_zero_filled_writes(tmp_path: Path) -> None:
    # Zero detection in a workload table: the zero-filled writes run with it off and on, random
    # writes (which it cannot change) on the tier's one cell only; one run each. How much faster
    # zero-filled writes go with it on (1.72× on a quiet host: docs/benchmarks-history.md, "Issue
    # 24: zero detection in the block layer") is bench/zero_detection.py's to measure, not a
    # test's: a measured ratio asserted here was a speed assertion (issue 67).
    con, bw = _sweep(
        tmp_path,
        {
            **BASE,
            "name": "dz",
            "format": ["qcow2"],
            "workloads": ["seq-write-zeroes-1m", "rand-write-4k"],
            "blocklayer": {"seq-write-zeroes-1m": {"detect_zeroes": ["off", "on"]}},
            "repetitions": {"min": 1, "max": 1},
        },
    )
    argv = [json.loads(m)["daemon_argv"] for (m,) in con.execute("SELECT meta_json FROM runs")]
    assert sum(",detect-zeroes=on," in a[a.index("--blockdev") + 1] for a in argv) == 1
    random = con.execute(
        "SELECT DISTINCT c.key, COUNT(*) FROM runs r JOIN cells c ON c.id=r.cell_id "
        "WHERE r.workload='rand-write-4k' AND r.status='ok' GROUP BY c.key"
    ).fetchall()
    assert random == [("blocklayer/qcow2/off/none/threads/-/dir/none", 1)]
    # both zero-filled cells measured (their ratio is not asked)
    off, on = (
        bw["blocklayer/qcow2/off/none/threads/-/dir/none"],
        bw["blocklayer/qcow2/off/none/threads/-/dir/none+detect_zeroes=on"],
    )
    assert len(off) == len(on) == 1 and off[0] > 0 and on[0] > 0, (off, on)


@pytest.mark.slow
@needs("fio")
@needs("qemu-storage-daemon")
def test_block_layer_runs_cluster_sizes_and_trims(tmp_path: Path) -> None:
    # Which cells run, with which daemon options, and that trims are counted: no figure is compared,
    # so 0.5 s runs.
    quick = {**BASE, "runtime": 0.5, "repetitions": {"min": 2, "max": 2}}
    con, iops = _sweep(
        tmp_path,
        {
            **quick,
            "name": "cl",
            "format": ["qcow2", "raw"],
            "cluster_size": ["64k", "1M"],
            "extended_l2": ["off", "on"],
            "workloads": ["rand-write-4k-first"],
        },
    )
    # raw × (1M or extended_l2) is pruned, not run: 4 qcow2 cells and 1 raw cell.
    assert len(iops) == 5 and all(len(v) == 2 for v in iops.values()), iops
    sizes = {
        k: json.loads(m)["daemon_argv"]
        for k, m in con.execute(
            "SELECT c.key, r.meta_json FROM runs r JOIN cells c ON c.id=r.cell_id"
        )
    }
    # a creation option, not a node one
    assert all("cluster_size" not in " ".join(a) for a in sizes.values())

    _, trims = _sweep(
        tmp_path / "t",
        {
            **quick,
            "name": "tr",
            "format": ["qcow2"],
            "discard": ["ignore", "unmap"],
            "workloads": ["rand-trim-64k"],
        },
    )
    assert len(trims) == 2 and all(v > 0 for xs in trims.values() for v in xs), trims


@pytest.mark.slow
@needs("fio")
@needs("qemu-storage-daemon")
def test_block_layer_whole_image_l2_cache_runs_on_a_wide_thin_image(tmp_path: Path) -> None:
    # A 1 TiB thin image with all 2048 of its L2 tables (64 KiB clusters): QEMU's default cache (32
    # MiB) holds a quarter of them, whole-image (128 MiB) all. Here: that both cells run that image
    # with the cache size each asks for, two runs each (recommend --min-runs 2). How much faster
    # whole-image reads (about 10× on a quiet host: docs/benchmarks-history.md, "Issue 24: the
    # qcow2 L2 cache") is bench/l2_cache.py's to measure, not a test's (issue 67: the 2× this test
    # asked for was a measured speed, and its three runs per cell took a minute); that the decision
    # rule names whole-image on such runs is
    # test_whole_image_l2_cache_is_the_answer_on_captured_runs.
    # cache=unsafe (issue 67): each of the prefill's 2048 writes allocates an L2 table, which QEMU
    # writes with a flush of the image (qcow2's l2_allocate: the table, then the L1 entry, each
    # synced); at cache=none that was ~4 s of each run's ~9 (matrix.py's 500 such writes a
    # second), under unsafe the flushes are dropped. Which cache mode the reads go through is not
    # what this test checks (bench/l2_cache.py measures at cache=none); half-second runs likewise.
    con, iops = _sweep(
        tmp_path,
        {
            **BASE,
            "name": "l2",
            "format": ["qcow2"],
            "cache": ["unsafe"],
            "aio": ["io_uring"],
            "l2_cache": ["default", "whole-image"],
            "workloads": ["rand-read-4k-sparse-1t"],
            "runtime": 0.5,
            "repetitions": {"min": 2, "max": 2},
        },
    )
    runs = [
        (key, json.loads(meta), job)
        for key, meta, job in con.execute(
            "SELECT c.key, r.meta_json, r.job_text FROM runs r JOIN cells c ON "
            "c.id=r.cell_id WHERE r.status='ok'"
        )
    ]
    assert len(runs) == 4
    for key, meta, job in runs:
        # The workload's own image and region, not the plan's 512 MiB image and 256 MiB region.
        assert (
            meta["image_size_bytes"] == 1 << 40
            and f"size={1 << 40}\n" in job
            and "number_ios=2048\n" in job
        )
        graph = meta["daemon_argv"][meta["daemon_argv"].index("--blockdev") + 1]
        assert (",l2-cache-size=134217728," in graph) == key.endswith("l2_cache=whole-image"), graph
    # each cell measured: a read rate stored for both (their ratio is not asked)
    assert sorted(iops) == [
        "blocklayer/qcow2/off/unsafe/io_uring/-/dir/none",
        "blocklayer/qcow2/off/unsafe/io_uring/-/dir/none+l2_cache=whole-image",
    ] and all(v > 0 for xs in iops.values() for v in xs), iops
    # Nothing left on the backing: each run's image is removed.
    assert not list((tmp_path / "work").glob("backings/*/*.qcow2*"))
    # The recommendation reads these runs without error; *which* answer they give depends on how a
    # loaded host spread them, so the decision rule is checked on captured runs instead
    # (test_whole_image_l2_cache_is_the_answer_on_captured_runs). --allow-data-loss: both cells
    # are cache=unsafe, which the answer otherwise sets aside as not power-loss safe.
    rec = run_cli(
        "recommend",
        "--db",
        str(tmp_path / "r.sqlite"),
        "--target",
        "qemu",
        "--min-runs",
        "2",
        "--allow-data-loss",
    )
    assert rec.returncode == 0, rec.stderr
    assert "l2_cache=whole-image" in rec.stdout


def test_whole_image_l2_cache_is_the_answer_on_captured_runs(tmp_path: Path) -> None:
    """The decision rule on the runs of the test above, captured once
    (tests/data/l2_cache_whole_image.sqlite, fio's raw output emptied): whole-image leads 3.5×, but
    3 runs of 2 cells cannot yet decide it, and the answer says so with the interval and the time
    that would settle it. Deterministic: the same runs give the same answer on any host, however
    busy."""
    import shutil

    db = tmp_path / "r.sqlite"
    shutil.copyfile(DATA / "l2_cache_whole_image.sqlite", db)
    rec = run_cli("recommend", "--db", str(db), "--target", "qemu")
    assert rec.returncode == 0, rec.stderr
    joined = re.sub(r"\\\n\s*", "", rec.stdout)  # the QEMU snippet continues over lines
    # 3 runs of 2 cells: one pair, 2 df, nothing to moderate it with; at the constant level of
    # every look (stats/looks.py, 0.0024) a t must reach 20.4, and whole-image's 3.5x (0.14-0.59 at
    # 95 %) does not yet: the answer says so, with the interval and the minutes that would settle
    # it, rather than naming the faster cell on 3 runs. (Under the first look's 0.01 before
    # 2026-11-28 it was "Use: l2_cache=whole-image".)
    text = " ".join(rec.stdout.split())
    assert "Use for now" in text and "not told apart" in text, rec.stdout
    assert "l2_cache=default is 0.29× (0.14–0.59) l2_cache=whole-image" in text, rec.stdout
    detail = " ".join(run_cli("recommend", "--db", str(db), "--detail").stdout.split())
    assert "not told apart from l2_cache=whole-image at this resolution" in detail, detail
    assert "within 0.14–0.59× here" in detail and "would settle it" in detail, detail
    assert "-blockdev driver=qcow2" in joined  # the snippet of the pick, whole
