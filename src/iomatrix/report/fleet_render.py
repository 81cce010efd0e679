"""The fleet answers laid out: prose (`fleet_lines`, the statements and the choice's risks), tables
for every `--format` (`fleet_tables`; JSON and CSV open with `group_answers_table`), the HTML
report's opening answer and heat maps (`fleet_html`), and what `rank`/`recommend` print
(`render_fleet`). Nothing here decides: the answers are computed once by report/fleet.py
(`fleet_answers`) and only rendered here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from iomatrix.errors import UserError
from iomatrix.report.export import render_tables
from iomatrix.report.export.table import DataTable
from iomatrix.report.figures import ratio_text
from iomatrix.report.fleet import (
    MAX_HOST_COLUMNS,
    Fleet,
    WorkloadFleet,
    fleet_answers,
    is_fleet,
    select_fleet,
)
from iomatrix.report.formats import OutputFormat
from iomatrix.report.headline import HEADLINE_SITUATIONS
from iomatrix.report.render import code_lines, wrap
from iomatrix.store import Store

# -- rendering -------------------------------------------------------------------------------------


def risk_lines(wf: WorkloadFleet) -> list[str]:
    """The choice's risks as one host's answer states them: QEMU crash, power loss, live
    migration."""
    shown = [r for r in wf.risks if r.situation in HEADLINE_SITUATIONS]
    if not shown:
        return []
    return [
        f"  risks ({shown[0].basis}):",
        *(f"    {HEADLINE_SITUATIONS[r.situation]}: {r.text}" for r in shown),
    ]


def answer_lines(wf: WorkloadFleet) -> list[str]:
    """One group's answer for one workload: the statement, what the choice risks, what the
    requirements exclude."""
    declined = wf.declined_text()
    return [wf.statement(), *risk_lines(wf), *([f"  {declined}"] if declined else [])]


def fleet_lines(answers: Sequence[WorkloadFleet]) -> list[str]:
    """The answers in prose: per group and workload the statement and risks, then each host's own
    answer."""
    out = []
    for wf in answers:
        out += answer_lines(wf)
        out += [f"  {wf.host_line(h)}" for h in wf.answer.hosts]
    return out


def group_answers_table(answers: Sequence[WorkloadFleet]) -> DataTable:
    """The group answers as data (JSON, CSV): one row per group and workload
    (docs/results-json.md)."""
    rows = []
    for wf in answers:
        a = wf.answer
        w = a.worst
        row: dict[str, Any] = {
            "group": wf.group,
            "workload": wf.workload,
            "tier": wf.tier,
            "metric": wf.metric,
            "higher_is_better": a.higher_is_better,
            "status": wf.status,
            "answer": wf.short(a.choice) if a.choice else None,
            "axes": a.choice,
            "hosts": list(a.hosts),
            "wins": a.wins.get(a.choice, 0) if a.choice else 0,
            "leads": a.leads.get(a.choice, 0) if a.choice else 0,
            "tied": list(a.tied_choices),
            "tie_break": list(a.tie_break),
            "best_on_every_host": a.best_everywhere,
            "not_separated": list(a.unsettled),
            "differing": list(a.differing),
            "missing": {h: list(cs) for h, cs in a.missing.items()},
            "worst_host": None if w is None else w.host,
            "worst_host_best": None if w is None else w.best,
            "worst_ratio": None if w is None else w.ratio.ratio,
            "worst_ci95_low": None if w is None else w.ratio.low,
            "worst_ci95_high": None if w is None else w.ratio.high,
            "risks": [
                {"situation": r.situation, "text": r.text, "basis": r.basis} for r in wf.risks
            ],
            "snippets": None if wf.snippets is None else wf.snippets.as_dict(),
            "declined": None
            if wf.declined is None
            else {
                "cell": wf.declined.cell,
                "wins": wf.declined.wins,
                "fails": list(wf.declined.fails),
                "risk": wf.declined.risk,
                "opt_in": wf.declined.opt_in,
                "text": wf.declined_text(),
            },
            "statement": wf.statement(),
        }
        rows.append(row)
    return DataTable(
        "group answers (one configuration per host group and workload)",
        ["group", "workload", "tier", "metric", "status", "answer", "statement"],
        rows,
        axes=["group", "workload", "tier", "metric"],
    )


def hosts_table(answers: Sequence[WorkloadFleet]) -> DataTable:
    """Per-host answers side by side: one row per group, workload and host."""
    rows = []
    for wf in answers:
        losses = {x.host: x for x in wf.answer.losses}
        for h in wf.answer.hosts:
            wr = wf.per_host[h]
            d = wr.decision
            loss = losses.get(h)
            rows.append(
                {
                    "group": wf.group,
                    "workload": wf.workload,
                    "tier": wf.tier,
                    "metric": wf.metric,
                    "host": h,
                    "sweep": wf.sweeps[h],
                    "own answer": wf.own_answer(h),
                    "decision": d.kind if d else None,
                    "settled": d is not None and d.answer is not None,
                    "group's choice vs own best": ratio_text(*loss.ratio) if loss else None,
                    "ratio": loss.ratio.ratio if loss else None,
                    "ci95_low": loss.ratio.low if loss else None,
                    "ci95_high": loss.ratio.high if loss else None,
                    "agrees": None
                    if wf.answer.choice is None
                    else "not separated"
                    if h in wf.answer.unsettled
                    else ("yes" if h not in wf.answer.differing else "no"),
                }
            )
    return DataTable(
        "per-host answers (each host ranked as 'rank --sweep N' ranks it)",
        [
            "group",
            "workload",
            "tier",
            "metric",
            "host",
            "sweep",
            "own answer",
            "decision",
            "group's choice vs own best",
            "agrees",
        ],
        rows,
        axes=["group", "workload", "tier", "metric"],
    )


def ranking_table(wf: WorkloadFleet) -> DataTable:
    """The configurations across the group's hosts (hosts as blocks), with each host's ratio to its
    own best."""
    a = wf.answer
    shown_hosts = list(a.hosts) if len(a.hosts) <= MAX_HOST_COLUMNS else []
    rows = []
    ranking_rows = a.ranking.rows if a.ranking is not None else ()
    names = [r.name for r in ranking_rows] or sorted(a.wins)
    by_name = {r.name: r for r in ranking_rows}
    for name in names:
        r = by_name.get(name)
        row: dict[str, Any] = {
            "rank": r.rank if r else None,
            "group": r.group_label if r else None,
            "configuration": wf.short(name),
            "axes": name,
            "centre": r.centre if r else None,
            "vs best": ratio_text(*r.ratio_to_best) if r and r.ratio_to_best else None,
            "wins": f"{a.wins.get(name, 0)}/{len(a.hosts)}",
            "chosen": name == a.choice,
        }
        # the ratio as the loss prints it (one figure), the number beside it for machines
        for h in a.hosts:
            heat = a.heat.get(h, {}).get(name)
            row[h] = None if heat is None else f"{heat:.2f}×"
            row[f"{h}.ratio"] = heat
        rows.append(row)
    notes = [line.strip() for line in answer_lines(wf)]
    if a.ranking is not None:
        notes.append("hosts as blocks: " + host_block_description(a.ranking.test_description))
    notes.append(
        "host columns: the mean of the configuration's runs on that host over the host's "
        "own best's (the "
        "ratio the loss is stated by)"
        if shown_hosts
        else f"{len(a.hosts)} hosts: each host's ratio to its own best is in --format json or csv"
    )
    title = f"{wf.group} · {wf.workload} · {wf.tier} · {wf.metric}: configurations across hosts"
    return DataTable(
        title,
        ["rank", "group", "configuration", "centre", "vs best", "wins", *shown_hosts],
        rows,
        notes=notes,
    )


def host_block_description(text: str) -> str:
    """The ranking's description of its blocked analysis, with the host where the ranking says
    round."""
    for old, new in (
        ("rounds", "hosts"),
        ("round", "host"),
        (
            "cells with n < 2 are listed last and not ranked",
            "configurations on fewer than 2 hosts are not ranked",
        ),
    ):
        text = text.replace(old, new)
    return text


def fleet_tables(answers: Sequence[WorkloadFleet]) -> list[DataTable]:
    """Every format's tables: one ranking across hosts per group × workload, then the per-host
    answers."""
    return [ranking_table(wf) for wf in answers] + ([hosts_table(answers)] if answers else [])


# -- the HTML report -------------------------------------------------------------------------------


def fleet_html(
    store: Store, group: str | None = None, **rank_kw: Any
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The HTML report's fleet parts (report/html.py): the group answers the report opens with, and
    per group and workload a section with a heat map of each host's ratio to its own best and the
    answer in prose; (None, []) unless the database holds several hosts of its plan (or `group` is
    asked for)."""
    # matplotlib behind it (report.charts imports it at module level): a refused command must not
    # write its font cache, so only a report that draws a fleet heat map loads it.
    from iomatrix.report.fleet_chart import fleet_heat_map

    if group is None and not is_fleet(store):
        return None, []

    try:
        fleet = select_fleet(store, group)
        answers = fleet_answers(store, fleet, **rank_kw)
    except UserError as err:  # the rest of the report still stands: say why the fleet view is empty
        return None, [{"id": "fleet", "title": "Fleet", "lines": [f"no fleet answer: {err}"]}]
    opening = {
        "title": f"Answer for the fleet: plan {fleet.plan}, {len(fleet.sweeps)} host(s)",
        "heading": fleet_heading(fleet),
        "answers": [
            {
                "statement": wf.statement(),
                "declined": wf.declined_text(),
                "risks": [
                    (HEADLINE_SITUATIONS[r.situation], r.text, r.basis)
                    for r in wf.risks
                    if r.situation in HEADLINE_SITUATIONS
                ],
            }
            for wf in answers
        ],
    }
    out = []
    for i, wf in enumerate(answers):
        a = wf.answer
        configs = [r.name for r in a.ranking.rows] if a.ranking is not None else sorted(a.wins)
        svg = fleet_heat_map(list(a.hosts), configs, a.heat, a.higher_is_better, a.choice)
        better = "higher" if a.higher_is_better else "lower"
        out.append(
            {
                "id": f"fleet-{i + 1}",
                "title": f"Fleet: {wf.group} · {wf.workload} · {wf.tier}",
                "svg": svg,
                "svg_caption": f"{wf.metric} of each configuration on each host as a ratio to that "
                f"host's own best (1 = its best; {better} is better); the group's "
                "choice is outlined",
                "lines": fleet_lines([wf]),
            }
        )
    return opening, out


