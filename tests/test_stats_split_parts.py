"""The pure parts rank(), decide() and variance_components() are built from, each pinned by hand."""

from __future__ import annotations

import math

import pytest

from iomatrix.stats import summarize
from iomatrix.stats.blocked import BlockedPair, independent_analysis
from iomatrix.stats.compare import RatioCI
from iomatrix.stats.decision import (
    classify,
    extra_rounds,
    full_tie_break,
    separation_sd,
    tie_break_key,
    unresolved_statement,
)
from iomatrix.stats.leader_groups import leader_groups
from iomatrix.stats.ranking import (
    RankedRow,
    check_rank_parameters,
    comparison_heading,
    ranking_description,
    ratio_to_best,
    summarize_cells,
    too_noisy,
)
from iomatrix.stats.ruling_out import margin, non_superiority, rounds_to_rule_out
from iomatrix.stats.two_level import (
    boot_anova,
    boot_means_are_the_unit,
    first_run,
    intraclass_correlation,
)

# -- two-level -------------------------------------------------------------------------------------


def test_boot_anova_of_unequal_boots() -> None:
    # Means 2, 5; grand 3; SSW = 2 over N − k = 1 → σ_w² = 2; SSB = 2·1² + 1·2² = 6 = MSB;
    # n₀ = (3 − 5/3)/1 = 4/3; σ_b² = (6 − 2)/(4/3) = 3.
    an = boot_anova([[1.0, 3.0], [5.0]])
    assert an.grand_mean == pytest.approx(3.0) and an.boot_means == (2.0, 5.0)
    assert an.within_var == pytest.approx(2.0)
    assert an.n0 == pytest.approx(4 / 3)
    assert an.between_var == pytest.approx(3.0)


def test_boot_anova_leaves_out_what_it_cannot_estimate() -> None:
    one_boot = boot_anova([[1.0, 2.0, 3.0]])
    assert (
        one_boot.within_var == pytest.approx(1.0)
        and one_boot.between_var is None
        and one_boot.n0 is None
    )
    single_runs = boot_anova([[1.0], [3.0]])  # N = k: no within-boot variance, so no σ_b² either
    assert (
        single_runs.within_var is None
        and single_runs.between_var is None
        and single_runs.n0 == pytest.approx(1.0)
    )
    # MSB below MSW: σ_b² is clamped at 0, not negative.
    assert boot_anova([[0.0, 10.0], [1.0, 9.0]]).between_var == 0.0


def test_icc_and_the_unit() -> None:
    assert intraclass_correlation(3.0, 1.0) == pytest.approx(0.75)
    assert intraclass_correlation(0.0, 0.0) is None and intraclass_correlation(None, 1.0) is None
    assert boot_means_are_the_unit(2.0, 2.0)  # a tie goes to the boots
    assert not boot_means_are_the_unit(1.0, 2.0)
    assert not boot_means_are_the_unit(0.0, 0.0)  # no variance at all: the runs
    assert not boot_means_are_the_unit(None, 0.5) and not boot_means_are_the_unit(5.0, None)


def test_first_run_against_the_later_runs() -> None:
    fr = first_run([[10.0, 12.0], [14.0, 16.0, 18.0], [20.0]])
    assert fr.cold_mean == pytest.approx(44 / 3) and fr.warm_mean == pytest.approx(46 / 3)
    # (−2 − 3)/2; the one-run boot has no later runs
    assert fr.effect == pytest.approx(-2.5) and fr.boots == 2
    lone = first_run([[7.0]])
    assert (lone.cold_mean, lone.warm_mean, lone.effect, lone.boots) == (7.0, None, None, 0)


# -- ranking ---------------------------------------------------------------------------------------


def test_leader_groups() -> None:
    p = {
        frozenset(("a", "b")): 0.2,
        frozenset(("a", "c")): 0.01,
        frozenset(("b", "c")): 0.3,
        frozenset(("a", "d")): 0.001,
        frozenset(("c", "d")): 0.5,
        frozenset(("b", "d")): 0.04,
    }
    # b ties the leader a; c differs from a, so leads group 2; d differs from a, ties c.
    assert leader_groups(["a", "b", "c", "d"], p, 0.05) == {"a": 1, "b": 1, "c": 2, "d": 2}
    assert leader_groups(["a", "b", "c", "d"], p, 0.25) == {"a": 1, "b": 2, "c": 2, "d": 3}
    assert leader_groups([], {}, 0.05) == {}


