"""Guest tier: real boots under TCG (slow; run with -m slow or -m '').

The artifacts come from the normal cache ($IOMATRIX_CACHE/guest or ~/.cache/iomatrix/guest); the
first run builds them (kernel download + static fio, about a minute), later runs reuse them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from iomatrix.guest.artifacts import GuestArtifacts, ensure_artifacts
from iomatrix.guest.job import GuestJob
from iomatrix.guest.process import live_guest_pids, run_guest
from iomatrix.guest.tarball import ensure_tarball
from iomatrix.images import create_image
from iomatrix.qemu_block import DiskSpec

pytestmark = pytest.mark.slow
TCG = "tcg"  # tests run under TCG


def fio_job(rw: str = "randwrite", runtime: int = 1, extra: str = "") -> str:
    return (
        f"[t]\nfilename=@DISK@\nrw={rw}\nbs=4k\ndirect=1\nioengine=psync\nsize=32m\n"
        f"runtime={runtime}\ntime_based=1\n{extra}"
    )


@pytest.fixture(scope="module")
def art() -> GuestArtifacts:
    return ensure_artifacts()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_fio_randwrite_virtio_blk_qcow2_none(art: GuestArtifacts, tmp_path: Path) -> None:
    img = tmp_path / "d.qcow2"
    create_image(img, "qcow2", "off", 128 << 20)
    started: list[int] = []
    out = run_guest(
        art,
        TCG,
        DiskSpec(str(img), "qcow2", "none", "threads", "virtio-blk"),
        GuestJob("fio", fio_job()),
        tmp_path / "run",
        timeout=90,
        on_start=started.append,
    )
    assert out.ok, f"{out.error}\n{out.console_tail}"
    assert started == [out.qemu_pid]
    job = out.fio_json["jobs"][0]
    assert job["write"]["iops"] > 0 and job["write"]["total_ios"] > 0
    assert out.disk_info["disk"] == "vda" and out.disk_info["write_cache"] == "write back"
    for key in ("qemu_start_s", "boot_to_workload_s", "workload_s", "wall_s"):
        assert out.phases[key] >= 0, key
    # the shutdown is left out when the end's mark was read only after QEMU exited (loaded host)
    assert out.phases.get("shutdown_s", 1.0) > 0
    assert out.phases["workload_s"] >= 1.0
    assert out.phases["wall_s"] > out.phases["workload_s"]
    assert not live_guest_pids() and not _alive(out.qemu_pid)


@pytest.mark.parametrize(
    "bus,cache,aio",
    [
        ("virtio-scsi", "writethrough", "io_uring"),
        ("ide", "directsync", "native"),
        ("nvme", "unsafe", "threads"),
    ],
)
def test_each_bus(art: GuestArtifacts, tmp_path: Path, bus: str, cache: str, aio: str) -> None:
    img = tmp_path / "d.raw"
    create_image(img, "raw", "off", 64 << 20)
    out = run_guest(
        art,
        TCG,
        DiskSpec(str(img), "raw", cache, aio, bus),  # type: ignore[arg-type]
        GuestJob("fio", fio_job("randread")),
        tmp_path / "run",
        timeout=90,
    )
    assert out.ok, f"{out.error}\n{out.console_tail}"
    assert out.fio_json["jobs"][0]["read"]["iops"] > 0
    expected = "write back" if (cache == "unsafe" or bus == "nvme") else "write through"
    assert out.disk_info["write_cache"] == expected


def test_null_ceiling(art: GuestArtifacts, tmp_path: Path) -> None:
    out = run_guest(
        art,
        TCG,
        DiskSpec(None, "null", "none", "io_uring", "virtio-blk", null_size_bytes=1 << 30),
        GuestJob("fio", fio_job("randread", extra="ioengine=io_uring\niodepth=8\n")),
        tmp_path / "run",
        timeout=90,
    )
    assert out.ok, f"{out.error}\n{out.console_tail}"
    assert out.fio_json["jobs"][0]["read"]["iops"] > 0
    assert out.disk_info["size_bytes"] == 1 << 30


def test_hang_is_killed_after_timeout(art: GuestArtifacts, tmp_path: Path) -> None:
    img = tmp_path / "d.raw"
    create_image(img, "raw", "off", 32 << 20)
    t0 = time.monotonic()
    out = run_guest(
        art,
        TCG,
        DiskSpec(str(img), "raw", "writeback", "threads", "virtio-blk"),
        GuestJob("fio", fio_job("read", runtime=3600)),
        tmp_path / "run",
        timeout=12,
    )
    assert time.monotonic() - t0 < 20
    assert not out.ok and "did not finish within 12 s" in out.error
    assert "iomatrix-init" in out.console_tail
    assert out.fio_json is None and not _alive(out.qemu_pid) and not live_guest_pids()


def test_fs_write_ext4(art: GuestArtifacts, tmp_path: Path) -> None:
    tarball = ensure_tarball(size_hint=16 << 20)
    img = tmp_path / "fs.qcow2"
    create_image(img, "qcow2", "off", 512 << 20)
    out = run_guest(
        art,
        TCG,
        DiskSpec(str(img), "qcow2", "writeback", "threads", "virtio-blk"),
        GuestJob("fs-write", fs="ext4", tarball=tarball, write_mb=32, write_count=2),
        tmp_path / "run",
        timeout=120,
    )
    assert out.ok, f"{out.error}\n{out.console_tail}"
    steps = out.fs_result["steps"]
    assert {"dd_1", "dd_2", "extract", "sync"} <= set(steps)
    assert out.fs_result["timed_s"] == pytest.approx(
        sum(v for k, v in steps.items() if k not in ("mkfs", "mount")), abs=0.02
    )
    assert out.disk_info["tar"] and out.disk_info["disk"] != out.disk_info["tar"]


def test_sigterm_leaves_no_qemu(art: GuestArtifacts, tmp_path: Path) -> None:
    pidfile = tmp_path / "qemu.pid"
    img = tmp_path / "d.raw"
    create_image(img, "raw", "off", 32 << 20)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from iomatrix.guest.artifacts import ensure_artifacts
        from iomatrix.guest.job import GuestJob
        from iomatrix.guest.process import run_guest
        from iomatrix.qemu_block import DiskSpec
        job = "[t]\\nfilename=@DISK@\\nrw=read\\nbs=4k\\nruntime=3600\\ntime_based=1\\n"
        run_guest(ensure_artifacts(), "tcg", DiskSpec({str(img)!r}, "raw", "writeback", "threads"),
                  GuestJob("fio", job), Path({str(tmp_path / "run")!r}), timeout=300,
                  on_start=lambda pid: Path({str(pidfile)!r}).write_text(str(pid)))
    """)
    child = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    try:
        for _ in range(300):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.1)
        qemu_pid = int(pidfile.read_text())
        time.sleep(1.0)
        assert _alive(qemu_pid)
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=20)
        for _ in range(50):
            if not _alive(qemu_pid):
                break
            time.sleep(0.1)
        assert not _alive(qemu_pid)
    finally:
        if child.poll() is None:
            child.kill()


def test_kind_script_gets_env_and_files(art: GuestArtifacts, tmp_path: Path) -> None:
    # A job kind /init does not know is run by its kind script, which sees the job's variables and
    # files.
    from iomatrix.guest.stream import parse_result_stream

    job = GuestJob("hello", env={"IOMX_HELLO": "from the host"}, files={"hello": "a file line\n"})
    out = run_guest(art, TCG, None, job, tmp_path / "run", timeout=90)
    assert out.ok, f"{out.error}\n{out.console_tail}"
    text = (tmp_path / "run" / "results.log").read_text(errors="replace")
    block = parse_result_stream(text).blocks.get("hello", "")
    assert "env=from the host" in block and "a file line" in block, f"{text}\n{out.console_tail}"
