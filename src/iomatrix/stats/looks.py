"""Spending the decision's error rate over the race's looks: identical cells are called different
rarely, and a difference that needs 6–9 rounds is still found.

A race looks at its data after every round and stops a cell the first time a test says it is worse.
Each look at level α is a fresh chance for noise to cross the line: on identical cells with this
host's noise, 8 looks at α = 0.05 called them different 13 % of the time and 28 looks 23 %
(simulated, docs/statistics.md). The rule therefore gives each look of a pair a level small enough
that all looks together, however many the race takes, stay within one overall rate α.

**A constant boundary over the horizon, then a tail that never ends.** A pair's looks are at n =
FIRST_LOOK … shared rounds; its test statistic at n is close to z_n = S_n/√n, S_n a random walk of
the n paired differences (Brownian motion on the information scale), so the looks are strongly
correlated: corr(z_m, z_n) = √(m/n). Up to HORIZON = 30 rounds every look gets the same level ℓ*,
the one whose two-sided boundary c = z_{1−ℓ*/2} is crossed at some look of FIRST_LOOK … HORIZON with
probability (1 − TAIL_SHARE)·α under H0 (Pocock 1977's constant boundary, with the looks where a
race takes them; computed exactly by numerical integration of the walk's density, `_constant_level`):

    P_H0( max_{n = 3..30} |z_n| > c ) = (1 − TAIL_SHARE) · α        ℓ* = 2·(1 − Φ(c))

Beyond the horizon (a race that runs on past 30 rounds: a precision phase, a budgetless plan), the
j-th look after it gets TAIL_SHARE · α / (j(j+1)), which sums to TAIL_SHARE · α however long it runs
(Bonferroni over looks, an "anytime" spending). In all: at most α, with no maximum to be known.

Why not α/(k(k+1)) from the first look, as before: Bonferroni over the looks ignores their
correlation, so by the 7th look (9 rounds) a test had to reach α/56 = 0.00036; the constant boundary
asks 0.0024 there, 7 times more. It asks less at the first two looks (0.01 and 0.0033 before): a
2× difference still settles at 3 rounds when the moderated variance gives the pair ≥ 4 df, and the
differences that need 6–9 rounds, which the quickstart's budget buys and its answers stayed
undecided on, are decided. On the captured twins (tests/data/aa-twins, 36 pairs, 9 rounds, loaded
host): identical twins called different 0 (1 before), a twin made 20 % slower decided in 6 of 36
(2), 40 % in 18 (14). The t-test's p is compared with ℓ* as group-sequential designs do with their
nominal levels: the walk's boundary is the normal one, the pair's t has few df, and the A/A
calibration (bench/aa_calibration.py, bench/power_curve.py) is what holds it to its rate.

DECISION_ALPHA = 0.02 is the overall rate. No pair is decided before FIRST_LOOK = 3 shared rounds (2
give one degree of freedom: a t-test there is a coin toss with heavy tails).

Worked example, α = 0.02, TAIL_SHARE = 0.1: (1 − 0.1)·0.02 = 0.018 over looks at 3 … 30 rounds gives
c = 3.035, ℓ* = 0.00240 at every look from 3 to 30 shared rounds; at 31 rounds (j = 1) the level is
0.002/2 = 0.001, at 32 0.002/6 = 0.00033. A pair whose Holm-adjusted p is 0.004 after 4 rounds is
not yet called different (0.004 ≥ 0.00240); one at 0.002 after 9 rounds is."""  # noqa: E501

from __future__ import annotations

import functools

import numpy as np

from iomatrix.stats import special

DECISION_ALPHA = 0.02
FIRST_LOOK = 3
HORIZON = 30  # rounds: the constant boundary's last look (quick's precision phase ends there)
TAIL_SHARE = 0.1  # of α, kept for looks past the horizon


def look_index(shared_rounds: int) -> int:
    """k: which look at the pair this is (0 before FIRST_LOOK shared rounds: no decision yet)."""
    return max(0, shared_rounds - FIRST_LOOK + 1)


def look_level(alpha: float, shared_rounds: int) -> float:
    """The level a test at this look must reach: ℓ* up to HORIZON rounds, TAIL_SHARE·α/(j(j+1)) at
    the j-th look past it, or 0 (nothing can be decided) before FIRST_LOOK."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if shared_rounds < FIRST_LOOK:
        return 0.0
    if shared_rounds <= HORIZON:
        return _constant_level((1.0 - TAIL_SHARE) * alpha)
    j = shared_rounds - HORIZON
    return TAIL_SHARE * alpha / (j * (j + 1))


# The walk's density is carried on a grid of this step (in units of one round's SD): the boundary
# found, 3.035 at α = 0.018, is within 0.003 of a 200,000-path simulation's (3.032).
GRID_STEP = 0.05


def _crossing(c: float) -> float:
    """P_H0(max |S_n|/√n > c over n = FIRST_LOOK … HORIZON), S_n a standard normal random walk: the
    density of S_FIRST_LOOK (normal, variance FIRST_LOOK) on a grid, cut at ±c√n at every look and
    convolved with one N(0, 1) step between looks; what is cut is what crossed."""
    h = GRID_STEP
    top = c * np.sqrt(HORIZON) + 8.0
    x = np.arange(-top, top + h / 2, h)
    mass = np.exp(-(x**2) / (2.0 * FIRST_LOOK)) / np.sqrt(2.0 * np.pi * FIRST_LOOK) * h
    step = np.arange(-8.0, 8.0 + h / 2, h)
    kernel = np.exp(-(step**2) / 2.0) / np.sqrt(2.0 * np.pi) * h
    for n in range(FIRST_LOOK, HORIZON + 1):
        if n > FIRST_LOOK:
            mass = np.convolve(mass, kernel, mode="same")
        mass[np.abs(x) > c * np.sqrt(n)] = 0.0
    return float(1.0 - mass.sum())


@functools.cache
def _constant_level(alpha: float) -> float:
    """ℓ*: the two-sided nominal level whose boundary c the walk crosses at some look of FIRST_LOOK
    … HORIZON with probability ``alpha`` (bisection on c; the crossing falls as c rises)."""
    lo, hi = 1.0, 6.0
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if _crossing(mid) > alpha:
            lo = mid
        else:
            hi = mid
    c = (lo + hi) / 2.0
    return float(2.0 * special.ndtr(-c))


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
    j = np.maximum(n - HORIZON, 1.0)
    level = np.where(
        n <= HORIZON,
        _constant_level((1.0 - TAIL_SHARE) * alpha),
        TAIL_SHARE * alpha / (j * (j + 1)),
    ) / (2.0 if two_sided else 1.0)
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
