"""The pure scheduler, driven by scripted outcomes and a fake clock: no fio, no QEMU, no store."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from iomatrix.scheduler import CiWidthPolicy, Scheduler, UnitState


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(keys: Sequence[str], *, min_runs: int = 3, max_runs: int = 10, ci: float = 0.05, budget: float = 1e9,
         clock: FakeClock | None = None, prior: float = 0.0, states: list[UnitState] | None = None) -> Scheduler:
    return Scheduler(states if states is not None else [UnitState(k) for k in keys], min_runs=min_runs,
                     max_runs=max_runs, budget_s=budget, policy=CiWidthPolicy(ci, min_runs, max_runs), seed=42,
                     clock=clock or FakeClock(), prior_elapsed_s=prior)


def drive(s: Scheduler, outcome: Callable[[str, int], float | None], clock: FakeClock | None = None,
          run_s: float = 1.0, max_slots: int = 10_000) -> list[tuple[str, int, int]]:
    """Run the scheduler to the end; `outcome(key, n)` gives the n-th run's value (None = failed)."""
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
    orders = [[k for k, _, _ in drive(make(list("abcdefgh"), min_runs=3), steady())] for _ in range(2)]
    assert orders[0] == orders[1]
    rounds = [orders[0][i * 8:(i + 1) * 8] for i in range(3)]
    assert len({tuple(r) for r in rounds}) > 1, "every round had the same order: not randomised"


def test_noisy_unit_runs_to_max_while_steady_one_stops_at_min() -> None:
    s = make(["steady", "noisy"], min_runs=3, max_runs=7)
    log = drive(s, lambda k, n: 100.0 if k == "steady" else noisy(k, n))
    assert sum(k == "steady" for k, _, _ in log) == 3
    assert sum(k == "noisy" for k, _, _ in log) == 7
    assert s.reasons() == {"steady": "converged", "noisy": "max runs reached"}


def test_budget_stops_extra_runs_but_never_the_minimum() -> None:
    clock = FakeClock()
    s = make(["a", "b"], min_runs=3, max_runs=50, budget=4.0, clock=clock)
    log = drive(s, noisy, clock=clock)
    # The minimum (3 each) completes although the budget runs out after 4 runs; nothing beyond it starts.
    assert sum(k == "a" for k, _, _ in log) == 3 and sum(k == "b" for k, _, _ in log) == 3
    assert set(s.reasons().values()) == {"time budget spent"}


def test_budget_includes_the_earlier_sessions_of_a_resumed_sweep() -> None:
    s = make(["a"], min_runs=1, max_runs=50, budget=100.0, prior=100.0)
    log = drive(s, noisy)
    assert len(log) == 1 and s.reasons()["a"] == "time budget spent"


def test_gives_up_after_three_failures_and_others_carry_on() -> None:
    s = make(["bad", "good"], min_runs=2)
    log = drive(s, lambda k, n: None if k == "bad" else 5.0)
    assert sum(k == "bad" for k, _, _ in log) == 3
    assert s.reasons()["bad"] == "gave up after 3 failed runs" and s.reasons()["good"] == "converged"


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
        states.append(UnitState(k, points=[(r, 100.0) for r in sorted(done)], rounds=done, ok=len(done)))
    s = make([], min_runs=3, states=states)
    first = s.next_round()
    assert [sl.key for sl in first] == [k for k in round2 if k not in round2[:2]]
    assert all(sl.round == 2 for sl in first)
    for sl in first:
        s.record(sl, True, 100.0)
    third = s.next_round()
    assert {sl.round for sl in third} == {3} and sorted(sl.key for sl in third) == ["a", "b", "c", "d"]


def test_resume_of_a_finished_unit_runs_nothing_more() -> None:
    s = make([], min_runs=3, states=[UnitState("a", points=[(1, 1.0), (2, 1.0), (3, 1.0)], rounds={1, 2, 3}, ok=3)])
    assert s.next_round() == []


class StopAllAfterMin:
    name = "scripted"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def finished(self, units: Sequence[UnitState]) -> dict[str, str]:
        self.calls.append(sorted(u.key for u in units))
        return {u.key: "scripted stop" for u in units}


def test_a_stop_policy_plugs_in_and_only_sees_units_past_their_minimum() -> None:
    policy = StopAllAfterMin()
    s = Scheduler([UnitState("a"), UnitState("b")], min_runs=2, max_runs=9, budget_s=1e9, policy=policy, seed=1,
                  clock=FakeClock())
    log = drive(s, steady())
    assert len(log) == 4 and policy.calls == [["a", "b"]]
    assert set(s.reasons().values()) == {"scripted stop"}


def test_bad_repetitions_are_refused() -> None:
    with pytest.raises(ValueError, match="min ≤ max"):
        make(["a"], min_runs=5, max_runs=2)


def racing(keys: Sequence[str], *, min_runs: int = 3, max_runs: int = 20, baselines: Sequence[str] = ()) -> Scheduler:
    from iomatrix.scheduler import RacingPolicy

    states = [UnitState(k, group="w", baseline=k in baselines) for k in keys]
    return Scheduler(states, min_runs=min_runs, max_runs=max_runs, budget_s=1e9, seed=3, clock=FakeClock(),
                     policy=RacingPolicy(0.05, min_runs, higher_is_better=lambda g: True))


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


def test_racing_keeps_a_close_contender_running_and_baselines_stop_at_their_minimum() -> None:
    s = racing(["a", "b", "bare-metal"], min_runs=3, max_runs=8, baselines=["bare-metal"])
    log = drive(s, lambda k, n: jitter(1000.0 if k != "b" else 1015.0, n) if k != "bare-metal" else 5.0)
    assert sum(k == "bare-metal" for k, _, _ in log) == 3
    assert s.reasons()["bare-metal"] == "baseline: minimum runs kept"
    # a and b are within the 5% threshold: a stable tied group ends the race before max.
    assert s.reasons()["a"].startswith("race over: stable tied group")
    assert sum(k == "a" for k, _, _ in log) < 8


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
