"""`recommend`: every workload's verdict, the weighted scores' and the roles' answers of one sweep,
gathered into a Recommendation (verdict.py) with the findings beyond them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from iomatrix.errors import UserError
from iomatrix.fio.shape import IoShape
from iomatrix.guest.tcg import TCG_WARNING
from iomatrix.plan.current_cell import stored_current
from iomatrix.plans import builtin_names
from iomatrix.plugins import load_object
from iomatrix.protocol_registry import protocols
from iomatrix.report.companions import companion
from iomatrix.report.durability import MeasuredIndex
from iomatrix.report.guests import guests_used
from iomatrix.report.interference import run_interference
from iomatrix.report.keep import keep_current, keep_defaults
from iomatrix.report.objective import Objective, objective_metric
from iomatrix.report.per_backing import (
    answer_backings,
    answer_groups,
    configuration_group,
    emulated_rtt_notes,
)
from iomatrix.report.query import CellWorkload, cell_workloads, sweep_info, unit_stops
from iomatrix.report.rank import (
    primary_metric,
    rank_workload,
    run_rounds,
    run_values,
    sweep_run_seconds,
    workload_names,
)
from iomatrix.report.recommend.budget_cut import budget_cut_line
from iomatrix.report.recommend.current_match import matching_current
from iomatrix.report.recommend.other_tier import verdict_on_its_basis
from iomatrix.report.recommend.page_cache import mark_page_cache
from iomatrix.report.recommend.requirements import (
    Requirement,
    parse_requirements,
)
from iomatrix.report.recommend.roles import role_answers, say_unresolved
from iomatrix.report.recommend.scores import SCORES, is_vm_view, score_verdicts, verdict_tier
from iomatrix.report.recommend.verdict import (
    Recommendation,
    Verdict,
)
from iomatrix.report.shape_findings import shape_findings
from iomatrix.report.shapes import workload_shapes
from iomatrix.roles import decided_at, plan_margins
from iomatrix.stats.decision import (
    DEFAULT_THRESHOLD,
    DEFAULT_TIE_BREAK,
    check_threshold,
    check_tie_break,
)
from iomatrix.stats.interference import RunInterference
from iomatrix.store import Store
from iomatrix.vmconfig.reading import CurrentConfig


@dataclass(frozen=True)
class _Sweep:
    """What every workload's answer of one sweep is built from: read once by `recommend`."""

    store: Store
    sweep_id: int
    rounds: dict[int, int]
    objective: Objective | None
    reqs: list[Requirement]
    current: CurrentConfig | None
    measured: MeasuredIndex


