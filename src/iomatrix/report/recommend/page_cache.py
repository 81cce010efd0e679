"""Every ratio an answer states between a cell the host page cache served and one it did not, the
workload's working set fitting in RAM, says that the caching side measured memory, not the disk
(issue 49: honest working sets). The rule is report/shape_findings.py's (``page_cache_note``); this
module finds each verdict's cells."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iomatrix.fio.shape import IoShape
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend.verdict import Verdict
from iomatrix.report.shape_findings import page_cache_note


def _cell(
    cells: Mapping[tuple[str, str], list[CellWorkload]], v: Verdict, label: str | None
) -> CellWorkload | None:
    """The verdict's cell of this label: its tier's, of its workload (a per-backing verdict is named
    "w on …")."""
    for c in cells.get((label or "", v.tier), []):
        if v.workload == c.workload or v.workload.startswith(c.workload + " "):
            return c
    return None


def mark_page_cache(
    verdicts: Sequence[Verdict],
    cws: Sequence[CellWorkload],
    shapes: Mapping[str, IoShape],
    ram_bytes: int | None,
) -> None:
    """Set ``page_cache`` on every gain and alternative of the verdicts (and of their tie-break
    picks) where ``page_cache_note`` applies."""
    if not ram_bytes:
        return
    cells: dict[tuple[str, str], list[CellWorkload]] = {}
    for c in cws:
        cells.setdefault((c.label(), str(c.axes.get("tier", ""))), []).append(c)
    for verdict in verdicts:
        for v in (verdict, verdict.provisional):
            if v is None or v.choice is None:
                continue
            chosen = _cell(cells, v, v.choice.cell)
            if chosen is None:
                continue
            for g in (*v.gains, *v.alternatives):
                other = _cell(cells, v, g.label)
                if other is not None:
                    g.page_cache = page_cache_note(
                        chosen, other, shapes.get(chosen.workload), ram_bytes
                    )
