"""A real, short block-layer sweep with `--role database` (issue 53): the role's jobs run through
fio over NBD into qemu-storage-daemon like any workload, and every output answers the role first."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import needs, run_cli

PLAN = """
tier = ["blocklayer"]
format = ["raw"]
cache = ["none", "writeback"]
aio = ["threads"]
workloads = ["rand-read-4k"]
size = "16M"
image_size = "32M"
runtime = 0.5
null_ceiling = false
time_budget = "5m"
# What the role's answer and outputs say is checked, not how clean the runs were: a retry of a run
# the loaded host disturbed was one run more per disturbed run (issue 67).
retry_disturbed = false
[repetitions]
min = 3
max = 3
# The micro-workload is there to be shown as detail after the role's answer: one cell of it does
# that (issue 67: its second cell was 3 runs no assertion read). The role's jobs run on both cells,
# which the answer chooses between.
[blocklayer.rand-read-4k]
cache = ["none"]
"""


@pytest.mark.slow
@needs("fio")
@needs("qemu-storage-daemon")
def test_blocklayer_sweep_with_a_role(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(PLAN)
    proc = run_cli(
        "run", "p.toml", "--role", "database", "--db", "r.sqlite", cwd=tmp_path, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The end of run answers the role first, before the picks of its jobs; the micro-workload is
    # detail.
    out = proc.stdout
    assert "For a database VM: " in out, out
    answer = out[out.index("For a database VM: ") :]
    assert "rand-read-4k" not in answer.split("more: iomatrix recommend --detail")[0]

    db = sqlite3.connect(tmp_path / "r.sqlite")
    runs = db.execute(
        "SELECT workload, COUNT(*) FROM runs WHERE status = 'ok' GROUP BY workload"
    ).fetchall()
    # the role's jobs: 2 cells × 3; the micro-workload: 1 cell × 3
    assert {w for w, n in runs if n >= 6} == {"database:data", "database:log"}
    assert dict(runs)["rand-read-4k"] >= 3

    doc = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    metrics = {(r["workload"], r["metric"]) for r in doc["sweeps"][0]["results"]}
    # The data job reads (prefilled region) and writes at its offered rate; the log flushes after
    # every write.
    assert {
        ("database:data", "read.clat_p99_us"),
        ("database:data", "write.clat_p99_us"),
        ("database:data", "load.achieved_frac"),
        ("database:log", "write.iops"),
        ("database:log", "sync.count"),
    } <= metrics

    rec = run_cli("recommend", "--db", "r.sqlite", "--format", "json", cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    got = json.loads(rec.stdout)
    assert next(iter(got)) == "roles"  # the per-role answer is the JSON's first key
    (role,) = got["roles"]
    assert role["role"] == "database" and role["jobs"] == ["database:data", "database:log"]
    assert role["text"].startswith("For a database VM: ")
    # three runs a cell may leave it unsettled: then it says which figure is not
    if role["cell"] is not None and role["tradeoff"] is None:
        assert [f["figure"] for f in role["figures"]] == [
            "log:write.iops",
            "data:read.clat_p99_us",
            "data:write.clat_p99_us",
        ]
        assert all(f["mean"] and f["mean"] > 0 for f in role["figures"])
    elif role["cell"] is not None:
        # A trade-off (the log's pick vetoed on the data files' p99) that the weights did not settle
        # still names a cell (issue 71), with the trade-off as its reason; the figures are listed
        # only when the weights settled it. Seen here at 3 runs a cell (2026-11-28): cache=none
        # led on commits, writeback's page cache on the data p99.
        assert role["status"] == "tied" and "trade-off" in role["unresolved"], role
    else:
        assert role["missing"]
    md = run_cli("recommend", "--db", "r.sqlite", "--format", "markdown", cwd=tmp_path).stdout
    assert "### For a database VM: " in md
    # first; the workload in the detail
    assert md.index("### For a database VM: ") < md.index("rand-read-4k")
    html = tmp_path / "r.html"
    assert run_cli("report", "--html", str(html), "--db", "r.sqlite", cwd=tmp_path).returncode == 0
    page = html.read_text()
    assert '<div class="pick role"><div class="use">For a database VM: ' in page
    if '<div class="pick">' in page:  # the picks of the role's jobs follow the role's block
        assert page.index("For a database VM: ") < page.index('<div class="pick">')
