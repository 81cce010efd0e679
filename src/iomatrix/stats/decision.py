"""The decision rule: always an answer, a named tie, or a statement that the data cannot tell yet.

Given a ``Ranking`` (stats/ranking.py) and a practical threshold θ (default
0.05: a threshold in the role of asv's ``factor``, whose default 1.1 is 10 %; a
role's margin replaces it for the role's jobs, roles.decided_at), each ranked
cell c other than the best B is:

* **tied with the best** (the *top group*) — its gap to the best is within θ:
  gap = 1 − centre(c)/centre(B) when higher is better, centre(c)/centre(B) − 1
  when lower is better; gap ≤ θ.  A difference smaller than θ is not worth
  choosing on, significant or not (asv reports a change only when it is both
  significant *and* beyond its factor).
* **separated** — significantly worse than the best (Holm-adjusted p below
  the level of the pair's look, stats/looks.py: α spent over the race's looks,
  the pair compared over the rounds both ran, stats/paired.py) and gap > θ:
  clearly and materially worse.
* **ruled out** — not significantly worse, gap > θ, but the data show it
  cannot be materially *better* than the best either: a one-sided t-test on
  the blocked model's log ratio against the margin that would make c the
  better choice (stats/ruling_out.py: r = centre(c)/centre(B), H0:
  r ≥ 1/(1 − θ) when higher is better, r ≤ 1/(1 + θ) when lower is better),
  Holm-adjusted over the cells tested, adjusted p below the pair's look level.
  Whatever c's true value, choosing B loses at most θ against it; whether c is
  much worse or only a little does not change the pick, so no further run is
  spent to tell. But B does not *beat* c: the two are named together (below).
  Only a blocked analysis rules out (the Welch fallback gives no SE on the log
  scale).
  A cell the race eliminated (``eliminated``: cell → the best of the look it
  was eliminated against) counts as ruled out here too while that reference
  is still ranked: the race's test at its look decided it against a cell
  still in the running, and no run was spent on it since. When requirements
  (or a tier) leave the reference out, the elimination says nothing about the
  cells left, and the cell is judged like any other.
* **unresolved** — not significantly worse, gap > θ, and not ruled out: it
  may be the true best by more than θ or materially worse; the data cannot
  tell.

Outcome (``Decision.outcome`` tells it against the keeper: better, equivalent, worse, inconclusive,
tie):

* every other cell separated → ``kind="single"``: B is the answer ("the
  answer" only over cells it significantly beats);
* otherwise, when the *keeper* K — the first of ``keep`` that is ranked (what
  the user runs, else QEMU's default), else the simplest of B and the cells
  equivalent to it — is B or shown equivalent to B (TOST at the pair's look
  level within ``margin``, stats/equivalence.py), and every other cell is
  significantly worse than K or shown unable to beat K by the margin
  (stats/ruling_out.py against K) → ``kind="equivalent"``: K is kept, "keep
  what you run (K): nothing measured is faster by more than 5% (B 0.97–1.04×)"
  (``bounds``: the strongest alternative's ratio to K and its (1 − 2·level)
  interval); no equivalent cell is named as if it won.  Tried only when
  ``keep`` names a ranked cell or some cell is equivalent to B;
* otherwise, no unresolved cell → ``kind="tie"``: the tie-break picks among the
  top group; the rest of it and the ruled-out cells are named with the pick
  (``tied``), those a TOST at the pair's look level shows within the margin
  as *equivalent*;
* unresolved cells → ``kind="unresolved"``: no answer; B is the provisional
  leader, the contenders are named, and ``extra_rounds`` estimates how many
  more rounds would settle them (below: separate them or rule them out); the
  statement says ``MORE_TIME``, which a report turns into minutes.
  ``provisional`` is what the tie-break picks among B, the cells tied with it
  and the unresolved ones,
  named in the statement as the choice *if one must be made now* (the race's
  futility stop ends a sweep in this state when ``max`` or the budget cannot
  separate them: ``budget_spent=True`` says "not told apart within the budget at
  this resolution" instead of "… yet …").

**Tie-break**: an ordered list of keys, each a function of the cell's axes;
the first key that differs decides, then the next.  Valid keys (``TIE_BREAKS``):

* ``safety`` — power-loss behaviour of the cache mode (``risk.risk_of(cache,
  modifier).level``): safe < like-a-disk-cache < unsafe; an unknown cache ranks
  after like-a-disk-cache and before unsafe.
* ``keeper`` — the *keeper* first (below: what the user runs, else QEMU's
  default, the first of ``keep`` that is ranked) when it is within θ of the
  best, every other cell after it.
  Why: a tie is the same situation as an equivalence the data could not yet
  show, and it keeps the same configuration; without it two equally safe cells
  tied within θ (raw under cache=none and under writeback) were picked by
  their means, i.e. by noise, and five quickstarts named either (issue 53).
* ``simplicity`` — the configuration with fewer non-default choices: per axis,
  the position of the value in the list below (0 = the default, unlisted
  values after the listed ones), summed; fewer and earlier choices win.
  format raw < qcow2; preallocation off < metadata < falloc < full;
  aio threads < io_uring < native (threads needs nothing from the host,
  io_uring a recent kernel, native needs O_DIRECT); bus virtio-blk <
  virtio-scsi; modifier none first.
* ``performance`` — the better centre first.
* ``name`` — alphabetical (always appended last so the order is total).

Default: ``("safety", "keeper", "simplicity")``, then ``performance`` and ``name``.

**Extra rounds** to separate the leader B from a contender c: with d = |ln
ratio| the observed effect and s the residual SD on the log scale (blocked
analysis: √MSE; Welch: the larger of the two cells' sample SDs of ln values),
the difference of two cells in one round has SD √2·s, and a two-sided test at
α with power 0.8 needs

    n = ⌈ ((z_{1−α/2} + z_{0.8}) · √2 · s / d)² ⌉   rounds per cell

(normal approximation: a lower bound for t with few df, and α is not split
over the family).  With the parametric blocked model a contender may settle
sooner by being ruled out (stats/ruling_out.py: n = ⌈((z_{1−α} + z_{0.8})·√2·s
/ |d − δ|)²⌉, δ the margin), so its need is the fewer of the two.  extra =
max over contenders of that need − rounds done, ≥ 1; None when d = 0 or s is
unknown (no number of rounds separates equal means).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.domain.axes import simplicity_order
from iomatrix.errors import UserError
from iomatrix.risk import risk_of
from iomatrix.stats.blocked import BlockedAnalysis, BlockedPair
from iomatrix.stats.equivalence import (
    DEFAULT_MARGIN,
    Tost,
    check_margin,
    rounds_to_show_equivalent,
    tost,
)
from iomatrix.stats.looks import rounds_needed
from iomatrix.stats.ranking import RankedRow, Ranking
from iomatrix.stats.ruling_out import rounds_to_rule_out, ruled_out_p
from iomatrix.stats.worse_than_best import worse_than_best_p

TIE_BREAKS = ("safety", "keeper", "simplicity", "performance", "name")
DEFAULT_TIE_BREAK = ("safety", "keeper", "simplicity")
DEFAULT_THRESHOLD = 0.05
# An unresolved statement's placeholder for the time still needed: `extra_rounds` holds the
# estimate, the report says it in minutes (report/settle_time.py).
MORE_TIME = "more time would settle them"

SAFETY_ORDER = {"safe": 0, "like-a-disk-cache": 1, None: 2, "unsafe": 3}


@dataclass(frozen=True)
class Decision:
    kind: str  # "single" | "equivalent" | "tie" | "unresolved" | "none"
    answer: str | None  # the chosen cell; None when unresolved or nothing ranked
    leader: str | None  # the best cell by centre (the provisional leader when unresolved)
    tied: tuple[str, ...]  # the rest of the top group, in tie-break order
    unresolved: tuple[str, ...]  # contenders the data cannot separate from the leader
    separated: tuple[str, ...]  # significantly and materially worse than the leader
    threshold: float
    tie_break: tuple[str, ...]
    extra_rounds: int | None  # estimated more rounds to separate the leader from the contenders
    statement: str  # one or two sentences for a report
    # unresolved: the tie-break's pick among the leader, tied and unresolved cells
    provisional: str | None = None
    # behind by more than θ; a one-sided test shows they cannot beat the leader by θ
    ruled_out: tuple[str, ...] = ()
    # shown within the margin of the leader (TOST at the pair's look level)
    equivalent: tuple[str, ...] = ()
    # What the user runs, else QEMU's/libvirt's default, else the simplest (the first of ``keep``
    # ranked): the configuration an equivalent decision keeps, and the reference the outcome is told
    # against.
    keeper: str | None = None
    margin: float = DEFAULT_MARGIN
    # kind "equivalent" with the leader not the keeper: the leader's ratio to the keeper, its (1 −
    # 2·level) interval (what the TOST decided on), oriented so that > 1 means the leader is better.
    bounds: tuple[float, float, float] | None = None
    # kind "unresolved": more rounds after which a TOST would show the leader and the keeper (else
    # the first contender) within the margin, their observed ratio taken as the true one
    # (stats/equivalence.py); None when it cannot be estimated (no SD, or the ratio outside the
    # margin).
    equivalence_rounds: int | None = None

    @property
    def outcome(self) -> str:
        """What the decision says about the keeper (what the user runs, or the default): "better"
        (another configuration is settled better: use it), "equivalent" (keep it: nothing measured
        is better by more than the margin), "worse" (every alternative is settled worse: keep it),
        "inconclusive" (no answer yet, with the rounds needed), "tie" (named together within θ, the
        tie-break's pick) or "none"."""
        if self.kind == "single":
            return "worse" if self.keeper is not None and self.answer == self.keeper else "better"
        return {"equivalent": "equivalent", "unresolved": "inconclusive"}.get(self.kind, self.kind)


def check_threshold(threshold: float) -> float:
    if not (isinstance(threshold, int | float) and 0.0 <= threshold < 1.0):
        raise UserError(
            f"practical threshold {threshold!r} is not a fraction in [0, 1)",
            hint="give it as a fraction of the best: 0.05 for 5% (0 = any difference matters)",
        )
    return float(threshold)


def check_tie_break(keys: Sequence[str]) -> tuple[str, ...]:
    bad = [k for k in keys if k not in TIE_BREAKS]
    if bad or len(set(keys)) != len(keys):
        what = (
            f"unknown tie-break key(s) {', '.join(map(repr, bad))}"
            if bad
            else "a tie-break key is repeated"
        )
        raise UserError(what, hint=f"valid keys, in any order: {', '.join(TIE_BREAKS)}")
    return tuple(keys)


def safety_key(axes: Mapping[str, str]) -> int:
    risk = risk_of(axes.get("cache", "-"), axes.get("modifier", "none"))
    return SAFETY_ORDER[risk.level if risk else None]


def simplicity_key(axes: Mapping[str, str]) -> tuple[int, int]:
    """(number of non-default choices, sum of positions); values outside an axis's order count after
    the listed ones. The orders are the axis registry's (iomatrix.domain.axes: Axis.simpler)."""
    nondefault = 0
    total = 0
    for axis, order in simplicity_order().items():
        v = axes.get(axis, "-")
        if v in ("-", ""):
            continue
        pos = order.index(v) if v in order else len(order)
        nondefault += pos > 0
        total += pos
    return nondefault, total


def gap_to_best(ratio: float, higher_is_better: bool) -> float:
    """How far behind the best a cell with ``ratio`` = centre(cell)/centre(best) is: 1 − ratio or
    ratio − 1."""
    return 1.0 - ratio if higher_is_better else ratio - 1.0


def _log_sd(values: Sequence[float]) -> float | None:
    if len(values) < 2 or min(values) <= 0:
        return None
    logs = [math.log(v) for v in values]
    m = sum(logs) / len(logs)
    return math.sqrt(sum((x - m) ** 2 for x in logs) / (len(logs) - 1))


def rounds_to_separate(
    effect_log: float,
    sd_log: float | None,
    rounds_done: int,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int | None:
    """More rounds needed (≥ 1) for a two-sided test at its look's level (α spent over the looks,
    stats/looks.py) with the given power; None if it cannot be estimated."""
    if sd_log is None or effect_log == 0 or not math.isfinite(effect_log):
        return None
    return rounds_needed(effect_log, sd_log, rounds_done, alpha, power, two_sided=True)


@dataclass(frozen=True)
class Verdicts:
    """The ranked cells other than the best, each put in one place by the decision rule."""

    top: tuple[str, ...]  # the best, then the cells within θ of it (in rank order)
    unresolved: tuple[str, ...]  # not significantly worse, yet beyond θ
    separated: tuple[str, ...]  # significantly worse and beyond θ
    # beyond θ, not significantly worse, shown not better by more than θ
    ruled_out: tuple[str, ...] = ()
    # of top and ruled_out: the ratio's CI lies inside the margin (TOST)
    equivalent: tuple[str, ...] = ()


def equivalence_margin(threshold: float, higher_is_better: bool) -> tuple[float, float]:
    """(low, high) bounds on the ratio centre(u)/centre(best) within which the two are tied either
    way."""
    if higher_is_better:
        return 1.0 - threshold, 1.0 / (1.0 - threshold)
    return 1.0 / (1.0 + threshold), 1.0 + threshold


def pair_tost(
    analysis: BlockedAnalysis | None, a: str, b: str, margin: float, higher_is_better: bool
) -> Tost | None:
    """TOST of a against b (stats/equivalence.py) on their paired comparison, at the level of the
    pair's look; None without the parametric blocked analysis (no SE on the log scale: nothing is
    shown equivalent)."""
    if (
        analysis is None
        or not analysis.blocked
        or a not in analysis.centre
        or b not in analysis.centre
    ):
        return None
    pr = analysis.pair(a, b)
    return tost(pr.ratio, pr.se_log, pr.df, pr.level, margin, higher_is_better)


def shown_equivalent(
    analysis: BlockedAnalysis | None, a: str, b: str, margin: float, higher_is_better: bool
) -> bool:
    t = pair_tost(analysis, a, b, margin, higher_is_better)
    return t is not None and t.equivalent


def _significant_vs_best(
    r: RankedRow, best: str, alpha: float, analysis: BlockedAnalysis | None
) -> bool:
    """Separated from the best: the pair's Holm-adjusted p below its look's level (stats/looks.py)
    when the analysis compared it, else below α."""
    if analysis is not None and r.name in analysis.centre and best in analysis.centre:
        return analysis.pair(r.name, best).significant
    return r.p_vs_best is not None and r.p_vs_best < alpha


def race_ruled_out(
    behind: Sequence[str], eliminated: Mapping[str, str], ranked: Collection[str]
) -> set[str]:
    """The cells ``behind`` the best that the race eliminated against a cell still ``ranked``.

    Why only then: an elimination is a test of the cell against the best of one look, B₀. While B₀
    is ranked, the final best B is at least as good as B₀ by its mean, and a cell shown worse than
    B₀ (or unable to beat it by θ) cannot be the best by more than θ. When requirements drop B₀
    (``--require safe`` without cache=unsafe), the cell was never compared with those left.

    Example: a race eliminated ``qcow2`` against ``raw`` at its third look. Ranked {raw, raw·wb,
    qcow2}: qcow2 is ruled out. Ranked {raw·wb, qcow2} (raw dropped): qcow2 is judged here alone.
    """
    return {n for n in behind if eliminated.get(n, n) != n and eliminated[n] in ranked}


def _gap(r: RankedRow, higher_is_better: bool) -> float:
    """The row's gap to the best (gap_to_best); infinite without a ratio (or a NaN one)."""
    ratio = r.ratio_to_best.ratio if r.ratio_to_best else None
    if ratio is None or ratio != ratio:
        return math.inf
    return gap_to_best(ratio, higher_is_better)


def _worse_at_half_level(
    name: str, best: str, worse: Mapping[str, float], analysis: BlockedAnalysis | None
) -> bool:
    """Whether the one-sided test against the best (worse_than_best_p's Holm-adjusted p) separates
    `name` at half its pair's look level, as the race's elimination does (classify)."""
    return (
        analysis is not None and name in worse and worse[name] < analysis.pair(name, best).level / 2
    )


def _ruled_out_here(
    analysis: BlockedAnalysis | None,
    best: str,
    behind: Sequence[str],
    higher_is_better: bool,
    threshold: float,
) -> set[str]:
    """The cells behind the best whose non-superiority test (ruled_out_p, Holm over `behind`)
    rejects "better by more than θ" at their pair's look level (classify)."""
    ruled_p = ruled_out_p(analysis, best, behind, higher_is_better, threshold)
    return {
        n for n, p in ruled_p.items() if analysis is not None and p < analysis.pair(n, best).level
    }


def classify(
    ranked: Sequence[RankedRow],
    higher_is_better: bool,
    alpha: float,
    threshold: float,
    analysis: BlockedAnalysis | None = None,
    margin: float = DEFAULT_MARGIN,
    eliminated: Mapping[str, str] | None = None,
) -> Verdicts:
    """Each of ``ranked[1:]`` against the best ``ranked[0]``: gap ≤ θ → top group (significant or
    not); else significantly worse at its look's level → separated; else, with a blocked
    ``analysis``, the non-superiority test (stats/ruling_out.py, Holm over these cells) rejects
    "better by more than θ" at the pair's level → ruled out; else unresolved.  A cell without a
    ratio to the best has an infinite gap. Of the top group and the ruled-out cells, those a TOST at
    the pair's look level shows within ``margin`` of the best (stats/equivalence.py) are also
    *equivalent*. ``eliminated``: cell → the cell the race eliminated it against (decide)."""
    best = ranked[0].name
    top, behind, separated = [best], [], []
    # one-sided against the best, Holm over the k − 1 (stats/worse_than_best.py), at half the look's
    # level: the race's test, so a cell it eliminated as worse is separated here too
    worse = worse_than_best_p(analysis, best, [r.name for r in ranked], higher_is_better)
    for r in ranked[1:]:
        if _gap(r, higher_is_better) <= threshold:
            top.append(r.name)
        elif _significant_vs_best(r, best, alpha, analysis) or _worse_at_half_level(
            r.name, best, worse, analysis
        ):
            separated.append(r.name)
        else:
            behind.append(r.name)
    ruled = _ruled_out_here(analysis, best, behind, higher_is_better, threshold) | race_ruled_out(
        behind, eliminated or {}, {r.name for r in ranked}
    )
    equivalent = tuple(
        n
        for n in (*top[1:], *(n for n in behind if n in ruled))
        if shown_equivalent(analysis, n, best, margin, higher_is_better)
    )
    return Verdicts(
        tuple(top),
        tuple(n for n in behind if n not in ruled),
        tuple(separated),
        tuple(n for n in behind if n in ruled),
        equivalent,
    )


def pair_sd(pr: BlockedPair) -> float | None:
    """s, the per-run SD on the log scale that the pair's own differences imply: SE·√n/√2 (the
    difference of two runs has SD √2·s), for the rounds-needed estimates; None without an SE."""
    if pr.se_log is None or pr.paired_rounds < 2:
        return None
    return pr.se_log * math.sqrt(pr.paired_rounds) / math.sqrt(2.0)


def full_tie_break(keys: Sequence[str]) -> tuple[str, ...]:
    """The keys, then ``performance`` and ``name`` unless given, so that the order is total."""
    return tuple(keys) + tuple(k for k in ("performance", "name") if k not in keys)


def tie_break_key(
    name: str,
    keys: Sequence[str],
    axes: Mapping[str, str],
    centre: float,
    higher_is_better: bool,
    keeper: str | None = None,
) -> tuple[object, ...]:
    """Sort key of one cell under the tie-break ``keys`` (smaller first): safety, keeper (0 for
    ``keeper``, the configuration kept: what the user runs, else QEMU's default; 1 for the rest, and
    for every cell when there is none), simplicity, performance (−centre when higher is better,
    +centre otherwise) and name, in the order given."""
    sign = -1.0 if higher_is_better else 1.0
    parts = {
        "safety": lambda: safety_key(axes),
        "keeper": lambda: 0 if keeper is not None and name == keeper else 1,
        "simplicity": lambda: simplicity_key(axes),
        "performance": lambda: sign * centre,
        "name": lambda: name,
    }
    return tuple(parts[k]() for k in keys)


def separation_sd(
    leader: str,
    contender: str,
    analysis: BlockedAnalysis | None,
    samples: Mapping[str, Sequence[float]] | None,
) -> float | None:
    """s, the SD on the log scale for the extra-rounds estimate: the blocked analysis's √MSE, else
    the larger of the two cells' sample SDs of ln values (from ``samples``), else None."""
    if analysis is not None and analysis.blocked:
        return pair_sd(analysis.pair(contender, leader))
    if samples is None:
        return None
    sds = [s for s in (_log_sd(samples[leader]), _log_sd(samples[contender])) if s is not None]
    return max(sds) if sds else None


def extra_rounds(
    leader: str,
    contenders: Sequence[str],
    centre: Mapping[str, float],
    rounds_done: int,
    alpha: float,
    analysis: BlockedAnalysis | None,
    samples: Mapping[str, Sequence[float]] | None,
    threshold: float = DEFAULT_THRESHOLD,
    higher_is_better: bool = True,
) -> int | None:
    """More rounds to settle every contender: per contender the fewer of ``rounds_to_separate`` and,
    with the parametric blocked model, ``rounds_to_rule_out`` (stats/ruling_out.py), with d =
    ln(centre(c)/centre(leader)) (0 unless both centres are positive); the largest over the
    contenders; None when none can be estimated."""
    extra: int | None = None
    parametric = analysis is not None and analysis.blocked
    for name in contenders:
        ratio = centre[name] / centre[leader] if centre[name] > 0 and centre[leader] > 0 else None
        need = rounds_to_settle(
            ratio=ratio,
            sd_log=separation_sd(leader, name, analysis, samples),
            rounds_done=rounds_done,
            alpha=alpha,
            threshold=threshold,
            higher_is_better=higher_is_better,
            can_rule_out=parametric,
        )
        if need is not None:
            extra = need if extra is None else max(extra, need)
    return extra


def rounds_to_settle(
    ratio: float | None,
    sd_log: float | None,
    rounds_done: int,
    alpha: float,
    threshold: float,
    higher_is_better: bool,
    can_rule_out: bool,
    power: float = 0.8,
) -> int | None:
    """More rounds to settle a contender whose ratio to the leader is ``ratio``, either way that
    settles it: the fewer of ``rounds_to_separate`` and, where the model can rule out
    (``can_rule_out``: the parametric blocked model), ``rounds_to_rule_out`` (stats/ruling_out.py);
    None when neither can be estimated (no positive ratio)."""
    if ratio is None or not ratio > 0:
        return None
    ways = [rounds_to_separate(math.log(ratio), sd_log, rounds_done, alpha, power)]
    if can_rule_out:
        ways.append(
            rounds_to_rule_out(
                effect_log=math.log(ratio),
                sd_log=sd_log,
                rounds_done=rounds_done,
                threshold=threshold,
                higher_is_better=higher_is_better,
                alpha=alpha,
                power=power,
            )
        )
    known = [n for n in ways if n is not None]
    return min(known) if known else None


def rounds_to_equivalence(ranking: Ranking, a: str, b: str, margin: float) -> int | None:
    """More rounds for a TOST to show `a` and `b` within ``margin`` (stats/equivalence.py:
    rounds_to_show_equivalent) from their paired comparison; None without the parametric blocked
    analysis."""
    an = ranking.analysis
    if an is None or not an.blocked or a not in an.centre or b not in an.centre or a == b:
        return None
    pr = an.pair(b, a)
    if pr.ratio is None or not pr.ratio > 0:
        return None
    return rounds_to_show_equivalent(
        math.log(pr.ratio),
        pair_sd(pr),
        pr.paired_rounds,
        margin,
        ranking.higher_is_better,
        ranking.alpha,
    )


def unresolved_statement(
    leader: str,
    unresolved: Sequence[str],
    pct: str,
    extra: int | None,
    alpha: float,
    keys: Sequence[str],
    pick: str,
    budget_spent: bool,
    centre: str = "geo. mean",
) -> str:
    """The unresolved decision in the answer's one vocabulary (issues 70 and 71): the best is the
    best by ``centre``, the figure the ranking orders by ("geo. mean" for a ranking blocked by
    round, else "mean"), and a contender is "not told apart at this resolution": neither decided
    worse nor equivalent (within ``pct`` of the best)."""
    # Never a count of rounds (issue 71: a user cannot act on "1272 more rounds"): the report
    # replaces MORE_TIME with the minutes and the budget that would buy them, from the sweep's own
    # pace (report/settle_time.py), which this pure function does not know.
    more = (
        f"{MORE_TIME} (separate them or rule them out; power 0.8, α={alpha:g})"
        if extra is not None
        else "no amount of time can be estimated to settle them"
    )
    return (
        f"not told apart {'within the budget' if budget_spent else 'yet'} at this resolution: "
        f"{leader} has the best {centre}, but {', '.join(unresolved)} "
        f"{'is' if len(unresolved) == 1 else 'are'} neither decided worse nor equivalent (within "
        f"{pct}); {more}; if one must be chosen now, the tie-break "
        f"({', '.join(keys) or 'performance'}) picks {pick}"
    )


def _centre_of(ranking: Ranking) -> str:
    """The figure `ranking` orders by, as its table heads it (report/recommend/grammar.py)."""
    return "geo. mean" if ranking.analysis is not None and ranking.analysis.blocked else "mean"


def decide(
    ranking: Ranking,
    axes: Mapping[str, Mapping[str, str]],
    samples: Mapping[str, Sequence[float]] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    budget_spent: bool = False,
    margin: float = DEFAULT_MARGIN,
    keep: Sequence[tuple[str, str]] = (),
    eliminated: Mapping[str, str] | None = None,
) -> Decision:
    """Apply the decision rule to a ranking (see the module docstring).

    ``axes[name]`` are the cell's axis values (cache, modifier, format, …), used by the
    tie-break.  ``samples`` (the ranked values) only feed the extra-rounds estimate
    when the ranking was not blocked.  ``budget_spent``: the sweep stopped repeating the
    leaders because max or the budget could not separate them (racing's futility stop).
    ``margin``: the margin of practical equivalence (5 % by default; a role passes its own).
    ``keep``: (cell, what it is) in order of preference to keep when it is equivalent to the
    best, e.g. (the user's current cell, "what you run"), (QEMU's default, "QEMU's default");
    the first one ranked is the *keeper* (none ranked: the simplest of the best and the cells
    equivalent to it).  ``eliminated``: cell → the best of the race's look it was eliminated
    against (stats/racing.py: significantly worse than it, or shown unable to beat it by θ, at
    that look's level). Beyond θ and not significant here, such a cell counts as ruled out, not
    unresolved, while its reference is ranked: the race ran it no more, so a test at the end,
    against another best and in a larger Holm family, could only take back what the race decided
    and ask for rounds that will not come (seen in a quickstart: the log's qcow2 cells eliminated
    at 38-43% behind after 3 rounds, then "about 1 more round would settle them" left the
    database without an answer).
    Raises UserError for a bad threshold, margin or key.
    """
    threshold = check_threshold(threshold)
    margin = checked_margin(margin)
    keys = check_tie_break(tie_break)
    ranked = [r for r in ranking.rows if r.rank is not None]
    if not ranked:
        return Decision(
            kind="none",
            answer=None,
            leader=None,
            tied=(),
            unresolved=(),
            separated=(),
            threshold=threshold,
            tie_break=keys,
            extra_rounds=None,
            statement="no cell has enough runs to be ranked",
        )
    best = ranked[0].name
    v = classify(
        ranked=ranked,
        higher_is_better=ranking.higher_is_better,
        alpha=ranking.alpha,
        threshold=threshold,
        analysis=ranking.analysis,
        margin=margin,
        eliminated=eliminated,
    )
    centre = {r.name: r.centre if r.centre is not None else r.summary.mean for r in ranked}
    full_keys = full_tie_break(keys)

    pct = f"{threshold * 100:g}%"
    names = [r.name for r in ranked]
    keeper, what = keeper_of(keep, names, (best, *v.equivalent), axes)
    kept = keeper if any(k == keeper for k, _ in keep) else None
    order = _tie_order(full_keys, axes, centre, ranking.higher_is_better, kept, v.top)

    ended = _ends(ranking, v, names, keeper, kept, margin)
    if ended is not None:
        return _kept(
            v=v,
            best=best,
            keeper=keeper,
            what=what,
            ended=ended,
            threshold=threshold,
            keys=keys,
            margin=margin,
        )
    if v.unresolved:
        rounds_done = min(r.summary.n for r in ranked if r.name in (best, *v.unresolved))
        extra = extra_rounds(
            leader=best,
            contenders=v.unresolved,
            centre=centre,
            rounds_done=rounds_done,
            alpha=ranking.alpha,
            analysis=ranking.analysis,
            samples=samples,
            threshold=threshold,
            higher_is_better=ranking.higher_is_better,
        )
        pick = sorted(v.top + v.unresolved, key=order)[0]
        statement = unresolved_statement(
            leader=best,
            unresolved=v.unresolved,
            pct=pct,
            extra=extra,
            alpha=ranking.alpha,
            keys=keys,
            pick=pick,
            budget_spent=budget_spent,
            # the figure the ranking orders by, as its table heads it (report/recommend/grammar.py)
            centre=_centre_of(ranking),
        )
        other = keeper if keeper != best else v.unresolved[0]
        return Decision(
            kind="unresolved",
            answer=None,
            leader=best,
            tied=v.top[1:],
            unresolved=v.unresolved,
            separated=v.separated,
            threshold=threshold,
            tie_break=keys,
            extra_rounds=extra,
            statement=statement,
            provisional=pick,
            ruled_out=v.ruled_out,
            keeper=kept,
            margin=margin,
            equivalence_rounds=rounds_to_equivalence(ranking, best, other, margin),
        )
    rest = _behind_statement(v, pct, best)
    if len(v.top) == 1 and not v.ruled_out:
        statement = f"{best} is the answer: {rest}" if rest else f"{best} is the only ranked cell"
        return Decision(
            kind="single",
            answer=best,
            leader=best,
            tied=(),
            unresolved=(),
            separated=v.separated,
            threshold=threshold,
            tie_break=keys,
            extra_rounds=None,
            statement=statement,
            equivalent=v.equivalent,
            keeper=kept,
            margin=margin,
        )
    # Not significantly better than every other cell: no "answer" over them. The cells within θ are
    # named together and the tie-break picks among them; the ruled-out ones are named too, with why
    # the pick stands.
    chosen = sorted(v.top, key=order)
    parts = []
    if len(chosen) > 1:
        parts.append(
            f"{chosen[0]} is the tie-break's pick ({', '.join(full_keys[:-1])}) among "
            f"{len(chosen)} "
            f"cells within {pct} of the best, not told apart: {', '.join(chosen[1:])}"
        )
    else:
        parts.append(f"{best} leads")
    if v.equivalent:
        parts.append(
            f"equivalent within ±{margin * 100:g}% (TOST at each pair's look level): "
            f"{', '.join(v.equivalent)}"
        )
    if rest:
        parts.append(rest)
    return Decision(
        kind="tie",
        answer=chosen[0],
        leader=best,
        tied=(*chosen[1:], *v.ruled_out),
        unresolved=(),
        separated=v.separated,
        threshold=threshold,
        tie_break=keys,
        extra_rounds=None,
        statement="; ".join(parts),
        ruled_out=v.ruled_out,
        equivalent=v.equivalent,
        keeper=kept,
        margin=margin,
    )


def _tie_order(
    keys: Sequence[str],
    axes: Mapping[str, Mapping[str, str]],
    centre: Mapping[str, float],
    higher_is_better: bool,
    kept: str | None,
    top: Sequence[str],
) -> Callable[[str], tuple[object, ...]]:
    """The sort key of the tie-break over ``keys`` (tie_break_key). The keeper ``kept`` counts only
    within θ of the best (``top``): a keeper the data put further behind is not picked "if one must
    be chosen now" over a leader it may trail by more than θ (seen: raw · writeback at 0.77× of
    raw · none on commits would have been named the leading cell)."""
    near = kept if kept in top else None

    def order(name: str) -> tuple[object, ...]:
        return tie_break_key(name, keys, axes.get(name, {}), centre[name], higher_is_better, near)

    return order


def _behind_statement(v: Verdicts, pct: str, best: str) -> str:
    """Why the cells outside the top group do not change the pick: "every other cell is
    significantly worse by more than 5%" when all are separated; cells ruled out are named with what
    rules them out, and that it does not make the leader better than them."""
    if not v.ruled_out:
        return f"every other cell is significantly worse by more than {pct}" if v.separated else ""
    out = (
        f"{', '.join(v.ruled_out)} {'is' if len(v.ruled_out) == 1 else 'are'} not shown "
        f"worse than {best}, but "
        f"cannot be more than {pct} better (one-sided test against that margin): "
        f"choosing {best} loses at "
        f"most {pct} against {'it' if len(v.ruled_out) == 1 else 'them'}"
    )
    if v.separated:
        n = len(v.separated)
        out = (
            f"{n} other cell{' is' if n == 1 else 's are'} significantly worse by more than {pct}; "
            + out
        )
    return out


def keeper_of(
    keep: Sequence[tuple[str, str]],
    ranked: Sequence[str],
    equivalent: Sequence[str],
    axes: Mapping[str, Mapping[str, str]],
) -> tuple[str, str]:
    """(the keeper, what it is): the first of ``keep`` that is ranked, else the simplest of
    ``equivalent`` (the best and the cells shown equivalent to it; simplicity_key, then the
    name)."""
    for cell, what in keep:
        if cell in ranked:
            return cell, what
    simplest = min(equivalent, key=lambda n: (simplicity_key(axes.get(n, {})), n))
    return simplest, "the simplest configuration"


def none_beats(
    an: BlockedAnalysis,
    ranked: Sequence[str],
    keeper: str,
    best: str,
    margin: float,
    higher_is_better: bool,
) -> bool:
    """Every ranked cell but the keeper and the best is significantly worse than the keeper or shown
    unable to beat it by ``margin`` (stats/ruling_out.py against the keeper, Holm over those, each
    at its pair's look level); a ranked cell outside the analysis cannot be judged (False)."""
    if any(n not in an.centre for n in ranked):
        return False
    rest = [n for n in ranked if n not in (keeper, best)]
    untested = [
        n
        for n in rest
        if not (
            an.pair(n, keeper).significant
            and gap_to_best(an.pair(n, keeper).ratio, higher_is_better) > 0
        )
    ]
    ruled = ruled_out_p(an, keeper, untested, higher_is_better, margin)
    return all(n in ruled and ruled[n] < an.pair(n, keeper).level for n in untested)


def equivalence_ending(
    ranking: Ranking, ranked: Sequence[str], keeper: str, margin: float
) -> tuple[str, tuple[float, float, float]] | None:
    """Whether keeping ``keeper`` ends the decision: the best is shown equivalent to it (TOST at the
    pair's look level), and every other cell is either significantly worse than it or shown not
    better than it by more than ``margin`` (the one-sided test of stats/ruling_out.py, Holm over
    those cells, each at its pair's look level). Then nothing measured is faster than the keeper by
    more than the margin. Returns (the strongest alternative, its ratio to the keeper and the (1 −
    2·level) interval, > 1 = the alternative is better), or None. Only the parametric blocked
    analysis shows equivalence."""
    an, higher = ranking.analysis, ranking.higher_is_better
    if an is None or not an.blocked or keeper not in an.centre or len(ranked) < 2:
        return None
    best = ranked[0]
    if best != keeper and not shown_equivalent(an, best, keeper, margin, higher):
        return None
    if not none_beats(an, ranked, keeper, best, margin, higher):
        return None
    alt = best if best != keeper else ranked[1]
    t = pair_tost(an, alt, keeper, margin, higher)
    if t is None or t.low is None or t.high is None:
        return None
    pr = an.pair(alt, keeper)
    ratio, lo, hi = (pr.ratio, t.low, t.high) if higher else (1 / pr.ratio, 1 / t.high, 1 / t.low)
    return alt, (ratio, lo, hi)


def checked_margin(margin: float) -> float:
    try:
        return check_margin(margin)
    except ValueError as e:
        raise UserError(str(e), hint="give it as a fraction: 0.05 for 5%") from None


def _ends(
    ranking: Ranking,
    v: Verdicts,
    names: Sequence[str],
    keeper: str,
    kept: str | None,
    margin: float,
) -> tuple[str, tuple[float, float, float]] | None:
    """Not "the answer" over every other cell, and something to keep (what the user runs or the
    default, else the simplest of the cells shown equivalent to the best): does keeping it end the
    decision (equivalence_ending)?"""
    if len(v.separated) >= len(names) - 1 or (kept is None and not v.equivalent):
        return None
    return equivalence_ending(ranking, names, keeper, margin)


def _kept(
    v: Verdicts,
    best: str,
    keeper: str,
    what: str,
    ended: tuple[str, tuple[float, float, float]],
    threshold: float,
    keys: tuple[str, ...],
    margin: float,
) -> Decision:
    """The decision that ends as equivalent: the keeper kept, the others named with it, never as
    winners."""
    alt, t = ended
    tied = tuple(n for n in (best, *v.top[1:], *v.ruled_out, *v.unresolved) if n != keeper)
    # the best: shown equivalent to the keeper
    named = [n for n in (best, *v.equivalent) if n != keeper]
    statement = (
        f"keep {what} ({keeper}): nothing measured is faster by more than {margin * 100:g}% "
        f"({alt} {t[1]:.2f}–{t[2]:.2f}×)"
        + (
            f"; shown equivalent within ±{margin * 100:g}% (TOST at each pair's look level): "
            f"{', '.join(dict.fromkeys(named))}"
            if named
            else ""
        )
    )
    return Decision(
        kind="equivalent",
        answer=keeper,
        leader=best,
        tied=tied,
        unresolved=(),
        separated=v.separated,
        threshold=threshold,
        tie_break=keys,
        extra_rounds=None,
        statement=statement,
        ruled_out=v.ruled_out,
        equivalent=v.equivalent,
        keeper=keeper,
        margin=margin,
        bounds=t,
    )
