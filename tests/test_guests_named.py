"""Every answer names the guest its guest figures came from (issue 51): a real image by file and
digest, the built-in initramfs guest by kernel and fio, in `recommend` (terminal, JSON) and the HTML
report.

The databases are real SQLite stores written through the store's API with the metadata the guest
tiers record (tiers/real_guest.py, tiers/guest.py); the end-to-end check on a booted Debian image is
in tests/test_real_guest.py."""

from __future__ import annotations

import json
from pathlib import Path

from iomatrix.report.guests import BUILT_IN, REAL_IMAGE, guests_used
from iomatrix.store import RunRecord, Store
from tests.conftest import run_cli

DIGEST = "3f2a9b0c1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e"
IMAGE = "/var/lib/libvirt/images/debian-12-genericcloud-amd64.qcow2"
KERNEL = "6.1.0-28-cloud-amd64"
BACKING = {"backing_type": "dir", "backing_label": "dir"}


def _image_meta(read_from_guest: bool) -> dict[str, object]:
    """What tiers/real_guest.py records for a user's image: its distribution and kernel are read
    from the guest during the first run, so that run's start record has them empty."""
    return {
        "image": IMAGE,
        "image_format": "qcow2",
        "image_sha256": DIGEST,
        "image_source": IMAGE,
        "distribution": "Debian 12.8" if read_from_guest else "",
        "kernel_version": KERNEL if read_from_guest else "",
        "boot": "firmware and the image's boot loader",
    }


BUILT_IN_META = {
    "kernel": "/cache/guest/builds/k/vmlinux",
    "kernel_version": "6.1.0-56-cloud-amd64",
    "fio_version": "fio-3.33",
    "cache_key": "6.1.0-56-cloud-amd64_fio3.33_abc",
}


def _sweep(tmp_path: Path, built_in_too: bool, ext4_cache: str | None = None) -> tuple[Store, int]:
    """A finished guest sweep: cache none and writeback, 4 rounds, in the user's image (and in the
    built-in guest when `built_in_too`), plus a block-layer cell that boots no guest. The image's
    runs of cache `ext4_cache` ran on an ext4 in the guest (`[guest] filesystem`)."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2, "mem_bytes": 4 << 30}),
        "p",
        "fp",
        "{}",
        [],
        [],
    )
    kinds = [("guest", {"guest_image": None}), ("blocklayer", {})]
    if built_in_too:
        kinds.append(("guest-builtin", {"guest_artifacts": BUILT_IN_META}))
    for tier, meta in kinds:
        for cache in ("none", "writeback"):
            axes = {
                "tier": "blocklayer" if tier == "blocklayer" else "guest",
                "format": "raw" if tier == "guest-builtin" else "qcow2",
                "preallocation": "off",
                "cache": cache,
                "aio": "threads",
                "bus": "-" if tier == "blocklayer" else "virtio-blk",
                "backing": "dir",
                "modifier": "none",
            }
            cid = store.cell_id(sid, f"{tier}/{cache}", axes, BACKING)
            for rnd in range(4):
                run_meta = {
                    k: (v if v is not None else _image_meta(rnd > 0)) for k, v in meta.items()
                }
                if tier == "guest" and cache == ext4_cache:
                    run_meta["guest_filesystem"] = {"type": "ext4", "device": "/dev/vdb"}
                value = (900.0 if cache == "none" else 1000.0) * (1 + 0.01 * (rnd % 3 - 1))
                store.record_run(
                    RunRecord(
                        cell_id=cid,
                        workload="rand-read-4k",
                        status="ok",
                        started_at=rnd,
                        finished_at=rnd + 1,
                        accel="tcg" if tier != "blocklayer" else "none",
                        cache_state="dropped",
                        page_cache_method="-",
                        metrics={"read.iops": value},
                        phases={},
                        meta=run_meta,
                        round=rnd + 1,
                        round_position=0,
                    )
                )
    store.set_sweep_status(sid, "finished")
    return store, sid


def test_a_user_image_is_one_guest_with_its_digest_and_the_facts_read_from_it(
    tmp_path: Path,
) -> None:
    store, sid = _sweep(tmp_path, built_in_too=True)
    guests = guests_used(store, sid)
    assert [g.kind for g in guests] == [REAL_IMAGE, BUILT_IN]
    real, built_in = guests
    # the first run's record (before the guest was read) joins the others: one image, one line
    assert (real.runs, real.digest, real.distribution, real.kernel) == (
        8,
        DIGEST,
        "Debian 12.8",
        KERNEL,
    )
    assert real.line() == (
        f"real image debian-12-genericcloud-amd64.qcow2 (Debian 12.8, kernel {KERNEL}, "
        f"sha256 {DIGEST[:16]}…), 8 runs"
    )
    assert built_in.runs == 8 and "kernel 6.1.0-56-cloud-amd64, fio-3.33" in built_in.line()


def test_runs_on_a_guest_filesystem_are_named_apart_from_the_raw_disks(tmp_path: Path) -> None:
    store, sid = _sweep(tmp_path, built_in_too=False, ext4_cache="writeback")
    raw, ext4 = guests_used(store, sid)
    assert (raw.filesystem, ext4.filesystem, raw.runs, ext4.runs) == ("", "ext4", 4, 4)
    assert ext4.line() == (
        f"real image debian-12-genericcloud-amd64.qcow2 (Debian 12.8, kernel {KERNEL}, "
        f"sha256 {DIGEST[:16]}…, fio on ext4 in the guest), 4 runs"
    )
    assert ext4.as_dict()["filesystem"] == "ext4" and "filesystem" not in raw.as_dict()


def test_a_sweep_without_guests_names_none(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(store.host_id({"hostname": "h"}), "p", "fp", "{}", [], [])
    assert guests_used(store, sid) == []


def test_recommend_rank_results_and_the_report_name_the_image_and_its_digest(
    tmp_path: Path,
) -> None:
    _sweep(tmp_path, built_in_too=False)
    text = run_cli("recommend", "--db", "r.sqlite", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    named = [line for line in text.stdout.splitlines() if line.startswith("guest: ")]
    assert named == [
        f"guest: real image debian-12-genericcloud-amd64.qcow2 (Debian 12.8, kernel {KERNEL}, "
        f"sha256 {DIGEST[:16]}…), 8 runs"
    ], text.stdout
    for command in ("rank", "results"):
        shown = run_cli(command, "--db", "r.sqlite", cwd=tmp_path)
        assert named[0] in shown.stdout.splitlines(), (command, shown.stdout, shown.stderr)
    results = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    assert [g["sha256"] for g in results["sweeps"][0]["guests"]] == [DIGEST]
    doc = json.loads(
        run_cli("recommend", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    assert [(g["kind"], g["image"], g["sha256"], g["runs"]) for g in doc["guests"]] == [
        (REAL_IMAGE, IMAGE, DIGEST, 8)
    ]
    assert doc["headline"]["guests"] == [named[0].removeprefix("guest: ")]
    html = run_cli("report", "--db", "r.sqlite", "--html", "r.html", cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "r.html").read_text()
    assert (
        "real image debian-12-genericcloud-amd64.qcow2" in page and f"<code>{DIGEST}</code>" in page
    )
