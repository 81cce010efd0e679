"""The first answer on one screen: what to use, how much it gains, what it risks, and the snippet to
paste.

`headline()` turns a `Recommendation` (report/recommend.py) into one short block per host: the
configuration to use for the workloads the plan ran (one, or one per workload where they differ),
its ratio to the user's current configuration or QEMU's default with its interval, one line each on
what it risks on a QEMU crash, a power loss and a live migration, and the snippet for one target
tool. Everything else (per-workload tables, tie-breaks, stops, variance components) is the
recommendation's detail. Renderers (render.py, html.py) lay the `Headline` out; nothing here
computes a statistic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from iomatrix.domain import BASELINES, PLATFORM_BASELINES, Baseline
from iomatrix.durability.verdict import TARGET_POWER_LOSS, TARGET_SHORT_NAME
from iomatrix.errors import UserError
from iomatrix.plan.current_cell import MeasuredCurrent
from iomatrix.protocol_registry import snippet_targets
from iomatrix.report.answer_groups import (
    answer_names,
    configuration_of,
    group_configs,
    per_client_count,
    same_label,
    trade_off_lines,
)
from iomatrix.report.guests import guest_lines
from iomatrix.report.naming import CellNames, cell_names
from iomatrix.report.recommend import (
    DOCUMENTED,
    SITUATIONS,
    Gain,
    Recommendation,
    RiskStatement,
    Verdict,
    answer_of,
    verdict_tier,
)
from iomatrix.report.recommend.axis_lines import AxisAnswer, axis_brief, axis_lines
from iomatrix.report.recommend.change import keep_reason, measured_against_current, not_decided
from iomatrix.report.recommend.grammar import ratio_against
from iomatrix.report.recommend.roles import rival_of
from iomatrix.snippets import Snippet, answer_storage_snippet
from iomatrix.vmconfig.reading import CurrentConfig

TARGETS = ("libvirt", "proxmox", "qemu", "virt-install", "nova")
DEFAULT_TARGET = "libvirt"
# The targets whose snippet points at the user's image once converted: the conversion stands before
# it (Proxmox's own snippet moves the volume itself; Nova's names no file).
DATA_STEP_TARGETS = ("libvirt", "qemu", "virt-install")
# The shorter form of the same change, shown on the first screen instead of a target's snippet where
# there is one (--current: virt-xml's one line for the edited <disk>); --detail shows both.
SHORTER_FORM = {"libvirt": ("virt-xml",)}
# The three situations a headline states (the fourth, a guest that sends no flushes, is detail). The
# iSCSI target's power loss too, where the configuration is on a LUN (what its write cache setting
# loses).
HEADLINE_SITUATIONS = {
    SITUATIONS[0]: "QEMU crash",
    SITUATIONS[1]: "power loss",
    SITUATIONS[2]: "live migration",
    TARGET_POWER_LOSS: "target power loss",
}


def all_targets() -> tuple[str, ...]:
    """The VM tools, then the storage-side tools the network protocols write snippets for
    (ceph.conf, tgt, …)."""
    return (*TARGETS, *(t for t in snippet_targets() if t not in TARGETS))


def check_target(target: str) -> str:
    if target not in all_targets():
        raise UserError(f"unknown target '{target}'", hint=f"use {', '.join(all_targets())}")
    return target


# The statuses of a pick not separated from its runner-up (a tie the tie-break broke, or not
# settled yet): their status says from which cell (WorkloadGain.rival).
UNSEPARATED = ("tied", "provisional")


@dataclass(frozen=True)
class WorkloadGain:
    """What the configuration gains on one workload, and how sure the choice is."""

    workload: str
    metric: str
    # "answer", "tied" (a tie broken by the tie-break) or "provisional" (not separated yet)
    status: str
    against: str  # "QEMU default" or "current (…)"
    gain: Gain | None
    tier: str
    kept: str = ""  # status "equivalent": why the configuration is kept, with the measured bounds
    # what the notable alternatives measured (alternative/choice)
    alternatives: tuple[Gain, ...] = ()
    # Status "joined" or "joined-provisional": the workload's own pick (tied with the configuration
    # it is answered with, another workload's answer on the same backing: report/one_config.py);
    # `gain` is that configuration over it.
    own: str = ""
    group: str = ""  # the backing group it was answered on (Verdict.group; "" across backings)
    # The cells of `alternatives` that are a baseline some target quotes against (QEMU's, a
    # platform's default, the current configuration): every target's screen shows their ratios,
    # so that --target changes which one the workload's line names, not which ratios are shown
    # (issue 70: --target nova alone showed raw · writeback against raw · cache=none).
    baselines: tuple[str, ...] = ()
    # status "tied" or "provisional": the interval reached, the property the pick rests on and the
    # minutes that would settle it, in full and brief (Verdict.unresolved)
    unresolved: str = ""
    unresolved_brief: str = ""
    # status "tied" or "provisional": the cell the pick was not told apart from (its runner-up,
    # roles.rival_of), which the status names ("not told apart yet from …"): the ratio beside it
    # is against a baseline, which the status does not describe (issue 70: "4.27× (3.40–5.35)
    # QEMU's default · not told apart yet" read as a ratio clear of 1 not told apart)
    rival: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "metric": self.metric,
            "status": self.status,
            "tier": self.tier,
            "against": self.against,
            "vs": None if self.gain is None else self._said(self.gain, self.against),
            "kept": self.kept or None,
            "alternatives": [self._said(g, g.against) for g in self.alternatives],
            **({"own_pick": self.own} if self.own else {}),
            **({"not_told_apart_from": self.rival} if self.rival else {}),
        }

    def _said(self, g: Gain, against: str) -> dict[str, Any]:
        """A gain's fields and the pick against it in the one grammar (recommend/grammar.py): the
        JSON reads as the text does ("said": "1.43× (1.20–1.70) lower latency than …")."""
        said = None if g.ratio is None or g.ratio.ratio is None else g.ratio
        return {**g.as_dict(), "said": ratio_against(said, self.metric, against) if said else None}


@dataclass
class Pick:
    """One configuration to use, and the workloads it is the answer for."""

    cell: str  # the full label
    name: str  # the short name (only the axes that vary in the sweep)
    config: str  # the whole configuration the snippet sets, assumed axes included
    gains: list[WorkloadGain] = field(default_factory=list)
    risks: list[tuple[str, str, str]] = field(default_factory=list)  # (situation, text, basis)
    snippet: Snippet | None = None
    # The storage-side settings (the target's or the cluster's: ceph.conf's [client] lines the
    # answer sets, the LUN's write cache), where the configuration has a snippet of them beside the
    # VM tool's (snippets.answer_storage_snippet); every whole snippet is in --detail.
    storage: Snippet | None = None
    # The whole form a shorter snippet stands for (SHORTER_FORM: the edited <disk> XML virt-xml's
    # one line writes), which --detail shows after it, as the shorter one's title says (issue 70).
    longer: Snippet | None = None
    # False when no workload's answer is settled: the pick is the tie-break's among cells the data
    # cannot separate yet, named as the tie-break's pick, not as the configuration to use, nor as
    # the leader (the ranking's leader is the best by centre, which the pick need not be).
    settled: bool = True
    # Every workload's decision ended as equivalent: the configuration is kept, not a winner.
    kept: bool = False
    # With --current (issue 49): the step that copies the user's data, shown before the snippet that
    # points at the copy, and what was kept as the user has it.
    data_step: Snippet | None = None
    kept_line: str = ""
    # With --current, a change the sweep did not decide better on every workload
    # (report/recommend/change.py): the candidate's short name, and why what runs is kept; `name`
    # is then what runs, and nothing is converted or switched (no snippet, no data step).
    candidate: str = ""
    # What its printed intervals are, where one clear of 1 stands beside a status not decided
    # (pick_interval_note): said after its first "vs" line where the first screen has room.
    interval_note: str = ""
    keep_why: str = ""

    @property
    def verb(self) -> str:
        if self.candidate:
            return "Keep what you run"
        if self.kept:
            return "Keep"
        return "Use" if self.settled else "Use for now, the tie-break's pick"

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "name": self.name,
            "config": self.config,
            "settled": self.settled,
            **(
                {"keep_current": {"candidate": self.candidate, "why": self.keep_why}}
                if self.candidate
                else {}
            ),
            "workloads": [g.as_dict() for g in self.gains],
            "risks": [{"situation": s, "text": t, "basis": b} for s, t, b in self.risks],
            "snippet": None if self.snippet is None else self.snippet.as_dict(),
            **({"data_step": self.data_step.as_dict()} if self.data_step is not None else {}),
            **({"kept_line": self.kept_line} if self.kept_line else {}),
        }


@dataclass(kw_only=True)
class Headline:
    host: str
    sweep_id: int
    plan: str
    status: str
    target: str
    picks: list[Pick]
    shared: str  # the axes every swept cell of the picks shares, stated once
    basis: list[str]  # one line per tier that answered for another (TCG guests)
    unanswered: list[str]  # "workload: why" for workloads with not even a tie-break pick
    warnings: list[str]
    has_detail: bool
    # "workload: verdicts" of the tiers whose trials are verdicts, not a speed ranking (the
    # durability tier's)
    measured: list[str] = field(default_factory=list)
    objective: str | None = None  # --objective, stated with the answer (report/objective.py)
    # One line per faster configuration the requirements excluded (cache=unsafe under the default
    # power-loss-safe): its measured gain, its risk and how to choose it anyway.
    declined: list[str] = field(default_factory=list)
    # The same, each in its crowded screen's form: the gain and the requirement it fails, its risk
    # left to --detail (report/screen.py at a density of 3 or more, where the risks go by name).
    declined_brief: list[str] = field(default_factory=list)
    # what the figures show beyond the answer (Recommendation)
    findings: list[str] = field(default_factory=list)
    # One answer per role of the plan, first (report/recommend/roles.py: RoleAnswer.as_dict with
    # "text" and "lines").
    roles: list[dict[str, Any]] = field(default_factory=list)
    # The platform the ratios are quoted against (_baseline): --target's defaults, measured or not.
    baseline: dict[str, Any] = field(default_factory=dict)
    # One line per backing group whose workloads' answers differ and cannot be one configuration (a
    # trade-off, or not settled enough to say: report/one_config.py), naming each configuration and
    # its workloads.
    trade_offs: list[str] = field(default_factory=list)
    # The guests the guest figures came from, one line each (report/guests.py): a real image with
    # its digest.
    guests: list[str] = field(default_factory=list)
    # the findings in one line each, for a crowded first screen (report/screen.py)
    brief_findings: list[str] = field(default_factory=list)
    # each role's answer in a few words, for a crowded first screen (report/screen.py): its
    # decision in one line, then its deciding figures in one paragraph (RoleAnswer.brief)
    brief_roles: list[tuple[str, str]] = field(default_factory=list)
    # The same answer written for every other target (headline()): the first screen holds the same
    # facts whichever target it is written for (report/screen.py: _common_layout, issue 70).
    peers: list[Headline] = field(default_factory=list, repr=False)
    # Where the sweep varied more than one axis: one line per axis, each decided on its own over
    # the other axes (report/recommend/axis_lines.py), above the configurations and their snippets
    axis_lines: list[str] = field(default_factory=list)
    axis_brief: list[str] = field(default_factory=list)  # one line per axis, a crowded screen's
    # What the printed intervals are, where one clear of 1 stands beside a status the decision did
    # not reach (interval_note): "" elsewhere.
    interval_note: str = ""

    def baseline_line(self, short: bool = False, brief: bool = False, bare: bool = False) -> str:
        """The headline's line on its baseline, for a platform whose defaults are not QEMU's: its
        settings, and when the sweep did not measure them for some workload, that those ratios are
        against QEMU's default (`short`: without how to measure it, for a squeezed first screen;
        `brief`: without naming those workloads either, whose lines name the default they are
        against; `bare`: the platform's settings left to --detail too)."""
        b = self.baseline
        if not b or b["same_as_qemu"] or not (b["measured"] or b["not_measured"]):
            return ""
        if not b["not_measured"]:
            return f"baseline: {b['name']}, {b['settings']} (measured)"
        which = "" if not b["measured"] else f" for {', '.join(b['not_measured'])}"
        if brief and which:
            which = f" for {len(b['not_measured'])} answers (their lines say)"
        qemu = BASELINES[0]
        settings = "" if bare else f" ({b['settings']})"
        if bare and which:  # each workload's line names the default its ratio is against
            return (
                f"baseline: {b['name']} where measured, else {BASELINES[0].said} (each line says)"
            )
        if short:  # QEMU's default's values are in --detail
            return (
                f"baseline: {b['name']}{settings} not measured{which}: ratios are "
                f"against {qemu.said}"
            )
        return (
            f"baseline: {b['name']} ({b['settings']}) was not measured by this "
            f"sweep{which}: those ratios are "
            f"against {qemu.said} ({qemu.values_text()}); a plan whose cells hold these "
            "values measures it"
        )

    def as_dict(self) -> dict[str, Any]:
        first = {"roles": self.roles} if self.roles else {}
        return {
            **first,
            "host": self.host,
            "sweep": self.sweep_id,
            "plan": self.plan,
            "status": self.status,
            "target": self.target,
            "shared": self.shared,
            "picks": [p.as_dict() for p in self.picks],
            "basis": self.basis,
            "unanswered": self.unanswered,
            "measured": self.measured,
            "objective": self.objective,
            "declined": self.declined,
            "warnings": self.warnings,
            "findings": self.findings,
            "baseline": {**self.baseline, "line": self.baseline_line() or None},
            **({"trade_offs": self.trade_offs} if self.trade_offs else {}),
            **({"axes": self.axis_lines} if self.axis_lines else {}),
            **({"guests": self.guests} if self.guests else {}),
            **({"interval_note": self.interval_note} if self.interval_note else {}),
        }


