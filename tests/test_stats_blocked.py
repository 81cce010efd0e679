"""blocked_analysis(): the RCBD model pinned to a hand-computed table, Friedman to a published
example."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from iomatrix.stats.blocked import blocked_analysis, friedman_conover
from iomatrix.stats.looks import DECISION_ALPHA

# Log values y (ln of the measurements), 3 cells × 4 rounds:
#            r1 r2 r3 r4   mean
#   A         2  4  3  3    3
#   B         3  5  5  3    4
#   C         4  6  4  6    5
#   round mean 3  5  4  4   grand 4
LOG_TABLE = {"A": [2, 4, 3, 3], "B": [3, 5, 5, 3], "C": [4, 6, 4, 6]}


def _data(table: dict[str, list[float]]) -> dict[str, list[tuple[int, float]]]:
    return {c: [(r + 1, math.exp(y)) for r, y in enumerate(ys)] for c, ys in table.items()}


def test_rcbd_anova_hand_computed() -> None:
    """By hand:
    SS_cells  = b Σ(ȳi − ȳ)² = 4·(1 + 0 + 1) = 8,        df 2
    SS_rounds = k Σ(ȳj − ȳ)² = 3·(1 + 1 + 0 + 0) = 6,    df 3
    SS_total  = A 4+0+1+1, B 1+1+1+1, C 0+4+0+4 = 18
    SS_resid  = 18 − 8 − 6 = 4,  df (3−1)(4−1) = 6,  MSE = 2/3
    F_cells = 4/(2/3) = 6,  F_rounds = 2/(2/3) = 3,  round share = 6/(6+4) = 0.6
    C vs A: d = 2, SE = √(2·MSE/b) = √(1/3), t = 2√3 = 3.4641, df 6
    """
    # The integer table's residuals are mostly exact zeros, which Shapiro–Wilk rightly calls
    # non-normal; pin the parametric model itself.
    r = blocked_analysis(_data(LOG_TABLE), allow_nonparametric=False)
    assert r.method == "rcbd-anova" and r.blocked
    assert r.df_resid == 6
    assert r.residual_sd == pytest.approx(math.sqrt(2 / 3))
    assert r.f_cells == pytest.approx(6.0) and r.f_rounds == pytest.approx(3.0)
    assert r.p_cells == pytest.approx(st.f.sf(6.0, 2, 6))
    assert r.round_share == pytest.approx(0.6)
    assert r.centre["C"] / r.centre["A"] == pytest.approx(math.exp(2))
    # The pairs are each pair's own paired t (stats/paired.py), not the pooled residual: C − A per
    # round is 2, 2, 1, 3 → d̄ = 2, s_d = √(2/3), SE = s_d/2, t = 4.899 on 3 df.
    ca = r.pair("C", "A")
    ref = st.ttest_rel(LOG_TABLE["C"], LOG_TABLE["A"])
    assert ca.statistic == pytest.approx(ref.statistic) == pytest.approx(2 / (math.sqrt(2 / 3) / 2))
    assert ca.p_value == pytest.approx(ref.pvalue) and ca.df == 3 and ca.paired_rounds == 4
    assert ca.ratio == pytest.approx(math.exp(2))
    q = st.t.ppf(0.975, 3)
    assert ca.ratio_low == pytest.approx(math.exp(2 - q * math.sqrt(2 / 3) / 2))
    # Holm over the 3 pairs' raw p-values, each judged at its look's level: 4 shared rounds are the
    # second look, and every look from 3 to 30 shared rounds gets Pocock's constant ℓ* = 0.00240 at
    # α = 0.02 (stats/looks.py's worked example).
    raw = sorted(r.pair(x, y).p_value for x, y in (("A", "B"), ("A", "C"), ("B", "C")))
    assert (
        r.pair("A", "C").p_adjusted == pytest.approx(min(1.0, 3 * ca.p_value))
        and ca.p_value == raw[0]
    )
    assert DECISION_ALPHA == 0.02 and ca.level == pytest.approx(0.00240, abs=5e-6)
    assert r.pair("A", "C").statistic == pytest.approx(-ca.statistic)


def test_a_pair_is_judged_by_its_own_variance_not_the_sweeps() -> None:
    # Twins that swing ±20 % beside two steady cells (±1 %): the residual pooled over all four cells
    # is small, and it called the twins different (docs/statistics.md, "Decisions that reproduce");
    # their own differences say nothing of the kind, however many steady cells stand beside them.
    # The moderated variance (stats/moderated.py) is shrunk toward what the cell-variance model
    # expects of this pair (the twins' own swings, seen again in their pairs with the steady
    # cells), not toward the steady pairs' variance: the SE stays within 15 % of the twins' own.
    twins = {"a": [(1, 100.0), (2, 125.0), (3, 80.0)], "b": [(1, 115.0), (2, 100.0), (3, 92.0)]}
    steady = {"n1": [(1, 20.0), (2, 20.2), (3, 19.9)], "n2": [(1, 21.0), (2, 21.1), (3, 20.8)]}
    alone = blocked_analysis(twins).pair("a", "b")
    beside = blocked_analysis({**twins, **steady}, allow_nonparametric=False).pair("a", "b")
    assert alone.se_log is not None and beside.se_log is not None
    assert beside.se_log > 0.85 * alone.se_log
    assert not beside.significant and beside.p_value > 0.5


def test_ratios_compare_only_the_rounds_both_ran() -> None:
    # b ran 3 early rounds on a slow host, a ran on into faster rounds: a's later runs do not count
    # against b.
    a = [(1, 100.0), (2, 101.0), (3, 99.0), *[(r, 150.0) for r in range(4, 20)]]
    b = [(1, 100.0), (2, 100.0), (3, 100.0)]
    pr = blocked_analysis({"a": a, "b": b}).pair("a", "b")
    assert pr.paired_rounds == 3 and pr.ratio == pytest.approx(1.0, abs=0.01)


def test_two_cells_equal_the_paired_t_test_on_logs() -> None:
    a = [120.0, 80.0, 100.0, 140.0, 90.0]
    b = [110.0, 70.0, 97.0, 128.0, 85.0]
    r = blocked_analysis({"a": list(enumerate(a)), "b": list(enumerate(b))})
    ref = st.ttest_rel(np.log(a), np.log(b))
    assert r.method == "rcbd-anova"
    assert r.pair("a", "b").statistic == pytest.approx(ref.statistic)
    assert r.pair("a", "b").p_value == pytest.approx(ref.pvalue)
    # The round effect is large: the cells differ by ~7% in every round though each varies ±20%.
    # Five shared rounds are the third look: the level is ℓ* = 0.00240 (α = 0.02, stats/looks.py),
    # and p = 0.010 does not reach it yet.
    assert r.pair("a", "b").p_value < 0.05 and r.pair("a", "b").level == pytest.approx(
        0.00240, abs=5e-6
    )
    assert not r.pair("a", "b").significant
    assert st.ttest_ind(a, b, equal_var=False).pvalue > 0.5  # an independent test sees nothing


def test_incomplete_rounds_use_the_model_and_too_few_fall_back_to_welch() -> None:
    data = _data(LOG_TABLE)
    data["A"] = data["A"][:3]  # A missed round 4
    r = blocked_analysis(data, allow_nonparametric=False)
    assert (
        r.method == "rcbd-anova"
        and r.rounds_complete == (1, 2, 3)
        and r.rounds_used == (1, 2, 3, 4)
    )
    assert "unbalanced" in r.description
    only_one = {"x": [(1, 10.0), (2, 11.0)], "y": [(1, 12.0), (3, 13.0)]}
    w = blocked_analysis(only_one)
    assert w.method == "welch" and "only 1 round(s) hold every cell" in w.description


def test_exact_additive_fit_is_decided_exactly() -> None:
    r = blocked_analysis({"a": [(1, 2.0), (2, 4.0)], "b": [(1, 1.0), (2, 2.0)]})
    assert r.pair("a", "b").p_value == 0.0 and r.pair("a", "b").ratio == pytest.approx(2.0)


# Hollander & Wolfe (1973), p. 140: rounding first base, 22 players × 3 methods.  R's
# friedman.test(RoundingTimes) documents "Friedman chi-squared = 11.143, df = 2, p-value =
# 0.003805".
ROUNDING_TIMES = [
    (5.40, 5.50, 5.55),
    (5.85, 5.70, 5.75),
    (5.20, 5.60, 5.50),
    (5.55, 5.50, 5.40),
    (5.90, 5.85, 5.70),
    (5.45, 5.55, 5.60),
    (5.40, 5.40, 5.35),
    (5.45, 5.50, 5.35),
    (5.25, 5.15, 5.00),
    (5.85, 5.80, 5.70),
    (5.25, 5.20, 5.10),
    (5.65, 5.55, 5.45),
    (5.60, 5.35, 5.45),
    (5.05, 5.00, 4.95),
    (5.50, 5.50, 5.40),
    (5.45, 5.55, 5.50),
    (5.55, 5.55, 5.35),
    (5.45, 5.50, 5.55),
    (5.50, 5.45, 5.25),
    (5.65, 5.60, 5.40),
    (5.70, 5.65, 5.55),
    (6.30, 6.30, 6.25),
]


def test_friedman_matches_the_published_example() -> None:
    t1, p, r_sum, se, df = friedman_conover(np.array(ROUNDING_TIMES))
    assert t1 == pytest.approx(11.143, abs=5e-4)
    assert p == pytest.approx(0.003805, abs=5e-7)
    assert df == 42 and r_sum.sum() == pytest.approx(22 * 6) and se > 0


def test_heavy_tailed_residuals_switch_to_friedman() -> None:
    rng = np.random.default_rng(7)
    rounds = 12
    base = rng.normal(0, 0.05, rounds)
    table = {
        c: [math.exp(m + base[j] + rng.normal(0, 0.01)) for j in range(rounds)]
        for c, m in (("a", 0.0), ("b", 0.05), ("c", 0.10))
    }
    table["b"][3] *= 40.0  # one wildly disturbed run
    r = blocked_analysis({c: list(enumerate(v)) for c, v in table.items()})
    assert r.method == "friedman-conover"
    assert r.normality_p is not None and r.normality_p < 0.01
    assert "Shapiro–Wilk" in r.description
    assert r.pair("c", "a").significant  # ranks are not moved by the wild run


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        blocked_analysis({"a": [(1, 1.0)]})
    with pytest.raises(ValueError):
        blocked_analysis({"a": [(1, 1.0), (2, 2.0)], "b": [(1, 1.0), (2, 2.0)]}, alpha=2)


def test_non_normal_residuals_keep_friedman_and_compare_pairs_by_their_own_rounds() -> None:
    data = {c: [(j, row[i]) for j, row in enumerate(ROUNDING_TIMES)] for i, c in enumerate("abc")}
    # one wild value: the residuals of the log model are then clearly not normal
    data["b"][5] = (5, 50.0)
    r = blocked_analysis(data)
    assert r.method == "friedman-conover" and r.friedman_p is not None
    for x, y in (("a", "b"), ("a", "c"), ("b", "c")):
        ref = st.ttest_rel(np.log([v for _, v in data[x]]), np.log([v for _, v in data[y]]))
        assert r.pair(x, y).statistic == pytest.approx(ref.statistic)


def test_pairs_after_a_race_use_the_rounds_both_ran(data_dir: Path) -> None:
    # Real runs (modern on this host): 5 cells for 3 complete rounds, then the race's two leaders on
    # together for ~30 rounds, writeback · io_uring at 2.5× writeback · threads in every round but
    # one wild run (41k in round 2, a complete one). The two leaders are separated over their 30
    # shared rounds; the cache=none cells share 3–4 rounds with the leader, one of them wild: their
    # own differences (ratios 1.3–3.3) cannot decide at the first looks' levels, and the leaders' 30
    # rounds no longer lend them a variance they do not have.
    raw = json.loads((data_dir / "race_rand_read_modern.json").read_text())["runs"]
    data = {c: [(int(r), float(v)) for r, v in pts] for c, pts in raw.items()}
    r = blocked_analysis(data)
    assert (
        r.method == "friedman-conover" and len(r.rounds_complete) == 3 and len(r.rounds_used) == 30
    )
    lead = "writeback · io_uring"
    top = r.pair(lead, "writeback · threads")
    assert top.significant and top.ratio > 1.9 and top.paired_rounds == 30
    for other in ("cache=none · threads", "cache=none · native", "cache=none · io_uring"):
        pr = r.pair(lead, other)
        assert pr.paired_rounds in (3, 4) and pr.ratio > 1.7 and not pr.significant
    # 4 rounds, 0.9×: no evidence
    assert not r.pair("cache=none · native", "cache=none · io_uring").significant
