"""What the reports say of the consolidation tier: its own HTML section (the host's scaling with
tiles)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iomatrix.report.companions import ReportCompanion
from iomatrix.report.consolidation import html_section
from iomatrix.tiers.declared.consolidation import Consolidation

if TYPE_CHECKING:
    from iomatrix.report.query import CellWorkload
    from iomatrix.store import Store


class ConsolidationReport(ReportCompanion):
    tier = Consolidation.name

    @classmethod
    def report_section(
        cls, store: Store, sweep_id: int, cws: list[CellWorkload]
    ) -> dict[str, Any] | None:
        section = html_section(store, sweep_id, cws)
        return None if section is None else {"id": cls.tier, **section}
