"""The guest's filesystem jobs (fs-read, fs-write) have a shape (guest/fs_shape.py), so the answer
says where their figures were the host page cache's (issue 70: full-matrix-fs picked
cache=writethrough for fs-read with no word of it).

The captured sweep (tests/data/answers/full-matrix-fs-raw.sqlite) is a slice of the built-in
full-matrix-fs plan's sweep on this project's 2-core TCG host (2026-11-29, 844 runs in all): its ten
raw · preallocation=off · aio=threads cells (five cache modes, virtio-blk and IDE), each with every
run, sample and stop; the host monitor's series kept are the ones the interference rule reads and
the host disk's and dirty memory's, which the shapes' claims rest on."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import statistics
import subprocess
from pathlib import Path

import pytest

from iomatrix.domain import CacheMode
from iomatrix.guest.fs_shape import FS_READ_SET, FS_WRITE_MB, fs_shape
from iomatrix.report.query import CellWorkload
from iomatrix.report.shape_findings import memory_served
from tests.conftest import DATA, iomatrix_argv

SLICE = DATA / "answers" / "full-matrix-fs-raw.sqlite"
MIB = 1 << 20


def _cli(*args: str, width: int = 200) -> str:
    """The command's stdout at `width` columns (it must exit 0)."""
    env = {**os.environ, "COLUMNS": str(width)}
    done = subprocess.run(
        [*iomatrix_argv(), *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _cell(cache: str) -> CellWorkload:
    axes = {"tier": "guest", "format": "raw", "cache": cache, "aio": "threads", "bus": "ide"}
    return CellWorkload(1, "k", axes, {"backing_type": "dir", "backing_label": "dir"}, "w", [])


def test_each_filesystem_job_has_the_shape_of_its_steps() -> None:
    read, write = fs_shape("fs-read"), fs_shape("fs-write")
    assert read is not None and write is not None and fs_shape("fio") is None
    # fs-read: reads, no writes in its timed steps, of the tree its set-up wrote
    assert read.read_share == 1.0 and not read.writes and read.reads_written
    assert read.working_set == FS_READ_SET == 128 * MIB
    # fs-write: writes, each made durable within the timed span
    assert write.writes and write.flushes and write.jobs[0].flush_every == FS_WRITE_MB
    assert write.read_share == 0.0 and not write.reads_written
    # neither is sized by the plan
    assert read.fixed_set and write.fixed_set


@pytest.mark.parametrize(
    "cache, reads, writes",
    [
        ("none", "", ""),
        ("directsync", "", ""),
        ("writethrough", "reads", ""),
        # writeback: fs-write's syncs put every write on the disk within its run
        ("writeback", "reads", ""),
        # unsafe drops them: the writes stay in memory
        ("unsafe", "reads", "writes"),
    ],
)
def test_what_the_page_cache_serves_of_each_job(cache: str, reads: str, writes: str) -> None:
    assert memory_served(_cell(cache), fs_shape("fs-read")) == reads  # type: ignore[arg-type]
    assert memory_served(_cell(cache), fs_shape("fs-write")) == writes  # type: ignore[arg-type]


def _per_run(db: sqlite3.Connection, workload: str, field: str, last: int | None) -> dict:
    """cache mode → each ok run's MB of `field` (a per-second rate summed), over its last `last`
    seconds of samples (None: the whole run)."""
    out: dict[str, list[float]] = {}
    runs = db.execute(
        "SELECT r.id, c.cache FROM runs r JOIN cells c ON c.id = r.cell_id "
        "WHERE r.workload = ? AND r.status = 'ok'",
        (workload,),
    ).fetchall()
    for rid, cache in runs:
        rates = [
            v
            for (v,) in db.execute(
                "SELECT value FROM monitor WHERE run_id = ? AND field = ? ORDER BY t",
                (rid, field),
            )
        ]
        out.setdefault(cache, []).append(sum(rates[-last:] if last else rates))
    return out


def test_the_sweeps_own_host_disk_counters_bear_the_shapes_out() -> None:
    """What memory_served says of each cache mode is what the host disk saw in the captured sweep:
    where it says fs-read's reads came from the page cache, the disk read (next to) nothing in the
    run's last seconds (the timed steps), and where not, it read; where it says fs-write's writes
    stayed in memory, the disk took (next to) none of them during the run."""
    db = sqlite3.connect(f"file:{SLICE}?immutable=1", uri=True)
    try:
        reads = _per_run(db, "fs-read", "disk.read_mbps", last=4)
        writes = _per_run(db, "fs-write", "disk.write_mbps", last=None)
    finally:
        db.close()
    assert set(reads) == set(writes) == {m.value for m in CacheMode}
    for cache in reads:
        read_mb, written_mb = statistics.median(reads[cache]), statistics.median(writes[cache])
        if memory_served(_cell(cache), fs_shape("fs-read")):  # type: ignore[arg-type]
            assert read_mb < 1, (cache, reads[cache])
        else:
            assert read_mb > 5, (cache, reads[cache])
        if memory_served(_cell(cache), fs_shape("fs-write")):  # type: ignore[arg-type]
            assert written_mb < 16, (cache, writes[cache])
        else:  # 3 × 128 MiB and the 64 MiB tree, flushed within the run
            assert written_mb > 300, (cache, writes[cache])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("fs") / "full-matrix-fs.sqlite"
    shutil.copy(SLICE, db)  # a report may migrate the database
    return db


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_first_screen_says_which_figures_were_memorys(sweep: Path, width: int) -> None:
    out = _cli("recommend", "--db", str(sweep), width=width)
    lines = out.splitlines()
    assert len(lines) <= 30 and all(len(line) <= width for line in lines), out
    flat = " ".join(out.split())
    [finding] = re.findall(r"finding: (.*?)(?: Use| each axis)", flat)
    assert "cache=writeback/writethrough/unsafe on fs-read" in finding, finding
    assert "cache=unsafe on fs-write" in finding, finding
    assert "measured memory, not the disk" in finding and "cache=none" in finding, finding
    # their working set is the built-in tree's: the plan's size is not what measures the disk
    assert "plan size" not in finding, finding
    # a job's time reads as faster/slower, never as a latency
    assert "latency" not in flat and re.search(r"× \([\d.]+–[\d.]+\) (faster|slower) than", flat)


def test_detail_json_and_html_carry_it(sweep: Path, tmp_path: Path) -> None:
    detail = " ".join(_cli("recommend", "--db", str(sweep), "--detail").split())
    assert (
        "fs-read and fs-write work on the built-in guest's tree whatever the plan's size: "
        "cache=none's figures are the disk's" in detail
    )
    # the pick that rests on memory's figures says so beside its ratio against cache=none
    assert "page cache on fs-read: cache=writethrough measured memory, not the disk" in detail
    doc = _cli("recommend", "--db", str(sweep), "--format", "json")
    assert "cache=unsafe on fs-write" in doc
    page = tmp_path / "report.html"
    _cli("report", "--db", str(sweep), "--html", str(page))
    text = " ".join(re.sub(r"<[^>]+>", " ", page.read_text()).split())
    assert "cache=unsafe on fs-write" in text.replace("&#x27;", "'")


def test_plan_says_the_size_does_not_measure_the_filesystem_jobs_disk() -> None:
    """`iomatrix plan full-matrix-fs`: its only workloads are the filesystem jobs, whose tree no
    size changes, so the line names what the page cache serves of each and that cache=none
    measures the disk, not a size of twice the RAM (which it said before: 48 GiB of images for
    nothing)."""
    from iomatrix.commands.plan import page_cache_line
    from iomatrix.plan.load import load_plan
    from iomatrix.runner import plan_expansion

    p, base = load_plan("full-matrix-fs")
    line = page_cache_line(p, plan_expansion(p, base, set()), 8 << 30, "full-matrix-fs")
    assert line is not None
    assert (
        "fs-read's reads under cache=writeback/writethrough/unsafe; fs-write's writes under "
        "cache=unsafe" in line
    )
    assert "cache=none measures their disk" in line and "twice the RAM" not in line
    # a host too small to know: nothing said
    assert page_cache_line(p, plan_expansion(p, base, set()), None, "full-matrix-fs") is None
