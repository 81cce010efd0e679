"""One answer per role (docs/roles.md): "For a database VM: use …", built on each job's own
decision.

A role's first figure decides: the answer (or the tie-break's pick, or the leading cell) of the job
it belongs to, decided by stats/decision.py through the workload's verdict, is the candidate. A
candidate shown worse than the best cell by more than the role's margin on another deciding figure
(its mean, and the 95% interval of the ratio over the rounds both ran, or over their runs where the
rounds are not known) is not chosen, and the answer says so;
the next cell of the deciding job's ranking is tried. `combine` is that rule, pure; `role_answers`
gathers its inputs from a sweep's verdicts and cells, and every output (recommend, the end of run,
the report, JSON) shows what it returns, first."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iomatrix.domain import is_ceiling
from iomatrix.metrics import metric_info
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend.grammar import interval_text as interval_text
from iomatrix.report.recommend.grammar import ratio_against
from iomatrix.report.recommend.resolution import RESOLUTION, pick_reason, settle_text
from iomatrix.report.recommend.verdict import Gain, Verdict, answer_of
from iomatrix.roles import Figure, Role, plan_roles
from iomatrix.stats.compare import RatioCI, ratio_ci
from iomatrix.stats.paired import PairedComparison, paired_comparison
from iomatrix.stats.tradeoff import shortfall, weighed_leader
from iomatrix.stats.weighed import Part, WeighedRatio, weighed_ratio
from iomatrix.stats.weighed_paired import PairedPart, paired_part, paired_weighed_ratio

STATUS_WORDS = {
    "answer": "decided",
    "tied": "tied within the decision's threshold: the tie-break's pick",
    "equivalent": "equivalent within the role's margin on the deciding figure",
    "provisional": "not settled yet: the leading cell, not yet an answer",
}
# The same, in a few words (RoleAnswer.brief, a crowded first screen's).
BRIEF_WORDS = {
    "answer": "decided",
    "tied": "tied: the tie-break's pick",
    "equivalent": "equivalent within the role's margin",
    "provisional": "not settled yet",
}
# An unsettled role whose pick for now is not the cell ahead on the deciding figure: never called
# "leading" (RoleAnswer._ahead).
NOT_LEADING = "not settled yet, for now:"
NOT_LEADING_WHY = "the tie-break's pick among the cells not yet separated, not yet an answer"
# The statuses that answer a role (bench/quickstart.py counts them): settled, tied or equivalent;
# "provisional" (only leading) and "none" do not.
ANSWERED = ("answer", "tied", "equivalent")


@dataclass(frozen=True)
class FigureMeans:
    """One deciding figure and each candidate cell's mean on it (cells without a figure are left
    out); `samples`: their runs' values, when known (then a veto needs the interval of the ratio,
    not only the means: _veto); `by_round`: the same runs by their round, when the rounds are known
    (then two cells are compared over the rounds both ran, as the race does: `paired`)."""

    figure: Figure
    means: Mapping[str, float]
    samples: Mapping[str, Sequence[float]] = field(default_factory=dict)
    by_round: Mapping[str, Mapping[int, float]] = field(default_factory=dict)

    def paired(self, a: str, b: str, confidence: float) -> PairedComparison | None:
        """a against b over the rounds both ran (stats/paired.py), when both have runs in at least
        2 of the same rounds and every value is above 0 (a log scale); else None (the unpaired
        comparison of their runs serves)."""
        ra, rb = self.by_round.get(a), self.by_round.get(b)
        if not ra or not rb or min(ra.values()) <= 0 or min(rb.values()) <= 0:
            return None
        pc = paired_comparison(ra, rb, confidence)
        return pc if pc.rounds >= 2 and pc.ratio_low is not None else None

    def best(self) -> tuple[str, float] | None:
        if not self.means:
            return None
        pick = max if self.figure.higher_is_better else min
        cell = pick(self.means, key=lambda c: self.means[c])
        return cell, self.means[cell]


@dataclass(frozen=True)
class Veto:
    """A cell not chosen: `worse` (a fraction) than `best` on `figure`, beyond the role's margin."""

    cell: str
    figure: Figure
    worse: float
    best: str

    # the cell/best ratio's 95% interval, when runs gave one
    interval: tuple[float, float] | None = None

    def text(self, margin: float) -> str:
        basis = "by its mean" if self.interval is None else f"{self._interval_words()}, 95% CI"
        return (
            f"{self.cell} not chosen: {self.worse:.0%} worse than {self.best} on "
            f"{self.figure.says} "
            f"({self.figure.key}, {basis}; margin {margin:.0%})"
        )

    def _interval_words(self) -> str:
        """The cell/best interval in the one grammar (recommend/grammar.py): "0.70–0.90× the best"
        for a throughput; a latency's said as "N× higher latency than the best" (turned where the
        cell is the lower)."""
        assert self.interval is not None
        low, high = self.interval
        if self.figure.higher_is_better:
            return f"{low:.2f}–{high:.2f}× the best"
        if low >= 1:
            return f"{low:.2f}–{high:.2f}× higher latency than the best"
        if high <= 1:
            return f"{1 / high:.2f}–{1 / low:.2f}× lower latency than the best"
        return f"{low:.2f}–{high:.2f}× the best's latency"


