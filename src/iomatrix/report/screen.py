"""The answer's first screen (issue 49): the headline laid out as terminal text or Markdown within
FIRST_SCREEN_LINES at the terminal's width — the header, the findings, the roles; one decision line
per workload under each configuration; then each distinct storage setting, risk statement and
snippet once, whole where the screen leaves room, else in its short form (the whole one in
`recommend --detail`). Also, re-exported from report/screen_text.py, the text helpers every
renderer shares: `wrap` (prose) and `code_lines` (snippets, never broken but XML between
attributes). Data in (report/headline.py: Headline), text out; nothing here computes a statistic or
decides an answer."""

from __future__ import annotations

from dataclasses import dataclass, replace

from iomatrix.report.headline import TARGETS, UNSEPARATED, Headline, Pick, WorkloadGain
from iomatrix.report.objective import Objective, objective_line
from iomatrix.report.recommend import DOCUMENTED
from iomatrix.report.recommend.grammar import ratio_against

# The screen's parts split along their seams (issue 68): the alternatives' lines, the snippets'
# whole and short forms, and the text helpers every renderer imports from here.
from iomatrix.report.screen_alternatives import (
    ALTERNATIVE_LINES,
    _alternatives_fitting,
    _alternatives_of,
    _baseline_lines,
)
from iomatrix.report.screen_snippets import _ini_section, _pick_snippet_lines, _short_snippet
from iomatrix.report.screen_text import _first_clause, code_lines, wrap, wrapped_lines
from iomatrix.report.shape_findings import MEMORY_NOT_DISK
from iomatrix.ui import cut_long

# Every answer ends with one of three statuses (report/recommend/resolution.py): decided,
# equivalent ("kept"), or not told apart at this resolution (then the tie-break's pick, and why).
STATUS_TEXT = {
    "answer": "decided",
    "tied": "not told apart here: the tie-break's pick",
    "provisional": "not told apart yet: the tie-break's pick",
    "equivalent": "kept",
    # answered with another workload's answer on the same backing (report/one_config.py)
    "joined": "not told apart here: one configuration for the backing",
    "joined-provisional": "not told apart yet: one configuration for the backing",
}
# A squeezed screen's statuses (report/headline.py's Pick.verb says the tie-break's pick once, above
# them).
SHORT_STATUS = {"tied": "not told apart", "provisional": "not told apart yet"}
# How an unseparated pick's status begins, the runner-up's name then following it (_apart_from).
APART = "not told apart"
FIRST_SCREEN_LINES = 30


def gain_text(wg: WorkloadGain, cell: str) -> str:
    g = wg.gain
    if g is None:
        return f"vs {wg.against}: not in this sweep"
    # The current configuration's values compared at the cell's (zero detection for a read
    # workload): said.
    assumed = f" (taking {', '.join(g.assumed)})" if g.assumed else ""
    if g.label == cell:
        return f"1.00×: it is {wg.against}{assumed}"
    if g.ratio is None or g.ratio.ratio is None:
        return f"vs {wg.against}: – ({g.note})" if g.note else f"vs {wg.against}: –"
    # the pick against it, in the one grammar (recommend/grammar.py): "1.06× (0.63–1.78) Nova's
    # default", "1.43× (1.20–1.70) lower latency than QEMU's default"
    return f"{ratio_against(g.ratio, wg.metric, wg.against)}{assumed}"


def page_cache_lines(p: Pick, *more: Pick) -> list[str]:
    """One line per distinct page-cache warning the pick's stated ratios carry (Gain.page_cache: one
    side's figure came from the host page cache), naming the workloads it applies to, right below
    their ratios; with `more` picks, their warnings joined to the pick's (a crowded screen says
    each once, below all the picks: _page_cache_once)."""
    per: dict[str, list[str]] = {}
    for owner, wg in ((q, wg) for q in (p, *more) for wg in q.gains):
        # the alternatives' ratios too (issue 70: a pick resting on memory's figures says what it
        # measured, also where its baseline is itself and only its "vs" lines carry a ratio)
        for g in (wg.gain, *wg.alternatives):
            if (
                g is not None
                and g.page_cache
                and g.label != owner.cell
                and g.ratio is not None
                and g.ratio.ratio is not None
            ):
                workloads = per.setdefault(g.page_cache, [])
                workloads += [] if wg.workload in workloads else [wg.workload]
    return [f"page cache on {', '.join(ws)}: {note}" for note, ws in per.items()]


