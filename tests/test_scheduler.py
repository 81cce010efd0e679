"""The pure scheduler, driven by scripted outcomes and a fake clock: no fio, no QEMU, no store."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from iomatrix.scheduler import (
    CiWidthPolicy,
    RoleFigures,
    Room,
    Scheduler,
    StopKind,
    StopVerdict,
    UnitState,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(
    keys: Sequence[str],
    *,
    min_runs: int = 3,
    max_runs: int = 10,
    ci: float = 0.05,
    budget: float = 1e9,
    clock: FakeClock | None = None,
    prior: float = 0.0,
    states: list[UnitState] | None = None,
) -> Scheduler:
    return Scheduler(
        states if states is not None else [UnitState(k) for k in keys],
        min_runs=min_runs,
        max_runs=max_runs,
        budget_s=budget,
        policy=CiWidthPolicy(ci, min_runs, max_runs),
        seed=42,
        clock=clock or FakeClock(),
        prior_elapsed_s=prior,
    )


def drive(
    s: Scheduler,
    outcome: Callable[[str, int], float | None],
    clock: FakeClock | None = None,
    run_s: float = 1.0,
    max_slots: int = 10_000,
) -> list[tuple[str, int, int]]:
    """Run the scheduler to the end; `outcome(key, n)` gives the n-th run's value (None =
    failed)."""
    log: list[tuple[str, int, int]] = []
    counts: dict[str, int] = {}
    while slots := s.next_round():
        for slot in slots:
            if not s.should_start(slot):
                continue
            n = counts.get(slot.key, 0)
            counts[slot.key] = n + 1
            if clock is not None:
                clock.t += run_s
            v = outcome(slot.key, n)
            s.record(slot, v is not None, v)
            log.append((slot.key, slot.round, slot.position))
            assert len(log) < max_slots, "scheduler never stopped"
    return log


def steady(value: float = 100.0) -> Callable[[str, int], float]:
    return lambda key, n: value


def noisy(key: str, n: int) -> float:
    return 100.0 + (40.0 if n % 2 else -40.0)  # CV ~40%: never converges at ±5%


def test_min_runs_then_converged_and_every_round_is_a_complete_block() -> None:
    s = make(["a", "b", "c"], min_runs=3)
    log = drive(s, steady())
    assert len(log) == 9
    for r in (1, 2, 3):
        assert sorted(k for k, rr, _ in log if rr == r) == ["a", "b", "c"]
    assert set(s.reasons().values()) == {"converged"}


def test_round_order_is_random_but_reproducible() -> None:
    orders = [
        [k for k, _, _ in drive(make(list("abcdefgh"), min_runs=3), steady())] for _ in range(2)
    ]
    assert orders[0] == orders[1]
    rounds = [orders[0][i * 8 : (i + 1) * 8] for i in range(3)]
    assert len({tuple(r) for r in rounds}) > 1, "every round had the same order: not randomised"


def test_noisy_unit_runs_to_max_while_steady_one_stops_at_min() -> None:
    s = make(["steady", "noisy"], min_runs=3, max_runs=7)
    log = drive(s, lambda k, n: 100.0 if k == "steady" else noisy(k, n))
    assert sum(k == "steady" for k, _, _ in log) == 3
    assert sum(k == "noisy" for k, _, _ in log) == 7
    assert s.reasons() == {"steady": "converged", "noisy": "max runs reached"}


def test_budget_stops_the_minimum_runs_too_but_never_a_units_first_run() -> None:
    clock = FakeClock()
    s = make(["a", "b"], min_runs=3, max_runs=50, budget=4.0, clock=clock)
    log = drive(s, noisy, clock=clock)
    # The budget runs out after 4 runs: the third round (their minimum) does not start.
    assert sum(k == "a" for k, _, _ in log) == 2 and sum(k == "b" for k, _, _ in log) == 2
    assert set(s.reasons().values()) == {"time budget spent at 2 of its 3 minimum runs"}
    assert {v.kind for v in s.verdicts().values() if v} == {StopKind.BUDGET}
    assert s.short_of_minimum() == ["a", "b"]
    # A budget spent before the first round ends still gives every unit its first run: a unit
    # without a value answers nothing.
    clock = FakeClock()
    s = make(list("abcd"), min_runs=3, max_runs=50, budget=2.0, clock=clock)
    log = drive(s, noisy, clock=clock)
    assert sorted(k for k, _, _ in log) == list("abcd")
    assert s.short_of_minimum() == list("abcd")


def test_a_run_the_budget_cannot_hold_is_not_started_at_the_units_own_pace() -> None:
    """The budget is a wall-clock limit (issue 70): a minimum run that would end past it does not
    start, judged by the unit's mean wall so far, or the session's before the unit's first run
    here (a resumed unit)."""
    clock = FakeClock()
    # `resumed` has its round-1 run from an earlier session
    states = [
        UnitState("slow"),
        UnitState("fast"),
        UnitState("resumed", ok=1, points=[(1, 100.0)], rounds={1}),
    ]
    s = make([], min_runs=3, max_runs=3, budget=30.0, clock=clock, states=states)
    walls = {"slow": 10.0, "fast": 1.0, "resumed": 1.0}
    started = []
    while slots := s.next_round():
        for slot in slots:
            if s.should_start(slot):
                started.append(slot.key)
                clock.t += walls[slot.key]
                s.record(slot, True, 100.0, wall_s=walls[slot.key])
    # Rounds 1-2 take 23 s: slow's third run would end at 33 s, the others' at 24 and 25 s.
    assert (started.count("slow"), started.count("fast"), started.count("resumed")) == (2, 3, 2)
    assert s.verdicts()["slow"].reason == "time budget spent at 2 of its 3 minimum runs"
    assert s.short_of_minimum() == ["slow"]
    assert clock.t <= 30.0
    # the resumed unit's first run this session was judged at the session's pace
    assert s.expected_run_s(UnitState("new")) == pytest.approx(
        sum(walls[k] for k in started) / len(started)
    )


def test_budget_includes_the_earlier_sessions_of_a_resumed_sweep() -> None:
    s = make(["a"], min_runs=1, max_runs=50, budget=100.0, prior=100.0)
    log = drive(s, noisy)
    assert len(log) == 1 and s.reasons()["a"] == "time budget spent"


def test_gives_up_after_three_failures_and_others_carry_on() -> None:
    s = make(["bad", "good"], min_runs=2)
    log = drive(s, lambda k, n: None if k == "bad" else 5.0)
    assert sum(k == "bad" for k, _, _ in log) == 3
    assert (
        s.reasons()["bad"] == "gave up after 3 failed runs" and s.reasons()["good"] == "converged"
    )


def test_a_failure_among_successes_is_retried_not_given_up() -> None:
    s = make(["flaky"], min_runs=3)
    log = drive(s, lambda k, n: None if n == 1 else 10.0)
    assert len(log) == 4 and s.units["flaky"].ok == 3 and s.reasons()["flaky"] == "converged"


def test_resume_finishes_the_interrupted_round_in_its_recorded_order_then_continues() -> None:
    full = drive(make(["a", "b", "c", "d"], min_runs=3), steady())
    round2 = [k for k, r, _ in full if r == 2]
    # Interrupted after the first two runs of round 2: those units have round 2 recorded.
    states = []
    for k in "abcd":
        done = {1, 2} if k in round2[:2] else {1}
        states.append(
            UnitState(k, points=[(r, 100.0) for r in sorted(done)], rounds=done, ok=len(done))
        )
    s = make([], min_runs=3, states=states)
    first = s.next_round()
    assert [sl.key for sl in first] == [k for k in round2 if k not in round2[:2]]
    assert all(sl.round == 2 for sl in first)
    for sl in first:
        s.record(sl, True, 100.0)
    third = s.next_round()
    assert {sl.round for sl in third} == {3} and sorted(sl.key for sl in third) == [
        "a",
        "b",
        "c",
        "d",
    ]


def test_resume_of_a_finished_unit_runs_nothing_more() -> None:
    s = make(
        [],
        min_runs=3,
        states=[UnitState("a", points=[(1, 1.0), (2, 1.0), (3, 1.0)], rounds={1, 2, 3}, ok=3)],
    )
    assert s.next_round() == []


class StopAllAfterMin:
    name = "scripted"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def finished(self, units: Sequence[UnitState], room: Room) -> dict[str, StopVerdict]:
        self.calls.append(sorted(u.key for u in units))
        return {u.key: StopVerdict(StopKind.OTHER, "scripted stop") for u in units}


def test_a_stop_policy_plugs_in_and_only_sees_units_past_their_minimum() -> None:
    policy = StopAllAfterMin()
    s = Scheduler(
        [UnitState("a"), UnitState("b")],
        min_runs=2,
        max_runs=9,
        budget_s=1e9,
        policy=policy,
        seed=1,
        clock=FakeClock(),
    )
    log = drive(s, steady())
    assert len(log) == 4 and policy.calls == [["a", "b"]]
    assert set(s.reasons().values()) == {"scripted stop"}
    # the policy's kind, whatever its sentence
    assert {st.kind for st in s.new_stops()} == {StopKind.OTHER}


def test_bad_repetitions_are_refused() -> None:
    with pytest.raises(ValueError, match="min ≤ max"):
        make(["a"], min_runs=5, max_runs=2)


def racing(
    keys: Sequence[str],
    *,
    min_runs: int = 3,
    max_runs: int = 20,
    baselines: Sequence[str] = (),
    threshold_of: dict[str, float] | None = None,
) -> Scheduler:
    from iomatrix.scheduler import RacingPolicy

    states = [UnitState(k, group="w", baseline=k in baselines) for k in keys]
    return Scheduler(
        states,
        min_runs=min_runs,
        max_runs=max_runs,
        budget_s=1e9,
        seed=3,
        clock=FakeClock(),
        policy=RacingPolicy(
            0.05, min_runs, higher_is_better=lambda g: True, threshold_of=threshold_of
        ),
    )


def jitter(base: float, n: int) -> float:
    return base * (1.0 + 0.03 * ((n * 7919) % 5 - 2) / 2)  # ±3%, deterministic


def test_racing_eliminates_clearly_worse_units_after_the_minimum_and_stops_with_one_best() -> None:
    s = racing(["fast", "slow", "slower"], min_runs=3)
    means = {"fast": 1000.0, "slow": 500.0, "slower": 100.0}
    log = drive(s, lambda k, n: jitter(means[k], n))
    reasons = s.reasons()
    assert reasons["slow"].startswith("eliminated") and reasons["slower"].startswith("eliminated")
    assert reasons["fast"].startswith("race over: one best left")
    assert len(log) == 9  # 3 rounds, nothing more: the data settled it at the minimum
    # each elimination keeps the best of its look as its reference (the decision at the end keeps
    # it while that cell is ranked); the store gets it with the stop
    verdicts = s.verdicts()
    assert verdicts["slow"].against == verdicts["slower"].against == "fast"
    assert verdicts["fast"].against is None
    stops = {st.key: st for st in s.new_stops()}
    assert stops["slow"].against == "fast" and stops["fast"].against is None


def test_racing_keeps_a_close_contender_running_and_baselines_stop_at_their_minimum() -> None:
    s = racing(["a", "b", "bare-metal"], min_runs=3, max_runs=8, baselines=["bare-metal"])
    log = drive(
        s, lambda k, n: jitter(1000.0 if k != "b" else 1015.0, n) if k != "bare-metal" else 5.0
    )
    assert sum(k == "bare-metal" for k, _, _ in log) == 3
    assert s.reasons()["bare-metal"] == "baseline: minimum runs kept"
    # a and b are 1.5% apart with the same ±3% jitter: the 90% CI of their ratio lies within ±5%
    # (TOST), so a stops as equivalent at the minimum and the race is over: a settled tied group.
    assert s.reasons()["a"].startswith("equivalent to b: ratio 0.985")
    assert s.reasons()["b"] == "race over: tied group settled (b best)"
    assert sum(k == "a" for k, _, _ in log) == 3


def test_racing_needs_fewer_runs_than_fixed_repetition_for_the_same_answer() -> None:
    means = {f"u{i}": 1000.0 / (1 + i) for i in range(6)}
    s = racing(list(means), min_runs=3, max_runs=10)
    log = drive(s, lambda k, n: jitter(means[k], n))
    assert len(log) <= 0.5 * 6 * 10
    assert s.reasons()["u0"].startswith("race over")


def test_racing_with_a_minimum_of_one_run_waits_for_two_values_before_testing() -> None:
    s = racing(["a", "b"], min_runs=1, max_runs=4)
    log = drive(s, lambda k, n: jitter(1000.0 if k == "a" else 100.0, n))
    assert s.reasons()["b"].startswith("eliminated") and len(log) >= 4


# -- disturbed runs: retried at the end of their round, within the budget --------------------------

# the n-th run of a unit → (value or None, disturbed)
Script = Callable[[str, int], tuple[float | None, bool]]


def drive_disturbed(
    s: Scheduler,
    outcome: Script,
    clock: FakeClock | None = None,
    worthy: Callable[[str, int], bool] | None = None,
) -> list[tuple[str, int, int, bool]]:
    """As `drive`, with the runner's queue: a retry the scheduler returns runs at the end of the
    round."""
    from collections import deque

    log: list[tuple[str, int, int, bool]] = []
    counts: dict[str, int] = {}
    while slots := s.next_round():
        queue = deque(slots)
        while queue:
            slot = queue.popleft()
            if not s.should_start(slot):
                continue
            n = counts.get(slot.key, 0)
            counts[slot.key] = n + 1
            if clock is not None:
                clock.t += 1.0
            value, disturbed = outcome(slot.key, n)
            retry = s.record(
                slot,
                value is not None,
                value,
                disturbed,
                None if worthy is None else worthy(slot.key, n),
            )
            log.append((slot.key, slot.round, slot.position, slot.retry))
            if retry is not None:
                queue.append(retry)
            assert len(log) < 1000, "scheduler never stopped"
    return log


def test_a_disturbed_run_is_retried_at_the_end_of_its_round_and_the_clean_value_replaces_it() -> (
    None
):
    s = make(["a", "b", "c"], min_runs=3, max_runs=3)
    # b's first run was disturbed (a slow outlier); its retry is clean.
    log = drive_disturbed(
        s, lambda k, n: (1.0 if (k, n) == ("b", 0) else 100.0, (k, n) == ("b", 0))
    )
    round1 = [e for e in log if e[1] == 1]
    assert round1[-1] == ("b", 1, 3, True)  # after every unit of the round, at the next position
    assert [e[0] for e in round1[:3]].count("b") == 1
    # the disturbed 1.0 is not used
    assert s.units["b"].points == [(1, 100.0), (2, 100.0), (3, 100.0)]
    assert s.units["b"].ok == 3 and s.units["b"].retries == 1
    assert len(log) == 10 and all(
        sorted({k for k, r, _, _ in log if r == rr}) == ["a", "b", "c"] for rr in (1, 2, 3)
    )


def test_a_retry_disturbed_again_counts_its_own_value_and_is_not_retried_again() -> None:
    s = make(["a"], min_runs=2, max_runs=2)
    # runs 0 and 1 disturbed, run 2 clean
    log = drive_disturbed(s, lambda k, n: (float(n + 1), n < 2))
    assert [(r, retry) for _, r, _, retry in log] == [(1, False), (1, True), (2, False)]
    assert s.units["a"].points == [(1, 2.0), (2, 3.0)]  # round 1: the latest (the retry's) value


def test_a_failed_retry_leaves_the_disturbed_value_counting() -> None:
    s = make(["a"], min_runs=2, max_runs=2)
    drive_disturbed(s, lambda k, n: (None, False) if n == 1 else (10.0 * (n + 1), n == 0))
    u = s.units["a"]
    assert u.points == [(1, 10.0), (2, 30.0)] and u.failed == 1 and u.ok == 2


def test_retries_are_capped_per_unit_and_writeback_alone_is_not_retried() -> None:
    s = make(["a", "b"], min_runs=4, max_runs=4)
    s.max_retries = 2
    # Every run disturbed: a by CPU pressure (retry-worthy), b by page-cache writeback only (our own
    # writes).
    log = drive_disturbed(s, lambda k, n: (100.0, True), worthy=lambda k, n: k == "a")
    assert sum(1 for k, _, _, retry in log if retry and k == "a") == 2
    assert not any(retry for k, _, _, retry in log if k == "b")
    assert s.units["a"].ok == s.units["b"].ok == 4


def test_no_retry_once_the_host_is_busy() -> None:
    from iomatrix.scheduler import BUSY_MIN_RETRIES

    keys = [f"u{i}" for i in range(6)]
    s = make(keys, min_runs=3, max_runs=3)
    # everything disturbed, all the time, retries too
    log = drive_disturbed(s, lambda k, n: (100.0, True))
    retries = [e for e in log if e[3]]
    # Retries until BUSY_MIN_RETRIES of them were disturbed again (those already queued in that
    # round run too), then none: the host is busy.
    assert BUSY_MIN_RETRIES <= len(retries) < len(keys) * s.max_retries and s.host_busy()
    assert all(u.ok == 3 for u in s.units.values())


def test_a_load_that_comes_and_goes_keeps_retrying() -> None:
    """Most first attempts disturbed, their retries clean (the load's off phases): not a busy
    host."""
    keys = [f"u{i}" for i in range(6)]
    s = make(keys, min_runs=3, max_runs=3)
    s.max_retries = 3
    # the n-th run of a unit: even ones disturbed
    log = drive_disturbed(s, lambda k, n: (100.0, n % 2 == 0))
    retries = [e for e in log if e[3]]
    assert not s.host_busy() and 2 * s.disturbed >= s.judged
    assert len(retries) == s.disturbed  # every disturbed run got its retry


def test_no_retry_when_the_budget_is_spent_and_a_queued_retry_is_dropped() -> None:
    clock = FakeClock()
    s = make(["a", "b"], min_runs=2, max_runs=5, budget=2.5, clock=clock)
    log = drive_disturbed(s, lambda k, n: (100.0 + n, (k, n) == ("a", 1)), clock=clock)
    # a's second run (round 2, after the budget) is disturbed: no retry, its value counts.
    assert not any(e[3] for e in log)
    assert s.units["a"].points[-1] == (2, 101.0)
    # A retry queued before the budget ran out is not started once it has: the disturbed value
    # counts.
    clock2 = FakeClock()
    s2 = make(["a"], min_runs=1, max_runs=1, budget=1.5, clock=clock2)
    [slot] = s2.next_round()
    clock2.t = 1.0
    retry = s2.record(slot, True, 7.0, disturbed=True)
    assert retry is not None and retry.retry
    clock2.t = 2.0
    assert not s2.should_start(retry)
    assert s2.units["a"].points == [(1, 7.0)] and s2.next_round() == []


# -- why and when each unit stopped ----------------------------------------------------------------


def test_every_stop_is_reported_once_with_its_kind_and_round() -> None:
    s = racing(["fast", "slow", "bare-metal", "broken"], min_runs=3, baselines=["bare-metal"])
    stops = []
    means = {"fast": 1000.0, "slow": 100.0, "bare-metal": 5.0}
    while slots := s.next_round():
        stops += s.new_stops()
        for slot in slots:
            if s.should_start(slot):
                v = None if slot.key == "broken" else jitter(means[slot.key], slot.round)
                s.record(slot, v is not None, v)
    stops += s.new_stops()
    by = {st.key: st for st in stops}
    assert len(stops) == 4 == len(by)
    assert (by["slow"].kind, by["slow"].round, by["slow"].ok_runs) == ("eliminated", 3, 3)
    assert by["fast"].kind == "settled" and by["fast"].reason.startswith("race over")
    assert by["bare-metal"].kind == "baseline"
    assert by["broken"].kind == "gave-up" and by["broken"].ok_runs == 0
    assert s.new_stops() == []


def test_the_limits_and_ci_width_stop_with_their_kinds() -> None:
    s = make(["steady", "noisy"], min_runs=3, max_runs=5)
    drive(s, lambda k, n: 100.0 if k == "steady" else (50.0 if n % 2 else 150.0))
    assert {k: (v.kind, v.reason) for k, v in s.verdicts().items() if v} == {
        "steady": (StopKind.CONVERGED, "converged"),
        "noisy": (StopKind.MAX_RUNS, "max runs reached"),
    }
    s = make(["a"], min_runs=1, max_runs=50, budget=100.0, prior=100.0)
    drive(s, lambda k, n: 100.0 * (1 + n % 3))
    assert s.verdicts()["a"] == StopVerdict(StopKind.BUDGET, "time budget spent")


# -- batches: runs of one cell sharing a start-up (the guest tier's boot) --------------------------


CELL_OF = {
    "g1:a": "g1",
    "g1:b": "g1",
    "g1:c": "g1",
    "g2:a": "g2",
    "g2:b": "g2",
    "g2:c": "g2",
    "bm:a": "bm:a",
}


def drive_batches(
    s: Scheduler, max_batch: dict[str, int], outcome: Callable[[str, int], float | None]
) -> list[list[tuple[str, int, int]]]:
    """Like drive(), batch by batch; returns the batches as run."""
    out: list[list[tuple[str, int, int]]] = []
    counts: dict[str, int] = {}
    while batches := s.next_batches(CELL_OF, max_batch):
        for batch in batches:
            ran = []
            for slot in batch:
                if not s.should_start(slot):
                    continue
                n = counts.get(slot.key, 0)
                counts[slot.key] = n + 1
                v = outcome(slot.key, n)
                s.record(slot, v is not None, v)
                ran.append((slot.key, slot.round, slot.position))
            if ran:
                out.append(ran)
        assert len(out) < 1000, "scheduler never stopped"
    return out


def test_batches_hold_one_cell_each_and_cover_every_unit_of_every_round() -> None:
    s = make(list(CELL_OF), min_runs=3)
    batches = drive_batches(s, {"g1": 8, "g2": 8}, steady())
    for b in batches:
        assert len({CELL_OF[k] for k, _, _ in b}) == 1  # one cell per batch
        assert len({r for _, r, _ in b}) == 1  # one round per batch
    for r in (1, 2, 3):
        in_round = [x for b in batches for x in b if x[1] == r]
        assert sorted(k for k, _, _ in in_round) == sorted(CELL_OF)
        # positions 0..n-1 in run order
        assert sorted(p for _, _, p in in_round) == list(range(len(CELL_OF)))
        assert [p for _, _, p in in_round] == sorted(p for _, _, p in in_round)
    # 2 guest cells batched + the bare-metal unit on its own: 3 batches per round.
    assert len(batches) == 9


def test_batch_order_is_random_per_round_at_the_cell_level_and_reproducible() -> None:
    a = drive_batches(make(list(CELL_OF), min_runs=6, max_runs=6), {"g1": 8, "g2": 8}, steady())
    b = drive_batches(make(list(CELL_OF), min_runs=6, max_runs=6), {"g1": 8, "g2": 8}, steady())
    assert a == b
    cell_orders = {tuple(CELL_OF[x[0][0]] for x in a if x[0][1] == r) for r in range(1, 7)}
    unit_orders = {
        tuple(k for x in a for k, rr, _ in x if rr == r and CELL_OF[k] == "g1") for r in range(1, 7)
    }
    assert len(cell_orders) > 1 and len(unit_orders) > 1


def test_a_cell_larger_than_its_tiers_limit_is_split() -> None:
    s = make(list(CELL_OF), min_runs=1, max_runs=1)
    batches = drive_batches(s, {"g1": 2, "g2": 3}, steady())
    sizes = sorted(len(b) for b in batches if CELL_OF[b[0][0]] == "g1")
    assert sizes == [1, 2]
    assert [len(b) for b in batches if CELL_OF[b[0][0]] == "g2"] == [3]


def test_failed_runs_of_a_batch_are_retried_in_a_later_round_and_the_rest_count() -> None:
    # g1:b fails its first run (its part of the boot hung); the others of that batch are kept.
    s = make(list(CELL_OF), min_runs=2, max_runs=2)
    batches = drive_batches(
        s, {"g1": 8, "g2": 8}, lambda k, n: None if (k == "g1:b" and n == 0) else 100.0
    )
    runs_b = [x for b in batches for x in b if x[0] == "g1:b"]
    assert len(runs_b) == 3 and s.units["g1:b"].ok == 2 and s.units["g1:b"].failed == 1
    assert all(s.units[k].ok == 2 for k in CELL_OF)


def test_resumed_round_keeps_its_batches_in_their_order() -> None:
    full = make(list(CELL_OF), min_runs=1, max_runs=1)
    first = full.next_batches(CELL_OF, {"g1": 8, "g2": 8})
    flat = [sl for b in first for sl in b]
    # The first three runs happened in an earlier session.
    states = [UnitState(k) for k in CELL_OF]
    for sl in flat[:3]:
        st = next(x for x in states if x.key == sl.key)
        st.rounds.add(1)
        st.ok = 1
        st.points.append((1, 1.0))
    resumed = make(list(CELL_OF), min_runs=2, max_runs=2, states=states)
    again = [sl for b in resumed.next_batches(CELL_OF, {"g1": 8, "g2": 8}) for sl in b]
    assert [sl.key for sl in again] == [sl.key for sl in flat[3:]]
    assert all(sl.round == 1 for sl in again)


def test_in_boot_repetition_puts_several_rounds_of_a_cell_in_one_batch_and_keeps_blocks_complete() -> (  # noqa: E501
    None
):
    s = make(list(CELL_OF), min_runs=4, max_runs=4)
    log: list[list[tuple[str, int, int]]] = []
    while batches := s.next_batches(CELL_OF, {"g1": 8, "g2": 8}, rounds_per_batch=2):
        for batch in batches:
            ran = []
            for slot in batch:
                if s.should_start(slot):
                    s.record(slot, True, 100.0)
                    ran.append((slot.key, slot.round, slot.position))
            log.append(ran)
        assert len(log) < 100
    guest = [b for b in log if CELL_OF[b[0][0]] != b[0][0]]
    # 4 runs each, 2 rounds per boot: each guest cell boots twice, 6 runs a boot, both rounds in it.
    assert len(guest) == 4 and all(len(b) == 6 and len({r for _, r, _ in b}) == 2 for b in guest)
    for b in guest:  # round r's runs before round r+1's in the boot
        assert [r for _, r, _ in b] == sorted(r for _, r, _ in b)
    # Every round is a complete block, bare metal included (it joins each second round on its own).
    for r in (1, 2, 3, 4):
        in_round = [x for b in log for x in b if x[1] == r]
        assert sorted(k for k, _, _ in in_round) == sorted(CELL_OF)
        assert sorted(p for _, _, p in in_round) == list(range(len(CELL_OF)))
    assert all(s.units[k].ok == 4 for k in CELL_OF)


def test_in_boot_repetition_never_exceeds_max_runs() -> None:
    s = make(list(CELL_OF), min_runs=1, max_runs=3)
    counts: dict[str, int] = {}
    while batches := s.next_batches(CELL_OF, {"g1": 16, "g2": 16}, rounds_per_batch=4):
        for batch in batches:
            for slot in batch:
                if s.should_start(slot):
                    counts[slot.key] = counts.get(slot.key, 0) + 1
                    s.record(slot, True, 100.0 + 40.0 * (counts[slot.key] % 2))
    assert all(1 <= n <= 3 for n in counts.values()), counts


def wobble(base: float, n: int, phase: int) -> float:
    # ±15%, deterministic, out of step per unit
    return base * (1.0 + 0.15 * (((n + phase) * 7919) % 5 - 2) / 2)


def test_racing_stops_two_unseparable_leaders_when_max_cannot_separate_them() -> None:
    # b is ~10% behind a with ±15% noise that does not cancel within a round: not separable in 8
    # rounds.
    s = racing(["a", "b"], min_runs=3, max_runs=8)
    log = drive(s, lambda k, n: wobble(1000.0 if k == "a" else 900.0, n, 0 if k == "a" else 2))
    reasons = s.reasons()
    assert (
        reasons["b"].startswith("not separable from a within the budget") and "left" in reasons["b"]
    )
    assert reasons["a"] == "race over: not separable within the budget (a best)"
    assert len(log) < 2 * 8
    assert {st.kind for st in s.new_stops()} == {StopKind.UNRESOLVED}
    # With room for many more rounds the same pair races on, past the point where max 8 gave up.
    s2 = racing(["a", "b"], min_runs=3, max_runs=200)
    log2 = drive(s2, lambda k, n: wobble(1000.0 if k == "a" else 900.0, n, 0 if k == "a" else 2))
    assert len(log2) > len(log)


def test_room_counts_max_and_the_budget_at_the_sessions_pace() -> None:
    room = Room(max_runs=8, runs_affordable=None, active_units=4)
    assert room.rounds_left(3) == 5 and room.rounds_left(9) == 0
    # 10 runs ÷ 4 units a round
    assert Room(8, runs_affordable=10.0, active_units=4).rounds_left(3) == 2
    clock = FakeClock()
    s = Scheduler(
        [UnitState("a"), UnitState("b")],
        min_runs=1,
        max_runs=8,
        budget_s=100.0,
        policy=CiWidthPolicy(0.05, 1, 8),
        seed=1,
        clock=clock,
    )
    assert s.room().runs_affordable is None  # no pace yet
    for slot in s.next_round():
        clock.t += 10.0
        s.record(slot, True, 1.0)
    assert s.room().runs_affordable == pytest.approx(8.0)  # 80 s left at 10 s a run


# -- precision after the decision (repetitions.precision_max) --------------------------------------
class ScriptedRace:
    """A stop policy that stops each unit at a scripted number of ok runs with a scripted reason,
    recording which units it was asked about and the Room it was given."""

    name = "scripted"

    def __init__(self, stops: dict[str, tuple[int, StopKind, str]]) -> None:
        self.stops = stops
        self.seen: list[tuple[list[str], int]] = []

    def finished(self, units: Sequence[UnitState], room: Room) -> dict[str, StopVerdict]:
        self.seen.append(([u.key for u in units], room.active_units))
        return {
            u.key: StopVerdict(self.stops[u.key][1], self.stops[u.key][2])
            for u in units
            if u.ok >= self.stops[u.key][0]
        }


def wide_then(value: float, first: int = 3) -> Callable[[str, int], float]:
    """±10% for the first `first` runs, then `value` every time: wide at the decision, narrowing
    after it."""
    return lambda key, n: value * (1.1 if n % 2 else 0.9) if n < first else value


def race_scheduler(
    precision_max: int | None,
    *,
    budget: float = 1e9,
    clock: FakeClock | None = None,
    ci_target: float | None = 0.05,
    max_runs: int = 6,
) -> tuple[Scheduler, ScriptedRace]:
    policy = ScriptedRace(
        {
            "a": (max_runs, StopKind.SETTLED, "race over: a best"),
            "b": (3, StopKind.ELIMINATED, "eliminated: scripted"),
        }
    )
    units = [UnitState("a"), UnitState("b", precision_max=precision_max)]
    return Scheduler(
        units,
        min_runs=3,
        max_runs=max_runs,
        budget_s=budget,
        policy=policy,
        seed=5,
        clock=clock or FakeClock(),
        ci_target=ci_target,
    ), policy


def ten_percent(key: str, n: int) -> float:
    return 90.0 if n % 2 else 110.0  # CV ~10%: ±5% needs about 20 runs


def test_a_decided_unit_runs_on_after_the_race_and_leaves_the_race_untouched() -> None:
    plain, plain_policy = race_scheduler(None, max_runs=4)
    plain_log = drive(plain, ten_percent)
    s, policy = race_scheduler(5, max_runs=4)
    log = drive(s, ten_percent)
    # While a races (rounds 1–4), b takes part only up to its decision at 3 runs, exactly as without
    # precision …
    assert [x for x in log if x[1] <= 4] == plain_log
    # … and the policy saw the same units and the same Room each time
    assert policy.seen == plain_policy.seen
    # … then b runs on alone, a round (block) each, to its precision_max.
    assert [(k, r) for k, r, _ in log if r > 4] == [("b", 5), ("b", 6)]
    assert s.units["b"].ok == 5 and s.units["a"].ok == 4
    reason = s.reasons()["b"]
    assert reason.startswith("eliminated: scripted; then run on toward ±5%: CI ±")
    assert reason.endswith("at 5 runs (precision_max)")
    # the decision's kind is kept
    assert s.verdicts()["b"] == StopVerdict(StopKind.ELIMINATED, reason)
    assert s.reasons()["a"] == "race over: a best"


def test_a_very_noisy_decided_unit_runs_on_to_precision_max_while_the_budget_lasts() -> None:
    s, _ = race_scheduler(10)
    drive(s, noisy)  # ±40%: some 250 runs for ±5%, still run to precision_max (no futility stop)
    assert s.units["b"].ok == 10
    assert s.reasons()["b"].endswith("at 10 runs (precision_max)")


def test_a_decided_unit_stops_as_soon_as_its_ci_is_within_the_target() -> None:
    s, _ = race_scheduler(24)
    drive(s, wide_then(100.0))
    b = s.units["b"]
    assert 3 < b.ok < 24
    assert (
        s.reasons()["b"]
        == f"eliminated: scripted; then run on toward ±5%: CI within ±5% after {b.ok} runs"
    )
    from iomatrix.stats import needs_more_runs

    assert needs_more_runs(b.values, 1, 100, 0.05)[1] == "converged"
    assert needs_more_runs(b.values[:-1], 1, 100, 0.05)[0]  # one run fewer was not enough


def test_a_unit_already_precise_at_its_decision_stops_there() -> None:
    s, _ = race_scheduler(24)
    drive(s, steady())
    assert s.units["b"].ok == 3 and s.reasons()["b"] == "eliminated: scripted"


def test_the_budget_ends_the_precision_runs_with_the_ci_reached_so_far() -> None:
    clock = FakeClock()
    s, _ = race_scheduler(24, budget=12.5, clock=clock)
    # a: 6 runs, b: 3 in the race, then b alone until 12.5 s
    drive(s, ten_percent, clock=clock, run_s=1.0)
    assert s.units["b"].ok == 7
    assert s.reasons()["b"].startswith("eliminated: scripted; then run on toward ±5%: CI ±")
    assert s.reasons()["b"].endswith("at 7 runs (time budget spent)")


def test_precision_needs_a_ci_target() -> None:
    with pytest.raises(ValueError, match="ci_target"):
        race_scheduler(10, ci_target=None)


def test_no_run_beyond_the_minimum_starts_if_it_would_end_past_the_budget() -> None:
    clock = FakeClock()
    s = Scheduler(
        [UnitState("slow"), UnitState("fast")],
        min_runs=2,
        max_runs=10,
        budget_s=35.0,
        policy=CiWidthPolicy(0.001, 2, 10),
        seed=3,
        clock=clock,
    )
    took = {"slow": 10.0, "fast": 1.0}
    runs: list[str] = []
    while slots := s.next_round():
        for slot in slots:
            if s.should_start(slot):
                clock.t += took[slot.key]
                s.record(slot, True, noisy(slot.key, runs.count(slot.key)), wall_s=took[slot.key])
                runs.append(slot.key)
    # 22 s for the minimum; round 3 ends at 33 s; round 4: fast ends at 34, slow would end at 44:
    # not started; round 5: fast would end at 35, the budget: not started either.
    assert runs.count("slow") == 3 and runs.count("fast") == 4
    assert clock.t == 34.0
    assert s.reasons() == {"slow": "time budget spent", "fast": "time budget spent"}


def test_a_resumed_sweep_carries_on_with_the_precision_runs() -> None:
    # Interrupted in the precision phase: a finished its race (6 runs), b had 5 runs (3 in the race,
    # 2 after).
    a = UnitState(
        "a", points=[(r, ten_percent("a", r)) for r in range(1, 7)], rounds=set(range(1, 7)), ok=6
    )
    b = UnitState(
        "b",
        points=[(r, ten_percent("b", i)) for i, r in enumerate((1, 2, 3, 7, 8))],
        rounds={1, 2, 3, 7, 8},
        ok=5,
        precision_max=10,
    )
    policy = ScriptedRace(
        {
            "a": (6, StopKind.SETTLED, "race over: a best"),
            "b": (3, StopKind.ELIMINATED, "eliminated: scripted"),
        }
    )
    s = Scheduler(
        [a, b],
        min_runs=3,
        max_runs=6,
        budget_s=1e9,
        policy=policy,
        seed=5,
        clock=FakeClock(),
        ci_target=0.05,
    )
    log = drive(s, lambda key, n: ten_percent(key, n + 5))
    # new rounds after the last one
    assert [(k, r) for k, r, _ in log] == [("b", r) for r in range(9, 14)]
    assert s.units["b"].ok == 10 and s.reasons()["b"].endswith("at 10 runs (precision_max)")
    assert s.reasons()["a"] == "race over: a best"


# -- precision for the contenders only (repetitions.precision_for = "contenders") ------------------
def contenders_scheduler(
    compared: tuple[str, ...] = (),
    *,
    precision_for: str = "contenders",
    budget: float = 1e9,
    clock: FakeClock | None = None,
) -> Scheduler:
    """a wins the race at 6 runs (max), b is eliminated at 3, c is a baseline kept at its minimum;
    all three of a tier with precision_max 30; a is quoted against the units in `compared` (its
    QEMU-default twin)."""
    policy = ScriptedRace(
        {
            "a": (6, StopKind.SETTLED, "race over: a best"),
            "b": (3, StopKind.ELIMINATED, "eliminated: scripted"),
            "c": (3, StopKind.BASELINE, "baseline: minimum runs kept"),
        }
    )
    units = [
        UnitState("a", precision_max=30, compared_with=compared),
        UnitState("b", precision_max=30),
        UnitState("c", precision_max=30),
    ]
    return Scheduler(
        units,
        min_runs=3,
        max_runs=6,
        budget_s=budget,
        policy=policy,
        seed=5,
        clock=clock or FakeClock(),
        ci_target=0.05,
        precision_for=precision_for,
    )


def test_only_the_contenders_run_on_for_precision_and_the_others_say_so() -> None:
    s = contenders_scheduler()
    log = drive(s, ten_percent)
    assert {k for k, r, _ in log if r > 6} == {"a"}  # after the race: the winner alone
    a = s.units["a"]
    assert 6 < a.ok < 30
    assert (
        s.reasons()["a"]
        == f"race over: a best; then run on toward ±5%: CI within ±5% after {a.ok} runs"
    )
    for key, said in (("b", "eliminated: scripted"), ("c", "baseline: minimum runs kept")):
        assert s.units[key].ok == 3
        reason = s.reasons()[key]
        assert reason.startswith(f"{said}; not run on toward ±5%: not a contender, CI ±"), reason
        assert s.verdicts()[key].kind is s.units[key].stopped.kind  # the decision's kind is kept
    assert s.precision_units() == {"a"}


def test_the_comparison_a_contender_is_quoted_against_runs_on_too_even_when_eliminated() -> None:
    s = contenders_scheduler(("b",))
    log = drive(s, ten_percent)
    assert {k for k, r, _ in log if r > 6} == {"a", "b"}
    assert s.reasons()["b"].startswith(
        "eliminated: scripted; then run on toward ±5%: CI within ±5% after "
    )
    assert s.reasons()["c"].startswith("baseline: minimum runs kept; not run on toward ±5%")
    assert s.verdicts()["b"].kind is StopKind.ELIMINATED


def test_a_precise_winner_still_brings_its_comparison_to_precision() -> None:
    # a's CI is within ±5% when the race ends (it stops there); b, its comparison, is not and runs
    # on.
    s = contenders_scheduler(("b",))
    drive(s, lambda key, n: 100.0 if key == "a" else ten_percent(key, n))
    assert s.units["a"].ok == 6 and s.reasons()["a"] == "race over: a best"
    assert s.units["b"].ok > 3 and "then run on toward ±5%" in s.reasons()["b"]


def test_the_sweep_ends_before_its_budget_once_the_contenders_are_precise() -> None:
    clock = FakeClock()
    s = contenders_scheduler(("b",), budget=1000.0, clock=clock)
    drive(s, ten_percent, clock=clock, run_s=1.0)
    assert all(u.done for u in s.units.values())
    assert not any("budget" in r for r in s.reasons().values() if r)
    spent_contenders = clock.t
    assert spent_contenders < 1000.0
    # Every decided unit run on (precision_for = "all") costs more runs for the same answer.
    clock_all = FakeClock()
    drive(
        contenders_scheduler(("b",), precision_for="all", budget=1000.0, clock=clock_all),
        ten_percent,
        clock=clock_all,
        run_s=1.0,
    )
    assert spent_contenders < clock_all.t < 1000.0


def test_precision_for_names_a_known_scope() -> None:
    with pytest.raises(ValueError, match="precision_for"):
        contenders_scheduler(precision_for="losers")


def test_when_the_budget_ends_the_race_a_loser_says_it_would_not_have_run_on() -> None:
    clock = FakeClock()
    s = contenders_scheduler(("b",), budget=10.5, clock=clock)
    # b and c decided at 3 runs; a races on, until the budget
    drive(s, ten_percent, clock=clock, run_s=1.0)
    assert s.units["a"].ok < 6 and s.reasons()["a"] == "time budget spent"
    # a's comparison
    assert s.reasons()["b"].startswith("eliminated: scripted; then run on toward ±5%: CI ±")
    assert s.reasons()["b"].endswith("at 3 runs (time budget spent)")
    assert s.reasons()["c"].startswith(
        "baseline: minimum runs kept; not run on toward ±5%: not a contender, CI ±"
    )


# -- a budget spent on the decision (stats/deciding.py) --------------------------------------------
def deciding_scheduler(precision_for: str) -> Scheduler:
    """a and b close (3 % apart, each ±8 % in its own rhythm: their race ends at max unsettled), c
    far behind and noisy (eliminated, its CI wide): all of one group, precision_max 24, CI target ±5
    %."""
    units = [UnitState(k, group="w", precision_max=24) for k in ("a", "b", "c")]
    return post_race_scheduler(units, precision_for=precision_for)


def post_race_scheduler(
    units: list[UnitState],
    max_runs: int = 4,
    precision_for: str = "contenders",
    higher_is_better: Callable[[str], bool] = lambda group: True,
    roles: Sequence[RoleFigures] = (),
) -> Scheduler:
    """The scheduler of the precision-round tests: racing at θ 5 %, 3 to `max_runs` race runs, no
    budget limit, a fake clock, CI target ±5 %."""
    from iomatrix.scheduler import RacingPolicy

    policy = RacingPolicy(threshold=0.05, min_runs=3, higher_is_better=higher_is_better)
    return Scheduler(
        units,
        min_runs=3,
        max_runs=max_runs,
        budget_s=1e9,
        policy=policy,
        seed=5,
        clock=FakeClock(),
        ci_target=0.05,
        precision_for=precision_for,
        roles=roles,
    )


def close_pair(key: str, n: int) -> float:
    wobble = {
        "a": (0.0, 0.08, -0.08, 0.04),
        "b": (0.06, -0.02, 0.0, -0.07, 0.03),
        "c": (0.3, -0.3),
    }[key]
    return {"a": 100.0, "b": 97.0, "c": 50.0}[key] * (1.0 + wobble[n % len(wobble)])


@pytest.mark.parametrize("precision_for", ["all", "contenders"])
def test_the_deciding_pair_gets_its_runs_before_one_figure_is_polished(precision_for: str) -> None:
    s = deciding_scheduler(precision_for)
    log = drive(s, close_pair)
    race_end = 4
    after = [(k, r) for k, r, _ in log if r > race_end]
    rounds_of = {k: [r for kk, r in after if kk == k] for k in "abc"}
    # The leader and the runner-up run together, round by round (paired), until their comparison is
    # settled or at precision_max; c runs with them while the race has not settled it against the
    # leader (its 4 noisy rounds may leave it neither eliminated nor ruled out), and once settled
    # gets precision runs (under "all") only after them.
    assert rounds_of["a"] == rounds_of["b"] and rounds_of["a"]
    with_pair = [r for r in rounds_of["c"] if r <= max(rounds_of["a"])]
    assert with_pair == rounds_of["a"][: len(with_pair)]
    # settled before the pair: the pair's later rounds are its own
    assert len(with_pair) < len(rounds_of["a"])
    assert s.units["a"].ok == s.units["b"].ok
    # Where the pair ended: settled by the race's rule (not deciding any more), or at its
    # precision_max.
    assert not s.deciding_units() or s.units["a"].ok == 24


def test_a_roles_veto_job_shares_the_precision_rounds_with_its_deciding_job() -> None:
    """Two groups of the same close pair: "log", the job whose figure decides a role, and "data", a
    job of the same role whose figures veto its pick. After the race both pairs run in the same
    precision rounds, from the first one on, each paired: a veto needs the 95% interval of its
    ratio beyond the margin, and a vetoed pick is weighed over every figure, so the veto's
    comparison decides the answer as much as the log's. Measured (issue 53): with the deciding
    job's pairs first, the data files' cache=none cells stayed at their 3 race runs while the log's
    pair ran to round 8, and the database's answer waited on that veto."""
    units = [
        UnitState(f"{g}-{k}", group=g, precision_max=24) for g in ("log", "data") for k in "abc"
    ]
    s = post_race_scheduler(units)
    log = drive(s, lambda key, n: close_pair(key.split("-")[1], n))
    after = [(k, r) for k, r, _ in log if r > 4]
    rounds_of = {k: [r for kk, r in after if kk == k] for k in s.units}
    for g in ("log", "data"):
        assert rounds_of[f"{g}-a"] and rounds_of[f"{g}-a"] == rounds_of[f"{g}-b"], rounds_of
    # the first precision round holds both pairs: neither waits for the other to settle
    assert min(rounds_of["data-a"]) == min(rounds_of["log-a"]), rounds_of
    shared = set(rounds_of["data-a"]) & set(rounds_of["log-a"])
    assert len(shared) >= min(len(rounds_of["data-a"]), len(rounds_of["log-a"])) - 1, rounds_of


def test_every_unsettled_contender_shares_the_leaders_precision_rounds() -> None:
    """A cell the race left unsettled behind the runner-up (d: 15 % behind, too noisy to separate or
    rule out in the race's 4 rounds) runs on with the leader, round by round, as the runner-up does:
    the answer's tie-break may pick any cell not settled against the leader. Measured (issue 53):
    with the runner-up alone, such a cell stayed at 3 rounds while the pair ran 9, and was the file
    server's leading configuration on its 3 rounds."""
    units = [UnitState(k, group="w", precision_max=12) for k in ("a", "b", "d")]
    s = post_race_scheduler(units)
    wobble = {
        "a": (0.0, 0.08, -0.08, 0.04),
        "b": (0.06, -0.02, 0.0, -0.07, 0.03),
        "d": (0.4, -0.35, 0.05),
    }
    centre = {"a": 100.0, "b": 97.0, "d": 85.0}
    log = drive(s, lambda key, n: centre[key] * (1.0 + wobble[key][n % len(wobble[key])]))
    after = [(k, r) for k, r, _ in log if r > 4]
    rounds_of = {k: [r for kk, r in after if kk == k] for k in "abd"}
    assert rounds_of["a"] and rounds_of["d"], rounds_of
    # d's precision rounds start with the leader's (paired), not after the runner-up's pair is done.
    assert min(rounds_of["d"]) == min(rounds_of["a"])
    assert {r for r in rounds_of["d"] if r <= max(rounds_of["a"])} <= set(rounds_of["a"])


def test_a_decided_groups_deciding_pair_runs_on_while_another_groups_race_goes_on() -> None:
    """Two groups: "files", whose race ends early as a stable tied group
    (a and b 2 % apart: within θ, not yet shown equivalent, so its pair still decides), and "data",
    whose race runs on to max. The files pair joins data's race rounds, paired, instead of waiting
    for every race to end. Measured (issue 53, a quickstart sweep): the file server's race ended at
    round 3 and its pair then waited through rounds 4-10 of the database's race, running once more
    in round 11, when the budget ran out."""
    units = [
        UnitState(f"{g}-{k}", group=g, precision_max=12)
        for g in ("files", "data")
        for k in ("a", "b")
    ]
    s = post_race_scheduler(units, max_runs=10)
    files = {"a": (0.0, 0.08, -0.08, 0.04), "b": (0.06, -0.04, -0.06, 0.07)}
    data = {"a": (0.07, -0.05, 0.03, -0.07, 0.01), "b": (-0.05, 0.07, -0.07, 0.03)}

    def value(key: str, n: int) -> float:
        group, cell = key.split("-")
        wobble = (files if group == "files" else data)[cell]
        return {"files": {"a": 100.0, "b": 98.0}, "data": {"a": 100.0, "b": 85.0}}[group][cell] * (
            1.0 + wobble[n % len(wobble)]
        )

    log = drive(s, value)
    rounds_of = {k: sorted(r for kk, r, _ in log if kk == k) for k in s.units}
    race_rounds = rounds_of["data-b"]  # eliminated at the end of data's race (16 % behind, ±7 %)
    assert len(race_rounds) > 4 and s.reasons()["data-b"].startswith("eliminated"), rounds_of
    files_decided_at = 4  # the stable tied group: rounds 3 and 4 alike
    assert s.reasons()["files-a"].startswith("race over: stable tied group"), s.reasons()
    # Every round of data's race after files' ended holds the files pair too, both cells (paired).
    joined = [r for r in race_rounds if r > files_decided_at]
    assert joined and rounds_of["files-a"] == rounds_of["files-b"]
    assert set(joined) <= set(rounds_of["files-a"]), rounds_of


def test_a_round_runs_each_groups_cells_together_in_an_order_of_their_own() -> None:
    """A pair is compared over the rounds both ran, and the host drifts over seconds: the cells of
    one group (one workload in one tier) run one after another, in a random order inside the group
    that changes from round to round; the groups' order changes too. A unit that has stopped leaves
    the others' order unchanged (a resumed round keeps its order)."""
    groups = {"log": ["a", "b", "c", "d"], "data": ["a", "b", "c", "d"], "files": ["a", "b"]}
    states = [UnitState(f"{g}-{c}", group=g) for g, cells in groups.items() for c in cells]
    s = make([], states=states)
    keys = sorted(u.key for u in states)
    inside: dict[str, set[tuple[str, ...]]] = {g: set() for g in groups}
    firsts = set()
    for rnd in range(1, 13):
        order = s.order(rnd, keys)
        assert sorted(order) == keys
        seen = [k.split("-")[0] for k in order]
        runs = [g for i, g in enumerate(seen) if i == 0 or seen[i - 1] != g]
        assert sorted(runs) == sorted(groups), f"round {rnd}: a group split: {order}"
        for g in groups:
            inside[g].add(tuple(k for k in order if k.startswith(f"{g}-")))
        firsts.add(seen[0])
        assert s.order(rnd, keys) == order  # reproducible from the seed and the round
        fewer = [k for k in keys if k != "log-b"]
        assert s.order(rnd, fewer) == [k for k in order if k != "log-b"]
    assert all(len(v) > 1 for v in inside.values()), "the order inside a group never changed"
    assert len(firsts) > 1, "the groups always ran in the same order"


def test_a_groups_deciding_pair_runs_back_to_back_in_either_order() -> None:
    """Once the data name a group's unsettled deciding pair (a and b, 3 % apart; c and d far behind,
    settled), every round runs a and b one right after the other, a first in some rounds and b first
    in others, while c and d still take every position around them. Before any data (no pair
    named) the same seed leaves a and b apart in some rounds: it is the pair that holds them
    together. Why: a run between the pair's two adds the host's drift over it to their paired
    difference (issue 53: 0.15 rms when adjacent, 0.19-0.25 with one or two runs between)."""
    units = [UnitState(k, group="w", precision_max=24) for k in "abcd"]
    s = post_race_scheduler(units)
    keys = sorted(s.units)

    def apart(order: list[str]) -> int:
        return abs(order.index("a") - order.index("b"))

    before = [s.order(r, keys) for r in range(5, 45)]
    assert any(apart(o) > 1 for o in before), "a and b always adjacent without a deciding pair"
    values = {"a": 100.0, "b": 97.0, "c": 50.0, "d": 48.0}
    for _ in range(4):
        for slot in s.next_round():
            v = values[slot.key] * (1.03 if (slot.round + ord(slot.key)) % 3 == 0 else 0.98)
            s.record(slot, True, v)
    s.next_round()  # refreshes what the data decide
    assert s.deciding_units() == {"a", "b"}, s.deciding_units()
    after = [s.order(r, keys) for r in range(5, 45)]
    assert all(sorted(o) == keys and apart(o) == 1 for o in after), after
    assert {o.index("a") < o.index("b") for o in after} == {True, False}
    assert len({o.index("c") for o in after}) >= 3, "c no longer takes every position"
    assert s.order(7, keys) == after[2]  # still reproducible from the seed and the round


def test_a_deciding_stretch_keeps_the_leader_beside_its_closest_partners() -> None:
    """The leader sits inside its partners' stretch, the runner-up (first partner) and the next one
    right beside it, the runner-up on either side; the third one run away from it, next to the
    runner-up's side; the other units keep their shuffled order around the stretch."""
    members = ["n1", "z", "x", "n2", "L", "y", "n3"]
    sides = set()
    for seed in range(20):
        out = Scheduler._pairs_together(list(members), ("L", ["x", "y", "z"]), random.Random(seed))
        assert sorted(out) == sorted(members)
        i = out.index("L")
        assert {out[i - 1], out[i + 1]} == {"x", "y"}, out
        side = 1 if out[i + 1] == "x" else -1
        assert out[i + 2 * side] == "z", out
        sides.add(side)
        assert [m for m in out if m.startswith("n")] == ["n1", "n2", "n3"]
    assert sides == {1, -1}, "the runner-up always on one side of the leader"
    one = {
        tuple(Scheduler._pairs_together(["a", "n", "b"], ("a", ["b"]), random.Random(seed)))
        for seed in range(20)
    }
    assert one == {("a", "b", "n"), ("b", "a", "n")}, one
    # a leader not among the round's units, or no partner: the shuffle as it was
    assert Scheduler._pairs_together(["n", "b"], ("a", ["b"]), random.Random(1)) == ["n", "b"]
    assert Scheduler._pairs_together(["a", "n"], None, random.Random(1)) == ["a", "n"]


def test_a_roles_margin_is_its_races_threshold() -> None:
    """Two cells 7 % apart, each wobbling ±8 % round to round in its own rhythm, in one group. At
    the plan's threshold (5 %) the race cannot settle them within its 4 rounds: b is "not separable
    from a within the budget". In a group whose role's margin is 10 % (RacingPolicy.threshold_of,
    as sweep/units.py fills it from the plan's roles) they are a tied group, the race's end the
    answer gives too (report/recommend decides a role's job at its margin)."""
    from iomatrix.scheduler import RacingPolicy

    def outcome(key: str, n: int) -> float:
        wobble = {"a": (0.0, 0.08, -0.08, 0.04), "b": (0.06, -0.02, 0.0, -0.07, 0.03)}[key]
        return {"a": 100.0, "b": 93.0}[key] * (1.0 + wobble[n % len(wobble)])

    def race(threshold_of: dict[str, float] | None) -> dict[str, StopVerdict | None]:
        s = racing(["a", "b"], max_runs=4, threshold_of=threshold_of)
        assert isinstance(s.policy, RacingPolicy)
        assert s.policy.threshold_for("w") == (threshold_of or {}).get("w", 0.05)
        drive(s, outcome)
        return {k: u.stopped for k, u in s.units.items()}

    plan, role = race(None), race({"w": 0.10})
    assert plan["b"] is not None and plan["b"].kind is StopKind.UNRESOLVED, plan
    assert "7% behind" in plan["b"].reason or "6% behind" in plan["b"].reason, plan
    assert all(v is not None and v.kind is StopKind.SETTLED for v in role.values()), role
    assert all("tied group" in v.reason for v in role.values() if v is not None), role
    # another group keeps the plan's threshold
    assert RacingPolicy(0.05, 3, lambda g: True, threshold_of={"w": 0.1}).threshold_for("x") == 0.05


def _tradeoff_sweep(with_role: bool) -> dict[str, list[int]]:
    """A database-like role: "log" (commits, higher is better, weight 2) decides, "data" (a p99,
    lower is better, weight 1) may veto. a commits 1.25× faster than b; b's p99 is 1.6× lower
    than a's, noisily: on each figure alone a vs b is settled early, their weighing is not. c
    ties b on the data (the data's own deciding pair) and is far behind on the log. Returns each
    unit's rounds after the race (round > 4)."""
    units = [
        UnitState(f"{g}-{k}", group=g, precision_max=20) for g in ("log", "data") for k in "abc"
    ]
    role = RoleFigures(
        (
            ({k: f"log-{k}" for k in "abc"}, "log:write.iops", True, 2.0),
            ({k: f"data-{k}" for k in "abc"}, "data:read.clat_p99_us", False, 1.0),
        ),
        (True, True),
        0.05,
    )
    s = post_race_scheduler(
        units, higher_is_better=lambda group: group == "log", roles=(role,) if with_role else ()
    )
    centre = {"log-a": 1000, "log-b": 800, "log-c": 500, "data-a": 400, "data-b": 250}
    centre["data-c"] = 255
    small = (0.0, 0.02, -0.02, 0.01, -0.01)
    wide = (0.0, 0.1, -0.1, 0.07, -0.06, 0.09, -0.08)

    def value(key: str, n: int) -> float:
        wobble = wide if key.startswith("data") else small
        return centre[key] * (1.0 + wobble[(n + len(key) + ord(key[-1])) % len(wobble)])

    log = drive(s, value)
    return {k: [r for kk, r, _ in log if kk == k and r > 4] for k in s.units}


def test_a_roles_open_tradeoff_runs_on_every_job_though_each_figure_is_settled() -> None:
    """The pair a role's weighed trade-off is open on (stats/tradeoff.py) runs on in the precision
    rounds in both jobs, in the same rounds: the log's b and the data's a, which their own groups'
    races settled, included; a veto job's pair without the role's pick waits (Scheduler.
    _veto_groups). Without the role the trade-off's pair stops at the race and the veto job's tie
    runs first (what the quickstarts showed: issue 53, raw · none and raw · writeback at 6-8
    rounds while the data files' tie ran 23-24)."""
    with_role = _tradeoff_sweep(True)
    pair = with_role["log-b"]
    assert len(pair) >= 2 and with_role["log-a"] == pair, with_role
    assert set(pair) <= set(with_role["data-a"]) and set(pair) <= set(with_role["data-b"])
    # once the weighing is settled (here: within 5 % both ways) the log's pair stops
    assert max(pair) < max(with_role["data-b"]), with_role
    without = _tradeoff_sweep(False)
    assert without["log-b"] == [], without
    assert len(set(without["data-a"]) & set(pair)) < len(pair), without
    # The data files' own tie (b and c, neither the log's pick) decides nothing for the role: it
    # waits until the role's pairs are done; without the role it is a deciding pair from the start.
    assert min(with_role["data-c"]) > max(pair), with_role
    assert min(without["data-c"]) == 5, without


def test_the_runners_batches_keep_the_rounds_order_so_a_groups_runs_stay_together() -> None:
    """The runner takes its runs from next_batches(), not order(): for units that do not batch (bare
    metal, the block layer: each its own cell), the runs must come in order()'s order, so a group's
    cells run one after another. Until 2026-11-28 next_batches() shuffled the cells again and a
    group's runs sat anywhere in the round (bench/power_curve.py's sweeps). A guest cell's units
    stay one batch, where its first unit falls in the round's order."""
    groups = {"log": ["a", "b", "c"], "data": ["a", "b", "c"], "files": ["a", "b"]}
    states = [UnitState(f"{g}-{c}", group=g) for g, cells in groups.items() for c in cells]
    s = make([], states=states, min_runs=6, max_runs=6)
    own = {u.key: u.key for u in states}
    for _ in range(6):
        batches = s.next_batches(own, {})
        assert batches and all(len(b) == 1 for b in batches)
        slots = [sl for b in batches for sl in b]
        assert [sl.key for sl in slots] == s.order(slots[0].round, [sl.key for sl in slots])
        assert [sl.position for sl in slots] == list(range(len(slots)))
        seen = [sl.key.split("-")[0] for sl in slots]
        runs = [g for i, g in enumerate(seen) if i == 0 or seen[i - 1] != g]
        assert sorted(runs) == sorted(groups), f"a group split: {[sl.key for sl in slots]}"
        for sl in slots:
            s.record(sl, True, 100.0)
    # With a batching cell (two units of one guest cell), the rest keep the round's order.
    cell_of = {**own, "log-a": "guest", "data-a": "guest"}
    s2 = make([], states=[UnitState(u.key, group=u.group) for u in states])
    batches = s2.next_batches(cell_of, {"guest": 8})
    first = batches[0][0].round
    order = s2.order(first, [sl.key for b in batches for sl in b])
    guest = next(b for b in batches if len(b) == 2)
    assert {sl.key for sl in guest} == {"log-a", "data-a"}
    rest = [sl.key for b in batches for sl in b if cell_of[sl.key] == sl.key]
    assert rest == [k for k in order if cell_of[k] == k]
    cells_in_order = list(dict.fromkeys(cell_of[k] for k in order))
    assert [cell_of[b[0].key] for b in batches] == cells_in_order