@dataclass(frozen=True)
class Combined:
    cell: str | None  # None: every candidate was vetoed
    vetoes: tuple[Veto, ...]


def combine(candidates: Sequence[str], others: Sequence[FigureMeans], margin: float) -> Combined:
    """THE role rule: the first of `candidates` (the deciding figure's answer first, then its
    ranking) that is not worse than `margin` on any of the `others` deciding figures; each candidate
    passed over is a Veto.

    Example, margin 5 %: candidates [A, B]; on the log's commits per second A has 800/s and B
    1000/s: A is 20 % worse, vetoed; B is the best there, chosen."""
    vetoes: list[Veto] = []
    for cell in candidates:
        veto = next((v for f in others if (v := _veto(cell, f, margin)) is not None), None)
        if veto is None:
            return Combined(cell, tuple(vetoes))
        vetoes.append(veto)
    return Combined(None, tuple(vetoes))


def _veto(cell: str, f: FigureMeans, margin: float) -> Veto | None:
    """`cell` worse than the best on `f` by more than `margin`: by the means, and, where both cells'
    runs are known, by the whole 95% interval of their ratio: paired over the rounds both ran where
    their rounds are known (stats/paired.py, the race's comparison), else Fieller's over their runs
    (stats/compare.py). A mean worse by noise alone (seen: 14% on the log's commits over 3 runs
    whose own decision was 0.98–1.91×) does not pass the deciding figure's pick over. Example,
    margin 5 %, higher is better: 800 vs 1000 commits/s, interval 0.70–0.90×: vetoed; interval
    0.60–1.05×: not (it may be within 5 %)."""
    best = f.best()
    if best is None or cell not in f.means or cell == best[0]:
        return None
    worse = shortfall(f.means[cell], best[1], f.figure.higher_is_better)
    if worse <= margin:
        return None
    a, b = f.samples.get(cell, ()), f.samples.get(best[0], ())
    if len(a) < 2 or len(b) < 2:
        # no runs to judge the noise by (means given alone)
        return Veto(cell, f.figure, worse, best[0])
    pc = f.paired(cell, best[0], 0.95)
    if pc is not None:
        low, high = pc.ratio_low, pc.ratio_high
    else:
        ci = ratio_ci(a, b)
        low, high = ci.low, ci.high
    if low is None or high is None:
        return None  # no interval: not shown worse
    shown = high < 1 - margin if f.figure.higher_is_better else low > 1 + margin
    return Veto(cell, f.figure, worse, best[0], (low, high)) if shown else None


