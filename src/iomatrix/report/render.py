"""Texts of figures (intervals bounded at 0, ratios) and the recommendation's renderer.

Report modules produce data (a `Recommendation`, tables in `exports.py`); this module writes the
recommendation as terminal text, Markdown, JSON or CSV. Tables go through the exporters in `report/export/`.
Nothing here computes a statistic.

An interval of a quantity that cannot be negative is never shown below zero: its lower end is bounded at 0
and marked "≥0" with a note that says so. An interval that reaches 0 or spans more than 10×
(stats/precision.py) is shown as "not measured precisely" instead of as a figure.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iomatrix.report.companions import companion
from iomatrix.report.export import csv, json
from iomatrix.report.export.table import DataTable
from iomatrix.report.figures import BOUNDED_NOTE, NO_INTERVAL_NOTE, ci_text, imprecise, ratio_text
from iomatrix.report.formats import OutputFormat
from iomatrix.report.headline import (
    DEFAULT_TARGET,
    SHORTER_FORM,
    TARGETS,
    Headline,
    Pick,
    WorkloadGain,
    headline,
    verdict_labels,
)
from iomatrix.report.naming import cell_names
from iomatrix.report.objective import Objective, objective_line
from iomatrix.report.query import sweep_info
from iomatrix.report.recommend import recommend
from iomatrix.store import Store
from iomatrix.tiers import tier_classes
from iomatrix.ui import fmt

if TYPE_CHECKING:
    from iomatrix.report.recommend import Gain, Recommendation, Verdict
    from iomatrix.snippets import Snippet

# --------------------------------------------------------------------------- the recommendation


def comparisons(v: Verdict) -> list[Gain]:
    """Every ratio a verdict states: against the other cells, then bare metal, the ceiling, the requirements."""
    return [*v.gains, *(x for x in (v.to_baremetal, v.to_ceiling, v.requirement_cost) if x)]


# Snippets the detail shows whatever the target: the image to create, and the eatmydata wrapper QEMU runs under; a
# network storage's own (ceph.conf, the target's LUN) are shown with every VM tool too (`_shown_with`).
TOOLS_WITH_EVERY_TARGET = ("qemu-img", "qemu-wrapper")


class Code(str):
    """A snippet's text among prose lines: never wrapped, never renamed (code_lines breaks XML where it may)."""

    language: str

    def __new__(cls, text: str, language: str) -> Code:
        self = super().__new__(cls, text)
        self.language = language
        return self


def recommendation_text(rec: Recommendation, markdown: bool = False, width: int | None = None,
                        target: str | None = None) -> str:
    """The recommendation's detail as terminal text or Markdown: prose wrapped to `width` (None: not wrapped),
    cells named by the axes that vary (the shared ones stated once in the header); snippets of every tool, or of
    `target` only (and the image's qemu-img line)."""
    names = cell_names(label for v in rec.verdicts for label in verdict_labels(v))
    out = _header_lines(rec, "## " if markdown else "")
    if names.constant_text():
        out.append(f"All cells named below, where the axis applies: {names.constant_text()}")
    printed: set[str] = set()  # snippets are printed once per configuration
    for v in rec.verdicts:
        if v.metric == "score" and v.choice is None:
            continue  # a weighted score the plan has no inputs for: not an answer this sweep could have given
        out.append("")
        out += _verdict_lines(v, markdown, printed, target)
    lines = []
    for line in out:
        if isinstance(line, Code):
            lines += code_lines(line, line.language, width) if width else [str(line)]
            continue
        line = names.rename(line)
        indent = line[:len(line) - len(line.lstrip())]
        lines += wrap(line.strip(), width, indent) if width and line.strip() else [line]
    return "\n".join(lines) + "\n"


