"""Racing decisions against scripted outcomes, and interference flags from monitor summaries."""

from __future__ import annotations

import math

import pytest

import iomatrix.stats as stats
from iomatrix.stats.interference import (
    RunInterference,
    baseline_limit,
    interference_effect,
    interference_flags,
    interference_scores,
)
from iomatrix.stats.racing import equivalence_margin, race_step, stop_reason

# the host's mood per round, shared by every unit
ROUND_NOISE = [1.00, 1.20, 0.90, 1.10, 0.95, 1.05]


def scripted(
    means: dict[str, float], rounds: int, jitter: float = 0.01
) -> dict[str, list[tuple[int, float]]]:
    out = {}
    for k, (u, m) in enumerate(means.items()):
        out[u] = [(r, m * ROUND_NOISE[r] * (1 + jitter * ((r + k) % 3 - 1))) for r in range(rounds)]
    return out


def test_clearly_worse_units_are_eliminated_close_ones_kept_baselines_never() -> None:
    data = scripted(
        {"fast": 1000.0, "close": 980.0, "slow": 600.0, "bm": 300.0}, rounds=4, jitter=0.05
    )
    step = race_step(data, higher_is_better=True, threshold=0.05, baselines={"bm"})
    status = {d.unit: d.status for d in step.decisions}
    assert status == {"fast": "keep", "close": "keep", "slow": "eliminated", "bm": "baseline"}
    assert step.best == "fast" and step.top_group == {"fast", "close"}
    # 40% behind by the script (38% by the 4 rounds' centres): stopped at the second look, by
    # significance or because it cannot be 5% better (either ends its race). At 3 rounds its pair
    # has 2 df and Holm p = 0.028 does not reach the looks' level 0.0024 (stats/looks.py).
    slow = next(d.reason for d in step.decisions if d.unit == "slow")
    assert "than fast" in slow and "38%" in slow and "look 2 of α=0.02: 4 shared rounds" in slow
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
    # 5% jitter: b is within 5% of a by its point estimate, but its CI is too wide to call it
    # equivalent.
    tied = race_step(
        scripted({"a": 1000.0, "b": 990.0, "c": 500.0}, rounds=3, jitter=0.05),
        higher_is_better=True,
    )
    assert tied.active == ("a", "b") and tied.equivalent == ()
    assert stop_reason([tied], rounds_done=4, max_rounds=10) is None  # stable needs 2 rounds
    assert stop_reason([tied, tied], rounds_done=5, max_rounds=10) == "stable tied group"
    assert stop_reason([tied], rounds_done=2, max_rounds=10) is None
    assert stop_reason([tied], rounds_done=10, max_rounds=10) == "max rounds"
    assert stop_reason([tied], rounds_done=6, max_rounds=10, budget_left=False) == "budget"
    with pytest.raises(ValueError):
        stop_reason([], rounds_done=1, max_rounds=2, min_rounds=3)


def two_cells(diffs_log: list[float]) -> dict[str, list[tuple[int, float]]]:
    """Cell a with a round effect, cell b = a · exp(d_j): for two cells the blocked model is the
    paired t-test on the log differences d_j, so its CI can be computed by hand."""
    a = [100.0, 120.0, 90.0, 110.0, 95.0][: len(diffs_log)]
    b = [(j, v * math.exp(d)) for j, (v, d) in enumerate(zip(a, diffs_log, strict=True))]
    return {"a": list(enumerate(a)), "b": b}


def test_equivalence_stop_is_a_tost_on_the_blocked_ratio() -> None:
    # d = −0.02, −0.015, −0.025: mean −0.02, SD 0.005, SE 0.005/√3. TOST at the first look's level
    # (α = 0.05: ℓ* = 0.0068, stats/looks.py), t(1 − 0.0068, df 2) = 8.4879: 98.64% CI
    # exp(−0.02 ± 8.4879·0.0028868) = 0.9565–1.0045, inside the ±5% margin 0.95–1.0526.
    data = two_cells([-0.02, -0.015, -0.025])
    step = race_step(data, higher_is_better=True, threshold=0.05, alpha=0.05)
    [b] = [d for d in step.decisions if d.unit == "b"]
    assert b.status == "equivalent" and step.equivalent == ("b",) and step.active == ("a",)
    assert "98.64% CI 0.956–1.005 within ±5% (TOST at 0.0068, the level of look 1 of α=0.05" in (
        b.reason
    )
    assert stop_reason([step], rounds_done=3, max_rounds=8) == "tied group settled"
    # A 3% margin (0.97–1.031) does not hold the interval: within 3% by the point estimate (2.0%),
    # still racing.
    step3 = race_step(data, higher_is_better=True, threshold=0.03)
    assert step3.equivalent == () and step3.active == ("a", "b") and step3.top_group == {"a", "b"}
    # Lower is better: the margin is 1/(1 + θ)…1 + θ = 0.952–1.05 around b/a (b is now the best).
    low = race_step(data, higher_is_better=False, threshold=0.05, alpha=0.05)
    assert low.best == "b" and low.equivalent == ("a",)
    assert equivalence_margin(0.05, True) == pytest.approx((0.95, 1 / 0.95))
    assert equivalence_margin(0.05, False) == pytest.approx((1 / 1.05, 1.05))


