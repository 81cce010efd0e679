"""`iomatrix recommend`: which disk configuration to use, how much it gains, and what it risks.

The report is a data model (dataclasses, `as_dict()` for JSON); render.py formats it. The choice of a
configuration is made in exactly one place, `choose()`: today it takes the ranking's best eligible cell and
names the cells of its group as tied (stats/ranking.py); the statistics decision rule (stats/decision.py)
replaces its body when it lands. Risks are QEMU's documented semantics (`domain.CACHE`, `risk.risk_of`),
labelled as such; `measured_risks()` is the seam where the durability tier's measured verdicts (report/durability.py)
take precedence, labelled "measured".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from iomatrix import domain
from iomatrix.current import CurrentConfig
from iomatrix.domain import BASELINES, CACHE, CacheMode, Modifier, SafetyLevel, axes
from iomatrix.errors import UserError
from iomatrix.guest.accel import TCG_WARNING
from iomatrix.matrix import applying_axes
from iomatrix.plan.current_cell import stored_current
from iomatrix.report.durability import MeasuredIndex, measured_statements
from iomatrix.report.objective import Objective, objective_metric
from iomatrix.report.quality import run_interference
from iomatrix.report.query import CellWorkload, cell_workloads, sweep_info
from iomatrix.report.rank import (
    WorkloadRanking,
    primary_metric,
    rank_workload,
    run_rounds,
    run_values,
    workload_names,
)
from iomatrix.risk import risk_of
from iomatrix.snippets import DiskConfig, SnippetSet, snippets_for
from iomatrix.stats import RatioCI, ratio_ci
from iomatrix.stats.decision import DEFAULT_THRESHOLD, DEFAULT_TIE_BREAK, check_threshold, check_tie_break
from iomatrix.store import Store
from iomatrix.tiers import is_reference, known_tier, tier_class, tier_classes, tier_order, workload_owner
from iomatrix.tiers.base import Tier
from iomatrix.workloads import PRESETS

DOCUMENTED = "documented, not measured"


# --------------------------------------------------------------------------- requirements


@dataclass(frozen=True)
class Requirement:
    name: str
    meaning: str

    def met_by(self, axes: dict[str, str]) -> bool:
        cache, modifier = axes.get("cache", domain.NA), axes.get("modifier", Modifier.NONE)
        if cache not in {c.value for c in CacheMode}:
            # No QEMU cache (bare metal, the null ceiling): the host's own stack honours flushes unless a
            # modifier drops them; the other requirements are about a VM's disk and cannot be met.
            return self.name == SAFE_DEFAULT and modifier != Modifier.EATMYDATA
        if self.name == "power-loss-safe":
            return domain.safety_level(cache, modifier) != SafetyLevel.UNSAFE
        if self.name == "every-write-durable":
            return domain.safety_level(cache, modifier) == SafetyLevel.SAFE
        if self.name == "migratable":
            return CACHE[CacheMode(cache)].direct
        if self.name == "snapshots":
            return axes.get("format") == domain.Format.QCOW2
        raise AssertionError(self.name)


# The requirement every answer meets unless the user opts out with --allow-data-loss (issue 38): a configuration
# that drops guest flushes (cache=unsafe, eatmydata) is what QEMU's and Proxmox's documentation reserve for
# throw-away guests, so it is never the tool's first advice.
SAFE_DEFAULT = "power-loss-safe"
ALLOW_DATA_LOSS = "--allow-data-loss"

REQUIREMENTS: dict[str, Requirement] = {r.name: r for r in (
    Requirement("power-loss-safe", "what the guest flushed survives a host crash or power loss (flushes honoured, "
                                   "no cache=unsafe, no eatmydata)"),
    Requirement("every-write-durable", "every completed write survives a power loss (cache=writethrough or "
                                       "directsync)"),
    Requirement("migratable", "safe for live migration: the host page cache is bypassed (cache=none or "
                              "directsync; libvirt refuses other modes without --unsafe)"),
    Requirement("snapshots", "internal snapshots and backing chains: format=qcow2"),
)}


def parse_requirements(names: Sequence[str], allow_data_loss: bool = False) -> list[Requirement]:
    """The requirements named (comma-separated or repeated), with power-loss-safe added unless
    `allow_data_loss` (or every-write-durable, which implies it, is asked for)."""
    out = []
    for raw in names:
        for n in filter(None, (x.strip() for x in raw.split(","))):
            if n not in REQUIREMENTS:
                raise UserError(f"unknown requirement '{n}'", hint=f"use {', '.join(REQUIREMENTS)}")
            if REQUIREMENTS[n] not in out:
                out.append(REQUIREMENTS[n])
    if not allow_data_loss and not {r.name for r in out} & {SAFE_DEFAULT, "every-write-durable"}:
        out.insert(0, REQUIREMENTS[SAFE_DEFAULT])
    return out


def unmet(requirements: Sequence[Requirement], cell_axes: dict[str, str]) -> list[Requirement]:
    return [q for q in requirements if not q.met_by(cell_axes)]


# --------------------------------------------------------------------------- risks


@dataclass(frozen=True)
class RiskStatement:
    situation: str
    text: str
    basis: str  # DOCUMENTED, or "measured" once a durability tier supplies verdicts


SITUATIONS = ("QEMU crash", "host crash or power loss", "live migration", "guest that does not send flushes")


def measured_risks(cell: CellWorkload | None, measured: MeasuredIndex | None = None) -> dict[str, str]:
    """Measured durability verdicts for a cell, per situation, from the durability tier's trials anywhere in the
    database (`measured`, built once per report); they take precedence over the documented semantics."""
    if cell is None or measured is None:
        return {}
    return measured_statements(measured, cell.axes)


def risk_statements(cache: str, modifier: str = Modifier.NONE, cell: CellWorkload | None = None,
                    measured: MeasuredIndex | None = None) -> list[RiskStatement]:
    risk = risk_of(cache, modifier)
    if risk is None:
        return []
    sem = CACHE[CacheMode(cache)]
    if sem.direct:
        migration = ("safe on shared storage: the host page cache is bypassed, so the destination reads what the "
                     "source wrote")
    else:
        migration = ("unsafe on shared storage: writes may sit in the source host's page cache; libvirt refuses "
                     "live migration unless forced with --unsafe")
    if sem.no_flush or modifier == Modifier.EATMYDATA:
        no_flush = "nothing changes: flushes are dropped for every guest anyway"
    elif not sem.write_cache:
        no_flush = "safe: QEMU flushes after every write, the guest does not have to"
    elif sem.direct:
        no_flush = ("its writes may be lost on power loss from the disk's volatile cache; they never wait in host "
                    "RAM")
    else:
        no_flush = ("its writes may wait in host RAM until the kernel writes them back (seconds), and are lost on "
                    "a host crash or power loss")
    texts = dict(zip(SITUATIONS, (risk.qemu_crash, risk.power_loss, migration, no_flush), strict=True))
    found = measured_risks(cell, measured)
    return [RiskStatement(s, found.get(s, texts[s]), "measured" if s in found else DOCUMENTED)
            for s in SITUATIONS]


# --------------------------------------------------------------------------- the choice (one seam)


@dataclass(frozen=True)
class Choice:
    cell: str  # the chosen cell's label
    tied: tuple[str, ...]  # the rest of the top group, in tie-break order
    rule: str  # the decision in one or two sentences


def choose(wr: WorkloadRanking) -> Choice | None:
    """THE decision, in one place: the statistics decision rule (stats/decision.py) already applied to the
    ranking by rank_workload. None when it gives no answer (nothing eligible, or contenders the data cannot
    separate from the leader yet); `wr.decision.statement` then says why."""
    d = wr.decision
    if d is None or d.answer is None:
        return None
    return Choice(d.answer, d.tied, d.statement)


# --------------------------------------------------------------------------- the verdict


@dataclass
class Gain:
    """How the chosen configuration compares with another: chosen/other for higher-is-better figures,
    other/chosen for lower-is-better ones, so > 1 always means the choice is better."""

    against: str
    label: str | None  # the compared cell; None when not in the sweep
    ratio: RatioCI | None
    note: str = ""
    # Values of the current configuration compared at the cell's ("iothread=on as off (not varied)"): the short
    # form of what `note` says, for the headline.
    assumed: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        r = self.ratio
        return {"against": self.against, "cell": self.label, "note": self.note, "assumed": list(self.assumed),
                "ratio": None if r is None else r.ratio, "ci95_low": None if r is None else r.low,
                "ci95_high": None if r is None else r.high}


@dataclass
class Declined:
    """A configuration the data show faster than the answer that the requirements exclude: stated in one line
    with its measured gain and its risk, chosen only when the user drops the requirement it fails
    (--allow-data-loss for the default power-loss-safe)."""

    cell: str
    gain: Gain  # the declined configuration over the answer (> 1: it is faster)
    fails: tuple[str, ...]  # the requirements it does not meet
    risk: str  # what it risks on a host crash or power loss
    opt_in: str  # how to choose it anyway

    def text(self) -> str:
        r = self.gain.ratio
        fig = "" if r is None or r.ratio is None else f"{r.ratio:.2f}×" + (
            f" ({max(r.low, 0):.2f}–{r.high:.2f})" if r.low is not None and r.high is not None else "")
        return (f"{self.cell} would gain {fig} over the answer but is not {' or '.join(self.fails)}; on power "
                f"loss: {self.risk}; chosen only with {self.opt_in}")

    def as_dict(self) -> dict[str, Any]:
        return {"cell": self.cell, "vs_answer": self.gain.as_dict(), "fails": list(self.fails), "risk": self.risk,
                "opt_in": self.opt_in, "text": self.text()}


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
    declined: Declined | None = None  # the faster configuration the requirements exclude, if the data show one
    risks: list[RiskStatement] = field(default_factory=list)
    snippets: SnippetSet | None = None
    missing: str = ""  # why there is no choice
    basis: str = ""  # when another tier than the one closest to a VM answered: which, why, and what it decides
    # No answer yet, but the tie-break picks one among the cells the data cannot separate: that pick's figures,
    # risks and snippets (its `choice` is the pick, named as such), so a headline can still say what to use.
    provisional: Verdict | None = None

    def as_dict(self) -> dict[str, Any]:
        out = self._fields()
        if self.provisional is not None:
            out["provisional"] = self.provisional._fields()
        found = answer_of(self)
        out["answer"] = None if found is None else {"cell": found[0].choice.cell if found[0].choice else None,
                                                    "status": found[1]}
        return out

    def _fields(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "metric": self.metric, "higher_is_better": self.higher_is_better,
            "tier": self.tier, "missing": self.missing or None, "basis": self.basis or None,
            "choice": None if self.choice is None else {"cell": self.choice.cell, "tied": list(self.choice.tied),
                                                        "rule": self.choice.rule},
            "mean": self.mean, "ci95_low": self.ci[0], "ci95_high": self.ci[1], "n": self.n,
            "gains": [g.as_dict() for g in self.gains],
            "to_baremetal": None if self.to_baremetal is None else self.to_baremetal.as_dict(),
            "to_ceiling": None if self.to_ceiling is None else self.to_ceiling.as_dict(),
            "requirement_cost": None if self.requirement_cost is None else self.requirement_cost.as_dict(),
            "declined": None if self.declined is None else self.declined.as_dict(),
            "risks": [{"situation": r.situation, "text": r.text, "basis": r.basis} for r in self.risks],
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
    objective: str | None = None  # --objective when given (report/objective.py); None: primary metrics
    allow_data_loss: bool = False  # --allow-data-loss: configurations that drop guest flushes may be chosen

    def as_dict(self) -> dict[str, Any]:
        return {"sweep": self.sweep_id, "plan": self.plan, "status": self.status,
                "requirements": [{"name": r.name, "meaning": r.meaning} for r in self.requirements],
                "current": None if self.current is None else {"axes": self.current.axes,
                                                              "source": self.current.source,
                                                              "defaulted": self.current.defaulted,
                                                              "l2_cache_bytes": self.current.l2_cache_bytes,
                                                              "notes": self.current.notes},
                "allow_data_loss": self.allow_data_loss,
                "verdicts": [v.as_dict() for v in self.verdicts], "warnings": self.warnings,
                **({"objective": self.objective} if self.objective is not None else {})}


def _gain(against: str, chosen: CellWorkload, other: CellWorkload | None, metric: str, higher: bool,
          missing_note: str) -> Gain:
    if other is None:
        return Gain(against, None, None, missing_note)
    a, b = chosen.samples.get(metric, []), other.samples.get(metric, [])
    if len(a) < 2 or len(b) < 2:
        return Gain(against, other.label(), None, "fewer than 2 runs: no interval")
    rc = ratio_ci(a, b) if higher else ratio_ci(b, a)
    return Gain(against, other.label(), rc, "same cell" if other is chosen else "")


def _asked_later_axes(cells: Sequence[CellWorkload], like: CellWorkload) -> list[str]:
    """The later axes (zero detection, cluster size, …) whose values differ among the cells that share `like`'s
    cache and aio: the question a workload table asks on one cache × aio cell."""
    peers = [c for c in cells if c.axes.get("cache") == like.axes.get("cache") and
             c.axes.get("aio") == like.axes.get("aio")]
    return [a.name for a in axes.axes() if not a.always_named and not a.free_values
            and len({c.axes.get(a.name, domain.NA) for c in peers}) > 1]


def _matching(cells: Sequence[CellWorkload], like: CellWorkload, **axes: str) -> CellWorkload | None:
    """The cell with `axes` and otherwise the same axes as `like` (same tier and backing)."""
    want = {**like.axes, **axes}
    for c in cells:
        if all(c.axes[k] == v for k, v in want.items()):
            return c
    return None


# An image size no L2 cache default covers: where a workload's image is the plan's (not known here), an axis whose
# effect depends on the image's size (the L2 cache, the cluster layout) is never said to be unable to show.
_UNKNOWN_IMAGE_BYTES = 1 << 60


def _matching_current(cells: Sequence[CellWorkload], like: CellWorkload,
                      cur: CurrentConfig) -> tuple[CellWorkload | None, list[str], list[str], str]:
    """The cell of `cells` (one workload, one tier) that runs the user's current configuration, what the
    comparison had to assume (in full, and short: "iothread=on as off (not varied)"), and why there is no such
    cell when the sweep could not have measured one.

    Axes the sweep shows as "-" (bare metal has no format or bus) cannot differ; the first release's axes (cache,
    aio, format, …) must match. A later axis the tier ran at one value for this workload (zero detection for
    reads; an IOThread where the NBD export cannot have one) is compared at that value and said so, with why: the
    workload cannot show it, or the tier did not vary it. An L2 cache bound that holds only part of the
    workload's image is between the measured values: no cell."""
    workload = PRESETS.get(like.workload)
    want: dict[str, str] = {}
    notes: list[str] = []
    short: list[str] = []
    # A later axis the configuration does not set runs at QEMU's default (it is left out as in a cell's key); a
    # first-release axis it does not name (libvirt without <driver type=>) is unknown and not compared.
    given = {**{a.name: str(a.default) for a in axes.axes() if not a.always_named and not a.free_values},
             **cur.axes}
    try:
        applying = set(applying_axes(like.axes["tier"]))
    except KeyError:  # a tier this version does not know (an old database)
        applying = set()
    for k, v in given.items():
        axis = axes.REGISTRY.get(k)
        mine = like.axes.get(k)
        if mine is None and axis is not None and not axis.always_named and k in applying:
            mine = str(axis.default)  # an axis the sweep does not name: every cell ran QEMU's default
        if mine is None or mine == domain.NA:
            continue
        if axis is not None and not axis.always_named and v != mine and \
                len({c.axes.get(k, mine) for c in cells}) == 1:
            why = None
            if workload is not None and axis.shown_by is not None:
                why = axis.shown_by({**like.axes, k: v}, workload.shape,
                                    workload.image_bytes or _UNKNOWN_IMAGE_BYTES)
            notes.append(f"{k}={v} compared at {k}={mine}: " +
                         (f"{like.workload} {why}" if why else
                          f"the {like.axes['tier']} tier ran {like.workload} at {k}={mine} only"))
            short.append(f"{k}={v} as {mine} ({'cannot show' if why else 'not varied'})")
            continue
        if k in like.axes:
            want[k] = v
    if cur.l2_cache_bytes is not None and workload is not None and workload.image_bytes and \
            want.get("l2_cache") == "whole-image" and \
            not axes.l2_cache_holds(cur.l2_cache_bytes, workload.image_bytes, {**like.axes, **want}):
        return None, notes, short, (f"its L2 cache bound ({axes.size_words(cur.l2_cache_bytes)}) holds part of the "
                                    f"L2 metadata of {like.workload}'s {axes.size_words(workload.image_bytes)} image: "
                                    "between l2_cache=default and whole-image, neither measured")
    return _matching(cells, like, **want), notes, short, ""


