"""Snippets whole or absent, and risks true for the snippet shown (issue 70), on the captured
sweeps at 80, 100 and 160 columns and with every --target:

* no "…" on the first screen or in any snippet: a snippet that does not fit is said as what it sets
  and where it is whole (--detail), never cut;
* ceph.conf's settings as a [client] section, one per line;
* a "not available" target says why and what to use instead;
* without --current, a new disk's Proxmox drive sets only what the sweep measured;
* Proxmox's NFS storage is a kernel mount: its snippet's risk lines are the kernel client's."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from iomatrix.report.headline import Headline, all_targets, headline
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend import recommend
from iomatrix.report.recommend.risks import KERNEL_MOUNT_BASIS, risk_statements, target_risks
from iomatrix.report.screen import headline_text
from iomatrix.snippets import DiskConfig, snippets_for
from iomatrix.store import Store
from tests.conftest import DATA

CAPTURED = {
    "quick-sweep": DATA / "golden" / "quick-sweep.sqlite",
    "quickstart-roles": DATA / "quickstart-roles" / "sweep.sqlite",
    "ceph-custom-jobs": DATA / "answers" / "ceph-custom-jobs.sqlite",
    "ceph-flush-trap": DATA / "answers" / "ceph-flush-trap.sqlite",
    "iscsi-lun-cache-jobs": DATA / "answers" / "iscsi-lun-cache-jobs.sqlite",
    "unsafe-fastest": DATA / "answers" / "unsafe-fastest.sqlite",
}
WIDTHS = (80, 100, 160)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Headline]]:
    """Each captured sweep's headline for every --target (recommended once per sweep)."""
    out: dict[tuple[str, str], Headline] = {}
    for name, path in CAPTURED.items():
        copy = tmp_path_factory.mktemp(name) / path.name
        shutil.copy(path, copy)  # a report may migrate the file: never the stored one
        store = Store.open_existing(copy)
        try:
            rec = recommend(store, store.sweep_ids()[-1])
        finally:
            store.close()
        for target in all_targets():
            out[name, target] = headline(rec, "lab", target)
    yield out


def _snippet_texts(h: Headline) -> list[str]:
    return [
        s.text
        for p in h.picks
        for s in (p.snippet, p.storage, p.data_step, p.longer)
        if s is not None and s.text is not None
    ]


def test_no_ellipsis_in_any_snippet_or_on_any_first_screen(
    answers: dict[tuple[str, str], Headline],
) -> None:
    for (name, target), h in answers.items():
        assert not [t for t in _snippet_texts(h) if "…" in t], (name, target)
        for width in WIDTHS:
            for fit in (True, False):  # the first screen, and --detail's whole answer
                cut = [
                    line for line in headline_text(h, width, fit=fit).splitlines() if "…" in line
                ]
                assert cut == [], (name, target, width, fit, cut)


def test_ceph_conf_is_a_client_section_one_setting_per_line(
    answers: dict[tuple[str, str], Headline],
) -> None:
    seen = 0
    for name in ("ceph-custom-jobs", "ceph-flush-trap"):
        for width in WIDTHS:
            lines = headline_text(answers[name, "libvirt"], width).splitlines()
            settings = [line for line in lines if line.strip().startswith("rbd_")]
            assert not [line for line in settings if ", rbd_" in line], (name, width, lines)
            if settings:
                seen += 1
                assert "[client]" in [line.strip() for line in lines], (name, width)
    assert seen, "no captured ceph answer sets a [client] option"


def test_a_target_without_a_snippet_says_why_and_what_to_use_instead(
    answers: dict[tuple[str, str], Headline],
) -> None:
    absent = [
        (name, target, p.snippet.note)
        for (name, target), h in answers.items()
        for p in h.picks
        if p.snippet is not None
        and p.snippet.text is None
        and p.snippet.note.startswith("not available")
    ]
    for name, target, note in absent:
        assert "instead, the measured disk: --target" in note, (name, target, note)
        screen = headline_text(answers[name, target], 100)
        assert "no snippet: not available" not in screen and "instead" in screen, screen


def test_a_new_disk_s_proxmox_drive_sets_only_what_the_sweep_measured(
    answers: dict[tuple[str, str], Headline],
) -> None:
    # the quick plan varies format and cache only (aio=threads and bus=virtio-blk in every cell)
    [text] = {p.snippet.text for p in answers["quick-sweep", "proxmox"].picks if p.snippet}
    assert text is not None and "--scsi0 STORAGE:32," in text, text
    assert "virtio0" not in text and "aio=" not in text and "detect_zeroes" not in text, text
    assert "cache=" in text and "format=" in text, text
    [note] = {p.snippet.note for p in answers["quick-sweep", "proxmox"].picks if p.snippet}
    assert "left at Proxmox's defaults: aio, bus" in note, note
    # a sweep that measured the bus and aio sets them, as before
    cfg = DiskConfig("raw", "off", "none", "native", "virtio-blk")
    measured = {s.tool: s for s in snippets_for(cfg, varied={"bus", "aio", "cache"}).snippets}
    line = measured["proxmox"].text or ""
    assert "--virtio0 STORAGE:32,cache=none,aio=native" in line.replace("\\\n", ""), line
    assert "format=" not in line, line  # not varied: the storage's default format


def _nfs_cell(client: str) -> CellWorkload:
    axes = {"format": "qcow2", "cache": "writeback", "aio": "threads", "nfs_client": client}
    return CellWorkload(1, "k", axes, {"backing_type": "nfs"}, "database:log", ["kvm"])


def test_proxmox_s_nfs_risks_are_the_kernel_mount_s() -> None:
    libnfs = risk_statements("writeback", cell=_nfs_cell("libnfs"))
    assert "this host holds nothing" in " ".join(r.text for r in libnfs)
    [proxmox] = target_risks(_nfs_cell("libnfs")).values()
    said = {r.situation: r.text for r in proxmox}
    assert all(r.basis == KERNEL_MOUNT_BASIS for r in proxmox)
    assert "this host holds nothing" not in " ".join(said.values())
    assert "page cache" in said["live migration"] and "unsafe" in said["live migration"]
    assert said == {
        r.situation: r.text for r in risk_statements("writeback", cell=_nfs_cell("kernel"))
    }
    # measured through the kernel's mount already: every target's risks are the measured ones
    assert target_risks(_nfs_cell("kernel")) == {}
