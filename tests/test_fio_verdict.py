"""A run counts only if fio's measured job really completed: real fio failures that exit 0 are
caught."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from iomatrix.fio.parse import FioOutputError, checked_metrics, extract_json
from tests.conftest import needs, root_only, run_cli

pytestmark = needs("fio")


def _fio(tmp_path: Path, job: str) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "job.fio").write_text(job)
    out = tmp_path / "out.json"
    proc = subprocess.Popen(
        ["fio", "--output-format=json", f"--output={out}", "job.fio"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out


def _job(target: Path, size: str, runtime: str = "300ms", rw: str = "randwrite") -> str:
    return (
        f"[global]\nfilename={target}\nsize={size}\nioengine=psync\n"
        f"[measure]\nrw={rw}\nbs=4k\ntime_based=1\nruntime={runtime}\n"
    )


def test_a_good_run_passes(tmp_path: Path) -> None:
    proc, out = _fio(tmp_path, _job(tmp_path / "d", "8M"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert checked_metrics(extract_json(out.read_text()), err, "write.iops")["write.iops"] > 0


def test_failed_random_map_with_exit_0_is_a_failure(tmp_path: Path) -> None:
    proc, out = _fio(tmp_path, _job(tmp_path / "d", "999T"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0  # fio's own verdict: fine
    with pytest.raises(FioOutputError, match="random map"):
        checked_metrics(extract_json(out.read_text()), err, "write.iops")
    (tmp_path / "d").unlink(missing_ok=True)


def test_killed_worker_with_exit_0_is_a_failure(tmp_path: Path) -> None:
    proc, out = _fio(tmp_path, _job(tmp_path / "d", "16M", runtime="60s"))
    try:
        deadline = time.monotonic() + 60
        worker = None
        while worker is None and time.monotonic() < deadline:
            kids = subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
            ).stdout.split()
            worker = int(kids[0]) if kids else None
            time.sleep(0.2)
        assert worker is not None, "fio never started its worker"
        time.sleep(1.0)  # let it do some I/O first
        os.kill(worker, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(FioOutputError, match="killed by a signal"):
        checked_metrics(extract_json(out.read_text()), err, "write.iops")


def test_job_without_the_primary_metric_is_a_failure(tmp_path: Path) -> None:
    proc, out = _fio(tmp_path, _job(tmp_path / "d", "8M"))
    _, err = proc.communicate(timeout=120)
    report = extract_json(out.read_text())
    with pytest.raises(FioOutputError, match=r"no read\.iops"):
        checked_metrics(report, err, "read.iops")  # a write job measured as a read workload
    report["jobs"] = []
    with pytest.raises(FioOutputError, match="no measured job"):
        checked_metrics(report, err, "write.iops")


@root_only
def test_full_disk_is_named_enospc_with_a_hint(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "iomatrix-test-enospc", str(mnt)], check=True
    )
    try:
        proc, out = _fio(tmp_path, _job(mnt / "d", "64M", rw="write"))
        _, err = proc.communicate(timeout=120)
        report = json.loads(out.read_text()[out.read_text().find("{") :]) if out.exists() else None
        assert report is not None
        assert report["jobs"][0]["error"] == 28
        with pytest.raises(FioOutputError, match=r"ENOSPC.*bigger loopfs/tmpfs size.*smaller"):
            checked_metrics(report, err, "write.iops")
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


PLAN_999T = """
tier = ["baremetal"]
cache = ["writeback"]
workloads = ["rand-write-4k"]
size = "999T"
runtime = 0.3
[repetitions]
min = 1
max = 1
"""


def test_a_999_tib_typo_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Issue 38: `size = "999T"` used to start laying out a 999 TiB fio file on the host (the runs
    then failed on fio's random map). The space check refuses it first, with the arithmetic, and
    writes no fio file. (That a sweep whose runs all fail gives up is tested in test_scheduler.py
    and test_runner_inprocess.py.)"""
    (tmp_path / "p.toml").write_text(PLAN_999T)
    proc = run_cli(
        "run",
        "p.toml",
        "--db",
        "r.sqlite",
        "--workdir",
        "w",
        "--monitor-interval",
        "0.2",
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "does not fit" in err and "999.0 TiB" in err, err
    assert "Traceback" not in proc.stdout + proc.stderr
    written = [
        p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_blocks * 512 > (1 << 20)
    ]
    assert not written, written


def test_guest_tier_judges_the_guest_fio_report_like_bare_metal(tmp_path: Path) -> None:
    # The guest's fio report (here a real one from the host's fio) goes through the same check: a
    # report without the workload's primary metric is a failed run, not a run of zeros.
    from types import SimpleNamespace

    from iomatrix.guest.job import GuestJob
    from iomatrix.guest.stream import GuestOutcome
    from iomatrix.tiers.guest import GuestTier

    proc, out = _fio(tmp_path, _job(tmp_path / "d", "8M"))
    proc.communicate(timeout=120)
    report = extract_json(out.read_text())
    tier = object.__new__(GuestTier)  # only the judging is exercised: no guest is booted
    tier.choice = SimpleNamespace(reason="test")
    tier.artifacts = SimpleNamespace(as_metadata=dict)
    done = GuestOutcome(
        ok=True,
        fio_json=report,
        fs_result=None,
        phases={"workload_s": 0.3},
        console_tail="",
        error=None,
        qemu_argv=[],
        qemu_pid=None,
    )
    job = GuestJob("fio", "[t]\nfilename=@DISK@\n")
    assert tier._outcome(done, job, "write.iops").ok
    bad = tier._outcome(done, job, "read.iops")
    assert not bad.ok and "no read.iops" in (bad.error or "")