def recommend(
    store: Store,
    sweep_id: int,
    *,
    workload: str | None = None,
    requirements: Sequence[str] = (),
    current: CurrentConfig | None = None,
    scores: Sequence[str] | None = None,
    min_n: int = 3,
    max_noise: float = 0.10,
    threshold: float = DEFAULT_THRESHOLD,
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    objective: Objective | None = None,
    allow_data_loss: bool = False,
    margin: float | None = None,
) -> Recommendation:
    """Verdicts per workload, then per weighted score (`scores`; default: every score when the sweep
    has a guest tier and no single workload was asked for). ``objective``: what each workload is
    ranked by (report/objective.py; None: its primary metric). Only configurations that honour guest
    flushes are chosen unless `allow_data_loss` (parse_requirements). ``margin``: the margin of
    practical equivalence (recommend --margin; None: the sweep's plan key `margin`, else 5 %); a
    role's jobs are decided at their role's margin (roles.plan_margins: a role table's own `margin`
    wins): a configuration shown within it of the best is equivalent, and when the best and the
    current configuration (else QEMU's default, else the simplest) are, the answer keeps that one
    (stats/decision.py)."""
    info = sweep_info(store, sweep_id)
    if current is None:  # the current configuration the sweep measured (run --current), if any
        current = stored_current(info["plan_definition"], info["pruned"])
    reqs = parse_requirements(requirements, allow_data_loss)
    cws = cell_workloads(store, sweep_id)
    # The same inputs 'iomatrix rank' uses: runs blocked by round, disturbed runs flagged.
    all_runs = [rid for c in cws for rid in c.runs]
    sweep = _Sweep(
        store,
        sweep_id,
        rounds=run_rounds(store, all_runs),
        objective=objective,
        reqs=reqs,
        current=current,
        measured=MeasuredIndex.from_store(store),
    )
    interference = run_interference(store, sweep_id, all_runs)
    default_margin, margins = plan_margins(info["plan_definition"], margin)
    rank_kw: dict[str, Any] = {
        "min_n": min_n,
        "max_noise": max_noise,
        "interference": interference,
        # how the race stopped each unit, as `rank` reads it: an elimination stays decided while
        # its reference is a candidate, and a race ended unresolved says "within the budget"
        "stops": unit_stops(store, sweep_id),
        "threshold": check_threshold(threshold),
        "tie_break": check_tie_break(tie_break),
        "margin": default_margin,
        "keep_order": _keep_order(current),
    }
    per_backing = answer_backings(info["plan_definition"])  # shared storage: one answer per backing
    verdicts = []
    seconds = sweep_run_seconds(store, sweep_id, info)
    budget = info["plan_definition"].get("time_budget")
    for w in workload_names(cws, sweep_id, workload):
        # a role's job at its role's margin (roles.decided_at), as in its race; its pace and the
        # budget say the time an unsettled decision still needs in minutes
        theta, job_margin = decided_at(w, margins, rank_kw["margin"], rank_kw["threshold"])
        job_kw = {
            **rank_kw,
            "margin": job_margin,
            "threshold": theta,
            "seconds_per_run": seconds.get(w),
            "budget": budget,
        }
        verdicts += _workload_answers(sweep, cws, w, per_backing, job_kw)
    for v in verdicts:  # a workload's pick not told apart says what a role's says
        say_unresolved(v, cws, seconds.get(v.workload), budget)
    verdicts += score_verdicts(
        store, sweep_id, _scores(scores, workload, cws), reqs, sweep.measured
    )
    warnings = _warnings(sweep_id, info["status"], cws) + emulated_rtt_notes(store, sweep_id, cws)
    # the cells the time budget cut before a ranking's runs: named, not dropped silently (issue 70)
    cut = budget_cut_line(cws, rank_kw["stops"], min_n)
    warnings += [cut] if cut else []
    # One answer per role the plan ran (report/recommend/roles.py, docs/roles.md), shown first by
    # every output.
    allowed = {c.label() for c in cws if all(q.met_by(c.axes) for q in reqs)}
    roles = (
        role_answers(
            info["plan_definition"],
            verdicts,
            cws,
            allowed,
            margin,
            sweep.rounds,
            run_seconds=seconds,
            budget=budget,
        )
        if workload is None
        else []
    )
    shapes = workload_shapes(store, cws)
    ram = info["host"].get("mem_bytes")
    mark_page_cache(verdicts, cws, shapes, ram)

    def findings(told: list[CellWorkload], short: bool = False, brief: bool = False) -> list[str]:
        return _findings(
            told,
            threshold=rank_kw["threshold"],
            shapes=shapes,
            interference=interference,
            ram_bytes=ram,
            short=short,
            plan=plan_command(info["plan"]),
            brief=brief,
        )

    # With roles the first screen is theirs: it tells only what their jobs' figures show (the rest
    # is detail). The first screen tells the page cache short; JSON and --detail carry every figure.
    jobs = {w for r in roles for w in r.jobs}
    told = [c for c in cws if c.workload in jobs] if roles else cws
    return Recommendation(
        sweep_id=sweep_id,
        plan=info["plan"],
        status=info["status"],
        requirements=reqs,
        current=current,
        verdicts=verdicts,
        warnings=warnings,
        objective=None if objective is None else objective.value,
        allow_data_loss=allow_data_loss,
        findings=findings(cws),
        roles=roles,
        first_findings=findings(told, short=True),
        guests=guests_used(store, sweep_id),
        brief_findings=findings(told, brief=True),
    )


def _keep_order(current: CurrentConfig | None) -> Callable[..., Any]:
    """Which configuration an equivalent answer keeps: the current one when known (--current, or
    the one `run --current` measured), else QEMU's default, else the simplest (report/keep.py)."""
    if current is None:
        return keep_defaults
    return keep_current(lambda cells, best: matching_current(cells, best, current)[0])


def plan_command(plan: str) -> str:
    """The command that shows a sweep's plan again (its cost, what its region measures): a built-in
    by its name, a plan file by the file, which the database does not record."""
    return f"iomatrix plan {plan}" if plan in builtin_names() else "iomatrix plan PLAN.toml"


def _scores(
    scores: Sequence[str] | None, workload: str | None, cws: list[CellWorkload]
) -> Sequence[str]:
    """The weighted scores asked for, checked (default: every score when the sweep has a guest tier
    and no single workload was asked for)."""
    if scores is None:
        scores = SCORES if workload is None and any(is_vm_view(c.axes["tier"]) for c in cws) else ()
    for sc in scores:
        if sc not in SCORES:
            raise UserError(f"unknown score '{sc}'", hint=f"use {', '.join(SCORES)}")
    return scores