def test_futility_stop_when_the_rounds_left_cannot_separate_the_leaders() -> None:
    # d = −0.10, +0.10, −0.30: b is 9.5% behind a (gap > 5%), paired t = 0.10/(0.2/√3) = 0.87: not
    # significant. The pair's own SD per run s = SD(d)/√2 = 0.2/√2. With α = 0.05 spent over the
    # looks (stats/looks.py: ℓ* = 0.0068 at every look from 3 to 30 rounds) and power 0.5 (z = 0),
    # ruling b out (one-sided against the margin δ = −ln 0.95 = 0.051293) needs the first n with
    # n ≥ (z_{1−ℓ*} · 0.2 / 0.151293)² = (2.4677 · 1.3219)² = 10.64: n = 11, 8 more after 3.
    # Separating them (two-sided, d = 0.10) needs more: (z_{1−ℓ*/2} · 0.2 / 0.10)² = (2.7065 · 2)²
    # = 29.30, n = 30, 27 more: the fewer of the two is the estimate.
    data = two_cells([-0.10, 0.10, -0.30])
    # no limit given: races on
    assert race_step(data, higher_is_better=True, alpha=0.05).contenders == {"b"}
    assert race_step(data, higher_is_better=True, alpha=0.05, rounds_left=30).contenders == {"b"}
    assert race_step(data, higher_is_better=True, alpha=0.05, rounds_left=8).contenders == {"b"}
    # max stops it
    assert race_step(data, higher_is_better=True, alpha=0.05, rounds_left=0).contenders == {"b"}
    futile = race_step(data, higher_is_better=True, alpha=0.05, rounds_left=7)
    assert futile.futile == ("b",) and futile.contenders == frozenset() and futile.active == ("a",)
    [b] = [d for d in futile.decisions if d.unit == "b"]
    assert b.reason == (
        "not separable from a within the budget: 10% behind (Holm p=0.48); about 8 more round(s) "
        "needed for even odds of separating them or ruling it out, 7 left"
    )
    assert stop_reason([futile], rounds_done=3, max_rounds=8) == "not separable within the budget"
    # An earlier step's futile or equivalent stop still names the end of the race.
    assert (
        stop_reason([futile, race_step(two_cells([0.5, 0.6, 0.55]), True)], 4, 8)
        == "not separable within the budget"
    )


