"""Fleet answers: a merged database's hosts side by side, and one configuration per host group.

A merged database (`iomatrix merge`) holds one sweep per host. The fleet is the latest usable sweep (not
`running`) of each host (by hostname) of one plan — the plan of the latest sweep — optionally only the sweeps
recorded with one group (`iomatrix run --group`, the Ansible role's inventory group). Each host's sweep is
ranked exactly as `iomatrix rank --sweep N` ranks it (report/rank.py); `stats/fleet.py` turns the per-host
rankings of each workload and tier into the group's answer. Renderers: `fleet_tables` (every `--format`),
`fleet_lines` (prose), `fleet_html_sections` (the HTML report's heat map).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from iomatrix.errors import UserError
from iomatrix.metrics import metric_info
from iomatrix.report.export import render_tables
from iomatrix.report.export.table import DataTable
from iomatrix.report.fleet_chart import fleet_heat_map
from iomatrix.report.formats import OutputFormat
from iomatrix.report.objective import Objective
from iomatrix.report.query import cell_workloads
from iomatrix.report.rank import WorkloadRanking, primary_metric, rank_sweep
from iomatrix.report.recommend.requirements import Requirement
from iomatrix.report.render import ratio_text, wrap
from iomatrix.stats import Change, compare_sweeps, summarize
from iomatrix.stats.decision import DEFAULT_TIE_BREAK
from iomatrix.stats.fleet import FleetAnswer, HostResult, fleet_answer
from iomatrix.store import Store
from iomatrix.store.queries import FleetSweep
from iomatrix.tiers import tier_order
from iomatrix.ui import fmt

ALL_HOSTS = "all hosts"
MAX_HOST_COLUMNS = 6  # per-host columns in a terminal table; JSON and CSV carry every host


@dataclass(frozen=True)
class Fleet:
    """The sweeps the fleet answers read: one per host, of one plan."""

    plan: str
    sweeps: tuple[FleetSweep, ...]  # by hostname
    group: str | None  # the group asked for (--group), None for every host

    @property
    def hosts(self) -> list[str]:
        return [s.hostname for s in self.sweeps]

    def groups(self) -> list[tuple[str, list[FleetSweep]]]:
        """(name, sweeps) of every answer to give: the group asked for; else each recorded group when there are
        several, then all hosts; else all hosts (named by their one group when they share it)."""
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
    """The fleet of the database (a one-line error when it holds no usable sweep, or none of `group`)."""
    sweeps = [s for s in store.fleet_sweeps() if s.status != "running"]
    if not sweeps:
        raise UserError(f"{store.path} holds no finished or interrupted sweep",
                        hint="run 'iomatrix run', or merge hosts' databases with 'iomatrix merge'")
    if group is not None:
        recorded = sorted({s.group for s in sweeps if s.group is not None})
        sweeps = [s for s in sweeps if s.group == group]
        if not sweeps:
            raise UserError(f"{store.path} has no sweep recorded with group '{group}'",
                            hint=f"groups: {', '.join(recorded)}" if recorded else
                            "record one with 'iomatrix run --group NAME' (the Ansible role passes the inventory "
                            "group)")
    plan = sweeps[-1].plan_name
    latest: dict[str, FleetSweep] = {}
    for s in sweeps:
        if s.plan_name == plan:
            latest[s.hostname] = s  # by id: the latest sweep of each host wins
    return Fleet(plan, tuple(latest[h] for h in sorted(latest)), group)


def is_fleet(store: Store) -> bool:
    """Whether the database holds sweeps of several hosts of its latest plan (then the fleet view is the
    default of results, rank, recommend; report adds the host × configuration view)."""
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
    per_host: dict[str, WorkloadRanking]  # hostname → its ranking (hosts without results are absent)
    sweeps: dict[str, int]  # hostname → sweep id
    answer: FleetAnswer

    @property
    def higher_is_better(self) -> bool:
        return self.answer.higher_is_better

    def shared_axes(self) -> list[str]:
        """The key=value parts every configuration of this answer shares (said once, left out of the names)."""
        return shared_parts(list(self.answer.wins))

    def short(self, name: str | None) -> str:
        """A configuration named by what differs between this answer's configurations."""
        if name is None:
            return "–"
        shared = set(self.shared_axes())
        return " ".join(p for p in name.split() if p not in shared) or name

    def host_line(self, host: str) -> str:
        """One host's own answer, as `rank --sweep N` decides it."""
        wr = self.per_host.get(host)
        if wr is None or wr.decision is None:
            return f"{host} (sweep {self.sweeps[host]}): no ranked configuration"
        d = wr.decision
        own = self.short(d.answer) if d.answer is not None else f"unresolved, leader {self.short(d.leader)}"
        tied = f" (tied: {', '.join(map(self.short, d.tied))})" if d.tied else ""
        return f"{host} (sweep {self.sweeps[host]}): {own}{tied}"

    def statement(self) -> str:
        """The group's answer in one or two sentences: the choice, by which rule, the worst host, who differs."""
        a = self.answer
        n = len(a.hosts)
        head = f"{self.workload} ({self.tier}, {self.metric}) — {self.group}, {n} host{'s' if n != 1 else ''}: "
        if a.choice is None:
            lack = "; ".join(f"{h} lacks {', '.join(cs[:3])}" for h, cs in a.missing.items())
            return head + f"no configuration was ranked on every host ({lack or 'no host ranked any'})."
        shared = f" (all: {' '.join(self.shared_axes())})" if self.shared_axes() and len(a.wins) > 1 else ""
        out = head + f"use {self.short(a.choice)}{shared}: best or tied-best on {a.wins[a.choice]} of {n} hosts"
        if a.tied_choices:
            out += (f" (as many: {', '.join(map(self.short, a.tied_choices))}; the tie-break "
                    f"{', '.join(a.tie_break)} chose)")
        w = a.worst
        if w is not None and w.best != a.choice:
            out += (f"; worst host {w.host}: {ratio_text(*w.ratio)} of its own best ({self.short(w.best)}), "
                    f"95% CI, {'higher' if self.higher_is_better else 'lower'} is better")
        elif w is not None:
            out += "; it is the best on every host"
        out += "."
        if a.differing:
            own = {h: (self.per_host[h].decision.answer or self.per_host[h].decision.leader)
                   if h in self.per_host and self.per_host[h].decision else None for h in a.differing}
            out += (" Hosts whose answer differs: " + "; ".join(f"{h} ({self.short(own[h])})" for h in a.differing)
                    + ".")
        return out


