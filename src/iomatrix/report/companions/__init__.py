"""Report companions: what the reports say of one tier (its HTML section, its verdict lines, what a
sweep misses because of it), kept beside the reports and apart from the tier's declaration and
implementation, so a tier never imports the store or the report types.

A tier's declaration names its companion by ``"module:Class"`` (`report_companion`); the companion
is imported only when a report asks for it. A tier without one gets :class:`ReportCompanion`'s empty
hooks."""

from iomatrix.report.companions.base import ReportCompanion, companion, companions

__all__ = ["ReportCompanion", "companion", "companions"]
