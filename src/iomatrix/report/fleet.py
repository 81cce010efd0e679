"""Fleet answers: a merged database's hosts side by side, and one configuration per host group.

A merged database (`iomatrix merge`) holds one sweep per host. The fleet is the latest usable sweep
(not `running`) of each host (by its name: the inventory name, else the hostname, with the start of
the machine id where machines share one — store/queries.py `fleet_sweeps`) of one plan — the plan of
the latest sweep — optionally only the sweeps recorded with one group (`iomatrix run --group`, the
Ansible role's inventory group). Each host's sweep is ranked exactly as `iomatrix rank --sweep N`
ranks it (report/rank.py), read from the store once for the answer with and without the
requirements, and ranked once where they exclude none of its cells (issue 52: a fleet of 100 hosts);
`stats/fleet.py` turns the per-host rankings of each workload and tier into the group's answer, and
the choice's risks come from the same code as one host's (`report/recommend/risks.py`). The answers
are computed once (`fleet_answers`) and only laid out by the renderers of report/fleet_render.py:
`fleet_tables` (every `--format`; JSON and CSV open with the group answers), `fleet_lines` (prose),
`fleet_html` (the HTML report's opening answer and heat maps)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from iomatrix.domain import NA, NULL_BACKING, Modifier
from iomatrix.errors import UserError
from iomatrix.metrics import metric_info
from iomatrix.report.durability import MeasuredIndex
from iomatrix.report.export.table import DataTable
from iomatrix.report.figures import ratio_text
from iomatrix.report.objective import Objective
from iomatrix.report.query import cell_workloads
from iomatrix.report.rank import (
    SweepReading,
    WorkloadRanking,
    primary_metric,
    rank_reading,
    read_sweep,
)
from iomatrix.report.recommend.requirements import Requirement, opt_in_text, unmet
from iomatrix.report.recommend.risks import SITUATIONS, RiskStatement, risk_statements
from iomatrix.snippets import DiskConfig, SnippetSet, snippets_for
from iomatrix.stats import Change, compare_sweeps, summarize
from iomatrix.stats.decision import DEFAULT_TIE_BREAK
from iomatrix.stats.fleet import FleetAnswer, HostResult, fleet_answer
from iomatrix.stats.looks import DECISION_ALPHA
from iomatrix.store import Store
from iomatrix.store.queries import FleetSweep
from iomatrix.tiers import tier_order
from iomatrix.ui import fmt

ALL_HOSTS = "all hosts"
MAX_HOST_COLUMNS = 6  # per-host columns in a terminal table; JSON and CSV carry every host


@dataclass(frozen=True)
class RanTogether:
    """Hosts whose sweeps were given one start time (`run --start-at`, the fleet role's
    iomatrix_start_together): on a shared backend each one's figures include the others' load."""

    at: float  # the common start time (epoch seconds)
    hosts: tuple[str, ...]
    overlap_s: float  # how long every one of them was running runs at once (0: never all at once)
    late_s: float  # the latest host's first run after the common start

    def text(self) -> str:
        when = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        head = f"{', '.join(self.hosts)} started their runs together at {when} (run --start-at)"
        if self.overlap_s <= 0:
            return head + ", but their runs never all overlapped: each ran on its own"
        return (
            f"{head}; all {len(self.hosts)} were running at once for "
            f"{self.overlap_s:.0f} s (the last started "
            f"{self.late_s:.0f} s after the common time): on a shared backend each "
            "host's figures include the "
            "others' load, so read them as figures under that contention, not as one host alone"
        )


@dataclass(frozen=True)
class Fleet:
    """The sweeps the fleet answers read: one per host, of one plan."""

    plan: str
    sweeps: tuple[FleetSweep, ...]  # by hostname
    group: str | None  # the group asked for (--group), None for every host
    # hosts given one start time, with how long their runs overlapped
    together: tuple[RanTogether, ...] = ()

    @property
    def hosts(self) -> list[str]:
        return [s.hostname for s in self.sweeps]

    def groups(self) -> list[tuple[str, list[FleetSweep]]]:
        """(name, sweeps) of every answer to give: the group asked for; else each recorded group
        when there are several, then all hosts; else all hosts (named by their one group when they
        share it)."""
        if self.group is not None:
            return [(self.group, list(self.sweeps))]
        recorded = sorted({s.group for s in self.sweeps if s.group is not None})
        every = list(self.sweeps)
        if len(recorded) <= 1 and all(s.group is not None for s in self.sweeps) and recorded:
            return [(recorded[0], every)]
        if len(recorded) <= 1:
            return [(ALL_HOSTS, every)]
        return [(g, [s for s in every if s.group == g]) for g in recorded] + [(ALL_HOSTS, every)]


def select_fleet(store: Store, group: str | None = None) -> Fleet:
    """The fleet of the database (a one-line error when it holds no usable sweep, or none of
    `group`)."""
    sweeps = [s for s in store.fleet_sweeps() if s.status != "running"]
    if not sweeps:
        raise UserError(
            f"{store.path} holds no finished or interrupted sweep",
            hint="run 'iomatrix run', or merge hosts' databases with 'iomatrix merge'",
        )
    if group is not None:
        recorded = sorted({s.group for s in sweeps if s.group is not None})
        sweeps = [s for s in sweeps if s.group == group]
        if not sweeps:
            raise UserError(
                f"{store.path} has no sweep recorded with group '{group}'",
                hint=f"groups: {', '.join(recorded)}"
                if recorded
                else "record one with 'iomatrix run --group NAME' (the Ansible role passes "
                "the inventory "
                "group)",
            )
    plan = sweeps[-1].plan_name
    latest: dict[str, FleetSweep] = {}
    for s in sweeps:
        if s.plan_name == plan:
            latest[s.hostname] = s  # by id: the latest sweep of each host wins
    chosen = tuple(latest[h] for h in sorted(latest))
    return Fleet(plan, chosen, group, ran_together(store, chosen))


def answer_sweeps(store: Store, by_host: bool, group: str | None) -> set[int] | None:
    """The sweeps a fleet answer can read, from the sweeps and hosts alone (a central store reads
    only these: store/pg.py open_central), or None when the command does not answer for the fleet (a
    database of one host).

    Each host's latest sweep, not running, of each plan and group: `select_fleet` chooses, for any
    --group, the latest sweep of the group's latest plan per host, and that sweep is the latest of
    its host, plan and group; the plan of the latest sweep and `is_fleet`'s hosts of a plan are the
    same among these as among all."""
    if not fleet_wanted(store, None, by_host, group):
        return None
    latest: dict[tuple[str, str, str | None], int] = {}
    for s in store.fleet_sweeps():
        if s.status != "running":
            latest[(s.hostname, s.plan_name, s.group)] = s.id  # by id: the latest wins
    return set(latest.values())


def ran_together(store: Store, sweeps: Sequence[FleetSweep]) -> tuple[RanTogether, ...]:
    """The groups of hosts (two or more) whose sweeps were given the same start time, with the time
    all of them were running runs at once: from the latest of their first runs' starts to the
    earliest of their last runs' ends."""
    by_time: dict[float, list[tuple[str, float, float]]] = {}
    for s in sweeps:
        window = store.run_window(s.id)
        if window is not None and window[0] is not None:
            by_time.setdefault(window[0], []).append((s.hostname, window[1], window[2]))
    out = []
    for at, rows in sorted(by_time.items()):
        if len(rows) < 2:
            continue
        last_first = max(first for _, first, _ in rows)  # when the last host began its runs
        first_last = min(last for *_, last in rows)  # when the first host ended them
        out.append(
            RanTogether(
                at,
                tuple(h for h, _, _ in rows),
                max(0.0, first_last - last_first),
                max(0.0, last_first - at),
            )
        )
    return tuple(out)