def workload_verdict(cws: list[CellWorkload], wr: WorkloadRanking, requirements: list[Requirement],
                     current: CurrentConfig | None, restricted: WorkloadRanking | None = None,
                     measured: MeasuredIndex | None = None) -> Verdict:
    """`wr` ranks every cell of the workload's tier; `restricted` only those meeting `requirements` (None when
    none does or there are no requirements)."""
    v = Verdict(wr.workload, wr.metric, wr.ranking.higher_is_better, wr.tier, None)
    chosen_from = restricted if requirements else wr
    choice = choose(chosen_from) if chosen_from is not None else None
    if choice is None:
        v.missing = _why_no_choice(wr, chosen_from, requirements)
        d = chosen_from.decision if chosen_from is not None else None
        if d is not None and d.provisional is not None and d.provisional in wr.cells:
            pick = Choice(d.provisional, tuple(c for c in (d.leader, *d.tied, *d.unresolved)
                                               if c and c != d.provisional), d.statement)
            v.provisional = _chosen_verdict(Verdict(v.workload, v.metric, v.higher_is_better, v.tier, pick), cws,
                                            wr, chosen_from, requirements, current, measured)
        return v
    v.choice = choice
    return _chosen_verdict(v, cws, wr, chosen_from, requirements, current, measured)


