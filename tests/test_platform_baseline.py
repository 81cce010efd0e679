"""Issue 49, the user's platform as the baseline: with --target proxmox (nova, libvirt) the answer
is quoted against that platform's defaults (domain.PLATFORM_BASELINES) where the sweep measured
them, and says when it did not, then quoting QEMU's default. Synthetic sweeps written through the
store's API, and a captured run of the quick plan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from iomatrix.domain import (
    BASELINES,
    NOVA_DEFAULT,
    PLATFORM_BASELINES,
    PROXMOX_DEFAULT,
    Aio,
    Bus,
    CacheMode,
    axes,
)
from iomatrix.report.headline import TARGETS, headline
from iomatrix.report.recommend import recommend
from iomatrix.report.render import headline_text, render_recommendation
from iomatrix.store import RunRecord, Store
from tests.conftest import DATA

# a real run of the built-in quick plan (its README)
QUICK = DATA / "quick-reversals" / "sweep-a.sqlite"

# (cache, aio, bus, iothread) → rand-read-4k IOPS: QEMU's default, Proxmox's default, and a faster
# cell.
QEMU_CELL = ("writeback", "threads", "virtio-blk", "off")
PROXMOX_CELL = ("none", "io_uring", "virtio-scsi-single", "on")
BEST_CELL = ("none", "io_uring", "virtio-blk", "on")
IOPS = {QEMU_CELL: 1000.0, PROXMOX_CELL: 1500.0, BEST_CELL: 2400.0}


def _sweep(tmp_path: Path, iops: dict[tuple[str, str, str, str], float]) -> tuple[Store, int]:
    """A finished guest-tier sweep (KVM) of rand-read-4k over the given cells, 5 rounds, ±4 % run to
    run."""
    store = Store(tmp_path / "b.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2, "mem_bytes": 8 << 30}),
        "p",
        "fp",
        "{}",
        [],
        [],
    )
    for pos, (cell, value) in enumerate(iops.items()):
        cache, aio, bus, iothread = cell
        values = {
            "tier": "guest",
            "format": "raw",
            "preallocation": "off",
            "cache": cache,
            "aio": aio,
            "bus": bus,
            "backing": "dir",
            "modifier": "none",
            "iothread": iothread,
        }
        cid = store.cell_id(
            sid,
            f"guest/{cache}/{aio}/{bus}/{iothread}",
            values,
            {"backing_type": "dir", "backing_label": "dir"},
        )
        for rnd in range(5):
            v = value * (1 + 0.02 * ((rnd * 3 + pos) % 5 - 2))
            store.record_run(
                RunRecord(
                    cell_id=cid,
                    workload="rand-read-4k",
                    status="ok",
                    started_at=rnd,
                    finished_at=rnd + 1,
                    accel="kvm",
                    cache_state="dropped",
                    page_cache_method="-",
                    metrics={"read.iops": v, "total.iops": v},
                    phases={},
                    round=rnd + 1,
                    round_position=pos,
                    disturbed=False,
                )
            )
    store.set_sweep_status(sid, "finished")
    return store, sid


def _screen(store: Store, sid: int, target: str) -> tuple[str, dict]:
    h = headline(recommend(store, sid), "h", target)
    return " ".join(headline_text(h, 100).split()), h.as_dict()


def test_each_platform_has_its_defaults_in_one_place_with_their_source() -> None:
    assert set(PLATFORM_BASELINES) == set(TARGETS)
    assert (PROXMOX_DEFAULT.cache, PROXMOX_DEFAULT.aio, PROXMOX_DEFAULT.bus) == (
        CacheMode.NONE,
        Aio.IO_URING,
        Bus.VIRTIO_SCSI_SINGLE,
    )
    assert dict(PROXMOX_DEFAULT.settings) == {"iothread": "on"}
    assert "Drive.pm" in PROXMOX_DEFAULT.source and "disk_cachemode" in NOVA_DEFAULT.source
    assert (NOVA_DEFAULT.cache, NOVA_DEFAULT.aio, NOVA_DEFAULT.bus) == (
        CacheMode.NONE,
        Aio.THREADS,
        Bus.VIRTIO_BLK,
    )
    # libvirt (and virt-install) leave cache= and io= to QEMU: their baseline is QEMU's
    assert PLATFORM_BASELINES["libvirt"] in BASELINES and PLATFORM_BASELINES["qemu"] is BASELINES[0]
    # a tier without a bus keeps it not applying; the block layer's twin is the cache, aio and
    # IOThread
    twin = axes.baseline_values(
        {
            "tier": "blocklayer",
            "cache": "writeback",
            "aio": "threads",
            "bus": "-",
            "iothread": "off",
        },
        PROXMOX_DEFAULT,
    )
    assert (twin["cache"], twin["aio"], twin["bus"], twin["iothread"]) == (
        "none",
        "io_uring",
        "-",
        "on",
    )


def test_proxmox_answer_is_quoted_against_proxmox_defaults_when_the_sweep_measured_them(
    tmp_path: Path,
) -> None:
    store, sid = _sweep(tmp_path, IOPS)
    text, doc = _screen(store, sid, "proxmox")
    assert (
        "baseline: Proxmox's default, cache=none aio=io_uring bus=virtio-scsi-single "
        "iothread=on (measured)" in text
    )
    assert "rand-read-4k: 1.60× (" in text and ") Proxmox's default ·" in text, text
    assert "QEMU's default" not in text
    assert doc["baseline"]["name"] == "Proxmox's default" and doc["baseline"]["measured"] == [
        "rand-read-4k"
    ]
    assert doc["baseline"]["not_measured"] == []
    [pick] = doc["picks"]
    vs = pick["workloads"][0]["vs"]
    assert (
        "cache=none aio=io_uring bus=virtio-scsi-single" in vs["cell"]
        and "iothread=on" in vs["cell"]
    )
    assert 1.5 < vs["ratio"] < 1.7
    # The same answer for libvirt: QEMU's default, which libvirt's is (named so in JSON)
    text, doc = _screen(store, sid, "libvirt")
    assert (
        "rand-read-4k: 2.40× (" in text and ") QEMU's default ·" in text and "baseline:" not in text
    )
    assert (
        doc["baseline"]["name"] == "libvirt's default" and doc["baseline"]["same_as_qemu"] is True
    )
    assert doc["baseline"]["settings"] == "cache=writeback aio=threads"


def test_an_unmeasured_platform_default_is_said_and_qemus_is_quoted(tmp_path: Path) -> None:
    store, sid = _sweep(tmp_path, {QEMU_CELL: 1000.0, BEST_CELL: 2400.0})
    for target, name, settings in (
        (
            "proxmox",
            "Proxmox's default",
            "cache=none aio=io_uring bus=virtio-scsi-single iothread=on",
        ),
        ("nova", "Nova's default", "cache=none aio=threads bus=virtio-blk"),
    ):
        text, doc = _screen(store, sid, target)
        # whole, or in its short form where a target's screen is crowded: every target's screen
        # holds the same facts (issue 70), so it is laid out for the most crowded
        assert (
            f"baseline: {name} ({settings}) was not measured by this sweep: those ratios "
            "are against QEMU's "
            "default (cache=writeback aio=threads)"
            in text
            or f"baseline: {name} ({settings}) not measured: ratios are against QEMU's default"
            in text
        ), text
        assert "rand-read-4k: 2.40× (" in text and ") QEMU's default ·" in text
        assert doc["baseline"]["not_measured"] == ["rand-read-4k"] and doc["baseline"][
            "line"
        ].startswith(f"baseline: {name}")
    # every verdict carries its gains against each platform's default, measured or not, in JSON
    doc = json.loads(render_recommendation(recommend(store, sid), "json"))
    against = {g["against"]: g["cell"] for g in doc["verdicts"][0]["gains"]}
    assert (
        against["Proxmox default (cache=none aio=io_uring bus=virtio-scsi-single iothread=on)"]
        is None
    )
    assert "Nova default (cache=none aio=threads bus=virtio-blk)" in against


@pytest.fixture
def quick_db(tmp_path: Path) -> Path:
    db = tmp_path / "quick.sqlite"
    shutil.copy(QUICK, db)
    return db


def test_a_captured_quick_sweep_for_nova_is_quoted_against_nova_with_the_page_cache_said(
    quick_db: Path,
) -> None:
    """quick holds Nova's default (cache=none aio=threads): the writeback pick's ratios are against
    it, and each is the page cache's on a 128 MiB region, said below them; the screen keeps to 30
    lines at 100 columns."""
    store = Store.open_existing(quick_db)
    try:
        h = headline(recommend(store, 1), "vm", "nova")
        lines = headline_text(h, 100).splitlines()
        assert len(lines) <= 30 and all(len(x) <= 100 for x in lines)
        text = " ".join(" ".join(lines).split())
        assert "baseline: Nova's default, cache=none aio=threads bus=virtio-blk (measured)" in text
        assert "rand-read-4k: 1.93× (1.85–2.01) Nova's default" in text
        assert (
            "page cache on rand-read-4k, rand-write-4k, seq-write-1m: cache=writeback "
            "measured memory, not the "
            "disk (128 MiB working set in RAM)" in text
        )
        [pick] = h.as_dict()["picks"]
        assert all(
            w["vs"]["page_cache"].startswith("cache=writeback measured memory")
            for w in pick["workloads"]
        )
        # Proxmox's default is not in quick (no io_uring): said, and QEMU's default quoted
        lines = headline_text(headline(recommend(store, 1), "vm", "proxmox"), 100).splitlines()
        assert len(lines) <= 30 and all(len(x) <= 100 for x in lines)
        text = " ".join(" ".join(lines).split())
        said = (
            "baseline: Proxmox's default (cache=none aio=io_uring bus=virtio-scsi-single "
            "iothread=on)"
        )
        assert (
            f"{said} was not measured by this sweep" in text
            or f"{said} not measured: ratios are against QEMU's default" in text
        ) and "rand-read-4k: 1.00×: it is QEMU's default" in text, text
    finally:
        store.close()