def is_fleet(store: Store) -> bool:
    """Whether the database holds sweeps of several hosts of its latest plan (then the fleet view is
    the default of results, rank, recommend; report adds the host × configuration view)."""
    sweeps = [s for s in store.fleet_sweeps() if s.status != "running"]
    if not sweeps:
        return False
    plan = sweeps[-1].plan_name
    return len({s.hostname for s in sweeps if s.plan_name == plan}) >= 2


@dataclass
class WorkloadFleet:
    """One workload × tier of one group: every host's own ranking and the group's answer."""

    group: str
    workload: str
    tier: str
    metric: str
    # hostname → its ranking (hosts without results are absent)
    per_host: dict[str, WorkloadRanking]
    sweeps: dict[str, int]  # hostname → sweep id
    answer: FleetAnswer
    # What the choice risks per situation, from the code one host's answer uses (documented or
    # measured).
    risks: list[RiskStatement] = field(default_factory=list)
    # every tool's snippet for the choice, as one host's answer has them
    snippets: SnippetSet | None = None
    # the faster group choice the requirements exclude, if the data show one
    declined: FleetDeclined | None = None

    @property
    def status(self) -> str:
        """As one host's `answer_of` says it: "answer", "tied" (broken by the tie-break),
        "provisional" (only leading: no host separates its best yet) or "none" (no configuration
        ranked on every host)."""
        a = self.answer
        if a.choice is None:
            return "none"
        if not a.settled:
            return "provisional"
        return "tied" if a.tied_choices else "answer"

    @property
    def higher_is_better(self) -> bool:
        return self.answer.higher_is_better

    def shared_axes(self) -> list[str]:
        """The key=value parts every configuration of this answer shares (said once, left out of the
        names)."""
        return shared_parts(list(self.answer.wins))

    def short(self, name: str | None) -> str:
        """A configuration named by what differs between this answer's configurations."""
        if name is None:
            return "–"
        shared = set(self.shared_axes())
        return " ".join(p for p in name.split() if p not in shared) or name

    def own_answer(self, host: str) -> str | None:
        """One host's own answer in words, as `rank --sweep N` decides it (None without a ranked
        one)."""
        wr = self.per_host.get(host)
        if wr is None or wr.decision is None:
            return None
        d = wr.decision
        return (
            self.short(d.answer)
            if d.answer is not None
            else f"not separated, leading {self.short(d.leader)}"
        )

    def declined_text(self) -> str | None:
        """The configuration the requirements exclude, in one line as one host's answer says it
        ("not chosen")."""
        d = self.declined
        if d is None:
            return None
        return (
            f"not chosen: {self.short(d.cell)}, the group's choice without the "
            "requirements (best or tied-best "
            f"on {d.wins} of {d.hosts} hosts), is not {' or '.join(d.fails)}; on power "
            f"loss: {d.risk}; chosen "
            f"only with {d.opt_in}"
        )

    def leader_text(self, host: str) -> str:
        """An unsettled host's leader, as its own answer names it."""
        wr = self.per_host.get(host)
        d = wr.decision if wr is not None else None
        return (
            f"leading {self.short(d.leader)}"
            if d is not None and d.leader
            else "no ranked configuration"
        )

    def host_line(self, host: str) -> str:
        """One host's own answer, as `rank --sweep N` decides it."""
        own = self.own_answer(host)
        if own is None:
            return f"{host} (sweep {self.sweeps[host]}): no ranked configuration"
        d = self.per_host[host].decision
        assert d is not None
        tied = f" (tied: {', '.join(map(self.short, d.tied))})" if d.tied else ""
        return f"{host} (sweep {self.sweeps[host]}): {own}{tied}"

    def statement(self) -> str:
        """The group's answer in one or two sentences: the choice, by which rule, the worst host,
        who differs."""
        a = self.answer
        n = len(a.hosts)
        head = (
            f"{self.workload} ({self.tier}, {self.metric}) — {self.group}, {n} "
            f"host{'s' if n != 1 else ''}: "
        )
        if a.choice is None:
            lack = "; ".join(f"{h} lacks {', '.join(cs[:3])}" for h, cs in a.missing.items())
            hint = backing_names_hint(
                {
                    h: {cw.axes.get("backing", "") for cw in wr.cells.values()}
                    for h, wr in self.per_host.items()
                }
            )
            return (
                head
                + f"no configuration was ranked on every host ({lack or 'no host ranked any'})."
                + (f" {hint}" if hint else "")
            )
        shared = (
            f" (all: {' '.join(self.shared_axes())})"
            if self.shared_axes() and len(a.wins) > 1
            else ""
        )
        if a.settled:
            out = (
                head + f"use {self.short(a.choice)}{shared}: best or tied-best on "
                f"{a.wins[a.choice]} of {n} hosts"
            )
        # as one host's unsettled answer says it: named as leading, never as the configuration to
        # use
        else:
            out = head + (
                f"no answer yet, leading: {self.short(a.choice)}{shared} (no host's own ranking "
                "separates its best yet; it leads or ties the leader on "
                f"{a.leads[a.choice]} of {n})"
            )
        if a.tied_choices:
            out += (
                f" (as many: {', '.join(map(self.short, a.tied_choices))}; the tie-break "
                f"{', '.join(a.tie_break)} chose)"
            )
        w = a.worst
        if w is not None and w.best != a.choice:
            out += (
                f"; worst host {w.host}: {ratio_text(*w.ratio)} of its own best "
                f"({self.short(w.best)}), "
                f"95% CI, {'higher' if self.higher_is_better else 'lower'} is better"
            )
        elif a.best_everywhere:
            out += "; it is the best on every host"
        out += "."
        if a.unsettled and a.settled:
            out += (
                " Not separated on "
                + "; ".join(f"{h} ({self.leader_text(h)})" for h in a.unsettled)
                + ": not counted as best there."
            )
        if a.differing:
            own = {
                h: (self.per_host[h].decision.answer or self.per_host[h].decision.leader)
                if h in self.per_host and self.per_host[h].decision
                else None
                for h in a.differing
            }
            out += (
                " Hosts whose answer differs: "
                + "; ".join(f"{h} ({self.short(own[h])})" for h in a.differing)
                + "."
            )
        return out


