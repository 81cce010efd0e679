"""Findings decided by the workload's shape, not its name (issue 53): librbd's
writethrough-until-flush told for custom job files that differ in flushing, each with its shape, its
measured ratio and the host's load.

The databases here are real SQLite stores written through the store's API, with the job texts
iomatrix renders for the block-layer tier (fio/jobs.nbd_job) around job files that are not the
built-in plan's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psutil
import pytest

from iomatrix.fio.allowlist import validate_job_text
from iomatrix.fio.jobs import JobShape, nbd_job
from iomatrix.fio.shape import shape_of_text
from iomatrix.report.query import CellWorkload, cell_workloads
from iomatrix.report.recommend import recommend
from iomatrix.report.shape_findings import page_cache_finding
from iomatrix.report.shapes import workload_shapes
from iomatrix.store import RunRecord, Store
from iomatrix.workloads import PRESETS
from tests.conftest import DATA, needs, run_cli

NEVER = "file:jobs/app.fio"
JOURNAL = "file:jobs/journal.fio"
NEVER_TEXT = "# an application's writes\n[app-writes]\nrw=randwrite\nbs=8k\niodepth=2\n"
JOURNAL_TEXT = "[journal]\nrw=randwrite\nbssplit=4k/75:16k/25\nfdatasync=16\n"
MIXED_TEXT = (
    "[data]\nrw=randrw\nrwmixread=70\nbssplit=8k/90:32k/10\niodepth=8\n[log]\nrw=write\n"
    "bs=32k\nfdatasync=1\n"
)
RBD = {"backing_type": "rbd", "backing_label": "rbd", "kind": "network"}
LOADED = ("CPU pressure: PSI cpu some 38% > 10%", "other processes used 95% of a CPU > 50%")


def _axes(cache: str) -> dict[str, str]:
    return {
        "tier": "blocklayer",
        "format": "raw",
        "preallocation": "off",
        "cache": cache,
        "aio": "threads",
        "bus": "-",
        "backing": "rbd",
        "modifier": "none",
        "rbd_cache_policy": "writearound",
        "rbd_cache_writethrough_until_flush": "on",
    }


def _job_text(custom: str) -> str:
    """What the block-layer tier gives fio for this job file (the cell's [global], the final flush
    included)."""
    job = validate_job_text(custom, "job.fio")
    return nbd_job(
        PRESETS["rand-write-4k"],
        uri="nbd+unix:///iomx?socket=nbd.sock",
        shape=JobShape(size_bytes=32 << 20, runtime_s=1),
        custom_text=job.text,
    ).text


def _sweep(
    tmp_path: Path,
    texts: dict[str, str],
    iops: dict[tuple[str, str], float],
    loaded: set[str] = frozenset(),
) -> tuple[Store, int]:
    """A finished sweep on one rbd backing: cache none and writeback × the workloads, 5 rounds; the
    runs of the workloads in `loaded` on a host flagged disturbed (the runner's stored verdict), the
    others quiet."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2, "mem_bytes": 4 << 30}),
        "p",
        "fp",
        "{}",
        [],
        [],
    )
    for cache in ("none", "writeback"):
        axes = _axes(cache)
        cid = store.cell_id(sid, f"blocklayer/raw/off/{cache}/threads/-/rbd/none", axes, RBD)
        for rnd in range(5):
            for pos, (w, text) in enumerate(texts.items()):
                value = iops[(w, cache)] * (1 + 0.02 * ((rnd * 3 + pos) % 5 - 2))  # ±4 % run to run
                store.record_run(
                    RunRecord(
                        cell_id=cid,
                        workload=w,
                        status="ok",
                        started_at=rnd,
                        finished_at=rnd + 1,
                        accel="none (QEMU block layer, no guest)",
                        cache_state="dropped",
                        page_cache_method="-",
                        metrics={"total.iops": value, "write.iops": value},
                        phases={},
                        job_text=_job_text(text),
                        round=rnd + 1,
                        round_position=pos,
                        disturbed=w in loaded,
                        disturbance=LOADED if w in loaded else (),
                    )
                )
    store.set_sweep_status(sid, "finished")
    return store, sid


