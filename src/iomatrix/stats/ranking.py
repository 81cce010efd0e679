"""Rank the cells of a sweep, with honest ties.  No threshold hides a settled difference.

Procedure (docs/statistics.md, "Ranking"):

1. Summarize every cell (``summarize``: a Student-t CI, the log-scale t CI where that would reach 0,
   Wilson's for a 0/1 figure).  A cell with n < ``min_n`` runs is listed last, unranked (a variance
   needs runs).  The CI width is never a filter: a cell whose CI half-width exceeds
   ``max_rel_half_width`` of its mean is ranked like any other and only *flagged* ``too_noisy``;
   what the noise leaves open shows up as unresolved comparisons.
2. Every pair of ranked cells is compared, one Holm family:
   * with ``rounds`` (the round of every sample): ``blocked_analysis`` — the
     two-way model on log values with the round as block (or Friedman +
     Conover when the residuals are clearly not normal), falling back to Welch
     with fewer than 2 complete rounds;
   * without: Welch's t-test on the values (``independent_analysis``).
3. Cells are ordered by their centre, best first: the geometric mean (blocked
   analyses, model-adjusted when rounds are incomplete) or the arithmetic mean
   (Welch); ties by name.
4. Groups (leader clustering, in rank order: ``stats/leader_groups.py``): the best cell leads group
   1; a cell joins the group of the first leader it is *not* significantly different from
   (Holm-adjusted p ≥ α); otherwise it starts a new group. Group 1 is the set of cells
   indistinguishable from the best. The letters shown are the compact letter display of the same
   pairwise decisions (``stats/letter_display.py``): two cells share a letter exactly when their
   pair is not significantly different, so a table's letters never contradict its text.
5. ``unresolved`` lists every pair the data cannot order (adjusted p ≥ α).
6. Ratios to the best: from the analysis (blocked: the pair's ratio over the
   rounds both ran with its paired CI, none with fewer than 2 such rounds;
   Welch: ratio of means with a Fieller CI).  Ratios to a
   ``reference`` (e.g. bare metal) are always Fieller on the values.

Choosing *the answer* from the ranking (practical threshold, tie-break) is
``stats/decision.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.blocked import (
    BlockedAnalysis,
    BlockedPair,
    blocked_analysis,
    independent_analysis,
)
from iomatrix.stats.compare import RatioCI, ratio_ci
from iomatrix.stats.leader_groups import leader_groups
from iomatrix.stats.letter_display import compact_letters
from iomatrix.stats.looks import DECISION_ALPHA
from iomatrix.stats.summary import Summary, summarize


@dataclass(frozen=True)
class PairComparison:
    a: str
    b: str
    test: BlockedPair  # oriented a versus b
    p_adjusted: float  # Holm over the whole family
    significant: bool  # p_adjusted < alpha


@dataclass(frozen=True)
class RankedRow:
    name: str
    summary: Summary
    # the value the order uses: geometric (blocked) or arithmetic mean; None if unranked
    centre: float | None
    rank: int | None  # 1-based position among ranked cells; None with too few runs
    group: int | None  # 1 = indistinguishable from the best; None with too few runs
    same_as_best: bool  # ranked and not significantly different from the best
    p_vs_best: float | None  # Holm-adjusted p against the best; None for the best / unranked
    ratio_to_best: RatioCI | None  # centre(cell)/centre(best); None when there is no best
    ratio_to_reference: RatioCI | None  # mean(cell)/mean(reference); None without a reference
    too_few_runs: bool
    too_noisy: bool  # a flag only: the cell is ranked all the same
    # The compact letter display (stats/letter_display.py): cells share a letter exactly when the
    # pair is not significantly different; None: the single letter of `group`.
    letters: str | None = None

    @property
    def eligible(self) -> bool:
        return not self.too_few_runs

    @property
    def flags(self) -> tuple[str, ...]:
        pairs = (("too_few_runs", self.too_few_runs), ("too_noisy", self.too_noisy))
        return tuple(name for name, on in pairs if on)

    @property
    def group_label(self) -> str | None:
        """The cell's group letters: those it shares with exactly the cells it is not significantly
        different from ("ab": unresolved against some of "a" and some of "b"); without a letter
        display the group as a letter, 1 → "a", 27 → "aa"; None when unranked."""
        if self.group is None:
            return None
        return self.letters or group_letter(self.group)


@dataclass(frozen=True)
class Ranking:
    rows: tuple[RankedRow, ...]  # ranked cells best first, then cells with too few runs
    comparisons: tuple[PairComparison, ...]
    higher_is_better: bool
    alpha: float
    min_n: int
    max_rel_half_width: float | None
    test_description: str
    analysis: BlockedAnalysis | None = None  # None with fewer than 2 ranked cells

    @property
    def best(self) -> str | None:
        """Name of the leading ranked cell (by centre), or None when no cell could be ranked."""
        return self.rows[0].name if self.rows and self.rows[0].rank == 1 else None

    @property
    def n_comparisons(self) -> int:
        return len(self.comparisons)

    @property
    def unresolved(self) -> tuple[tuple[str, str], ...]:
        """Pairs the data cannot order (Holm-adjusted p ≥ α), better cell first."""
        pos = {r.name: i for i, r in enumerate(self.rows)}
        out = [
            tuple(sorted((c.a, c.b), key=pos.__getitem__))
            for c in self.comparisons
            if not c.significant
        ]
        return tuple(sorted(out, key=lambda ab: (pos[ab[0]], pos[ab[1]])))  # type: ignore[arg-type]

    def row(self, name: str) -> RankedRow:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def comparison(self, a: str, b: str) -> PairComparison:
        """The comparison of a and b in either order (``test`` is for the stored order)."""
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


def check_rank_parameters(alpha: float, min_n: int, max_rel_half_width: float | None) -> None:
    """ValueError unless 0 < α < 1, min_n ≥ 2 (a variance needs two runs) and max_rel_half_width ≥ 0
    or None."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if min_n < 2:
        raise ValueError(f"min_n must be ≥ 2 (a variance needs two runs), got {min_n}")
    if max_rel_half_width is not None and max_rel_half_width < 0:
        raise ValueError("max_rel_half_width must be ≥ 0 or None")


