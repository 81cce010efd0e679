"""Rank the cells of a sweep, with honest ties.

Procedure (docs/statistics.md, "Ranking"):

1. Summarize every cell (Student-t CI).
2. A cell is *eligible* when n ≥ ``min_n`` and, if ``max_rel_half_width`` is
   set, its CI half-width is at most that fraction of |mean|.  Ineligible cells
   carry the flags ``too_few_runs`` / ``too_noisy``; they are listed *after*
   all eligible cells with ``rank = group = None`` and can never be the winner.
3. Eligible cells are ordered by mean, best first (ties broken by name, so the
   order is deterministic).
4. Every pair of eligible cells is compared with Welch's t-test; the
   k(k−1)/2 p-values form one family, Holm-corrected together.
5. Groups (leader clustering, in rank order): the best cell leads group 1; a
   cell joins the group of the first leader it is *not* significantly
   different from (Holm-adjusted p ≥ α); a cell significantly different from
   every existing leader starts a new group.  Group 1 is therefore exactly the
   set of cells indistinguishable from the best (``same_as_best``).
6. Every row gets its ratio to the best (cell/best, Fieller CI) and, when a
   ``reference`` (e.g. bare metal) is given, its ratio to the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.compare import RatioCI, WelchResult, ratio_ci, welch
from iomatrix.stats.holm import holm
from iomatrix.stats.summary import Summary, summarize


@dataclass(frozen=True)
class PairComparison:
    a: str
    b: str
    welch: WelchResult  # mean(a) − mean(b)
    p_adjusted: float  # Holm over the whole family
    significant: bool  # p_adjusted < alpha


@dataclass(frozen=True)
class RankedRow:
    name: str
    summary: Summary
    rank: int | None  # 1-based position among eligible cells; None when ineligible
    group: int | None  # 1 = indistinguishable from the best; None when ineligible
    same_as_best: bool  # eligible and not significantly different from the best
    p_vs_best: float | None  # Holm-adjusted p against the best; None for the best / ineligible
    ratio_to_best: RatioCI | None  # mean(cell)/mean(best); None when there is no eligible best
    ratio_to_reference: RatioCI | None  # mean(cell)/mean(reference); None without a reference
    too_few_runs: bool
    too_noisy: bool

    @property
    def eligible(self) -> bool:
        return not (self.too_few_runs or self.too_noisy)

    @property
    def flags(self) -> tuple[str, ...]:
        pairs = (("too_few_runs", self.too_few_runs), ("too_noisy", self.too_noisy))
        return tuple(name for name, on in pairs if on)

    @property
    def group_label(self) -> str | None:
        """Group as a letter: 1 → "a", 26 → "z", 27 → "aa" (None when ineligible)."""
        return None if self.group is None else group_letter(self.group)


@dataclass(frozen=True)
class Ranking:
    rows: tuple[RankedRow, ...]  # eligible cells best first, then ineligible cells
    comparisons: tuple[PairComparison, ...]
    higher_is_better: bool
    alpha: float
    min_n: int
    max_rel_half_width: float | None
    test_description: str

    @property
    def best(self) -> str | None:
        """Name of the leading eligible cell, or None when no cell is eligible."""
        return self.rows[0].name if self.rows and self.rows[0].rank == 1 else None

    @property
    def n_comparisons(self) -> int:
        return len(self.comparisons)

    def row(self, name: str) -> RankedRow:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def comparison(self, a: str, b: str) -> PairComparison:
        """The comparison of a and b in either order (welch is for the stored order)."""
        for c in self.comparisons:
            if {c.a, c.b} == {a, b}:
                return c
        raise KeyError((a, b))


def group_letter(group: int) -> str:
    if group < 1:
        raise ValueError("groups start at 1")
    out = ""
    while group > 0:
        group, rem = divmod(group - 1, 26)
        out = chr(ord("a") + rem) + out
    return out


def _pct(x: float) -> str:
    return f"{x * 100:g}%"


def rank(
    groups: Mapping[str, Sequence[float]],
    higher_is_better: bool,
    alpha: float = 0.05,
    min_n: int = 3,
    max_rel_half_width: float | None = 0.10,
    reference: Sequence[float] | None = None,
    confidence: float = 0.95,
) -> Ranking:
    """Order cells best first and group the statistically indistinguishable ones.

    ``min_n`` must be ≥ 2 (Welch needs a variance).  Raises ValueError for an
    empty cell or an invalid parameter.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if min_n < 2:
        raise ValueError(f"min_n must be ≥ 2 (a variance needs two runs), got {min_n}")
    if max_rel_half_width is not None and max_rel_half_width < 0:
        raise ValueError("max_rel_half_width must be ≥ 0 or None")

    summaries: dict[str, Summary] = {}
    for name, samples in groups.items():
        try:
            summaries[name] = summarize(samples, confidence)
        except ValueError as exc:
            raise ValueError(f"cell {name!r}: {exc}") from exc

    def too_noisy(s: Summary) -> bool:
        if max_rel_half_width is None or s.half_width is None:
            return False
        if s.rel_half_width is None:  # mean 0: relative width is infinite unless the CI is a point
            return s.half_width > 0
        return s.rel_half_width > max_rel_half_width

    flags = {name: (s.n < min_n, too_noisy(s)) for name, s in summaries.items()}
    sign = -1.0 if higher_is_better else 1.0

    def order_key(name: str) -> tuple[float, str]:
        return (sign * summaries[name].mean, name)

    eligible = sorted((n for n, (f1, f2) in flags.items() if not (f1 or f2)), key=order_key)
    ineligible = sorted((n for n, (f1, f2) in flags.items() if f1 or f2), key=order_key)

    # Every pair of eligible cells, one Holm family.
    pairs = [(eligible[i], eligible[j]) for i in range(len(eligible)) for j in range(i + 1, len(eligible))]
    tests = [welch(groups[x], groups[y], confidence) for x, y in pairs]
    adjusted = holm([w.p_value for w in tests])
    comparisons = tuple(
        PairComparison(x, y, w, p, p < alpha) for (x, y), w, p in zip(pairs, tests, adjusted, strict=True)
    )
    p_adj = {frozenset((c.a, c.b)): c.p_adjusted for c in comparisons}

    group_of: dict[str, int] = {}
    leaders: list[str] = []
    for name in eligible:
        for gi, leader in enumerate(leaders, start=1):
            if p_adj[frozenset((name, leader))] >= alpha:
                group_of[name] = gi
                break
        else:
            leaders.append(name)
            group_of[name] = len(leaders)

    best = eligible[0] if eligible else None
    ref = list(reference) if reference is not None else None

    rows: list[RankedRow] = []
    for pos, name in enumerate(eligible + ineligible, start=1):
        is_eligible = name in group_of
        if best is None:
            to_best = None
        elif name == best:
            to_best = RatioCI(1.0, 1.0, 1.0)
        else:
            to_best = ratio_ci(groups[name], groups[best], confidence)
        rows.append(
            RankedRow(
                name=name,
                summary=summaries[name],
                rank=pos if is_eligible else None,
                group=group_of.get(name),
                same_as_best=group_of.get(name) == 1,
                p_vs_best=(p_adj[frozenset((name, best))] if is_eligible and best is not None and name != best
                           else None),
                ratio_to_best=to_best,
                ratio_to_reference=None if ref is None else ratio_ci(groups[name], ref, confidence),
                too_few_runs=flags[name][0],
                too_noisy=flags[name][1],
            )
        )

    k = len(comparisons)
    direction = "higher is better" if higher_is_better else "lower is better"
    noisy_rule = (
        "" if max_rel_half_width is None else f" or CI half-width > {_pct(max_rel_half_width)} of the mean"
    )
    if k:
        head = (f"Welch's t-test, two-sided, Holm-corrected over {k} comparison{'s' if k != 1 else ''}, "
                f"α={alpha:g}")
    elif len(eligible) == 1:
        head = "one eligible cell: no comparisons made"
    else:
        head = "no eligible cells: no comparisons made"
    description = (
        f"{head}; {direction}; {_pct(confidence)} Student-t CIs; ratios by Fieller's theorem; "
        f"cells with n < {min_n}{noisy_rule} are listed last and not ranked"
    )
    return Ranking(
        rows=tuple(rows),
        comparisons=comparisons,
        higher_is_better=higher_is_better,
        alpha=alpha,
        min_n=min_n,
        max_rel_half_width=max_rel_half_width,
        test_description=description,
    )