def host_result(host: str, wr: WorkloadRanking, requirements: Sequence[Requirement] = ()) -> HostResult:
    """One host's ranked configurations for the group answer, only those meeting `requirements` (power-loss-safe
    unless --allow-data-loss, as for one host). When the host's own answer fails them, its best among the
    others is not settled: the host has no best (its loss is not stated), and its leading allowed cell is its
    top."""
    allowed = {label for label, c in wr.cells.items() if all(q.met_by(c.axes) for q in requirements)}
    rows = [r for r in wr.ranking.rows if r.rank is not None and r.centre is not None and r.name in allowed]
    d = wr.decision
    top: list[str] = []
    if d is not None and d.leader is not None:
        top = [c for c in (d.leader, *d.tied) if c in allowed]
    if not top and rows:
        top = [rows[0].name]
    best = d.answer if d is not None and d.answer in allowed else None
    return HostResult(host, {r.name: float(r.centre) for r in rows if r.centre is not None},
                      {r.name: list(wr.cells[r.name].samples[wr.metric]) for r in rows}, top, best)


def fleet_answers(store: Store, fleet: Fleet, workload: str | None = None, metric: str | None = None, *,
                  objective: Objective | None = None, min_n: int = 3, max_noise: float = 0.10,
                  threshold: float = 0.05, tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
                  alpha: float = 0.05, requirements: Sequence[Requirement] = ()) -> list[WorkloadFleet]:
    """Every group's answer for every workload and tier the fleet's hosts ranked, among the configurations that
    meet `requirements` (report.recommend.parse_requirements: power-loss-safe by default)."""
    per_sweep: dict[int, list[WorkloadRanking]] = {}
    for s in fleet.sweeps:
        try:
            per_sweep[s.id] = rank_sweep(store, s.id, workload, metric, min_n=min_n, max_noise=max_noise,
                                         threshold=threshold, tie_break=tie_break, objective=objective)
        except UserError:
            per_sweep[s.id] = []  # this host has none of it: the others still answer
    if not any(per_sweep.values()):
        what = f"workload '{workload}'" if workload else "any workload"
        raise UserError(f"no host of plan {fleet.plan} has ranked results for {what}",
                        hint="see what each host has with 'iomatrix results --db DB --sweep N'")
    out = []
    for name, sweeps in fleet.groups():
        keys = sorted({(wr.workload, wr.tier, wr.metric) for s in sweeps for wr in per_sweep[s.id]},
                      key=lambda k: (k[0], tier_order(k[1]), k[2]))
        for w, tier, m in keys:
            per_host = {s.hostname: wr for s in sweeps for wr in per_sweep[s.id]
                        if (wr.workload, wr.tier, wr.metric) == (w, tier, m)}
            hosts = [host_result(h, wr, requirements) for h, wr in per_host.items()]
            axes = {label: cw.axes for wr in per_host.values() for label, cw in wr.cells.items()}
            answer = fleet_answer(hosts, metric_info(m).higher_is_better, axes, tie_break=tie_break, alpha=alpha)
            out.append(WorkloadFleet(name, w, tier, m, per_host, {s.hostname: s.id for s in sweeps}, answer))
    return out


