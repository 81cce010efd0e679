"""Offered load in a sweep (issue 25): runs that missed their offered load count for neither racing
nor precision (the predicate the reports use, metrics.load_not_reached), and a rate set as a
fraction of the bare-metal maximum measured in the same sweep (rand-*-4k-rateNpct, iomatrix.rates):
resolution, plan checks, the scheduler holding the rate-limited units back, and the whole flow
through the runner with the scripted tier (tests/fake_tier.py)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iomatrix.errors import UserError
from iomatrix.fio.jobs import JobShape, guest_job
from iomatrix.metrics import load_not_reached, offered_load_metrics
from iomatrix.plan.load import plan_from_dict
from iomatrix.plan.model import Plan
from iomatrix.rates import ReferenceRun, resolve_rate
from iomatrix.report.query import cell_workloads
from iomatrix.runner import SweepResult, SweepRunner, resolve_workloads
from iomatrix.scheduler import CiWidthPolicy, Scheduler, UnitState
from iomatrix.store import Store
from iomatrix.store.queries import RunRow
from iomatrix.tiers import registered
from iomatrix.tiers.base import RunOptions
from iomatrix.workloads import RATE_IODEPTH, RateOfMax, resolve
from tests.conftest import needs, run_cli
from tests.fake_tier import SCRIPTED_TIERS, FakeReferenceTier, Interrupt, Ok, ScriptedHost


@pytest.fixture(autouse=True)
def scripted_tiers() -> Iterator[None]:
    with registered(*SCRIPTED_TIERS, FakeReferenceTier):
        yield


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "r.sqlite")
    yield s
    s.close()


def make_plan(
    tiers: list[str],
    workloads: list[str],
    cache: tuple[str, ...] = ("writeback", "unsafe"),
    reps: tuple[int, int] = (3, 3),
    **extra: Any,
) -> Plan:
    return plan_from_dict(
        {
            "name": "offered",
            "tier": tiers,
            "cache": list(cache),
            "workloads": workloads,
            "repetitions": {"min": reps[0], "max": reps[1]},
            "keep_caches_warm": True,
            **extra,
        },
        "test plan",
    )


def sweep(
    plan: Plan, store: Store, host: ScriptedHost, tmp_path: Path
) -> tuple[SweepRunner, SweepResult]:
    runner = SweepRunner(
        plan,
        None,
        store,
        RunOptions(workdir=tmp_path / "work"),
        tier_factory=host.tier_factory,
        sampler_factory=host.sampler,
        clock=host.clock,
    )
    return runner, runner.run()


def key(tier: str, workload: str, cache: str) -> str:
    return f"{tier}/-/-/{cache}/threads/-/dir/-::{workload}"


def stops(store: Store, sweep_id: int) -> dict[str, tuple[str, str, int]]:
    rows = store.db.execute(
        "SELECT c.key || '::' || u.workload unit, u.kind, u.reason, u.ok_runs FROM unit_stops u"
        " JOIN cells c ON c.id=u.cell_id WHERE c.sweep_id=?",
        (sweep_id,),
    )
    return {r["unit"]: (r["kind"], r["reason"], r["ok_runs"]) for r in rows}


def stored_runs(store: Store, sweep_id: int) -> list[sqlite3.Row]:
    return store.db.execute(
        "SELECT r.id, c.key || '::' || r.workload unit, r.workload, r.status, r.round, r.meta_json,"
        " (SELECT s.value FROM samples s WHERE s.run_id=r.id AND "
        "s.metric='load.target_iops') target"
        " FROM runs r JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? ORDER BY r.id",
        (sweep_id,),
    ).fetchall()


# --------------------------------------------------------------------------- the shared predicate


def test_one_predicate_says_a_run_missed_its_offered_load() -> None:
    assert load_not_reached(offered_load_metrics({"total.iops": 900.0}, 1000))  # 90% < 95%
    assert not load_not_reached(offered_load_metrics({"total.iops": 960.0}, 1000))
    assert not load_not_reached({"read.iops": 5.0})  # no offered load: nothing to miss


# --------------------------------------------------------------------------- racing leaves such
# runs out


P99 = "rand-read-4k-rate1000"


def _noisy(base: float, n: int) -> float:
    return base * (1 + 0.01 * ((n * 7) % 5 - 2))


def test_racing_counts_no_run_that_missed_its_offered_load(store: Store, tmp_path: Path) -> None:
    best, slower, never = (key("fake", P99, c) for c in ("unsafe", "writeback", "writethrough"))

    def script(unit: str, n: int) -> Ok:
        # every run misses the load: its p99 (50 µs) would be the best if it counted
        if unit == never:
            return Ok(value=_noisy(50.0, n), iops=100.0)
        # one run at half the load, with a p99 that would blur the comparison
        if unit == slower and n == 2:
            return Ok(value=1.0, iops=500.0)
        return Ok(value=_noisy(200.0 if unit == slower else 100.0, n), iops=1000.0)

    host = ScriptedHost(default=script)
    plan = make_plan(["fake"], [P99], cache=("unsafe", "writeback", "writethrough"), reps=(3, 8))
    runner, result = sweep(plan, store, host, tmp_path)
    st = stops(store, result.sweep_id)
    # The unit that never reached its load stops at its minimum, and does not hold the others' race
    # back.
    assert st[never][0] == "load-not-reached" and st[never][2] == 3
    assert st[never][1].startswith("offered load not reached in 3 of 3 runs")
    # The slower unit's missed run is not a value: racing sees two rounds of it after round 3, so it
    # is eliminated only once a third counted round exists (round 4), and on its counted runs only.
    assert st[slower][0] == "eliminated" and st[slower][2] == 4
    assert st[best][0] == "settled" and st[best][2] == 4
    assert result.load_not_reached == 4 and result.unreached_units == [(never, st[never][1])]
    # The reports leave out the same runs (report/query.py asks the same predicate).
    by_unit = {f"{cw.cell_key}::{cw.workload}": cw for cw in cell_workloads(store, result.sweep_id)}
    assert len(by_unit[never].unreached) == 3 and not by_unit[never].runs
    assert len(by_unit[slower].unreached) == 1 and len(by_unit[slower].runs) == 3
    # A resumed sweep rebuilds the same counts from the store: the missed rounds are not values.
    _, _, states = runner._session_states(result.sweep_id)
    by_key = {s.key: s for s in states}
    assert by_key[slower].unreached == 1 and sorted(r for r, _ in by_key[slower].points) == [
        1,
        3,
        4,
    ]
    assert by_key[never].unreached == 3 and by_key[never].points == []


def test_the_run_line_says_the_offered_load_was_not_reached(store: Store, tmp_path: Path) -> None:
    lines: list[str] = []

    class Lines:
        def cells(self, *a: object) -> None: ...
        def start(self, *a: object) -> None: ...
        def run_started(self, *a: object) -> None: ...
        def grow(self, *a: object) -> None: ...
        def message(self, text: str) -> None: ...
        def stop(self) -> None: ...

        def run_finished(self, unit: object, outcome: object, summary: str) -> None:
            lines.append(summary)

    host = ScriptedHost(default=Ok(value=80.0, iops=600.0))
    runner = SweepRunner(
        make_plan(["fake"], [P99], cache=("unsafe",), reps=(1, 1)),
        None,
        store,
        RunOptions(workdir=tmp_path / "work"),
        progress=Lines(),  # type: ignore[arg-type]
        tier_factory=host.tier_factory,
        sampler_factory=host.sampler,
        clock=host.clock,
    )
    runner.run()
    assert lines == [
        "read.clat_p99_us=80.0 (wall 1.0 s), offered load not reached (60% of 1,000 "
        "IOPS): not counted"
    ]


# --------------------------------------------------------------------------- a rate as a share of
# bare metal


def test_rate_of_max_preset_and_its_range() -> None:
    w = resolve("rand-write-4k-rate50pct")
    assert (
        w.rate_of_max == RateOfMax(0.5, f"rand-write-4k-qd{RATE_IODEPTH}") and w.rate_iops is None
    )
    assert (w.rw, w.iodepth, w.primary_metric, w.higher_is_better) == (
        "randwrite",
        16,
        "write.clat_p99_us",
        False,
    )
    with pytest.raises(UserError, match=r"150% of the bare-metal maximum is out of range"):
        resolve("rand-read-4k-rate150pct")
    # Never run without its limit: fio would run flat out under a rate-limited name.
    with pytest.raises(ValueError, match="not resolved yet"):
        guest_job(w, shape=JobShape(1 << 20, 1.0))


def test_the_rate_is_the_share_of_the_best_bare_metal_cell_mean() -> None:
    runs = [
        ReferenceRun(1, "a", 1000.0),
        ReferenceRun(2, "b", 1900.0),
        ReferenceRun(3, "a", 1200.0),
        ReferenceRun(4, "b", 2101.0),
    ]
    r = resolve_rate(RateOfMax(0.5, "rand-read-4k-qd16"), runs)
    assert r is not None
    # ⌊0.5 × 2000.5⌋
    assert (r.iops, r.maximum_iops, r.maximum_cell, r.runs) == (1000, 2000.5, "b", (2, 4))
    assert r.meta() == {
        "rate_iops": 1000,
        "fraction": 0.5,
        "of": "bare-metal maximum",
        "reference": "rand-read-4k-qd16",
        "maximum_iops": 2000.5,
        "maximum_cell": "b",
        "runs": [2, 4],
    }
    assert resolve_rate(RateOfMax(0.01, "x"), [ReferenceRun(1, "a", 50.0)]).iops == 1  # type: ignore[union-attr]
    assert resolve_rate(RateOfMax(0.5, "x"), []) is None
    assert resolve_rate(RateOfMax(0.5, "x"), [ReferenceRun(1, "a", 0.0)]) is None


def test_reference_runs_stored_after_the_first_rated_run_do_not_count() -> None:
    from iomatrix.rates import reference_runs

    def row(
        rid: int, cell: int, workload: str, status: str = "ok", replaced: bool = False
    ) -> RunRow:
        return RunRow(
            rid,
            cell,
            f"c{cell}",
            {},
            {},
            workload,
            1,
            status,
            "",
            {},
            "",
            "",
            None,
            None,
            replaced=replaced,
        )

    rows = [
        row(1, 10, "ref"),
        row(2, 10, "ref", replaced=True),
        row(3, 11, "ref", "failed"),
        row(4, 10, "rated"),
        row(5, 10, "ref"),
    ]
    iops = {1: 100.0, 2: 90.0, 5: 300.0}
    got = reference_runs(rows, iops, {10: "c10", 11: "c11"}, "ref", {10}, "rated")
    # not the replaced, the failed, nor run 5 stored after run 4
    assert got == [ReferenceRun(1, "c10", 100.0)]
    assert [r.run_id for r in reference_runs(rows, iops, {10: "c10"}, "ref", {99}, "rated")] == [
        1,
        5,
    ]


@pytest.mark.parametrize(
    ("tiers", "workloads", "message"),
    [
        (
            ["fake"],
            ["rand-read-4k-qd16", "rand-read-4k-rate50pct"],
            "sets its rate as 50% of the bare-metal maximum, but the plan runs no bare-metal tier",
        ),
        (
            ["fake-ref", "fake"],
            ["rand-read-4k-rate50pct"],
            "50% of the bare-metal maximum of rand-read-4k-qd16, which the plan does not run",
        ),
    ],
)
def test_a_plan_without_what_sets_the_rate_is_refused_in_one_line(
    tiers: list[str], workloads: list[str], message: str
) -> None:
    with pytest.raises(UserError, match=message) as err:
        resolve_workloads(make_plan(tiers, workloads), None)
    assert "\n" not in str(err.value) and err.value.hint


def test_the_scheduler_holds_a_unit_until_the_units_it_waits_for_are_done() -> None:
    units = [UnitState("ref"), UnitState("other"), UnitState("rated", after=frozenset({"ref"}))]
    sched = Scheduler(
        units,
        min_runs=2,
        max_runs=2,
        budget_s=1e9,
        policy=CiWidthPolicy(0.05, 2, 2),
        seed=1,
        clock=lambda: 0.0,
    )
    ran: list[tuple[str, int]] = []
    while slots := sched.next_round():
        for slot in slots:
            ran.append((slot.key, slot.round))
            sched.record(slot, True, 1.0 + slot.round / 10)
    assert [k for k, r in ran if k == "rated"] == ["rated", "rated"]
    first_rated = ran.index(next(x for x in ran if x[0] == "rated"))
    assert {k for k, _ in ran[:first_rated]} == {"ref", "other"} and ran[:first_rated].count(
        ("ref", 2)
    ) == 1
    assert all(u.done for u in sched.units.values())


def test_a_rate_of_the_bare_metal_maximum_through_the_runner(store: Store, tmp_path: Path) -> None:
    ref_fast, ref_slow = (
        key("fake-ref", "rand-read-4k-qd16", "unsafe"),
        key("fake-ref", "rand-read-4k-qd16", "writeback"),
    )
    rated = "rand-read-4k-rate50pct"

    def script(unit: str, n: int) -> Ok:
        if unit == ref_fast:
            # mean 2000 over 2 runs
            return Ok(value=1900.0 + 200 * (n % 2), iops=1900.0 + 200 * (n % 2))
        if unit == ref_slow:
            return Ok(value=1000.0, iops=1000.0)
        if unit.endswith(rated):
            return Ok(value=_noisy(100.0, n), iops=1000.0)
        return Ok(value=1500.0, iops=1500.0)

    # Ctrl-C during the first rated run
    host = ScriptedHost(default=script, per_run={9: Interrupt()})
    plan = make_plan(["fake-ref", "fake"], ["rand-read-4k-qd16", rated], reps=(2, 2))
    _, first = sweep(plan, store, host, tmp_path)
    assert first.interrupted and host.offered == [(host.calls[-1].runs[0][0], 1000)]
    # resumed: the maximum is recomputed from the stored runs
    _, second = sweep(plan, store, host, tmp_path)
    assert second.resumed and not second.interrupted
    runs = stored_runs(store, first.sweep_id)
    rated_runs = [r for r in runs if r["workload"] == rated]
    ref_ids = [r["id"] for r in runs if r["unit"] == ref_fast]
    # Every bare-metal run of the reference was stored before the first rated run started.
    refs = [
        r["id"]
        for r in runs
        if r["workload"] == "rand-read-4k-qd16" and r["unit"].startswith("fake-ref")
    ]
    assert max(refs) < min(r["id"] for r in rated_runs)
    assert len(rated_runs) == 8 and all(
        r["status"] == "ok" and r["target"] == 1000.0 for r in rated_runs
    )
    assert {rate for _, rate in host.offered} == {1000}
    for r in rated_runs:
        assert json.loads(r["meta_json"])["offered_load"] == {
            "rate_iops": 1000,
            "fraction": 0.5,
            "of": "bare-metal maximum",
            "reference": "rand-read-4k-qd16",
            "maximum_iops": 2000.0,
            "maximum_cell": ref_fast.split("::")[0],
            "runs": ref_ids,
        }


def test_a_rate_with_no_bare_metal_run_to_come_from_gives_up(store: Store, tmp_path: Path) -> None:
    from tests.fake_tier import Fail

    def script(unit: str, n: int) -> Ok | Fail:
        return (
            Fail("no disk")
            if unit.startswith("fake-ref") and "qd16" in unit
            else Ok(value=10.0, iops=10.0)
        )

    host = ScriptedHost(default=script)
    plan = make_plan(
        ["fake-ref", "fake"],
        ["rand-read-4k-qd16", "rand-read-4k-rate50pct"],
        cache=("unsafe",),
        reps=(1, 1),
    )
    _, result = sweep(plan, store, host, tmp_path)
    gave_up = dict(result.gave_up)
    assert gave_up[key("fake", "rand-read-4k-rate50pct", "unsafe")] == (
        "no bare-metal maximum of rand-read-4k-qd16 to set its rate from (no bare-metal "
        "run of it succeeded)"
    )
    assert host.offered == []  # never run without its rate


RATE_OF_MAX_PLAN = """
tier = ["baremetal"]
cache = ["writeback"]
workloads = ["rand-read-4k-qd16", "rand-read-4k-rate25pct"]
size = "16M"
runtime = 1
retry_disturbed = false  # a loaded test host: every run counts (replaced runs are tested elsewhere)
[repetitions]
min = 2
max = 2
"""


@pytest.mark.slow
@needs("fio")
def test_real_fio_runs_at_a_quarter_of_the_bare_metal_maximum(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(RATE_OF_MAX_PLAN)
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--monitor-interval", "0.2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rand-read-4k-rate25pct on dir: " in proc.stdout and "25% of " in proc.stdout
    store = Store(tmp_path / "r.sqlite", read_only=True)
    try:
        rows = stored_runs(store, store.sweep_ids()[-1])
        iops = store.run_metric_values([r["id"] for r in rows], "total.iops")
        raw = {
            r["id"]: store.db.execute(
                "SELECT job_text FROM runs WHERE id=?", (r["id"],)
            ).fetchone()[0]
            for r in rows
        }
    finally:
        store.close()
    refs = [r for r in rows if r["workload"] == "rand-read-4k-qd16"]
    rated = [r for r in rows if r["workload"] == "rand-read-4k-rate25pct"]
    assert (
        len(refs) == 2
        and len(rated) == 2
        and max(r["id"] for r in refs) < min(r["id"] for r in rated)
    )
    maximum = sum(iops[r["id"]] for r in refs) / 2
    for r in rated:
        offered = json.loads(r["meta_json"])["offered_load"]
        assert offered["rate_iops"] == int(0.25 * maximum) == r["target"]
        assert offered["runs"] == [r["id"] for r in refs]
        assert f"rate_iops={offered['rate_iops']}" in raw[r["id"]]  # what fio was given
        # fio held the rate: at most a little above it (a quarter of the maximum is within reach of
        # the host)
        assert iops[r["id"]] <= 1.1 * offered["rate_iops"]
