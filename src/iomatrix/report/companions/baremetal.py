"""What the reports say of the bare-metal tier: that ratios to it are missing when a sweep has none
of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iomatrix.report.companions import ReportCompanion
from iomatrix.tiers.declared.baremetal import BareMetal


class BareMetalReport(ReportCompanion):
    tier = BareMetal.name

    @classmethod
    def missing_notes(cls, cells: Sequence[Mapping[str, str]]) -> list[str]:
        if cells and not any(c["tier"] == cls.tier for c in cells):
            return [
                "no bare-metal cells: ratios to bare metal are missing (add tier "
                f"'{cls.tier}' to the plan)"
            ]
        return []
