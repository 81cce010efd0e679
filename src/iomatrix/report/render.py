"""Texts of figures (intervals bounded at 0, ratios) and the recommendation's renderer.

Report modules produce data (a `Recommendation`, tables in `exports.py`); this module writes the
recommendation as terminal text, Markdown, JSON or CSV. Tables go through the exporters in `report/export/`.
Nothing here computes a statistic.

An interval of a quantity that cannot be negative is never shown below zero: its lower end is bounded at 0
and marked "≥0" with a note that says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iomatrix.report.export.table import DataTable
from iomatrix.report.formats import OutputFormat
from iomatrix.report.objective import Objective, objective_line
from iomatrix.ui import fmt

if TYPE_CHECKING:
    from iomatrix.report.recommend import Gain, Recommendation, Verdict
    from iomatrix.snippets import Snippet

BOUNDED_NOTE = "≥0: the interval's lower end is bounded at 0 (the quantity cannot be negative)"
NO_INTERVAL_NOTE = ("no interval: Fieller's interval of a ratio is unbounded when the denominator's mean is not "
                    "clearly above zero (too noisy); or the figure is a point ratio")


def ci_text(low: float | None, high: float | None, *, positive: bool = True) -> tuple[str, bool]:
    """'low–high', bounded at 0 for a positive quantity; returns (text, bounded)."""
    if low is None or high is None:
        return "–", False
    if positive and low < 0:
        return f"≥0–{fmt(high)}", True
    return f"{fmt(low)}–{fmt(high)}", False


def ratio_text(ratio: float | None, low: float | None, high: float | None) -> str:
    if ratio is None:
        return "–"
    if low is None or high is None:
        return f"{ratio:.2f}× (no interval)"
    lo = "≥0" if low < 0 else f"{low:.2f}"
    return f"{ratio:.2f}× ({lo}–{high:.2f})"


# --------------------------------------------------------------------------- the recommendation


def comparisons(v: Verdict) -> list[Gain]:
    """Every ratio a verdict states: against the other cells, then bare metal, the ceiling, the requirements."""
    return [*v.gains, *(x for x in (v.to_baremetal, v.to_ceiling, v.requirement_cost) if x)]


def recommendation_text(rec: Recommendation, markdown: bool = False) -> str:
    """The recommendation as terminal text or Markdown."""
    out = _header_lines(rec, "## " if markdown else "")
    printed: set[str] = set()  # snippets are printed once per configuration
    for v in rec.verdicts:
        out.append("")
        out += _verdict_lines(v, markdown, printed)
    return "\n".join(out) + "\n"


def _header_lines(rec: Recommendation, h1: str) -> list[str]:
    out = [f"{h1}Recommendation · sweep {rec.sweep_id} ({rec.plan}, {rec.status})"]
    if rec.objective is not None:
        out.append(objective_line(Objective(rec.objective)))
    if rec.requirements:
        out.append("Requirements: " + "; ".join(f"{r.name} = {r.meaning}" for r in rec.requirements))
    if rec.current is not None:
        d = f" (defaulted: {', '.join(rec.current.defaulted)})" if rec.current.defaulted else ""
        out.append(f"Current configuration: {rec.current.label()} from {rec.current.source}{d}")
    out += [f"warning: {w}" for w in rec.warnings]
    return out


def _verdict_lines(v: Verdict, markdown: bool, printed: set[str]) -> list[str]:
    """One workload's answer: the choice, its ratios, its risks and its snippets."""
    better = "higher" if v.higher_is_better else "lower"
    out = [f"{'### ' if markdown else ''}{v.workload} · {v.metric or '–'} ({better} is better) · "
           f"tier {v.tier or '–'}"]
    if v.choice is None:
        return [*out, f"no recommendation: {v.missing}"]
    return out + _choice_lines(v) + _risk_lines(v) + _snippet_lines(v, markdown, printed)


