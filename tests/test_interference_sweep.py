"""Interference acted upon, end to end: a real bare-metal sweep while real busy processes load every
CPU.

The runs are judged from the host samples the sampler takes during them (PSI cpu, other processes'
CPU), stored as disturbed with the reason, retried at the end of their round within the budget, and
shown by `results` (table, JSON, CSV) and `rank`; every unit's stop is stored with its kind."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs, run_cli

pytestmark = [pytest.mark.slow, needs("fio")]

PLAN = """
tier = ["baremetal"]
cache = ["none", "writeback"]
workloads = ["rand-read-4k"]
size = "16M"
runtime = 0.5
[repetitions]
min = 2
max = 3
"""


def test_runs_under_cpu_load_are_flagged_retried_and_shown(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(PLAN)
    # More busy loops than CPUs: some task always waits for a CPU (PSI cpu some near 100%).
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range((os.cpu_count() or 1) + 1)
    ]
    try:
        proc = run_cli(
            "run",
            "p.toml",
            "--db",
            "r.sqlite",
            "--monitor-interval",
            "0.1",
            cwd=tmp_path,
            timeout=600,
        )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "disturbed by the rest of the host" in proc.stdout

    db = sqlite3.connect(tmp_path / "r.sqlite")
    runs = db.execute(
        "SELECT id, status, disturbed, disturbance_json, retry_of FROM runs ORDER BY id"
    ).fetchall()
    ok = [r for r in runs if r[1] == "ok"]
    assert all(r[2] is not None for r in ok), "every ok run is judged"
    flagged = [r for r in ok if r[2] == 1]
    assert flagged and all("CPU" in r[3] or "other processes" in r[3] for r in flagged)
    retries = [r for r in runs if r[4] is not None]
    assert retries, "the first disturbed runs are retried (the host is not yet known to be busy)"
    ids = {r[0] for r in runs}
    assert all(r[4] in ids and r[4] < r[0] for r in retries)
    # Every unit's stop is stored, once, with its kind.
    stops = db.execute("SELECT kind, reason, round, ok_runs FROM unit_stops").fetchall()
    assert len(stops) == 2 and all(
        k
        in {"eliminated", "equivalent", "unresolved", "settled", "converged", "max-runs", "budget"}
        for k, *_ in stops
    ), stops

    doc = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    sweep = doc["sweeps"][0]
    shown = [d for c in sweep["cells"] for d in c["disturbed_runs"]]
    assert {d["run_id"] for d in shown} == {r[0] for r in flagged}
    assert all(d["reasons"] for d in shown)
    # A run its clean retry replaced is listed, not analysed: n counts one run per round.
    for c in sweep["cells"]:
        assert set(c["replaced_runs"]).isdisjoint(
            rid for r in sweep["results"] if r["cell"] == c["cell"] for rid in r["run_ids"]
        )
        assert c["stop"]["kind"] and c["stop"]["ok_runs"] == c["ok_runs"]
    rows = list(
        csv.DictReader(
            io.StringIO(
                run_cli("results", "--db", "r.sqlite", "--format", "csv", cwd=tmp_path).stdout
            )
        )
    )
    assert any(r["disturbed_runs"] for r in rows) and all(r["stop"] for r in rows)
    table = run_cli("results", "--db", "r.sqlite", cwd=tmp_path).stdout
    assert "disturbed run(s)" in table
    rank = run_cli("rank", "--db", "r.sqlite", "--min-runs", "2", cwd=tmp_path)
    assert rank.returncode == 0 and "disturbed run" in rank.stdout, rank.stdout + rank.stderr
