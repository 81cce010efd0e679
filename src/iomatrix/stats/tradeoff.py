"""The cells a role's weighed trade-off is still open between: where a role's runs go when its
figures disagree.

A role is decided by several figures on several jobs (a database: its log's commits, its data files'
p99s). When the deciding figure's pick P is worse than the best beyond the margin on another figure
(a veto), the answer weighs every cell over all the role's figures (report/roles.py, weigh_cells):
the weighed leader W (the best weighed ratio to P, P itself 1) against each other cell X, each
interval at confidence 1 − 0.10/m for the m cells compared with W. The role stays "a trade-off, no
one answer" while some (W, X) is *open*: its interval neither excludes 1 nor lies within the
margin both ways. Those pairs need runs on every figure, in the same rounds; the race's own pairs do
not name them, since on each figure alone they are settled (P commits 1.2× faster, W's data p99 is
1.7× lower: both decided, the weighing not). Measured (issue 53, five quickstarts at 143b2e0): in
three the database ended "not separated, nor within 5 %" (0.92–1.14×, 0.96–1.31×, 0.94–1.07×) with
raw · none and raw · writeback at 6–8 rounds on the log and 7–11 on the data files, while the data
files' tie of raw · writeback and qcow2 · writeback ran to 23–24.

For figure k with weight w_k (normalised), s_k = +1 when higher is better, −1 when lower is, and the
rounds j both cells ran (stats/weighed_paired.py):

    ln W(X against P) = Σ_k w_k · s_k · mean_j(ln x_kj − ln p_kj)
    open(W, X) ⇔ not (low > 1 or high < 1) and not (low ≥ 1/(1+m) and high ≤ 1+m)

A pair is only looked for when a veto is plausible: some other figure's best beats P by more than
the margin on the means (the report then weighs; otherwise the race's pairs decide).

Worked example (weights log 2, data p99 1; margin 5 %; 4 shared rounds): P commits 1,000, 1,040,
960, 1,000/s and its data p99 is 400 µs in every round; Q commits 800/s in each and its p99 is 250,
260, 240, 250 µs. Veto: Q's p99 is 0.625× P's, beyond 5 %. Q against P: the log's paired mean
d̄ = −0.223, the p99's −0.470 (lower is better: a gain), so ln W = ⅔·(−0.223) + ⅓·0.470 = 0.0083:
W = 1.008×, 0.983–1.034× at 90 %: within 5 % both ways, not open. With Q's p99 at 250, 340, 170,
240 µs (the same mean, ±30 %) the interval is wider than ±5 % and holds 1: open, and P and Q run
on in every job of the role (tests/test_stats_tradeoff.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.weighed import WeighedRatio
from iomatrix.stats.weighed_paired import paired_part, paired_weighed_ratio

# One weighed comparison's confidence: 0.90, the interval whose inclusion in ±margin is TOST at
# α = 0.05 (the report's too: report/roles.py weigh_cells).
WEIGHED_CONFIDENCE = 0.90


def shortfall(value: float, best: float, higher_is_better: bool) -> float:
    """How much worse `value` is than `best`, as a fraction of `best` (0 when it is the best or
    better).

    Higher is better: 1 − value/best; lower is better (a latency): value/best − 1. Example: a p99 of
    1.2 ms against the best 1.0 ms is 0.2 worse (20 %); 900 MB/s against 1000 MB/s is 0.1 worse (10
    %)."""
    if best <= 0:
        return 0.0
    worse = 1 - value / best if higher_is_better else value / best - 1
    return max(0.0, worse)


def weighed_leader(ratio: Mapping[str, float], pick: str) -> tuple[str, list[str], float]:
    """(the leader L, the other cells, the confidence L is compared with each at) from every cell's
    weighed ratio to the pick (`ratio`, the pick's own 1; a tie goes to the pick): 1 − 0.10/m for
    the m others (Bonferroni: naming L better than all of them errs no more often than one
    comparison at 0.90). The report's weighing and the scheduler's use the same rule."""
    leader = max(ratio, key=lambda c: (ratio[c], c == pick))
    others = [c for c in ratio if c != leader]
    return leader, others, 1 - (1 - WEIGHED_CONFIDENCE) / len(others)


@dataclass(frozen=True)
class RoleFigure:
    """One of a role's figures as the runs so far give it: each cell's (round, value) pairs, which
    way is better, its weight. The role's first figure decides; the others may veto."""

    points: Mapping[str, Sequence[tuple[int, float]]]
    higher_is_better: bool
    weight: float

    def rounds_of(self, cell: str) -> dict[int, float]:
        return dict(self.points.get(cell, ()))

    def best(self) -> str | None:
        means = {c: sum(v for _, v in p) / len(p) for c, p in self.points.items() if p}
        if not means:
            return None
        pick = max if self.higher_is_better else min
        return pick(means, key=lambda c: (means[c], c))

    def shortfall(self, cell: str, best: str) -> float:
        """How much worse `cell`'s mean is than `best`'s (a fraction; 0 when not worse)."""
        a, b = self.points.get(cell, ()), self.points.get(best, ())
        if not a or not b:
            return 0.0
        mean_a, mean_b = sum(v for _, v in a) / len(a), sum(v for _, v in b) / len(b)
        return shortfall(mean_a, mean_b, self.higher_is_better)


def weighed(
    figures: Sequence[RoleFigure], a: str, b: str, confidence: float
) -> WeighedRatio | None:
    """b against a over every figure, each over the rounds both ran (stats/weighed_paired.py); None
    when some figure has fewer than 2 shared rounds or a value not above 0."""
    parts = []
    for f in figures:
        part = paired_part(f.weight, f.higher_is_better, f.rounds_of(a), f.rounds_of(b))
        if part is None:
            return None
        parts.append(part)
    return paired_weighed_ratio(parts, confidence)


def open_tradeoff_cells(figures: Sequence[RoleFigure], pick: str, margin: float) -> frozenset[str]:
    """The cells of the open weighed pairs (module docstring): the weighed leader and every cell
    it is neither separated from nor within `margin` of; empty when no veto is plausible, the pick
    cannot be weighed, or nothing is open. `figures[0]` decides; `pick` is its leader."""
    if len(figures) < 2 or not any(
        (best := f.best()) is not None and best != pick and f.shortfall(pick, best) > margin
        for f in figures[1:]
    ):
        return frozenset()
    cells = sorted(set.intersection(*(set(f.points) for f in figures)))
    ratio = {pick: 1.0}
    for c in cells:
        if c != pick and (w := weighed(figures, pick, c, WEIGHED_CONFIDENCE)) is not None:
            ratio[c] = w.ratio
    if len(ratio) < 2:
        return frozenset()
    leader, others, confidence = weighed_leader(ratio, pick)
    opened = set()
    for x in others:
        w = weighed(figures, x, leader, confidence)
        if w is not None and not w.separated() and not w.within(margin):
            opened.add(x)
    return frozenset(opened | {leader}) if opened else frozenset()