def _choice_lines(v: Verdict) -> list[str]:
    assert v.choice is not None
    ci, bounded = ci_text(*v.ci)
    n = f", n={v.n}" if v.n else ""
    out = [f"use: {v.choice.cell}  — {'score' if v.metric == 'score' else 'mean'} {fmt(v.mean)} "
           f"(95% CI {ci}{n})"]
    if v.basis:
        out.append(f"  note: {v.basis}")
    if v.choice.tied:
        how = "score intervals overlap" if v.metric == "score" else "not significantly different"
        out.append(f"tied ({how}): {'; '.join(v.choice.tied)}")
    gains = comparisons(v)
    return out + [_gain_line(g) for g in gains] + _interval_notes(gains, bounded)


def _interval_notes(gains: list[Gain], bounded: bool) -> list[str]:
    """Why an interval is bounded at 0, or why a ratio has none."""
    out = [f"  {BOUNDED_NOTE}"] if bounded else []
    if any(g.ratio is not None and g.ratio.ratio is not None and g.ratio.low is None for g in gains):
        out.append(f"  {NO_INTERVAL_NOTE}")
    return out


def _gain_line(g: Gain) -> str:
    r = g.ratio
    rt = ratio_text(*(r if r is not None else (None, None, None)))
    tail = f" [{g.note}]" if g.note else ""
    return f"  vs {g.against}: {rt}{tail}"


def _risk_lines(v: Verdict) -> list[str]:
    if not v.risks:
        return []
    return [f"risks ({v.risks[0].basis}):", *(f"  - on {rs.situation}: {rs.text}" for rs in v.risks)]


def _snippet_lines(v: Verdict, markdown: bool, printed: set[str]) -> list[str]:
    if v.snippets is None:
        return []
    config = v.snippets.config
    if config.label() in printed:
        return [f"snippets: as above ({config.label()})"]
    printed.add(config.label())
    out = []
    if config.assumed:
        out.append(f"snippets assume {', '.join(config.assumed)} (not swept): " + config.label())
    for s in v.snippets.snippets:
        out += _snippet_block(s, markdown)
    return out


def _snippet_block(s: Snippet, markdown: bool) -> list[str]:
    out = [f"{'#### ' if markdown else '# '}{s.title}"]
    if s.text is None:
        return [*out, s.note]
    out += [f"```{s.language}", s.text, "```"] if markdown else [s.text]
    if s.note:
        out.append(f"({s.note})")
    return out


def recommendation_table(rec: Recommendation) -> DataTable:
    """The recommendation as table data: one row per ratio a verdict states (one row when it states none)."""
    rows = []
    for v in rec.verdicts:
        base = {"workload": v.workload, "metric": v.metric, "chosen": v.choice.cell if v.choice else None,
                "tied": "; ".join(v.choice.tied) if v.choice else None, "mean": v.mean, "missing": v.missing}
        for g in comparisons(v):
            rows.append({**base, "against": g.against, "ratio": g.ratio.ratio if g.ratio else None,
                         "ci95_low": g.ratio.low if g.ratio else None,
                         "ci95_high": g.ratio.high if g.ratio else None})
        if not v.gains:
            rows.append(base)
    return DataTable("", ["workload", "metric", "chosen", "tied", "mean", "against", "ratio", "ci95_low",
                          "ci95_high", "missing"], rows)


def render_recommendation(rec: Recommendation, format: OutputFormat | str,
                          consolidation: list[dict[str, Any]] | None = None) -> str:
    """`consolidation`: the consolidation answers (report.consolidation.consolidation_json), added to the JSON
    document under "consolidation" when the sweep has them (the table and markdown forms print them as text)."""
    f = OutputFormat(format)
    if f == OutputFormat.json:
        from iomatrix.report.export import json

        doc = rec.as_dict()
        if consolidation:
            doc["consolidation"] = consolidation
        return json.dumps(doc) + "\n"
    if f == OutputFormat.csv:
        from iomatrix.report.export import csv

        return csv.export([recommendation_table(rec)])
    return recommendation_text(rec, markdown=f == OutputFormat.markdown)