def summarize_cells(
    groups: Mapping[str, Sequence[float]],
    rounds: Mapping[str, Sequence[int]] | None,
    confidence: float,
) -> dict[str, Summary]:
    """Every cell's summary (its CI as ``summarize`` computes it); ValueError naming the cell for an
    empty one or, with ``rounds``, a rounds list whose length differs from its samples'."""
    summaries: dict[str, Summary] = {}
    for name, samples in groups.items():
        try:
            summaries[name] = summarize(samples, confidence)
        except ValueError as exc:
            raise ValueError(f"cell {name!r}: {exc}") from exc
        if rounds is not None and len(rounds.get(name, ())) != len(samples):
            raise ValueError(
                f"cell {name!r}: {len(samples)} samples but {len(rounds.get(name, ()))} rounds"
            )
    return summaries


def too_noisy(s: Summary, max_rel_half_width: float | None) -> bool:
    """The CI half-width exceeds ``max_rel_half_width`` · |mean| (a flag only).  With mean 0 the
    relative width is infinite unless the CI is a point; no limit, or no CI (n = 1), is never too
    noisy."""
    if max_rel_half_width is None or s.half_width is None:
        return False
    if s.rel_half_width is None:
        return s.half_width > 0
    return s.rel_half_width > max_rel_half_width


def pair_analysis(
    groups: Mapping[str, Sequence[float]],
    names: Sequence[str],
    rounds: Mapping[str, Sequence[int]] | None,
    alpha: float,
    confidence: float,
) -> BlockedAnalysis | None:
    """Step 2: every pair of the ranked ``names`` in one Holm family — blocked by round with
    ``rounds``, else Welch; None with fewer than 2 cells."""
    if len(names) < 2:
        return None
    if rounds is not None:
        return blocked_analysis(
            {n: list(zip(rounds[n], groups[n], strict=True)) for n in names}, alpha, confidence
        )
    return independent_analysis({n: groups[n] for n in names}, alpha, confidence)


def ratio_to_best(
    name: str,
    best: str | None,
    analysis: BlockedAnalysis | None,
    groups: Mapping[str, Sequence[float]],
    confidence: float,
) -> RatioCI | None:
    """Step 6: centre(name)/centre(best) — 1 for the best itself; the model's ratio and CI when the
    analysis is blocked and ranked the cell; else the Fieller CI of the ratio of means.  None
    without a best."""
    if best is None:
        return None
    if name == best:
        return RatioCI(1.0, 1.0, 1.0)
    if analysis is not None and name in analysis.centre and analysis.blocked:
        pr = analysis.pair(name, best)
        # like with like or not at all: no ratio of runs made at different times
        if pr.paired_rounds < 2:
            return RatioCI(None, None, None)
        return RatioCI(pr.ratio, pr.ratio_low, pr.ratio_high)
    return ratio_ci(groups[name], groups[best], confidence)


def comparison_heading(
    analysis: BlockedAnalysis | None, n_ranked: int, alpha: float, blocked_by_round: bool
) -> str:
    """The first clause of the ranking's description: which test (or why none was made)."""
    if analysis is None:
        return (
            "one ranked cell: no comparisons made"
            if n_ranked == 1
            else "no cell has enough runs: no comparisons made"
        )
    if analysis.blocked:
        return analysis.description[0].upper() + analysis.description[1:]
    m = len(analysis.pairs)
    return (
        f"Welch's t-test, two-sided, Holm-corrected over {m} "
        f"comparison{'s' if m != 1 else ''}, α={alpha:g}"
        + ("" if not blocked_by_round else f" ({analysis.description.split(': ', 1)[-1]})")
    )


