"""This host's pace for the built-in guest's TCG work (guest/pace.py): measured from a sweep's quiet
runs, kept in the cache, and the estimates `plan` and `plans` give scaled by it (issue 70: on a VM
half as fast for TCG, full-matrix-fs's estimate said 1.6 h for a sweep of about 3 h)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from iomatrix.estimate import estimate_sweep
from iomatrix.guest import pace as pace_mod
from iomatrix.guest.pace import GuestPace, pace_of_runs, record_pace, recorded_pace
from iomatrix.matrix import run_parts_s
from iomatrix.plan.load import load_plan
from iomatrix.plan.model import Plan
from iomatrix.sweep.expansion import plan_expansion
from iomatrix.tiers import declaration
from tests.conftest import iomatrix_argv

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden" / "quick-sweep.sqlite"  # 37 quiet TCG guest runs


def test_the_pace_is_the_runs_own_work_against_its_reference_cost() -> None:
    # 5 runs that took twice their reference cost, one that took three times
    runs = [(20.0, 10.0)] * 5 + [(90.0, 30.0)]
    pace = pace_of_runs(runs)
    assert pace is not None and pace.runs == 6 and pace.reference_s == 80.0
    assert pace.factor == pytest.approx((100.0 + 90.0) / (50.0 + 30.0))
    # too few quiet runs say nothing; nor does a pace no host has (a stalled guest, a broken clock)
    assert pace_of_runs([(20.0, 10.0)] * (pace_mod.MIN_RUNS - 1)) is None
    assert pace_of_runs([(500.0, 10.0)] * 10) is None and pace_of_runs([(1.0, 10.0)] * 10) is None
    # runs with nothing to compare are left out, not counted as instant
    assert pace_of_runs([(20.0, 15.0)] * 4 + [(0.0, 10.0), (20.0, 0.0)]) is None
    # nor do small runs of little reference work (the suite's 16 MiB sweeps: 5 runs, 9 s of it)
    assert pace_of_runs([(3.0, 1.8)] * 5) is None
    assert (
        "1.8× the reference host's (27 quiet runs to 2026-11-29)"
        in GuestPace(1.8, 27, "2026-11-29 04:30:08").sentence()
    )


def test_each_sweep_adds_its_runs_to_the_kept_pace_by_their_weight(tmp_path: Path) -> None:
    whole = GuestPace(1.8, 600, "2026-11-29 07:00:00", 3600.0)  # a whole full-matrix-fs
    record_pace(whole, tmp_path)
    # a small sweep, its fixed costs fitted less well: the kept figure moves a little
    small = GuestPace(4.0, 9, "2026-11-30 10:00:00", 72.0)
    kept = record_pace(small, tmp_path)
    assert kept == recorded_pace(tmp_path)
    assert kept.factor == pytest.approx((1.8 * 3528 + 4.0 * 72) / 3600, abs=1e-3)
    assert kept.runs == 9 + 588 and kept.when == small.when and kept.reference_s == 3600.0
    # a new whole sweep replaces it
    again = GuestPace(2.0, 600, "2026-12-01 07:00:00", 3600.0)
    assert record_pace(again, tmp_path) == again
    # a figure with too little behind it (or written before the weights were kept) is not read,
    # and the next sweep's replaces it
    file = tmp_path / pace_mod.FILE_NAME
    file.write_text(json.dumps({**json.loads(file.read_text()), "reference_s": 9.1}))
    assert recorded_pace(tmp_path) is None
    assert record_pace(small, tmp_path) == small


def test_a_recorded_pace_is_read_back_on_this_cpu_only(tmp_path: Path) -> None:
    assert recorded_pace(tmp_path) is None  # nothing recorded: the reference host's pace
    record_pace(GuestPace(1.8, 29, "2026-11-29 04:30:08", 221.0), tmp_path)
    assert recorded_pace(tmp_path) == GuestPace(1.8, 29, "2026-11-29 04:30:08", 221.0)
    assert not list(tmp_path.glob(".*.tmp"))  # written whole, through a renamed file
    file = tmp_path / pace_mod.FILE_NAME
    data = json.loads(file.read_text())
    file.write_text(json.dumps({**data, "cpu_model": "another CPU"}))
    assert recorded_pace(tmp_path) is None  # measured on another CPU: not this host's
    for broken in ("", "{", "[]", json.dumps({**data, "factor": "fast"})):
        file.write_text(broken)
        assert recorded_pace(tmp_path) is None, broken
    file.write_text(json.dumps({**data, "factor": 40.0}))
    assert recorded_pace(tmp_path) is None  # no host is 40 times slower: not believed


def test_a_runs_parts_split_what_a_slower_host_stretches_from_its_runtime() -> None:
    plan, base = load_plan("full-matrix-fs")
    exp = plan_expansion(plan, base, set())
    guest = declaration("guest")
    u = next(u for u in exp.units if u.workload.name == "fs-read")
    timed, work = run_parts_s(plan, u.cell, u.workload)
    # a filesystem job is the guest's work whatever the plan's runtime
    assert timed == 0.0 and work > guest.start_up_s(plan)[2] > 0
    modern, mbase = load_plan("modern")
    mexp = plan_expansion(modern, mbase, set())
    v = next(u for u in mexp.units if u.cell.tier == "guest")
    timed, work = run_parts_s(modern, v.cell, v.workload)
    # a time-based fio job takes its runtime on any host; only fio's start-up is the guest's work
    assert timed >= modern.runtime > 0 and work == guest.start_up_s(modern)[2]


def test_estimates_scale_the_built_in_guests_work_by_the_pace_and_nothing_else() -> None:
    slow = GuestPace(2.0, 30, "2026-11-29 04:30:08")
    fs, base = load_plan("full-matrix-fs")
    exp = plan_expansion(fs, base, set())
    ref, here = estimate_sweep(fs, exp), estimate_sweep(fs, exp, slow)
    assert ref.pace is None and here.pace == slow
    # every run of full-matrix-fs is the guest's work (boots, fs jobs): all of it twice as long
    assert here.minimum_s == pytest.approx(2 * ref.minimum_s)
    assert here.wall_s > ref.wall_s and slow.sentence() in here.sentence(fs.time_budget)
    # a plan with no built-in guest: the same estimate, and no pace said
    for name in ("quick", "ceph", "real-guest"):
        plan, base = load_plan(name)
        exp = plan_expansion(plan, base, set())
        est = estimate_sweep(plan, exp, slow)
        assert est.pace is None and est == estimate_sweep(plan, exp), name
        assert "pace" not in est.sentence(plan.time_budget), name


def _stored_plan(db: Path) -> Plan:
    with sqlite3.connect(db) as conn:
        (plan_json,) = conn.execute("SELECT plan_json FROM sweeps").fetchone()
    return Plan.model_validate(json.loads(plan_json))


def test_a_sweeps_quiet_guest_runs_record_the_pace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A captured sweep (baremetal, blocklayer and guest tiers; 37 quiet TCG guest runs) records
    the pace of its guest runs only; a sweep whose guest runs the host disturbed records none."""
    from iomatrix.commands.run import _record_guest_pace
    from iomatrix.store import Store

    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "sweep.sqlite"
    shutil.copy(GOLDEN, db)
    plan = _stored_plan(db)
    exp = plan_expansion(plan, None, set())
    store = Store(db)
    sweep_id = store.sweep_ids()[-1]
    _record_guest_pace(store, sweep_id, plan, exp)
    pace = recorded_pace()
    assert pace is not None and pace.runs == 37, pace
    assert 1.0 < pace.factor < 3.0, pace
    # the same sweep with its guest runs flagged disturbed: nothing new is recorded
    (tmp_path / "cache" / pace_mod.FILE_NAME).unlink()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE runs SET disturbed = 1 WHERE cell_id IN "
            "(SELECT id FROM cells WHERE tier = 'guest')"
        )
    _record_guest_pace(Store(db), sweep_id, plan, exp)
    assert recorded_pace() is None


