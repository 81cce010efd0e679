"""Spending the decision's error rate over the race's looks: identical cells are called different
rarely.

A race looks at its data after every round and stops a cell the first time a test says it is worse.
Each look at level α is a fresh chance for noise to cross the line: on identical cells with this
host's noise, 8 looks at α = 0.05 called them different 13 % of the time and 28 looks 23 %
(simulated, docs/statistics.md). The rule therefore gives each look of a pair only a share of one
overall error rate α, so that all looks together, however many the race takes, stay within it
(Bonferroni over the looks; an "anytime" spending, no maximum needs to be known):

    look k of a pair = its k-th chance to decide: k = n − FIRST_LOOK + 1, n the rounds the two cells share
    level_k = α / (k · (k + 1))          Σ_{k ≥ 1} level_k = α · Σ (1/k − 1/(k+1)) = α

No pair is decided before FIRST_LOOK = 3 shared rounds (2 give one degree of freedom: a t-test there
is a coin toss with heavy tails). Early looks get the most of α, so large differences (cache=none
against writeback, often 2× and more) still settle in 3–5 rounds; small ones need more rounds, as
they should on a host whose runs swing ±10–20 %.

DECISION_ALPHA = 0.02 is the overall rate: in simulation (paired log differences, per-run SD 0.09,
10 % of runs disturbed ×4, looks from round 3 to 10 or 30) identical cells were called different in
1.0–1.5 % of races, and a real 2× difference was found within 4–5 rounds 99 % of the time. The
calibration against identical cells on the host itself is bench/aa_calibration.py
(docs/benchmarks.md).

Worked example, α = 0.02: 3 shared rounds → k = 1, level 0.01; 4 → k = 2, level 0.00333; 10 → k = 8,
level 0.000278. A pair whose Holm-adjusted p is 0.004 after 4 rounds is not yet called different
(0.004 ≥ 0.00333)."""  # noqa: E501

from __future__ import annotations

import functools

import numpy as np

from iomatrix.stats import special

DECISION_ALPHA = 0.02
FIRST_LOOK = 3


def look_index(shared_rounds: int) -> int:
    """k: which look at the pair this is (0 before FIRST_LOOK shared rounds: no decision yet)."""
    return max(0, shared_rounds - FIRST_LOOK + 1)


def look_level(alpha: float, shared_rounds: int) -> float:
    """The level a test at this look must reach: α/(k(k+1)), or 0 (nothing can be decided) before
    FIRST_LOOK."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    k = look_index(shared_rounds)
    return 0.0 if k == 0 else alpha / (k * (k + 1))


MAX_ROUNDS_ESTIMATED = 100_000
# The search for the smallest n looks at a window of this many n first, then at windows twice as
# long: the n asked for is usually found in the first one, and each n's test is the same whichever
# window holds it.
FIRST_WINDOW = 64


@functools.cache
def _look_quantiles(alpha: float, two_sided: bool) -> tuple[np.ndarray, np.ndarray]:
    """(n, z_{1−level(n)/s}) for every n from FIRST_LOOK to MAX_ROUNDS_ESTIMATED: what
    `rounds_needed` compares against, the same for every pair at one α. Computed once per (α,
    sides): the normal quantiles of 100,000 levels cost about 10 ms, and a fleet answer estimates
    rounds for every unresolved pair of every host."""
    n = np.arange(FIRST_LOOK, MAX_ROUNDS_ESTIMATED + 1, dtype=float)
    k = n - FIRST_LOOK + 1
    level = alpha / (k * (k + 1)) / (2.0 if two_sided else 1.0)
    z = special.ndtri(1.0 - level)  # norm.ppf's own function (stats/special.py)
    n.flags.writeable = z.flags.writeable = False  # shared by every later call
    return n, z


def rounds_needed(
    gap_log: float, sd_log: float, rounds_done: int, alpha: float, power: float, two_sided: bool
) -> int | None:
    """More rounds (≥ 1) after which a test of a true log difference ``gap_log`` would pass its
    look's level with the given power: the smallest n > ``rounds_done`` (n ≥ FIRST_LOOK) with

        n ≥ ((z_{1−level(n)/s} + z_{power}) · √2 · sd / |gap|)²     s = 2 two-sided, 1 one-sided

    (normal approximation; the level shrinks with n, so the requirement grows slowly with it). None
    beyond MAX_ROUNDS_ESTIMATED rounds."""
    if sd_log == 0:
        return 1
    all_n, all_z = _look_quantiles(alpha, two_sided)
    start = max(FIRST_LOOK, rounds_done + 1) - FIRST_LOOK
    z_power = special.ndtri(power)
    width = FIRST_WINDOW
    while start < all_n.size:
        n, z = all_n[start : start + width], all_z[start : start + width]
        need = ((z + z_power) * np.sqrt(2.0) * sd_log / abs(gap_log)) ** 2
        ok = np.nonzero(n >= need)[0]
        if ok.size:
            return max(1, int(n[ok[0]]) - rounds_done)
        start, width = start + width, width * 2
    return None