def _header_lines(rec: Recommendation, h1: str) -> list[str]:
    out = [f"{h1}Recommendation · sweep {rec.sweep_id} ({rec.plan}, {rec.status})"]
    if rec.objective is not None:
        out.append(objective_line(Objective(rec.objective)))
    if rec.requirements:
        out.append("Requirements: " + "; ".join(f"{r.name} = {r.meaning}" for r in rec.requirements))
    if rec.current is not None:
        d = f" (defaulted: {', '.join(rec.current.defaulted)})" if rec.current.defaulted else ""
        read = f" (read: {'; '.join(rec.current.notes)})" if rec.current.notes else ""
        out.append(f"Current configuration: {rec.current.label()} from {rec.current.source}{d}{read}")
    out += [f"warning: {w}" for w in rec.warnings]
    out += [f"finding: {f}" for f in rec.findings]
    return out


def _verdict_lines(v: Verdict, markdown: bool, printed: set[str], target: str | None = None) -> list[str]:
    """One workload's answer: the choice, its ratios, its risks and its snippets."""
    better = "higher" if v.higher_is_better else "lower"
    out = [f"{'### ' if markdown else ''}{v.workload} · {v.metric or '–'} ({better} is better) · "
           f"tier {v.tier or '–'}"]
    if v.choice is None:
        lead = v.provisional.choice.cell if v.provisional is not None and v.provisional.choice else None
        return [*out, *([f"  note: {v.basis}"] if v.basis else []), f"no recommendation: {v.missing}",
                *([f"  not settled yet; the tie-break's pick: {lead}"] if lead else []),
                *(f"  {line}" for line in v.evidence)]
    return out + _choice_lines(v) + _risk_lines(v) + _snippet_lines(v, markdown, printed, target)


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
    declined = [f"not chosen: {v.declined.text()}"] if v.declined is not None else []
    return out + [_gain_line(g) for g in gains] + declined + _interval_notes(gains, bounded)


def _interval_notes(gains: list[Gain], bounded: bool) -> list[str]:
    """Why an interval is bounded at 0, or why a ratio has none."""
    out = [f"  {BOUNDED_NOTE}"] if bounded else []
    if any(g.ratio is not None and g.ratio.ratio is not None and g.ratio.low is None for g in gains):
        out.append(f"  {NO_INTERVAL_NOTE}")
    return out


def _gain_line(g: Gain) -> str:
    r = g.ratio
    rt = ratio_text(*(r if r is not None else (None, None, None)))
    tail = f" [{'; '.join(filter(None, [g.note, g.page_cache]))}]" if g.note or g.page_cache else ""
    return f"  vs {g.against}: {rt}{tail}"


def _risk_lines(v: Verdict) -> list[str]:
    if not v.risks:
        return []
    return [f"risks ({v.risks[0].basis}):", *(f"  - on {rs.situation}: {rs.text}" for rs in v.risks)]


def _snippet_lines(v: Verdict, markdown: bool, printed: set[str], target: str | None = None) -> list[str]:
    if v.snippets is None:
        return []
    config = v.snippets.config
    if config.label() in printed:
        return [f"snippets: as above ({config.label()})"]
    printed.add(config.label())
    out = []
    if config.assumed:
        out.append(f"snippets assume {', '.join(config.assumed)} (not swept): " + config.label())
    if v.snippets.kept:
        out.append(v.snippets.kept)
    for s in v.snippets.snippets:
        if _shown_with(s, target):
            out += _snippet_block(s, markdown)
    return out


def _shown_with(s: Snippet, target: str | None) -> bool:
    """Whether the detail for `target` shows `s`: the target's own, the image's, and the storage's (not a VM tool's:
    its settings hold whichever VM tool the disk is written for)."""
    if target is None or s.tool in (target, *TOOLS_WITH_EVERY_TARGET, *SHORTER_FORM.get(target, ())):
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
    """The recommendation as table data: one row per ratio a verdict states (one row when it states none)."""
    rows = []
    for v in rec.verdicts:
        base = {"workload": v.workload, "metric": v.metric, "chosen": v.choice.cell if v.choice else None,
                "tied": "; ".join(v.choice.tied) if v.choice else None, "mean": v.mean, "missing": v.missing}
        for g in comparisons(v):
            if g.label is None and g.ratio is None:
                continue  # a default this sweep did not measure (a platform's): no ratio stated; JSON has it
            rows.append({**base, "against": g.against, "ratio": g.ratio.ratio if g.ratio else None,
                         "ci95_low": g.ratio.low if g.ratio else None,
                         "ci95_high": g.ratio.high if g.ratio else None})
        if not v.gains:
            rows.append(base)
    return DataTable("", ["workload", "metric", "chosen", "tied", "mean", "against", "ratio", "ci95_low",
                          "ci95_high", "missing"], rows)