# The intervals an answer prints are 95%, while the rule decides at its look's level over the race
# (stats/looks.py: ℓ* = 0.0024 at α = 0.02), wider than 95% because it looks after every round
# (docs/statistics.md §10b): an interval clear of 1 beside "not told apart" is not a contradiction,
# and the answer says why (issue 70), in the same words in text, Markdown, HTML and JSON: on the
# first screen after the pick's first "vs" line, else at the end of the "more:" line, where it has
# room (report/screen.py: headline_text); at the end of the "more:" line in Markdown and --detail;
# below the picks in the HTML; "interval_note" in the JSON.
INTERVAL_NOTE = "95% intervals; each decision's test is stricter: docs/statistics.md §10b"


def interval_note(picks: list[Pick]) -> str:
    """INTERVAL_NOTE where some workload's ratio, against its baseline or an alternative, has a 95%
    interval clear of 1 while its status is not "decided" (pick_interval_note); "" elsewhere."""
    return INTERVAL_NOTE if any(pick_interval_note(p) for p in picks) else ""


def pick_interval_note(p: Pick) -> str:
    """INTERVAL_NOTE where one of the pick's workloads, not "decided", has a ratio (against its
    baseline or an alternative) whose 95% interval is clear of 1; "" elsewhere. Every target's
    baseline stands among the other targets' alternatives, so the note is the same whichever
    target."""
    for wg in p.gains:
        if wg.status == "answer":
            continue
        for g in (wg.gain, *wg.alternatives):
            r = None if g is None else g.ratio
            if r is None or r.low is None or r.high is None:
                continue
            if r.low > 1 or r.high < 1:
                return INTERVAL_NOTE
    return ""


