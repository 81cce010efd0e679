"""The decision rule re-judging captured twin sweeps (bench/rejudge.py, docs/statistics.md §10b′):
identical cells are not called different, and a known slowdown injected into one twin is decided
the right way. Fixed data, no timing: tests/data/aa-twins holds the figures of one A/A sweep (bare
metal and the block layer, quick's three micro-workloads, raw under cache=none and writeback on
three `dir` backings identical but for their name, 9 rounds each; captured 2026-11-27 on the 2-core
host while other work ran, load 2–6)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

CAPTURED = Path(__file__).parent / "data" / "aa-twins" / "aa-twins-1.json"
BENCH = Path(__file__).parent.parent / "bench" / "rejudge.py"
ROUNDS = 9  # the quickstart's deciding pairs reach 6–9


@pytest.fixture(scope="module")
def rejudge() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("bench_rejudge", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _races(rejudge: ModuleType) -> list[tuple[object, list[tuple[str, str]]]]:
    races = rejudge.races_from_json(CAPTURED.read_text())
    assert len(races) == 6  # 2 tiers × 3 workloads
    return [sub for race in races for sub in rejudge.twin_races(race)]


def test_identical_twins_are_neither_called_different_nor_named_the_answer(
    rejudge: ModuleType,
) -> None:
    verdicts = []
    for sub, pairs in _races(rejudge):
        judged = rejudge.rejudge(sub, ROUNDS)
        for a, b in pairs:
            assert not rejudge.named_over_twin(judged.decision, a, b), (sub.tier, sub.workload, a)
            verdicts.append(
                (sub.tier, sub.workload, sub.axes[a]["cache"], rejudge.twin_verdict(judged, a, b))
            )
    assert len(verdicts) == 36  # 3 backing pairs × 2 cache modes × 6 races
    # None of the 36 twin pairs is called different. Under the old spending (α/(k(k+1)): 0.01 at
    # the first look) one was: bare metal's writeback twins of seq-write-1m, whose first 3 rounds
    # happened to hold their ratio at 0.84–0.86 (it ranges 0.49–1.78 over the 9), called by the
    # pair's own paired t on 2 df at the first look (no cell-variance model is fitted there: the two
    # writeback cells move together, their fitted variances are 0). The constant boundary asks
    # ℓ* = 0.0024 at every look (stats/looks.py) and that pair does not reach it. The bar is 1 in 40
    # over the three sweeps (docs/benchmarks-history.md, "Issue 71: moderated variances re-judged on
    # captured twins").
    assert [v for v in verdicts if v[3] != 0] == []


def test_a_known_slowdown_is_decided_the_right_way_and_never_the_wrong_way(
    rejudge: ModuleType,
) -> None:
    decided: dict[float, list[tuple[str, str, str]]] = {}
    for factor in (0.8, 0.6, 0.5):
        decided[factor] = []
        for sub, pairs in _races(rejudge):
            for a, b in pairs:
                judged = rejudge.rejudge(sub, ROUNDS, {b: factor})
                verdict = rejudge.twin_verdict(judged, a, b)
                assert verdict != -1, (factor, sub.tier, sub.workload, a)  # never the slowed twin
                if verdict == 1:
                    decided[factor].append((sub.tier, sub.workload, sub.axes[a]["cache"]))
    # Twice as slow: the block layer's random-write twins under writeback, the race's leaders,
    # are told apart within the 9 rounds; so are most of bare metal's random-write and -read pairs:
    # 20 of 36 (20 under the old spending too: these settle early, where both rules ask about the
    # same).
    assert ("blocklayer", "rand-write-4k", "writeback") in decided[0.5]
    assert len(decided[0.5]) == 20
    # The differences that need 6–9 rounds are where the constant boundary gains (ℓ* = 0.0024 at
    # every look, where α/(k(k+1)) asked 0.00036 at 9 rounds): 40 % slower, 18 of 36 decided (14
    # under the old spending); 20 % slower, 6 (2). The host's noise while this was captured (per-run
    # SD of the log ratio up to ~0.7) still leaves a 20 % slowdown mostly undecided in 9 rounds; a
    # quiet host's power is bench/power_curve.py's.
    assert len(decided[0.6]) == 18
    assert len(decided[0.8]) == 6


def test_the_race_replay_stops_what_it_settles(rejudge: ModuleType) -> None:
    # Bare metal's random writes: cache=none ~6× slower than writeback; with one writeback twin
    # halved, every other cell is settled against the leader within 3 rounds, and the cells stopped
    # keep only the rounds they ran.
    races = {(r.tier, r.workload): r for r in rejudge.races_from_json(CAPTURED.read_text())}
    sub, pairs = rejudge.twin_races(races[("baremetal", "rand-write-4k")])[0]
    a, b = next(p for p in pairs if sub.axes[p[0]]["cache"] == "writeback")
    judged = rejudge.rejudge(sub, ROUNDS, {b: 0.5})
    assert judged.replay.rounds == 3 and judged.replay.reason == "every pair settled"
    assert set(judged.replay.stopped) == set(sub.data) - {a}
    assert all(len(pts) == 3 for pts in judged.replay.data.values())