def ranking_description(
    head: str,
    higher_is_better: bool,
    blocked: bool,
    confidence: float,
    min_n: int,
    max_rel_half_width: float | None,
) -> str:
    """One sentence for reports: the test, the direction, the order, the CIs and what is not
    ranked."""
    direction = "higher is better" if higher_is_better else "lower is better"
    centre_word = "geometric means" if blocked else "means"
    noisy_note = (
        ""
        if max_rel_half_width is None
        else f"; 'too noisy' (CI half-width > {_pct(max_rel_half_width)} of the mean) is a flag, "
        "never a reason to leave a cell out"
    )
    # The intervals stats/summary.py computes: Student t, the t interval of the logs where Student t
    # would reach 0 (a quantity that cannot be negative), Wilson's for a 0/1 figure
    # (docs/statistics.md §1).
    return (
        f"{head}; {direction}; ordered by {centre_word}; {_pct(confidence)} CIs: Student "
        "t, or log-scale t "
        "where it would reach 0, Wilson for 0/1 figures; "
        f"cells with n < {min_n} are listed last and not ranked{noisy_note}"
    )


def rank(
    groups: Mapping[str, Sequence[float]],
    higher_is_better: bool,
    alpha: float = DECISION_ALPHA,
    min_n: int = 3,
    max_rel_half_width: float | None = 0.10,
    reference: Sequence[float] | None = None,
    confidence: float = 0.95,
    rounds: Mapping[str, Sequence[int]] | None = None,
) -> Ranking:
    """Order cells best first and group the statistically indistinguishable ones.

    ``rounds[name][i]`` is the round of ``groups[name][i]``; without it the runs are
    treated as independent.  ``min_n`` must be ≥ 2.  Raises ValueError for an empty
    cell, a rounds list of the wrong length, or an invalid parameter.
    """
    check_rank_parameters(alpha, min_n, max_rel_half_width)
    summaries = summarize_cells(groups, rounds, confidence)
    few = {name for name, s in summaries.items() if s.n < min_n}
    ranked_names = [n for n in groups if n not in few]
    analysis = pair_analysis(groups, ranked_names, rounds, alpha, confidence)
    centre = dict(analysis.centre) if analysis else {n: summaries[n].mean for n in ranked_names}
    sign = -1.0 if higher_is_better else 1.0
    eligible = sorted(ranked_names, key=lambda n: (sign * centre[n], n))
    ineligible = sorted(few, key=lambda n: (sign * summaries[n].mean, n))

    comparisons = tuple(
        PairComparison(p.a, p.b, p, p.p_adjusted, p.significant)
        for p in (analysis.pairs if analysis else ())
    )
    p_adj = {frozenset((c.a, c.b)): c.p_adjusted for c in comparisons}
    # Each pair at its own look's level (stats/looks.py), as the decision judges it (0 before 3
    # shared rounds).
    levels = {frozenset((c.a, c.b)): c.test.level for c in comparisons}
    group_of = leader_groups(eligible, p_adj, alpha, levels)
    letters = compact_letters(
        eligible, ((c.a, c.b) for c in comparisons if c.significant), group_letter
    )
    best = eligible[0] if eligible else None
    ref = list(reference) if reference is not None else None

    def row(pos: int, name: str) -> RankedRow:
        is_ranked = name in group_of
        return RankedRow(
            name=name,
            summary=summaries[name],
            centre=centre.get(name),
            rank=pos if is_ranked else None,
            group=group_of.get(name),
            same_as_best=group_of.get(name) == 1,
            p_vs_best=p_adj[frozenset((name, best))]
            if is_ranked and best is not None and name != best
            else None,
            ratio_to_best=ratio_to_best(name, best, analysis, groups, confidence),
            ratio_to_reference=None if ref is None else ratio_ci(groups[name], ref, confidence),
            too_few_runs=name in few,
            too_noisy=too_noisy(summaries[name], max_rel_half_width),
            letters=letters.get(name),
        )

    head = comparison_heading(analysis, len(eligible), alpha, rounds is not None)
    blocked = analysis is not None and analysis.blocked
    return Ranking(
        rows=tuple(row(pos, name) for pos, name in enumerate(eligible + ineligible, start=1)),
        comparisons=comparisons,
        higher_is_better=higher_is_better,
        alpha=alpha,
        min_n=min_n,
        max_rel_half_width=max_rel_half_width,
        test_description=ranking_description(
            head, higher_is_better, blocked, confidence, min_n, max_rel_half_width
        ),
        analysis=analysis,
    )
