"""An answer per axis (issue 71): where a sweep varied more than one axis (format × cache in the
quickstart), one line per axis above the snippet, for roles and workloads alike:

    cache: writeback, 1.21× (1.10–1.33) cache=none (decided)
    format: raw or qcow2, within 0.93–1.06× (kept qcow2: snapshots and thin provisioning)

Each line is one axis's main effect over the other axes' values, decided by the rule every pair is
decided by (stats/axis_decision.py); this module only chooses which level to set against which and
says it. The level the answer's configuration has is set against each other level of the axis; the
line shows a level decided better than it, else the closest level it was not told apart from, else
the closest one it beat. Where the axis's effect differs with the other axes (the interaction is not
small) the line says the axis is decided per cell."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.domain import axes as axis_registry
from iomatrix.metrics import metric_info
from iomatrix.report.rank import WorkloadRanking
from iomatrix.report.recommend.grammar import directed, interval_text, ratio_words
from iomatrix.report.recommend.resolution import pick_reason
from iomatrix.stats import RatioCI
from iomatrix.stats.axis_decision import AxisDecision, cell_variances_of, decide_axis
from iomatrix.stats.main_effects import stratum_name

# Values that say nothing without their axis (report/naming.py names them so too).
_BARE = frozenset({"none", "off", "on", "full", "metadata", "falloc", "-", "default"})
# Axes a configuration sets; the tier and the workload are what was measured, not a choice.
_NOT_CHOSEN = frozenset({"tier", "workload"})


@dataclass(frozen=True)
class AxisAnswer:
    """One workload's answer on one axis: its decision, the pick's level and the level it is told
    against, and the workload's metric."""

    axis: str
    workload: str
    metric: str
    mine: str  # the answer's level
    rival: str  # the level set against it
    decision: AxisDecision
    pick: Mapping[str, str]  # the answer's whole configuration (for the reason of a kept level)
    # status "per_cell": each stratum and the level its own pair decided better (the ranking's
    # pairwise decision, the same rule), None where that pair is not decided
    cells: tuple[tuple[str, str | None], ...] = ()

    @property
    def every_cell(self) -> str | None:
        """The level decided better in every stratum, where the effect differs per cell but not
        its direction; else None."""
        better = {b for _, b in self.cells}
        return next(iter(better)) if len(better) == 1 and None not in better else None

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What lines over several workloads share: the axis, its status and the levels named (the
        better and the other where decided, else the kept and the rival)."""
        d = self.decision
        if d.status == "per_cell" and self.every_cell is not None:
            other = self.rival if self.every_cell == self.mine else self.mine
            return (self.axis, "every_cell", self.every_cell, other)
        if d.status == "decided" and d.better is not None:
            other = self.rival if d.better == self.mine else self.mine
            return (self.axis, d.status, d.better, other)
        return (self.axis, d.status, self.mine, self.rival)


def level_name(axis: str, value: str) -> str:
    """A level as the cells' short names say it: "writeback", but "cache=none"."""
    return f"{axis}={value}" if value in _BARE else value