def _chosen_verdict(v: Verdict, cws: list[CellWorkload], wr: WorkloadRanking, chosen_from: WorkloadRanking | None,
                    requirements: list[Requirement], current: CurrentConfig | None,
                    measured: MeasuredIndex | None) -> Verdict:
    """`v` with the figures, comparisons, risks and snippets of its choice (`v.choice`)."""
    choice = v.choice
    assert choice is not None
    r = chosen_from.ranking if chosen_from is not None else wr.ranking
    cell = wr.cells[choice.cell]
    row = r.row(choice.cell)  # the ranking the choice was made in
    v.mean, v.ci, v.n = row.summary.mean, (row.summary.ci_low, row.summary.ci_high), row.summary.n
    same_tier = [c for c in cws if c.workload == wr.workload and c.axes["tier"] == wr.tier]
    v.gains = _gains(wr, cell, same_tier, r.higher_is_better, current)
    if not is_reference(wr.tier):
        v.to_baremetal, v.to_ceiling = _to_references(wr, choice.cell)
    if requirements:
        v.requirement_cost = _requirement_cost(wr, choice.cell, r.higher_is_better)
        v.declined = _declined(wr, v.requirement_cost, requirements, measured)
    v.risks = risk_statements(cell.axes["cache"], cell.axes.get("modifier", Modifier.NONE), cell, measured)
    v.snippets = snippets_for(DiskConfig.from_axes(cell.axes, cell.backing.get("kind")))
    return v