def test_interference_flags_and_thresholds() -> None:
    quiet = {
        "psi.cpu_some_pct": 1.0,
        "cpu.steal_pct": 0.0,
        "cpu.usr_pct": 20.0,
        "cpu.sys_pct": 10.0,
        "proc.cpu_pct": 55.0,
        "mem.writeback_mb": 0.5,
    }
    q = interference_flags(quiet, cpu_count=2)
    assert not q.disturbed and q.other_cpu_pct == pytest.approx(5.0)  # (20+10)·2 − 55
    busy = {**quiet, "psi.cpu_some_pct": 35.0, "cpu.usr_pct": 70.0, "cpu.steal_pct": 3.0}
    b = interference_flags(busy, cpu_count=2)
    assert b.disturbed and b.other_cpu_pct == pytest.approx(105.0)
    assert [r.split(":")[0].split(" ")[0] for r in b.reasons] == ["CPU", "CPU", "other"]
    # the limit is allowed
    assert not interference_flags({"psi.cpu_some_pct": 10.0}, cpu_count=1).disturbed
    assert not interference_flags({}, cpu_count=4).disturbed  # nothing sampled: nothing flagged
    # CPU pressure with nobody else on the CPUs is the measured work's own (fio + QEMU on 2 cores):
    # no flag.
    own = {
        **quiet,
        "psi.cpu_some_pct": 18.0,
        "cpu.usr_pct": 35.0,
        "cpu.sys_pct": 20.0,
        "proc.cpu_pct": 100.0,
    }
    # others: (35+20)·2 − 100 = 10% of a CPU
    assert not interference_flags(own, cpu_count=2).disturbed
    shared = {**own, "cpu.usr_pct": 60.0}  # others: (60+20)·2 − 100 = 60% of a CPU
    assert interference_flags(shared, cpu_count=2).causes == ("psi.cpu_some_pct", "other_cpu_pct")
    assert b.causes == ("psi.cpu_some_pct", "cpu.steal_pct", "other_cpu_pct") and b.retry_worthy
    # Writeback alone is flagged but not worth a retry: the run's own writes through a host cache
    # cause it too.
    wb = interference_flags({**quiet, "mem.writeback_mb": 300.0}, cpu_count=2)
    assert wb.disturbed and wb.causes == ("mem.writeback_mb",) and not wb.retry_worthy
    # Hypervisor steal alone is flagged but not retried: the host's other tenants last, a retry
    # meets them again.
    st = interference_flags({**quiet, "cpu.steal_pct": 6.0}, cpu_count=2)
    assert st.disturbed and st.causes == ("cpu.steal_pct",) and not st.retry_worthy
    both = interference_flags({**quiet, "cpu.steal_pct": 6.0, "cpu.usr_pct": 70.0}, cpu_count=2)
    assert both.causes == ("cpu.steal_pct", "other_cpu_pct") and both.retry_worthy


def judge_series(psi: list[float]) -> list[RunInterference]:
    """Judge runs one after another, each against the sweep's earlier runs (as the runner does)."""
    baseline: list[dict[str, float]] = []
    out = []
    for p in psi:
        summary = {"psi.cpu_some_pct": p}
        out.append(interference_flags(summary, cpu_count=2, baseline=baseline))
        baseline.append(interference_scores(summary, cpu_count=2))
    return out


def test_relative_limit_by_hand() -> None:
    h = [40.0, 50.0, 60.0, 45.0, 55.0, 90.0, 95.0, 92.0, 47.0, 53.0]
    # median 54 → quieter half 40 45 47 50 53: centre 47, MAD 3, SD 4.448 → clip at 58.12 adds 55;
    # centre 48.5, MAD 4.0, SD 5.930 → clip at 63.33 adds 60; centre 50, MAD 5, SD 7.413 → clip at
    # 68.53: unchanged (7 runs). Limit = 50 + 3 · 7.413 = 72.24: the runs at 90–95 stand out, 60
    # does not.
    lim = baseline_limit("psi.cpu_some_pct", h, absolute=10.0)
    assert lim.value == pytest.approx(50 + 3 * 1.4826 * 5, abs=1e-9)
    assert lim.source == "this sweep's undisturbed level 50 ± 7.4 (7 of 10 earlier runs) + 3 SD"
    # A near-constant background: the spread is at least MIN_SPREAD (2 points of PSI).
    assert baseline_limit("psi.cpu_some_pct", [50.0] * 8, 10.0).value == pytest.approx(56.0)
    # Fewer than 8 earlier runs: the absolute limit, and the reason says why.
    few = baseline_limit("psi.cpu_some_pct", [50.0] * 7, 10.0)
    assert few.value == 10.0 and "7 earlier run(s) < 8" in few.source


def test_on_an_always_shared_host_only_the_runs_above_its_usual_level_are_flagged() -> None:
    # Other tenants keep PSI at 45–55%; our own background load pushes half of the later runs to
    # 85–95%.
    busy = [50.0, 53.0, 47.0, 55.0, 45.0, 51.0, 49.0, 52.0]
    loaded = [90.0, 48.0, 88.0, 54.0, 93.0, 46.0, 86.0, 50.0, 95.0, 52.0, 91.0, 49.0]
    flags = judge_series(busy + loaded)
    # The first 8 runs know no baseline yet: the absolute 10% flags them all (as before).
    assert all(f.disturbed for f in flags[:8])
    later = flags[len(busy) :]
    assert [f.disturbed for f in later] == [v > 80 for v in loaded]
    reason = later[0].reasons[0]
    assert (
        reason.startswith("CPU pressure: PSI cpu some 90% > ")
        and "this sweep's undisturbed level" in reason
    )
    # With the absolute rule alone every one of them is flagged: nothing discriminates.
    assert all(
        interference_flags({"psi.cpu_some_pct": v}, cpu_count=2).disturbed for v in busy + loaded
    )