def platform_baseline(target: str) -> Baseline:
    """The default the answer is quoted against for `target`: a VM platform's own
    (domain.PLATFORM_BASELINES), and QEMU's for a storage-side target (ceph, tgt, …: they set the
    storage, not the VM's disk options)."""
    return PLATFORM_BASELINES.get(target, BASELINES[0])


def _reference_gain(v: Verdict, target: str = DEFAULT_TARGET) -> tuple[str, Gain | None]:
    """The comparison the headline states: the user's current configuration when given, else the
    target platform's default where the sweep measured it (Proxmox's, Nova's:
    domain.PLATFORM_BASELINES), else QEMU's default (libvirt's and virt-install's are QEMU's)."""
    platform = platform_baseline(target)
    if platform not in BASELINES and not any(g.against.startswith("current") for g in v.gains):
        g = next(
            (
                g
                for g in v.gains
                if g.against.startswith(f"{platform.name} (") and g.label is not None
            ),
            None,
        )
        if g is not None:
            return platform.said, g
    for prefix, name in (("current", "current"), ("QEMU default", "QEMU's default")):
        # a measured comparison first (QEMU's default cache and aio, else the cell's own axes at
        # QEMU's defaults)
        found = [g for g in v.gains if g.against.startswith(prefix)]
        g = next((g for g in found if g.label is not None), found[0] if found else None)
        if g is not None:
            return (
                g.against
                if prefix == "current"
                else name + g.against.removeprefix(prefix).split(" (")[0]
            ), g
    return "QEMU's default", None