def _workload_answers(
    sweep: _Sweep,
    cws: list[CellWorkload],
    w: str,
    per_backing: list[str] | None,
    rank_kw: dict[str, Any],
) -> list[Verdict]:
    """Workload `w`'s verdicts: one, or on shared storage one per backing (`per_backing`:
    answer_backings)."""
    if per_backing is None or verdict_tier(w) is not None:
        return [_workload_answer(sweep, cws, w, rank_kw)]
    out = []
    for name, mine in answer_groups(cws, w, per_backing):
        v = _workload_answer(sweep, mine, w, rank_kw)
        # one configuration per backing (and RTT) across its client counts: a condition, not a
        # choice (per_backing.configuration_group)
        out.append(replace(v, workload=name or w, group=configuration_group(w, name)))
    return out


def _findings(
    cws: list[CellWorkload],
    *,
    threshold: float,
    shapes: dict[str, IoShape],
    interference: dict[int, RunInterference],
    ram_bytes: int | None,
    short: bool = False,
    plan: str = "iomatrix plan",
    brief: bool = False,
) -> list[str]:
    """What the figures show beyond the answers, decided by each workload's shape
    (report/rbd_flush.py, report/shape_findings.py); ``short``: the first screen's forms;
    ``brief``: one line each (a crowded first screen's)."""
    metric = lambda w: primary_metric(w)[0]  # noqa: E731
    by_shape = shape_findings(
        cws,
        threshold,
        shapes,
        metric,
        ram_bytes,
        interference=interference,
        short=short,
        plan=plan,
        brief=brief,
    )
    return _protocol_findings(cws, threshold, shapes, interference, short, brief) + by_shape


def _protocol_findings(
    cws: list[CellWorkload],
    threshold: float,
    shapes: dict[str, IoShape],
    interference: dict[int, RunInterference],
    short: bool,
    brief: bool,
) -> list[str]:
    """Each network protocol's own findings (its `findings` hook: librbd's cache on Ceph RBD) on
    the sweep's cells on it."""
    found: list[str] = []
    for network in protocols():
        mine = [c for c in cws if c.backing.get("backing_type") == network.name]
        for finding in network.findings if mine else ():
            found += load_object(finding)(mine, threshold, shapes, interference, short, brief)
    return found


def _workload_answer(
    sweep: _Sweep, cws: list[CellWorkload], w: str, rank_kw: dict[str, Any]
) -> Verdict:
    """One workload's verdict: the durability tier's own verdicts, or the ranking's (by `objective`)
    on its basis."""
    owner = verdict_tier(w)
    if owner is not None:
        # Trials are not ranked by how many records they lost: the verdicts per configuration are
        # the answer.
        own = companion(owner.name)
        return Verdict(
            w,
            primary_metric(w)[0],
            False,
            owner.name,
            None,
            missing=f"{owner.verdicts}, not a speed ranking: "
            f"{own.verdict_summary(sweep.store, sweep.sweep_id, w)}",
            evidence=own.verdict_lines(sweep.store, sweep.sweep_id, w),
        )
    ids = [rid for c in cws if c.workload == w for rid in c.runs]
    chosen = None if sweep.objective is None else objective_metric(sweep.objective, w)
    vals = run_values(sweep.store, ids, chosen or primary_metric(w)[0])
    per_run = {rid: (sweep.rounds[rid], v) for rid, v in vals.items() if rid in sweep.rounds}
    kw: dict[str, Any] = {"metric": chosen, "per_run": per_run, **rank_kw}
    wr = rank_workload(cws, w, **kw)
    if wr is None:
        m = "no ranked cells (only the null ceiling, or no figure for the primary metric)"
        return Verdict(w, "", True, "", None, missing=m)
    return verdict_on_its_basis(cws, wr, sweep.reqs, sweep.current, sweep.measured, kw)


def _warnings(sweep_id: int, status: str, cws: list[CellWorkload]) -> list[str]:
    warnings = []
    if not cws:
        warnings.append(
            f"sweep {sweep_id} has no completed runs yet: nothing to recommend (run 'iomatrix run' "
            "with this database: it resumes)"
        )
    if status != "finished":
        warnings.append(f"sweep {sweep_id} is {status}: figures may change when it completes")
    if any("tcg" in a for c in cws for a in c.accel):
        warnings.append(TCG_WARNING)
    return warnings