def headline_text(h: Headline, width: int, markdown: bool = False, fit: bool = True) -> str:
    """The headline as terminal text (every line at most `width` columns) or Markdown, laid out for
    one screen (issue 49): the header, the findings, the roles; one decision line per workload under
    each configuration; then each distinct storage setting, risk statement and snippet once
    (`_config_parts`), whole where the screen's FIRST_SCREEN_LINES leave room, else in its short
    form. A screen still too long is laid out denser, step by step (`_denser`): whatever the plan,
    the answer fits FIRST_SCREEN_LINES. `fit` False (recommend --detail, which holds what a crowded
    screen shortened): the roomiest layout, however long.

    What the screen holds is chosen once for every width and target (issue 70: at 100 columns the
    quickstart showed its "vs" lines, at 80 none; --target proxmox alone added one): how dense,
    which alternatives and which risk statements whole are decided at REFERENCE_WIDTH (the
    terminal's width when narrower) over the answer for every target (`Headline.peers`), the most
    crowded deciding; the terminal's width and --target then change the layout and the snippet
    only."""
    if markdown or not fit:  # a document, not a screen
        squeeze = not markdown and any(p.storage is not None for p in h.picks)
        # --detail (not `fit`): every storage setting, risk and snippet whole (a screen's short
        # forms point there; issue 49: a configuration not separated yet had its storage.cfg
        # nowhere); the intervals' note once, at the end of its "more:" line
        doc = replace(_without_interval_notes(h), interval_note=h.interval_note)
        return _laid_out(doc, width, markdown, squeeze, 0, whole=not fit)[0]
    # What the screen holds is chosen without the intervals' note (Pick.interval_note), which then
    # follows the first "vs" line where the screen as laid out has room for it, else ends the
    # "more:" line: a crowded screen keeps every fact and every snippet's form, and leaves the note
    # to --detail (issue 70).
    bare = _without_interval_notes(h)
    layout = _common_layout([bare, *bare.peers], min(width, REFERENCE_WIDTH))
    # The runner-up a status names (WorkloadGain.rival) where the screen has room for it, decided
    # once for every width and target too: never at the cost of a roomier layout (a shared-storage
    # screen lost its backings' labels and risk statements for it); --detail names it always.
    unnamed = _without_rivals(bare)
    roomier = _common_layout([unnamed, *unnamed.peers], min(width, REFERENCE_WIDTH))
    if roomier.dense < layout.dense:
        h, bare, layout = _without_rivals(h), unnamed, roomier
    shown = _denser(bare) if layout.dense else bare
    if len(shown.picks) != len(layout.alternatives):  # not one answer laid out alike: its own
        layout = _own_layout(bare, width, layout.squeeze)
    plain = _screen_text(bare, width, layout)
    for noted in (replace(h, interval_note=""), replace(bare, interval_note=h.interval_note)):
        text = _screen_text(noted, width, layout)
        # said (a pick whose "vs" lines the screen leaves out says it nowhere), and not at the cost
        # of a snippet's whole form (fewer lines): else left to --detail
        said = bool(h.interval_note) and h.interval_note in " ".join(text.split())
        if said and _fits(text, width) and text.count("\n") >= plain.count("\n"):
            return text
    return plain


def _screen_text(h: Headline, width: int, layout: _Layout) -> str:
    """`h` laid out as `layout` holds it, at `width` (headline_text)."""
    shown = _denser(h) if layout.dense else h
    text = _laid_out(shown, width, False, layout.squeeze, layout.dense, fixed=layout)[0]
    if text.count("\n") > FIRST_SCREEN_LINES and width > REFERENCE_WIDTH:
        # A snippet's short form can be longer on a wider screen (a `qm set` line that fits 100
        # columns is printed whole, at 80 as the settings it makes): the layout the facts were
        # chosen at, which fits.
        text = _laid_out(shown, REFERENCE_WIDTH, False, layout.squeeze, layout.dense, fixed=layout)[
            0
        ]
    return text


def _without_rivals(h: Headline) -> Headline:
    """`h` and its peers with no runner-up named in their statuses (WorkloadGain.rival)."""

    def bare(x: Headline) -> Headline:
        return replace(
            x,
            picks=[replace(p, gains=[replace(wg, rival="") for wg in p.gains]) for p in x.picks],
        )

    return replace(bare(h), peers=[bare(x) for x in h.peers])


def _without_interval_notes(h: Headline) -> Headline:
    """`h` and its peers with no intervals' note (Pick.interval_note, Headline.interval_note)."""

    def bare(x: Headline) -> Headline:
        return replace(x, picks=[replace(p, interval_note="") for p in x.picks], interval_note="")

    return replace(bare(h), peers=[bare(x) for x in h.peers])


# The width at which what the first screen holds is chosen (issue 70): the narrowest terminal the
# answer is written for; a wider one lays the same facts out in fewer lines.
REFERENCE_WIDTH = 80
# The parts whose whole or short form is a fact of the answer, the same for every target (the risk
# statements: their reasons are said or left to --detail alike); a snippet's form is the target's.
FACT_PARTS = ("risks",)