def _why_no_choice(wr: WorkloadRanking, chosen_from: WorkloadRanking | None,
                   requirements: list[Requirement]) -> str:
    """Why the ranking the choice is made in (`chosen_from`: restricted to the requirements, or all of `wr`)
    gives no answer: a requirement no swept cell meets, none meeting them all, or the decision's own reason."""
    for q in requirements:
        if not any(q.met_by(c.axes) for c in wr.cells.values()):
            return f"requirement {q.name} excluded every swept cell ({q.meaning})"
    if requirements and chosen_from is None:
        return "no swept cell meets " + " and ".join(q.name for q in requirements) + " together"
    d = chosen_from.decision if chosen_from is not None else None
    return d.statement if d is not None else "no cell is eligible: too few runs or too noisy"


def _gains(wr: WorkloadRanking, cell: CellWorkload, same_tier: list[CellWorkload], higher: bool,
           current: CurrentConfig | None) -> list[Gain]:
    """The chosen cell against the user's current configuration and the tools' defaults, in the same tier;
    a compared cell that looks better says why it was not chosen."""
    gains = []
    if current is not None:
        other, assumed, short, between = _matching_current(same_tier, cell, current)
        g = _gain(f"current ({current.label()})", cell, other, wr.metric, higher,
                  between or "not measured in this sweep: add its values to the plan to compare")
        g.note = "; ".join(filter(None, [g.note, *assumed]))
        g.assumed = tuple(short) if other is not None else ()
        gains.append(g)
    for b in BASELINES:
        twin = axes.baseline_values(cell.axes, b)
        other = _matching(same_tier, cell, **{k: v for k, v in twin.items() if k in cell.axes})
        gains.append(_gain(f"{b.name} (cache={b.cache} aio={b.aio})", cell, other, wr.metric, higher,
                           "not in this sweep"))
    # A question asked on one cache × aio cell (a workload table: zero detection at cache=none, io_uring) has no
    # twin at QEMU's default cache and aio; its own axes at QEMU's defaults are then the comparison.
    later = axes.later_at_default(cell.axes)
    if all(g.label is None for g in gains if g.against.startswith(BASELINES[0].name)):
        if later:
            other = _matching(same_tier, cell, **later)
            if other is not None:
                said = " ".join(f"{a}={v}" for a, v in later.items())
                gains.append(_gain(f"{BASELINES[0].name} {said}", cell, other, wr.metric, higher, ""))
        elif asked := _asked_later_axes(same_tier, cell):
            # The chosen cell holds the question's axes at QEMU's defaults (64k clusters chosen over 1M): it is
            # itself the comparison.
            said = " ".join(f"{a}={cell.axes[a]}" for a in asked)
            gains.append(_gain(f"{BASELINES[0].name} {said}", cell, cell, wr.metric, higher, ""))
    for g in gains:
        if g.label in wr.cells and not wr.ranking.row(g.label).eligible:
            why = "not ranked: " + ", ".join(wr.ranking.row(g.label).flags).replace("_", " ")
            g.note = "; ".join(filter(None, [g.note, why]))
    return gains


