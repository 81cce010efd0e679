"""Every fio job iomatrix builds runs its jobs as threads, and a custom job is bounded by the plan's
runtime (issue 38: the nbd job forked job processes that outlived a kill; a custom job could set
`thread=0` and run unbounded with `loops`, `runtime` or `thinktime`)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from iomatrix import workloads as wl
from iomatrix.errors import UserError
from iomatrix.fio.jobs import (
    JobShape,
    baremetal_job,
    bounded_custom_text,
    fio_seconds,
    guest_job,
    nbd_job,
)
from tests.conftest import needs

SHAPE = JobShape(size_bytes=1 << 20, runtime_s=0.5)


def _globals(text: str) -> list[str]:
    return text.split("\n\n", 1)[0].splitlines()


def _builders(w: wl.Workload, custom: str | None) -> list[str]:
    return [
        baremetal_job(w, cache="none", aio="threads", target="/x", shape=SHAPE, custom_text=custom),
        guest_job(w, shape=SHAPE, custom_text=custom),
        nbd_job(w, uri="nbd+unix:///e?socket=s", shape=SHAPE, custom_text=custom).text,
    ]


@pytest.mark.parametrize("preset", ["rand-read-4k", "rand-write-4k", "db-write-4k-fdatasync"])
def test_every_job_iomatrix_builds_runs_as_threads(preset: str) -> None:
    for text in _builders(wl.PRESETS[preset], None):
        assert "thread=1" in _globals(text), text


def test_a_custom_job_cannot_switch_threads_off(tmp_path: Path) -> None:
    for value in ("0", "false", "off", "no"):
        (tmp_path / "j.fio").write_text(f"[job]\nrw=randwrite\nthread={value}\n")
        with pytest.raises(UserError) as err:
            wl.resolve("file:j.fio", tmp_path)
        assert "thread=1" in err.value.one_line() and "\n" not in err.value.one_line()
    (tmp_path / "j.fio").write_text("[job]\nrw=randwrite\nthread\nnumjobs=4\n")
    w = wl.resolve("file:j.fio", tmp_path)
    for text in _builders(w, w.custom_text):
        assert "thread=1" in _globals(text)


def test_fio_time_values() -> None:
    assert (
        fio_seconds("500ms", "s") == 0.5
        and fio_seconds("2", "s") == 2
        and fio_seconds("1h", "s") == 3600
    )
    assert fio_seconds("30", "us") == pytest.approx(30e-6) and fio_seconds("30s", "us") == 30
    assert fio_seconds("1x", "s") is None and fio_seconds("", "s") is None


def test_a_custom_job_gets_the_plans_runtime_as_its_upper_bound() -> None:
    text = (
        "[global]\nruntime=1h\n\n[long]\nrw=read\nloops=1000000\nthinktime=30s\n\n"
        "[short]\nrw=write\nruntime=200ms\nramp_time=10m\n\n[unbounded]\nrw=randread\n"
        "time_based=1\n"
    )
    out = bounded_custom_text(text, runtime_s=2.0)
    sections = {s.splitlines()[0]: s.splitlines()[1:] for s in out.strip().split("\n\n")}
    assert "runtime=1h" not in out
    assert "runtime=2000ms" in sections["[long]"] and "thinktime=2000ms" in sections["[long]"]
    assert "loops=1000000" in sections["[long]"]  # bounded by runtime (fio: whichever occurs first)
    assert "runtime=200ms" in sections["[short]"] and "ramp_time=2000ms" in sections["[short]"]
    assert "runtime=2000ms" in sections["[unbounded]"]
    notes = [line for line in out.splitlines() if line.startswith("# iomatrix: capped")]
    assert len(notes) == 3 and "runtime 3600 s" in notes[0] and "thinktime=30s" in notes[0]
    # stable when applied again
    assert bounded_custom_text(out, runtime_s=2.0).count("runtime=") == 3


@needs("fio")
def test_an_unbounded_custom_job_ends_near_the_plans_runtime_under_real_fio(tmp_path: Path) -> None:
    # Unbounded, this job would sleep an hour per I/O for a million loops (fio sleeps a thinktime
    # whole).
    (tmp_path / "slow.fio").write_text(
        "[job]\nrw=write\nbs=4k\nloops=1000000\nthinktime=1h\nthread=1\n"
    )
    w = wl.resolve("file:slow.fio", tmp_path)
    job = baremetal_job(
        w,
        cache="writeback",
        aio="threads",
        target=str(tmp_path / "data.bin"),
        shape=JobShape(size_bytes=64 << 10, runtime_s=1.0),
        custom_text=w.custom_text,
    )
    (tmp_path / "job.fio").write_text(job)
    t0 = time.monotonic()
    out = subprocess.run(
        ["fio", "--output-format=json", str(tmp_path / "job.fio")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 < 600  # far below the hour of a single thinktime