# The loaded-host case: the job file that never flushes gets nothing from writeback (a
# little less: the writethrough cache costs CPU on a loaded host), the one that flushes gains.
IOPS = {
    (NEVER, "none"): 1000.0,
    (NEVER, "writeback"): 900.0,
    (JOURNAL, "none"): 600.0,
    (JOURNAL, "writeback"): 1500.0,
}


def test_two_custom_job_files_that_differ_in_flushing_get_the_sentence_that_explains_their_answers(
    tmp_path: Path,
) -> None:
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, JOURNAL: JOURNAL_TEXT}, IOPS, loaded={NEVER})
    rec = recommend(store, sid, threshold=0.05)
    answers = {v.workload: v.choice.cell for v in rec.verdicts if v.choice is not None}
    assert "cache=none" in answers[NEVER] and "cache=writeback" in answers[JOURNAL], answers
    [finding] = rec.findings
    # the cell's own final flush (end_fsync in its [global]) is no part of the job's shape; the nbd
    # engine is sent fdatasync=N as fsync=N (fio/jobs.py), and the stored text says what was sent
    assert (
        f"on {NEVER}, which never flushes, QEMU cache=writeback was slower than cache=none "
        "(0.90×" in finding
    )
    assert "[host loaded in 10 of 10 runs: CPU pressure, other processes' CPU use]" in finding
    assert f"with {JOURNAL}, which flushes every 16 writes (fsync=16), it was 2.50×" in finding
    assert "[host quiet: 0 of 10 runs disturbed]" in finding
    assert "a VM holding both kinds counts as flushing" in finding


def test_the_same_names_with_a_job_that_does_not_flush_get_no_sentence(tmp_path: Path) -> None:
    """The decision is the shape's: the same workload names and figures, but the second job file no
    longer flushes, so a writeback gain on it is no contrast with until-flush (and is said nowhere
    as one)."""
    never_too = JOURNAL_TEXT.replace("fdatasync=16\n", "")
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, JOURNAL: never_too}, IOPS, loaded={NEVER})
    assert recommend(store, sid, threshold=0.05).findings == []


def test_a_job_file_mixing_flushing_and_non_flushing_jobs_counts_as_flushing(
    tmp_path: Path,
) -> None:
    mixed = "file:jobs/database.fio"
    iops = {
        (NEVER, "none"): 1000.0,
        (NEVER, "writeback"): 1010.0,
        (mixed, "none"): 500.0,
        (mixed, "writeback"): 900.0,
    }
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, mixed: MIXED_TEXT}, iops)
    shapes = workload_shapes(store, cell_workloads(store, sid))
    assert shapes[mixed].mixed and shapes[mixed].flushes and not shapes[NEVER].flushes
    assert shapes[mixed].working_set == 32 << 20  # the cell's region, from the stored job text
    [finding] = recommend(store, sid, threshold=0.05).findings
    assert (
        f"with {mixed}, which mixes jobs that flush with jobs that never do (job data "
        "never flushes; job log "
        "flushes every write (fsync=1); on one disk the first flush turns librbd's cache "
        "writeback for all "
        "of them), it was 1.80×" in finding
    )
    assert (
        f"on {NEVER}, which never flushes, QEMU cache=writeback was no faster than cache=none"
        in finding
    )