# -- rendering ---------------------------------------------------------------------------------------------------

def fleet_lines(answers: Sequence[WorkloadFleet]) -> list[str]:
    """The answers in prose: per group and workload the statement, then each host's own answer."""
    out = []
    for wf in answers:
        out.append(wf.statement())
        out += [f"  {wf.host_line(h)}" for h in wf.answer.hosts]
    return out


def hosts_table(answers: Sequence[WorkloadFleet]) -> DataTable:
    """Per-host answers side by side: one row per group, workload and host."""
    rows = []
    for wf in answers:
        losses = {x.host: x for x in wf.answer.losses}
        for h in wf.answer.hosts:
            wr = wf.per_host[h]
            d = wr.decision
            loss = losses.get(h)
            rows.append({"group": wf.group, "workload": wf.workload, "tier": wf.tier, "metric": wf.metric, "host": h,
                         "sweep": wf.sweeps[h],
                         "own answer": (wf.short(d.answer) if d.answer else f"unresolved ({wf.short(d.leader)})")
                         if d else None,
                         "decision": d.kind if d else None,
                         "group's choice vs own best": ratio_text(*loss.ratio) if loss else None,
                         "ratio": loss.ratio.ratio if loss else None,
                         "ci95_low": loss.ratio.low if loss else None, "ci95_high": loss.ratio.high if loss else None,
                         "agrees": None if wf.answer.choice is None else
                         ("yes" if h not in wf.answer.differing else "no")})
    return DataTable("per-host answers (each host ranked as 'rank --sweep N' ranks it)",
                     ["group", "workload", "tier", "metric", "host", "sweep", "own answer", "decision",
                      "group's choice vs own best", "agrees"], rows,
                     axes=["group", "workload", "tier", "metric"])


def ranking_table(wf: WorkloadFleet) -> DataTable:
    """The configurations across the group's hosts (hosts as blocks), with each host's ratio to its own best."""
    a = wf.answer
    shown_hosts = list(a.hosts) if len(a.hosts) <= MAX_HOST_COLUMNS else []
    rows = []
    ranking_rows = a.ranking.rows if a.ranking is not None else ()
    names = [r.name for r in ranking_rows] or sorted(a.wins)
    by_name = {r.name: r for r in ranking_rows}
    for name in names:
        r = by_name.get(name)
        row: dict[str, Any] = {
            "rank": r.rank if r else None, "group": r.group_label if r else None, "configuration": wf.short(name),
            "axes": name,
            "centre": r.centre if r else None,
            "vs best": ratio_text(*r.ratio_to_best) if r and r.ratio_to_best else None,
            "wins": f"{a.wins.get(name, 0)}/{len(a.hosts)}", "chosen": name == a.choice}
        for h in a.hosts:
            row[h] = a.heat.get(h, {}).get(name)
        rows.append(row)
    notes = [wf.statement()]
    if a.ranking is not None:
        notes.append("hosts as blocks: " + host_block_description(a.ranking.test_description))
    notes.append("host columns: the configuration's centre on that host as a ratio to the host's own best"
                 if shown_hosts else
                 f"{len(a.hosts)} hosts: each host's ratio to its own best is in --format json or csv")
    title = f"{wf.group} · {wf.workload} · {wf.tier} · {wf.metric}: configurations across hosts"
    return DataTable(title, ["rank", "group", "configuration", "centre", "vs best", "wins", *shown_hosts], rows,
                     notes=notes)