def test_rank_parameters_and_cells_are_checked() -> None:
    for bad in ((0.0, 3, None), (0.05, 1, None), (0.05, 3, -0.1)):
        with pytest.raises(ValueError):
            check_rank_parameters(*bad)
    with pytest.raises(ValueError, match="cell 'x'"):
        summarize_cells({"x": []}, None, 0.95)
    with pytest.raises(ValueError, match="cell 'x': 2 samples but 1 rounds"):
        summarize_cells({"x": [1.0, 2.0]}, {"x": [1]}, 0.95)
    assert summarize_cells({"x": [1.0, 3.0]}, {"x": [1, 2]}, 0.95)["x"].mean == 2.0


def test_too_noisy_is_relative_to_the_mean() -> None:
    s = summarize([90.0, 110.0, 100.0])  # half-width ≈ 24.8 % of the mean
    assert too_noisy(s, 0.10) and not too_noisy(s, 0.30) and not too_noisy(s, None)
    assert not too_noisy(summarize([5.0]), 0.0)  # no CI with one run
    # mean 0: any width is infinitely wide
    assert too_noisy(summarize([-1.0, 1.0], scale="real"), 10.0)
    assert not too_noisy(summarize([0.0, 0.0]), 0.0)  # …unless the CI is a point


def test_ratio_to_best_without_a_blocked_analysis_is_fieller() -> None:
    groups = {"a": [100.0, 102.0, 98.0], "b": [50.0, 51.0, 49.0]}
    assert ratio_to_best("a", None, None, groups, 0.95) is None
    assert ratio_to_best("a", "a", None, groups, 0.95) == RatioCI(1.0, 1.0, 1.0)
    r = ratio_to_best("b", "a", independent_analysis(groups, 0.05, 0.95), groups, 0.95)
    assert (
        r is not None
        and r.ratio == pytest.approx(0.5)
        and r.low is not None
        and r.low < 0.5 < (r.high or 0)
    )


def test_heading_and_description() -> None:
    assert comparison_heading(None, 1, 0.05, False) == "one ranked cell: no comparisons made"
    assert comparison_heading(None, 0, 0.05, True) == "no cell has enough runs: no comparisons made"
    an = independent_analysis({"a": [1.0, 2.0, 3.0], "b": [2.0, 3.0, 4.0]}, 0.05, 0.95)
    assert (
        comparison_heading(an, 2, 0.05, False)
        == "Welch's t-test, two-sided, Holm-corrected over 1 comparison, α=0.05"
    )
    assert ranking_description("H", False, True, 0.95, 3, None) == (
        "H; lower is better; ordered by geometric means; 95% CIs: Student t, or "
        "log-scale t where it would reach 0, "
        "Wilson for 0/1 figures; cells with n < 3 are listed last and not ranked"
    )
    assert ranking_description("H", True, False, 0.9, 2, 0.1).endswith(
        "; 'too noisy' (CI half-width > 10% of the mean) is a flag, never a reason to "
        "leave a cell out"
    )


# -- decision --------------------------------------------------------------------------------------


def _row(name: str, ratio: float | None, p: float | None, values: list[float]) -> RankedRow:
    return RankedRow(
        name,
        summarize(values),
        sum(values) / len(values),
        1,
        1,
        False,
        p,
        None if ratio is None else RatioCI(ratio, None, None),
        None,
        False,
        False,
    )


def test_classify_by_gap_then_significance() -> None:
    ranked = [
        _row("best", 1.0, None, [100.0, 100.0]),
        _row("close", 0.97, 0.001, [97.0, 97.0]),
        _row("worse", 0.8, 0.01, [80.0, 80.0]),
        _row("open", 0.8, 0.2, [80.0, 80.0]),
        _row("no-ratio", None, 0.001, [1.0, 1.0]),
    ]
    v = classify(ranked, higher_is_better=True, alpha=0.05, threshold=0.05)
    assert (
        v.top == ("best", "close")
        and v.separated == ("worse", "no-ratio")
        and v.unresolved == ("open",)
    )
    # Lower is better: a ratio of 0.97 is 3 % *better*, a gap of −3 %; 1.2 is 20 % worse.
    low = classify(
        [_row("b", 1.0, None, [1.0]), _row("x", 0.97, 0.5, [1.0]), _row("y", 1.2, 0.5, [1.0])],
        higher_is_better=False,
        alpha=0.05,
        threshold=0.05,
    )
    assert low.top == ("b", "x") and low.unresolved == ("y",)


def test_tie_break_keys() -> None:
    assert full_tie_break(("safety",)) == ("safety", "performance", "name")
    assert full_tie_break(("name", "performance")) == ("name", "performance")
    axes = {"cache": "unsafe", "modifier": "none", "format": "qcow2"}
    assert tie_break_key("x", ("performance", "name"), axes, 50.0, higher_is_better=True) == (
        -50.0,
        "x",
    )
    assert tie_break_key("x", ("safety", "simplicity"), axes, 50.0, higher_is_better=False) == (
        3,
        (1, 1),
    )