@pytest.mark.parametrize(
    "never_gain, journal_gain, verbs",
    [
        (1.0, 1.0, ("no faster", "no faster")),  # the flushing one gains nothing either
        (1.0, 0.9, ("no faster", "slower")),
        # the quiet host: both writeback
        (1.09, 2.5, ("a little faster (not shown above 5%)", "faster")),
    ],
)
def test_without_the_trap_the_figures_of_each_shape_are_said_and_the_trap_is_not(
    tmp_path: Path, never_gain: float, journal_gain: float, verbs: tuple[str, str]
) -> None:
    """Both kinds of job file measured, the trap not shown: the sentence says what writeback
    measured for each, by its shape and the host's load, and that these figures do not show librbd's
    writethrough-until-flush."""
    iops = {
        (NEVER, "none"): 1000.0,
        (NEVER, "writeback"): 1000.0 * never_gain,
        (JOURNAL, "none"): 600.0,
        (JOURNAL, "writeback"): 600.0 * journal_gain,
    }
    store, sid = _sweep(tmp_path, {NEVER: NEVER_TEXT, JOURNAL: JOURNAL_TEXT}, iops)
    [finding] = recommend(store, sid, threshold=0.05).findings
    assert finding.startswith(
        "on rbd (librbd, rbd_cache_writethrough_until_flush=on, rbd_cache_policy=writearound) "
        "QEMU cache=writeback over cache=none, by what each workload does: "
    )
    assert f"{NEVER}, which never flushes: {never_gain:.2f}× (" in finding
    assert (
        f"[host quiet: 0 of 10 runs disturbed], {verbs[0]}; {JOURNAL}, which flushes "
        "every 16 writes (fsync=16): "
        f"{journal_gain:.2f}× (" in finding
    )
    assert finding.endswith(
        f"], {verbs[1]}. These figures do not show librbd's writethrough-until-flush as its rule "
        "asks (a workload that never flushes no faster than cache=none, one that flushes faster "
        "by more than 5%)."
    )


def test_one_kind_of_job_file_only_gets_no_rbd_sentence(tmp_path: Path) -> None:
    iops = {
        (NEVER, "none"): 1000.0,
        (NEVER, "writeback"): 1000.0,
        (JOURNAL, "none"): 600.0,
        (JOURNAL, "writeback"): 1500.0,
    }
    store, sid = _sweep(
        tmp_path, {NEVER: NEVER_TEXT, JOURNAL: JOURNAL_TEXT.replace("fdatasync=16\n", "")}, iops
    )
    assert recommend(store, sid, threshold=0.05).findings == []


# --- the host page cache and the iSCSI LUN's write cache, by shape --------------------------------

READER = "file:jobs/reader.fio"
READER_TEXT = "[lookups]\nrw=randread\nbs=4k\niodepth=4\n"
BIG_READER = "file:jobs/big-reader.fio"
BIG_READER_TEXT = "[scan]\nrw=randrw\nrwmixread=90\nbs=64k\n"


