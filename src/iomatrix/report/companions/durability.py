"""What the reports say of the durability tier: its measured verdicts, as lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iomatrix.report.companions import ReportCompanion
from iomatrix.report.durability import sweep_verdict_lines, sweep_verdict_summary
from iomatrix.tiers.declared.durability import Durability

if TYPE_CHECKING:
    from iomatrix.store import Store


class DurabilityReport(ReportCompanion):
    tier = Durability.name

    @classmethod
    def verdict_lines(cls, store: Store, sweep_id: int, workload: str | None = None) -> list[str]:
        return sweep_verdict_lines(store, sweep_id, workload)

    @classmethod
    def verdict_summary(cls, store: Store, sweep_id: int, workload: str | None = None) -> str:
        return sweep_verdict_summary(store, sweep_id, workload)