@dataclass
class RoleAnswer:
    """What every output says first for one role."""

    role: str
    answer_for: str  # "a database VM"
    margin: float
    jobs: list[str]
    status: str  # "answer", "equivalent", "tied", "provisional" (as answer_of), "none"
    cell: str | None = None
    tier: str = ""
    # per deciding figure: the chosen cell vs the best
    figures: list[dict[str, Any]] = field(default_factory=list)
    vetoes: list[str] = field(default_factory=list)
    missing: str = ""
    # the deciding figure's pick, when another deciding figure passed it over
    instead_of: str | None = None
    # Status "equivalent": why the pick is kept, with the measured bounds ("nothing measured is
    # faster by more than 5% (format=qcow2 … 0.97–1.04×)": the deciding job's decision,
    # report/recommend/verdict.py: choose).
    kept: str = ""
    # Every candidate passed over (a trade-off): what each side of it wins, in a few words, from the
    # first veto: "raw · none leads on log:write.iops; qcow2 · writeback 1.15–2.42× better on
    # data:read.clat_p99_us" (tradeoff_brief). The user's choice is which figure their VM waits on.
    tradeoff: str = ""
    # A trade-off weighed by the role's figure weights (stats/weighed.py): which side it favours,
    # with the interval ("raw · writeback 1.08–1.35× raw · none with its figures weighed
    # (log:write.iops ×2, …; 90% CI)"); set whenever both sides have runs of every figure.
    weighed: str = ""
    weighed_ratio: dict[str, Any] | None = None
    # Status "tied" or "provisional": not told apart at this resolution (resolution.py). The
    # interval reached against the closest cell, the property the pick rests on, and how many
    # minutes more would settle it: "not told apart from qcow2 · writeback at this resolution:
    # within 0.96–1.16× here; picked for raw: the simpler format, …; about 5 minutes more would
    # settle it (time_budget = "9m" in the plan, now "4m")". Never a round count.
    unresolved: str = ""
    unresolved_brief: str = ""  # the same in a few words, for a crowded first screen

    @property
    def resolution(self) -> str:
        """One of three: "decided", "equivalent" or "not told apart at this resolution" (and
        "none" without a pick)."""
        return RESOLUTION.get(self.status, "none") if self.cell is not None else "none"

    @property
    def answered(self) -> bool:
        return self.cell is not None and self.status in ANSWERED

    def headline(self) -> str:
        if self.cell is None:
            return f"For {self.answer_for}: no answer yet: {self.missing}"
        verb = "use" if self.status in ("answer", "tied") else "leading, not settled yet:"
        why = STATUS_WORDS.get(self.status, self.status)
        if self.status == "equivalent":  # kept, never named as if it won (docs/roles.md)
            verb, why = "keep", f"equivalent: {self.kept or why}"
        if (ahead := self._ahead()) is not None:
            verb, why = NOT_LEADING, f"{NOT_LEADING_WHY}; {ahead}"
        if self.unresolved:  # one configuration to use, and how far the sweep could tell
            verb, why = "use", self.unresolved + (f"; {ahead}" if ahead else "")
        if self.weighed and not self.unresolved:  # a trade-off the weights settled: the reason
            why = f"a trade-off, weighed: {self.weighed}"
        elif self.instead_of is not None:
            verb = "use" if self.status in ANSWERED else verb
            why = f"in place of {self.instead_of}, the deciding figure's pick ({why}): see below"
        return f"For {self.answer_for}: {verb} {self.cell} ({why})"

    def brief(self) -> str:
        """The headline in one line, for a crowded first screen (report/screen.py): the decision and
        its status in a few words; why not chosen and the budget that would settle it: --detail.
        "For a file server: use raw · writeback (not told apart from qcow2 · writeback, within
        0.86–1.04× here; raw: the simpler format, …; about 2 minutes more would settle it)"."""
        if self.cell is None and self.vetoes:  # every candidate passed over: said in a few words
            if self.tradeoff:
                return f"For {self.answer_for}: a trade-off, no one answer: {self.tradeoff}"
            return (
                f"For {self.answer_for}: no answer yet: no cell is within {self.margin:.0%} of "
                "the best on every deciding figure (a trade-off)"
            )
        if self.cell is None:
            return self.headline()
        verb = "use" if self.status in ANSWERED else "leading, not settled yet:"
        why = BRIEF_WORDS.get(self.status, self.status)
        if self.status == "equivalent":
            verb = "keep"
        if (ahead := self._ahead()) is not None:
            verb, why = NOT_LEADING, f"{ahead}; {why}"
        if self.unresolved_brief:
            verb, why = "use", self.unresolved_brief
        if self.weighed and self.weighed_ratio is not None and not self.unresolved_brief:
            w = self.weighed_ratio
            why = f"a trade-off, weighed: {interval_text(w['low'], w['high'])}× {w['against']}"
        elif self.instead_of is not None:
            why = f"{why}; in place of {self.instead_of}"
        return f"For {self.answer_for}: {verb} {self.cell} ({why})"

    def _ahead(self) -> str | None:
        """An unsettled role whose pick for now is not the best mean on the deciding figure (the
        tie-break keeps what you run, or QEMU's default, among cells not yet separated): which cell
        is ahead and by how much, in the one grammar and by the figure the ranking orders by (the
        geometric mean): "qcow2 · writeback has the best geo. mean, 1.19× raw · none"; None
        otherwise."""
        if self.status != "provisional" or not self.figures or self.instead_of is not None:
            return None
        first = self.figures[0]
        ratio, best = first.get("ratio_to_best"), first.get("best_cell")
        if ratio is None or best in (None, self.cell) or ratio <= 0:
            return None
        said = ratio_against(RatioCI(1 / ratio, None, None), first["metric"], self.cell, point=True)
        return f"{best} has the best geo. mean, {said}"

    def brief_figures(self) -> str:
        """Each deciding figure in a few words, in one paragraph, for a crowded first screen:
        "log:write.iops 1,695 IOPS, the best; data:read.clat_p99_us 497 µs, 0.95× the best
        (qcow2 · writeback)"; the cells not chosen by number (why: --detail)."""
        out = []
        for f in self.figures:
            if f["ratio_to_best"] is None:
                out.append(f"{f['figure']} not measured")
                continue
            vs = self._versus(f, " ({})")
            out.append(f"{f['figure']} {_number(f['mean'])} {f['unit']}, {vs}")
        if self.vetoes:
            out.append(f"{len(self.vetoes)} not chosen (why: --detail)")
        return "; ".join(out)

    def lines(self) -> list[str]:
        """The block under the headline: each deciding figure, then what was not chosen and why."""
        out = []
        for f in self.figures:
            if f["ratio_to_best"] is None:
                out.append(f"{f['says']} ({f['figure']}): not measured for this cell")
                continue
            # A ratio of means: how the pick stands against the best cell on this figure (its
            # decision, with its interval, is the job's own verdict in --detail).
            vs = self._versus(f, ", {}")
            out.append(f"{f['says']} ({f['figure']}): {_number(f['mean'])} {f['unit']}, {vs}")
        return out + self.vetoes

    def _versus(self, f: Mapping[str, Any], best_cell: str) -> str:
        """ "the best", or the ratio to the best with the best cell spelled by `best_cell`, in the
        one grammar (recommend/grammar.py): "0.95× the best", "1.67× higher latency than the
        best" (a latency without a direction read either way, issue 70)."""
        if f["best_cell"] == self.cell:
            return "the best"
        best = "the best" + best_cell.format(f["best_cell"])
        ratio = RatioCI(f["ratio_to_best"], None, None)
        return ratio_against(ratio, f["metric"], best, point=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "answer_for": self.answer_for,
            "text": self.headline(),
            "status": self.status,
            "resolution": self.resolution,
            "unresolved": self.unresolved or None,
            "answered": self.answered,
            "kept": self.kept or None,
            "cell": self.cell,
            "instead_of": self.instead_of,
            "tier": self.tier or None,
            "margin": self.margin,
            "jobs": self.jobs,
            "figures": self.figures,
            "not_chosen": self.vetoes,
            "missing": self.missing or None,
            "tradeoff": self.tradeoff or None,
            "weighed": self.weighed_ratio,
        }