def render_recommendation(rec: Recommendation, format: OutputFormat | str,
                          consolidation: list[dict[str, Any]] | None = None, *, headline: Headline | None = None,
                          detail: bool = True, width: int | None = None) -> str:
    """`consolidation`: the consolidation answers (report.consolidation.consolidation_json), added to the JSON
    document under "consolidation" when the sweep has them (the table and markdown forms print them as text).
    `headline` comes first (JSON: under "headline"); the detail follows in the terminal only with `detail`
    (Markdown, a document, always has it). `width`: the terminal's columns, for wrapping."""
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
    text = headline_text(headline, width or 100, markdown)
    if detail and not markdown and not rec.verdicts:
        text += f"\nnothing to detail: sweep {rec.sweep_id} has no ranked workloads yet\n"
    elif detail or markdown:
        text += "\n" + recommendation_text(rec, markdown, width, None if markdown else headline.target)
    return text


# --------------------------------------------------------------------------- the headline

STATUS_TEXT = {"answer": "the answer", "tied": "tied: the tie-break's pick",
               "provisional": "not separated yet: the tie-break's pick", "equivalent": "kept",
               # answered with another workload's answer on the same backing (report/one_config.py)
               "joined": "tied: one configuration for the backing",
               "joined-provisional": "not separated yet: one configuration for the backing"}
# Lines a pick gives to what its alternatives measured, at most; all picks together get what is left of the
# first screen's FIRST_SCREEN_LINES (issue 49).
ALTERNATIVE_LINES = 3
FIRST_SCREEN_LINES = 30


def wrap(text: str, width: int, indent: str = "", hang: str = "  ") -> list[str]:
    """`text` wrapped to `width` columns (continuation lines indented by `hang` more); never wider, never
    empty-handed: a width too small for the indentation still gets one word per line."""
    room = max(width, len(indent) + len(hang) + 10)
    return textwrap.wrap(text, room, initial_indent=indent, subsequent_indent=indent + hang,
                         break_on_hyphens=False, break_long_words=width >= 60) or [indent]


def code_lines(text: str, language: str, width: int, indent: str = "") -> list[str]:
    """A snippet's lines, paste-ready. XML breaks between attributes where a line is too wide (whitespace between
    attributes means nothing to XML); other languages are never broken (a broken shell word is a broken
    command)."""
    out = []
    for line in text.splitlines():
        line = indent + line
        if len(line) <= width or language != "xml":
            out.append(line)
            continue
        lead = line[:len(line) - len(line.lstrip())]
        words = re.findall(r'[^\s"]+(?:"[^"]*")?|"[^"]*"', line.strip())
        cur = lead + words[0]
        for w in words[1:]:
            if len(cur) + 1 + len(w) > width:
                out.append(cur)
                cur = lead + "    " + w
            else:
                cur += " " + w
        out.append(cur)
    return out


# How many other sweeps the answer's line names before "and N more".
OTHER_SWEEPS_NAMED = 6


def other_sweeps_lines(store: Store, sweep_id: int, width: int) -> list[str]:
    """One statement under the answer naming the database's other sweeps, by id, plan and status, wrapped to
    `width`: a different plan run into an existing database is answered for, not hidden behind the latest
    sweep's answer (issue 49). [] when the sweep is the database's only one."""
    others = [s for i in store.sweep_ids() if i != sweep_id and (s := store.sweep(i)) is not None]
    if not others:
        return []
    named = ", ".join(f"{s.id} ({s.plan_name}, {s.status})" for s in others[:OTHER_SWEEPS_NAMED])
    more = f" and {len(others) - OTHER_SWEEPS_NAMED} more" if len(others) > OTHER_SWEEPS_NAMED else ""
    return wrap(f"other sweeps in this database: {named}{more}; this answer is sweep {sweep_id}'s, another's with "
                "--sweep N", width)


