"""What a pick measured against its notable alternatives on the first screen (split from
report/screen.py along its seam, issue 68): one line per alternative with its paired ratios, the
baselines' first, and how many of them fit the lines the screen has left."""

from __future__ import annotations

from iomatrix.report.headline import Headline, Pick
from iomatrix.report.naming import cell_names
from iomatrix.report.recommend.grammar import versus
from iomatrix.report.screen_text import wrap
from iomatrix.stats import RatioCI

# Lines a pick gives to what its alternatives measured, at most; all picks together get what is left
# of the first screen's FIRST_SCREEN_LINES (issue 49).
ALTERNATIVE_LINES = 3


def _alternatives_of(p: Pick, h: Headline) -> list[str]:
    """The pick's alternative lines the screen may show, the baselines' first (every one of them):
    a configuration stated again (another status) gets fewer of the others."""
    first = next(q for q in h.picks if q.config == p.config)
    cap = 1 if first is not p else ALTERNATIVE_LINES
    return alternative_lines(p)[: max(cap, _baseline_lines(p))]


def _told_from(pick: str, label: str | None, name: str) -> str:
    """`label` named by the axes where it differs from the `pick`'s cell ("cache=none" beside raw ·
    writeback), where that is shorter than its screen name `name`."""
    if label is None:
        return name
    short = cell_names([pick, label]).of(label)
    return short if short and len(short) < len(name) else name


def _baseline_lines(p: Pick) -> int:
    """How many of the pick's alternative lines are against a baseline cell
    (WorkloadGain.baselines): shown on every screen, whatever its width and target."""
    return len(
        {
            _told_from(p.cell, a.label, a.against)
            for wg in p.gains
            for a in wg.alternatives
            if a.label in wg.baselines and (wg.gain is None or a.label != wg.gain.label)
        }
    )


def _alternatives_fitting(lines: list[str], width: int, room: list[int]) -> int:
    """How many of `lines`, wrapped, fit in `room` (a one-element list, used up as lines are given,
    shared by the picks)."""
    n = 0
    for line in lines:
        wrapped = len(wrap(line, width, "  "))
        if wrapped > room[0]:
            break
        room[0] -= wrapped
        n += 1
    return n


def alternative_lines(p: Pick) -> list[str]:
    """What the pick measured against the notable alternatives, one line per alternative (at most
    ALTERNATIVE_LINES), each with its paired ratio and interval per workload, always the pick
    against the other (report/recommend/grammar.py): "raw · writeback is 2.18× (1.47–3.21) qcow2 ·
    cache=none on database:log, 1.41× (1.12–1.76) on file-server:files"."""
    per: dict[str, list[tuple[str, RatioCI | None, str]]] = {}
    notes: dict[str, str] = {}
    base: set[str] = set()
    for wg in p.gains:
        for a in wg.alternatives:
            if wg.gain is not None and a.label == wg.gain.label:
                continue  # the workload's own line says it (its baseline's ratio)
            # the other named by what tells it from the pick (its full name is in --detail): a
            # long shared-storage name twice made one ratio four lines at 80 columns
            name = _told_from(p.cell, a.label, a.against)
            per.setdefault(name, []).append((wg.workload, a.ratio, wg.metric))
            notes.setdefault(name, a.note or "no ratio")
            base |= {name} if a.label in wg.baselines else set()
    out = []
    # the baselines' first (every target's screen shows them: _baseline_lines), then the others
    names = sorted(per, key=lambda name: name not in base)
    for name, parts in [(n, per[n]) for n in names][: max(ALTERNATIVE_LINES, len(base))]:
        if all(r is None or r.ratio is None for _, r, _ in parts):
            out.append(f"{p.name} against {name}: – ({notes[name]})")
            continue
        out.append(versus(p.name, name, parts))
    # what its intervals are, where one clear of 1 stands beside a status not decided (issue 70):
    # said after the first "vs" line, which every screen that shows the pick's ratios shows
    if out and p.interval_note:
        out[0] += f" ({p.interval_note})"
    return out
