"""Findings decided by the workload's shape, not its name (issue 53): librbd's writethrough-until-flush told for
custom job files that differ in flushing, each with its shape, its measured ratio and the host's load.

The databases here are real SQLite stores written through the store's API, with the job texts iomatrix renders
for the block-layer tier (fio/jobs.nbd_job) around job files that are not the built-in plan's."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.fio.allowlist import validate_job_text
from iomatrix.fio.jobs import JobShape, nbd_job
from iomatrix.report.query import cell_workloads
from iomatrix.report.recommend import recommend
from iomatrix.report.shapes import workload_shapes
from iomatrix.store import RunRecord, Store
from iomatrix.workloads import PRESETS

NEVER = "file:jobs/app.fio"
JOURNAL = "file:jobs/journal.fio"
NEVER_TEXT = "# an application's writes\n[app-writes]\nrw=randwrite\nbs=8k\niodepth=2\n"
JOURNAL_TEXT = "[journal]\nrw=randwrite\nbssplit=4k/75:16k/25\nfdatasync=16\n"
MIXED_TEXT = "[data]\nrw=randrw\nrwmixread=70\nbssplit=8k/90:32k/10\niodepth=8\n[log]\nrw=write\nbs=32k\nfdatasync=1\n"
RBD = {"backing_type": "rbd", "backing_label": "rbd", "kind": "network"}
LOADED = ("CPU pressure: PSI cpu some 38% > 10%", "other processes used 95% of a CPU > 50%")


def _axes(cache: str) -> dict[str, str]:
    return {"tier": "blocklayer", "format": "raw", "preallocation": "off", "cache": cache, "aio": "threads",
            "bus": "-", "backing": "rbd", "modifier": "none", "rbd_cache_policy": "writearound",
            "rbd_cache_writethrough_until_flush": "on"}


def _job_text(custom: str) -> str:
    """What the block-layer tier gives fio for this job file (the cell's [global], the final flush included)."""
    job = validate_job_text(custom, "job.fio")
    return nbd_job(PRESETS["rand-write-4k"], uri="nbd+unix:///iomx?socket=nbd.sock",
                   shape=JobShape(size_bytes=32 << 20, runtime_s=1), custom_text=job.text).text


def _sweep(tmp_path: Path, texts: dict[str, str], iops: dict[tuple[str, str], float],
           loaded: set[str] = frozenset()) -> tuple[Store, int]:
    """A finished sweep on one rbd backing: cache none and writeback × the workloads, 5 rounds; the runs of the
    workloads in `loaded` on a host flagged disturbed (the runner's stored verdict), the others quiet."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(store.host_id({"hostname": "h", "cpu_count": 2, "mem_bytes": 4 << 30}), "p", "fp",
                             "{}", [], [])
    for cache in ("none", "writeback"):
        axes = _axes(cache)
        cid = store.cell_id(sid, f"blocklayer/raw/off/{cache}/threads/-/rbd/none", axes, RBD)
        for rnd in range(5):
            for pos, (w, text) in enumerate(texts.items()):
                value = iops[(w, cache)] * (1 + 0.02 * ((rnd * 3 + pos) % 5 - 2))  # ±4 % run to run
                store.record_run(RunRecord(
                    cell_id=cid, workload=w, status="ok", started_at=rnd, finished_at=rnd + 1,
                    accel="none (QEMU block layer, no guest)", cache_state="dropped", page_cache_method="-",
                    metrics={"total.iops": value, "write.iops": value}, phases={}, job_text=_job_text(text),
                    round=rnd + 1, round_position=pos, disturbed=w in loaded,
                    disturbance=LOADED if w in loaded else ()))
    store.set_sweep_status(sid, "finished")
    return store, sid


# The loaded-host case: the job file that never flushes gets nothing from writeback (a little less: the
# writethrough cache costs CPU on a loaded host), the one that flushes gains.
IOPS = {(NEVER, "none"): 1000.0, (NEVER, "writeback"): 900.0, (JOURNAL, "none"): 600.0,
        (JOURNAL, "writeback"): 1500.0}


def test_two_custom_job_files_that_differ_in_flushing_get_the_sentence_that_explains_their_answers(
        tmp_path: Path) -> None:
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, JOURNAL: JOURNAL_TEXT}, IOPS, loaded={NEVER})
    rec = recommend(store, sid, threshold=0.05)
    answers = {v.workload: v.choice.cell for v in rec.verdicts if v.choice is not None}
    assert "cache=none" in answers[NEVER] and "cache=writeback" in answers[JOURNAL], answers
    [finding] = rec.findings
    # the cell's own final flush (end_fsync in its [global]) is no part of the job's shape; the nbd engine is sent
    # fdatasync=N as fsync=N (fio/jobs.py), and the stored text says what was sent
    assert f"on {NEVER}, which never flushes, QEMU cache=writeback was slower than cache=none " \
           "(0.90×" in finding
    assert "[host loaded in 10 of 10 runs: CPU pressure, other processes' CPU use]" in finding
    assert f"with {JOURNAL}, which flushes every 16 writes (fsync=16), it was 2.50×" in finding
    assert "[host quiet: 0 of 10 runs disturbed]" in finding
    assert "a VM holding both kinds counts as flushing" in finding


def test_the_same_names_with_a_job_that_does_not_flush_get_no_sentence(tmp_path: Path) -> None:
    """The decision is the shape's: the same workload names and figures, but the second job file no longer
    flushes, so a writeback gain on it is no contrast with until-flush (and is said nowhere as one)."""
    never_too = JOURNAL_TEXT.replace("fdatasync=16\n", "")
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, JOURNAL: never_too}, IOPS, loaded={NEVER})
    assert recommend(store, sid, threshold=0.05).findings == []


def test_a_job_file_mixing_flushing_and_non_flushing_jobs_counts_as_flushing(tmp_path: Path) -> None:
    mixed = "file:jobs/database.fio"
    iops = {(NEVER, "none"): 1000.0, (NEVER, "writeback"): 1010.0, (mixed, "none"): 500.0,
            (mixed, "writeback"): 900.0}
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, mixed: MIXED_TEXT}, iops)
    shapes = workload_shapes(store, cell_workloads(store, sid))
    assert shapes[mixed].mixed and shapes[mixed].flushes and not shapes[NEVER].flushes
    assert shapes[mixed].working_set == 32 << 20  # the cell's region, from the stored job text
    [finding] = recommend(store, sid, threshold=0.05).findings
    assert f"with {mixed}, which mixes jobs that flush with jobs that never do (job data never flushes; job log " \
           "flushes every write (fsync=1); on one disk the first flush turns librbd's cache writeback for all " \
           "of them), it was 1.80×" in finding
    assert f"on {NEVER}, which never flushes, QEMU cache=writeback was no faster than cache=none" \
           in finding


@pytest.mark.parametrize("gain", [1.0, 0.95])
def test_no_contrast_no_sentence(tmp_path: Path, gain: float) -> None:
    """Both job files flat (the flushing one gains nothing either): nothing shows the trap."""
    iops = {(NEVER, "none"): 1000.0, (NEVER, "writeback"): 1000.0, (JOURNAL, "none"): 600.0,
            (JOURNAL, "writeback"): 600.0 * gain}
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, JOURNAL: JOURNAL_TEXT}, iops)
    assert recommend(store, sid, threshold=0.05).findings == []