def _ranked(rec: Recommendation) -> list[Verdict]:
    """The verdicts the headline picks from: ranked workloads; with roles, only their jobs (the
    roles answer first, their jobs' picks follow, and the micro-workloads are detail: recommend
    --detail)."""
    ranked = [
        v
        for v in rec.verdicts
        if v.metric != "score" and v.tier and verdict_tier(v.workload) is None
    ]
    if rec.roles:
        jobs = {w for r in rec.roles for w in r.jobs}
        ranked = [v for v in ranked if v.workload in jobs]
    return ranked


def headline(rec: Recommendation, host: str, target: str = DEFAULT_TARGET) -> Headline:
    """The headline of `rec`: ranked workloads only (weighted scores and the durability tier's
    verdicts are detail), grouped by the configuration they pick; on shared storage, one
    configuration per backing where the workloads' decisions allow (report/one_config.py). Its
    `peers`: the same answer for every other VM tool."""
    check_target(target)
    head = _headline(rec, host, target)
    # the VM tools' answers: a storage-side target's (tgt, ceph, …) screen holds what theirs do
    # where its 30 lines allow (taking theirs in too made every shared-storage screen denser)
    head.peers = [_headline(rec, host, t) for t in TARGETS if t != target]
    return head


def _headline(rec: Recommendation, host: str, target: str) -> Headline:
    """headline() for one target."""
    answered: dict[tuple[str, bool, bool], Pick] = {}
    declined: dict[str, tuple[str, list[str]]] = {}
    basis: list[str] = []
    unanswered: list[str] = []
    measured = [
        f"{v.workload}: {v.missing}" for v in rec.verdicts if verdict_tier(v.workload) is not None
    ]
    ranked = _ranked(rec)
    # Answered per number of clients on one backend (report/per_backing.py): the count is a
    # condition the answer's name says, so the configurations are compared and named without it,
    # and the same settings at 1, 2 and 4 clients are one configuration (issue 70).
    of = configuration_of if per_client_count(ranked) else same_label
    names = answer_names(ranked)
    configs = group_configs(ranked, of) if not rec.roles else {}
    joined: list[tuple[Verdict, Verdict, str, str]] = []
    for v in ranked:
        found = answer_of(v)
        if found is None:
            unanswered.append(f"{v.workload}: {v.missing}")
            continue
        shown, status = found
        cell = configs[v.workload].assigned[v.workload] if v.workload in configs else None
        if cell is not None and shown.choice is not None and cell != of(shown.choice.cell):
            joined.append((v, shown, status, cell))
            continue
        _answer(answered, v, shown, status, target, varied=names.varying, of=of)
        _note(v, shown, declined, basis)
    for v, shown, status, cell in joined:
        _join(answered, v, shown, status, cell=cell, target=target, varied=names.varying, of=of)
    _name_picks(list(answered.values()), names, rec.current)
    picks = list(answered.values())
    for p in picks:
        p.interval_note = pick_interval_note(p)
    return Headline(
        host=host,
        sweep_id=rec.sweep_id,
        plan=rec.plan,
        status=rec.status,
        target=target,
        picks=picks,
        shared=names.constant_text(),
        basis=basis,
        unanswered=unanswered,
        warnings=rec.warnings,
        has_detail=bool(rec.verdicts),
        measured=measured,
        objective=rec.objective,
        declined=[f"{', '.join(ws)}: {names.rename(text)}" for text, (_, ws) in declined.items()],
        declined_brief=[
            f"{', '.join(ws)}: {names.rename(brief)}" for brief, ws in declined.values()
        ],
        findings=rec.findings if rec.first_findings is None else rec.first_findings,
        roles=[_named_role(r, names, rec) for r in rec.roles],
        baseline=_baseline(target, answered.values()),
        # one line per backing group (its workloads share one GroupConfig, which holds a dict and
        # so cannot be a dict key: keyed by the group's name)
        trade_offs=trade_off_lines(
            list({c.group: c for c in configs.values() if c.kind != "one"}.values()), names
        ),
        guests=guest_lines(rec.guests),
        brief_findings=rec.brief_findings,
        brief_roles=_brief_roles(rec, names),
        axis_lines=axis_lines(_axis_answers(ranked)),
        axis_brief=axis_brief(_axis_answers(ranked)),
        interval_note=interval_note(picks),
    )