def test_extra_rounds_by_hand() -> None:
    # Welch (not blocked): s = the larger SD of ln values; d = ln 2; n = ⌈((z₀.₉₇₅ +
    # z₀.₈)·√2·s/d)²⌉.
    samples = {"a": [100.0, 110.0, 90.0], "b": [50.0, 60.0, 40.0]}
    s = separation_sd("a", "b", None, samples)
    logs = [math.log(v) for v in samples["b"]]
    m = sum(logs) / 3
    assert s == pytest.approx(math.sqrt(sum((x - m) ** 2 for x in logs) / 2))
    assert separation_sd("a", "b", None, None) is None
    z = 1.959963984540054 + 0.8416212335729143
    want = math.ceil((z * math.sqrt(2) * s / math.log(2)) ** 2) - 3
    assert extra_rounds("a", ["b"], {"a": 100.0, "b": 50.0}, 3, 0.05, None, samples) == max(1, want)
    # A non-positive centre has no log ratio: nothing can be estimated.
    assert extra_rounds("a", ["b"], {"a": 100.0, "b": 0.0}, 3, 0.05, None, samples) is None


def test_unresolved_statement() -> None:
    text = unresolved_statement("A", ["B", "C"], "5%", None, 0.05, (), "B", budget_spent=True)
    assert text == (
        "not told apart within the budget at this resolution: A has the best geo. mean, but B, C "
        "are neither decided worse nor equivalent (within 5%); no amount of time can be estimated "
        "to settle them; if one must be chosen now, the "
        "tie-break (performance) picks B"
    )


# -- ruling out (stats/ruling_out.py) --------------------------------------------------------------


def _pair(ratio: float, se: float | None, df: float | None = 10.0) -> BlockedPair:
    return BlockedPair("c", "best", ratio, None, None, 0.0, df, 0.5, 0.5, False, se)


def test_ruling_out_margins_exact_fits_and_what_is_left_out() -> None:
    assert margin(0.05, True) == pytest.approx(math.log(1 / 0.95))
    assert margin(0.05, False) == pytest.approx(-math.log(1.05))
    # An exact fit (SE 0) decides without error: 10% behind is ruled out, 10% ahead is not.
    got = non_superiority({"behind": _pair(0.9, 0.0), "ahead": _pair(1.1, 0.0)}, True, 0.05)
    assert got == {"behind": 0.0, "ahead": 1.0}
    # Lower is better: a ratio of 1.2 (20% slower) with a tight SE cannot be 5% faster; 0.9 might
    # be.
    low = non_superiority({"slower": _pair(1.2, 0.02), "faster": _pair(0.9, 0.02)}, False, 0.05)
    assert low["slower"] < 1e-6 and low["faster"] > 0.99
    # No SE (Friedman–Conover, Welch) or no df: not tested, never ruled out.
    assert non_superiority({"x": _pair(0.5, None), "y": _pair(0.5, 0.01, None)}, True, 0.05) == {}
    # Holm over the family: two raw p of 0.03 become 0.06 each, neither is ruled out at α = 0.05.
    from scipy import stats as st

    se = (math.log(0.9) - margin(0.05, True)) / st.t.ppf(0.03, 10.0)
    two = non_superiority({"a": _pair(0.9, se), "b": _pair(0.9, se)}, True, 0.05)
    assert two == {"a": pytest.approx(0.06), "b": pytest.approx(0.06)}


def test_rounds_to_rule_out_formula() -> None:
    # 10% behind (d = ln 0.9), s = 0.1, θ = 5%, α = 0.05 spent over the looks (stats/looks.py): the
    # first n with n ≥ ((z_{1−level(n)} + 0.841621) · √2 · 0.1 / (0.051293 + 0.105361))²; every look
    # from 3 to 30 rounds is at ℓ* = 0.0068, z_{1−ℓ*} = 2.4677: 8.93 for each n, so n = 9, 6 more
    # after 3 (6 in all at an unspent α, 5.04: the price of not letting noise decide at some look).
    assert rounds_to_rule_out(math.log(0.9), 0.1, 3, 0.05, True) == 6
    # no noise: one more round settles it
    assert rounds_to_rule_out(math.log(0.9), 0.0, 3, 0.05, True) == 1
    # Ahead by more than the margin, or no SD: no number of rounds rules it out.
    assert rounds_to_rule_out(math.log(1.2), 0.1, 3, 0.05, True) is None
    assert rounds_to_rule_out(math.log(0.9), None, 3, 0.05, True) is None
    # Lower is better: 10% slower (d = ln 1.1) against δ = −ln 1.05.
    assert rounds_to_rule_out(math.log(1.1), 0.1, 3, 0.05, False) == rounds_to_rule_out(
        math.log(1 / 1.1), 0.1, 3, 1 - 1 / 1.05, True
    )
