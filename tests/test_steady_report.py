"""Steady state is a report-time statistic: tiers store each run's raw IOPS series, reports derive
`ss.*`."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from iomatrix.report.quality import steady_state_samples
from iomatrix.report.query import cell_workloads
from iomatrix.stats import snia_steady_state
from iomatrix.store import Store
from tests.conftest import DATA, needs, run_cli

SCHEMA1 = DATA / "schema1" / "iomatrix-schema1.sqlite"


def test_steady_state_samples_follow_the_snia_window() -> None:
    flat = [50.0, 120.0, 100.0, 100.0, 101.0, 99.0, 100.0]  # ramp-up before the last 5 points
    got = steady_state_samples(flat)
    ss = snia_steady_state(flat, window=5)
    assert got == {
        "ss.attained": 1.0,
        "ss.range_frac": ss.range_frac,
        "ss.slope_frac": ss.slope_frac,
    }
    # 12.5% slope excursion
    assert steady_state_samples([90, 93, 96, 99, 102])["ss.attained"] == 0.0
    assert steady_state_samples([100.0] * 4) == {}  # shorter than the window: no verdict


def test_an_old_sweeps_stored_steady_state_is_recomputed_from_its_series_with_the_same_result(
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copyfile(SCHEMA1, db)
    con = sqlite3.connect(db)
    stored = {
        (rid, m): v
        for rid, m, v in con.execute(
            "SELECT run_id, metric, value FROM samples WHERE metric LIKE 'ss.%'"
        )
    }
    series = {
        rid: json.loads(s)
        for rid, s in con.execute(
            "SELECT id, json_extract(meta_json, '$.iops_series') FROM runs WHERE status='ok'"
        )
        if s
    }
    con.close()
    assert stored and series  # the schema-1 file stored both (what the first release did)
    store = Store.open_existing(db)
    assert store.ok_run_series(1) == {rid: [float(v) for v in s] for rid, s in series.items()}
    derived = {
        (rid, m): v
        for cw in cell_workloads(store, 1)
        for i, rid in enumerate(cw.runs)
        for m, vs in cw.samples.items()
        if m.startswith("ss.")
        for v in [vs[i]]
    }
    assert derived.keys() == stored.keys()
    for k, v in stored.items():
        assert derived[k] == pytest.approx(v, rel=1e-12), k


@pytest.mark.slow
@needs("fio")
def test_a_new_run_stores_the_series_only_and_results_derive_steady_state(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        'tier = ["baremetal"]\ncache = ["none"]\nworkloads = ["rand-read-4k"]\n'
        'size = "16M"\nruntime = 1.5\nretry_disturbed = false\n'
        "[repetitions]\nmin = 2\nmax = 2\n"
    )
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    con = sqlite3.connect(tmp_path / "r.sqlite")
    assert con.execute("SELECT count(*) FROM samples WHERE metric LIKE 'ss.%'").fetchone()[0] == 0
    series = {
        rid: json.loads(s)
        for rid, s in con.execute(
            "SELECT id, json_extract(meta_json, '$.iops_series') FROM runs WHERE status='ok'"
        )
    }
    con.close()
    assert len(series) == 2 and all(len(s) >= 5 for s in series.values()), series
    doc = json.loads(
        run_cli(
            "results", "--db", "r.sqlite", "--format", "json", "--metric", "all", cwd=tmp_path
        ).stdout
    )
    rows = {r["metric"]: r for r in doc["sweeps"][0]["results"]}
    expected = [
        steady_state_samples(series[rid])["ss.attained"] for rid in rows["ss.attained"]["run_ids"]
    ]
    assert rows["ss.attained"]["samples"] == expected and rows["ss.attained"]["n"] == 2
    assert rows["read.iops"]["steady_state"] == {"runs": 2, "attained": int(sum(expected))}