def together_tables(fleet: Fleet) -> list[DataTable]:
    """For JSON and CSV: one row per host that was given a common start time (`run --start-at`)."""
    rows = [
        {
            "host": host,
            "common_start_utc": datetime.fromtimestamp(t.at, UTC).isoformat(),
            "all_running_at_once_s": round(t.overlap_s, 1),
            "last_host_late_s": round(t.late_s, 1),
        }
        for t in fleet.together
        for host in t.hosts
    ]
    if not rows:
        return []
    return [
        DataTable(
            "hosts that started their runs together (run --start-at)",
            list(rows[0]),
            rows,
            notes=[t.text() for t in fleet.together],
        )
    ]


def fleet_heading(fleet: Fleet) -> str:
    groups = sorted({s.group for s in fleet.sweeps if s.group is not None})
    return (
        f"fleet: plan {fleet.plan}, {len(fleet.sweeps)} host(s): "
        + ", ".join(
            f"{s.hostname} (sweep {s.id}{', ' + s.group if s.group else ''})" for s in fleet.sweeps
        )
        + ("" if groups else "; no group recorded (iomatrix run --group)")
        + "; one host's sweep: --sweep N"
    )


def snippet_lines(
    wf: WorkloadFleet, target: str, width: int, printed: set[str], markdown: bool = False
) -> list[str]:
    """The choice's snippet for `target`, laid out as one host's answer lays it out (once per
    configuration)."""
    if wf.snippets is None:
        return []
    config = wf.snippets.config.label()
    if config in printed:
        return [f"  {target}: as above ({wf.short(wf.answer.choice)})"]
    printed.add(config)
    snippet = next((s for s in wf.snippets.snippets if s.tool == target), None)
    if snippet is None:
        return []
    out = wrap(f"{target}: {snippet.title}", width, "  ")
    if snippet.text is None:
        return out + wrap(snippet.note, width, "    ")
    if markdown:
        return [
            *out,
            f"```{snippet.language}",
            *code_lines(snippet.text, snippet.language, width),
            "```",
        ]
    return out + code_lines(snippet.text, snippet.language, width, "    ")


