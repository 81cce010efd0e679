"""Texts of figures (intervals bounded at 0, ratios) and the recommendation's renderer.

Report modules produce data (a `Recommendation`, tables in `exports.py`); this module writes the
recommendation as terminal text, Markdown, JSON or CSV. Tables go through the exporters in
`report/export/`. Nothing here computes a statistic.

An interval of a quantity that cannot be negative is never shown below zero: its lower end is
bounded at 0 and marked "≥0" with a note that says so. An interval that reaches 0 or spans more than
10× (stats/precision.py) is shown as "not measured precisely" instead of as a figure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iomatrix.report.answer_groups import answer_names
from iomatrix.report.companions import companion
from iomatrix.report.export import csv, json
from iomatrix.report.export.table import DataTable
from iomatrix.report.figures import BOUNDED_NOTE, NO_INTERVAL_NOTE, ci_text
from iomatrix.report.formats import OutputFormat
from iomatrix.report.headline import DEFAULT_TARGET, SHORTER_FORM, TARGETS, Headline, headline
from iomatrix.report.objective import Objective, objective_line
from iomatrix.report.query import sweep_info
from iomatrix.report.recommend import recommend
from iomatrix.report.recommend.grammar import compared

# The first screen's layout and the shared text helpers live in report/screen.py; re-exported here,
# where the commands, the HTML report and the tests have always imported them from.
from iomatrix.report.screen import FIRST_SCREEN_LINES as FIRST_SCREEN_LINES
from iomatrix.report.screen import STATUS_TEXT as STATUS_TEXT
from iomatrix.report.screen import code_lines, headline_text, wrap
from iomatrix.report.screen import gain_text as gain_text
from iomatrix.report.screen import page_cache_lines as page_cache_lines
from iomatrix.report.screen import status_text as status_text
from iomatrix.store import Store
from iomatrix.tiers import tier_classes
from iomatrix.ui import fmt

if TYPE_CHECKING:
    from iomatrix.report.recommend import Gain, Recommendation, Verdict
    from iomatrix.snippets import Snippet

# --------------------------------------------------------------------------- the recommendation


def comparisons(v: Verdict) -> list[Gain]:
    """Every ratio a verdict states: against the other cells, then bare metal, the ceiling, the
    requirements."""
    return [*v.gains, *(x for x in (v.to_baremetal, v.to_ceiling, v.requirement_cost) if x)]


# Snippets the detail shows whatever the target: the image to create, and the eatmydata wrapper QEMU
# runs under; a network storage's own (ceph.conf, the target's LUN) are shown with every VM tool too
# (`_shown_with`).
TOOLS_WITH_EVERY_TARGET = ("qemu-img", "qemu-wrapper")


class Code(str):
    """A snippet's text among prose lines: never wrapped, never renamed (code_lines breaks XML where
    it may)."""

    language: str

    def __new__(cls, text: str, language: str) -> Code:
        self = super().__new__(cls, text)
        self.language = language
        return self


def recommendation_text(
    rec: Recommendation, markdown: bool = False, width: int | None = None, target: str | None = None
) -> str:
    """The recommendation's detail as terminal text or Markdown: prose wrapped to `width` (None: not
    wrapped), cells named by the axes that vary (the shared ones stated once in the header);
    snippets of every tool, or of `target` only (and the image's qemu-img line)."""
    names = answer_names(rec.verdicts)
    out = _header_lines(rec, "## " if markdown else "")
    if names.constant_text():
        out.append(f"All cells named below, where the axis applies: {names.constant_text()}")
    printed: set[str] = set()  # snippets are printed once per configuration
    for v in rec.verdicts:
        if v.metric == "score" and v.choice is None:
            # a weighted score the plan has no inputs for: not an answer this sweep could have given
            continue
        out.append("")
        out += _verdict_lines(v, markdown, printed, target)
    lines = []
    for line in out:
        if isinstance(line, Code):
            lines += code_lines(line, line.language, width) if width else [str(line)]
            continue
        line = names.rename(line)
        indent = line[: len(line) - len(line.lstrip())]
        lines += wrap(line.strip(), width, indent) if width and line.strip() else [line]
    return "\n".join(lines) + "\n"


def _header_lines(rec: Recommendation, h1: str) -> list[str]:
    out = [f"{h1}Recommendation · sweep {rec.sweep_id} ({rec.plan}, {rec.status})"]
    if rec.objective is not None:
        out.append(objective_line(Objective(rec.objective)))
    if rec.requirements:
        out.append(
            "Requirements: " + "; ".join(f"{r.name} = {r.meaning}" for r in rec.requirements)
        )
    if rec.current is not None:
        d = f" (defaulted: {', '.join(rec.current.defaulted)})" if rec.current.defaulted else ""
        read = f" (read: {'; '.join(rec.current.notes)})" if rec.current.notes else ""
        out.append(
            f"Current configuration: {rec.current.label()} from {rec.current.source}{d}{read}"
        )
    out += [f"warning: {w}" for w in rec.warnings]
    out += [f"finding: {f}" for f in rec.findings]
    return out


def _verdict_lines(
    v: Verdict, markdown: bool, printed: set[str], target: str | None = None
) -> list[str]:
    """One workload's answer: the choice, its ratios, its risks and its snippets."""
    better = "higher" if v.higher_is_better else "lower"
    out = [
        f"{'### ' if markdown else ''}{v.workload} · {v.metric or '–'} ({better} is better) · "
        f"tier {v.tier or '–'}"
    ]
    if v.choice is None:
        lead = (
            v.provisional.choice.cell
            if v.provisional is not None and v.provisional.choice
            else None
        )
        # Every workload ends with one configuration to use when one was measured (issue 71): the
        # pick among cells not told apart, said as such, with why it is not decided; "no
        # recommendation" only when nothing could be ranked.
        said = (
            [f"use for now: {lead}  — not told apart at this resolution", f"  {v.missing}"]
            if lead
            else [f"no recommendation: {v.missing}"]
        )
        return [
            *out,
            *([f"  note: {v.basis}"] if v.basis else []),
            *said,
            *(f"  {line}" for line in v.evidence),
        ]
    return out + _choice_lines(v) + _risk_lines(v) + _snippet_lines(v, markdown, printed, target)


def _choice_lines(v: Verdict) -> list[str]:
    assert v.choice is not None
    ci, bounded = ci_text(*v.ci)
    n = f", n={v.n}" if v.n else ""
    out = [
        f"use: {v.choice.cell}  — {'score' if v.metric == 'score' else 'mean'} {fmt(v.mean)} "
        f"(95% CI {ci}{n})"
    ]
    if v.basis:
        out.append(f"  note: {v.basis}")
    tied = [c for c in v.choice.tied if c not in v.choice.ruled_out]
    if tied:
        score = v.metric == "score"
        how = "score intervals overlap" if score else "not separated at the rule's level"
        out.append(f"tied ({how}): {'; '.join(tied)}")
    ruled_out = [c for c in v.choice.tied if c in v.choice.ruled_out]
    if ruled_out:
        pct = f"{v.choice.threshold * 100:g}%"
        out.append(f"behind, and cannot be more than {pct} better: {'; '.join(ruled_out)}")
    gains = comparisons(v)
    declined = [f"not chosen: {v.declined.text()}"] if v.declined is not None else []
    lines = [_gain_line(g, v.metric) for g in gains]
    return out + lines + declined + _interval_notes(gains, bounded)


def _interval_notes(gains: list[Gain], bounded: bool) -> list[str]:
    """Why an interval is bounded at 0, or why a ratio has none."""
    out = [f"  {BOUNDED_NOTE}"] if bounded else []
    if any(
        g.ratio is not None and g.ratio.ratio is not None and g.ratio.low is None for g in gains
    ):
        out.append(f"  {NO_INTERVAL_NOTE}")
    return out


def _gain_line(g: Gain, metric: str) -> str:
    """The choice against one other configuration in the one grammar (recommend/grammar.py): "  is
    1.06× (0.63–1.78) Nova's default", "  has 1.43× (1.20–1.70) lower latency than …"."""
    tail = f" [{'; '.join(filter(None, [g.note, g.page_cache]))}]" if g.note or g.page_cache else ""
    if g.ratio is None or g.ratio.ratio is None:
        return f"  vs {g.against}: –{tail}"
    return f"  {compared(g.ratio, metric, g.against)}{tail}"


def _risk_lines(v: Verdict) -> list[str]:
    if not v.risks:
        return []
    return [
        f"risks ({v.risks[0].basis}):",
        *(f"  - on {rs.situation}: {rs.text}" for rs in v.risks),
    ]


def _snippet_lines(
    v: Verdict, markdown: bool, printed: set[str], target: str | None = None
) -> list[str]:
    if v.snippets is None:
        return []
    config = v.snippets.config
    # the settings the snippets set, without the conditions measured under (the number of clients
    # sharing the backend: their notes say it in words); printed once per measured configuration
    if config.label() in printed:
        return [f"snippets: as above ({config.settings_label()})"]
    printed.add(config.label())
    out = []
    if config.assumed:
        out.append(
            f"snippets assume {', '.join(config.assumed)} (not swept): " + config.settings_label()
        )
    if v.snippets.kept:
        out.append(v.snippets.kept)
    for s in v.snippets.snippets:
        if _shown_with(s, target):
            out += _snippet_block(s, markdown)
    return out


def _shown_with(s: Snippet, target: str | None) -> bool:
    """Whether the detail for `target` shows `s`: the target's own, the image's, and the storage's
    (not a VM tool's: its settings hold whichever VM tool the disk is written for)."""
    if target is None or s.tool in (
        target,
        *TOOLS_WITH_EVERY_TARGET,
        *SHORTER_FORM.get(target, ()),
    ):
        return True
    return s.tool not in TARGETS and not any(s.tool in tools for tools in SHORTER_FORM.values())


def _snippet_block(s: Snippet, markdown: bool) -> list[str]:
    out = [f"{'#### ' if markdown else '# '}{s.title}"]
    if s.text is None:
        return [*out, s.note]
    out += [f"```{s.language}", _code(s), "```"] if markdown else [_code(s)]
    if s.note:
        out.append(f"({s.note})")
    return out


def _code(s: Snippet) -> Code:
    assert s.text is not None
    return Code(s.text, s.language)


def recommendation_table(rec: Recommendation) -> DataTable:
    """The recommendation as table data: one row per ratio a verdict states (one row when it states
    none)."""
    rows = []
    for v in rec.verdicts:
        base = {
            "workload": v.workload,
            "metric": v.metric,
            "chosen": v.choice.cell if v.choice else None,
            "tied": "; ".join(v.choice.tied) if v.choice else None,
            "mean": v.mean,
            "missing": v.missing,
        }
        for g in comparisons(v):
            if g.label is None and g.ratio is None:
                # a default this sweep did not measure (a platform's): no ratio stated; JSON has it
                continue
            rows.append(
                {
                    **base,
                    "against": g.against,
                    # the chosen against it in the one grammar (recommend/grammar.py)
                    "said": compared(g.ratio, v.metric, g.against)
                    if g.ratio and g.ratio.ratio is not None
                    else None,
                    "ratio": g.ratio.ratio if g.ratio else None,
                    "ci95_low": g.ratio.low if g.ratio else None,
                    "ci95_high": g.ratio.high if g.ratio else None,
                }
            )
        if not v.gains:
            rows.append(base)
    return DataTable(
        "",
        [
            "workload",
            "metric",
            "chosen",
            "tied",
            "mean",
            "against",
            "ratio",
            "ci95_low",
            "ci95_high",
            "missing",
        ],
        rows,
    )


def render_recommendation(
    rec: Recommendation,
    format: OutputFormat | str,
    consolidation: list[dict[str, Any]] | None = None,
    *,
    headline: Headline | None = None,
    detail: bool = True,
    width: int | None = None,
) -> str:
    """`consolidation`: the consolidation answers (report.consolidation.consolidation_json), added
    to the JSON document under "consolidation" when the sweep has them (the table and markdown forms
    print them as text). `headline` comes first (JSON: under "headline"); the detail follows in the
    terminal only with `detail` (Markdown, a document, always has it). `width`: the terminal's
    columns, for wrapping."""
    f = OutputFormat(format)
    if f == OutputFormat.json:
        doc = rec.as_dict()
        if headline is not None:
            doc = {"headline": headline.as_dict(), **doc}
        if rec.roles:  # the per-role answers first (report/roles.py)
            doc = {"roles": doc.pop("roles"), **doc}
        if consolidation:
            doc["consolidation"] = consolidation
        return json.dumps(doc) + "\n"
    if f == OutputFormat.csv:
        return csv.export([recommendation_table(rec)])
    markdown = f == OutputFormat.markdown
    if headline is None:
        return recommendation_text(rec, markdown, width)
    # --detail holds whatever a crowded first screen shortened: the answer laid out whole
    text = headline_text(headline, width or 100, markdown, fit=not detail)
    if detail and not markdown and not rec.verdicts:
        text += f"\nnothing to detail: sweep {rec.sweep_id} has no ranked workloads yet\n"
    elif detail or markdown:
        text += "\n" + recommendation_text(
            rec, markdown, width, None if markdown else headline.target
        )
    return text


# How many other sweeps the answer's line names before "and N more".
OTHER_SWEEPS_NAMED = 6


def other_sweeps_lines(store: Store, sweep_id: int, width: int) -> list[str]:
    """One statement under the answer naming the database's other sweeps, by id, plan and status,
    wrapped to `width`: a different plan run into an existing database is answered for, not hidden
    behind the latest sweep's answer (issue 49). [] when the sweep is the database's only one."""
    others = [s for i in store.sweep_ids() if i != sweep_id and (s := store.sweep(i)) is not None]
    if not others:
        return []
    named = ", ".join(f"{s.id} ({s.plan_name}, {s.status})" for s in others[:OTHER_SWEEPS_NAMED])
    more = (
        f" and {len(others) - OTHER_SWEEPS_NAMED} more" if len(others) > OTHER_SWEEPS_NAMED else ""
    )
    return wrap(
        f"other sweeps in this database: {named}{more}; this answer is sweep "
        f"{sweep_id}'s, another's with "
        "--sweep N",
        width,
    )


def end_of_run_text(
    store: Store,
    sweep_id: int,
    width: int,
    target: str = DEFAULT_TARGET,
    allow_data_loss: bool = False,
) -> str:
    """What `iomatrix run` ends with: the tiers' own verdict lines (the durability tier's), then the
    headline."""
    lines: list[str] = []
    for tier in tier_classes():
        own = companion(tier.name).verdict_lines(store, sweep_id) if tier.verdicts else []
        if own:
            lines += [x for line in (tier.verdict_heading, *own) for x in wrap(line, width)]
    rec = recommend(store, sweep_id, allow_data_loss=allow_data_loss)
    head = headline(rec, sweep_info(store, sweep_id)["host"]["hostname"], target)
    return "\n".join([*lines, headline_text(head, width).rstrip("\n")])