def _to_references(wr: WorkloadRanking, chosen: str) -> tuple[Gain, Gain | None]:
    """The chosen cell of a non-reference tier over bare metal, and over the null ceiling (the one of its bus
    when there is one): how much of the host's speed, and of the virtual I/O path's, it keeps."""
    cell = wr.cells[chosen]
    to_baremetal = Gain("bare metal", None, wr.to_baremetal.get(chosen), "cell/bare metal")
    ceilings = [c for c, _ in wr.ceiling if c.axes.get("bus") == cell.axes.get("bus")] or [c for c, _ in wr.ceiling]
    if not ceilings:
        return to_baremetal, None
    a, b = cell.samples[wr.metric], ceilings[0].samples[wr.metric]
    return to_baremetal, Gain("null ceiling", ceilings[0].label(),
                              ratio_ci(a, b) if len(a) >= 2 and len(b) >= 2 else None, "cell/ceiling")


def _requirement_cost(wr: WorkloadRanking, chosen: str, higher: bool) -> Gain | None:
    """What the requirements cost: the unrestricted answer over the chosen cell (None when they cost nothing)."""
    free = wr.decision.answer if wr.decision is not None else None
    if free is None or free == chosen:
        return None
    g = _gain("best without the requirements", wr.cells[free], wr.cells[chosen], wr.metric, higher, "")
    return Gain(f"{free} (the answer without requirements)", free, g.ratio,
                "the unrestricted answer is this many times better")


