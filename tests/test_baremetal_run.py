"""A real tiny bare-metal sweep through the CLI, and Ctrl-C / SIGTERM + resume."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import descendants_named, iomatrix_argv, needs, run_cli, sigint_default

pytestmark = [pytest.mark.slow, needs("fio")]

TINY = """
tier = ["baremetal"]
cache = ["none", "writeback"]
workloads = ["rand-read-4k", "db-write-4k-fdatasync"]
size = "16M"
runtime = 0.3
retry_disturbed = false  # every run's records are checked, not how clean it was: no re-runs
[repetitions]
min = 2
max = 2
"""


def test_tiny_plan_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY)
    proc = run_cli(
        "run", "tiny.toml", "--db", "r.sqlite", "--monitor-interval", "0.1", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 runs ok, 0 failed" in proc.stdout

    doc = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    assert doc["format"] == "iomatrix-results" and doc["version"] == 1
    sweep = doc["sweeps"][0]
    assert sweep["status"] == "finished"
    assert sweep["host"]["fio_version"].startswith("fio-")
    assert sweep["host"]["kernel"] == os.uname().release
    cells = {(c["axes"]["cache"], c["workload"]): c for c in sweep["cells"]}
    assert set(cells) == {
        (c, w) for c in ("none", "writeback") for w in ("rand-read-4k", "db-write-4k-fdatasync")
    }
    for (cache, workload), c in cells.items():
        assert c["ok_runs"] == 2 and c["failed_runs"] == 0
        assert c["accel"] == ["none (bare metal)"]
        assert c["backing"]["backing_type"] == "dir" and c["backing"].get("fs_type")
        assert "cpu.usr_pct" in c["monitor"] and "mem.used_mb" in c["monitor"]
        if workload == "rand-read-4k":
            assert ("O_DIRECT" in c["page_cache"][0]) == (cache == "none")
    rows = {(r["axes"]["cache"], r["workload"], r["metric"]): r for r in sweep["results"]}
    iops = rows[("none", "rand-read-4k", "read.iops")]
    assert iops["n"] == 2 and len(iops["samples"]) == 2 and iops["mean"] > 0
    assert iops["ci95_low"] <= iops["mean"] <= iops["ci95_high"]
    # fdatasync after every write was really issued
    assert rows[("none", "db-write-4k-fdatasync", "sync.count")]["mean"] > 0
    # on bare metal the I/O path is fio itself: its CPU per I/O is measured in every cell
    assert all(rows[(c, w, "cost.cpu_us_per_io")]["mean"] > 0 for c, w in cells)

    csv_text = run_cli("results", "--db", "r.sqlite", "--format", "csv", cwd=tmp_path).stdout
    table = list(csv.DictReader(io.StringIO(csv_text)))
    assert {r["metric"] for r in table} >= {"read.iops", "write.iops", "sync.lat_mean_us"}

    # fio's raw JSON is kept with each run, and data files are gone from the backing.
    db = sqlite3.connect(tmp_path / "r.sqlite")
    raws = [r[0] for r in db.execute("SELECT raw_output FROM runs")]
    assert all(json.loads(r)["fio version"].startswith("fio-") for r in raws)
    assert not list((tmp_path / "iomatrix-work").rglob("iomatrix-baremetal.dat*"))


RESUME = """
tier = ["baremetal"]
cache = ["none", "writeback"]
workloads = ["rand-write-4k"]
size = "16M"
runtime = 1
retry_disturbed = false  # the test counts runs exactly
[repetitions]
min = 4
max = 4
"""


def _ok_runs(db: Path) -> list[int]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(db, timeout=5)
        return [r[0] for r in con.execute("SELECT id FROM runs WHERE status='ok' ORDER BY id")]
    except sqlite3.OperationalError:
        return []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_completed_runs_and_resume_skips_them(
    tmp_path: Path, sig: signal.Signals
) -> None:
    (tmp_path / "p.toml").write_text(RESUME)
    db = tmp_path / "r.sqlite"
    # Its own process group, signalled as a whole: what Ctrl-C in a terminal does.
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    deadline = time.monotonic() + 120
    while len(_ok_runs(db)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    kept = _ok_runs(db)
    assert 2 <= len(kept) < 8

    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT status FROM sweeps").fetchone()[0] == "interrupted"
    # every row is a complete run: ok rows have their samples
    for (rid,) in con.execute("SELECT id FROM runs WHERE status='ok'"):
        assert con.execute("SELECT COUNT(*) FROM samples WHERE run_id=?", (rid,)).fetchone()[0] > 0
    con.close()
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()
    ps = subprocess.run(
        ["ps", "-o", "pid,ppid,args", "-p", ",".join(leftovers or ["1"])],
        capture_output=True,
        text=True,
    ).stdout
    assert leftovers == [], f"left behind:\n{ps}"
    assert not list((tmp_path / "iomatrix-work").rglob("iomatrix-baremetal.dat*"))

    again = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming: {len(kept)} completed runs kept" in again.stdout
    final = _ok_runs(db)
    assert final[: len(kept)] == kept  # nothing lost, nothing redone
    assert len(final) == 8  # 2 cells × 4 repetitions, exactly
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT status FROM sweeps")] == ["finished"]


# A finished sweep made to look unfinished by an older release: what resumes is checked, never a
# figure, and no interrupt has to land mid-sweep (RESUME's 1 s runs are for the test above), so two
# cells of two short runs on a small file; RESUME's keys, so the old formula fingerprints the same
# settings.
OLDER = """
tier = ["baremetal"]
cache = ["none", "writeback"]
workloads = ["rand-write-4k"]
size = "4M"
runtime = 0.3
retry_disturbed = false
[repetitions]
min = 2
max = 2
"""


def test_an_unfinished_sweep_from_an_older_release_resumes(tmp_path: Path) -> None:
    """Earlier releases fingerprinted every plan setting, defaults included, so each new plan key
    stopped their unfinished sweeps from resuming. Such a sweep (its fingerprint rewritten to the
    old formula) resumes."""
    from iomatrix.plan.load import load_plan

    (tmp_path / "p.toml").write_text(OLDER)
    first = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    plan, _ = load_plan(str(tmp_path / "p.toml"))
    legacy = plan.legacy_fingerprints()[0]
    assert legacy != plan.fingerprint()
    con = sqlite3.connect(tmp_path / "r.sqlite")
    con.execute("UPDATE sweeps SET status='interrupted', plan_fingerprint=?", (legacy,))
    con.commit()
    con.close()
    again = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming: 4 completed runs kept" in again.stdout
    con = sqlite3.connect(tmp_path / "r.sqlite")
    assert [r[0] for r in con.execute("SELECT status FROM sweeps")] == ["finished"]
    assert con.execute("SELECT COUNT(*) FROM runs WHERE status='ok'").fetchone()[0] == 4


LONG_RUN = """
tier = ["baremetal"]
cache = ["none"]
workloads = ["rand-write-4k"]
size = "16M"
runtime = 600
[repetitions]
min = 1
max = 1
"""


def _fio_processes_under(pid: int) -> list[int]:
    return [p.pid for p in descendants_named(pid, "fio")]


def test_kill_9_of_the_runner_stops_fio_at_once(tmp_path: Path) -> None:
    """fio has no parent-death signal of its own; iomatrix starts it with PR_SET_PDEATHSIG, so a
    SIGKILL of iomatrix ends fio's I/O instead of leaving it writing to the backing (and `clean`
    unable to unmount)."""
    import psutil

    (tmp_path / "p.toml").write_text(LONG_RUN)
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    fio: list[int] = []
    deadline = time.monotonic() + 180

    def measuring() -> bool:  # fio runs and has laid out its data file
        return bool(fio) and any((tmp_path / "iomatrix-work").rglob("iomatrix-baremetal.dat*"))

    while not measuring() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        fio = _fio_processes_under(proc.pid)
    assert measuring(), "fio never started measuring"
    time.sleep(1.0)  # well into the 600 s job
    procs = [psutil.Process(p) for p in fio]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # The 600 s job must end because its parent died, long before its runtime (a bound, not a speed
    # test).
    _, alive = psutil.wait_procs(procs, timeout=120)
    running = [p.pid for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for pid in running:  # do not leave a 600 s writer behind when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not running, "fio outlived iomatrix"
