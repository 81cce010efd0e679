"""Racing decisions against scripted outcomes, and interference flags from monitor summaries."""

from __future__ import annotations

import pytest

import iomatrix.stats as stats
from iomatrix.stats.interference import interference_effect, interference_flags
from iomatrix.stats.racing import race_step, stop_reason

ROUND_NOISE = [1.00, 1.20, 0.90, 1.10, 0.95, 1.05]  # the host's mood per round, shared by every unit


def scripted(means: dict[str, float], rounds: int, jitter: float = 0.01) -> dict[str, list[tuple[int, float]]]:
    out = {}
    for k, (u, m) in enumerate(means.items()):
        out[u] = [(r, m * ROUND_NOISE[r] * (1 + jitter * ((r + k) % 3 - 1))) for r in range(rounds)]
    return out


def test_clearly_worse_units_are_eliminated_close_ones_kept_baselines_never() -> None:
    data = scripted({"fast": 1000.0, "close": 980.0, "slow": 600.0, "bm": 300.0}, rounds=4)
    step = race_step(data, higher_is_better=True, threshold=0.05, baselines={"bm"})
    status = {d.unit: d.status for d in step.decisions}
    assert status == {"fast": "keep", "close": "keep", "slow": "eliminated", "bm": "baseline"}
    assert step.best == "fast" and step.top_group == {"fast", "close"}
    assert "significantly worse than fast by 40%" in next(d.reason for d in step.decisions if d.unit == "slow")
    assert next(d.reason for d in step.decisions if d.unit == "bm") == "baseline: keep min runs"
    assert step.method in ("rcbd-anova", "friedman-conover")


def test_nothing_is_eliminated_before_the_minimum_rounds() -> None:
    data = scripted({"fast": 1000.0, "slow": 600.0}, rounds=2)
    step = race_step(data, higher_is_better=True, min_rounds=3)
    assert step.eliminated == () and step.method == "none"


def test_lower_is_better() -> None:
    data = scripted({"quick": 10.0, "slowish": 15.0, "same": 10.2}, rounds=4)
    step = race_step(data, higher_is_better=False)
    assert step.best == "quick" and step.eliminated == ("slowish",) and "same" in step.top_group


def test_stop_reasons() -> None:
    one = race_step(scripted({"fast": 1000.0, "slow": 600.0}, rounds=4), higher_is_better=True)
    assert stop_reason([one], rounds_done=4, max_rounds=10) == "one best left"
    tied = race_step(scripted({"a": 1000.0, "b": 990.0, "c": 500.0}, rounds=4), higher_is_better=True)
    assert stop_reason([tied], rounds_done=4, max_rounds=10) is None  # stable needs 2 rounds
    assert stop_reason([tied, tied], rounds_done=5, max_rounds=10) == "stable tied group"
    assert stop_reason([tied], rounds_done=2, max_rounds=10) is None
    assert stop_reason([tied], rounds_done=10, max_rounds=10) == "max rounds"
    assert stop_reason([tied], rounds_done=6, max_rounds=10, budget_left=False) == "budget"
    with pytest.raises(ValueError):
        stop_reason([], rounds_done=1, max_rounds=2, min_rounds=3)


def test_interference_flags_and_thresholds() -> None:
    quiet = {"psi.cpu_some_pct": 1.0, "cpu.steal_pct": 0.0, "cpu.usr_pct": 20.0, "cpu.sys_pct": 10.0,
             "proc.cpu_pct": 55.0, "mem.writeback_mb": 0.5}
    q = interference_flags(quiet, cpu_count=2)
    assert not q.disturbed and q.other_cpu_pct == pytest.approx(5.0)  # (20+10)·2 − 55
    busy = {**quiet, "psi.cpu_some_pct": 35.0, "cpu.usr_pct": 70.0, "cpu.steal_pct": 3.0}
    b = interference_flags(busy, cpu_count=2)
    assert b.disturbed and b.other_cpu_pct == pytest.approx(105.0)
    assert [r.split(":")[0].split(" ")[0] for r in b.reasons] == ["CPU", "CPU", "other"]
    assert not interference_flags({"psi.cpu_some_pct": 10.0}, cpu_count=1).disturbed  # the limit is allowed
    assert not interference_flags({}, cpu_count=4).disturbed  # nothing sampled: nothing flagged
    assert b.causes == ("psi.cpu_some_pct", "cpu.steal_pct", "other_cpu_pct") and b.retry_worthy
    # Writeback alone is flagged but not worth a retry: the run's own writes through a host cache cause it too.
    wb = interference_flags({**quiet, "mem.writeback_mb": 300.0}, cpu_count=2)
    assert wb.disturbed and wb.causes == ("mem.writeback_mb",) and not wb.retry_worthy


def test_interference_effect_spearman() -> None:
    psi = [1.0, 2.0, 30.0, 40.0, 3.0, 50.0]
    seconds = [11.0, 11.5, 15.0, 16.0, 11.2, 14.0]
    e = interference_effect(psi, seconds, [p > 10 for p in psi])
    # ranks psi 1 2 4 5 3 6, seconds 1 3 5 6 2 4: Σd² = 0+1+1+1+1+4 = 8, ρ = 1 − 6·8/(6·35) = 0.7714
    assert e.rho == pytest.approx(1 - 6 * 8 / 210)
    assert e.disturbed_mean == pytest.approx(15.0) and e.undisturbed_mean == pytest.approx(11.2333, abs=1e-3)
    assert interference_effect([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]).rho is None


def test_every_public_stats_name_resolves() -> None:
    for name in stats.__all__:
        assert getattr(stats, name) is not None, name