def gain_text(wg: WorkloadGain, cell: str) -> str:
    g = wg.gain
    if g is None:
        return f"vs {wg.against}: not in this sweep"
    # The current configuration's values compared at the cell's (zero detection for a read workload): said.
    assumed = f" (taking {', '.join(g.assumed)})" if g.assumed else ""
    if g.label == cell:
        return f"1.00×: it is {wg.against}{assumed}"
    if g.ratio is None or g.ratio.ratio is None:
        return f"vs {wg.against}: – ({g.note})" if g.note else f"vs {wg.against}: –"
    return f"{ratio_text(g.ratio.ratio, g.ratio.low, g.ratio.high)} {wg.against}{assumed}"


def wrapped_lines(lines: list[str], width: int, indent: str) -> list[str]:
    return [x for line in lines for x in wrap(line, width, indent)]


def page_cache_lines(p: Pick) -> list[str]:
    """One line per distinct page-cache warning the pick's stated ratios carry (Gain.page_cache: one side's figure
    came from the host page cache), naming the workloads it applies to, right below their ratios."""
    per: dict[str, list[str]] = {}
    for wg in p.gains:
        g = wg.gain
        if g is not None and g.page_cache and g.label != p.cell and g.ratio is not None and g.ratio.ratio is not None:
            per.setdefault(g.page_cache, []).append(wg.workload)
    return [f"page cache on {', '.join(ws)}: {note}" for note, ws in per.items()]


def headline_text(h: Headline, width: int, markdown: bool = False) -> str:
    """The headline as terminal text (every line at most `width` columns) or Markdown, laid out for one screen
    (issue 49): the header, the findings, the roles; one decision line per workload under each configuration;
    then each distinct storage setting, risk statement and snippet once (`_config_parts`), whole where the
    screen's FIRST_SCREEN_LINES leave room, else in its short form (the whole one in --detail)."""
    out = _screen_head(h, width, markdown)
    squeeze = not markdown and any(p.storage is not None for p in h.picks)
    parts = _config_parts(h, width, markdown, squeeze)
    tail = _tail(h, width, squeeze)
    # between the decisions and the parts they share (a squeezed screen's labels at the margin are gap enough)
    gap = [""] if len(h.picks) > 1 and parts and not squeeze else []
    # Markdown is a document, not a screen: everything whole, every pick its alternatives.
    room = [len(h.picks) * ALTERNATIVE_LINES * 2 if markdown else FIRST_SCREEN_LINES - len(out) - len(tail) - len(gap)
            - sum(len(_decision_lines(p, h, width, markdown, squeeze, 0)) for p in h.picks)
            - sum(len(part.short) for part in parts)]
    _fit(parts, room, markdown)
    for p in h.picks:  # what the alternatives measured gets what is left
        out += _decision_lines(p, h, width, markdown, squeeze, room)
    out += gap
    for part in parts:
        out += part.whole if part.use_whole else part.short
    out += tail
    return "\n".join(out) + "\n"


def _screen_head(h: Headline, width: int, markdown: bool) -> list[str]:
    """The lines above the configurations: the sweep, warnings, what every cell shares, the basis and baseline,
    the findings, the roles' answers and the trade-offs."""
    out = wrap(f"{'## ' if markdown else ''}Answer for {h.host} · sweep {h.sweep_id} ({h.plan}, {h.status})",
               width)
    out += [x for w in h.warnings for x in wrap(f"warning: {w}", width)]
    if h.objective is not None:
        out += wrap(objective_line(Objective(h.objective)), width)
    if h.shared:
        out += wrap(f"all cells, where the axis applies: {h.shared}", width)
    for line in h.basis:
        out += wrap(f"basis: {line}", width)
    if h.baseline_line():
        out += wrap(h.baseline_line(), width)
    for line in h.findings:  # what the figures show comes first: the answer below follows from it
        out += wrap(f"finding: {line}", width)
    out += role_lines(h, width, markdown)
    for line in h.trade_offs:
        out += ["", *wrap(line, width)]
    return out


