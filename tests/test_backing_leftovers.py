"""The leftovers ledger and `clean`: kill -9 of a run, temp paths, and never touching anything
else."""

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
from iomatrix.backing.leftover_kinds import loops_backed_by
from iomatrix.backing.leftovers import clean, forget, register_temp_path
from iomatrix.mountinfo import parse_mountinfo
from tests.conftest import iomatrix_argv, root_only, run_cli

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
    """Pretend a dead process wrote the entries (re-signed with the workdir's key, as iomatrix
    would)."""

    def dead(e: leftovers.Entry) -> None:
        e.pid, e.pid_start = pid, None

    leftovers._edit(workdir, dead)


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

    def other_start(e: leftovers.Entry) -> None:
        e.pid_start = 1  # same pid (ours), different start time

    leftovers._edit(workdir, other_start)
    assert clean(workdir) == [f"forgot path {workdir / 'x'} (already gone)"]


@root_only
def test_mount_with_a_different_source_is_left_alone(workdir: Path) -> None:
    mnt = workdir / "mnt"
    mnt.mkdir()
    leftovers.record(workdir, "mount", mnt, source="iomatrix-tmpfs-0badc0de")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "somebody-else", str(mnt)], check=True)
    try:
        _rewrite_pids(workdir, _dead_pid())
        lines = clean(workdir)
        assert len(lines) == 1 and lines[0].startswith("failed:") and "left alone" in lines[0]
        assert any(m["mountpoint"] == str(mnt) for m in parse_mountinfo())
        assert len(leftovers.pending(workdir)) == 1
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    forget(workdir, mnt)


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from iomatrix.backing.provision import provision
    from iomatrix.backing.spec import parse_backing
    spec = parse_backing({"type": "loopfs", "fs": "ext4", "size": "32M"})
    with provision(spec, Path(sys.argv[1]), set()) as h:
        (h.path / "data").write_bytes(b"x" * 4096)
        print(h.path, h.metadata["source"], h.metadata["backing_file"], flush=True)
        time.sleep(300)