@dataclass(frozen=True)
class _Layout:
    """What a first screen holds, apart from its width: how dense (`DENSER`), whether squeezed (a
    shared-storage answer's), how many alternatives each pick shows beside its baselines' (which
    every screen shows), and which risk statements are whole (`_Part.key`)."""

    dense: int
    squeeze: bool
    alternatives: tuple[int, ...]
    whole: frozenset[tuple[str, str]]
    # every baseline's ratio on the screen (_baseline_lines); not where even the densest layout
    # then overflows FIRST_SCREEN_LINES for some target (a three-backing sweep's long names): there
    # the 30 lines hold, and a target may quote a baseline the others do not
    baselines: bool = True


def _own_layout(h: Headline, width: int, squeeze: bool, baselines: bool = True) -> _Layout:
    """The roomiest layout of `h` that fits FIRST_SCREEN_LINES at `width`, denser step by step."""
    text, layout = _laid_out(h, width, False, squeeze, 0, baselines=baselines)
    for dense in DENSER:
        # A local sweep too (the quickstart's roles with two configurations took 58 lines): its
        # roles in a line each, its <disk> XML whole where the screen has room, else its <driver>
        # (what the answer sets), the whole <disk> in --detail (issue 49).
        # (a snippet line wider than the screen, a shell word that cannot be broken, counts as
        # crowded: its short form fits)
        if text.count("\n") <= FIRST_SCREEN_LINES and _within(text, width):
            break
        text, layout = _laid_out(_denser(h), width, False, True, dense, baselines=baselines)
    return layout


def _fits(text: str, width: int) -> bool:
    return text.count("\n") <= FIRST_SCREEN_LINES and _within(text, width)


def _common_layout(heads: list[Headline], width: int) -> _Layout:
    """One layout for the same answer written for every target (`heads`, the user's first): the
    densest any of them needs at `width`, then at that density the fewest alternatives any shows
    and the risk statements every one shows whole, so that no target's screen holds a fact another
    leaves out."""
    squeeze = any(p.storage is not None for x in heads for p in x.picks)
    for baselines in (True, False):
        dense = max(_own_layout(x, width, squeeze, baselines).dense for x in heads)
        wide = squeeze or dense > 0
        laid = [
            _laid_out(_denser(x) if dense else x, width, False, wide, dense, baselines=baselines)
            for x in heads
        ]
        if all(_fits(text, width) for text, _ in laid):
            break
    layouts = [layout for _, layout in laid]
    squeeze = wide
    mine = layouts[0]
    alike = [x for x in layouts if len(x.alternatives) == len(mine.alternatives)]
    return _Layout(
        dense,
        squeeze,
        tuple(min(n) for n in zip(*(x.alternatives for x in alike), strict=True)),
        frozenset.intersection(*(x.whole for x in alike)),
        baselines,
    )


def _within(text: str, width: int) -> bool:
    return all(len(line) <= width for line in text.splitlines())


# The denser layouts a crowded screen gets, in turn (issue 49: a sweep of three backings and both
# shape findings took 49 lines at 100 columns): 1, the findings in one line each, one decision per
# configuration (its workloads' lines under it without the backing their name repeats, short
# statuses), each role's decision in one line and its figures in one paragraph; 2, each VM tool's
# snippet by the options it sets in one line, said once for every backing it serves (a local
# sweep's: its <driver>, the <disk> it goes in being the user's); 3, the risks by name only (their
# whole text: --detail), the roles' figures left to --detail; 4, a configuration not separated yet
# named "Use, not told apart yet: …" without "the tie-break's pick" (--detail: how the tie broke),
# which kept a long name (… · rbd_cache_writethrough_until_flush=off) on its line at 80 columns: two
# lines of room on the widest sweep, for a warning or a longer host name.
# 5 and 6 (issue 71): the axis lines (one per axis) in one line pointing to --detail, then left to
# it: a wide sweep's many axes (backing, RTT, clients, cache, …) would not leave the configurations
# room.
DENSER = (1, 2, 3, 4, 5, 6)
# The axis lines' place on the most crowded screen but one (DENSER's 5).
AXES_IN_DETAIL = "each axis decided on its own, over the other axes: --detail"
# A configuration not separated yet, on the most crowded screen (DENSER's 4).
UNSETTLED_BRIEF = "Use for now"
# A crowded screen's statuses (the configuration's verb says whose pick it is).
DENSE_STATUS = {
    **SHORT_STATUS,
    "joined": "not told apart",
    "joined-provisional": "not told apart yet",
}


def _denser(h: Headline) -> Headline:
    """The headline with its findings in their one-line forms and each configuration's picks merged
    into one (a configuration named twice, once settled and once not, on a crowded screen: its
    workloads' statuses say which)."""
    merged: dict[str, Pick] = {}
    for p in h.picks:
        first = merged.get(p.cell)
        if first is None:
            merged[p.cell] = replace(p, gains=list(p.gains))
            continue
        first.gains += p.gains
        first.settled = first.settled and p.settled
        first.kept = first.kept and p.kept
        first.interval_note = first.interval_note or p.interval_note
    return replace(h, findings=h.brief_findings or h.findings, picks=list(merged.values()))