def _declined(wr: WorkloadRanking, cost: Gain | None, requirements: list[Requirement],
              measured: MeasuredIndex | None) -> Declined | None:
    """The unrestricted answer the requirements excluded, with what it risks and how to choose it anyway."""
    if cost is None or cost.label is None or cost.label not in wr.cells:
        return None
    cell = wr.cells[cost.label]
    fails = unmet(requirements, cell.axes)
    if not fails:
        return None
    power = next((r.text for r in risk_statements(cell.axes.get("cache", domain.NA),
                                                  cell.axes.get("modifier", Modifier.NONE), cell, measured)
                  if r.situation == SITUATIONS[1]), "not documented for this configuration")
    others = [q.name for q in fails if q.name != SAFE_DEFAULT]
    opt_in = " and ".join([*([ALLOW_DATA_LOSS] if len(others) < len(fails) else []),
                           *(f"without --require {n}" for n in others)])
    return Declined(cost.label, cost, tuple(q.name for q in fails), power, opt_in)


def recommend(store: Store, sweep_id: int, *, workload: str | None = None, requirements: Sequence[str] = (),
              current: CurrentConfig | None = None, scores: Sequence[str] | None = None, min_n: int = 3,
              max_noise: float = 0.10, threshold: float = DEFAULT_THRESHOLD,
              tie_break: Sequence[str] = DEFAULT_TIE_BREAK, objective: Objective | None = None,
              allow_data_loss: bool = False) -> Recommendation:
    """Verdicts per workload, then per weighted score (`scores`; default: every score when the sweep has a guest
    tier and no single workload was asked for). ``objective``: what each workload is ranked by
    (report/objective.py; None: its primary metric). Only configurations that honour guest flushes are chosen
    unless `allow_data_loss` (parse_requirements)."""
    info = sweep_info(store, sweep_id)
    if current is None:  # the current configuration the sweep measured (run --current), if any
        current = stored_current(info["plan_definition"], info["pruned"])
    reqs = parse_requirements(requirements, allow_data_loss)
    cws = cell_workloads(store, sweep_id)
    names = workload_names(cws, sweep_id, workload)
    verdicts = []
    # The same inputs 'iomatrix rank' uses: runs blocked by round, disturbed runs flagged.
    all_runs = [rid for c in cws for rid in c.runs]
    rounds = run_rounds(store, all_runs)
    interference = run_interference(store, sweep_id, all_runs)
    measured = MeasuredIndex.from_store(store)
    for w in names:
        owner = verdict_tier(w)
        if owner is not None:
            # Trials are not ranked by how many records they lost: the verdicts per configuration are the answer.
            lines = owner.verdict_lines(store, sweep_id, w)
            verdicts.append(Verdict(w, primary_metric(w)[0], False, owner.name, None,
                                    missing=f"{owner.verdicts}, not a speed ranking: " + "; ".join(
                                        x.strip() for x in lines)))
            continue
        ids = [rid for c in cws if c.workload == w for rid in c.runs]
        chosen = None if objective is None else objective_metric(objective, w)
        vals = run_values(store, ids, chosen or primary_metric(w)[0])
        per_run = {rid: (rounds[rid], val) for rid, val in vals.items() if rid in rounds}
        kw: dict[str, Any] = {"metric": chosen, "min_n": min_n, "max_noise": max_noise, "per_run": per_run,
                              "interference": interference, "threshold": check_threshold(threshold),
                              "tie_break": check_tie_break(tie_break)}
        wr = rank_workload(cws, w, **kw)
        if wr is None:
            m = "no ranked cells (only the null ceiling, or no figure for the primary metric)"
            verdicts.append(Verdict(w, "", True, "", None, missing=m))
            continue

        verdicts.append(_verdict_on_its_basis(cws, wr, reqs, current, measured, kw))
    if scores is None:
        scores = SCORES if workload is None and any(_is_vm_view(c.axes["tier"]) for c in cws) else ()
    for sc in scores:
        if sc not in SCORES:
            raise UserError(f"unknown score '{sc}'", hint=f"use {', '.join(SCORES)}")
    verdicts += score_verdicts(store, sweep_id, scores, reqs, measured)
    warnings = []
    if not cws:
        warnings.append(f"sweep {sweep_id} has no completed runs yet: nothing to recommend (run 'iomatrix run' "
                        "with this database: it resumes)")
    if info["status"] != "finished":
        warnings.append(f"sweep {sweep_id} is {info['status']}: figures may change when it completes")
    if any("tcg" in a for c in cws for a in c.accel):
        warnings.append(TCG_WARNING)
    return Recommendation(sweep_id, info["plan"], info["status"], reqs, current, verdicts, warnings,
                          None if objective is None else objective.value, allow_data_loss)


