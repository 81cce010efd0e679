"""`compare` as a CI gate that can be trusted (issue 38): distinct exit statuses for regression (4)
and "cannot tell" (5), the power and runs needed when the data cannot show the requested change,
thresholds in one unit (5% or 0.05), "identical sweeps" for a sweep against itself; and damaged
stored values that never become a figure. The databases are copies of a real captured sweep
(tests/data/golden) whose samples the test rewrites with SQL, so every outcome is decided by numbers
the test chose."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from iomatrix.stats import compare_sweeps, welch_power
from iomatrix.stats.gate import regression_gate
from tests.conftest import DATA, iomatrix_argv, run_cli

SWEEP = DATA / "golden" / "quick-sweep.sqlite"


def _db(tmp: Path, name: str, level: float, spread: float, runs: int | None = None) -> Path:
    """A copy of the captured sweep whose every sample is `level` × (1 ± spread), alternating by
    attempt; with `runs`, the attempts after that many are marked failed (so each cell has `runs` ok
    runs)."""
    path = tmp / name
    shutil.copyfile(SWEEP, path)
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE samples SET value = ? * (CASE WHEN (SELECT attempt FROM runs WHERE "
        "runs.id = samples.run_id)"
        " % 2 = 1 THEN 1 + ? ELSE 1 - ? END)",
        (level, spread, spread),
    )
    if runs is not None:
        con.execute("UPDATE runs SET status = 'failed', error = 'test' WHERE attempt > ?", (runs,))
    con.commit()
    con.close()
    return path


def test_a_40_percent_drop_on_two_runs_is_cannot_tell_with_the_runs_needed(tmp_path: Path) -> None:
    """The issue's case: 2,292 → 1,363 (0.595×) on n = 2 exited 0 under `--fail-above 5`. Two runs ±
    25 % cannot call it significant; the gate now says so and exits 5, naming the power and the runs
    needed."""
    a = _db(tmp_path, "a.sqlite", 2292, 0.25, runs=2)
    b = _db(tmp_path, "b.sqlite", 1363, 0.25, runs=2)
    r = run_cli("compare", str(a), str(b), "--fail-above", "5%")
    assert r.returncode == 5, r.stdout + r.stderr
    assert "cannot tell" in r.stderr and "runs per side would reach 80%" in r.stderr
    assert "2,292 → 1,363 (0.595×, n = 2/2)" in r.stderr
    # no empty table under the header line
    assert "0 of " in r.stdout and "p (Holm)" not in r.stdout
    # the same threshold as a fraction
    same = run_cli("compare", str(a), str(b), "--fail-above", "0.05")
    assert same.returncode == 5 and same.stderr == r.stderr


def test_a_real_regression_exits_4_and_a_powered_no_change_exits_0(tmp_path: Path) -> None:
    base = _db(tmp_path, "base.sqlite", 1000, 0.01)
    worse = _db(tmp_path, "worse.sqlite", 600, 0.01)
    steady = _db(tmp_path, "steady.sqlite", 1002, 0.01)
    gate = run_cli("compare", str(base), str(worse), "--fail-above", "5%")
    assert gate.returncode == 4 and "regression:" in gate.stderr, gate.stdout + gate.stderr
    ok = run_cli("compare", str(base), str(steady), "--fail-above", "5%")
    assert ok.returncode == 0 and "no regression" in ok.stderr, ok.stdout + ok.stderr
    # 40 % worse is within 45 %
    loose = run_cli("compare", str(base), str(worse), "--fail-above", "45%")
    assert loose.returncode == 0, loose.stdout + loose.stderr
    md = run_cli("compare", str(base), str(worse), "--fail-above", "0.05", "--format", "markdown")
    assert md.returncode == 4 and "|" in md.stdout


def test_a_bare_number_above_one_is_refused_for_both_thresholds(tmp_path: Path) -> None:
    """`--fail-above 0.05` used to mean 0.05 % and `--threshold 5` 500 %: a bare number ≥ 1 is
    refused with the two spellings, both options read 5% and 0.05 alike."""
    db = str(_db(tmp_path, "a.sqlite", 1000, 0.01))
    for argv in (
        ("compare", db, db, "--fail-above", "5"),
        ("rank", "--db", db, "--threshold", "5"),
    ):
        r = run_cli(*argv)
        assert (
            r.returncode == 2
            and "ambiguous" in r.stderr
            and "5%" in r.stderr
            and "0.05" in r.stderr
        ), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    bad = run_cli("rank", "--db", db, "--threshold", "five")
    assert bad.returncode == 2 and "not a threshold" in bad.stderr
    pct = run_cli("rank", "--db", db, "--threshold", "5%", "--format", "json")
    frac = run_cli("rank", "--db", db, "--threshold", "0.05", "--format", "json")
    assert pct.returncode == 0 and pct.stdout == frac.stdout


def test_a_sweep_against_itself_says_identical_sweeps(tmp_path: Path) -> None:
    db = _db(tmp_path, "a.sqlite", 1000, 0.2)
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(db, copy)
    for other in (db, copy):
        r = run_cli("compare", str(db), str(other), "--fail-above", "5%")
        assert r.returncode == 0 and "identical sweeps" in r.stdout, r.stdout + r.stderr


def test_negative_and_infinite_stored_values_never_become_figures(tmp_path: Path) -> None:
    """A damaged database: a negative or infinite IOPS is skipped by every report, which says so in
    one line naming the row (no report prints a negative or infinite figure); merge refuses the file
    naming it."""
    db = tmp_path / "d.sqlite"
    shutil.copyfile(SWEEP, db)
    clean = run_cli("results", "--db", str(db), "--format", "json", "--metric", "read.iops")
    runs = [
        r["run_ids"][0]
        for r in json.loads(clean.stdout)["sweeps"][0]["results"]
        if r["metric"] == "read.iops"
    ][:2]  # the runs two figures stand on
    con = sqlite3.connect(db)
    con.execute(
        "UPDATE samples SET value = -8443 WHERE metric = 'read.iops' AND run_id = ?", (runs[0],)
    )
    con.commit()
    con.close()
    doc = run_cli("results", "--db", str(db), "--format", "json", "--metric", "read.iops")
    assert doc.returncode == 0, doc.stderr
    text = run_cli("results", "--db", str(db), "--metric", "read.iops")
    # The store skips the row and says so in one line (issue 50): no figure stands on it.
    assert text.returncode == 0 and "-8,443" not in text.stdout
    warned = [ln for ln in text.stderr.splitlines() if "damaged row" in ln]
    assert len(warned) == 1 and f"(run {runs[0]}, metric 'read.iops') holds -8443.0" in warned[0], (
        text.stderr
    )
    rows = json.loads(doc.stdout)["sweeps"][0]["results"]
    assert all(r["mean"] >= 0 and (r["ci95_low"] is None or r["ci95_low"] >= 0) for r in rows)
    for argv in (("rank", "--db", str(db)), ("compare", str(db), str(SWEEP), "--all")):
        r = run_cli(*argv)
        assert r.returncode == 0 and "-8,443" not in r.stdout and "Traceback" not in r.stderr, (
            r.stderr
        )
    con = sqlite3.connect(db)
    con.execute(
        "UPDATE samples SET value = 9e999 WHERE metric = 'read.iops' AND run_id = ?", (runs[1],)
    )
    con.commit()
    con.close()
    for argv in (
        ("results", "--db", str(db)),
        ("rank", "--db", str(db)),
        ("compare", str(db), str(SWEEP)),
    ):
        r = run_cli(*argv)
        assert (
            r.returncode == 0 and "Traceback" not in r.stderr and "inf" not in r.stdout.lower()
        ), r.stderr
        warned = [ln for ln in r.stderr.splitlines() if "damaged row" in ln]
        assert len(warned) == 1 and "2 damaged rows skipped" in warned[0], r.stderr
    merged = run_cli("merge", str(tmp_path / "m.sqlite"), str(db))
    assert merged.returncode == 2 and "metric 'read.iops')" in merged.stderr
    assert "and 1 more damaged row" in merged.stderr
    assert not (tmp_path / "m.sqlite").exists()


def test_power_matches_the_published_two_sample_t_table() -> None:
    """R: power.t.test(delta = 1, sd = 1, power = 0.8) → n = 16.71 per group, so 17; at n = 17 the
        power is
    0.807 (Welch with equal SDs and n equals the pooled test's df = 32)."""
    p = welch_power(1.0, 1.0, 1.0, 17, 17)
    assert p.n_needed == 17 and p.power == pytest.approx(0.807, abs=0.002)
    assert welch_power(1.0, 0.0, 0.0, 3, 3).power == 1.0  # no noise: any change is seen
    assert welch_power(1.0, 1.0, 1.0, 1, 5).power == 0.0  # one run: no test


def test_gate_rules_on_captured_numbers() -> None:
    """The gate's three outcomes, decided on fixed numbers: a tight interval that rules the
    threshold out is 'can tell' even with 3 runs; a wide one is 'cannot tell'; a significant 40 %
    drop is a regression."""

    def higher(_: str) -> bool:
        return True

    tight = compare_sweeps({"k": [100.0, 101.0, 99.0]}, {"k": [100.5, 101.0, 100.0]})
    assert regression_gate(tight, 0.05, higher).outcome == "ok"
    wide = compare_sweeps({"k": [2865.0, 1719.0]}, {"k": [1704.0, 1022.0]})
    v = regression_gate(wide, 0.05, higher)
    assert v.outcome == "cannot tell" and v.undetectable[0].power.n_needed is not None
    drop = compare_sweeps({"k": [100.0, 101.0, 99.0]}, {"k": [60.0, 61.0, 59.0]})
    assert regression_gate(drop, 0.05, higher).outcome == "regression"
    assert regression_gate(drop, 0.45, higher).outcome == "ok"
    # θ = 0: only significant worsening counts
    assert regression_gate(wide, 0.0, higher).outcome == "ok"


# long cell names (rbd_cache_writethrough_until_flush=off)
CEPH = DATA / "answers" / "ceph-flush-trap.sqlite"


def _at(width: int, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI on a terminal of `width` columns."""
    return subprocess.run(
        [*iomatrix_argv(), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": str(width)},
    )


@pytest.mark.parametrize("width", [80, 100])
def test_compare_and_its_gate_fit_the_terminal_and_never_split_a_figure(
    tmp_path: Path, width: int
) -> None:
    """Every line of `compare --fail-above` fits 80 and 100 columns (issue 49: the regression line
    was 195 characters at 100 columns) and each interval stands whole on one line."""
    after = tmp_path / "after.sqlite"
    shutil.copyfile(CEPH, after)
    with sqlite3.connect(after) as con:  # every other run 0.6× as fast: a regression on some figure
        con.execute("UPDATE samples SET value = value * 0.6 WHERE run_id % 2 = 0")
    con.close()
    proc = _at(width, "compare", str(CEPH), str(after), "--all", "--fail-above", "5%")
    assert proc.returncode == 4 and "regression:" in proc.stderr, proc.stdout + proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    assert max(len(line) for line in lines) <= width, "\n".join(
        line for line in lines if len(line) > width
    )
    rows = json.loads(run_cli("compare", str(CEPH), str(after), "--format", "json").stdout)[0][
        "rows"
    ]
    for r in rows:
        interval = f"{r['ci95_low']:.3f}–{r['ci95_high']:.3f}"
        assert interval in proc.stdout, interval


def test_compare_of_two_plans_says_so_and_how_few_figures_they_share(tmp_path: Path) -> None:
    """Sweeps of different plans that share 2 figures: said before the table (issue 49: it compared
    the 2 silently); on stderr beside a machine-readable format."""
    tiny = DATA / "schema1" / "iomatrix-schema1.sqlite"
    proc = _at(100, "compare", str(SWEEP), str(tiny))
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "different plans: A ran plan 'golden', B plan 'tiny'" in text, proc.stdout
    assert "few figures in common: A and B share 2 of A's 36 and B's 2" in text, proc.stdout
    as_json = run_cli("compare", str(SWEEP), str(tiny), "--format", "json")
    assert json.loads(as_json.stdout) and "different plans" in as_json.stderr, as_json.stderr
    same = run_cli("compare", str(SWEEP), str(_db(tmp_path, "b.sqlite", 1000.0, 0.1)))
    assert "different plans" not in same.stdout and "few figures" not in same.stdout, same.stdout
