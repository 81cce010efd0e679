"""Building one workload's verdict from its ranking: the choice (`choose`, the decision rule of
stats/decision.py), its gains, what the requirements cost, the faster configuration they exclude,
its risks and snippets; and `answer_of`, what every output says about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iomatrix import domain
from iomatrix.domain import BASELINES, PLATFORM_BASELINES, Baseline, Modifier, axes
from iomatrix.metrics import metric_info
from iomatrix.report.durability import MeasuredIndex
from iomatrix.report.figures import ratio_text
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import (
    WorkloadRanking,
)
from iomatrix.report.recommend.axis_lines import AxisAnswer, axis_answers
from iomatrix.report.recommend.current_match import (
    asked_later_axes,
    matching_cell,
    matching_current,
    varied_axes,
)
from iomatrix.report.recommend.grammar import compared
from iomatrix.report.recommend.requirements import Requirement, opt_in_text, unmet
from iomatrix.report.recommend.risks import (
    SITUATIONS,
    RiskStatement,
    risk_statements,
    target_risks,
)
from iomatrix.snippets import DiskConfig, SnippetSet, snippet_backing, snippets_for
from iomatrix.stats import RatioCI, ratio_ci
from iomatrix.stats.blocked import BlockedAnalysis
from iomatrix.stats.ranking import Ranking
from iomatrix.tiers import is_reference
from iomatrix.vmconfig.reading import CurrentConfig


@dataclass(frozen=True)
class Choice:
    cell: str  # the chosen cell's label
    tied: tuple[str, ...]  # the rest of the top group, in tie-break order
    rule: str  # the decision in one or two sentences
    # The decision ended as equivalent (stats/decision.py): the cell is kept, not a winner; `kept`
    # says why in words with the measured bounds ("nothing measured is faster by more than 5% (raw
    # 0.97–1.04×)").
    kept: str = ""
    # A provisional pick (not settled yet): the decision's estimates of the rounds still needed, to
    # separate or rule out its contenders and to show the leader and the keeper equivalent
    # (stats/decision.py). Not in JSON: the rule says the first; the role line says both
    # (report/recommend/roles.py).
    settle_rounds: int | None = None
    equivalence_rounds: int | None = None
    # Of `tied`, the cells behind by more than the threshold that cannot beat the choice by it (a
    # one-sided test, or the race's elimination): named with the pick, but not as tied with it.
    ruled_out: tuple[str, ...] = ()
    threshold: float = 0.05


def choose(wr: WorkloadRanking) -> Choice | None:
    """THE decision, in one place: the statistics decision rule (stats/decision.py) already applied
    to the ranking by rank_workload. None when it gives no answer (nothing eligible, or contenders
    the data cannot separate from the leader yet); `wr.decision.statement` then says why."""
    d = wr.decision
    if d is None or d.answer is None:
        return None
    if d.kind != "equivalent":
        return Choice(d.answer, d.tied, d.statement, ruled_out=d.ruled_out, threshold=d.threshold)
    bounds = ""
    if d.bounds is not None:
        alt = d.leader if d.leader != d.answer else next((n for n in d.tied if n != d.answer), "")
        bounds = f" ({alt} {d.bounds[1]:.2f}–{d.bounds[2]:.2f}×)"
    return Choice(
        d.answer,
        d.tied,
        d.statement,
        f"nothing measured is faster by more than {d.margin * 100:g}%{bounds}",
        ruled_out=d.ruled_out,
        threshold=d.threshold,
    )


@dataclass
class Gain:
    """How the chosen configuration compares with another: chosen/other for higher-is-better
    figures, other/chosen for lower-is-better ones, so > 1 always means the choice is better."""

    against: str
    label: str | None  # the compared cell; None when not in the sweep
    ratio: RatioCI | None
    note: str = ""
    # Values of the current configuration compared at the cell's ("iothread=on as off (not
    # varied)"): the short form of what `note` says, for the headline.
    assumed: tuple[str, ...] = ()
    # One side's figure came from the host page cache, the working set fitting in RAM: what the
    # ratio then measured (report/shape_findings.py: page_cache_note); "" when it compares like with
    # like.
    page_cache: str = ""

    def as_dict(self) -> dict[str, Any]:
        r = self.ratio
        return {
            "against": self.against,
            "cell": self.label,
            "note": self.note,
            "assumed": list(self.assumed),
            "page_cache": self.page_cache or None,
            "ratio": None if r is None else r.ratio,
            "ci95_low": None if r is None else r.low,
            "ci95_high": None if r is None else r.high,
        }


@dataclass
class Declined:
    """A configuration the data show faster than the answer that the requirements exclude: stated in
    one line with its measured gain and its risk, chosen only when the user drops the requirement it
    fails (--allow-data-loss for the default power-loss-safe)."""

    cell: str
    gain: Gain  # the declined configuration over the answer (> 1: it is faster)
    fails: tuple[str, ...]  # the requirements it does not meet
    risk: str  # what it risks on a host crash or power loss
    opt_in: str  # how to choose it anyway
    # the ranked metric: a lower-is-better one says its direction ("1.05× faster than the answer",
    # recommend/grammar.py); "" or a throughput: "would gain N× over the answer"
    metric: str = ""

    def text(self, brief: bool = False) -> str:
        """The line, or `brief`: without its risk (a crowded screen names the risks and leaves
        their text to --detail)."""
        r = self.gain.ratio
        if r is None or r.ratio is None:
            gain = "would gain over the answer"
        # an interval over 10× is no figure, here as in every ratio (report/figures.py)
        elif r.imprecise:
            gain = f"may gain over the answer, {ratio_text(*r)},"
        elif self.metric and not metric_info(self.metric).higher_is_better:
            # the verb the one grammar gives it ("has … lower latency than", "is … faster than")
            verb, _, said = compared(r, self.metric, "the answer").partition(" ")
            gain = f"would {'have' if verb == 'has' else 'be'} {said}"
        else:
            gain = f"would gain {ratio_text(*r)} over the answer"
        if brief:
            return (
                f"{self.cell} {gain} but is not {' or '.join(self.fails)} (chosen only with "
                f"{self.opt_in}; its risk: --detail)"
            )
        return (
            f"{self.cell} {gain} but is not {' or '.join(self.fails)}; on power "
            f"loss: {self.risk}; chosen only with {self.opt_in}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "vs_answer": self.gain.as_dict(),
            "fails": list(self.fails),
            "risk": self.risk,
            "opt_in": self.opt_in,
            "text": self.text(),
        }


@dataclass
class Verdict:
    workload: str
    metric: str
    higher_is_better: bool
    tier: str
    choice: Choice | None
    mean: float | None = None
    ci: tuple[float | None, float | None] = (None, None)
    n: int = 0
    gains: list[Gain] = field(default_factory=list)  # vs current, vs defaults
    to_baremetal: Gain | None = None
    to_ceiling: Gain | None = None
    requirement_cost: Gain | None = None
    # the faster configuration the requirements exclude, if the data show one
    declined: Declined | None = None
    risks: list[RiskStatement] = field(default_factory=list)
    # Per --target, the risks of the storage path its snippet sets up where that is not the path
    # measured (Proxmox's NFS storage is a kernel mount: recommend/risks.py target_risks).
    target_risks: dict[str, list[RiskStatement]] = field(default_factory=dict)
    snippets: SnippetSet | None = None
    missing: str = ""  # why there is no choice (a verdicts tier's: the summary of its verdicts)
    # What the notable alternatives measured against the choice (the runner-up, the current or
    # default, the best of another cache mode): alternative/choice over the rounds both ran (> 1:
    # the alternative is better).
    alternatives: list[Gain] = field(default_factory=list)
    # a verdicts tier's verdict lines, per configuration
    evidence: list[str] = field(default_factory=list)
    # when another tier than the one closest to a VM answered: which, why, and what it decides
    basis: str = ""
    # No answer yet, but the tie-break picks one among the cells the data cannot separate: that
    # pick's figures, risks and snippets (its `choice` is the pick, named as such), so a headline
    # can still say what to use.
    provisional: Verdict | None = None
    # The backing group the verdict answers on, where a sweep of shared storage answers per backing
    # (a protocol's name, or "NAME at rtt=2ms": report/per_backing.py); "" where one answer spans
    # the backings.
    # Its workloads get one configuration where their decisions allow (report/one_config.py).
    group: str = ""
    # Where the sweep varied more than one axis: the pick's level of each, decided on its own over
    # the other axes' values (report/recommend/axis_lines.py), for the first screen's axis lines.
    axis_answers: list[AxisAnswer] = field(default_factory=list)
    # A pick not told apart (tied or provisional), said as a role's is (roles.not_told_apart): the
    # interval reached, the property the pick rests on, the minutes more that would settle it; in
    # full and in a few words. ("", "") otherwise.
    unresolved: tuple[str, str] = ("", "")

    def as_dict(self) -> dict[str, Any]:
        out = self._fields()
        # a verdicts tier's lines per configuration (only such a workload has the key)
        if self.evidence:
            out["evidence"] = list(self.evidence)
        if self.provisional is not None:
            out["provisional"] = self.provisional._fields()
        found = answer_of(self)
        out["answer"] = (
            None
            if found is None
            else {"cell": found[0].choice.cell if found[0].choice else None, "status": found[1]}
        )
        return out

    def _fields(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "tier": self.tier,
            "missing": self.missing or None,
            "basis": self.basis or None,
            "choice": None
            if self.choice is None
            else {
                "cell": self.choice.cell,
                "tied": list(self.choice.tied),
                "rule": self.choice.rule,
                "kept": self.choice.kept or None,
            },
            "alternatives": [g.as_dict() for g in self.alternatives],
            "mean": self.mean,
            "ci95_low": self.ci[0],
            "ci95_high": self.ci[1],
            "n": self.n,
            "gains": [g.as_dict() for g in self.gains],
            "to_baremetal": None if self.to_baremetal is None else self.to_baremetal.as_dict(),
            "to_ceiling": None if self.to_ceiling is None else self.to_ceiling.as_dict(),
            "requirement_cost": None
            if self.requirement_cost is None
            else self.requirement_cost.as_dict(),
            "declined": None if self.declined is None else self.declined.as_dict(),
            "risks": [
                {"situation": r.situation, "text": r.text, "basis": r.basis} for r in self.risks
            ],
            "snippets": None if self.snippets is None else self.snippets.as_dict(),
        }


@dataclass
class Recommendation:
    sweep_id: int
    plan: str
    status: str
    requirements: list[Requirement]
    current: CurrentConfig | None
    verdicts: list[Verdict]
    warnings: list[str] = field(default_factory=list)
    # --objective when given (report/objective.py); None: primary metrics
    objective: str | None = None
    # --allow-data-loss: configurations that drop guest flushes may be chosen
    allow_data_loss: bool = False
    # What the sweep's figures show beyond the answer, one sentence each (librbd's
    # writethrough-until-flush trap: report/rbd_flush.py); only what was measured, never a general
    # remark.
    findings: list[str] = field(default_factory=list)
    # One answer per role of the plan (roles.py: RoleAnswer), first in every output.
    roles: list[Any] = field(default_factory=list)
    # The findings the first screen tells (the headline): with roles, only those of their jobs'
    # figures; None: all of `findings`. Not in JSON, which carries every finding.
    first_findings: list[str] | None = None
    # The guests the sweep's guest figures came from (report/guests.py: GuestUsed), named with every
    # answer.
    guests: list[Any] = field(default_factory=list)
    # The first screen's findings in one line each, for a screen too crowded for `first_findings`
    # (report/screen.py); not in JSON.
    brief_findings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        first = {"roles": [r.as_dict() for r in self.roles]} if self.roles else {}
        return {
            **first,
            "sweep": self.sweep_id,
            "plan": self.plan,
            "status": self.status,
            "requirements": [{"name": r.name, "meaning": r.meaning} for r in self.requirements],
            "current": None
            if self.current is None
            else {
                "axes": self.current.axes,
                "source": self.current.source,
                "defaulted": self.current.defaulted,
                "l2_cache_bytes": self.current.l2_cache_bytes,
                "notes": self.current.notes,
            },
            "allow_data_loss": self.allow_data_loss,
            "verdicts": [v.as_dict() for v in self.verdicts],
            "warnings": self.warnings,
            "findings": self.findings,
            **({"guests": [g.as_dict() for g in self.guests]} if self.guests else {}),
            **({"objective": self.objective} if self.objective is not None else {}),
        }


def answer_of(v: Verdict) -> tuple[Verdict, str] | None:
    """THE answer a user is given for one verdict, used by every output (the end of `run`,
    `recommend` with and without --detail, the report, JSON): the verdict whose figures are stated
    and its status, "answer", "equivalent" (kept: nothing measured is better by more than the
    margin), "tied" (the decision's top group, broken by the tie-break) or "provisional" (not
    separated yet: the tie-break's pick is named as leading, never as the configuration to use);
    None when there is not even a pick."""
    if v.choice is not None:
        return v, "equivalent" if v.choice.kept else "tied" if v.choice.tied else "answer"
    if v.provisional is not None and v.provisional.choice is not None:
        return v.provisional, "provisional"
    return None


def _gain(
    against: str,
    chosen: CellWorkload,
    other: CellWorkload | None,
    metric: str,
    higher: bool,
    *,
    missing_note: str,
    analysis: BlockedAnalysis | None = None,
) -> Gain:
    if other is None:
        return Gain(against, None, None, missing_note)
    paired = _paired_gain(against, chosen, other, higher, analysis)
    if paired is not None:
        return paired
    a, b = chosen.samples.get(metric, []), other.samples.get(metric, [])
    if len(a) < 2 or len(b) < 2:
        return Gain(against, other.label(), None, "fewer than 2 runs: no interval")
    rc = ratio_ci(a, b) if higher else ratio_ci(b, a)
    return Gain(against, other.label(), rc, "same cell" if other is chosen else "")


# How a like-with-like ratio was taken, said beside it ("[paired run by run]"): each of the pick's
# runs against the other cell's run of the same round.
PAIRED_BASIS = "paired run by run"


def _paired_gain(
    against: str,
    chosen: CellWorkload,
    other: CellWorkload,
    higher: bool,
    analysis: BlockedAnalysis | None,
) -> Gain | None:
    """Like with like: the ratio over the rounds both cells ran, paired by round (stats/paired.py),
    when the ranking compared the two by round; None to fall back to the runs as samples (no rounds,
    or not ranked)."""
    x, y = chosen.label(), other.label()
    if (
        analysis is None
        or not analysis.blocked
        or x == y
        or x not in analysis.centre
        or y not in analysis.centre
    ):
        return None
    pr = analysis.pair(x, y) if higher else analysis.pair(y, x)
    if pr.paired_rounds < 2 or pr.ratio_low is None:
        return Gain(
            against,
            y,
            None,
            "too few runs side by side for a like-with-like ratio",
        )
    return Gain(
        against,
        y,
        RatioCI(pr.ratio, pr.ratio_low, pr.ratio_high),
        # the basis said without a count of rounds (issue 71: an answer never prints one)
        PAIRED_BASIS,
    )


def workload_verdict(
    cws: list[CellWorkload],
    wr: WorkloadRanking,
    requirements: list[Requirement],
    current: CurrentConfig | None,
    restricted: WorkloadRanking | None = None,
    measured: MeasuredIndex | None = None,
) -> Verdict:
    """`wr` ranks every cell of the workload's tier; `restricted` only those meeting `requirements`
    (None when none does or there are no requirements)."""
    v = Verdict(wr.workload, wr.metric, wr.ranking.higher_is_better, wr.tier, None)
    chosen_from = restricted if requirements else wr
    choice = choose(chosen_from) if chosen_from is not None else None
    if choice is None:
        v.missing = _why_no_choice(wr, chosen_from, requirements)
        d = chosen_from.decision if chosen_from is not None else None
        if d is not None and d.provisional is not None and d.provisional in wr.cells:
            pick = Choice(
                d.provisional,
                tuple(c for c in (d.leader, *d.tied, *d.unresolved) if c and c != d.provisional),
                chosen_from.statement(),
                settle_rounds=d.extra_rounds,
                equivalence_rounds=d.equivalence_rounds,
            )
            v.provisional = _chosen_verdict(
                Verdict(v.workload, v.metric, v.higher_is_better, v.tier, pick),
                cws,
                wr,
                chosen_from,
                requirements=requirements,
                current=current,
                measured=measured,
            )
            v.axis_answers = axis_answers(chosen_from, d.provisional, wr.ranking.alpha)
        return v
    v.choice = choice
    v.axis_answers = axis_answers(chosen_from, choice.cell, wr.ranking.alpha)
    return _chosen_verdict(
        v, cws, wr, chosen_from, requirements=requirements, current=current, measured=measured
    )


def _chosen_verdict(
    v: Verdict,
    cws: list[CellWorkload],
    wr: WorkloadRanking,
    chosen_from: WorkloadRanking | None,
    *,
    requirements: list[Requirement],
    current: CurrentConfig | None,
    measured: MeasuredIndex | None,
) -> Verdict:
    """`v` with the figures, comparisons, risks and snippets of its choice (`v.choice`)."""
    choice = v.choice
    assert choice is not None
    r = chosen_from.ranking if chosen_from is not None else wr.ranking
    cell = wr.cells[choice.cell]
    row = r.row(choice.cell)  # the ranking the choice was made in
    v.mean, v.ci, v.n = row.summary.mean, (row.summary.ci_low, row.summary.ci_high), row.summary.n
    same_tier = [c for c in cws if c.workload == wr.workload and c.axes["tier"] == wr.tier]
    v.gains = _gains(wr, cell, same_tier, r.higher_is_better, current)
    v.alternatives = _alternatives(wr, r, cell, v.gains)
    # The platforms' own defaults after the alternatives: --target chooses which one the headline
    # quotes.
    v.gains += _not_ranked_noted(
        wr,
        [
            _gain(
                f"{b.name} ({b.values_text()})",
                cell,
                other,
                wr.metric,
                r.higher_is_better,
                missing_note="not in this sweep",
                analysis=wr.ranking.analysis,
            )
            for b, other in platform_twins(cell, same_tier)
        ],
    )
    if not is_reference(wr.tier):
        v.to_baremetal, v.to_ceiling = _to_references(wr, choice.cell)
    if requirements:
        v.requirement_cost = _requirement_cost(wr, choice.cell, r.higher_is_better)
        v.declined = _declined(wr, v.requirement_cost, requirements, measured)
    v.risks = risk_statements(
        cell.axes["cache"], cell.axes.get("modifier", Modifier.NONE), cell, measured
    )
    v.target_risks = target_risks(cell)
    # With --current, only what the sweep varied here changes on the user's disk (the rest is kept
    # as they have it).
    v.snippets = snippets_for(
        DiskConfig.from_axes(cell.axes, snippet_backing(cell.backing)),
        current=current,
        varied=varied_axes(same_tier, cell),
    )
    return v


def _why_no_choice(
    wr: WorkloadRanking, chosen_from: WorkloadRanking | None, requirements: list[Requirement]
) -> str:
    """Why the ranking the choice is made in (`chosen_from`: restricted to the requirements, or all
    of `wr`) gives no answer: a requirement no swept cell meets, none meeting them all, or the
    decision's own reason."""
    for q in requirements:
        if not any(q.met_by(c.axes) for c in wr.cells.values()):
            return f"requirement {q.name} excluded every swept cell ({q.meaning})"
    if requirements and chosen_from is None:
        return "no swept cell meets " + " and ".join(q.name for q in requirements) + " together"
    d = chosen_from.decision if chosen_from is not None else None
    return (
        chosen_from.statement()
        if chosen_from is not None and d is not None
        else ("no cell is eligible: too few runs or too noisy")
    )


def _gains(
    wr: WorkloadRanking,
    cell: CellWorkload,
    same_tier: list[CellWorkload],
    higher: bool,
    current: CurrentConfig | None,
) -> list[Gain]:
    """The chosen cell against the user's current configuration and the tools' defaults, in the same
    tier; a compared cell that looks better says why it was not chosen."""
    gains = []
    if current is not None:
        other, assumed, short, between = matching_current(same_tier, cell, current)
        g = _gain(
            f"current ({current.label()})",
            cell,
            other,
            wr.metric,
            higher,
            missing_note=between
            or "not measured in this sweep: add its values to the plan to compare",
            analysis=wr.ranking.analysis,
        )
        g.note = "; ".join(filter(None, [g.note, *assumed]))
        g.assumed = tuple(short) if other is not None else ()
        gains.append(g)
    for b in BASELINES:
        twin = axes.baseline_values(cell.axes, b)
        other = matching_cell(same_tier, cell, **{k: v for k, v in twin.items() if k in cell.axes})
        gains.append(
            _gain(
                f"{b.name} (cache={b.cache} aio={b.aio})",
                cell,
                other,
                wr.metric,
                higher,
                missing_note="not in this sweep",
                analysis=wr.ranking.analysis,
            )
        )
    # A question asked on one cache × aio cell (a workload table: zero detection at cache=none,
    # io_uring) has no twin at QEMU's default cache and aio; its own axes at QEMU's defaults are
    # then the comparison.
    later = axes.later_at_default(cell.axes)
    if all(g.label is None for g in gains if g.against.startswith(BASELINES[0].name)):
        if later:
            other = matching_cell(same_tier, cell, **later)
            if other is not None:
                said = " ".join(f"{a}={v}" for a, v in later.items())
                gains.append(
                    _gain(
                        f"{BASELINES[0].name} {said}",
                        cell,
                        other,
                        wr.metric,
                        higher,
                        missing_note="",
                        analysis=wr.ranking.analysis,
                    )
                )
        elif asked := asked_later_axes(same_tier, cell):
            # The chosen cell holds the question's axes at QEMU's defaults (64k clusters chosen over
            # 1M): it is itself the comparison.
            said = " ".join(f"{a}={cell.axes[a]}" for a in asked)
            gains.append(
                _gain(f"{BASELINES[0].name} {said}", cell, cell, wr.metric, higher, missing_note="")
            )
    return _not_ranked_noted(wr, gains)


def _not_ranked_noted(wr: WorkloadRanking, gains: list[Gain]) -> list[Gain]:
    """`gains`, a compared cell that looks better saying why it was not chosen."""
    for g in gains:
        if g.label in wr.cells and not wr.ranking.row(g.label).eligible:
            why = "not ranked: " + ", ".join(wr.ranking.row(g.label).flags).replace("_", " ")
            g.note = "; ".join(filter(None, [g.note, why]))
    return gains


def platform_twins(
    cell: CellWorkload, same_tier: list[CellWorkload]
) -> list[tuple[Baseline, CellWorkload | None]]:
    """The platforms' defaults that are not the tools' (domain.PLATFORM_BASELINES beyond BASELINES:
    Proxmox's, Nova's), each with the cell's twin at them in the same tier (axes.baseline_values:
    the bus and later axes the platform sets, where the tier has them), None where the sweep did not
    measure it."""
    out = []
    for b in dict.fromkeys(PLATFORM_BASELINES.values()):
        if b in BASELINES:
            continue
        twin = axes.baseline_values(cell.axes, b)
        out.append(
            (b, matching_cell(same_tier, cell, **{k: v for k, v in twin.items() if k in cell.axes}))
        )
    return out


def _to_references(wr: WorkloadRanking, chosen: str) -> tuple[Gain, Gain | None]:
    """The chosen cell of a non-reference tier over bare metal, and over the null ceiling (the one
    of its bus when there is one): how much of the host's speed, and of the virtual I/O path's, it
    keeps."""
    cell = wr.cells[chosen]
    to_baremetal = Gain("bare metal", None, wr.to_baremetal.get(chosen), "cell/bare metal")
    ceilings = [c for c, _ in wr.ceiling if c.axes.get("bus") == cell.axes.get("bus")] or [
        c for c, _ in wr.ceiling
    ]
    if not ceilings:
        return to_baremetal, None
    a, b = cell.samples[wr.metric], ceilings[0].samples[wr.metric]
    return to_baremetal, Gain(
        "null ceiling",
        ceilings[0].label(),
        ratio_ci(a, b) if len(a) >= 2 and len(b) >= 2 else None,
        "cell/ceiling",
    )


def _requirement_cost(wr: WorkloadRanking, chosen: str, higher: bool) -> Gain | None:
    """What the requirements cost: the unrestricted answer over the chosen cell (None when they cost
    nothing). Unsettled without the requirements, the unrestricted leader stands in: a user who
    requires safety is still told that a cell it excludes measured ahead, with the interval that
    says how far it is from settled."""
    d = wr.decision
    free = None if d is None else d.answer or d.leader
    if free is None or free == chosen:
        return None
    g = _gain(
        "best without the requirements",
        wr.cells[free],
        wr.cells[chosen],
        wr.metric,
        higher,
        missing_note="",
        analysis=wr.ranking.analysis,
    )
    return Gain(
        f"{free} (the answer without requirements)",
        free,
        g.ratio,
        "the unrestricted answer is this many times better",
    )


def _declined(
    wr: WorkloadRanking,
    cost: Gain | None,
    requirements: list[Requirement],
    measured: MeasuredIndex | None,
) -> Declined | None:
    """The unrestricted answer the requirements excluded, with what it risks and how to choose it
    anyway."""
    if cost is None or cost.label is None or cost.label not in wr.cells:
        return None
    cell = wr.cells[cost.label]
    fails = unmet(requirements, cell.axes)
    if not fails:
        return None
    power = next(
        (
            r.text
            for r in risk_statements(
                cell.axes.get("cache", domain.NA),
                cell.axes.get("modifier", Modifier.NONE),
                cell,
                measured,
            )
            if r.situation == SITUATIONS[1]
        ),
        "not documented for this configuration",
    )
    return Declined(
        cost.label, cost, tuple(q.name for q in fails), power, opt_in_text(fails), wr.metric
    )


ALTERNATIVES_SHOWN = 3


def _alternatives(
    wr: WorkloadRanking, r: Ranking, cell: CellWorkload, gains: list[Gain]
) -> list[Gain]:
    """The notable alternatives to the chosen cell, each as the choice over it (> 1: the choice is
    better, as in every Gain) over the rounds both ran: the runner-up (the best-ranked other cell),
    the current or default configuration it was compared with, and the best cell of another cache
    mode; at most ALTERNATIVES_SHOWN."""
    chosen = cell.label()
    ranked = [
        row.name
        for row in r.rows
        if row.rank is not None and row.name != chosen and row.name in wr.cells
    ]
    picks = ranked[:1] + [g.label for g in gains if g.label in wr.cells and g.label != chosen]
    picks += [n for n in ranked if wr.cells[n].axes.get("cache") != cell.axes.get("cache")][:1]
    out = []
    for name in dict.fromkeys(picks):
        g = _gain(
            "alternative",
            cell,
            wr.cells[name],
            wr.metric,
            r.higher_is_better,
            missing_note="",
            analysis=wr.ranking.analysis,
        )
        # the pick over it (> 1: the pick is better), as every ratio reads (recommend/grammar.py)
        out.append(Gain(name, name, g.ratio, g.note))
    return out[:ALTERNATIVES_SHOWN]
