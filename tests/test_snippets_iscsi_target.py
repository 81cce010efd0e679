"""The iSCSI target's LUN as measured, for every target (issue 49): tgt's tgtadm lines, which are
the very commands the real tgt-admin runs for the targets.conf snippet and which a real tgtd started
here accepts; LIO's targetcli lines, checked against targetcli-fb's own command signatures; and the
sentence for a SAN array."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iomatrix.backing.iscsi import (
    free_control_port,
    tgtadm,
    tgtd_socket_files,
    tgtd_target_ids,
)
from iomatrix.protocols.iscsi import read_write_cache
from iomatrix.protocols.place import NetworkPlace
from iomatrix.snippets import SNIPPET_WIDTH, DiskConfig, Snippet, snippets_for
from iomatrix.vmconfig.read_iscsi import TGT_WRITE_CACHE_OFF
from tests.conftest import needs

CELL = {
    "tier": "blocklayer",
    "format": "raw",
    "preallocation": "off",
    "cache": "none",
    "aio": "threads",
    "bus": "virtio-blk",
    "modifier": "none",
}
PLACE = NetworkPlace()
LUNS = [(t, c) for t in ("fileio", "blockio") for c in ("on", "off")] + [("null", "off")]


def _snippets(lun_type: str, cache: str) -> list[Snippet]:
    cfg = DiskConfig.from_axes({**CELL, "lun_type": lun_type, "lun_write_cache": cache}, "iscsi")
    return snippets_for(cfg).snippets


def _one(lun_type: str, cache: str, title: str) -> Snippet:
    return next(s for s in _snippets(lun_type, cache) if s.title.startswith(title))


def _commands(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in text.replace("\\\n", "").splitlines() if line.strip()]


# tgtadm's short options as tgt-admin writes them, and its long ones as the snippet does
TGTADM_SHORT = {
    "-T": "--targetname",
    "-b": "--backing-store",
    "-I": "--initiator-address",
    "-C": "--control-port",
}


def _tgtadm_options(argv: list[str]) -> dict[str, str]:
    """One tgtadm command's options, long names, values joined ('--lun=1', '-b PATH' and '--lun 1'
    alike)."""
    out, words = {}, iter(argv[1:])
    for word in words:
        key, _, value = word.partition("=")
        out[TGTADM_SHORT.get(key, key)] = value or next(words)
    out.pop("--control-port", None)
    return out


@pytest.mark.parametrize(("lun_type", "cache"), LUNS)
def test_every_target_gets_the_luns_type_and_write_cache(lun_type: str, cache: str) -> None:
    tgtadm = _one(lun_type, cache, "tgtadm").text or ""
    assert (f"--params={TGT_WRITE_CACHE_OFF}" in tgtadm.replace("\\\n", "")) == (cache == "off")
    assert ("--bsoflags=direct" in tgtadm) == (lun_type == "blockio")
    lio = _one(lun_type, cache, "LIO targetcli")
    text = (lio.text or "").replace("\\\n", "")
    backstore = {
        "fileio": "/backstores/fileio",
        "blockio": "/backstores/block",
        "null": "/backstores/ramdisk",
    }
    assert f"targetcli {backstore[lun_type]} create name=vm-disk" in text
    # LIO reports a block device's own cache: set on the device, said in the note
    if lun_type == "blockio":
        assert "emulate_write_cache" not in text and f"hdparm -W {int(cache == 'on')}" in lio.note
    else:
        assert f"set attribute emulate_write_cache={int(cache == 'on')}" in text
    if lun_type == "fileio":
        assert f"write_back={'true' if cache == 'on' else 'false'}" in text
    san = _one(lun_type, cache, "a SAN array")
    assert (
        san.text is None
        and f"set the LUN's write cache {cache} in the array's management tool" in san.note
    )
    assert f"iomatrix measured a tgt LUN ({lun_type}) with its write cache {cache}" in san.note
    for s in (_one(lun_type, cache, "tgtadm"), lio):
        assert all(len(line) <= SNIPPET_WIDTH for line in (s.text or "").splitlines())


def test_the_tgt_snippet_sums_the_lun_in_one_line() -> None:
    tgt = next(s for s in _snippets("blockio", "off") if s.tool == "tgt")
    assert (
        tgt.summary
        == "LUN: blockio, write cache off (tgt write-cache off; LIO the device's cache off)"
    )
    fileio = next(s for s in _snippets("fileio", "on") if s.tool == "tgt")
    assert (
        fileio.summary
        == "LUN: fileio, write cache on (tgt write-cache on; LIO emulate_write_cache=1)"
    )


@needs("tgt-admin")
@pytest.mark.parametrize(("lun_type", "cache"), LUNS)
def test_the_tgtadm_lines_are_what_tgt_admin_runs_for_the_targets_conf(
    lun_type: str, cache: str, tmp_path: Path
) -> None:
    # tgt-admin --pretend prints the tgtadm commands it would run for a file (no tgtd needed): the
    # snippet's lines are those, option for option (tgt-admin skips a backing store that does not
    # exist: one is made)
    lun = tmp_path / "lun.img"
    lun.write_bytes(b"\0" * (1 << 20))
    conf = tmp_path / "targets.conf"
    conf.write_text(
        (next(s for s in _snippets(lun_type, cache) if s.tool == "tgt").text or "").replace(
            PLACE.lun_file, str(lun)
        )
    )
    res = subprocess.run(
        ["tgt-admin", "-c", str(conf), "--execute", "--pretend"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    theirs = [_tgtadm_options(c) for c in _commands(res.stdout) if c and c[0] == "tgtadm"]
    ours = [
        _tgtadm_options(c)
        for c in _commands(
            (_one(lun_type, cache, "tgtadm").text or "").replace(PLACE.lun_file, str(lun))
        )
    ]
    assert ours == theirs, res.stdout


def _targetcli_python() -> str | None:
    """targetcli-fb's own interpreter (its script's #! line), where targetcli-fb is installed."""
    exe = shutil.which("targetcli")
    if exe is None:
        return None
    first = Path(exe).read_text(errors="replace").splitlines()[0]
    return first[2:].strip().split()[0] if first.startswith("#!") else None