def _fit(parts: list[_Part], room: list[int], markdown: bool) -> None:
    """Each part whole where `room` (lines, used up) allows, the most needed first; Markdown: all whole."""
    for part in sorted(parts, key=lambda part: part.priority):
        extra = len(part.whole) - len(part.short)
        part.use_whole = markdown or extra <= room[0]
        room[0] -= extra if part.use_whole and not markdown else 0


def _tail(h: Headline, width: int, squeeze: bool = False) -> list[str]:
    """The headline's lines after the picks: declined configurations, workloads without an answer, the
    verdicts tiers' lines, and where to find more (`squeeze`: the whole snippets too)."""
    out: list[str] = []
    for line in h.declined:
        out += wrap(f"not chosen: {line}", width)
    for line in h.unanswered:
        out += wrap(f"no answer for {line}", width)
    for line in h.measured:
        out += wrap(f"measured: {line}", width)
    if not h.picks and not h.unanswered and not h.measured:
        out += wrap("nothing to recommend: the sweep has no ranked workloads yet", width)
    others = "|".join(t for t in TARGETS if t != h.target)
    out.append("")
    more = "tables, tie-breaks, every risk, whole snippets" if squeeze else "tables, tie-breaks, every risk"
    out += wrap(f"more: iomatrix recommend --detail ({more}); other tools: --target {others}", width)
    return out


def role_lines(h: Headline, width: int, markdown: bool) -> list[str]:
    """One block per role, first (report/roles.py): "For a database VM: use …", each deciding figure against
    the best, and what was not chosen and why."""
    out: list[str] = []
    for r in h.roles:
        out += ["", *wrap(f"{'### ' if markdown else ''}{r['text']}", width)]
        out += [x for line in r["lines"] for x in wrap(line, width, "  ")]
    if h.roles:
        out += ["", *wrap(f"{'### ' if markdown else ''}Per job of the roles (every workload: iomatrix recommend "
                          "--detail)", width)]
    return out


def _decision_lines(p: Pick, h: Headline, width: int, markdown: bool, squeeze: bool,
                    room: list[int] | int | None) -> list[str]:
    """One configuration's decision: its name, the whole configuration (not on a squeezed screen: its snippets say
    it), one line per workload with its ratio and status, page-cache warnings, and what the notable alternatives
    measured where `room` leaves lines for them."""
    tiers = {wg.tier for q in h.picks for wg in q.gains}
    one_tier = next(iter(tiers)) if len(tiers) == 1 else None  # stated once, else per workload
    # one blank line before the configurations; between them too where the screen is not squeezed
    out = [""] if not squeeze or p is h.picks[0] else []
    measured = f" (measured by the {one_tier} tier)" if one_tier else ""
    out += wrap(f"{'### ' if markdown else ''}{p.verb}: {p.name}{measured}", width)
    first = next(q for q in h.picks if q.config == p.config)
    if p.name != p.config and not squeeze and first is p:
        out += wrap(f"({p.config})", width, "  ")
    for wg in p.gains:
        tier = f" [{wg.tier} tier]" if wg.tier and one_tier is None else ""
        status = f"kept: {wg.kept}" if wg.status == "equivalent" and wg.kept else STATUS_TEXT[wg.status]
        out += wrap(f"{wg.workload}: {gain_text(wg, p.cell)} · {status}{tier}", width, "  ")
    out += wrapped_lines(page_cache_lines(p), width, "  ")
    # A configuration stated again (another status) gets fewer.
    return out + _fitting(alternative_lines(p)[:1 if first is not p else ALTERNATIVE_LINES], width, room)


