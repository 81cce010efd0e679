"""What the reports say of the guest tier: that ratios to the null-co ceiling are missing without
one, and how far the guest agrees with the block layer on the cells both measured
(report/tier_agreement.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from iomatrix.domain import NULL_BACKING
from iomatrix.report.companions import ReportCompanion
from iomatrix.report.tier_agreement import agreement_lines, agreements

if TYPE_CHECKING:
    from iomatrix.report.query import CellWorkload
    from iomatrix.store import Store


# The tier the guest's figures are compared with: QEMU's block layer (the graph without a guest).
BLOCK_LAYER = "blocklayer"


class GuestReport(ReportCompanion):
    tier = "guest"

    @classmethod
    def missing_notes(cls, cells: Sequence[Mapping[str, str]]) -> list[str]:
        if any(c["tier"] == cls.tier for c in cells) and not any(
            c["backing"] == NULL_BACKING for c in cells
        ):
            return ["no null-co ceiling: ratios to the ceiling are missing (null_ceiling = true)"]
        return []

    @classmethod
    def report_section(
        cls, store: Store, sweep_id: int, cws: list[CellWorkload]
    ) -> dict[str, Any] | None:
        found = agreements(cws, BLOCK_LAYER, cls.tier)
        if not found:
            return None
        return {
            "id": "guest-vs-blocklayer",
            "title": "How far the guest agrees with the block layer",
            "lines": agreement_lines(found),
        }
