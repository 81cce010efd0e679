"""What the reports say of the guest tier: that ratios to the null-co ceiling are missing without one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iomatrix.domain import NULL_BACKING
from iomatrix.report.companions import ReportCompanion


class GuestReport(ReportCompanion):
    tier = "guest"

    @classmethod
    def missing_notes(cls, cells: Sequence[Mapping[str, str]]) -> list[str]:
        if any(c["tier"] == cls.tier for c in cells) and not any(c["backing"] == NULL_BACKING for c in cells):
            return ["no null-co ceiling: ratios to the ceiling are missing (null_ceiling = true)"]
        return []
