"""decide() and the two regressions that made "too noisy" a statement instead of a filter."""

from __future__ import annotations

import math

import pytest
from scipy import stats as st

from iomatrix.errors import UserError
from iomatrix.stats import rank
from iomatrix.stats.decision import decide, rounds_to_separate, safety_key, simplicity_key

# (a) a bare-metal db-write-4k-fdatasync sweep: unsafe ~122k IOPS, the four other cache modes
# ~2k with CV 15–25 % (n = 5 each): every cell's CI is wider than ±10 %.
DBWRITE = {
    "cache=unsafe": [121000.0, 123500.0, 122800.0, 120900.0, 122300.0],
    "cache=none": [2100.0, 1700.0, 2500.0, 1900.0, 2300.0],
    "cache=writeback": [1800.0, 2600.0, 2000.0, 1500.0, 2300.0],
    "cache=writethrough": [1900.0, 1400.0, 2400.0, 2100.0, 1600.0],
    "cache=directsync": [2200.0, 1600.0, 2700.0, 1800.0, 2100.0],
}
AXES = {name: {"cache": name.split("=")[1], "modifier": "none"} for name in DBWRITE}


def test_a_settled_difference_is_ranked_whatever_the_noise() -> None:
    r = rank(DBWRITE, higher_is_better=True, max_rel_half_width=0.10)
    assert r.best == "cache=unsafe"
    assert r.row("cache=unsafe").group == 1
    assert all(row.group != 1 for row in r.rows[1:])  # alone in its group
    for other in list(DBWRITE)[1:]:
        assert r.comparison("cache=unsafe", other).significant
        assert r.row(other).too_noisy and r.row(other).rank is not None
    d = decide(r, AXES)
    assert d.kind == "single" and d.answer == "cache=unsafe"
    assert set(d.separated) == set(DBWRITE) - {"cache=unsafe"}


def test_a_with_rounds_uses_the_blocked_model_and_agrees() -> None:
    rounds = {n: [1, 2, 3, 4, 5] for n in DBWRITE}
    r = rank(DBWRITE, higher_is_better=True, rounds=rounds)
    assert r.analysis is not None and r.analysis.blocked
    assert r.best == "cache=unsafe" and all(r.comparison("cache=unsafe", o).significant for o in list(DBWRITE)[1:])
    assert "round as block" in r.test_description


def test_b_a_tight_cell_is_not_crowned_for_being_tight() -> None:
    tight = [100.0, 100.5, 99.5, 100.2, 99.8]  # ±0.5 %
    wide = [150.0, 60.0, 200.0, 90.0, 125.0]  # mean 125, ±60 %
    r = rank({"tight": tight, "wide": wide}, higher_is_better=True)
    assert r.best == "wide"  # ordered by mean, not by precision
    assert r.row("tight").rank == 2 and r.row("wide").too_noisy
    d = decide(r, {"tight": {}, "wide": {}}, samples={"tight": tight, "wide": wide})
    assert d.kind == "unresolved" and d.answer is None
    assert d.leader == "wide" and d.unresolved == ("tight",)
    assert d.extra_rounds is not None and d.extra_rounds >= 1
    assert "not separable yet" in d.statement
    # Still an answer if one must be made now: the tie-break (safety, simplicity — equal here — then
    # performance) picks the leader, and says so.
    assert d.provisional == "wide" and d.statement.endswith("the tie-break (safety, simplicity) picks wide")
    d2 = decide(r, {"tight": {"cache": "none"}, "wide": {"cache": "unsafe"}}, samples={"tight": tight, "wide": wide},
                budget_spent=True)
    assert d2.provisional == "tight" and d2.statement.startswith("not separable within the budget: wide leads")


def test_tie_break_prefers_safe_then_simple() -> None:
    cells = {
        "unsafe/native": [101.0, 100.0, 102.0, 101.5, 100.5],
        "none/threads": [99.0, 100.0, 98.5, 99.5, 100.2],
        "writethrough/native": [98.0, 99.0, 98.5, 97.9, 98.8],
        "writethrough/threads": [98.2, 98.9, 98.4, 98.0, 98.7],
        "directsync/threads": [60.0, 61.0, 59.0, 60.5, 59.5],
    }
    axes = {n: {"cache": n.split("/")[0], "aio": n.split("/")[1], "modifier": "none"} for n in cells}
    r = rank(cells, higher_is_better=True)
    d = decide(r, axes)
    assert d.kind == "tie"
    assert d.answer == "writethrough/threads"  # safe, and threads is simpler than native
    assert d.tied[:1] == ("writethrough/native",)
    assert d.separated == ("directsync/threads",)
    d2 = decide(r, axes, tie_break=["performance"])
    assert d2.answer == "unsafe/native"
    d3 = decide(r, axes, threshold=0.0)  # every difference matters: the leader alone, or unresolved
    assert d3.kind in ("single", "unresolved") and d3.answer in ("unsafe/native", None)


def test_keys() -> None:
    assert safety_key({"cache": "writethrough"}) < safety_key({"cache": "none"}) < safety_key({"cache": "unsafe"})
    assert safety_key({"cache": "none", "modifier": "eatmydata"}) == safety_key({"cache": "unsafe"})
    assert simplicity_key({"format": "raw", "aio": "threads"}) == (0, 0)
    assert simplicity_key({"format": "qcow2", "aio": "native"}) == (2, 3)
    assert simplicity_key({"format": "raw", "aio": "io_uring"}) < simplicity_key({"format": "raw", "aio": "native"})


def test_rounds_to_separate_formula() -> None:
    """d = ln 1.1, s = 0.1: n = ⌈((1.95996 + 0.84162)·√2·0.1/0.09531)²⌉ = ⌈17.29⌉ = 18 → 18 − 5 = 13."""
    z = st.norm.ppf(0.975) + st.norm.ppf(0.8)
    assert math.ceil((z * math.sqrt(2) * 0.1 / math.log(1.1)) ** 2) == 18
    assert rounds_to_separate(math.log(1.1), 0.1, 5) == 13
    assert rounds_to_separate(0.0, 0.1, 5) is None


def test_bad_threshold_and_tie_break_are_user_errors() -> None:
    r = rank(DBWRITE, higher_is_better=True)
    with pytest.raises(UserError, match="threshold") as e:
        decide(r, AXES, threshold=5)
    assert "0.05" in (e.value.hint or "")
    with pytest.raises(UserError, match="unknown tie-break") as e2:
        decide(r, AXES, tie_break=["safety", "cheapest"])
    assert "safety, simplicity, performance, name" in (e2.value.hint or "")