def _local_sweep(
    tmp_path: Path,
    values: dict[tuple[str, str], float],
    *,
    regions: dict[str, int],
    ram: int | None,
    backing: str = "dir",
    axis: str = "cache",
    settings: tuple[str, str] = ("none", "writeback"),
    texts: dict[str, str],
) -> tuple[Store, int]:
    """A finished sweep of the block-layer tier on one backing: two cells differing in `axis` × the
    job files, each run on its region (the cell's size in its stored job text), 5 rounds, a quiet
    host of `ram` bytes."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2, "mem_bytes": ram}), "p", "fp", "{}", [], []
    )
    for value in settings:
        axes = {**_axes("writeback" if axis != "cache" else value), "backing": backing, axis: value}
        axes.pop("rbd_cache_policy"), axes.pop("rbd_cache_writethrough_until_flush")
        cid = store.cell_id(
            sid,
            f"blocklayer/{axis}={value}",
            axes,
            {"backing_type": backing, "backing_label": backing},
        )
        for rnd in range(5):
            for pos, (w, text) in enumerate(texts.items()):
                job = validate_job_text(text, "job.fio")
                fio = nbd_job(
                    PRESETS["rand-write-4k"],
                    uri="nbd+unix:///iomx?socket=nbd.sock",
                    shape=JobShape(size_bytes=regions[w], runtime_s=1),
                    custom_text=job.text,
                ).text
                v = values[(w, value)] * (1 + 0.02 * ((rnd * 3 + pos) % 5 - 2))
                store.record_run(
                    RunRecord(
                        cell_id=cid,
                        workload=w,
                        status="ok",
                        started_at=rnd,
                        finished_at=rnd + 1,
                        accel="none (QEMU block layer, no guest)",
                        cache_state="dropped",
                        page_cache_method="-",
                        metrics={"total.iops": v},
                        phases={},
                        job_text=fio,
                        round=rnd + 1,
                        round_position=pos,
                        disturbed=False,
                    )
                )
    store.set_sweep_status(sid, "finished")
    return store, sid


PAGE_VALUES = {
    (READER, "none"): 9000.0,
    (READER, "writeback"): 40000.0,
    (BIG_READER, "none"): 2000.0,
    (BIG_READER, "writeback"): 2040.0,
}


def test_a_working_set_the_page_cache_holds_is_told_by_its_size_against_the_hosts_ram(
    tmp_path: Path,
) -> None:
    regions = {READER: 64 << 20, BIG_READER: 6 << 30}
    store, sid = _local_sweep(
        tmp_path,
        PAGE_VALUES,
        regions=regions,
        ram=8 << 30,
        texts={READER: READER_TEXT, BIG_READER: BIG_READER_TEXT},
    )
    [finding] = recommend(store, sid, threshold=0.05).findings
    assert "at most half of this host's 8 GiB of RAM" in finding
    assert f"{READER} (64 MiB, 100% reads): cache=writeback 4.44× (" in finding
    assert "[host quiet: 0 of 10 runs disturbed]" in finding
    assert f"({BIG_READER}, whose 6 GiB does not fit, 1.02×" in finding


@pytest.mark.parametrize(
    "ram, backing, why",
    [
        (64 << 20, "dir", "the same 64 MiB on a host of 64 MiB: not held"),
        (None, "dir", "RAM not recorded: not known"),
        (8 << 30, "rbd", "librbd, not the host page cache"),
    ],
)
def test_no_page_cache_sentence_where_the_page_cache_cannot_hold_it(
    tmp_path: Path, ram: int | None, backing: str, why: str
) -> None:
    store, sid = _local_sweep(
        tmp_path,
        PAGE_VALUES,
        regions={READER: 64 << 20, BIG_READER: 6 << 30},
        ram=ram,
        backing=backing,
        texts={READER: READER_TEXT, BIG_READER: BIG_READER_TEXT},
    )
    assert not any("page cache" in f for f in recommend(store, sid, threshold=0.05).findings), why


def test_a_lun_write_cache_is_told_by_flushing(tmp_path: Path) -> None:
    values = {
        (NEVER, "off"): 300.0,
        (NEVER, "on"): 1500.0,
        (JOURNAL, "off"): 250.0,
        (JOURNAL, "on"): 260.0,
    }
    kw = {
        "regions": {NEVER: 32 << 20, JOURNAL: 32 << 20},
        "ram": 8 << 30,
        "backing": "iscsi",
        "axis": "lun_write_cache",
        "settings": ("off", "on"),
    }
    store, sid = _local_sweep(
        tmp_path, values, texts={NEVER: NEVER_TEXT, JOURNAL: JOURNAL_TEXT}, **kw
    )
    [finding] = recommend(store, sid, threshold=0.05).findings
    assert f"sped up writes nobody flushes — {NEVER}, which never flushes, 5.00×" in finding
    assert (
        f"but not writes that are flushed — {JOURNAL}, which flushes every 16 writes "
        "(fsync=16), 1.04×" in finding
    )
    assert "a power loss of the target takes" in finding
    # the same figures when the second job file does not flush: nothing contrasts, nothing is said
    (tmp_path / "b").mkdir()
    store2, sid2 = _local_sweep(
        tmp_path / "b",
        values,
        texts={NEVER: NEVER_TEXT, JOURNAL: JOURNAL_TEXT.replace("fdatasync=16\n", "")},
        **kw,
    )
    assert recommend(store2, sid2, threshold=0.05).findings == []


# --- a real sweep: two custom job files on a lab Ceph ---------------------------------------------

# ceph-custom-jobs.toml's run, its job files beside it
CAPTURED = DATA / "answers" / "ceph-custom-jobs.sqlite"


def test_a_captured_ceph_sweep_of_two_job_files_explains_their_answers_in_every_output(
    tmp_path: Path,
) -> None:
    """never.fio (random 8 KiB writes, never a flush: cache=none and writeback 1.01× apart, a tie)
    and journal.fio (fdatasync every 16 writes: writeback 3.66×); every output carries the sentence
    that says why, from their shapes and figures. The tie keeps QEMU's default (the tie-break's
    key "keeper"), so the two jobs no longer get opposite cache answers on one Ceph (they did when
    the tie fell to cache=none's 1 % better mean)."""
    db = tmp_path / "c.sqlite"
    shutil.copy(CAPTURED, db)
    doc = json.loads(run_cli("recommend", "--db", str(db), "--format", "json").stdout)
    answers = {v["workload"]: v["choice"]["cell"] for v in doc["verdicts"] if v.get("choice")}
    assert (
        "cache=writeback" in answers["file:never.fio on rbd"]
        and "cache=writeback" in answers["file:journal.fio on rbd"]
    )
    [finding] = doc["findings"]
    assert (
        "on file:never.fio, which never flushes, QEMU cache=writeback was no faster than "
        "cache=none (1.01× "
        "(0.70–1.43) [host loaded in 5 of 16 runs" in finding
    )
    assert (
        "with file:journal.fio, which flushes every 16 writes (fsync=16), it was 3.66× (2.60–5.91)"
        in finding
    )
    text = " ".join(run_cli("recommend", "--db", str(db)).stdout.split())
    assert (
        "finding: librbd stays writethrough until the guest's first flush" in text
        and "file:never.fio" in text
    )
    md = " ".join(run_cli("recommend", "--db", str(db), "--format", "markdown").stdout.split())
    assert "which flushes every 16 writes (fsync=16)" in md
    html = tmp_path / "r.html"
    assert run_cli("report", "--db", str(db), "--html", str(html)).returncode == 0
    assert "which flushes every 16 writes (fsync=16)" in html.read_text()


def _ceph_processes(root: Path) -> list[int]:
    """ceph-mon / ceph-osd processes of the lab Ceph started under `root` (what the sweep must have
    stopped)."""
    return [
        p.pid
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] in ("ceph-mon", "ceph-osd")
        and str(root) in " ".join(p.info["cmdline"] or [])
    ]