@dataclass
class _Part:
    """One distinct piece of the configurations' settings on the first screen: a storage snippet, a risk
    statement or a VM tool's snippet, printed once for every configuration it serves; `short` where the screen has
    no room for `whole` (the same when it has no shorter form); lower `priority` gets room first."""

    whole: list[str]
    short: list[str]
    priority: int
    use_whole: bool = True


def _config_parts(h: Headline, width: int, markdown: bool, squeeze: bool) -> list[_Part]:
    """Each configuration's storage settings, risks and snippet, each distinct text once (issue 49: never
    repeated); where the answer has several configurations, those serving some of its workloads first, each set
    under the workloads it serves, then those serving every workload."""
    keyed: dict[tuple[str, str], tuple[list[int], _Part]] = {}
    for i, p in enumerate(h.picks):
        for key, part in _pick_parts(p, h.target, width, markdown, squeeze):
            keyed.setdefault(key, ([], part))[0].append(i)
    served: dict[tuple[int, ...], list[_Part]] = {}
    for picks, part in keyed.values():
        served.setdefault(tuple(picks), []).append(part)
    everyone = tuple(range(len(h.picks)))
    out: list[_Part] = []
    for picks, parts in sorted(served.items(), key=lambda kv: (kv[0] == everyone, kv[0])):
        if len(served) > 1:
            label = wrap(f"{_served(h, picks, everyone)}:", width)
            out.append(_Part(label, label, -1))
        out += parts
    return out


def _served(h: Headline, picks: tuple[int, ...], everyone: tuple[int, ...]) -> str:
    """Whom a part serves: "for every workload", "on iscsi" (every workload of that backing), or "for" the
    workloads by name."""
    if picks == everyone:
        return "for every workload"
    mine = [wg for i in picks for wg in h.picks[i].gains]
    groups = {wg.group for wg in mine}
    group = next(iter(groups))
    if len(groups) == 1 and group and len(mine) == sum(wg.group == group for p in h.picks for wg in p.gains):
        return f"on {group}"
    return "for " + ", ".join(wg.workload for wg in mine)


def _pick_parts(p: Pick, target: str, width: int, markdown: bool, squeeze: bool) -> list[tuple[tuple[str, str], _Part]]:
    """A pick's storage settings, risks and snippet as (kind, its text) → _Part: the storage's first (what a
    shared storage's answer sets there, issue 49), then the risks, then the VM tool's snippet."""
    out = []
    if p.storage is not None and p.storage.text is None and p.storage.summary:  # nothing to set there: said
        out.append((("storage", p.storage.summary), _Part(*[wrap(p.storage.summary, width, "  ")] * 2, 1)))
    elif p.storage is not None and p.storage.text is not None:
        s = p.storage
        short = wrap(s.summary, width, "  ")  # the whole one: --detail, as the screen's last line says
        whole = [*wrap(f"{s.tool}: {s.title}; the rest: --detail", width, "  "),
                 *([f"```{s.language}", *code_lines(s.text, s.language, width), "```"] if markdown
                   else code_lines(s.text, s.language, width, "    "))]
        out.append((("storage", s.text), _Part(whole, short, 1)))
    if p.risks:
        whole = wrap(f"risks ({p.risks[0][2]}):", width, "  ")
        whole += [x for situation, text, _ in p.risks for x in wrap(f"{situation}: {text}", width, "    ")]
        said = "; ".join(f"{situation}: {text}" for situation, text, _ in p.risks)
        short = wrap(f"risks ({p.risks[0][2]}): {said}", width, "  ") if squeeze else whole
        out.append((("risks", repr(p.risks)), _Part(whole, short, 2)))
    whole = _pick_snippet_lines(p, target, width, markdown)
    if whole:
        short = _short_snippet(p, target, width) if squeeze else whole
        out.append((("snippet", "\n".join(whole)), _Part(whole, short, 0)))
    return out