def tradeoff_brief(first: Figure, veto: Veto) -> str:
    """A trade-off in a few words, from the veto of the deciding figure's pick: the pick leads on
    the deciding figure, the veto's best is better on the other, by the veto's interval (the ratio
    turned so that > 1 is that cell's advantage) or its mean. "raw · none leads on log:write.iops;
    qcow2 · writeback 1.15–2.42× better on data:read.clat_p99_us"."""
    lead = f"{veto.cell} leads on {first.key}"
    if veto.interval is None:  # means alone
        return f"{lead}, {veto.worse:.0%} worse than {veto.best} on {veto.figure.key}"
    low, high = veto.interval
    # cell/best: < 1 is worse when higher is better, > 1 when lower is better (a latency); said as
    # the best against the cell, in the one grammar (recommend/grammar.py)
    if veto.figure.higher_is_better:
        said = f"is {1 / high:.2f}–{1 / low:.2f}× {veto.cell}"
    else:
        said = f"has {low:.2f}–{high:.2f}× lower latency than {veto.cell}"
    return f"{lead}; {veto.best} {said} on {veto.figure.key}"


STATUS_OF_WEIGHED = {"separated": "answer", "within": "tied"}


def weigh(
    figures: Sequence[FigureMeans], a: str, b: str, margin: float, confidence: float = 0.90
) -> tuple[WeighedRatio, str] | None:
    """A trade-off between `a` (the deciding figure's pick) and `b` (better on a figure that vetoed
    it), weighed over every deciding figure by the role's weights (stats/weighed.py): the weighed
    ratio of b to a and what it decides, "separated" (its 90% interval excludes 1: the better one
    is the answer), "within" (the interval within the margin both ways: neither is better by more,
    and the deciding figure's pick stands, as a tie) or "open" (still a trade-off). None when a
    figure lacks 2 runs of either cell (nothing to weigh). Paired over the rounds both cells ran
    on every figure when their rounds are known (stats/weighed_paired.py), else over their runs
    (stats/weighed.py). Example, weights 2:1:1: `a` commits 1.27× faster, `b`'s two p99s 1.8× and
    1.25× lower: b 1.09× a, 0.90–1.31× over 8 runs each: open."""
    paired = _paired_parts(figures, a, b)
    found: WeighedRatio | None
    if paired is not None:
        found = paired_weighed_ratio(paired, confidence)
    else:
        parts = []
        for f in figures:
            runs_a, runs_b = f.samples.get(a, ()), f.samples.get(b, ())
            if len(runs_a) < 2 or len(runs_b) < 2:
                return None
            parts.append(Part(f.figure.weight, f.figure.higher_is_better, runs_a, runs_b))
        found = weighed_ratio(parts, confidence)
    if found is None:
        return None
    return found, "separated" if found.separated() else "within" if found.within(margin) else "open"