def host_result(
    host: str, wr: WorkloadRanking, requirements: Sequence[Requirement] = ()
) -> HostResult:
    """One host's ranked configurations for the group answer, only those meeting `requirements`
    (power-loss-safe unless --allow-data-loss, as for one host). `fleet_answers` ranks each host on
    those cells only, as one host's answer does, so its decision is already the restricted one; were
    the host's own answer to fail them, it would count as not settled (no best, no loss stated), its
    leading allowed cell as its top."""
    allowed = {
        label for label, c in wr.cells.items() if all(q.met_by(c.axes) for q in requirements)
    }
    rows = [
        r
        for r in wr.ranking.rows
        if r.rank is not None and r.centre is not None and r.name in allowed
    ]
    d = wr.decision
    top: list[str] = []
    if d is not None and d.leader is not None:
        top = [c for c in (d.leader, *d.tied) if c in allowed]
    if not top and rows:
        top = [rows[0].name]
    best = d.answer if d is not None and d.answer in allowed else None
    return HostResult(
        host,
        {r.name: float(r.centre) for r in rows if r.centre is not None},
        {r.name: list(wr.cells[r.name].samples[wr.metric]) for r in rows},
        top,
        best,
    )


def choice_risks(
    per_host: dict[str, WorkloadRanking], choice: str | None, measured: MeasuredIndex | None
) -> list[RiskStatement]:
    """What the group's choice risks, by the code one host's answer uses (`risk_statements`): the
    documented semantics of its cache mode, or the durability tier's measured verdicts where the
    database has them."""
    cell = next(
        (wr.cells[choice] for wr in per_host.values() if choice is not None and choice in wr.cells),
        None,
    )
    if cell is None or "cache" not in cell.axes:
        return []
    return risk_statements(
        cell.axes["cache"], cell.axes.get("modifier", Modifier.NONE), cell, measured
    )