def host_block_description(text: str) -> str:
    """The ranking's description of its blocked analysis, with the host where the ranking says round."""
    for old, new in (("rounds", "hosts"), ("round", "host"), ("cells with n < 2 are listed last and not ranked",
                                                              "configurations on fewer than 2 hosts are not ranked")):
        text = text.replace(old, new)
    return text


def fleet_tables(answers: Sequence[WorkloadFleet]) -> list[DataTable]:
    """Every format's tables: one ranking across hosts per group × workload, then the per-host answers."""
    return [ranking_table(wf) for wf in answers] + ([hosts_table(answers)] if answers else [])


def results_by_host(store: Store, fleet: Fleet, metric: str | None = None) -> list[DataTable]:
    """`results --by-host`: per workload, every configuration's mean and CI on each host, side by side."""
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
                per.setdefault((c.workload, c.axes["tier"], mm), {}).setdefault(c.label(), {})[s.hostname] = sm
    tables = []
    hosts = fleet.hosts
    for (w, tier, m), cells in sorted(per.items(), key=lambda kv: (kv[0][0], tier_order(kv[0][1]), kv[0][2])):
        rows = []
        shared = shared_parts(list(cells))
        for label, by_host in sorted(cells.items()):
            row: dict[str, Any] = {"configuration": " ".join(p for p in label.split() if p not in shared) or label,
                                   "axes": label}
            for h in hosts:
                sm = by_host.get(h)
                rel = None if sm is None else sm.rel_half_width
                row[h] = None if sm is None else f"{fmt(sm.mean)}" + ("" if rel is None else f" ±{rel:.0%}")
                row[f"{h}.mean"] = None if sm is None else sm.mean
                row[f"{h}.ci95_low"] = None if sm is None else sm.ci_low
                row[f"{h}.ci95_high"] = None if sm is None else sm.ci_high
                row[f"{h}.n"] = None if sm is None else sm.n
            rows.append(row)
        shown = hosts if len(hosts) <= MAX_HOST_COLUMNS else hosts[:MAX_HOST_COLUMNS]
        notes = [f"all configurations: {' '.join(shared)}"] if shared and len(cells) > 1 else []
        notes += [] if shown == hosts else [f"{len(hosts) - len(shown)} more host(s) in --format json or csv"]
        tables.append(DataTable(f"{w} · {tier} · {m}: mean ±95% CI half-width per host · plan {fleet.plan}",
                                ["configuration", *shown], rows, notes=notes))
    return tables


def shared_parts(labels: Sequence[str]) -> list[str]:
    """The key=value parts every label shares."""
    parts = [label.split() for label in labels]
    return [p for p in parts[0] if all(p in q for q in parts[1:])] if parts else []


def compare_by_host(a: Store, b: Store, metric: str | None = None) -> list[Change]:
    """`compare --by-host A B`: each host's sweep in A against the same host's in B (by hostname), in one Holm
    family; keys start with the host. A one-line error when the two share no host."""
    fa, fb = select_fleet(a), select_fleet(b)
    mine = {s.hostname: s.id for s in fb.sweeps}
    common = [s for s in fa.sweeps if s.hostname in mine]
    if not common:
        raise UserError("the two databases share no host", hint=f"hosts in A: {', '.join(fa.hosts)}; in B: "
                                                                f"{', '.join(fb.hosts)}")
    sa: dict[str, list[float]] = {}
    sb: dict[str, list[float]] = {}
    for s in common:
        xa, xb = _series(a, s.id, metric), _series(b, mine[s.hostname], metric)
        for key in xa.keys() & xb.keys():
            if len(xa[key]) >= 2 and len(xb[key]) >= 2:
                sa[f"{s.hostname}: {key}"], sb[f"{s.hostname}: {key}"] = xa[key], xb[key]
    if not sa:
        raise UserError("no host has a cell × workload with ≥ 2 runs in both databases",
                        hint="compare sweeps of the same plan, e.g. before and after a change on every host")
    return compare_sweeps(sa, sb)


