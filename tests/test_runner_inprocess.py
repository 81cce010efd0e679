"""The sweep runner end to end, in-process, with a scripted tier and host (tests/fake_tier.py) and a
real SQLite store: fresh sweeps, resume, retries of disturbed runs, failures and giving up, the time
budget on a fake clock, batches of a shared start-up and Ctrl-C in the middle of one."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iomatrix.commands.run import budget_lines
from iomatrix.plan.load import plan_from_dict
from iomatrix.plan.model import Plan
from iomatrix.runner import SweepResult, SweepRunner
from iomatrix.store import Store
from iomatrix.tiers import registered
from iomatrix.tiers.base import RunOptions
from tests.fake_tier import (
    SCRIPTED_TIERS,
    Disturbed,
    Fail,
    FakeBatchTier,
    Interrupt,
    Ok,
    ScriptedHost,
)


@pytest.fixture(autouse=True)
def scripted_tiers() -> Iterator[None]:
    with registered(*SCRIPTED_TIERS):
        yield


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "r.sqlite")
    yield s
    s.close()


def make_plan(
    tier: str = "fake",
    *,
    cache: tuple[str, ...] = ("writeback",),
    workloads: tuple[str, ...] = ("rand-read-4k", "rand-write-4k"),
    reps: tuple[int, int] = (3, 3),
    **extra: Any,
) -> Plan:
    return plan_from_dict(
        {
            "name": "inprocess",
            "tier": [tier],
            "cache": list(cache),
            "workloads": list(workloads),
            "repetitions": {"min": reps[0], "max": reps[1]},
            "keep_caches_warm": True,
            **extra,
        },
        "test plan",
    )


def sweep(plan: Plan, store: Store, host: ScriptedHost, tmp_path: Path) -> SweepResult:
    runner = SweepRunner(
        plan,
        None,
        store,
        RunOptions(workdir=tmp_path / "work"),
        tier_factory=host.tier_factory,
        sampler_factory=host.sampler,
        clock=host.clock,
    )
    return runner.run()


def runs(store: Store, sweep_id: int) -> list[sqlite3.Row]:
    """Every stored run of the sweep in the order it was stored, with its unit key and primary
    value."""
    return store.db.execute(
        "SELECT r.id, c.key || '::' || r.workload unit, r.workload, r.attempt, c.cache, "
        "r.status, r.error, r.round,"
        " r.round_position, r.cache_state, r.disturbed, r.retry_of, r.boot_id, "
        "r.boot_position, r.meta_json,"
        " (SELECT MIN(s.value) FROM samples s WHERE s.run_id=r.id) value,"
        " (SELECT COUNT(*) FROM monitor m WHERE m.run_id=r.id) monitor_rows"
        " FROM runs r JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? ORDER BY r.id",
        (sweep_id,),
    ).fetchall()


def stops(store: Store, sweep_id: int) -> dict[str, tuple[str, str, int]]:
    """unit key → (kind, reason, ok runs) of its stored stop."""
    rows = store.db.execute(
        "SELECT c.key || '::' || u.workload unit, u.kind, u.reason, u.ok_runs FROM unit_stops u"
        " JOIN cells c ON c.id=u.cell_id WHERE c.sweep_id=?",
        (sweep_id,),
    )
    return {r["unit"]: (r["kind"], r["reason"], r["ok_runs"]) for r in rows}


def status(store: Store, sweep_id: int) -> str:
    return str(store.db.execute("SELECT status FROM sweeps WHERE id=?", (sweep_id,)).fetchone()[0])


def unit_key(tier: str, workload: str, cache: str = "writeback") -> str:
    return f"{tier}/-/-/{cache}/threads/-/dir/-::{workload}"


def assert_complete_blocks(stored: list[sqlite3.Row], units: set[str]) -> None:
    """Every round holds each unit once (its retries aside), at distinct positions."""
    by_round: dict[int, list[sqlite3.Row]] = {}
    for r in stored:
        by_round.setdefault(r["round"], []).append(r)
    for rnd, rows in by_round.items():
        firsts = [r["unit"] for r in rows if r["retry_of"] is None]
        assert sorted(firsts) == sorted(units), (rnd, firsts)
        positions = [r["round_position"] for r in rows]
        assert len(set(positions)) == len(positions), (rnd, positions)


# --------------------------------------------------------------------------- a fresh sweep, resume


def test_a_fresh_sweep_stores_every_run_in_complete_blocks(store: Store, tmp_path: Path) -> None:
    host = ScriptedHost(default=lambda key, n: Ok(value=100.0 + n))
    plan = make_plan(cache=("writeback", "unsafe"))
    result = sweep(plan, store, host, tmp_path)
    stored = runs(store, result.sweep_id)
    units = {
        unit_key("fake", w, c)
        for c in ("writeback", "unsafe")
        for w in ("rand-read-4k", "rand-write-4k")
    }
    assert (result.runs_done, result.runs_failed, result.interrupted, result.resumed) == (
        12,
        0,
        False,
        False,
    )
    assert result.accel == {"fake": "none (scripted)"}
    assert status(store, result.sweep_id) == "finished"
    assert len(stored) == 12 and all(r["status"] == "ok" for r in stored)
    assert_complete_blocks(stored, units)
    assert {r["round"] for r in stored} == {1, 2, 3}
    for u in units:  # each unit's n-th run stored the n-th scripted value, in its round
        assert [(r["round"], r["value"]) for r in stored if r["unit"] == u] == [
            (1, 101.0),
            (2, 102.0),
            (3, 103.0),
        ]
    # Judged from the scripted host's samples: quiet, stored with the run.
    assert all(
        r["disturbed"] == 0 and r["monitor_rows"] == 2 and r["boot_id"] is None for r in stored
    )
    # Racing between equal cells at max: each unit's stop is stored once, with its 3 ok runs.
    assert {u: s[2] for u, s in stops(store, result.sweep_id).items()} == dict.fromkeys(units, 3)
    assert len(host.calls) == 12 and not any(c.shared_boot for c in host.calls)


def test_resume_after_an_interrupt_keeps_the_runs_and_runs_only_what_is_left(
    store: Store, tmp_path: Path
) -> None:
    host = ScriptedHost(per_run={5: Interrupt()})  # Ctrl-C during the 5th run: the first of round 3
    plan = make_plan(reps=(3, 3))
    first = sweep(plan, store, host, tmp_path)
    kept = runs(store, first.sweep_id)
    assert first.interrupted and status(store, first.sweep_id) == "interrupted"
    assert len(kept) == 4 and first.runs_done == 4
    second = sweep(plan, store, host, tmp_path)
    assert second.resumed and not second.interrupted and second.sweep_id == first.sweep_id
    stored = runs(store, first.sweep_id)
    # the first session's runs, untouched
    assert [tuple(r) for r in stored[:4]] == [tuple(r) for r in kept]
    assert (
        len(stored) == 6 and second.runs_done == 2 and status(store, first.sweep_id) == "finished"
    )
    units = {unit_key("fake", w) for w in ("rand-read-4k", "rand-write-4k")}
    assert_complete_blocks(stored, units)
    assert Counter(r["unit"] for r in stored) == dict.fromkeys(units, 3)
    assert host.runs_asked == 7  # 4 stored, 1 interrupted, 2 after the resume: nothing ran twice


# --------------------------------------------------------------------------- disturbed runs


def test_a_disturbed_run_is_retried_at_the_end_of_its_round(store: Store, tmp_path: Path) -> None:
    hit = unit_key("fake", "rand-read-4k")
    host = ScriptedHost(per_unit={(hit, 2): Disturbed(value=50.0)}, default=Ok(value=100.0))
    result = sweep(make_plan(), store, host, tmp_path)
    stored = runs(store, result.sweep_id)
    assert (result.disturbed, result.retried, result.runs_done) == (1, 1, 6)
    # Its causes, counted for the plain-words lines at the end of `run` (fake_tier.BUSY: steal and
    # CPU pressure).
    assert result.disturbed_by == {"cpu.steal_pct": 1, "psi.cpu_some_pct": 1}
    mine = [r for r in stored if r["unit"] == hit]
    assert len(mine) == 4 and len(stored) == 7
    disturbed = next(r for r in mine if r["disturbed"] == 1)
    retry = next(r for r in mine if r["retry_of"] is not None)
    assert disturbed["round"] == retry["round"] == 2 and disturbed["value"] == 50.0
    assert retry["retry_of"] == disturbed["id"] and retry["disturbed"] == 0
    assert retry["round_position"] == max(r["round_position"] for r in stored if r["round"] == 2)
    # after the rest of its round
    assert retry["id"] == max(r["id"] for r in stored if r["round"] == 2)
    assert_complete_blocks(stored, {hit, unit_key("fake", "rand-write-4k")})
    # The store counts the clean retry, not the run it replaced.
    assert sorted(ok for ok, _ in store.run_counts(result.sweep_id).values()) == [3, 3]
    assert stops(store, result.sweep_id)[hit][2] == 3


def test_a_tier_that_loads_the_host_is_flagged_but_never_retried(
    store: Store, tmp_path: Path
) -> None:
    hit = unit_key("fake-load", "rand-read-4k")
    host = ScriptedHost(per_unit={(hit, 2): Disturbed()})
    result = sweep(make_plan("fake-load"), store, host, tmp_path)
    stored = runs(store, result.sweep_id)
    assert (result.disturbed, result.retried, result.runs_done) == (1, 0, 6)
    assert len(stored) == 6 and all(r["retry_of"] is None for r in stored)
    assert [r["disturbed"] for r in stored if r["unit"] == hit] == [0, 1, 0]


def test_retry_disturbed_false_keeps_the_disturbed_run(store: Store, tmp_path: Path) -> None:
    hit = unit_key("fake", "rand-write-4k")
    host = ScriptedHost(per_unit={(hit, 1): Disturbed()})
    result = sweep(make_plan(retry_disturbed=False), store, host, tmp_path)
    assert (result.disturbed, result.retried, len(runs(store, result.sweep_id))) == (1, 0, 6)


def test_the_retries_of_a_shared_boot_share_the_next_boot(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeBatchTier, "batch_limit", 3)
    workloads = ("rand-read-4k", "rand-write-4k", "seq-read-1m")
    a, b = (unit_key("fake-batch", w) for w in workloads[:2])
    host = ScriptedHost(per_unit={(a, 1): Disturbed(), (b, 1): Disturbed()})
    result = sweep(make_plan("fake-batch", workloads=workloads, reps=(2, 2)), store, host, tmp_path)
    assert (result.disturbed, result.retried, result.runs_done) == (2, 2, 6)
    # Round 1's boot, then one boot for both retries, then round 2's boot.
    assert [sorted(c.runs) for c in host.calls][:2] == [
        sorted((unit_key("fake-batch", w), 1) for w in workloads),
        sorted([(a, 2), (b, 2)]),
    ]
    assert len(host.calls) == 3 and all(c.shared_boot for c in host.calls)
    retries = [r for r in runs(store, result.sweep_id) if r["retry_of"] is not None]
    assert (
        len(retries) == 2
        and len({r["boot_id"] for r in retries}) == 1
        and {r["round"] for r in retries} == {1}
    )


# --------------------------------------------------------------------------- failures


def test_failed_runs_are_stored_with_their_error_and_a_unit_gives_up(
    store: Store, tmp_path: Path
) -> None:
    broken, flaky = unit_key("fake", "rand-read-4k"), unit_key("fake", "rand-write-4k")
    host = ScriptedHost(
        per_unit={(flaky, 1): Fail("fio exited with status 1: disk full")},
        default=lambda key, n: Fail(f"no such device (attempt {n})") if key == broken else Ok(),
    )
    result = sweep(make_plan(reps=(2, 2)), store, host, tmp_path)
    stored = runs(store, result.sweep_id)
    # The CLI's exit status 3 comes from gave_up; "every run failed" from runs_done == 0 <
    # runs_failed.
    assert result.gave_up == [(broken, "gave up after 3 failed runs")]
    assert (result.runs_failed, result.runs_done) == (4, 2)
    assert [(r["status"], r["error"]) for r in stored if r["unit"] == broken] == [
        ("failed", f"no such device (attempt {n})") for n in (1, 2, 3)
    ]
    assert [(r["status"], r["error"]) for r in stored if r["unit"] == flaky] == [
        ("failed", "fio exited with status 1: disk full"),
        ("ok", None),
        ("ok", None),
    ]
    # failures are not judged
    assert all(r["disturbed"] is None for r in stored if r["status"] == "failed")
    st = stops(store, result.sweep_id)
    assert st[broken][0] == "gave-up" and st[broken][2] == 0 and st[flaky][0] == "max-runs"
    assert status(store, result.sweep_id) == "finished"


def test_every_run_failing_leaves_no_ok_run(store: Store, tmp_path: Path) -> None:
    host = ScriptedHost(default=Fail("boom"))
    result = sweep(make_plan(reps=(1, 1)), store, host, tmp_path)
    assert result.runs_done == 0 and result.runs_failed == 6 and len(result.gave_up) == 2


# --------------------------------------------------------------------------- the time budget


def noisy(key: str, n: int, wall_s: float = 10.0) -> Ok:
    return Ok(value=100.0 + (40.0 if n % 2 else -40.0), wall_s=wall_s)  # never converges at ±5%


def test_the_time_budget_stops_repetitions_beyond_min(store: Store, tmp_path: Path) -> None:
    # 10 s a run on the fake clock; 6 runs fit in 65 s, a 7th would end at 70
    host = ScriptedHost(default=noisy)
    plan = make_plan(reps=(2, 10), repetition_policy="ci-width", time_budget="65s")
    result = sweep(plan, store, host, tmp_path)
    stored = runs(store, result.sweep_id)
    assert len(stored) == 6 and host.clock.now == 60.0
    assert Counter(r["unit"] for r in stored) == {
        unit_key("fake", w): 3 for w in ("rand-read-4k", "rand-write-4k")
    }
    assert {u: s[:2] for u, s in stops(store, result.sweep_id).items()} == {
        unit_key("fake", w): ("budget", "time budget spent")
        for w in ("rand-read-4k", "rand-write-4k")
    }
    assert sorted(result.not_converged) == sorted(
        (unit_key("fake", w), "time budget spent") for w in ("rand-read-4k", "rand-write-4k")
    )


def test_the_budget_stops_the_minimum_runs_past_each_units_first(
    store: Store, tmp_path: Path
) -> None:
    """The budget is a wall-clock limit (issue 70): with it spent, each unit keeps its first run and
    no more, and the result says which units fell short of their minimum."""
    host = ScriptedHost(default=noisy)
    plan = make_plan(reps=(2, 10), repetition_policy="ci-width", time_budget="15s")
    result = sweep(plan, store, host, tmp_path)
    assert len(runs(store, result.sweep_id)) == 2 and host.clock.now == 20.0
    reason = "time budget spent at 1 of its 2 minimum runs"
    assert {s[:2] for s in stops(store, result.sweep_id).values()} == {("budget", reason)}
    assert sorted((k, ok) for k, _, ok in result.short_of_minimum) == [
        (unit_key("fake", w), 1) for w in ("rand-read-4k", "rand-write-4k")
    ]
    # said once in the end's budget line, not as a "not converged" line per unit
    assert result.not_converged == []
    assert (result.budget_s, result.elapsed_s) == (15.0, 20.0)
    assert budget_lines(result, "15s", 2) == [
        "time: 0.3 min of the 15s time budget, set-up 0 s included",
        "budget reached: 1 cell kept its first runs only (2 cell×workload units at 1 of the 2 "
        "minimum runs; a longer time_budget in the plan gives them all their minimum)",
    ]


def test_a_resumed_sweep_counts_the_earlier_sessions_run_time(store: Store, tmp_path: Path) -> None:
    # The first session's runs take 10 s of recorded time each; the resumed session starts 40 s into
    # its budget.
    host = ScriptedHost(per_run={5: Interrupt()}, default=noisy)
    plan = make_plan(reps=(2, 10), repetition_policy="ci-width", time_budget="65s")
    first = sweep(plan, store, host, tmp_path)
    assert first.interrupted and len(runs(store, first.sweep_id)) == 4
    sweep(plan, store, host, tmp_path)
    # as without the interruption: 40 s + 2 × 10 s ≤ 65 s
    assert len(runs(store, first.sweep_id)) == 6


# --------------------------------------------------------------------------- batches


def test_a_rounds_runs_of_a_cell_go_to_one_batch_split_at_max_batch(
    store: Store, tmp_path: Path
) -> None:
    workloads = ("rand-read-4k", "rand-write-4k", "seq-read-1m")
    host = ScriptedHost()
    plan = make_plan("fake-batch", cache=("writeback", "unsafe"), workloads=workloads, reps=(2, 2))
    result = sweep(plan, store, host, tmp_path)
    stored = runs(store, result.sweep_id)
    assert result.runs_done == 12 and len(stored) == 12
    row = {(r["unit"], r["attempt"]): r for r in stored}
    # Per cell and round: one batch of 2 (max_batch), sharing a boot, and one of 1 (run on its own),
    # never mixing cells or rounds.
    sizes: dict[tuple[str, int], list[int]] = {}
    for call in host.calls:
        mine = [row[run] for run in call.runs]
        assert len({(r["cache"], r["round"]) for r in mine}) == 1, call
        assert call.shared_boot == (len(mine) > 1)
        assert [r["boot_position"] for r in mine] == (
            list(range(len(mine))) if call.shared_boot else [None]
        )
        assert len({r["boot_id"] for r in mine}) == 1
        sizes.setdefault((mine[0]["cache"], mine[0]["round"]), []).append(len(mine))
    assert {k: sorted(v) for k, v in sizes.items()} == {
        (c, rnd): [1, 2] for c in ("writeback", "unsafe") for rnd in (1, 2)
    }
    assert all(
        '"round_order": "cell"' in r["meta_json"] for r in stored if r["boot_id"] is not None
    )
    # The plan keeps the caches warm: prepared by the runner for a lone run, by the tier during a
    # shared boot.
    assert {r["cache_state"] for r in stored} == {"warm-by-request"}
    units = {unit_key("fake-batch", w, c) for c in ("writeback", "unsafe") for w in workloads}
    assert_complete_blocks(stored, units)


def test_ctrl_c_in_a_shared_boot_stores_its_finished_runs_and_a_resume_finishes(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeBatchTier, "batch_limit", 3)
    workloads = ("rand-read-4k", "rand-write-4k", "seq-read-1m")
    host = ScriptedHost(per_run={3: Interrupt()})  # the first boot's third run never finishes
    plan = make_plan("fake-batch", workloads=workloads, reps=(2, 2))
    first = sweep(plan, store, host, tmp_path)
    kept = runs(store, first.sweep_id)
    assert first.interrupted and status(store, first.sweep_id) == "interrupted"
    assert first.runs_done == 2 and len(kept) == 2
    assert [(r["boot_id"], r["boot_position"], r["round"]) for r in kept] == [
        ("boot-1", 0, 1),
        ("boot-1", 1, 1),
    ]
    second = sweep(plan, store, host, tmp_path)
    stored = runs(store, first.sweep_id)
    assert second.resumed and not second.interrupted and status(store, first.sweep_id) == "finished"
    assert len(stored) == 6 and second.runs_done == 4
    units = {unit_key("fake-batch", w) for w in workloads}
    assert_complete_blocks(stored, units)
    # The resume finished round 1 with the run that never finished, then ran round 2 in one boot.
    assert [len(c.runs) for c in host.calls] == [3, 1, 3]
    assert host.calls[1].runs[0] == (host.calls[0].runs[2][0], 2)


def test_a_test_tier_is_known_only_while_registered() -> None:
    from iomatrix.tiers import tier_class, tier_names
    from tests.fake_tier import FakeTier

    twin = type("TwinTier", (FakeTier,), {"name": "twin"})
    with registered(twin):
        assert tier_class("twin") is twin and "twin" in tier_names()
    assert "twin" not in tier_names()
    # "fake" is the fixture's
    with pytest.raises(ValueError, match="fake"), registered(twin, FakeTier):
        pass
    with (
        pytest.raises(ValueError, match="repeated"),
        registered(twin, type("Twin2", (FakeTier,), {"name": "twin"})),
    ):
        pass
    # a refused registration changes nothing
    assert "twin" not in tier_names() and tier_class("fake") is FakeTier