def _laid_out(
    h: Headline,
    width: int,
    markdown: bool,
    squeeze: bool,
    dense: int,
    whole: bool = False,
    fixed: _Layout | None = None,
    baselines: bool = True,
) -> tuple[str, _Layout]:
    """The headline laid out (headline_text), `dense` 0 (as roomy as the screen allows) to 4;
    `whole`: every part whole however long (recommend --detail); `fixed`: what it holds decided
    already (_common_layout), only the snippets' forms left to the room. Also returns what it
    held."""
    out = _screen_head(h, width, markdown, squeeze, dense)
    parts = _config_parts(h, width, markdown, squeeze, dense, notes=whole)
    tail = _tail(h, width, squeeze, _risk_names(h) if dense >= 3 else "", dense)
    # between the decisions and the parts they share (a squeezed screen's labels at the margin are
    # gap enough)
    gap = [""] if len(h.picks) > 1 and parts and not squeeze else []
    below = _below_picks(h, width, dense)
    # Markdown is a document, not a screen: everything whole, every pick its alternatives.
    room = [
        len(h.picks) * ALTERNATIVE_LINES * 2
        if markdown
        else FIRST_SCREEN_LINES
        - len(out)
        - len(tail)
        - len(gap)
        - len(below)
        - sum(
            len(_decision_lines(p, h, width, markdown, squeeze=squeeze, shown=0, dense=dense))
            for p in h.picks
        )
        - sum(len(part.short) for part in parts)
    ]
    # The alternatives every screen shows (the baselines' ratios, or as decided for every target
    # by `fixed`) take their room before the snippets, whatever it leaves them.
    baselines = fixed.baselines if fixed is not None else baselines
    first = [
        (_baseline_lines(p) if baselines else 0)
        + (fixed.alternatives[i] if fixed is not None else 0)
        for i, p in enumerate(h.picks)
    ]
    room[0] -= sum(
        len(wrap(line, width, "  "))
        for p, n in zip(h.picks, first, strict=True)
        for line in _alternatives_of(p, h)[:n]
    )
    _fit(parts, room, markdown, width, whole, None if fixed is None else fixed.whole)
    shown = []
    for p, n in zip(h.picks, first, strict=True):  # the other alternatives get what is left
        alts = _alternatives_of(p, h)
        n += 0 if fixed is not None else _alternatives_fitting(alts[n:], width, room)
        shown.append(n - (_baseline_lines(p) if baselines else 0))
        out += _decision_lines(p, h, width, markdown, squeeze=squeeze, shown=n, dense=dense)
    out += below + gap
    for part in parts:
        out += part.whole if part.use_whole else part.short
    out += tail
    held = frozenset(part.key for part in parts if part.use_whole and part.key[0] in FACT_PARTS)
    return "\n".join(out) + "\n", _Layout(dense, squeeze, tuple(shown), held, baselines)


def _one_tier(h: Headline) -> str | None:
    """The tier every pick's figures were measured by, when there is one (stated once, else per
    workload)."""
    tiers = {wg.tier for q in h.picks for wg in q.gains}
    return next(iter(tiers)) if len(tiers) == 1 else None


HEADING_NAME_CHARS = 200


def _screen_head(
    h: Headline, width: int, markdown: bool, squeeze: bool = False, dense: int = 0
) -> list[str]:
    """The lines above the configurations: the sweep, warnings, what every cell shares, the basis
    and baseline, the findings, the roles' answers and the trade-offs. A squeezed screen names the
    one tier here, not under each configuration."""
    tier = f" · {_one_tier(h)} tier" if squeeze and _one_tier(h) else ""
    # a host's or plan's name is a label: past HEADING_NAME_CHARS (a damaged or hostile store) it
    # is cut here with its note, which then stays on the first screen at any width
    host, plan = (cut_long(name, HEADING_NAME_CHARS) for name in (h.host, h.plan))
    out = wrap(
        f"{'## ' if markdown else ''}Answer for {host} · sweep {h.sweep_id} ({plan}, "
        f"{h.status}){tier}",
        width,
    )
    out += [x for w in h.warnings for x in wrap(f"warning: {w}", width)]
    if h.objective is not None:
        out += wrap(objective_line(Objective(h.objective)), width)
    if h.shared:
        out += wrap(f"all cells, where the axis applies: {h.shared}", width)
    for line in h.basis:
        out += wrap(f"basis: {line}", width)
    if h.baseline_line():
        out += wrap(h.baseline_line(short=squeeze, brief=dense >= 2, bare=dense >= 3), width)
    for line in h.findings:  # what the figures show comes first: the answer below follows from it
        out += wrap(f"finding: {line}", width)
    out += role_lines(h, width, markdown, dense)
    out += _axis_block(h, width, dense)
    for line in h.trade_offs:
        out += ["", *wrap(line, width)]
    return out