# One run per cell: the test checks what the sweep records and how each job file's shape reads,
# not the speeds (the physics, 5 runs: bench/rbd_flush_physics.py --job-files).
LAB_PLAN = """
tier = ["blocklayer"]
format = ["raw"]
cache = ["none", "writeback"]
workloads = ["file:never.fio", "file:journal.fio"]
size = "32M"
image_size = "64M"
runtime = 1
null_ceiling = false
retry_disturbed = false  # what the sweep records is checked, not how clean its runs were
[repetitions]
min = 1
max = 1
[[backing]]
type = "rbd"
"""


@pytest.mark.slow
@needs("ceph-mon")
@needs("qemu-storage-daemon")
def test_two_job_files_on_a_lab_ceph_are_measured_and_read_as_they_flush(tmp_path: Path) -> None:
    """Job files other than the built-in plan's, swept on a lab-started Ceph under cache none and
    writeback: each cell stores its IOPS, each job file's shape reads as it flushes (the one that
    flushes every 16 writes, the one that never does), and nothing is left. The finding's sentence
    is the captured test's; the physics (writeback clearly faster only for the flushing job file,
    which a 5-run interval on a loaded 2-core host may not show) is in bench/rbd_flush_physics.py
    --job-files (issue 67: no speed asserted in a test)."""
    src = DATA / "answers" / "ceph-custom-jobs"
    for name in ("never.fio", "journal.fio"):
        shutil.copy(src / name, tmp_path / name)
    (tmp_path / "p.toml").write_text(LAB_PLAN)
    res = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    iops = {
        (r["axes"]["cache"], r["workload"]): r["median"]
        for r in rows["sweeps"][0]["results"]
        if r["metric"] == "total.iops"
    }
    cells = {(c, w) for c in ("none", "writeback") for w in ("file:never.fio", "file:journal.fio")}
    assert iops.keys() == cells and all(v > 0 for v in iops.values()), iops
    store = Store.open_existing(tmp_path / "r.sqlite")
    try:
        shapes = workload_shapes(store, cell_workloads(store, 1))
    finally:
        store.close()
    assert shapes["file:journal.fio"].flushes and not shapes["file:never.fio"].flushes
    assert _ceph_processes(tmp_path) == []
    assert (
        run_cli("clean", "--workdir", str(tmp_path / "iomatrix-work"), cwd=tmp_path).returncode == 0
    )


