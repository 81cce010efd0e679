"""The storage's own snippets in the answer (issue 49, "snippets set everything the answer
recommends"): the ceph.conf [client] section, the target's LUN write cache, beside the VM tool's
snippet on the first screen (whole where the screen has room, else one line carrying the settings),
every one in --detail whatever the VM tool, and `--target` taking the storage's tools. Read from
real sweeps' databases (tests/data/answers)."""

from __future__ import annotations

import os
import shutil
import subprocess
from html import unescape
from pathlib import Path

from tests.conftest import DATA, iomatrix_argv

CEPH = DATA / "answers" / "ceph-flush-trap.sqlite"


def _recommend(
    db: Path, tmp_path: Path, *args: str, columns: int = 100
) -> subprocess.CompletedProcess[str]:
    copy = tmp_path / db.name
    if not copy.exists():
        shutil.copy(db, copy)
    return subprocess.run(
        [*iomatrix_argv(), "recommend", "--db", str(copy), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def _joined(text: str) -> str:
    return " ".join(text.split())


def test_the_ceph_answer_sets_librbd_writethrough_until_flush_on_its_first_screen(
    tmp_path: Path,
) -> None:
    # The leader runs with rbd_cache_writethrough_until_flush=off: its first screen says the
    # ceph.conf line that sets it, beside the libvirt XML (issue 49: no snippet set it)
    res = _recommend(CEPH, tmp_path)
    assert res.returncode == 0, res.stderr
    leader = res.stdout.split("Use for now")[0]
    assert "rbd cache writethrough until flush = false" in _joined(leader)
    assert "ceph.conf [client]" in leader
    assert all(len(line) <= 100 for line in res.stdout.splitlines())


def test_the_ceph_detail_shows_every_storage_snippet_with_the_vm_tools(tmp_path: Path) -> None:
    for target in ("libvirt", "proxmox"):
        res = _recommend(CEPH, tmp_path, "--detail", "--target", target)
        assert res.returncode == 0, res.stderr
        text = res.stdout
        assert "# ceph.conf [client]" in text and "[client]\nrbd cache = true\n" in text
        assert (
            "rbd config image set --id libvirt rbd/vm-disk rbd_cache_writethrough_until_flush false"
            in text
        )
        assert "# rbd create" in text


def test_target_ceph_shows_the_client_section_as_the_answers_snippet(tmp_path: Path) -> None:
    res = _recommend(CEPH, tmp_path, "--target", "ceph")
    assert res.returncode == 0, res.stderr
    leader = res.stdout.split("Use for now")[0]
    assert "  ceph: ceph.conf [client]" in leader
    assert "    [client]\n    rbd cache = true\n" in leader
    assert "    rbd cache writethrough until flush = false" in leader
    assert "<disk" not in res.stdout  # the VM tool's snippet is another target's


def test_an_unknown_target_names_the_storage_tools_too(tmp_path: Path) -> None:
    res = _recommend(CEPH, tmp_path, "--target", "cephx")
    assert res.returncode == 2 and "unknown target 'cephx'" in res.stderr
    assert "ceph" in res.stderr.split("use", 1)[1] and "Traceback" not in res.stderr


ISCSI = DATA / "answers" / "iscsi-lun-cache-jobs.sqlite"


def test_the_iscsi_answer_says_the_luns_write_cache_for_every_target(tmp_path: Path) -> None:
    # One LUN, one write-cache setting (issue 49): the workload that tied off with on is answered
    # with on
    res = _recommend(ISCSI, tmp_path)
    assert res.returncode == 0, res.stderr
    [answer] = res.stdout.split("\nUse: ")[1:]
    # the LUN's settings in one line, or targets.conf whole where the screen has room
    assert (
        "LUN: fileio, write cache on (tgt write-cache on; LIO emulate_write_cache=1)" in answer
        or ("bs-type rdwr" in answer and "write-cache on" in answer)
    ), answer
    assert "write cache off" not in answer and "write-cache off" not in answer
    detail = _recommend(ISCSI, tmp_path, "--detail").stdout
    for title in ("# tgt targets.conf", "# tgtadm", "# LIO targetcli", "# a SAN array's LUN"):
        assert title in detail, title
    assert (
        "set attribute emulate_write_cache=1" in detail
        and "set the LUN's write cache on in the array's" in _joined(detail)
    )


def test_target_tgt_puts_the_targets_conf_on_the_first_screen(tmp_path: Path) -> None:
    res = _recommend(ISCSI, tmp_path, "--target", "tgt")
    assert res.returncode == 0, res.stderr
    assert "  tgt: tgt targets.conf" in res.stdout and "        write-cache on" in res.stdout
    assert "<disk" not in res.stdout
    lio = _recommend(ISCSI, tmp_path, "--target", "targetcli", "--detail").stdout
    assert (
        "targetcli /backstores/fileio create" in lio
        and "<disk" not in lio.split("Recommendation ·")[1]
    )


def test_the_luns_type_and_write_cache_are_said_in_the_platform_form_and_the_html_report(
    tmp_path: Path,
) -> None:
    """Issue 49: nowhere (`recommend`, `--detail`, `--target proxmox`, the HTML report) did the
    iSCSI answer explain the LUN type or the LUN write cache, or say how to set them on a target.
    `--target proxmox` carries the LUN's settings beside the qm line; the HTML report holds tgt's
    targets.conf, LIO's targetcli line and the SAN sentence."""
    res = _recommend(ISCSI, tmp_path, "--target", "proxmox")
    assert res.returncode == 0, res.stderr
    text = _joined(res.stdout)
    assert "qm set VMID" in text
    assert "(the iSCSI target's LUN: type and write cache)" in text or "LUN: fileio" in text, text
    assert "bs-type rdwr" in text or "LUN: fileio" in text
    assert "write-cache on" in text and "write-cache off" not in text
    html = tmp_path / "report.html"
    proc = subprocess.run(
        [*iomatrix_argv(), "report", "--db", str(tmp_path / ISCSI.name), "--html", str(html)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert proc.returncode == 0, proc.stderr
    page = _joined(unescape(html.read_text()))
    for said in (
        "tgt targets.conf",
        "bs-type rdwr",
        "write-cache on",
        "set attribute emulate_write_cache=1",
        "set the LUN's write cache on in the array's",
    ):
        assert said in page, said
