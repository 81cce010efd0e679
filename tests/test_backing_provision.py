"""Real set-up and teardown of loopfs (ext4, xfs, btrfs), tmpfs and dir backings."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.provision import BackingHandle, provision
from iomatrix.backing.spec import parse_backing, tmpfs_accepts_o_direct
from iomatrix.errors import UserError
from tests.conftest import root_only

SCRATCH = Path("/tmp/iomx-backing")


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="prov-", dir=SCRATCH))
    yield d
    leftovers.clean(d, mine=True)  # only what this test recorded
    shutil.rmtree(d, ignore_errors=True)


def _mounted_under(d: Path) -> list[str]:
    prefix = str(d.resolve()) + "/"
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix)
    ]


def _loops_over(d: Path) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(d.resolve()) in line]


def _assert_gone(workdir: Path, handle: BackingHandle) -> None:
    assert _mounted_under(workdir) == []
    assert _loops_over(workdir) == []
    assert leftovers.pending(workdir) == []
    backings = workdir / "backings"
    assert not backings.exists() or list(backings.iterdir()) == []
    assert not handle.path.exists()


@pytest.mark.parametrize(
    ("fs", "size", "opts"),
    [
        ("ext4", "32M", ["noatime"]),
        ("xfs", "300M", []),
        ("btrfs", "128M", ["noatime"]),
    ],
)
@root_only
def test_loopfs_setup_and_teardown(workdir: Path, fs: str, size: str, opts: list[str]) -> None:
    spec = parse_backing({"type": "loopfs", "fs": fs, "size": size, "mount_options": opts})
    with provision(spec, workdir, set()) as h:
        assert h.kind == "dir" and h.label == spec.label()
        assert h.path.is_dir() and str(h.path).startswith(str(workdir))
        (h.path / "probe").write_bytes(b"x" * 65536)
        md = h.metadata
        assert md["backing_type"] == "loopfs" and md["fs_type"] == fs
        assert md["mountpoint"] == str(h.path)
        assert md["source"].startswith("/dev/loop")
        assert md["device"]["node"] == md["source"]
        assert md["device"]["loop_backing_file"] == md["backing_file"]
        assert os.path.getsize(md["backing_file"]) == spec.size
        assert os.stat(md["backing_file"]).st_blocks * 512 < spec.size  # sparse
        assert md["device"]["underlying"] is not None
        assert md["physical_device"]["scheduler"] is not None
        assert isinstance(md["physical_device"]["rotational"], bool)
        assert md["mount_options"] == opts
        for o in opts:
            assert o in md["mount_options_effective"]
        assert len(_loops_over(workdir)) == 1
        assert len(leftovers.pending(workdir)) == 3  # scratch dir, loop, mount
    _assert_gone(workdir, h)


@root_only
def test_tmpfs_setup_and_teardown(workdir: Path) -> None:
    spec = parse_backing({"type": "tmpfs", "size": "16M"})
    with provision(spec, workdir, set()) as h:
        assert h.metadata["fs_type"] == "tmpfs"
        # The kernel-version rule the plan was expanded with agrees with a real O_DIRECT open on
        # this tmpfs.
        assert h.metadata["o_direct_supported"] is tmpfs_accepts_o_direct()
        assert h.metadata["o_direct_probe"] is h.metadata["o_direct_supported"]
        assert "size=16384k" in h.metadata["mount_options_effective"]
        assert _mounted_under(workdir) == [str(h.path)]
    _assert_gone(workdir, h)


def test_dir_backing_is_a_scratch_subdir(tmp_path: Path) -> None:
    spec = parse_backing({"type": "dir", "path": str(tmp_path)})
    with provision(spec, tmp_path / "work", set()) as h:
        assert h.path.parent == tmp_path and h.path.is_dir()
        (h.path / "img.qcow2").write_bytes(b"q")
        assert h.metadata["fs_type"] and h.metadata["mountpoint"]
        assert h.metadata["backing_spec"]["type"] == "dir"
    assert not h.path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # only the ledger's workdir
    assert leftovers.pending(tmp_path / "work") == []


@root_only
@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_teardown_on_exception_and_ctrl_c(workdir: Path, exc: BaseException) -> None:
    spec = parse_backing({"type": "loopfs", "fs": "ext4", "size": "16M"})
    with pytest.raises(type(exc)), provision(spec, workdir, set()) as h:
        raise exc
    _assert_gone(workdir, h)


def test_unavailable_backing_is_refused_before_creating_anything(tmp_path: Path) -> None:
    spec = parse_backing({"type": "blockdev", "device": "/dev/loop7"})
    with (
        pytest.raises(UserError, match=r"not available.*--allow-destroy"),
        provision(spec, tmp_path, set()),
    ):
        pass
    assert leftovers.pending(tmp_path) == []


@root_only
def test_failed_teardown_keeps_ledger_and_clean_finishes(workdir: Path) -> None:
    spec = parse_backing({"type": "tmpfs", "size": "8M"})
    busy = None
    with pytest.raises(UserError, match="iomatrix clean"), provision(spec, workdir, set()) as h:
        busy = subprocess.Popen(["sleep", "60"], cwd=h.path)  # keeps the mount busy
    assert busy is not None
    assert _mounted_under(workdir) == [str(h.path)]
    assert {e.kind for e in leftovers.pending(workdir)} == {"path", "mount"}
    busy.kill()
    busy.wait()
    lines = leftovers.clean(workdir, mine=True)
    assert any(line.startswith("unmounted") for line in lines)
    assert _mounted_under(workdir) == [] and leftovers.pending(workdir) == []


@root_only
def test_ctrl_c_during_teardown_is_held_back(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from iomatrix.backing.leftover_kinds import MountLeftover

    real_undo = MountLeftover.undo

    def interrupted_undo(self: MountLeftover) -> list[str]:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives in the middle of teardown
        return real_undo(self)

    monkeypatch.setattr(MountLeftover, "undo", interrupted_undo)
    spec = parse_backing({"type": "tmpfs", "size": "8M"})
    with pytest.raises(KeyboardInterrupt), provision(spec, workdir, set()) as h:
        pass
    _assert_gone(workdir, h)  # teardown finished first, then the interrupt was delivered