def test_figures_of_one_workload_are_told_apart_by_the_axes_that_differ() -> None:
    """Two aio modes of one workload: each figure names its aio, not the axes every pair shares."""

    def cell(cid: int, cache: str, aio: str, iops: float) -> CellWorkload:
        axes = {"tier": "blocklayer", "format": "raw", "cache": cache, "aio": aio, "backing": "dir"}
        cw = CellWorkload(
            cid, f"k{cid}", axes, {"backing_type": "dir", "backing_label": "dir"}, READER, []
        )
        cw.samples["total.iops"] = [iops * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)]
        return cw

    cws = [
        cell(1, "none", "threads", 9000),
        cell(2, "writeback", "threads", 40000),
        cell(3, "none", "native", 9500),
        cell(4, "writeback", "native", 30000),
    ]
    shapes = {READER: shape_of_text(READER, "[j]\nrw=randread\nsize=64m\n")}
    text = page_cache_finding(cws, 0.05, shapes, lambda w: "total.iops", 8 << 30)
    assert text is not None
    assert f"{READER} (aio=threads) (64 MiB, 100% reads): cache=writeback 4.44×" in text
    assert f"{READER} (aio=native) (64 MiB, 100% reads): cache=writeback 3.16×" in text


LUN_CAPTURED = DATA / "answers" / "iscsi-lun-cache-jobs.sqlite"  # iscsi-lun-cache-jobs.toml's run


def test_a_captured_iscsi_sweep_tells_the_lun_write_cache_by_flushing(tmp_path: Path) -> None:
    """A real tgt LUN, write cache on and off, two job files: never.fio gained 2.32×, commit.fio
    (fdatasync after every write) 1.00×: the sentence, in JSON and on the terminal."""
    db = tmp_path / "l.sqlite"
    shutil.copy(LUN_CAPTURED, db)
    [finding] = json.loads(run_cli("recommend", "--db", str(db), "--format", "json").stdout)[
        "findings"
    ]
    assert (
        "sped up writes nobody flushes — file:never.fio, which never flushes, 2.32× (1.40–3.75)"
        in finding
    )
    assert (
        "but not writes that are flushed — file:commit.fio, which flushes every write "
        "(fsync=1), 1.00× "
        "(0.64–1.45)" in finding
    )
    text = " ".join(run_cli("recommend", "--db", str(db)).stdout.split())
    assert "finding: the iSCSI LUN's write cache (lun_write_cache=on over off)" in text