def _short_snippet(p: Pick, target: str, width: int) -> list[str]:
    """A VM tool's snippet in a line or two where the screen has no room for it whole: an XML <disk>'s <driver>
    element (what the answer sets; the element whole in --detail); other tools' snippets are never cut."""
    s = p.snippet
    whole = _pick_snippet_lines(p, target, width, False)
    if s is None or s.text is None or s.language != "xml" or p.data_step is not None or p.kept_line:
        return whole
    driver = next((line.strip() for line in s.text.splitlines() if line.strip().startswith("<driver")), None)
    if driver is None:
        return whole
    return wrap(f"{target}: {driver}", width, "  ")  # the whole <disk>: --detail, as the screen's last line says


def _pick_snippet_lines(p: Pick, target: str, width: int, markdown: bool) -> list[str]:
    """A pick's snippet for `target`: with --current, the data step before it and what was kept after it."""
    out: list[str] = []
    if p.snippet is not None:
        if p.data_step is not None:  # the user's data first: the snippet below points at the copy
            out += _pick_code(p.data_step, DATA_STEP_TITLE, width, markdown)
        out += wrap(f"{target}: {p.snippet.title}", width, "  ")
        if p.snippet.text is None:
            out += wrap(p.snippet.note, width, "    ")
        else:
            out += _pick_code(p.snippet, "", width, markdown)
    if p.kept_line:
        out += wrap(p.kept_line, width, "  ")
    return out


DATA_STEP_TITLE = "first, your data (shut the VM down; the old image is kept):"


def _pick_code(s: Snippet, title: str, width: int, markdown: bool) -> list[str]:
    """A snippet's text on the first screen, under `title` (none when '')."""
    assert s.text is not None
    out = wrap(title, width, "  ") if title else []
    if markdown:
        return [*out, f"```{s.language}", *code_lines(s.text, s.language, width), "```"]
    return out + code_lines(s.text, s.language, width, "    ")


def _fitting(lines: list[str], width: int, room: list[int] | int | None) -> list[str]:
    """`lines` wrapped, as many as fit in `room` (a one-element list, used up as lines are given, shared by the
    picks; an int for one pick alone; None: no limit beyond the lines given)."""
    left = room if isinstance(room, list) else [ALTERNATIVE_LINES * 2 if room is None else room]
    out: list[str] = []
    for line in lines:
        wrapped = wrap(line, width, "  ")
        if len(wrapped) > left[0]:
            break
        out += wrapped
        left[0] -= len(wrapped)
    return out


def alternative_lines(p: Pick) -> list[str]:
    """What the notable alternatives measured against the pick, one line per alternative (at most
    ALTERNATIVE_LINES), each with its paired ratio and interval per workload: "cache=none: 0.48× (0.44–0.52) on
    rand-write-4k". An alternative's ratio is alternative/pick: below 1 it is worse."""
    per: dict[str, list[str]] = {}
    for wg in p.gains:
        for a in wg.alternatives:
            r = a.ratio
            if r is None or r.ratio is None:
                said = f"– ({a.note or 'no ratio'})"
            elif r.low is not None and r.high is not None and imprecise(r.low, r.high):
                said = f"{r.low:.2g}–{r.high:.3g}× (imprecise)"  # the bounds only: the point ratio is no figure
            else:
                said = ratio_text(*r)
            per.setdefault(a.against, []).append(f"{said} on {wg.workload}")
    return [f"vs {name}: {', '.join(parts)}" for name, parts in list(per.items())[:ALTERNATIVE_LINES]]


def end_of_run_text(store: Store, sweep_id: int, width: int, target: str = DEFAULT_TARGET,
                    allow_data_loss: bool = False) -> str:
    """What `iomatrix run` ends with: the tiers' own verdict lines (the durability tier's), then the headline."""
    lines: list[str] = []
    for tier in tier_classes():
        own = companion(tier.name).verdict_lines(store, sweep_id) if tier.verdicts else []
        if own:
            lines += [x for line in (tier.verdict_heading, *own) for x in wrap(line, width)]
    rec = recommend(store, sweep_id, allow_data_loss=allow_data_loss)
    head = headline(rec, sweep_info(store, sweep_id)["host"]["hostname"], target)
    return "\n".join([*lines, headline_text(head, width).rstrip("\n")])