def _axis_answers(ranked: list[Verdict]) -> list[AxisAnswer]:
    """The answers' axes decided on their own, where one answer spans the sweep: an answer per
    backing (shared storage, report/per_backing.py) compares backings whose axes are nested, not
    crossed (a LUN's cache exists on iSCSI only), and has its groups' own lines."""
    if any(v.group for v in ranked):
        return []
    return [a for v in ranked for a in v.axis_answers]


def _brief_roles(rec: Recommendation, names: CellNames) -> list[tuple[str, str]]:
    """Each role's answer in a few words, its cells named as the headline names them."""
    out = []
    for r in rec.roles:
        keep = _role_keeps(r, names, rec)
        out.append((keep or names.rename(r.brief()), names.rename(r.brief_figures())))
    return out


def _note(
    v: Verdict, shown: Verdict, declined: dict[str, tuple[str, list[str]]], basis: list[str]
) -> None:
    """What an answered workload adds beside its pick: the faster configuration its requirements
    declined (its text → its brief text and the workloads), and the tier that answered for
    another."""
    if shown.declined is not None:
        text = shown.declined.text()
        declined.setdefault(text, (shown.declined.text(brief=True), []))[1].append(v.workload)
    if v.basis and v.basis not in basis:
        basis.append(v.basis)