def _axis_block(h: Headline, width: int, dense: int) -> list[str]:
    """Each axis decided on its own, above the configurations and their snippets (issue 71); a
    crowded screen gives one line per axis (its figures in --detail), the densest none."""
    if not h.axis_lines or dense >= 6:
        return []
    out = [""] if not dense else []
    lines = h.axis_brief if dense and h.axis_brief else h.axis_lines
    lines = [AXES_IN_DETAIL] if dense >= 5 else lines
    return out + [x for line in lines for x in wrap(line, width)]


def _fit(
    parts: list[_Part],
    room: list[int],
    markdown: bool,
    width: int,
    whole: bool = False,
    forced: frozenset[tuple[str, str]] | None = None,
) -> None:
    """Each part whole where `room` (lines, used up) allows (`whole`: however long), the most
    needed first, and where its lines fit `width` (a snippet line that cannot be broken is left to
    --detail); Markdown: all whole. `forced`: the FACT_PARTS whole by an answer's one layout
    (_common_layout), given their room first; the others as before."""

    def decided(part: _Part) -> bool:
        return forced is not None and part.key[0] in FACT_PARTS

    for part in sorted(parts, key=lambda part: (not decided(part), part.priority)):
        extra = len(part.whole) - len(part.short)
        if decided(part):
            part.use_whole = markdown or part.key in (forced or ())
        else:
            part.use_whole = markdown or (
                (whole or extra <= room[0]) and all(len(line) <= width for line in part.whole)
            )
        room[0] -= extra if part.use_whole and not (markdown or whole) else 0


def _tail(
    h: Headline, width: int, squeeze: bool = False, risks: str = "", dense: int = 0
) -> list[str]:
    """The headline's lines after the picks: declined configurations, workloads without an answer,
    the verdicts tiers' lines, and where to find more (`squeeze`: the whole snippets too; `risks`:
    the risks a crowded screen names there, _risk_names)."""
    out: list[str] = []
    # a crowded screen names the risks (`risks`): each declined line's own risk text is --detail's
    declined = h.declined_brief if dense >= 3 and h.declined_brief else h.declined
    for line in declined:
        out += wrap(f"not chosen: {line}", width)
    for line in h.unanswered:
        out += wrap(f"no answer for {line}", width)
    for line in h.measured:
        out += wrap(f"measured: {line}", width)
    if not h.picks and not h.unanswered and not h.measured:
        out += wrap("nothing to recommend: the sweep has no ranked workloads yet", width)
    # which guest the guest figures went through (issue 51): where they came from, after the answer
    for line in h.guests:
        out += wrap(f"guest: {line}", width)
    # the densest screen names no tool (`--help` lists them): its line goes to the answer's ratios,
    # as a squeezed screen's does to the intervals' note where that ends it (headline_text)
    note = f" · {h.interval_note}" if h.interval_note else ""
    tool = dense >= 4 or (squeeze and bool(note))
    others = "TOOL" if tool else "|".join(t for t in TARGETS if t != h.target)
    # a squeezed screen's configurations end with their snippets: no gap needed to tell them apart
    if not squeeze:
        out.append("")
    # what --detail holds is said where the screen cut it ("(--detail)"): the command in one line
    if squeeze:
        # a local sweep's screen shortened its roles, risks or snippets where crowded: said once
        # (a sweep answered per backing says "(--detail)" where it cut)
        whole = "" if any(p.storage is not None for p in h.picks) else " (all of it, whole)"
        out += wrap(
            f"more: iomatrix recommend --detail{whole} · --target {others}{risks}{note}", width
        )
    else:
        out += wrap(
            "more: iomatrix recommend --detail (tables, tie-breaks, every risk); other "
            "tools: --target "
            f"{others}{note}",
            width,
        )
    return out


def role_lines(h: Headline, width: int, markdown: bool, dense: int = 0) -> list[str]:
    """One block per role, first (report/recommend/roles.py): "For a database VM: use …", each
    deciding figure against the best, and what was not chosen and why; on a crowded screen
    (`dense`) the decision in one line and the figures in one paragraph (3: the figures left to
    --detail)."""
    out: list[str] = []
    if dense and h.brief_roles:
        # the densest screen gives its blank line to the answer (issue 70: every baseline's ratio)
        out += [] if dense >= 4 else [""]
        for decision, figures in h.brief_roles:
            out += wrap(decision, width)
            out += wrap(figures, width, "  ") if figures and dense < 3 else []
        said = "each role's figures and " if dense >= 3 else ""
        return [*out, *wrap(f"Per job of the roles ({said}every workload: --detail)", width)]
    for r in h.roles:
        out += ["", *wrap(f"{'### ' if markdown else ''}{r['text']}", width)]
        out += [x for line in r["lines"] for x in wrap(line, width, "  ")]
    if h.roles:
        out += [
            "",
            *wrap(
                f"{'### ' if markdown else ''}Per job of the roles (every workload: "
                "iomatrix recommend "
                "--detail)",
                width,
            ),
        ]
    return out


