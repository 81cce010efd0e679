"""One screen for any sweep (issue 49): a plan wider than the built-in shared-storage one — iSCSI,
NFS and Ceph RBD backings × rand-read-4k, rand-write-4k and a workload that flushes every 32 writes
(which both shape findings need: librbd's writethrough-until-flush and the LUN's write cache are
each told by a workload that never flushes against one that does) — written through the store as in
tests/test_shared_storage_screen.py. Its answer took 49 lines at 100 columns and 59 at 80; laid out
denser (report/screen.py: DENSER) it fits 30 at both, in `recommend`, at the end of `run` and with
`--target proxmox`/`nova`, and loses nothing: every backing group, finding and risk is still named
on the screen, or the screen points to --detail for it. It has room to spare: laid out for 29 lines
it fits them, at 80 columns too (one line for a warning or a longer host name; it had two before
each workload's line said its status, "not told apart yet", and Proxmox's baseline got a line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.report import screen
from iomatrix.report.headline import Headline, headline
from iomatrix.report.recommend import recommend
from iomatrix.store import Store
from tests.test_shared_storage_screen import _cli, _fits, _run_end, _sweep

GROUPS = ("nfs", "rbd", "iscsi")


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _sweep(tmp_path_factory.mktemp("wide") / "wide.sqlite", wider=True)


def _headline(db: Path, target: str) -> Headline:
    store = Store.open_existing(db)
    try:
        return headline(recommend(store, 1), "lab", target)
    finally:
        store.close()


def _nothing_lost(lines: list[str], h: Headline) -> None:
    """Every backing group, each finding and each risk situation named on the screen (a finding or
    a risk may send the reader to --detail for its figures or statement)."""
    text = " ".join(" ".join(lines).split())
    for group in GROUPS:
        assert any(wg.group == group for p in h.picks for wg in p.gains), group
        assert f" · {group}" in text, (group, text)
    assert len(h.findings) == 2, h.findings
    assert "librbd" in text and "rbd_cache_writethrough_until_flush=off" in text, text
    assert "LUN's write cache" in text and "target power loss" in text, text
    finding_lines = [line for line in lines if line.startswith("finding: ")]
    assert len(finding_lines) == 2, lines
    for situation in {s for p in h.picks for s, _, _ in p.risks}:
        assert situation in text, (situation, text)
    assert "--detail" in text
    # the storage settings the answer makes: ceph.conf's [client] and the LUN's write cache
    assert "rbd cache writethrough until flush = false" in text, text
    assert "write cache off" in text or "lun_write_cache=off" in text, text


@pytest.mark.parametrize("columns", [100, 80])
def test_a_wide_sweeps_answer_fits_one_screen(wide: Path, columns: int) -> None:
    """`recommend` and the end of `run` on three backings, three workloads and both findings: at
    most 30 lines at 100 and at 80 columns, no line wider, no number split, and nothing lost."""
    h = _headline(wide, "qemu")
    for lines in (_cli(wide, columns), _run_end(wide, columns)):
        _fits(lines, columns)
        _nothing_lost(lines, h)
        # one decision per configuration: the ceph one is said once, however its workloads ended
        assert (
            sum(line.endswith("· rbd · rbd_cache_writethrough_until_flush=off") for line in lines)
            <= 1
        )


@pytest.mark.parametrize("target", ["proxmox", "nova"])
@pytest.mark.parametrize("columns", [100, 80])
def test_a_wide_sweeps_platform_forms_fit_one_screen(wide: Path, target: str, columns: int) -> None:
    """`--target proxmox` and `--target nova` on the same sweep: the same one screen."""
    h = _headline(wide, target)
    for lines in (_run_end(wide, columns, target), _cli(wide, columns, "--target", target)):
        _fits(lines, columns)
        _nothing_lost(lines, h)


@pytest.mark.parametrize("target", ["proxmox", "nova", "qemu", "libvirt"])
def test_a_wide_sweeps_answer_has_two_lines_to_spare(
    wide: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same answer laid out for a 29-line screen fits it at 100 and at 80 columns and loses
    nothing (at 80 columns the platform forms took 30 lines however dense, no room for a warning:
    the most crowded screen now names a configuration not separated yet "Use for now: …", which
    keeps its long name on one line)."""
    monkeypatch.setattr(screen, "FIRST_SCREEN_LINES", 29)
    h = _headline(wide, target)
    for columns in (100, 80):
        lines = _run_end(wide, columns, target)
        assert len(lines) <= 29, "\n".join(lines)
        _fits(lines, columns)
        _nothing_lost(lines, h)
        # one configuration per backing group, each headed as settled or as the tie-break's pick
        # for now (a workload still provisional on a configuration another workload settled joins
        # it, its own line saying it is not told apart yet)
        assert sum(line.startswith(("Use:", "Use for now")) for line in lines) == 3, lines
        assert any("not told apart yet" in line for line in lines), lines