def choice_snippets(per_host: dict[str, WorkloadRanking], choice: str | None) -> SnippetSet | None:
    """Every tool's snippet for the group's choice, made as one host's answer makes them
    (`snippets_for`)."""
    cell = next(
        (wr.cells[choice] for wr in per_host.values() if choice is not None and choice in wr.cells),
        None,
    )
    if cell is None or "cache" not in cell.axes:
        return None
    return snippets_for(DiskConfig.from_axes(cell.axes, cell.backing.get("kind")))


def backing_names_hint(backings: Mapping[str, set[str]]) -> str | None:
    """Why hosts share no configuration, when the reason is their backings' names: a configuration
    is matched across hosts by its whole cell, the backing's name included, so hosts that each sweep
    a backing of their own name (a LUN per host on one target, `name = "lun-h1"`) can never be
    compared. None when some backing name is common to every host, or there is only one host."""
    named = {h: {b for b in names if b} for h, names in backings.items()}
    if len(named) < 2 or not all(named.values()) or set.intersection(*named.values()):
        return None
    shown = "; ".join(
        f"{h}: {', '.join(sorted(names)[:2])}" for h, names in sorted(named.items())[:4]
    )
    return (
        f"The hosts name their backings differently ({shown}): a configuration is "
        "matched across hosts by its "
        "backing's name too; give the backing the same `name` on every host (docs/fleet.md)."
    )