def _paired_parts(figures: Sequence[FigureMeans], a: str, b: str) -> list[PairedPart] | None:
    """b against a on every figure over the rounds both ran (stats/weighed_paired.py paired_part);
    None when some figure cannot be paired (then the weighing compares their runs, unpaired)."""
    parts = []
    for f in figures:
        ra, rb = f.by_round.get(a, {}), f.by_round.get(b, {})
        part = paired_part(f.figure.weight, f.figure.higher_is_better, ra, rb)
        if part is None:
            return None
        parts.append(part)
    return parts


def weights_text(figures: Sequence[Figure]) -> str:
    """The weights in a few words: "log:write.iops ×2, data:read.clat_p99_us ×1, …"."""
    return ", ".join(f"{f.key} ×{f.weight:g}" for f in figures)


def _number(x: float) -> str:
    """12,345 or 12.3: whole numbers from 1000 on, three significant digits below (never
    1.2e+04)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _figure_means(
    f: Figure,
    cws: Sequence[CellWorkload],
    workload: str,
    tier: str,
    rounds: Mapping[int, int] | None = None,
) -> FigureMeans:
    """The figure's runs per cell of `tier` (ranked runs only: CellWorkload.samples) and their
    means; with `rounds` (run id → round) also by round, for the cells whose every ranked run has
    the figure (its values then line up with CellWorkload.runs)."""
    cells = [
        c
        for c in cws
        if c.workload == workload
        and c.axes.get("tier") == tier
        and not is_ceiling(c.axes)
        and c.samples.get(f.metric)
    ]
    runs = {c.label(): list(c.samples[f.metric]) for c in cells}
    by_round = {
        c.label(): {rounds[r]: v for r, v in zip(c.runs, c.samples[f.metric], strict=True)}
        for c in cells
        if rounds and len(c.samples[f.metric]) == len(c.runs) and all(r in rounds for r in c.runs)
    }
    return FigureMeans(f, {cell: _centre(v) for cell, v in runs.items()}, runs, by_round)


def _centre(values: Sequence[float]) -> float:
    """The figure the ranking orders cells by (stats/ranking.py: the geometric mean of a sweep's
    rounds), so that a role's "the best" is the cell the ranking puts first (issue 70: the summary
    named one cell the best, --detail another); the arithmetic mean where a value is ≤ 0 (no
    logarithm)."""
    if min(values) <= 0:
        return sum(values) / len(values)
    return statistics.geometric_mean(values)


def _candidates(
    v: Verdict, primary: FigureMeans, allowed: set[str] | None, margin: float
) -> tuple[list[str], str]:
    """The deciding figure's pick first (its status), then the cells within the role's margin of the
    best on it (its tied cells first), by their mean: passing the pick over never falls to a cell
    materially worse on the figure that decides, even one the decision could not separate from the
    pick yet."""
    found = answer_of(v)
    if found is None or found[0].choice is None:
        return [], "none"
    chosen, status = found
    choice = chosen.choice
    assert choice is not None
    best = primary.best()
    near = [
        c
        for c in primary.means
        if c != choice.cell
        and best is not None
        and shortfall(primary.means[c], best[1], primary.figure.higher_is_better) <= margin
    ]
    rest = sorted(
        near,
        key=lambda c: (
            c not in choice.tied,
            primary.means[c] * (-1 if primary.figure.higher_is_better else 1),
        ),
    )
    return [choice.cell, *(c for c in rest if allowed is None or c in allowed)], status


def _figure_row(f: FigureMeans, cell: str) -> dict[str, Any]:
    best = f.best()
    mean = f.means.get(cell)
    ratio = None
    if best is not None and mean is not None and mean > 0 and best[1] > 0:
        ratio = mean / best[1] if f.figure.higher_is_better else best[1] / mean
    return {
        "figure": f.figure.key,
        "says": f.figure.says,
        "metric": f.figure.metric,
        "mean": mean,
        "unit": metric_info(f.figure.metric).unit,
        "best_cell": None if best is None else best[0],
        "best_mean": None if best is None else best[1],
        "ratio_to_best": ratio,
    }


def role_answer(
    role: Role,
    verdicts: Mapping[str, Verdict],
    cws: Sequence[CellWorkload],
    allowed: set[str] | None = None,
    rounds: Mapping[int, int] | None = None,
    *,
    run_seconds: Mapping[str, float] | None = None,
    budget: str | None = None,
) -> RoleAnswer:
    """One role's answer from its deciding job's verdict and the cells' means on each deciding
    figure, in the tier that verdict was made in. `allowed`: the cells meeting the requirements
    (None: every cell); `rounds`: run id → round (None: unknown; two cells are then compared over
    their runs, unpaired)."""
    out = RoleAnswer(role.name, role.answer_for, role.margin, role.workload_names(), "none")
    first = role.figures[0]
    v = verdicts.get(role.workload_of(first.job))
    if v is None or not v.tier:
        out.missing = (
            f"{role.workload_of(first.job)} has no ranked cells yet ({first.says} decides)"
        )
        return out
    out.tier = v.tier
    per = [_figure_means(f, cws, role.workload_of(f.job), v.tier, rounds) for f in role.figures]
    candidates, status = _candidates(v, per[0], allowed, role.margin)
    if not candidates:
        out.missing = f"{first.says} ({first.key}) is not decided: {v.missing or 'no pick yet'}"
        return out
    combined = combine(candidates, per[1:], role.margin)
    out.vetoes = [x.text(role.margin) for x in combined.vetoes]
    if combined.cell is None:
        if _weighed(out, role, per, combined.vetoes[0], allowed):
            out.figures = [_figure_row(f, out.cell) for f in per if out.cell is not None]
            return out
        short = out.tradeoff = tradeoff_brief(first, combined.vetoes[0])
        if out.weighed:
            out.tradeoff = f"{out.tradeoff}; weighed: {out.weighed}"
        _open_tradeoff(out, candidates[0], first.says, allowed, short)
        return out
    out.cell = combined.cell
    out.instead_of = candidates[0] if combined.cell != candidates[0] else None
    # how settled the deciding figure is; the vetoes say why its pick was passed over
    out.status = status
    _say_status(out, answer_of(v), per[0], cws, (run_seconds or {}).get(v.workload), budget)
    out.figures = [_figure_row(f, combined.cell) for f in per]
    return out


def _open_tradeoff(
    out: RoleAnswer, pick: str, says: str, allowed: set[str] | None, short: str
) -> None:
    """A trade-off the weights did not settle still ends with one configuration to use (issue 71):
    the deciding figure's pick (the role's first figure, what its VM waits on first; among cells
    tied on it, the tie-break's: power-loss safety, what you run or the default, simplicity), not
    told apart from the cell that wins the other figures, with the trade-off as the reason. The
    alternative and by how much it wins stay beside it ("a trade-off: … on data p99")."""
    if allowed is not None and pick not in allowed:
        out.missing = (
            f"no cell meeting the requirements is within {out.margin:.0%} of the best on every "
            "deciding figure: a trade-off between them (below)"
        )
        return
    out.cell, out.status = pick, "tied"
    out.unresolved = (
        f"a trade-off not told apart at this resolution: {out.tradeoff}; picked for {says}, the "
        "role's first figure"
    )
    out.unresolved_brief = f"a trade-off, not told apart: {short}"


def _say_status(
    out: RoleAnswer,
    found: tuple[Verdict, str] | None,
    deciding: FigureMeans,
    cws: Sequence[CellWorkload],
    seconds: float | None,
    budget: str | None,
) -> None:
    """What `out`'s status says beside its pick: why an equivalent one is kept, or how far the
    sweep told a tied or provisional one apart (_unresolved)."""
    choice = found[0].choice if found else None
    if found is None or choice is None or out.cell is None:
        return
    out.kept = choice.kept if out.status == "equivalent" else ""
    if out.status in ("tied", "provisional"):
        best = deciding.best()  # the closest cell where the decision names none: the best mean
        out.unresolved, out.unresolved_brief = not_told_apart(
            found[0], out.cell, cws, seconds, budget, best[0] if best else None
        )


def say_unresolved(
    v: Verdict, cws: Sequence[CellWorkload], seconds: float | None, budget: str | None
) -> None:
    """A workload's pick not told apart, said as a role's is (issue 71: the same fields from the
    same code): `v.unresolved` gets not_told_apart's full and brief texts."""
    found = answer_of(v)
    if found is None or found[1] not in ("tied", "provisional") or found[0].choice is None:
        return
    v.unresolved = not_told_apart(found[0], found[0].choice.cell, cws, seconds, budget)


