"""The leftovers ledger and `clean`: kill -9 of a run, temp paths, and never touching anything else."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.leftovers import clean, forget, register_temp_path
from tests.conftest import root_only

SCRATCH = Path("/tmp/iomx-backing")


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="left-", dir=SCRATCH))
    yield d
    clean(d, mine=True)
    shutil.rmtree(d, ignore_errors=True)


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _rewrite_pids(workdir: Path, pid: int) -> None:
    state = leftovers.state_path(workdir)
    data = json.loads(state.read_text())
    for e in data["entries"]:
        e["pid"], e["pid_start"] = pid, None
    state.write_text(json.dumps(data))


def test_clean_without_ledger_does_nothing(tmp_path: Path) -> None:
    assert clean(tmp_path) == []
    assert list(tmp_path.iterdir()) == []  # not even a .iomatrix directory is created
    assert clean(tmp_path / "missing") == []


def test_temp_path_of_a_dead_run_is_removed(workdir: Path) -> None:
    img = workdir / "run1.qcow2"
    tree = workdir / "tmpdir"
    register_temp_path(workdir, img)
    img.write_bytes(b"qcow")
    register_temp_path(workdir, tree)
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f").write_text("x")
    keep = workdir / "results.json"
    keep.write_text("{}")

    # our own (live) entries are left alone
    lines = clean(workdir)
    assert all(line.startswith("left alone") for line in lines) and len(lines) == 2
    assert img.exists()

    _rewrite_pids(workdir, _dead_pid())
    lines = clean(workdir)
    assert lines == [f"deleted {tree}", f"deleted {img}"]
    assert not img.exists() and not tree.exists() and keep.exists()
    assert clean(workdir) == []


def test_forget_drops_an_entry(workdir: Path) -> None:
    img = workdir / "a.raw"
    register_temp_path(workdir, img)
    img.write_bytes(b"")
    forget(workdir, img)
    assert leftovers.pending(workdir) == []
    _rewrite_pids(workdir, _dead_pid())
    assert clean(workdir) == []
    assert img.exists()  # forgotten: clean never touches it
    forget(workdir, img)  # idempotent


def test_already_gone_entries_are_forgotten(workdir: Path) -> None:
    register_temp_path(workdir, workdir / "never-created")
    _rewrite_pids(workdir, _dead_pid())
    assert clean(workdir) == [f"forgot path {workdir / 'never-created'} (already gone)"]
    assert leftovers.pending(workdir) == []


def test_pid_reuse_is_not_mistaken_for_a_live_run(workdir: Path) -> None:
    register_temp_path(workdir, workdir / "x")
    state = leftovers.state_path(workdir)
    data = json.loads(state.read_text())
    data["entries"][0]["pid_start"] = 1  # same pid (ours), different start time
    state.write_text(json.dumps(data))
    assert clean(workdir) == [f"forgot path {workdir / 'x'} (already gone)"]


@root_only
def test_mount_with_a_different_source_is_left_alone(workdir: Path) -> None:
    mnt = workdir / "mnt"
    mnt.mkdir()
    leftovers.record(workdir, "mount", mnt, source="iomatrix-tmpfs-expected")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "somebody-else", str(mnt)], check=True)
    try:
        _rewrite_pids(workdir, _dead_pid())
        lines = clean(workdir)
        assert len(lines) == 1 and lines[0].startswith("failed:") and "left alone" in lines[0]
        assert any(m["mountpoint"] == str(mnt) for m in leftovers.parse_mountinfo())
        assert len(leftovers.pending(workdir)) == 1
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    forget(workdir, mnt)


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from iomatrix.backing import parse_backing, provision
    spec = parse_backing({"type": "loopfs", "fs": "ext4", "size": "32M"})
    with provision(spec, Path(sys.argv[1]), set()) as h:
        (h.path / "data").write_bytes(b"x" * 4096)
        print(h.path, h.metadata["source"], h.metadata["backing_file"], flush=True)
        time.sleep(300)
""")


@root_only
def test_kill_9_then_clean_removes_mount_loop_and_file(workdir: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(workdir)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, "provisioning subprocess died"
        mnt, loopdev, image = line.split()
        # while the run is alive, clean leaves everything in place
        lines = clean(workdir)
        assert len(lines) == 3 and all(x.startswith("left alone") for x in lines)
        assert any(m["mountpoint"] == mnt for m in leftovers.parse_mountinfo())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # the kill -9 skipped teardown: everything is still there
    assert any(m["mountpoint"] == mnt for m in leftovers.parse_mountinfo())
    assert leftovers.loops_backed_by(image) == [loopdev]

    lines = clean(workdir)
    assert lines[0] == f"unmounted {mnt} ({loopdev})"
    assert f"detached {loopdev} (backing file {image})" in lines
    assert lines[-1].startswith("deleted ") and image.startswith(lines[-1].removeprefix("deleted "))
    assert not any(m["mountpoint"].startswith(str(workdir)) for m in leftovers.parse_mountinfo())
    assert not Path(image).exists() and not Path(mnt).exists()
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert image not in out
    assert leftovers.pending(workdir) == []
    assert clean(workdir) == []


@root_only
def test_loop_recorded_before_losetup_returned_is_still_found(workdir: Path) -> None:
    """A run killed between `losetup` and writing the device name: found via the backing file."""
    image = workdir / "disk.img"
    leftovers.record(workdir, "path", image)
    image.write_bytes(b"\0" * (1 << 20))
    leftovers.record(workdir, "loop", image)  # no device recorded
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                         check=True).stdout.strip()
    _rewrite_pids(workdir, _dead_pid())
    assert clean(workdir) == [f"detached {dev} (backing file {image})", f"deleted {image}"]
    assert leftovers.loops_backed_by(str(image)) == []