def _answer(
    answered: dict[tuple[str, bool, bool], Pick],
    v: Verdict,
    shown: Verdict,
    status: str,
    target: str,
    varied: tuple[str, ...] = (),
    of: Callable[[str], str] = same_label,
) -> None:
    """The workload's own answer, in the pick of its cell (`of`: the configuration a label stands
    for, which picks, gains and alternatives are named by: group_configs)."""
    assert shown.choice is not None
    settled = status != "provisional"
    kept = status == "equivalent"
    cell = of(shown.choice.cell)
    # One configuration is one pick: a workload still provisional on a cell another workload has
    # settled on joins that pick (its own line says it is not told apart yet), rather than the same
    # configuration standing twice, once as the answer and once as "use for now".
    decided = [k for k in answered if k[0] == cell and k[1]]
    if not settled and decided:
        pick = answered[decided[0]]
    else:
        pick = answered.setdefault((cell, settled, kept), _pick(shown, target, settled, varied))
        pick.cell = pick.name = cell
        pick.kept = kept
        if settled and (early := answered.pop((cell, False, False), None)) is not None:
            pick.gains[:0] = early.gains
    against, gain = _reference_gain(shown, target)
    alternatives, baselines = _with_baselines(shown, shown.choice.cell)
    pick.gains.append(
        WorkloadGain(
            workload=v.workload,
            metric=v.metric,
            status=status,
            against=against,
            gain=_labelled(gain, of),
            tier=shown.tier,
            kept=shown.choice.kept,
            alternatives=tuple(g for a in alternatives if (g := _labelled(a, of)) is not None),
            group=v.group,
            baselines=tuple(of(b) for b in baselines),
            unresolved=v.unresolved[0],
            unresolved_brief=v.unresolved[1],
            rival=_rival(shown, status, of),
        )
    )


def _rival(shown: Verdict, status: str, of: Callable[[str], str]) -> str:
    """The configuration (`of`) an unseparated pick was not told apart from (roles.rival_of); ""
    for a decided or kept one, or where the decision names none."""
    assert shown.choice is not None
    rival = rival_of(shown, shown.choice.cell) if status in UNSEPARATED else None
    return "" if rival is None else of(rival)


def _labelled(g: Gain | None, of: Callable[[str], str]) -> Gain | None:
    """`g` with its cell's label the configuration it stands for (`of`)."""
    if g is None or g.label is None or of(g.label) == g.label:
        return g
    return replace(g, label=of(g.label))


def _with_baselines(v: Verdict, cell: str) -> tuple[tuple[Gain, ...], tuple[str, ...]]:
    """The verdict's notable alternatives, every measured baseline cell first (each target's
    reference: QEMU's default, a platform's, the current configuration; verdict.gains), as the
    pick over it; and those baseline cells' labels."""
    base = {
        g.label: Gain(g.label, g.label, g.ratio, g.note, page_cache=g.page_cache)
        for g in v.gains
        if g.label is not None and g.label != cell and g.ratio is not None
    }
    rest = [a for a in v.alternatives if a.label not in base]
    return (*base.values(), *rest), tuple(label for label in base if label is not None)


def _join(
    answered: dict[tuple[str, bool, bool], Pick],
    v: Verdict,
    shown: Verdict,
    status: str,
    *,
    cell: str,
    target: str,
    varied: tuple[str, ...] = (),
    of: Callable[[str], str] = same_label,
) -> None:
    """A workload answered with its backing's one configuration `cell`, which its decision tied with
    its own pick: its line states that configuration over its own pick (the decision's alternative,
    when it measured it). `of`: as _answer's."""
    assert shown.choice is not None
    pick = next((p for p in answered.values() if p.cell == cell), None)
    # its configuration is nobody's own answer here (cannot be, one_config picks among them)
    if pick is None:
        _answer(answered, v, shown, status, target, varied=varied, of=of)
        return
    alt = next((a for a in shown.alternatives if a.label and of(a.label) == cell), None)
    # the alternative is its own pick over `cell`: turned, `cell` over its own pick
    over = None if alt is None or alt.ratio is None else alt.ratio.turned()
    own = of(shown.choice.cell)
    gain = Gain(
        f"its own pick ({own})",
        own,
        over if alt is not None else None,
        "" if alt is not None else "not told apart by its decision",
    )
    pick.gains.append(
        WorkloadGain(
            workload=v.workload,
            metric=v.metric,
            status="joined-provisional" if status == "provisional" else "joined",
            against="",
            gain=gain,
            tier=shown.tier,
            own=own,
            group=v.group,
        )
    )