def not_told_apart(
    shown: Verdict,
    cell: str,
    cws: Sequence[CellWorkload],
    seconds: float | None,
    budget: str | None,
    ahead: str | None = None,
) -> tuple[str, str]:
    """A pick not told apart from its closest cell, said in full and in a few words
    (resolution.py): the interval reached against that cell on the deciding job (the pick over
    it, > 1: the pick is better), the property the pick rests on, and the minutes more that would
    settle it, from the decision's own estimate of the rounds still needed."""
    choice = shown.choice
    assert choice is not None
    rival = rival_of(shown, cell, ahead)
    axes_of = {c.label(): c.axes for c in cws if c.workload == shown.workload}
    reason = pick_reason(
        axes_of.get(cell, {}), axes_of.get(rival) if rival else None, _keeper(shown, cell)
    )
    gain = next((g for g in shown.alternatives if g.label == rival), None)
    within = _within(gain)
    apart = f"not told apart from {rival}" if rival else "not told apart"
    more = settle_text(choice.settle_rounds, seconds, budget)
    full = f"{apart} at this resolution: {within}; picked for {reason}"
    brief = f"{apart}, {within}; {reason}"
    if more:  # the minutes on the first screen too; the budget that buys them in full
        full, brief = f"{full}; {more}", f"{brief}; {more.split(' (')[0]}"
    return full, brief


