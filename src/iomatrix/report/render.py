"""Renderers: report modules produce data (a `DataTable`, a `Recommendation`); this module formats it as a
terminal table, JSON, CSV or Markdown. Nothing here computes a statistic.

Terminal tables fit 100 columns: an axis with one value across every shown row moves into a header line
("constant: tier=guest backing=dir"), and an interval of a quantity that cannot be negative is never shown
below zero: its lower end is bounded at 0 and marked "≥0" with a footnote that says so.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table

from iomatrix.ui import fmt

WIDTH = 100
BOUNDED_NOTE = "≥0: the interval's lower end is bounded at 0 (the quantity cannot be negative)"
NO_INTERVAL_NOTE = ("no interval: Fieller's interval of a ratio is unbounded when the denominator's mean is not "
                    "clearly above zero (too noisy); or the figure is a point ratio")


class Format(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


@dataclass
class DataTable:
    """Rows of named values; `axes` columns are the ones folded into a header when constant."""

    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    axes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def constant_axes(self) -> dict[str, Any]:
        if len(self.rows) < 2:
            return {}
        return {a: self.rows[0].get(a) for a in self.axes
                if len({str(r.get(a)) for r in self.rows}) == 1}

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "columns": self.columns, "rows": self.rows, "notes": self.notes}


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


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return fmt(v)
    return str(v)


def to_terminal(t: DataTable, width: int = WIDTH) -> str:
    const = t.constant_axes()
    cols = [c for c in t.columns if c not in const]
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False)
    if t.title:
        con.print(t.title, markup=False)
    if const:
        con.print("constant: " + " ".join(f"{k}={_cell(v)}" for k, v in const.items()), markup=False)
    table = Table(*cols, box=None, pad_edge=False, show_edge=False)
    for c in table.columns:
        c.overflow = "fold"  # wrap, never truncate a cell name
    for r in t.rows:
        table.add_row(*(_cell(r.get(c)) for c in cols))
    con.print(table)
    for n in t.notes:
        con.print(n, markup=False)
    return buf.getvalue()


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)


def machine_columns(t: DataTable) -> list[str]:
    """The shown columns, then every other field the rows carry (numeric CI ends, raw ratios)."""
    return list(dict.fromkeys([*t.columns, *(k for r in t.rows for k in r)]))


def to_csv(t: DataTable) -> str:
    cols = machine_columns(t)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in t.rows:
        w.writerow({c: "" if r.get(c) is None else r.get(c) for c in cols})
    return buf.getvalue()


def _md_escape(v: Any) -> str:
    return _cell(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(t: DataTable) -> str:
    const = t.constant_axes()
    cols = [c for c in t.columns if c not in const]
    out = [f"### {t.title}", ""] if t.title else []
    if const:
        out += ["Constant across rows: " + ", ".join(f"`{k}={_cell(v)}`" for k, v in const.items()), ""]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join("---" for _ in cols) + "|")
    out += ["| " + " | ".join(_md_escape(r.get(c)) for c in cols) + " |" for r in t.rows]
    out += [""] + [f"*{n}*" for n in t.notes] if t.notes else []
    return "\n".join(out) + "\n"


def render_tables(tables: Sequence[DataTable], format: str) -> str:
    f = Format(format)
    if f == Format.json:
        return to_json([t.as_dict() for t in tables]) + "\n"
    if f == Format.csv:
        # One CSV stream: a "table" column says which table each row belongs to when there are several.
        if len(tables) == 1:
            return to_csv(tables[0])
        merged = DataTable("", ["table", *dict.fromkeys(c for t in tables for c in t.columns)],
                           [{"table": t.title, **r} for t in tables for r in t.rows])
        return to_csv(merged)
    if f == Format.markdown:
        return "\n".join(to_markdown(t) for t in tables)
    return "\n".join(to_terminal(t) for t in tables)


# --------------------------------------------------------------------------- the recommendation


def recommendation_text(rec: Any, markdown: bool = False) -> str:
    """The recommendation as terminal text or Markdown (rec: report.recommend.Recommendation)."""
    h1, h2, code = ("## ", "### ", "```") if markdown else ("", "", "")
    out: list[str] = []
    head = f"{h1}Recommendation · sweep {rec.sweep_id} ({rec.plan}, {rec.status})"
    out.append(head)
    if rec.requirements:
        out.append("Requirements: " + "; ".join(f"{r.name} = {r.meaning}" for r in rec.requirements))
    if rec.current is not None:
        d = f" (defaulted: {', '.join(rec.current.defaulted)})" if rec.current.defaulted else ""
        out.append(f"Current configuration: {rec.current.label()} from {rec.current.source}{d}")
    for w in rec.warnings:
        out.append(f"warning: {w}")
    printed: set[str] = set()  # snippets are printed once per configuration
    for v in rec.verdicts:
        out.append("")
        better = "higher" if v.higher_is_better else "lower"
        out.append(f"{h2}{v.workload} · {v.metric or '–'} ({better} is better) · tier {v.tier or '–'}")
        if v.choice is None:
            out.append(f"no recommendation: {v.missing}")
            continue
        ci, bounded = ci_text(*v.ci)
        n = f", n={v.n}" if v.n else ""
        out.append(f"use: {v.choice.cell}  — {'score' if v.metric == 'score' else 'mean'} {fmt(v.mean)} "
                   f"(95% CI {ci}{n})")
        if v.basis:
            out.append(f"  note: {v.basis}")
        if v.choice.tied:
            how = "score intervals overlap" if v.metric == "score" else "not significantly different"
            out.append(f"tied ({how}): {'; '.join(v.choice.tied)}")
        for g in [*v.gains, *(x for x in (v.to_baremetal, v.to_ceiling, v.requirement_cost) if x)]:
            r = g.ratio
            rt = ratio_text(*(r if r is not None else (None, None, None)))
            tail = f" [{g.note}]" if g.note else ""
            out.append(f"  vs {g.against}: {rt}{tail}")
        if bounded:
            out.append(f"  {BOUNDED_NOTE}")
        if any(g.ratio is not None and g.ratio.ratio is not None and g.ratio.low is None
               for g in [*v.gains, *(x for x in (v.to_baremetal, v.to_ceiling, v.requirement_cost) if x)]):
            out.append(f"  {NO_INTERVAL_NOTE}")
        if v.risks:
            out.append(f"risks ({v.risks[0].basis}):")
            for rs in v.risks:
                out.append(f"  - on {rs.situation}: {rs.text}")
        if v.snippets is not None and v.snippets.config.label() in printed:
            out.append(f"snippets: as above ({v.snippets.config.label()})")
        elif v.snippets is not None:
            printed.add(v.snippets.config.label())
            if v.snippets.config.assumed:
                out.append(f"snippets assume {', '.join(v.snippets.config.assumed)} (not swept): "
                           + v.snippets.config.label())
            for s in v.snippets.snippets:
                out.append(f"{'#### ' if markdown else '# '}{s.title}")
                if s.text is None:
                    out.append(s.note)
                    continue
                if markdown:
                    out.append(f"{code}{s.language}")
                out.append(s.text)
                if markdown:
                    out.append(code)
                if s.note:
                    out.append(f"({s.note})")
    return "\n".join(out) + "\n"


def render_recommendation(rec: Any, format: str, consolidation: list[dict[str, Any]] | None = None) -> str:
    """`consolidation`: the consolidation answers (report.consolidation.consolidation_json), added to the JSON
    document under "consolidation" when the sweep has them (the table and markdown forms print them as text)."""
    f = Format(format)
    if f == Format.json:
        doc = rec.as_dict()
        if consolidation:
            doc["consolidation"] = consolidation
        return to_json(doc) + "\n"
    if f == Format.csv:
        rows = []
        for v in rec.verdicts:
            base = {"workload": v.workload, "metric": v.metric, "chosen": v.choice.cell if v.choice else None,
                    "tied": "; ".join(v.choice.tied) if v.choice else None, "mean": v.mean, "missing": v.missing}
            for g in [*v.gains, *(x for x in (v.to_baremetal, v.to_ceiling, v.requirement_cost) if x)]:
                rows.append({**base, "against": g.against, "ratio": g.ratio.ratio if g.ratio else None,
                             "ci95_low": g.ratio.low if g.ratio else None,
                             "ci95_high": g.ratio.high if g.ratio else None})
            if not v.gains:
                rows.append(base)
        return to_csv(DataTable("", ["workload", "metric", "chosen", "tied", "mean", "against", "ratio",
                                     "ci95_low", "ci95_high", "missing"], rows))
    return recommendation_text(rec, markdown=f == Format.markdown)