CHECK_LINES = Path(__file__).parent / "data" / "targetcli" / "check_lines.py"


def _targetcli_check(text: str) -> subprocess.CompletedProcess[str]:
    python = _targetcli_python()
    assert python is not None
    return subprocess.run(
        [python, str(CHECK_LINES)], input=text, capture_output=True, text=True, timeout=120
    )


@needs("targetcli")
@pytest.mark.parametrize(("lun_type", "cache"), LUNS)
def test_targetcli_fb_takes_every_targetcli_line(lun_type: str, cache: str) -> None:
    # each line bound to the signature of the targetcli-fb method that runs it, in targetcli's own
    # interpreter (its create parameters, the storage object's attributes): no LIO target is needed
    text = _one(lun_type, cache, "LIO targetcli").text or ""
    res = _targetcli_check(text)
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(res.stdout.splitlines()) == len(_commands(text))
    # every line within 76 columns (continued with ' \\' where longer): indented by 4 in an answer,
    # within 80
    assert max(len(line) for line in text.splitlines()) <= 76, text


@needs("targetcli")
def test_the_targetcli_check_refuses_what_targetcli_would() -> None:
    # the check above can fail: a parameter targetcli's create does not take, an attribute no
    # storage object has
    bad = (
        "targetcli /backstores/fileio create name=d file_or_dev=/f writeback=false\n"
        "targetcli /backstores/fileio/d set attribute emulate_write_cache_x=0\n"
    )
    res = _targetcli_check(bad)
    assert res.returncode == 1 and res.stdout.count("bad ") == 2, res.stdout + res.stderr


@pytest.mark.slow
@needs("tgtd")
@needs("tgtadm")
@pytest.mark.parametrize("cache", ["off", "on"])
def test_a_real_tgtd_takes_the_tgtadm_lines_and_the_lun_reads_back_as_measured(
    cache: str, tmp_path: Path
) -> None:
    # a tgtd started here on its own portal and control port runs the snippet's tgtadm lines; the
    # LUN then shows its backing store and flags, and an initiator's MODE SENSE reads its write
    # cache back as the snippet set it
    port, control = _free_port(), str(free_control_port())
    lun = tmp_path / "lun.img"
    lun.write_bytes(b"\0" * (16 << 20))
    tgtd = subprocess.Popen(
        ["tgtd", "-f", "--iscsi", f"portal=127.0.0.1:{port}", "-C", control],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    show = ["tgtadm", "-C", control, "--lld", "iscsi", "--op", "show", "--mode", "target"]
    try:
        _wait_for(
            lambda: subprocess.run(show, capture_output=True, timeout=30).returncode == 0, "tgtd"
        )
        text = (_one("blockio", cache, "tgtadm").text or "").replace(PLACE.lun_file, str(lun))
        for argv in _commands(text):
            res = subprocess.run(
                [argv[0], "-C", control, *argv[1:]], capture_output=True, text=True, timeout=60
            )
            assert res.returncode == 0, (argv, res.stdout + res.stderr)
        shown = subprocess.run(show, capture_output=True, text=True, timeout=30).stdout
        assert f"Backing store path: {lun}" in shown and "Backing store flags: direct" in shown, (
            shown
        )
        assert "ALL" in shown  # the initiators let in
        assert read_write_cache("127.0.0.1", port, PLACE.iqn, PLACE.lun) == (cache == "on")
    finally:
        # tgtd refuses to exit while it has targets (it then sat out the 30 s wait below and was
        # killed): they are deleted first, as the lab's own stop does
        for tid in tgtd_target_ids(int(control)):
            tgtadm(int(control), "--mode", "target", "--op", "delete", "--force", "--tid", str(tid))
        tgtadm(int(control), "--mode", "system", "--op", "delete")
        try:
            tgtd.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tgtd.kill()
            tgtd.wait(timeout=30)
        # tgtd leaves its socket and lock behind: this test's, removed
        for f in tgtd_socket_files(int(control)):
            f.unlink(missing_ok=True)
    assert not any(f.exists() for f in tgtd_socket_files(int(control)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(check: Callable[[], bool], what: str, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not ready after {bound_s:.0f} s")
        time.sleep(0.1)