def test_on_a_quiet_host_the_absolute_limit_stays_the_floor() -> None:
    quiet = [0.4, 0.9, 0.2, 0.6, 0.3, 0.8, 0.5, 0.7]
    flags = judge_series([*quiet, 8.0, 12.0])
    # 8% is noise, 12% is over the 10% floor
    assert [f.disturbed for f in flags] == [False] * 9 + [True]
    assert flags[-1].reasons[0] == (
        "CPU pressure: PSI cpu some 12% > 10% (absolute; this sweep's undisturbed level "
        "0.55 ± 2 (8 of 9 earlier runs))"
    )


def test_interference_effect_spearman() -> None:
    psi = [1.0, 2.0, 30.0, 40.0, 3.0, 50.0]
    seconds = [11.0, 11.5, 15.0, 16.0, 11.2, 14.0]
    e = interference_effect(psi, seconds, [p > 10 for p in psi])
    # ranks psi 1 2 4 5 3 6, seconds 1 3 5 6 2 4: Σd² = 0+1+1+1+1+4 = 8, ρ = 1 − 6·8/(6·35) = 0.7714
    assert e.rho == pytest.approx(1 - 6 * 8 / 210)
    assert e.disturbed_mean == pytest.approx(15.0) and e.undisturbed_mean == pytest.approx(
        11.2333, abs=1e-3
    )
    assert interference_effect([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]).rho is None


def test_every_public_stats_name_resolves() -> None:
    for name in stats.__all__:
        assert getattr(stats, name) is not None, name


def test_a_unit_that_cannot_beat_the_best_by_the_threshold_is_eliminated_without_being_significant() -> (  # noqa: E501
    None
):
    # d = −0.08, −0.06, −0.04: b is 5.8% behind a, paired t = 5.196 on 2 df, p = 0.035: not
    # significant. The one-sided test of "b is more than 5% better" (stats/ruling_out.py): t =
    # (−0.06 − 0.051293)/(0.02/√3) = −9.6383, p = ½(1 − |t|/√(t² + 2)) = 0.005297: no number of
    # rounds can make b the answer, so it stops. At α = 0.05 spent over the looks every look from 3
    # to 30 rounds is at ℓ* = 0.0068 (stats/looks.py): 0.005297 reaches it at the first.
    data = two_cells([-0.08, -0.06, -0.04])
    step = race_step(data, higher_is_better=True, threshold=0.05, alpha=0.05)
    [b] = [d for d in step.decisions if d.unit == "b"]
    assert b.status == "eliminated" and step.active == ("a",)
    assert b.reason == (
        "cannot be more than 5% better than a: 6% behind (one-sided test against that margin, "
        "Holm p=0.0053 < 0.0068, the level of look 1 of α=0.05: 3 shared rounds)"
    )
    assert stop_reason([step], rounds_done=3, max_rounds=8) == "one best left"
    # Twice the spread (d = −0.10, −0.06, −0.02): t = −4.8191, p = 0.020 > 0.0068, b keeps racing.
    twice = two_cells([-0.10, -0.06, -0.02])
    assert race_step(twice, higher_is_better=True, alpha=0.05).contenders == {"b"}


def test_what_disturbed_the_runs_is_said_in_plain_words_most_frequent_first() -> None:
    from iomatrix.stats.interference import PLAIN_CAUSES, THRESHOLDS, disturbance_lines

    assert set(PLAIN_CAUSES) == set(THRESHOLDS)  # every flag has its words
    lines = disturbance_lines({"other_cpu_pct": 8, "cpu.steal_pct": 21, "mem.writeback_mb": 0})
    assert lines == [
        f"  21: {PLAIN_CAUSES['cpu.steal_pct']}",
        f"  8: {PLAIN_CAUSES['other_cpu_pct']}",
    ]
    assert "not retried" in lines[0] and "other programs" in lines[1]
    assert disturbance_lines({}) == []
    # a terminal's width
    assert max(len(line) for line in disturbance_lines({k: 999 for k in PLAIN_CAUSES})) <= 100