def _decision_lines(
    p: Pick,
    h: Headline,
    width: int,
    markdown: bool,
    *,
    squeeze: bool,
    shown: int,
    dense: int = 0,
) -> list[str]:
    """One configuration's decision: its name, the whole configuration (not on a squeezed screen:
    its snippets say it), one line per workload with its ratio and status, page-cache warnings
    (where not said once below every pick: _below_picks), and what the first `shown` of its notable
    alternatives measured (_alternatives_of)."""
    one_tier = _one_tier(h)
    # one blank line before the configurations; between them too where the screen is not squeezed
    # (a crowded screen's findings end at the margin: gap enough)
    out = [""] if not squeeze or (p is h.picks[0] and dense < 3) else []
    measured = f" (measured by the {one_tier} tier)" if one_tier and not squeeze else ""
    verb = UNSETTLED_BRIEF if dense >= 4 and not p.settled and not p.kept else p.verb
    out += wrap(f"{'### ' if markdown else ''}{verb}: {p.name}{measured}", width)
    if p.keep_why:  # kept: the candidate and why it does not change what runs
        out += wrap(p.keep_why, width, "  ")
    first = next(q for q in h.picks if q.config == p.config)
    if p.name != p.config and not squeeze and first is p:
        out += wrap(f"({p.config})", width, "  ")
    out += [x for wg in p.gains for x in _workload_line(p, wg, one_tier, squeeze, dense, width)]
    if not _page_cache_once(h, dense) and not _page_cache_said(h, dense):
        out += wrapped_lines(page_cache_lines(p), width, "  ")
    return out + wrapped_lines(_alternatives_of(p, h)[:shown], width, "  ")


def _page_cache_said(h: Headline, dense: int) -> bool:
    """The page-cache warnings left to --detail on a screen crowded enough to name risks only by
    name (`dense` ≥ 3), where a finding on it already says the caching mode measured memory: the
    quickstart's screen said it twice, in five lines, and lost its axis lines for them."""
    return dense >= 3 and any(MEMORY_NOT_DISK in f for f in h.findings)


def _page_cache_once(h: Headline, dense: int) -> bool:
    """A crowded screen of several configurations says the page-cache warnings once below them all
    (the quick plan's roles: one warning under each of three configurations overflowed 30 lines)."""
    return dense >= 1 and len(h.picks) > 1


def _below_picks(h: Headline, width: int, dense: int) -> list[str]:
    """The lines after every configuration's decision: on a crowded screen the page-cache warnings
    once (_page_cache_once)."""
    once = _page_cache_once(h, dense) and not _page_cache_said(h, dense)
    return wrapped_lines(page_cache_lines(*h.picks), width, "") if once else []


def _workload_line(
    p: Pick, wg: WorkloadGain, one_tier: str | None, squeeze: bool, dense: int, width: int
) -> list[str]:
    """One workload's decision line under its configuration: its ratio and status (and tier where
    the picks' differ); on a crowded screen without the backing the configuration's name says."""
    groups = {g.group for g in p.gains}
    # on a crowded screen a configuration of one backing group does not repeat it per workload
    on = f" on {next(iter(groups))}" if dense and len(groups) == 1 and None not in groups else ""
    tier = f" [{wg.tier} tier]" if wg.tier and one_tier is None else ""
    # the runner-up named where a ratio against another cell stands beside the status (beside
    # "1.00×: it is QEMU's default" no other cell's ratio is there to misread it against, and a
    # crowded quickstart screen keeps its axis lines)
    itself = wg.gain is not None and wg.gain.label == p.cell
    status = _status_text(wg, squeeze, dense, rival=not itself, pick=p.name)
    name = wg.workload.removesuffix(on) if on else wg.workload
    # a crowded screen: "not told apart yet" above says it for each line
    provisional = wg.status in ("provisional", "joined-provisional")
    said = "" if dense >= 3 and not p.settled and provisional else status
    said = f" · {said}" if said else ""
    # kept (--current, not decided): each line is the candidate's, named: "A is N× B" ("A has N×
    # lower latency than B")
    gain = gain_text(wg, p.cell)
    verb = "has" if " latency than " in gain else "is"
    who = f"{p.candidate} {verb} " if p.candidate else ""
    return wrap(f"{name}: {who}{gain}{said}{tier}", width, "  ")