""")


@root_only
def test_kill_9_then_clean_removes_mount_loop_and_file(workdir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(workdir)], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, "provisioning subprocess died"
        mnt, loopdev, image = line.split()
        # while the run is alive, clean leaves everything in place
        lines = clean(workdir)
        assert len(lines) == 3 and all(x.startswith("left alone") for x in lines)
        assert any(m["mountpoint"] == mnt for m in parse_mountinfo())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # the kill -9 skipped teardown: everything is still there
    assert any(m["mountpoint"] == mnt for m in parse_mountinfo())
    assert loops_backed_by(image) == [loopdev]

    lines = clean(workdir)
    assert lines[0] == f"unmounted {mnt} ({loopdev})"
    assert f"detached {loopdev} (backing file {image})" in lines
    assert lines[-1].startswith("deleted ") and image.startswith(lines[-1].removeprefix("deleted "))
    assert not any(m["mountpoint"].startswith(str(workdir)) for m in parse_mountinfo())
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
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True
    ).stdout.strip()
    _rewrite_pids(workdir, _dead_pid())
    assert clean(workdir) == [f"detached {dev} (backing file {image})", f"deleted {image}"]
    assert loops_backed_by(str(image)) == []


# ---------------------------------------------------------------------------------------------
# the ledger is verified, not trusted (issue #14)
# ---------------------------------------------------------------------------------------------


def _forge(workdir: Path, **entry: object) -> None:
    """Append an entry the way a hostile or careless hand would: plain JSON, no valid signature."""
    state = leftovers.state_path(workdir)
    state.parent.mkdir(exist_ok=True)
    data = json.loads(state.read_text()) if state.exists() else {"version": 2, "entries": []}
    data["entries"].append(
        {"id": "f0", "pid": _dead_pid(), "pid_start": None, "created": 0.0, "info": {}, **entry}
    )
    state.write_text(json.dumps(data))


def test_forged_entry_outside_the_workdir_is_refused_listed_and_kept(
    workdir: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    register_temp_path(workdir, workdir / "ours")  # creates the key and a genuine entry
    (workdir / "ours").write_text("x")
    _rewrite_pids(workdir, _dead_pid())
    _forge(workdir, kind="path", target=str(victim))
    _forge(workdir, kind="path", target=str(workdir / "forged-inside"), mac="00" * 32)
    lines = clean(workdir)
    assert victim.read_text() == "keep me"
    assert f"deleted {workdir / 'ours'}" in lines
    refused = [line for line in lines if line.startswith("refused:")]
    assert len(refused) == 2 and all("signature does not verify" in line for line in refused)
    assert sorted(e.target for e in leftovers.pending(workdir)) == sorted(
        [str(victim), str(workdir / "forged-inside")]
    )


def test_signed_entry_outside_the_workdir_is_still_refused(workdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    leftovers.record(workdir, "path", outside)
    leftovers.record(workdir, "path", workdir / "link" / "x")  # a symlinked way out
    (workdir / "link").symlink_to(tmp_path)
    (tmp_path / "x").write_text("keep")
    leftovers.record(workdir, "lv", "vg0/root")
    _rewrite_pids(workdir, _dead_pid())
    lines = clean(workdir)
    assert outside.is_dir() and (tmp_path / "x").read_text() == "keep"
    assert len([line for line in lines if line.startswith("refused:")]) == 3, lines
    assert any("not a name iomatrix gives" in line for line in lines)


def test_a_ledger_copied_from_another_workdir_is_not_trusted(workdir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    register_temp_path(other, other / "thing")
    (other / "thing").write_text("x")
    _rewrite_pids(other, _dead_pid())
    shutil.copytree(other / ".iomatrix", workdir / ".iomatrix", dirs_exist_ok=True)
    (workdir / "thing").write_text("y")
    lines = clean(workdir)
    assert (other / "thing").exists() and lines and lines[0].startswith("refused:")


def test_untrustworthy_key_and_malformed_ledgers_are_one_line_errors(workdir: Path) -> None:
    register_temp_path(workdir, workdir / "x")
    key = workdir / ".iomatrix" / "ledger.key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32
    key.chmod(0o644)
    with pytest.raises(leftovers.LedgerError, match="mode 0600"):
        clean(workdir)
    key.chmod(0o600)
    state = leftovers.state_path(workdir)
    for bad in (
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"entries": {}}',
        b'{"entries": [1]}',
        b'{"entries": [{"id": "a", "kind": "rm -rf", "target": "/", "pid": 1, "pid_start": null, '
        b'"created": 0}]}',
        b'{"entries": [{"id": "a", "kind": "path", "target": "/", "pid": "1", '
        b'"pid_start": null, "created": 0}]}',
        b"[" * 100000,
    ):
        state.write_bytes(bad)
        with pytest.raises(leftovers.LedgerError) as err:
            clean(workdir)
        assert "\n" not in err.value.one_line()
    proc = run_cli("clean", "--workdir", str(workdir))
    assert (
        proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    )
    state.unlink()


def test_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    wd.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (wd / ".iomatrix").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(leftovers.LedgerError, match="not a directory"):
        register_temp_path(wd, wd / "x")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_clean_exits_non_zero_when_something_remains(workdir: Path, tmp_path: Path) -> None:
    _forge(workdir, kind="path", target=str(tmp_path))
    # no key yet: the forged ledger alone is not trusted, and the exit status says something remains
    proc = run_cli("clean", "--workdir", str(workdir))
    assert (
        proc.returncode == 1 and "refused" in proc.stdout and "1 leftover(s) remain" in proc.stderr
    )
    assert tmp_path.is_dir()
    leftovers.state_path(workdir).unlink()
    proc = run_cli("clean", "--workdir", str(workdir))
    assert proc.returncode == 0 and "nothing left behind" in proc.stdout


@root_only
def test_forged_mount_without_source_outside_the_workdir_is_not_unmounted(
    workdir: Path, tmp_path: Path
) -> None:
    mnt = tmp_path / "foreign"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "somebody-else", str(mnt)], check=True)
    try:
        _forge(workdir, kind="mount", target=str(mnt))
        lines = clean(workdir)
        assert len(lines) == 1 and lines[0].startswith("refused:")
        assert any(m["mountpoint"] == str(mnt) for m in parse_mountinfo())
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    leftovers.state_path(workdir).unlink()


def test_dir_backing_scratch_outside_the_workdir_is_cleaned(workdir: Path, tmp_path: Path) -> None:
    from iomatrix.backing.provision import provision
    from iomatrix.backing.spec import parse_backing

    store = tmp_path / "vmstore"
    store.mkdir()
    (store / "unrelated.img").write_text("keep")
    spec = parse_backing({"type": "dir", "path": str(store)})
    with provision(spec, workdir, set()) as h:
        # a guest image
        register_temp_path(workdir, h.path / "iomatrix-1-file_a_job.fio-0123abcd.qcow2")
        (h.path / "iomatrix-1-file_a_job.fio-0123abcd.qcow2").write_text("img")
        _rewrite_pids(workdir, _dead_pid())  # as if the run had been killed
        lines = clean(workdir)
        assert not h.path.exists() and (store / "unrelated.img").read_text() == "keep"
        assert not [line for line in lines if line.startswith(("refused", "failed"))], lines
    assert leftovers.pending(workdir) == []


def test_a_short_scratch_dir_outside_the_workdir_is_recorded_and_cleaned(tmp_path: Path) -> None:
    """The UNIX-socket directories the durability and consolidation tiers make under /tmp (a socket
    path has 108 bytes at most, a workdir may be deeper): recorded before they exist, so a SIGKILLed
    sweep's `clean` removes them; an unrecorded /tmp/iomx-nbd-* used to stay (clean refused it as
    outside the working directory)."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    # Made by a process that then dies without tidying up, as a SIGKILLed sweep does.
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; from pathlib import Path; "
            "from iomatrix.backing import leftovers; "
            "d = leftovers.short_scratch_dir(Path(sys.argv[1]), 'nbd'); (d / 'nbd.sock').touch(); "
            "print(d); os._exit(0)",
            str(workdir),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    d = Path(made.stdout.strip())
    assert (
        d.parent == Path(os.path.realpath(tempfile.gettempdir()))
        and d.name.startswith("iomx-nbd-")
        and d.is_dir()
    )
    assert [e.target for e in leftovers.pending(workdir)] == [str(d)]
    proc = run_cli("clean", "--workdir", str(workdir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not d.exists() and leftovers.pending(workdir) == []


@root_only
def test_a_loop_device_still_open_elsewhere_is_waited_for_before_its_file_is_called_free(
    tmp_path: Path,
) -> None:
    """`losetup --detach` on a device another process still holds (udev's blkid after an unmount, a
    scan) only marks it to be cleared when that process closes it. The undo waits for that, so the
    file's removal after it does not find the file still backing a loop device (a CI run failed so:
    "disk.img still backs a loop device")."""
    import threading

    from iomatrix.backing.leftover_kinds import LoopLeftover

    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True
    ).stdout.strip()
    holder = os.open(dev, os.O_RDONLY)  # another opener of the device, as a probe would be
    after: list[list[str]] = []
    try:
        undo = threading.Thread(
            target=lambda: (
                LoopLeftover(str(image)).remove(),
                after.append(loops_backed_by(str(image))),
            )
        )
        undo.start()
        autoclear = Path(f"/sys/block/{Path(dev).name}/loop/autoclear")
        # bounded: until the detach has been asked for (the kernel set autoclear)
        for _ in range(2000):
            if not undo.is_alive() or autoclear.read_text().strip() == "1":
                break
            threading.Event().wait(0.01)
    finally:
        os.close(holder)
    undo.join(timeout=60)
    assert not undo.is_alive()
    assert after == [[]], after  # the undo returned only once the device had let go of the file
    assert loops_backed_by(str(image)) == []


def test_clean_says_a_workdir_as_named_and_whole_when_not_a_terminal(tmp_path: Path) -> None:
    # "[bold]" in the path was read as markup and dropped; piped at 40 columns the path was broken
    # mid-name (issue 70)
    wd = tmp_path / ("a-rather-long-directory-name-[bold]-" + "x" * 40)
    wd.mkdir()
    proc = subprocess.run(
        [*iomatrix_argv(), "clean", "--workdir", str(wd)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "40"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"nothing left behind in {wd}\n"