def _named_gain(
    wg: WorkloadGain, names: CellNames, current: CurrentConfig | None, cell: str
) -> WorkloadGain:
    """A pick's gain with its cells named as the headline names them; a joined workload's own pick
    by what tells it from the pick's `cell` ("lun_write_cache=off")."""
    if wg.own:
        own = cell_names([cell, wg.own]).of(wg.own)
        return replace(wg, own=own, against=f"its own pick {own}")
    return replace(
        _named_current(wg, names, current),
        kept=names.rename(wg.kept),
        unresolved=names.rename(wg.unresolved),
        unresolved_brief=names.rename(wg.unresolved_brief),
        rival=names.of(wg.rival) if wg.rival else "",
        alternatives=tuple(
            replace(a, against=names.of(a.label)) for a in wg.alternatives if a.label is not None
        ),
    )


def _baseline(target: str, picks: Any) -> dict[str, Any]:
    """The platform the answer is quoted against (--target), its defaults, where they come from, and
    the workloads whose ratio is against them ("measured") or, not measured in this sweep, against
    QEMU's default instead."""
    platform = platform_baseline(target)
    quoted = [wg for p in picks for wg in p.gains if not wg.against.startswith("current")]
    return {
        "target": target,
        "name": platform.said,
        "settings": platform.values_text(),
        "source": platform.source,
        "same_as_qemu": platform in BASELINES,
        "measured": [wg.workload for wg in quoted if wg.against == platform.said],
        "not_measured": [wg.workload for wg in quoted if wg.against != platform.said]
        if platform not in BASELINES
        else [],
    }


def _named_role(r: Any, names: CellNames, rec: Recommendation) -> dict[str, Any]:
    """A role's answer (report/recommend/roles.py: RoleAnswer) with its cells named as the headline
    names them; with --current, "keep what you run" unless its pick is decided better."""
    keep = _role_keeps(r, names, rec)
    return {
        **r.as_dict(),
        "text": keep or names.rename(r.headline()),
        **({"action": "keep"} if keep else {}),
        "lines": [names.rename(x) for x in r.lines()],
    }


def _name_picks(picks: list[Pick], names: CellNames, current: CurrentConfig | None) -> None:
    """Each pick and its gains named as the headline names cells; with --current, a change is
    made where every workload of its one disk decides it (_keep_unless_decided)."""
    for p in picks:
        p.name = names.of(p.cell)
        p.gains = [_named_gain(wg, names, current, p.cell) for wg in p.gains]
    if current is not None:
        for cell in dict.fromkeys(p.cell for p in picks):
            _keep_unless_decided([p for p in picks if p.cell == cell], names)


def _keep_unless_decided(picks: list[Pick], names: CellNames) -> None:
    """With --current: the picks of one candidate cell become "keep what you run" unless its change
    is decided better on every workload they answer (report/recommend/change.py); nothing is then
    converted or switched."""
    if any(p.kept for p in picks):  # an equivalent decision already keeps (what runs, when swept)
        return
    gains = [wg for p in picks for wg in p.gains]
    undecided = not_decided([(wg.workload, wg.gain) for wg in gains])
    current = next(
        (wg.gain.label for wg in gains if wg.gain and measured_against_current(wg.gain)), None
    )
    if not undecided or current is None:
        return
    for p in picks:
        p.candidate, p.name, p.config = p.name, names.of(current), current
        p.keep_why = keep_reason(p.candidate, undecided)
        p.snippet = p.storage = p.data_step = p.longer = None
        p.kept_line, p.risks = "", []
        # what else the candidate was compared with is about a change not made: --detail
        p.gains = [replace(wg, alternatives=()) for wg in p.gains]


def _role_keeps(r: Any, names: CellNames, rec: Recommendation) -> str:
    """With --current: a role's answer as "keep what you run" when its pick is not decided better
    than the current configuration on every job of the role (the job's own verdict's ratio to it;
    a job whose pick is another cell has none, and so does not decide the change); "" otherwise."""
    if rec.current is None or r.cell is None or r.status == "equivalent":
        return ""
    gains: list[tuple[str, Gain | None]] = []
    for job in r.jobs:
        v = next((v for v in rec.verdicts if v.workload == job), None)
        found = None if v is None else answer_of(v)
        shown = None if found is None else found[0]
        same = shown is not None and shown.choice is not None and shown.choice.cell == r.cell
        mine = shown.gains if same and shown is not None else []
        gains.append((job, next((g for g in mine if g.against.startswith("current")), None)))
    undecided = not_decided(gains)
    current = next((g.label for _, g in gains if measured_against_current(g)), None)
    if not undecided or current is None:
        return ""
    why = names.rename(keep_reason(r.cell, undecided))
    return f"For {r.answer_for}: keep what you run, {names.of(current)} ({why})"