def _status_text(
    wg: WorkloadGain, squeeze: bool, dense: int, rival: bool = True, pick: str = ""
) -> str:
    """A workload line's status as the screen's layout says it (_workload_line); `rival`: naming
    the runner-up of a pick not separated from it (_apart_from), by what tells it from the `pick`'s
    name where given."""
    statuses = DENSE_STATUS if dense else SHORT_STATUS if squeeze else STATUS_TEXT
    if wg.status in UNSEPARATED and wg.unresolved and not (dense or squeeze):
        # as a role's answer says it (issue 71): the interval reached, the property the pick rests
        # on, the minutes that would settle it; a squeezed screen says its status alone, the rest
        # in --detail (a line each kept a shared-storage answer's backings on one screen)
        return wg.unresolved
    if wg.status == "equivalent" and wg.kept:
        return f"kept: {wg.kept}"
    said = statuses.get(wg.status, STATUS_TEXT[wg.status])
    return _apart_from(wg, said, pick) if rival else said


def status_text(wg: WorkloadGain) -> str:
    """A workload's status in full, as Markdown and the HTML report say it beside its ratio: the
    runner-up the pick was not told apart from named, the interval reached and what settles it."""
    return _status_text(wg, squeeze=False, dense=0)


def _apart_from(wg: WorkloadGain, said: str, pick: str = "") -> str:
    """`said` ("not told apart yet", "not told apart here: the tie-break's pick") naming the cell
    the pick was not told apart from (WorkloadGain.rival): "not told apart yet from qcow2 ·
    writeback".
    The status is the pick's against its runner-up, not against the baseline whose ratio stands
    beside it: unnamed, "4.27× (3.40–5.35) QEMU's default · not told apart yet" read as a ratio
    clear of 1 that was not told apart from 1 (issue 70). Beside a `pick`'s name, the runner-up
    by what tells it from the pick, as a joined workload's own pick is named: "raw · writeback"
    beside "raw · cache=none" is "writeback" (a crowded screen's line fits 80 columns)."""
    if wg.status not in UNSEPARATED or not wg.rival or not said.startswith(APART):
        return said
    yet = APART + " yet"
    head = yet if said.startswith(yet) else APART
    return f"{head} from {_by_difference(pick, wg.rival)}{said[len(head) :]}"


def _by_difference(pick: str, other: str) -> str:
    """`other`'s short name by the parts of it that `pick`'s lacks ("raw · writeback" beside "raw ·
    cache=none": "writeback"); its whole name where it has none of its own (or no pick given)."""
    mine = set(pick.split(" · ")) if pick else set()
    return " · ".join(part for part in other.split(" · ") if part not in mine) or other


@dataclass
class _Part:
    """One distinct piece of the configurations' settings on the first screen: a storage snippet, a
    risk statement or a VM tool's snippet, printed once for every configuration it serves; `short`
    where the screen has no room for `whole` (the same when it has no shorter form); lower
    `priority` gets room first."""

    whole: list[str]
    short: list[str]
    priority: int
    use_whole: bool = True
    # what it is, (kind, its text): the same part on every target's screen has the same key
    key: tuple[str, str] = ("", "")


def _config_parts(
    h: Headline, width: int, markdown: bool, squeeze: bool, dense: int = 0, notes: bool = False
) -> list[_Part]:
    """Each configuration's storage settings, risks and snippet, each distinct text once (issue 49:
    never repeated); where the answer has several configurations, those serving some of its
    workloads first, each set under the workloads it serves, then those serving every workload
    (`notes`: each snippet with its notes, recommend --detail's)."""
    keyed: dict[tuple[str, str], tuple[list[int], _Part]] = {}
    for i, p in enumerate(h.picks):
        per_backing = any(q.storage is not None for q in h.picks)
        for key, part in _pick_parts(
            p,
            h.target,
            width,
            markdown,
            squeeze=squeeze,
            dense=dense,
            per_backing=per_backing,
            notes=notes,
        ):
            part.key = key
            keyed.setdefault(key, ([], part))[0].append(i)
    served: dict[tuple[int, ...], list[_Part]] = {}
    for picks, part in keyed.values():
        served.setdefault(tuple(picks), []).append(part)
    everyone = tuple(range(len(h.picks)))
    out: list[_Part] = []
    for picks, parts in sorted(served.items(), key=lambda kv: (kv[0] == everyone, kv[0])):
        if len(served) > 1:
            label = wrap(f"{_served(h, picks, everyone)}:", width)
            # a one-line snippet beside its backings' label; a section (ceph.conf [client] and its
            # lines) stays whole under the label
            short = parts[0].short
            alone = len(label) == 1 and len(short) == 1
            one = f"{label[0]} {short[0].strip()}" if alone else ""
            if dense >= 2 and alone and len(one) <= width:
                # the backings' label and their first setting in one line: "on rbd: ceph.conf …"
                merged = _Part(
                    label + parts[0].whole, [one, *short[1:]], parts[0].priority, key=parts[0].key
                )
                out += [merged, *parts[1:]]
                continue
            out.append(_Part(label, label, -1))
        out += parts
    return out