def _verdict_on_its_basis(cws: list[CellWorkload], wr: WorkloadRanking, reqs: list[Requirement],
                          current: CurrentConfig | None, measured: MeasuredIndex, kw: dict[str, Any]) -> Verdict:
    """The verdict of the tier closest to a VM (`wr`), or of the tier below it when that one cannot answer or
    its guests ran under TCG."""
    v = _tier_verdict(cws, wr, reqs, current, measured, kw)
    emulated = _emulated(cws, wr.workload, wr.tier)
    if v.choice is None or emulated:
        v = _answer_from_another_tier(cws, wr.workload, v, reqs, current, measured, kw, emulated=emulated) or v
    return v


def _tier_verdict(cws: list[CellWorkload], wr: WorkloadRanking, reqs: list[Requirement],
                  current: CurrentConfig | None, measured: MeasuredIndex, kw: dict[str, Any]) -> Verdict:
    restricted = None
    if reqs:
        keep = [c for c in cws if c.axes["tier"] != wr.tier or c.axes["backing"] == domain.NULL_BACKING
                or all(q.met_by(c.axes) for q in reqs)]
        restricted = rank_workload(keep, wr.workload, tier=wr.tier, **kw)
    return workload_verdict(cws, wr, reqs, current, restricted, measured)


def _answer_from_another_tier(cws: list[CellWorkload], workload: str, unanswered: Verdict,
                              reqs: list[Requirement], current: CurrentConfig | None, measured: MeasuredIndex,
                              kw: dict[str, Any], emulated: bool = False) -> Verdict | None:
    """When the tier closest to a VM cannot answer, or its guests ran under TCG (emulated: 30–50% run-to-run
    swings, timings bound by instruction emulation), the next tier below it (the block layer: the same QEMU
    graph at native speed) is the basis for the axes it measures, and the verdict says so and names what it does
    not decide (the bus). Under TCG that tier is the basis even when it has only a tie-break's pick."""
    tiers = {c.axes["tier"] for c in cws if c.workload == workload} - {unanswered.tier}
    for t in sorted((t for t in tiers if not is_reference(t)), key=tier_order, reverse=True):
        wr = rank_workload(cws, workload, tier=t, **kw)
        if wr is None:
            continue
        v = _tier_verdict(cws, wr, reqs, current, measured, kw)
        if v.choice is None and not (emulated and v.provisional is not None):
            continue
        # The axes the sweep names (report.query.shown_axes): a later axis it leaves at its default is not a choice.
        named = {a for c in cws for a in c.axes}
        # A later axis the tier holds at one value for this workload (IOThreads on the block layer of a QEMU whose
        # NBD export cannot have one: pruned) is not among what it decides.
        v.basis = _basis(t, unanswered.tier, workload, emulated, named, _held(cws, workload, t, named),
                         _held(cws, workload, unanswered.tier, named))
        return v
    return None


def _held(cws: list[CellWorkload], workload: str, tier: str, named: set[str]) -> set[str]:
    """The later axes `tier` held at one value for `workload` (IOThreads on the block layer of a QEMU whose NBD
    export cannot have one; zero detection for random writes): not among what it decides for the workload."""
    return {a for a in named if a in axes.REGISTRY and not axes.get(a).always_named
            and len({c.axes.get(a) for c in cws if c.workload == workload and c.axes["tier"] == tier}) < 2}


