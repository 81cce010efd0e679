"""Issue 27's housekeeping, on a real (tiny) bare-metal sweep through the CLI: `run` reclaims what a
killed sweep left in its workdir and says so; a finished sweep leaves no -wal/-shm beside its
database; outside a terminal each run is one line of at most 100 characters, and the sweep ends with
the headline."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from iomatrix.backing import leftovers
from iomatrix.commands.run import reclaim_leftovers
from tests.conftest import iomatrix_argv, needs

PLAN = """name = "housekeeping-tiny"
description = "bare metal: 2 cache modes, 1 s runs"
tier = ["baremetal"]
cache = ["none", "writeback"]
workloads = ["rand-read-4k"]
size = "16M"
runtime = 1
time_budget = "3m"
retry_disturbed = false
[repetitions]
min = 3
max = 3
"""


def _leave_behind(work: Path) -> Path:
    """A temp file recorded in the ledger by a process that has since died (a killed sweep's
    image)."""
    work.mkdir(parents=True, exist_ok=True)
    img = work / "killed-sweep.qcow2"
    leftovers.register_temp_path(work, img)
    img.write_bytes(b"qcow")
    dead = subprocess.Popen(["true"])
    dead.wait()

    def by_the_dead(e: leftovers.Entry) -> None:
        e.pid, e.pid_start = dead.pid, None

    leftovers._edit(work, by_the_dead)
    return img


def test_reclaim_removes_a_dead_sweeps_leftovers_and_says_what(tmp_path: Path) -> None:
    img = _leave_behind(tmp_path / "work")
    lines = reclaim_leftovers(tmp_path / "work")
    assert not img.exists() and lines and any(str(img) in line for line in lines)
    assert leftovers.pending(tmp_path / "work") == []
    assert reclaim_leftovers(tmp_path / "work") == []  # nothing left: nothing said


@pytest.mark.slow
@needs("fio")
def test_a_sweep_reclaims_ends_with_the_answer_and_leaves_no_wal(tmp_path: Path) -> None:
    (tmp_path / "plan.toml").write_text(PLAN)
    img = _leave_behind(tmp_path / "work")
    db = tmp_path / "r.sqlite"
    # piped at 40 columns: every message whole all the same, its paths unbroken (issue 70: a log
    # of a run held "results → " and the database's name on two lines)
    res = subprocess.run(
        [
            *iomatrix_argv(),
            *("run", str(tmp_path / "plan.toml"), "--db", str(db)),
            *("--workdir", str(tmp_path / "work")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "40"},
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert not img.exists() and "reclaimed from a killed sweep" in res.stdout
    lines = res.stdout.splitlines()
    for start, whole in (
        ("housekeeping-tiny: ", f"results → {db}"),
        ("reclaimed from a killed sweep: ", str(img)),
        ("sweep ", "accelerator: baremetal=none"),
    ):
        line = next((x for x in lines if x.startswith(start)), "")
        assert whole in line, (start, res.stdout)
    # the commands to paste next, too long for 40 columns together: one a line, each whole
    after = lines[lines.index("next:") + 1 :] if "next:" in lines else []
    assert f"  iomatrix rank --db {db}" in after[:3], res.stdout
    assert not (tmp_path / "r.sqlite-wal").exists() and not (tmp_path / "r.sqlite-shm").exists()
    run_lines = [line for line in res.stdout.splitlines() if line.startswith(("ok ", "FAILED "))]
    assert len(run_lines) == 6 and all(len(line) <= 100 for line in run_lines)
    assert "Answer for " in res.stdout and "<disk" in res.stdout
