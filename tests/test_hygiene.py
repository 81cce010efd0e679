"""Cache hygiene (drop_caches) and the eatmydata host modifier."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import iomatrix.hygiene as hygiene
from iomatrix.errors import MissingTool, UserError
from iomatrix.hygiene import CacheState, modifier_notes, modifier_wrapper, prepare_cache


def test_keep_warm_does_not_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hygiene, "DROP_CACHES", "/nonexistent/should-not-be-opened")
    st = prepare_cache(keep_warm=True)
    assert st == CacheState("warm-by-request", st.detail) and "--keep-warm" in st.detail


def test_drop_writes_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "drop_caches"
    fake.write_text("")
    monkeypatch.setattr(hygiene, "DROP_CACHES", str(fake))
    st = prepare_cache(keep_warm=False)
    assert st.state == "dropped" and fake.read_text() == "3\n"
    assert st.to_dict() == {"state": "dropped", "detail": st.detail}


def test_not_root_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def deny(*a: object, **k: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", deny)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    st = prepare_cache(keep_warm=False)
    assert st.state == "not-dropped"
    assert st.detail == "not root: cannot write /proc/sys/vm/drop_caches"


def test_read_only_proc_is_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(hygiene, "DROP_CACHES", str(tmp_path / "missing" / "drop_caches"))
    st = prepare_cache(keep_warm=False)
    assert st.state == "not-dropped" and "cannot write" in st.detail


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_real_drop_caches() -> None:
    assert prepare_cache(keep_warm=False).state == "dropped"


def test_modifier_wrapper() -> None:
    assert modifier_wrapper("none") == []
    with pytest.raises(UserError, match="valid modifiers: none, eatmydata"):
        modifier_wrapper("nocache")
    if shutil.which("eatmydata"):
        assert modifier_wrapper("eatmydata") == ["eatmydata"]


def test_missing_eatmydata_names_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda p: None)
    with pytest.raises(MissingTool, match="eatmydata") as err:
        modifier_wrapper("eatmydata")
    assert err.value.package == "eatmydata"


def test_notes_record_the_io_uring_limit() -> None:
    assert modifier_notes("none", "io_uring") == []
    threads = modifier_notes("eatmydata", "threads")
    assert len(threads) == 1 and "io_uring" in threads[0]
    uring = modifier_notes("eatmydata", "io_uring")
    assert len(uring) == 2 and "still flushes" in uring[1]
    assert "fdatasync()" in modifier_notes("eatmydata", "native")[1]
    with pytest.raises(UserError):
        modifier_notes("bogus", None)


@pytest.mark.skipif(shutil.which("eatmydata") is None, reason="eatmydata missing")
def test_wrapper_keeps_the_pid_and_preloads() -> None:
    argv = [*modifier_wrapper("eatmydata"), "sh", "-c", 'echo "$$ $LD_PRELOAD"']
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate()
    pid, preload = out.split(maxsplit=1)
    assert int(pid) == p.pid  # the wrapper execs: the sampler sees fio/QEMU's own pid
    assert "libeatmydata" in preload


FIO_FLUSH_CHECK = [
    "--name=t",
    "--size=1M",
    "--bs=4k",
    "--rw=write",
    "--fdatasync=1",
    "--iodepth=2",
    "--output-format=terse",
]


def _device_flushes(name: str) -> int:
    return int(Path(f"/sys/block/{name}/stat").read_text().split()[15])


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("fio") or not shutil.which("eatmydata"),
    reason="needs root, fio and eatmydata",
)
def test_eatmydata_removes_psync_flushes_but_not_io_uring_ones() -> None:
    """Count REQ_OP_FLUSH on a loop device under ext4 (field 16 of /sys/block/loopN/stat)."""
    from iomatrix.backing.provision import provision
    from iomatrix.backing.spec import parse_backing

    Path("/tmp/iomx-backing").mkdir(exist_ok=True)
    wd = Path(tempfile.mkdtemp(prefix="eatmydata-", dir="/tmp/iomx-backing"))
    try:
        with provision(
            parse_backing({"type": "loopfs", "fs": "ext4", "size": "64M"}), wd, set()
        ) as h:
            loop = Path(h.metadata["source"]).name
            counts = {}
            for engine in ("psync", "io_uring"):
                for mod in ("none", "eatmydata"):
                    target = h.path / f"{engine}-{mod}"
                    before = _device_flushes(loop)
                    subprocess.run(
                        [
                            *modifier_wrapper(mod),
                            "fio",
                            f"--filename={target}",
                            f"--ioengine={engine}",
                            *FIO_FLUSH_CHECK,
                        ],
                        check=True,
                        capture_output=True,
                    )
                    counts[engine, mod] = _device_flushes(loop) - before
        assert counts["psync", "none"] >= 200
        assert counts["psync", "eatmydata"] < 10
        assert counts["io_uring", "eatmydata"] >= 100  # still flushes: the documented limit
    finally:
        shutil.rmtree(wd, ignore_errors=True)