def rival_of(shown: Verdict, cell: str, ahead: str | None = None) -> str | None:
    """The cell the pick was not told apart from: the rest of the decision's top group (not ruled
    out), else its runner-up, else the cell ahead on the deciding figure (the headline's status
    names it too: report/headline.py WorkloadGain.rival)."""
    choice = shown.choice
    assert choice is not None
    rivals = [c for c in choice.tied if c not in choice.ruled_out]
    rivals += [g.label for g in shown.alternatives if g.label]
    rivals += [ahead] if ahead else []
    return next((r for r in rivals if r != cell), None)


def _keeper(shown: Verdict, cell: str) -> str:
    """What the pick keeps, when it is the configuration a gain names as itself: "what you run"
    (--current) or "QEMU's default"; "" otherwise."""
    for g in shown.gains:
        if g.label == cell and g.against.startswith("current"):
            return "what you run"
        if g.label == cell and g.against.startswith("QEMU default"):
            return "QEMU's default"
    return ""


def _within(gain: Gain | None) -> str:
    """The interval reached between the pick and its rival, "within 0.86–1.04× here"."""
    r = None if gain is None else gain.ratio
    if r is None or r.low is None or r.high is None:
        return "no interval between them yet"
    return f"within {interval_text(r.low, r.high)}× here"


def _weighed(
    out: RoleAnswer,
    role: Role,
    per: Sequence[FigureMeans],
    veto: Veto,
    allowed: set[str] | None,
) -> bool:
    """Weigh the trade-off of the first veto into `out`: every cell with runs of every deciding
    figure (among `allowed`) against the deciding figure's pick (`weigh_cells`); True when the
    weights settle it (out.cell and status set), False when it stays a trade-off (out.weighed says
    by how much, when it could be weighed)."""
    a = veto.cell
    cells = [
        c
        for c in dict.fromkeys([a, veto.best, *per[0].means])
        if all(c in f.means for f in per) and (allowed is None or c in allowed or c == a)
    ]
    found = weigh_cells(per, a, cells, role.margin)
    if found is None:
        return False
    winner, loser, ratio, outcome, confidence = found
    out.weighed_ratio = {
        "cell": winner,
        "against": loser,
        "ratio": ratio.ratio,
        "low": ratio.low,
        "high": ratio.high,
        "confidence": round(confidence, 4),
        "weights": {f.figure.key: f.figure.weight for f in per},
        "outcome": outcome,
    }
    verdict = {
        "separated": "better",
        "within": f"within {role.margin:.0%} both ways, the deciding figure's pick kept"
        if winner == a
        else f"within {role.margin:.0%} both ways, both better than the deciding figure's pick",
        "open": f"not separated, nor within {role.margin:.0%}",
    }[outcome]
    level = f"{confidence:.0%}" if confidence >= 0.9 else f"{confidence:.1%}"
    out.weighed = (
        f"{winner} {interval_text(ratio.low, ratio.high)}× {loser} with its figures weighed "
        f"({weights_text([f.figure for f in per])}; {level} CI): {verdict}"
    )
    if outcome == "open" or (allowed is not None and winner not in allowed):
        return False
    out.cell, out.status = winner, STATUS_OF_WEIGHED[outcome]
    out.instead_of = a if winner != a else None
    return True