def _named_current(
    wg: WorkloadGain, names: CellNames, current: CurrentConfig | None
) -> WorkloadGain:
    """A gain against the current configuration named by its short cell name ("current (qcow2 ·
    native)") when the sweep measured it; when the sweep holds a current configuration (run
    --current) it could not measure in this tier, the gain says why instead of asking for it to be
    added to the plan."""
    g = wg.gain
    if g is None or current is None or not wg.against.startswith("current"):
        return wg
    if g.label is not None:
        return replace(wg, against=f"current ({names.of(g.label)})")
    if isinstance(current, MeasuredCurrent):
        why = current.pruned.get(wg.tier)
        note = (
            f"not measurable in the {wg.tier} tier: {why}"
            if why
            else "not measured yet: resume the sweep ('iomatrix run' with the same plan, "
            "--current and --db)"
        )
        return replace(wg, gain=replace(g, note=note))
    return wg


def _risk_text(r: RiskStatement, cell: str) -> str:
    """A risk's text on the first screen: a target power loss measured by a durability trial says
    for which setting of the LUN's write cache ("with lun_write_cache=on, measured: LOST
    acknowledged writes in 1/1 cut"), as the documented one does."""
    if r.situation != TARGET_POWER_LOSS or r.basis == DOCUMENTED:
        return r.text
    wc = next((w.split("=", 1)[1] for w in cell.split() if w.startswith("lun_write_cache=")), "off")
    return f"with lun_write_cache={wc}, measured: {r.text.removeprefix(TARGET_SHORT_NAME + ': ')}"


# How vmconfig.config._not_available begins the note of a tool that cannot hold the configuration,
# and how the headline adds what to use instead.
NOT_AVAILABLE = "not available"
INSTEAD = "; instead, the measured disk: "


def _with_instead(snippet: Snippet, snippets: list[Snippet], target: str) -> Snippet:
    """A "not available" snippet with what to use instead (issue 70: shared-storage's --target nova
    said "not available" and nothing more): the other VM tools that do have one, by their
    --target; any other snippet as it is."""
    if snippet.text is not None or not snippet.note.startswith(NOT_AVAILABLE):
        return snippet
    others = [t for t in TARGETS if t != target and any(s.tool == t and s.text for s in snippets)]
    if not others:
        return snippet
    instead = " or ".join(f"--target {t}" for t in others[:2])
    return replace(snippet, note=f"{snippet.note}{INSTEAD}{instead}")


def _pick(v: Verdict, target: str, settled: bool = True, varied: tuple[str, ...] = ()) -> Pick:
    """The configuration `v` answers with: its snippet for `target`, the storage's settings the
    answer sets (`varied`: the axes the sweep chose among), its risks."""
    assert v.choice is not None
    snippet, storage = None, None
    config = v.choice.cell
    extra: dict[str, Any] = {}
    if v.snippets is not None:
        config = v.snippets.config.settings_label()  # a condition (clients) is no setting
        snippet = next((s for s in v.snippets.snippets if s.tool == target), None)
        # The shorter form of the same edit where there is one (virt-xml for the user's <disk>; the
        # XML: --detail).
        shorter = next(
            (s for s in v.snippets.snippets if s.tool in SHORTER_FORM.get(target, ()) and s.text),
            None,
        )
        if shorter is not None:
            extra["longer"] = snippet if snippet is not None and snippet.text else None
            snippet = shorter
        if snippet is not None:
            snippet = _with_instead(snippet, v.snippets.snippets, target)
        storage = next(
            (s for s in v.snippets.snippets if s.summary and s.tool != target and s is not snippet),
            None,
        )
        storage = (
            answer_storage_snippet(storage, v.snippets.config, varied)
            if storage is not None
            else None
        )
        data_step = v.snippets.data_step() if target in DATA_STEP_TARGETS else None
        extra |= {"data_step": data_step, "kept_line": v.snippets.kept}
    # the risks of the storage path the snippet shown sets up (issue 70: Proxmox's nfs storage is
    # a kernel mount, whatever client was measured)
    risks = [
        (HEADLINE_SITUATIONS[r.situation], _risk_text(r, v.choice.cell), r.basis)
        for r in v.target_risks.get(target, v.risks)
        if r.situation in HEADLINE_SITUATIONS
    ]
    return Pick(
        v.choice.cell,
        v.choice.cell,
        config,
        risks=risks,
        snippet=snippet,
        storage=storage,
        settled=settled,
        **extra,
    )