def fleet_answers(
    store: Store,
    fleet: Fleet,
    workload: str | None = None,
    metric: str | None = None,
    *,
    objective: Objective | None = None,
    min_n: int = 3,
    max_noise: float = 0.10,
    threshold: float = 0.05,
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    alpha: float = DECISION_ALPHA,
    requirements: Sequence[Requirement] = (),
) -> list[WorkloadFleet]:
    """Every group's answer for every workload and tier the fleet's hosts ranked, among the
    configurations that meet `requirements` (report.recommend.parse_requirements: power-loss-safe by
    default); with requirements, also the answer without them, to name a faster configuration they
    exclude as one host's answer does."""

    # as one host's answer restricts its ranking (other_tier.py); asked once per configuration,
    # not once per host's cell: the hosts of a fleet run the same few configurations (issue 52)
    verdicts: dict[tuple[tuple[str, str], ...], bool] = {}

    def meets(axes: Mapping[str, str]) -> bool:
        key = tuple(sorted(axes.items()))
        if key not in verdicts:
            verdicts[key] = axes.get("backing") == NULL_BACKING or all(
                q.met_by(axes) for q in requirements
            )
        return verdicts[key]

    kw: dict[str, Any] = {
        "min_n": min_n,
        "max_noise": max_noise,
        "threshold": threshold,
        "tie_break": tie_break,
        "objective": objective,
    }
    per_sweep, free = _rank_hosts(
        store, fleet, workload, metric, meets if requirements else None, kw
    )
    if not any(per_sweep.values()):
        what = f"workload '{workload}'" if workload else "any workload"
        met = f" meeting {' and '.join(q.name for q in requirements)}" if requirements else ""
        raise UserError(
            f"no host of plan {fleet.plan} has ranked results{met} for {what}",
            hint="see what each host has with 'iomatrix results --db DB --sweep N'",
        )
    return group_answers(
        store=store,
        fleet=fleet,
        per_sweep=per_sweep,
        free=free,
        requirements=requirements,
        tie_break=tie_break,
        alpha=alpha,
    )


def group_answers(
    store: Store,
    fleet: Fleet,
    per_sweep: Mapping[int, list[WorkloadRanking]],
    free: Mapping[int, list[WorkloadRanking]] | None,
    requirements: Sequence[Requirement],
    tie_break: Sequence[str],
    alpha: float,
) -> list[WorkloadFleet]:
    """Every group's answer from each host's rankings: `per_sweep` among the configurations meeting
    `requirements`, `free` (None without requirements) among all of them."""
    measured = MeasuredIndex.from_store(store)  # once, as one host's recommendation builds it
    out = []
    for name, sweeps in fleet.groups():
        keys = sorted(
            {(wr.workload, wr.tier, wr.metric) for s in sweeps for wr in per_sweep[s.id]},
            key=lambda k: (k[0], tier_order(k[1]), k[2]),
        )
        for key in keys:
            per_host, answer = _group_answer(sweeps, per_sweep, key, requirements, tie_break, alpha)
            workload, tier, metric = key
            wf = WorkloadFleet(
                group=name,
                workload=workload,
                tier=tier,
                metric=metric,
                per_host=per_host,
                sweeps={s.hostname: s.id for s in sweeps},
                answer=answer,
                risks=choice_risks(per_host, answer.choice, measured),
                snippets=choice_snippets(per_host, answer.choice),
            )
            if free is not None:
                wf.declined = declined_choice(
                    answer.choice,
                    *_group_answer(sweeps, free, key, (), tie_break, alpha),
                    requirements,
                    measured,
                )
            out.append(wf)
    return out