def render_fleet(
    fleet: Fleet,
    answers: Sequence[WorkloadFleet],
    format: OutputFormat,
    width: int,
    answer_first: bool = False,
    target: str | None = None,
) -> str:
    """The fleet answers in `format`: for people (table, markdown) the heading (and, with
    `answer_first`, each group's answer in prose) before the tables; JSON and CSV are the tables
    alone."""
    tables = fleet_tables(answers)
    if answer_first:
        tables = [hosts_table(answers)] if answers else []
    # data: the group answers first, then the tables
    if format in (OutputFormat.json, OutputFormat.csv):
        return render_tables(
            ([group_answers_table(answers)] if answers else []) + tables + together_tables(fleet),
            format,
        )
    body = render_tables(tables, format)
    lines = wrap(fleet_heading(fleet), width)
    # hosts that measured a shared backend at once: say so before any figure
    for together in fleet.together:
        lines += wrap(together.text(), width)
    if answer_first:
        printed: set[str] = set()
        for wf in answers:
            lines += wrap(wf.statement(), width)
            lines += [
                x
                for line in risk_lines(wf)
                for x in wrap(line.strip(), width, "  " if line.startswith("  risks") else "    ")
            ]
            if (declined := wf.declined_text()) is not None:
                lines += wrap(declined, width, "  ")
            if target is not None:
                lines += snippet_lines(wf, target, width, printed, format == OutputFormat.markdown)
    return "\n".join(lines) + "\n\n" + body