def _series(store: Store, sweep_id: int, metric: str | None) -> dict[str, list[float]]:
    """'cell · workload · metric' → the runs' values, as `compare` keys them."""
    out = {}
    for c in cell_workloads(store, sweep_id):
        m = metric or primary_metric(c.workload)[0]
        if m in c.samples:
            out[f"{c.label()} · {c.workload} · {m}"] = list(c.samples[m])
    return out


# -- the HTML report -----------------------------------------------------------------------------------------------

def fleet_html_sections(store: Store, group: str | None = None, **rank_kw: Any) -> list[dict[str, Any]]:
    """The HTML report's fleet sections (report/html.py `extras`): per group and workload a heat map of each host's
    ratio to its own best, and the answer in prose; none unless the database holds several hosts of its plan (or
    `group` is asked for)."""
    if group is None and not is_fleet(store):
        return []
    out = []
    try:
        answers = fleet_answers(store, select_fleet(store, group), **rank_kw)
    except UserError as err:  # the rest of the report still stands: say why the fleet view is empty
        return [{"id": "fleet", "title": "Fleet", "lines": [f"no fleet answer: {err}"]}]
    for i, wf in enumerate(answers):
        a = wf.answer
        configs = [r.name for r in a.ranking.rows] if a.ranking is not None else sorted(a.wins)
        svg = fleet_heat_map(list(a.hosts), configs, a.heat, a.higher_is_better, a.choice)
        better = "higher" if a.higher_is_better else "lower"
        out.append({"id": f"fleet-{i + 1}", "title": f"Fleet: {wf.group} · {wf.workload} · {wf.tier}",
                    "svg": svg, "svg_caption": f"{wf.metric} of each configuration on each host as a ratio to that "
                                               f"host's own best (1 = its best; {better} is better); the group's "
                                               "choice is outlined",
                    "lines": fleet_lines([wf])})
    return out


# -- what the commands call ----------------------------------------------------------------------------------------

def fleet_wanted(store: Store, sweep: int | None, by_host: bool, group: str | None) -> bool:
    """Whether a command answers for the fleet: asked (--by-host, --group), or by default when no --sweep is given
    and the database holds several hosts' sweeps of its latest plan. --sweep with either is a one-line error."""
    if sweep is not None and (by_host or group is not None):
        raise UserError("--sweep selects one host's sweep; --by-host and --group answer for the fleet",
                        hint="give --sweep N alone, or --by-host / --group NAME without it")
    return by_host or group is not None or (sweep is None and is_fleet(store))


def fleet_heading(fleet: Fleet) -> str:
    groups = sorted({s.group for s in fleet.sweeps if s.group is not None})
    return (f"fleet: plan {fleet.plan}, {len(fleet.sweeps)} host(s): "
            + ", ".join(f"{s.hostname} (sweep {s.id}{', ' + s.group if s.group else ''})" for s in fleet.sweeps)
            + ("" if groups else "; no group recorded (iomatrix run --group)")
            + "; one host's sweep: --sweep N")


def render_fleet(fleet: Fleet, answers: Sequence[WorkloadFleet], format: OutputFormat, width: int,
                 answer_first: bool = False) -> str:
    """The fleet answers in `format`: for people (table, markdown) the heading (and, with `answer_first`, each
    group's answer in prose) before the tables; JSON and CSV are the tables alone."""
    tables = fleet_tables(answers)
    if answer_first:
        tables = [hosts_table(answers)] if answers else []
    body = render_tables(tables, format)
    if format in (OutputFormat.json, OutputFormat.csv):
        return body
    lines = wrap(fleet_heading(fleet), width)
    if answer_first:
        for wf in answers:
            lines += wrap(wf.statement(), width)
    return "\n".join(lines) + "\n\n" + body