def _cli(*args: str, cache: Path) -> str:
    env = {**os.environ, "IOMATRIX_CACHE": str(cache), "COLUMNS": "200"}
    proc = subprocess.run(
        [*iomatrix_argv(), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _rows(plans: str) -> dict[str, str]:
    return {line.split()[0]: line for line in plans.splitlines() if line.split()}


def test_plan_and_plans_give_the_estimate_at_the_recorded_pace(tmp_path: Path) -> None:
    fs, base = load_plan("full-matrix-fs")
    exp = plan_expansion(fs, base, set())
    slow = GuestPace(2.0, 30, "2026-11-29 04:30:08", 240.0)
    # nothing recorded: the reference host's figures, as the README gives them
    plans = _cli("plans", cache=tmp_path / "empty")
    row = _rows(plans)["full-matrix-fs"]
    assert f" {estimate_sweep(fs, exp).minutes()} " in row and "pace" not in plans
    record_pace(slow, tmp_path / "slow")
    plans = _cli("plans", cache=tmp_path / "slow")
    row = _rows(plans)["full-matrix-fs"]
    assert f" {estimate_sweep(fs, exp, slow).minutes()} *" in row, plans
    assert "*" not in _rows(plans)["quick"]  # no built-in guest in quick: its figure is any host's
    assert f"* {slow.sentence()}" in plans
    said = _cli("plan", "full-matrix-fs", cache=tmp_path / "slow")
    assert slow.sentence() in " ".join(said.split()), said
