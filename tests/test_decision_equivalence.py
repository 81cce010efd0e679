"""Decisions that end (issue 53): better (settled), equivalent (the answer keeps what the user runs,
else QEMU's default, else the simplest), inconclusive (no answer yet, with the rounds needed) and
worse (every alternative is settled worse than what the user runs), on constructed data and on the
captured `quick` sweeps."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.report.rank import rank_sweep
from iomatrix.report.recommend import answer_of, recommend
from iomatrix.stats import Ranking, rank
from iomatrix.stats.decision import MORE_TIME, decide
from iomatrix.stats.equivalence import tost
from iomatrix.stats.looks import look_level
from iomatrix.store import Store

CAPTURED = Path(__file__).parent / "data" / "quick-reversals"
AXES = {"qcow2": {"format": "qcow2"}, "raw": {"format": "raw"}}


def _paired(a: list[float], log_diffs: list[float], higher: bool = True) -> Ranking:
    b = [v * math.exp(d) for v, d in zip(a, log_diffs, strict=True)]
    rounds = list(range(len(a)))
    return rank(
        {"qcow2": a, "raw": b}, higher_is_better=higher, rounds={"qcow2": rounds, "raw": rounds}
    )


A12 = [100.0, 120.0, 90.0, 110.0, 95.0, 105.0, 130.0, 85.0, 100.0, 115.0, 92.0, 108.0]
# raw = qcow2 · exp(d): d alternates around 0.002 by ±0.004, 12 rounds: a mean ratio 1.002, SE
# 0.0012.
NEAR = [0.002 + (0.004 if i % 2 else -0.004) for i in range(12)]


def test_tost_worked_example() -> None:
    # stats/equivalence.py's docstring: d = 0.01 on 9 df at 10 shared rounds (ℓ* = 0.00240).
    level = look_level(0.02, 10)
    assert level == pytest.approx(0.00240, abs=5e-6)
    no = tost(math.exp(0.01), 0.012, 9, level, 0.05, True)
    assert not no.equivalent and no.p_value == pytest.approx(0.00369, rel=0.01)
    t = tost(math.exp(0.01), 0.010, 9, level, 0.05, True)
    assert t.equivalent and t.p_value == pytest.approx(0.00128, rel=0.01)
    assert (t.low, t.high) == (pytest.approx(0.9732, abs=1e-4), pytest.approx(1.0483, abs=1e-4))
    # no SE: nothing is shown equivalent
    assert not tost(1.0, None, 9, level, 0.05, True).equivalent


def test_equivalent_keeps_what_the_user_runs_with_the_measured_bounds() -> None:
    r = _paired(A12, NEAR)
    d = decide(r, AXES, keep=[("qcow2", "what you run")])
    assert (d.kind, d.outcome, d.answer, d.keeper) == ("equivalent", "equivalent", "qcow2", "qcow2")
    assert d.leader == "raw" and d.tied == ("raw",)  # named with the kept one, never as the winner
    assert d.bounds is not None and d.bounds[1] < 1.0 < d.bounds[2] and d.bounds[2] < 1 / 0.95
    assert d.statement.startswith(
        f"keep what you run (qcow2): nothing measured is faster by more than 5% "
        f"(raw {d.bounds[1]:.2f}–{d.bounds[2]:.2f}×)"
    )
    assert "is the answer" not in d.statement and "tie-break" not in d.statement


def test_equivalent_without_a_current_keeps_the_default_else_the_simplest() -> None:
    r = _paired(A12, NEAR)
    assert decide(r, AXES, keep=[("qcow2", "QEMU's default")]).statement.startswith(
        "keep QEMU's default (qcow2)"
    )
    # Neither current nor default ranked (a name not in the sweep): the simplest of the equivalent
    # cells, raw.
    d = decide(r, AXES, keep=[("nvme", "what you run")])
    assert (d.kind, d.answer) == (
        "equivalent",
        "raw",
    ) and "the simplest configuration (raw)" in d.statement


def test_the_margin_is_a_parameter() -> None:
    r = _paired(A12, NEAR)
    # 0.1 %: the interval is wider
    d = decide(r, AXES, keep=[("qcow2", "what you run")], margin=0.001)
    # Not shown within 0.1 %: no longer ended; the two are named together within θ, and the
    # tie-break keeps what the user runs (its key "keeper"), as the equivalence would have.
    assert (d.kind, d.answer, d.keeper) == ("tie", "qcow2", "qcow2")
    d = decide(r, AXES, keep=[("qcow2", "what you run")], margin=0.001, tie_break=["simplicity"])
    assert (d.kind, d.answer) == ("tie", "raw")  # the simpler, without the key
    with pytest.raises(UserError, match="margin"):
        decide(r, AXES, margin=1.5)


def test_better_is_settled_and_worse_keeps_what_the_user_runs() -> None:
    d_log = [0.40 + (0.02 if i % 2 else -0.02) for i in range(5)]  # raw 1.5× qcow2, steady
    r = _paired(A12[:5], d_log)
    better = decide(r, AXES, keep=[("qcow2", "what you run")])
    assert (better.kind, better.answer, better.outcome) == ("single", "raw", "better")
    worse = decide(r, AXES, keep=[("raw", "what you run")])
    assert (worse.kind, worse.answer, worse.outcome) == ("single", "raw", "worse")


def test_inconclusive_keeps_the_rounds_needed_and_says_time_not_rounds() -> None:
    """The estimate stays in the decision (extra_rounds); its statement names no round count
    (issue 71): the report says it in minutes (report/settle_time.py)."""
    r = _paired(A12[:3], [0.15, -0.05, 0.25])
    d = decide(r, AXES, keep=[("qcow2", "what you run")])
    assert (d.kind, d.outcome, d.answer) == ("unresolved", "inconclusive", None)
    assert d.extra_rounds is not None and MORE_TIME in d.statement
    assert "round" not in d.statement


def test_lower_is_better_bounds_say_how_much_faster_the_best_is() -> None:
    r = _paired(A12, NEAR, higher=False)  # a latency: qcow2 is lower (better) by 0.2 %
    d = decide(r, AXES, keep=[("raw", "what you run")])
    assert (d.kind, d.answer, d.leader) == ("equivalent", "raw", "qcow2")
    assert d.bounds is not None and d.bounds[0] == pytest.approx(math.exp(0.002), rel=1e-6)


def _captured(tmp_path: Path, sweep: str) -> Store:
    db = tmp_path / f"{sweep}.sqlite"
    shutil.copy(CAPTURED / f"{sweep}.sqlite", db)  # a copy: the data files stay as captured
    return Store.open_existing(db)


def test_captured_sweeps_inconclusive_tie_and_worse(tmp_path: Path) -> None:
    store = _captured(tmp_path, "sweep-a")
    try:
        out = {(w.workload, w.tier): w.decision for w in rank_sweep(store, 1, None, None)}
    finally:
        store.close()
    # 3 shared rounds between raw and qcow2 under writeback: inconclusive, never "equivalent".
    assert out[("rand-read-4k", "blocklayer")].outcome == "inconclusive"
    # Bare metal, random writes: cache=writeback (QEMU's default) beats cache=none 8×: every
    # alternative is worse.
    bm = out[("rand-write-4k", "baremetal")]
    assert (bm.kind, bm.outcome) == ("single", "worse") and "cache=writeback" in bm.keeper


def test_captured_sweep_equivalent_with_a_role_margin(tmp_path: Path) -> None:
    # Sweep c, random writes: raw and qcow2 under writeback 1.00× (0.97–1.03) over 5 shared rounds.
    # At the looks' level (ℓ* = 0.0024, stats/looks.py) the TOST interval is 0.94–1.06: not within
    # 5 %, within a role's 10 %.
    store = _captured(tmp_path, "sweep-c")
    try:
        found = {}
        for margin in (0.05, 0.10):
            rec = recommend(store, 1, margin=margin)
            [v] = [v for v in rec.verdicts if v.workload == "rand-write-4k"]
            found[margin] = (answer_of(v), v)
    finally:
        store.close()
    assert found[0.05][0][1] == "tied"
    (_, status), v = found[0.10]
    assert status == "equivalent" and v.choice is not None and "format=raw" in v.choice.cell
    assert v.choice.kept.startswith("nothing measured is faster by more than 10% (format=qcow2")
    assert "0.94–1.06×" in v.choice.kept
    # The two cache=none cells, 1.65× behind, ran 3 rounds (the race stopped them there): on 2 df
    # that is short of ℓ* to call them worse, but they cannot be more than 5% better (ruled out).
    # The cell the answer is equivalent to is shown among the alternatives with its ratio.
    assert set(v.choice.ruled_out) == {c for c in v.choice.tied if "cache=none" in c}
    shown_with = {c for c in v.choice.tied if c not in v.choice.ruled_out}
    assert shown_with and {a.label for a in v.alternatives} >= shown_with


def test_rounds_to_show_equivalence() -> None:
    from iomatrix.stats.equivalence import rounds_to_show_equivalent

    # stats/equivalence.py's worked example: d = 0.01, s = 0.03, 5 rounds done, θ = 5 %: 10 more
    # rounds.
    assert rounds_to_show_equivalent(0.01, 0.03, 5, 0.05, True) == 10
    assert rounds_to_show_equivalent(0.06, 0.03, 5, 0.05, True) is None  # outside the margin: never
    assert rounds_to_show_equivalent(0.01, None, 5, 0.05, True) is None


def test_an_inconclusive_decision_says_the_rounds_to_equivalence_within_its_margin() -> None:
    # raw 7 % behind qcow2 (±6 % round to round), 6 rounds: not separated, beyond θ = 5 %. Within a
    # 10 % margin more rounds could show them equivalent; within 5 % they cannot (the observed ratio
    # is outside it).
    r = _paired(A12[:6], [-0.07 + (0.06 if i % 2 else -0.06) for i in range(6)])
    wide = decide(r, AXES, keep=[("raw", "what you run")], margin=0.10)
    assert (
        wide.kind == "unresolved"
        and wide.equivalence_rounds is not None
        and wide.equivalence_rounds > 1
    )
    assert decide(r, AXES, keep=[("raw", "what you run")], margin=0.05).equivalence_rounds is None