def _rank_hosts(
    store: Store,
    fleet: Fleet,
    workload: str | None,
    metric: str | None,
    keep: Callable[[Mapping[str, str]], bool] | None,
    kw: dict[str, Any],
) -> tuple[dict[int, list[WorkloadRanking]], dict[int, list[WorkloadRanking]] | None]:
    """Each host's sweep ranked as `rank --sweep N` ranks it, among the cells `keep` accepts, and —
    with `keep` — among all of them (None without): the store is read once per sweep for both, and
    where `keep` accepts every cell of the sweep the two rankings are one (the same cells, so the
    same figures)."""
    kept: dict[int, list[WorkloadRanking]] = {}
    free: dict[int, list[WorkloadRanking]] = {}
    for s in fleet.sweeps:
        reading = read_sweep(store, s.id)
        kept[s.id] = _rank_or_none(reading, workload, metric, keep, kw)
        if keep is not None:
            every = all(keep(c.axes) for c in reading.cells)
            free[s.id] = kept[s.id] if every else _rank_or_none(reading, workload, metric, None, kw)
    return kept, (free if keep is not None else None)


def _rank_or_none(
    reading: SweepReading,
    workload: str | None,
    metric: str | None,
    keep: Callable[[Mapping[str, str]], bool] | None,
    kw: dict[str, Any],
) -> list[WorkloadRanking]:
    """One host's rankings, or none when it has none of it (the others still answer)."""
    try:
        return rank_reading(reading, workload, metric, keep=keep, **kw)
    except UserError:
        return []


def _group_answer(
    sweeps: Sequence[FleetSweep],
    per_sweep: Mapping[int, list[WorkloadRanking]],
    key: tuple[str, str, str],
    requirements: Sequence[Requirement],
    tie_break: Sequence[str],
    alpha: float,
) -> tuple[dict[str, WorkloadRanking], FleetAnswer]:
    """One group's hosts' rankings of one workload × tier × metric, and the group's answer from
    them."""
    per_host = {
        s.hostname: wr
        for s in sweeps
        for wr in per_sweep.get(s.id, [])
        if (wr.workload, wr.tier, wr.metric) == key
    }
    hosts = [host_result(h, wr, requirements) for h, wr in per_host.items()]
    axes = {label: cw.axes for wr in per_host.values() for label, cw in wr.cells.items()}
    return per_host, fleet_answer(
        hosts, metric_info(key[2]).higher_is_better, axes, tie_break=tie_break, alpha=alpha
    )


@dataclass(frozen=True)
class FleetDeclined:
    """The group's choice without the requirements, which they exclude: named in one line with what
    it risks and how to choose it anyway, as one host's answer names its declined configuration
    (verdict.Declined)."""

    cell: str
    wins: int  # settled hosts where it is best or tied-best
    hosts: int
    fails: tuple[str, ...]
    risk: str  # on a host crash or power loss
    opt_in: str


def declined_choice(
    choice: str | None,
    per_host: Mapping[str, WorkloadRanking],
    free: FleetAnswer,
    requirements: Sequence[Requirement],
    measured: MeasuredIndex | None,
) -> FleetDeclined | None:
    """The unrestricted group answer `free` when the requirements exclude it: None when it is the
    choice, or is not settled (as one host's answer names a declined configuration only when its
    unrestricted answer is)."""
    if free.choice is None or free.choice == choice or not free.settled:
        return None
    cell = next(
        (wr.cells[free.choice] for wr in per_host.values() if free.choice in wr.cells), None
    )
    fails = unmet(requirements, cell.axes) if cell is not None else []
    if cell is None or not fails:
        return None
    power = next(
        (
            r.text
            for r in risk_statements(
                cell.axes.get("cache", NA), cell.axes.get("modifier", Modifier.NONE), cell, measured
            )
            if r.situation == SITUATIONS[1]
        ),
        "not documented for this configuration",
    )
    return FleetDeclined(
        free.choice,
        free.wins.get(free.choice, 0),
        len(free.hosts),
        tuple(q.name for q in fails),
        power,
        opt_in_text(fails),
    )


