"""Short real sampler runs. Assertions are about behaviour (samples exist, time
moves forward, fields present, the right device saw the writes), not timing."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iomatrix.monitor import procfs
from iomatrix.monitor.devices import resolve, resolve_device_chain
from iomatrix.monitor.sampler import (
    CPU_FIELDS,
    MEM_FIELDS,
    HostSampler,
    MonitorSample,
    disk_field_names,
)
from tests.conftest import loop_mounted_ext4

SCRATCH = Path("/tmp/iomx-mon")
CHUNK = b"\xa5" * (1024 * 1024)


def _write_fsync(path: Path, mib: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(CHUNK)
            f.flush()
            os.fsync(f.fileno())


def _integrated(samples: list[MonitorSample], key: str) -> float:
    """sum(rate * interval): the amount over the whole run (e.g. MiB written)."""
    total, prev = 0.0, 0.0
    for s in samples:
        total += s.values.get(key, 0.0) * (s.t - prev)
        prev = s.t
    return total


def _check_basic(samples: list[MonitorSample], interval: float) -> None:
    assert samples
    ts = [s.t for s in samples]
    assert all(b > a for a, b in itertools.pairwise(ts))
    assert ts[0] > 0
    # ticks never fire early: the i-th regular tick is due no earlier than (i+1) * interval
    for i, t in enumerate(ts[:-1]):
        assert t >= (i + 1) * interval - 1e-3
    for s in samples:
        for f in (*CPU_FIELDS, *MEM_FIELDS):
            assert f in s.values, f
        assert sum(s.values[f] for f in CPU_FIELDS) == pytest.approx(100.0, abs=1e-6) or all(
            s.values[f] == 0 for f in CPU_FIELDS
        )


def test_sampler_sees_writes_on_the_physical_disk(tmp_path: Path):
    chain = resolve_device_chain(tmp_path)
    if not chain:
        pytest.skip(f"tmp_path is not on a block device: {resolve(tmp_path).reason}")
    interval = 0.1
    t_start = time.monotonic()
    with HostSampler(chain, interval=interval) as s:
        _write_fsync(tmp_path / "f.bin", 8)
        time.sleep(max(0.0, 1.5 - (time.monotonic() - t_start)))
    samples = s.samples
    _check_basic(samples, interval)
    assert 2 <= len(samples) <= int(1.5 / interval) + 8  # no bursts of catch-up ticks
    for f in disk_field_names(chain):
        if not f.endswith("await_ms"):  # await only when I/O completed in the interval
            assert all(f in x.values for x in samples), f
    assert _integrated(samples, "disk.write_mbps") >= 8 * 0.99  # the 8 MiB reached the disk
    assert any(x.values["disk.write_iops"] > 0 for x in samples)
    assert s.cpu_seconds > 0


def test_half_second_run_at_1hz_gets_one_sample():
    s = HostSampler([], interval=1.0)
    s.start()
    time.sleep(0.5)
    samples = s.stop()
    assert len(samples) == 1
    assert 0.4 < samples[0].t < 1.0
    assert "cpu.idle_pct" in samples[0].values
    assert not any(k.startswith(("disk.", "dev.")) for k in samples[0].values)
    assert s.stop() is samples  # idempotent


def test_attach_pid_reports_process_cpu_and_rss():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nx=bytearray(32<<20)\nwhile 1: pass"]
    )
    try:
        s = HostSampler([], interval=0.1)
        s.start()
        time.sleep(0.25)  # attach after start
        s.attach_pid(child.pid)
        time.sleep(0.6)
        samples = s.stop()
    finally:
        child.kill()
        child.wait()
    with_proc = [x for x in samples if "proc.cpu_pct" in x.values]
    assert with_proc, samples
    assert not any("proc.cpu_pct" in x.values for x in samples if x.t < 0.25)
    assert max(x.values["proc.cpu_pct"] for x in with_proc) > 10  # a busy loop, on a noisy box
    assert max(x.values["proc.rss_mb"] for x in with_proc) > 20  # holds a 32 MiB buffer


def test_children_of_an_attached_process_count_as_its_work():
    """fio does its I/O in forked job processes: a parent that only waits, with a busy child, is
    busy work."""
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "kid = subprocess.Popen([sys.executable, '-c', 'while 1: pass'])\n"
        "try:\n    time.sleep(30)\nfinally:\n    kid.kill()\n    kid.wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        with HostSampler([], interval=0.1) as s:
            s.attach_pid(parent.pid)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                x.values.get("proc.count", 0) >= 2 for x in s.samples
            ):
                time.sleep(0.1)
            time.sleep(0.5)
    finally:
        parent.terminate()  # its finally kills the busy child
        parent.wait()
    two = [x for x in s.samples if x.values.get("proc.count", 0) >= 2]
    assert two, "the busy child was never followed"
    assert max(x.values["proc.cpu_pct"] for x in two) > 10  # the child's busy loop, on a noisy box


def test_attach_missing_pid_and_unknown_device():
    s = HostSampler([], interval=1.0)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with pytest.raises(ProcessLookupError):
        s.attach_pid(p.pid)
    with pytest.raises(ValueError, match="no-such-dev"):
        HostSampler(["no-such-dev"])
    with pytest.raises(ValueError):
        HostSampler([], interval=0)


def test_exited_process_stops_proc_fields_without_failing():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    with HostSampler([], interval=0.1) as s:
        s.attach_pid(child.pid)
        child.wait()
        time.sleep(0.4)
    assert s.samples
    assert "proc.rss_mb" not in s.samples[-1].values


def test_optional_sources_follow_the_host():
    with HostSampler([], interval=0.05) as s:
        time.sleep(0.2)
    keys = set(s.samples[-1].values)
    assert any(k.startswith("psi.") for k in keys) == Path("/proc/pressure/io").exists()
    assert ("ksm.pages_sharing" in keys) == Path("/sys/kernel/mm/ksm/pages_sharing").exists()


@pytest.mark.root
def test_sampler_on_loop_chain_attributes_writes_per_device():
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("losetup", "mkfs.ext4", "mount")):
        pytest.skip("needs root with losetup/mkfs.ext4/mount")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    with loop_mounted_ext4(SCRATCH) as (loop, mnt, _backing):
        chain = resolve_device_chain(mnt)
        name = Path(loop).name
        assert chain[0] == name and len(chain) >= 2
        before = procfs.parse_diskstats(Path("/proc/diskstats").read_text(), {name})[name]
        interval = 0.1
        with HostSampler(chain, interval=interval) as s:
            _write_fsync(mnt / "f.bin", 16)
            time.sleep(0.3)
        after = procfs.parse_diskstats(Path("/proc/diskstats").read_text(), {name})[name]
        samples = s.samples
        _check_basic(samples, interval)
        loop_written = _integrated(samples, f"dev.{name}.write_mbps")
        assert loop_written >= 16 * 0.99  # every fsync'd MiB went through the loop device
        # and exactly the counter delta seen from outside (to float rounding)
        assert (
            loop_written
            <= (after.sectors_written - before.sectors_written) * 512 / procfs.MIB + 1e-6
        )
        assert _integrated(samples, "disk.write_mbps") > 0  # ... and down to the backing disk
        assert any(x.values.get(f"dev.{name}.write_iops", 0) > 0 for x in samples)


def test_several_pids_are_summed():
    # The consolidation tier attaches every QEMU of a point: proc.* are sums over the live ones.
    kids = [
        subprocess.Popen([sys.executable, "-c", "x=bytearray(24<<20)\nwhile 1: pass"])
        for _ in range(2)
    ]
    try:
        with HostSampler([], interval=0.1) as s:
            for k in kids:
                s.attach_pid(k.pid)
            time.sleep(0.8)
            kids[0].kill()
            kids[0].wait()
            time.sleep(0.4)
    finally:
        for k in kids:
            k.kill()
            k.wait()
    counts = [x.values.get("proc.count") for x in s.samples if "proc.count" in x.values]
    assert 2.0 in counts and counts[-1] == 1.0, counts
    both = [x for x in s.samples if x.values.get("proc.count") == 2.0]
    assert max(x.values["proc.rss_mb"] for x in both) > 40  # two 24 MiB buffers