def weigh_cells(
    figures: Sequence[FigureMeans], pick: str, cells: Sequence[str], margin: float
) -> tuple[str, str, WeighedRatio, str, float] | None:
    """A trade-off weighed over every cell in `cells` (the deciding figure's `pick` among them), not
    only the pick and the cell that vetoed it: a third cell may be better than both with the
    figures weighed. The leader L is the cell with the best weighed ratio to the pick (the pick
    itself 1); L is then compared with every other cell X (`weigh`), each interval at confidence
    1 − 0.10/m for the m cells compared with L (Bonferroni: the 0.90 of one comparison spread over
    m, so that naming L better than all of them errs no more often than one comparison at 0.90).

    (winner, the cell it is told against, their weighed ratio (> 1: the winner's advantage), the
    outcome, the confidence): "separated" when L is shown better than every other cell (L wins,
    told against the closest); "within" when no X is open and the pick is L or within the margin
    of it both ways (the pick kept, as a tie, told against L or the closest); "open" when some X is
    neither (L told against the closest open one; the pick's trade-off stands). None when the pick
    cannot be weighed against any cell (a figure without 2 runs).

    With two cells this is `weigh` at 0.90, as before. Example (a quickstart's database, weights
    2:1:1): raw · writeback 1.81× qcow2 · none, 1.39× qcow2 · writeback, 1.42× raw · none, each
    interval above 1 at 0.967: raw · writeback, though raw · none (the commits' pick) against
    qcow2 · writeback (the best data p99) stayed open at 0.78–1.23×."""
    points: dict[str, float] = {pick: 1.0}
    for c in cells:
        if c != pick and (w := weigh(figures, pick, c, margin)) is not None:
            points[c] = w[0].ratio
    if len(points) < 2:
        return None
    leader, others, confidence = weighed_leader(points, pick)
    versus: dict[str, tuple[WeighedRatio, str]] = {}
    for x in others:
        found = weigh(figures, x, leader, margin, confidence)
        if found is None:
            return None
        versus[x] = found
    return (*_weighed_outcome(pick, leader, versus), confidence)


def _weighed_outcome(
    pick: str, leader: str, versus: Mapping[str, tuple[WeighedRatio, str]]
) -> tuple[str, str, WeighedRatio, str]:
    """`weigh_cells`' decision from the leader's comparison with each other cell (`versus`: cell →
    the leader's weighed ratio to it, its outcome): (winner, against, ratio, outcome)."""
    others = list(versus)
    opened = [x for x in others if versus[x][1] == "open"]
    if opened:  # told against the open comparison the leader is least sure of
        x = min(opened, key=lambda c: versus[c][0].low)
        return leader, x, versus[x][0], "open"
    everyone = all(versus[x][1] == "separated" for x in others)
    closest = min(others, key=lambda x: versus[x][0].low)
    if leader == pick:
        return pick, closest, versus[closest][0], "separated" if everyone else "within"
    if versus[pick][1] == "within":  # the pick within the margin of the leader: kept, as a tie
        return pick, leader, _turned(versus[pick][0]), "within"
    if everyone:
        return leader, closest, versus[closest][0], "separated"
    # the leader shown better than the pick, within the margin of another cell: a tie of theirs
    tied = next(x for x in others if versus[x][1] == "within")
    return leader, tied, versus[tied][0], "within"


def _turned(w: WeighedRatio) -> WeighedRatio:
    """A weighed ratio read the other way round (a against b)."""
    return WeighedRatio(1 / w.ratio, 1 / w.high, 1 / w.low, w.df)


def role_answers(
    plan_definition: Mapping[str, Any],
    verdicts: Sequence[Verdict],
    cws: Sequence[CellWorkload],
    allowed: set[str] | None = None,
    margin: float | None = None,
    rounds: Mapping[int, int] | None = None,
    *,
    run_seconds: Mapping[str, float] | None = None,
    budget: str | None = None,
) -> list[RoleAnswer]:
    """The answer for every role the sweep's plan ran (its stored definition's `roles` and
    `[role.NAME]`), each at its margin (``margin``, recommend --margin, else the plan's key
    `margin`, replaces a built-in role's and is a role table's without one: roles.plan_roles)."""
    names, custom = plan_definition.get("roles") or [], plan_definition.get("role") or {}
    if not names and not custom:
        return []
    by_workload: dict[str, Verdict] = {}
    for v in verdicts:
        by_workload.setdefault(v.workload, v)
    chosen = plan_definition.get("margin") if margin is None else margin
    return [
        role_answer(r, by_workload, cws, allowed, rounds, run_seconds=run_seconds, budget=budget)
        for r in plan_roles(names, custom, chosen)
    ]