def _served(h: Headline, picks: tuple[int, ...], everyone: tuple[int, ...]) -> str:
    """Whom a part serves: "for every workload", "on iscsi" (every workload of that backing), or
    "for" the workloads by name."""
    if picks == everyone:
        return "for every workload"
    mine = [wg for i in picks for wg in h.picks[i].gains]
    groups = list(dict.fromkeys(wg.group for wg in mine))
    # every workload of each of these backing groups: the groups by name
    if all(groups) and len(mine) == sum(wg.group in groups for p in h.picks for wg in p.gains):
        return f"on {', '.join(str(g) for g in groups)}"
    return "for " + ", ".join(wg.workload for wg in mine)


def _pick_parts(
    p: Pick,
    target: str,
    width: int,
    markdown: bool,
    *,
    squeeze: bool,
    dense: int = 0,
    per_backing: bool = True,
    notes: bool = False,
) -> list[tuple[tuple[str, str], _Part]]:
    """A pick's storage settings, risks and snippet as (kind, its text) → _Part: the storage's first
    (what a shared storage's answer sets there, issue 49), then the risks, then the VM tool's
    snippet."""
    out = []
    # nothing to set there: said
    if p.storage is not None and p.storage.text is None and p.storage.summary:
        out.append(
            (("storage", p.storage.summary), _Part(*[wrap(p.storage.summary, width, "  ")] * 2, 1))
        )
    elif p.storage is not None and p.storage.text is not None:
        s = p.storage
        # the whole one: --detail, as the screen's last line says
        short = wrap(s.summary, width, "  ")
        if s.language == "ini" and not markdown:
            # a config file's section, as the file holds it: its settings one per line under it,
            # never joined by commas into a line no file has (issue 70: ceph.conf's [client])
            short = _ini_section(s.summary, s.text, width)
        whole = [
            *wrap(f"{s.tool}: {s.title}; the rest: --detail", width, "  "),
            *(
                [f"```{s.language}", *code_lines(s.text, s.language, width), "```"]
                if markdown
                else code_lines(s.text, s.language, width, "    ")
            ),
        ]
        # what the answer sets on the storage (ceph.conf [client]) whole before the VM tool's
        # snippet: the <disk>'s short form (its <driver>) still says all it sets
        out.append((("storage", s.text), _Part(whole, short, 0)))
    # a crowded screen names the risks once for every configuration (_risk_names)
    if p.risks and dense < 3:
        out.append((("risks", repr(p.risks)), _risk_part(p.risks, width, squeeze)))
    whole = _pick_snippet_lines(p, target, width, markdown, notes)
    if whole:
        # A local sweep's one-line form is its <driver> (the format and every option it sets, to
        # put in the user's <disk>): a settings list said once for several backings saves nothing
        # there.
        one_line = dense >= 2 and per_backing
        short = _short_snippet(p, target, width, one_line) if squeeze else whole
        # a crowded screen's options: said once for every backing they serve
        key = "\n".join(short if dense >= 2 else whole)
        out.append((("snippet", key), _Part(whole, short, 1)))
    return out


def _risk_names(h: Headline) -> str:
    """A crowded screen's risks (issue 49), said with --detail, which states them: each situation
    named once, with the backings it concerns where not all (" · risks: QEMU crash, power
    loss, target power loss on iscsi"); "" when the configurations state none."""
    where: dict[str, list[str]] = {}
    for p in h.picks:
        for situation, _, _ in p.risks:
            groups = where.setdefault(situation, [])
            groups += [str(g) for g in dict.fromkeys(wg.group for wg in p.gains) if g]
    everyone = {str(wg.group) for p in h.picks for wg in p.gains if wg.group}
    named = [
        s if set(gs) >= everyone else f"{s} on {', '.join(dict.fromkeys(gs))}"
        for s, gs in where.items()
    ]
    if not named:
        return ""
    return f" · risks: {', '.join(named)}"


def _risk_part(risks: list[tuple[str, str, str]], width: int, squeeze: bool) -> _Part:
    """Risk statements (situation, text, basis) whole, one per line; on a squeezed screen in one
    paragraph of their first clauses (the reasons: --detail)."""
    basis = risks[0][2]
    whole = wrap(f"risks ({basis}):", width, "  ")
    whole += [
        x for situation, text, _ in risks for x in wrap(f"{situation}: {text}", width, "    ")
    ]
    if not squeeze:
        return _Part(whole, whole, 2)
    said = "; ".join(f"{situation}: {_first_clause(text)}" for situation, text, _ in risks)
    # "not measured" is what documented means here
    basis = "documented" if basis == DOCUMENTED else basis
    return _Part(whole, wrap(f"risks ({basis}): {said}", width, "  "), 2)  # the reasons: --detail