def _basis(tier: str, closest: str, workload: str, emulated: bool, named: set[str], held: set[str] = frozenset(),
           held_closest: set[str] = frozenset()) -> str:
    """Why `tier` answers for `closest` (the tier closest to a VM), and which of the `named` axes it decides (not
    those it `held` at one value) and which `closest` varies but it does not."""
    try:
        mine = [a for a in applying_axes(tier) if a in named and a not in held]
        theirs = [a for a in applying_axes(closest) if a in named and a not in held_closest]
    except KeyError:  # a tier this version does not know (an old database): no scope to state
        scope = ""
    else:
        undecided = [a for a in theirs if a not in mine]
        scope = f" ({tier_class(tier).summary}): it decides {', '.join(a for a in mine if a != 'tier')}" + \
            (f", not the {', '.join(undecided)}" if undecided else "")
    if emulated:
        return (f"the {closest} tier ran under TCG (emulated, not a KVM host's timings): the {tier} tier is the "
                f"basis{scope}")
    return (f"the {closest} tier cannot answer yet ('iomatrix rank --workload {workload}' shows why); answered by "
            f"the {tier} tier{scope}")


def _emulated(cws: list[CellWorkload], workload: str, tier: str) -> bool:
    """Whether `workload`'s runs on `tier` ran under TCG (a guest tier without KVM)."""
    return any("tcg" in a for c in cws if c.workload == workload and c.axes["tier"] == tier for a in c.accel)


def answer_of(v: Verdict) -> tuple[Verdict, str] | None:
    """THE answer a user is given for one verdict, used by every output (the end of `run`, `recommend` with and
    without --detail, the report, JSON): the verdict whose figures are stated and its status, "answer",
    "tied" (the decision's top group, broken by the tie-break) or "provisional" (not separated yet: the
    tie-break's pick is named as leading, never as the configuration to use); None when there is not even a
    pick."""
    if v.choice is not None:
        return v, "tied" if v.choice.tied else "answer"
    if v.provisional is not None and v.provisional.choice is not None:
        return v.provisional, "provisional"
    return None


def verdict_tier(workload: str) -> type[Tier] | None:
    """The tier whose trials of `workload` are verdicts, not a speed ranking (the durability tier's own
    workloads), or None for a workload that is ranked."""
    w = PRESETS.get(workload)
    owner = workload_owner(w) if w is not None else None
    return owner if owner is not None and owner.verdicts else None


def _is_vm_view(tier: str) -> bool:
    known = known_tier(tier)
    return known is not None and known.vm_view


def _cache_modifier(label: str) -> tuple[str, str]:
    kv = dict(p.split("=", 1) for p in label.split() if "=" in p)
    return kv.get("cache", CacheMode.NONE), kv.get("modifier", Modifier.NONE)


SCORES = ("weighted-read", "weighted-write", "weighted-mixed")


def score_verdicts(store: Store, sweep_id: int, scores: Sequence[str], requirements: list[Requirement],
                   measured: MeasuredIndex | None = None) -> list[Verdict]:
    """Seed 000's weighted scores: the top-scoring allowed guest cell. A score has no significance test, so
    cells whose score interval overlaps the top one's are named as tied."""
    from iomatrix.report.rank import weighted_scores

    cells = {c.label(): c for c in cell_workloads(store, sweep_id)}
    out = []
    for score in scores:
        v = Verdict(score, "score", True, next(t.name for t in tier_classes() if t.vm_view), None)
        try:
            rows, _ = weighted_scores(store, sweep_id, score)
        except UserError as e:
            v.missing = e.one_line()
            out.append(v)
            continue
        allowed = [r for r in rows if r.label in cells and all(q.met_by(cells[r.label].axes) for q in requirements)]
        if not allowed:
            v.missing = ("no guest cell has both inputs of the score" if not rows else
                         "the requirements excluded every scored cell")
            out.append(v)
            continue
        top = allowed[0]
        tied = tuple(r.label for r in allowed[1:]
                     if top.score.low is not None and r.score.high is not None and r.score.high >= top.score.low)
        v.choice = Choice(top.label, tied, "highest score; cells whose score interval overlaps it are named as tied")
        v.mean, v.ci = top.score.score, (top.score.low, top.score.high)
        if requirements and rows[0].label != top.label:
            v.requirement_cost = Gain(f"{rows[0].label} (best without requirements)", rows[0].label,
                                      RatioCI(rows[0].score.score / top.score.score, None, None),
                                      "point ratio of scores, no interval")
        cell = cells[top.label]
        v.risks = risk_statements(cell.axes["cache"], cell.axes.get("modifier", Modifier.NONE), cell, measured)
        v.snippets = snippets_for(DiskConfig.from_axes(cell.axes, cell.backing.get("kind")))
        out.append(v)
    return out
