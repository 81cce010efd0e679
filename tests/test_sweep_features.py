"""Real sweeps exercising features end to end: custom fio job files, eatmydata, failing guests,
filesystem workloads; and the weighted scores and sweep comparison on a real sweep's stored runs."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from iomatrix.report.render import end_of_run_text
from iomatrix.store import Store
from tests.conftest import DATA, needs, run_cli

pytestmark = [pytest.mark.slow, needs("fio")]


def results(tmp_path: Path, db: str = "r.sqlite") -> dict:
    proc = run_cli("results", "--db", db, "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["sweeps"][-1]


def metric(sweep: dict, metric_name: str, workload: str | None = None, **axes: str) -> dict:
    rows = [
        r
        for r in sweep["results"]
        if r["metric"] == metric_name
        and (workload is None or r["workload"] == workload)
        and all(r["axes"][k] == v for k, v in axes.items())
    ]
    assert len(rows) == 1, (metric_name, axes, len(rows))
    return rows[0]


@needs("eatmydata")
def test_custom_job_file_and_eatmydata_on_bare_metal(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "twojobs.fio").write_text(
        "[small]\nrw=randwrite\nbs=4k\nfdatasync=1\ntime_based=1\nruntime=500ms\n"
        "[large]\nrw=write\nbs=64k\ntime_based=1\nruntime=500ms\n"
    )
    (tmp_path / "p.toml").write_text("""
tier = ["baremetal"]
cache = ["writeback"]
modifier = ["none", "eatmydata"]
workloads = ["db-write-4k-fdatasync", "file:jobs/twojobs.fio"]
size = "16M"
runtime = 0.5
[repetitions]
min = 2
max = 2
""")
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep = results(tmp_path)
    plain = metric(sweep, "sync.lat_mean_us", modifier="none", workload="db-write-4k-fdatasync")
    eaten = metric(
        sweep, "sync.lat_mean_us", modifier="eatmydata", workload="db-write-4k-fdatasync"
    )
    # under libeatmydata fdatasync returns without reaching the kernel
    assert eaten["mean"] < 0.5 * plain["mean"], (eaten["mean"], plain["mean"])
    custom = metric(sweep, "total.iops", modifier="none", workload="file:jobs/twojobs.fio")
    small = metric(sweep, "write.iops", modifier="none", workload="file:jobs/twojobs.fio")
    assert custom["n"] == 2 and custom["mean"] >= small["mean"] > 0  # two jobs add up


@needs("qemu-system-x86_64")
def test_guest_that_never_finishes_is_killed_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text("""
tier = ["guest", "baremetal"]
format = ["raw"]
cache = ["none"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "64M"
runtime = 1
null_ceiling = false
run_timeout = 1.5
[repetitions]
min = 1
max = 1
""")
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path)
    # The sweep goes on past the hung guest, and its exit status says a unit gave up (3), not
    # success. (A TCG guest cannot boot and run 1 s of fio within 1.5 s, however fast the host; bare
    # metal's 1 s of fio usually fits, but a loaded host may push it past 1.5 s too, so its outcome
    # is not asserted, only that it was run after the guest's unit gave up.)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "gave up" in proc.stdout
    db = sqlite3.connect(tmp_path / "r.sqlite")
    guest_failed = db.execute(
        "SELECT r.error FROM runs r JOIN cells c ON c.id=r.cell_id "
        "WHERE c.tier='guest' AND r.status='failed'"
    ).fetchall()
    assert len(guest_failed) == 3  # the first attempt and two retries, then the unit gives up
    assert all("1.5" in err and "kill" in err.lower() for (err,) in guest_failed), guest_failed
    assert (
        db.execute(
            "SELECT COUNT(*) FROM runs r JOIN cells c ON c.id=r.cell_id "
            "WHERE c.tier='guest' AND r.status='ok'"
        ).fetchone()[0]
        == 0
    )
    assert (
        db.execute(
            "SELECT COUNT(*) FROM runs r JOIN cells c ON c.id=r.cell_id WHERE c.tier='baremetal'"
        ).fetchone()[0]
        >= 1
    )
    table = run_cli("results", "--db", "r.sqlite", cwd=tmp_path).stdout
    assert "failed run" in table


@needs("qemu-system-x86_64")
def test_filesystem_workloads_in_the_guest(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text("""
tier = ["guest"]
format = ["qcow2"]
cache = ["writeback"]
workloads = ["fs-read", "fs-write"]
guest_fs = "ext4"
image_size = "1G"
null_ceiling = false
run_timeout = 240
retry_disturbed = false  # each step's time is checked to be there, not its figure: no second boot for a retry
[repetitions]
min = 1
max = 1
""")  # noqa: E501
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = results(tmp_path)
    for w in ("fs-read", "fs-write"):
        row = metric(sweep, "workload.seconds", workload=w)
        assert row["n"] == 1 and row["mean"] > 0
        steps = [
            r["metric"]
            for r in sweep["results"]
            if r["workload"] == w and r["metric"].startswith("fs.")
        ]
        assert steps, f"{w} reported no timed steps"


def test_weighted_scores_and_sweep_comparison(tmp_path: Path) -> None:
    """The weighted scores rank a real sweep's guest cells against bare metal's cache=none figures
    (the factor), and compare lists and tests two sweeps' cells. The sweep is
    data/answers/weighted-scores.sqlite, a real run of weighted-scores.toml beside it (bare metal
    and TCG guests, both cache modes, the four workloads the scores read): what is checked is what
    rank and compare make of a sweep's stored runs, which a fresh ~50 s of TCG guests per test run
    added nothing to (the guest tier's sweep is test_guest_sweep's, rounds in one boot included)."""
    shutil.copyfile(DATA / "answers" / "weighted-scores.sqlite", tmp_path / "a.sqlite")
    # What `run` printed at the sweep's end (its exit 0 said it rendered): the answer for the VM,
    # each workload named (two runs a cell: none ranked yet), the TCG guests said so.
    store = Store.open_existing(tmp_path / "a.sqlite")
    try:
        end = end_of_run_text(store, 1, 100)
    finally:
        store.close()
    assert end.startswith("Answer for vm · sweep 1 (weighted-scores, finished)"), end
    assert "TCG" in end and "more: iomatrix recommend --detail" in end, end
    for workload in ("seq-read-1m", "rand-read-4k", "seq-write-1m", "rand-write-4k"):
        assert workload in end, (workload, end)
    # The second sweep: the first one's runs at 60 % (a copy with its samples scaled).
    shutil.copyfile(tmp_path / "a.sqlite", tmp_path / "b.sqlite")
    con = sqlite3.connect(tmp_path / "b.sqlite")
    con.execute("UPDATE samples SET value = value * 0.6")
    con.commit()
    con.close()
    for score in ("weighted-read", "weighted-write", "weighted-mixed"):
        out = run_cli("rank", "--db", "a.sqlite", "--score", score, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert f"top performers, {score}" in out.stdout and "factor" in out.stdout
        assert "cache=none" in out.stdout and "cache=writeback" in out.stdout
    cmp = run_cli("compare", "a.sqlite", "b.sqlite", "--all", cwd=tmp_path)
    assert cmp.returncode == 0, cmp.stderr
    assert "changed significantly" in cmp.stdout and "Holm" in cmp.stdout
    # every cell × workload is listed with --all (2 guest + 1 bare)
    assert cmp.stdout.count("rand-read-4k") == 3