def results_by_host(store: Store, fleet: Fleet, metric: str | None = None) -> list[DataTable]:
    """`results --by-host`: per workload, every configuration's mean and CI on each host, side by
    side."""
    per: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for s in fleet.sweeps:
        for c in cell_workloads(store, s.id):
            m = metric or primary_metric(c.workload)[0]
            metrics = sorted(c.samples) if m == "all" else [m]
            for mm in metrics:
                values = c.samples.get(mm)
                if not values:
                    continue
                sm = summarize(values)
                per.setdefault((c.workload, c.axes["tier"], mm), {}).setdefault(c.label(), {})[
                    s.hostname
                ] = sm
    tables = []
    hosts = fleet.hosts
    for (w, tier, m), cells in sorted(
        per.items(), key=lambda kv: (kv[0][0], tier_order(kv[0][1]), kv[0][2])
    ):
        rows = []
        shared = shared_parts(list(cells))
        for label, by_host in sorted(cells.items()):
            row: dict[str, Any] = {
                "configuration": " ".join(p for p in label.split() if p not in shared) or label,
                "axes": label,
            }
            for h in hosts:
                sm = by_host.get(h)
                rel = None if sm is None else sm.rel_half_width
                row[h] = (
                    None
                    if sm is None
                    else f"{fmt(sm.mean)}" + ("" if rel is None else f" ±{rel:.0%}")
                )
                row[f"{h}.mean"] = None if sm is None else sm.mean
                row[f"{h}.ci95_low"] = None if sm is None else sm.ci_low
                row[f"{h}.ci95_high"] = None if sm is None else sm.ci_high
                row[f"{h}.n"] = None if sm is None else sm.n
            rows.append(row)
        shown = hosts if len(hosts) <= MAX_HOST_COLUMNS else hosts[:MAX_HOST_COLUMNS]
        notes = [f"all configurations: {' '.join(shared)}"] if shared and len(cells) > 1 else []
        notes += (
            []
            if shown == hosts
            else [f"{len(hosts) - len(shown)} more host(s) in --format json or csv"]
        )
        tables.append(
            DataTable(
                f"{w} · {tier} · {m}: mean ±95% CI half-width per host · plan {fleet.plan}",
                ["configuration", *shown],
                rows,
                notes=notes,
            )
        )
    return tables


def shared_parts(labels: Sequence[str]) -> list[str]:
    """The key=value parts every label shares."""
    parts = [label.split() for label in labels]
    return [p for p in parts[0] if all(p in q for q in parts[1:])] if parts else []


def compare_by_host(a: Store, b: Store, metric: str | None = None) -> list[Change]:
    """`compare --by-host A B`: each host's sweep in A against the same host's in B (by hostname),
    in one Holm family; keys start with the host. A one-line error when the two share no host."""
    fa, fb = select_fleet(a), select_fleet(b)
    mine = {s.hostname: s.id for s in fb.sweeps}
    common = [s for s in fa.sweeps if s.hostname in mine]
    if not common:
        raise UserError(
            "the two databases share no host",
            hint=f"hosts in A: {', '.join(fa.hosts)}; in B: {', '.join(fb.hosts)}",
        )

    sa: dict[str, list[float]] = {}
    sb: dict[str, list[float]] = {}
    for s in common:
        xa, xb = _series(a, s.id, metric), _series(b, mine[s.hostname], metric)
        for key in xa.keys() & xb.keys():
            if len(xa[key]) >= 2 and len(xb[key]) >= 2:
                sa[f"{s.hostname}: {key}"], sb[f"{s.hostname}: {key}"] = xa[key], xb[key]
    if not sa:
        raise UserError(
            "no host has a cell × workload with ≥ 2 runs in both databases",
            hint="compare sweeps of the same plan, e.g. before and after a change on every host",
        )
    return compare_sweeps(sa, sb)


def _series(store: Store, sweep_id: int, metric: str | None) -> dict[str, list[float]]:
    """'cell · workload · metric' → the runs' values, as `compare` keys them."""
    out = {}
    for c in cell_workloads(store, sweep_id):
        m = metric or primary_metric(c.workload)[0]
        if m in c.samples:
            out[f"{c.label()} · {c.workload} · {m}"] = list(c.samples[m])
    return out


# -- what the commands call ------------------------------------------------------------------------


def fleet_wanted(store: Store, sweep: int | None, by_host: bool, group: str | None) -> bool:
    """Whether a command answers for the fleet: asked (--by-host, --group), or by default when no
    --sweep is given and the database holds several hosts' sweeps of its latest plan. --sweep with
    either is a one-line error."""
    if sweep is not None and (by_host or group is not None):
        raise UserError(
            "--sweep selects one host's sweep; --by-host and --group answer for the fleet",
            hint="give --sweep N alone, or --by-host / --group NAME without it",
        )
    return by_host or group is not None or (sweep is None and is_fleet(store))