def varied_axes(cells: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The configuration axes with more than one value among `cells`, in the registry's order."""
    known = axis_registry.names()
    seen = {a for ax in cells.values() for a in ax if a not in _NOT_CHOSEN}
    order = sorted(seen, key=lambda a: known.index(a) if a in known else len(known))
    # "-": the axis does not apply to that cell (preallocation of a raw image), not a level
    return [a for a in order if len({ax.get(a) for ax in cells.values()} - {"-", None}) > 1]


def axis_answers(wr: WorkloadRanking | None, pick: str | None, alpha: float) -> list[AxisAnswer]:
    """`pick`'s level of every axis `wr`'s cells vary, decided against the other levels; [] where
    fewer than two axes vary, or the ranking was not blocked by round."""
    if wr is None or pick is None or wr.series is None or pick not in wr.cells:
        return []
    full = {label: dict(c.axes) for label, c in wr.cells.items() if label in wr.series}
    axes = varied_axes(full)
    if len(axes) < 2:
        return []
    # strata named by the varied axes alone ("cache=none", not every constant axis beside it)
    levels = {label: {a: ax[a] for a in axes if a in ax} for label, ax in full.items()}
    mine = levels[pick]
    if any(a not in mine for a in axes):
        return []
    decide = _axis_test(wr, levels, axes, alpha)
    out = []
    for axis in axes:
        found = []
        for other in sorted({ax.get(axis) for ax in levels.values()} - {mine[axis], "-", None}):
            try:
                found.append((other, decide(axis, mine[axis], other)))
            except ValueError:  # too few strata or shared rounds: nothing to say on this axis
                continue
        if found:
            out.append(_answer(wr, levels, axis, full[pick], mine[axis], found))
    return out


def _axis_test(
    wr: WorkloadRanking, levels: Mapping[str, Mapping[str, str]], axes: Sequence[str], alpha: float
) -> Callable[[str, str, str], AxisDecision]:
    """decide_axis over `wr`'s rounds, with what every axis's test shares bound once: the ranking's
    prior and residual degrees of freedom, the family size and the cells' fitted variances."""
    assert wr.series is not None  # axis_answers returns [] before, without rounds
    an = wr.ranking.analysis
    prior = an.prior if an is not None else None
    df_resid = float(an.df_resid) if an is not None and an.df_resid else math.inf
    # every level set against the pick's is a test beside the pairs' own family: Bonferroni
    family = sum(len({ax.get(a) for ax in levels.values()} - {"-", None}) - 1 for a in axes)
    # the cells' fitted variances, once for every axis and level (only a prior uses them)
    variances = cell_variances_of(wr.series) if prior is not None and prior.d0 > 0 else {}
    return functools.partial(
        decide_axis,
        wr.series,
        levels,
        higher_is_better=wr.ranking.higher_is_better,
        alpha=alpha,
        margin=wr.decision.margin if wr.decision is not None else 0.05,
        prior=prior,
        df_resid=df_resid,
        family=family,
        variances=variances,
    )


def _answer(
    wr: WorkloadRanking,
    levels: Mapping[str, Mapping[str, str]],
    axis: str,
    pick: Mapping[str, str],
    mine: str,
    found: Sequence[tuple[str, AxisDecision]],
) -> AxisAnswer:
    """The axis's answer against the rival level the line shows (_shown), with its per-cell
    decisions where the effect differs per cell."""
    other, d = _shown(found)
    cells = _cell_decisions(wr, levels, axis, mine, other) if d.status == "per_cell" else ()
    return AxisAnswer(
        axis=axis,
        workload=wr.workload,
        metric=wr.metric,
        mine=mine,
        rival=other,
        decision=d,
        pick=pick,
        cells=cells,
    )


def _cell_decisions(
    wr: WorkloadRanking, levels: Mapping[str, Mapping[str, str]], axis: str, a: str, b: str
) -> tuple[tuple[str, str | None], ...]:
    """Per stratum of the other axes, the level of `axis` its own pair (a's cell against b's) was
    decided better by the ranking, None where not decided."""
    at = {(stratum_name(lv, axis), lv.get(axis)): label for label, lv in levels.items()}
    sign = 1.0 if wr.ranking.higher_is_better else -1.0
    out = []
    for s in sorted({s for s, lv in at if lv == a} & {s for s, lv in at if lv == b}):
        la, lb = at[(s, a)], at[(s, b)]
        try:
            c = wr.ranking.comparison(la, lb)
            ca, cb = wr.ranking.row(la).centre, wr.ranking.row(lb).centre
        except KeyError:
            continue
        if not c.significant or ca is None or cb is None:
            out.append((s, None))
            continue
        out.append((s, a if sign * (ca - cb) > 0 else b))
    return tuple(out)


def _shown(found: Sequence[tuple[str, AxisDecision]]) -> tuple[str, AxisDecision]:
    """Which rival level the line shows: one whose effect differs per cell, else one decided better
    than the pick's, else the closest not told apart, else the closest the pick beat."""
    per_cell = [f for f in found if f[1].status == "per_cell"]
    if per_cell:
        return per_cell[0]
    better = [f for f in found if f[1].status == "decided" and f[1].better == f[0]]
    if better:
        return min(better, key=lambda f: f[1].p_value)
    undecided = [f for f in found if f[1].status in ("open", "equivalent")]
    pool = undecided or list(found)
    return max(pool, key=lambda f: f[1].p_value)


def _gain(a: AxisAnswer, of: str) -> RatioCI:
    """Level `of` against the other, oriented > 1 = better as every gain is
    (report/recommend/grammar.py: its value over the other's for a throughput, the other's over
    its own for a latency)."""
    d = a.decision
    r = RatioCI(d.ratio, d.low, d.high)  # mine / rival, in values
    if of != a.mine:
        r = r.turned()
    return r if metric_info(a.metric).higher_is_better else r.turned()


def _by_stratum(a: AxisAnswer, better: str) -> str:
    """Where the axis was decided on the strata's average while their own ratios differ by more
    than the margin (stats/axis_decision.py's ``by_stratum``), each stratum's ratio, oriented as
    the line's: " (1.92× at format=qcow2, 2.31× at format=raw)"; else ""."""
    if not a.decision.by_stratum:
        return ""
    parts = []
    for stratum, r in sorted(a.decision.effect.strata.items()):
        g = _gain(dataclasses.replace(a, decision=_as_ratio(a.decision, r)), better)
        parts.append(f"{g.ratio:.2f}× at {stratum}")
    return f" ({', '.join(parts)})"


def _as_ratio(d: AxisDecision, ratio: float) -> AxisDecision:
    """`d` with a stratum's ratio in place of the common one and no interval (for _gain)."""
    return dataclasses.replace(d, ratio=ratio, low=None, high=None)


def axis_lines(answers: Sequence[AxisAnswer]) -> list[str]:
    """One line per axis and outcome over the workloads (the quickstart's jobs): the workloads are
    named where more than one answers."""
    several = len({a.workload for a in answers}) > 1
    return [_line(g, several) for groups in _by_axis(answers).values() for g in groups]


def _on(a: AxisAnswer, several: bool) -> str:
    return f" on {a.workload}" if several else ""


def _line(group: Sequence[AxisAnswer], several: bool) -> str:
    first = group[0]
    axis, status = first.axis, first.decision.status
    if status == "decided":
        better = first.decision.better or first.mine
        other = level_name(axis, first.rival if better == first.mine else first.mine)
        said = []
        for i, a in enumerate(group):
            words = ratio_words(_gain(a, better), a.metric)
            # the level it is told against, once: "1.21× cache=none", "… than cache=none"
            if i == 0:
                words = f"{words} than {other}" if directed(words) else f"{words} {other}"
            said.append(f"{words}{_on(a, several)}{_by_stratum(a, better)}")
        return f"{axis}: {level_name(axis, better)}, {', '.join(said)} (decided)"
    both = f"{level_name(axis, first.mine)} or {level_name(axis, first.rival)}"
    if status == "per_cell":
        parts = []
        for a in group:
            decided = dict(a.cells)
            strata = sorted(a.decision.effect.strata.items())
            cells = ", ".join(
                f"{r:.2f}× at {s}{' (decided)' if decided.get(s) else ''}" for s, r in strata
            )
            parts.append(f"{cells}{_on(a, several)}")
        against = f"{level_name(axis, first.mine)} against {level_name(axis, first.rival)}"
        if first.every_cell is not None:
            return (
                f"{axis}: {level_name(axis, first.every_cell)}, decided in every cell, by an "
                f"effect that differs with the other axes ({against}: {'; '.join(parts)})"
            )
        return (
            f"{axis}: decided per cell, its effect differs with the other axes "
            f"({against}: {'; '.join(parts)})"
        )
    spans = []
    for a in group:  # the kept level against the rival, > 1: the kept one is better
        g = _gain(a, a.mine)
        if g.low is not None and g.high is not None:
            spans.append(f"{interval_text(g.low, g.high)}×{_on(a, several)}")
    within = f"within {', '.join(spans)}" if spans else "no interval yet"
    margin = f"equivalent, {within}" if status == "equivalent" else within
    rival = {**first.pick, axis: first.rival}
    # a level at QEMU's own default is kept as such (the tie-break's keeper), as a role's pick is
    defaults = {a.name: str(a.default) for a in axis_registry.plan_axes()}
    keeper = "QEMU's default" if defaults.get(axis) == first.mine else ""
    reason = pick_reason(first.pick, rival, keeper)
    kept = level_name(axis, first.mine)
    # a format's property names the format already ("qcow2: snapshots and thin provisioning")
    said = reason if reason.startswith(f"{first.mine}:") else f"{kept}: {reason}"
    return f"{axis}: {both}, {margin} (kept {said})"


def _outcome(group: Sequence[AxisAnswer]) -> str:
    """A group's outcome in a few words: "writeback 1.44× cache=none (decided)", "raw kept (not
    told apart)", "raw kept (equivalent)", "per cell"."""
    first = group[0]
    axis, d = first.axis, first.decision
    if d.status == "decided" and d.better is not None:
        other = first.rival if d.better == first.mine else first.mine
        g = _gain(first, d.better).ratio
        # one workload: "writeback 1.44× cache=none"; several, whose ratios differ: "… over …"
        said = f" {g:.2f}×" if g is not None and len(group) == 1 else " over"
        return f"{level_name(axis, d.better)}{said} {level_name(axis, other)} (decided)"
    if d.status == "per_cell" and first.every_cell is not None:
        other = first.rival if first.every_cell == first.mine else first.mine
        better = level_name(axis, first.every_cell)
        return f"{better} over {level_name(axis, other)} in every cell (decided)"
    if d.status == "per_cell":
        return "decided per cell"
    told = "equivalent" if d.status == "equivalent" else "not told apart"
    return f"{level_name(axis, first.mine)} kept ({told} from {level_name(axis, first.rival)})"


def _by_axis(answers: Sequence[AxisAnswer]) -> dict[str, list[list[AxisAnswer]]]:
    """axis → its outcome groups (AxisAnswer.key), in the answers' order."""
    groups: dict[tuple[str, str, str, str], list[AxisAnswer]] = {}
    for a in answers:
        groups.setdefault(a.key, []).append(a)
    out: dict[str, list[list[AxisAnswer]]] = {}
    for key, group in groups.items():
        out.setdefault(key[0], []).append(group)
    return out


def axis_brief(answers: Sequence[AxisAnswer]) -> list[str]:
    """One line per axis for a crowded screen: each outcome in a few words, with the workloads it
    holds for where they differ ("cache: writeback 1.44× cache=none (decided) on file-server:files;
    decided per cell on database:data")."""
    out = []
    for axis, groups in _by_axis(answers).items():
        apart = len(groups) > 1
        parts = [
            _outcome(g) + (f" on {', '.join(a.workload for a in g)}" if apart else "")
            for g in groups
        ]
        out.append(f"{axis}: {'; '.join(parts)}")
    return out
