"""The report companion's hooks (:class:`ReportCompanion`) and the lookup of a tier's companion
(the package's docstring, :mod:`iomatrix.report.companions`, tells how they are found)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from iomatrix.plugins import load_object
from iomatrix.tiers import known_tier, tier_classes

if TYPE_CHECKING:
    from iomatrix.report.query import CellWorkload
    from iomatrix.store import Store


class ReportCompanion:
    """The report hooks of one tier. Subclass, set `tier` to the tier's name, name it in the
    declaration."""

    tier: ClassVar[str] = ""

    @classmethod
    def missing_notes(cls, cells: Sequence[Mapping[str, str]]) -> list[str]:
        """What the HTML report says is missing from a sweep because of this tier (its cells' axes,
        every tier's). Asked of every registered tier."""
        return []

    @classmethod
    def report_section(
        cls, store: Store, sweep_id: int, cws: list[CellWorkload]
    ) -> dict[str, Any] | None:
        """A section of the HTML report of the tier's own (id, title, lines; svg and svg_caption
        optional), or None when the sweep has nothing for it."""
        return None

    @classmethod
    def verdict_lines(cls, store: Store, sweep_id: int, workload: str | None = None) -> list[str]:
        """For a tier with `verdicts`: its verdicts in a sweep as text lines (`workload`: only that
        one's)."""
        return []

    @classmethod
    def verdict_summary(cls, store: Store, sweep_id: int, workload: str | None = None) -> str:
        """For a tier with `verdicts`: its verdicts in a sweep in one sentence, for a short answer
        (by default its verdict lines joined)."""
        return "; ".join(x.strip() for x in cls.verdict_lines(store, sweep_id, workload))


_LOADED: dict[str, type[ReportCompanion]] = {}


def companion(tier: str) -> type[ReportCompanion]:
    """The report companion of the tier named `tier` (the empty one for a tier without, or a name
    this version does not know: an old database's tier)."""
    if tier not in _LOADED:
        decl = known_tier(tier)
        reference = decl.report_companion if decl is not None else ""
        found = load_object(reference) if reference else ReportCompanion
        if not (isinstance(found, type) and issubclass(found, ReportCompanion)):
            raise TypeError(
                f"tier '{tier}': report companion {reference} is no ReportCompanion subclass"
            )
        _LOADED[tier] = found
    return _LOADED[tier]


def companions() -> list[type[ReportCompanion]]:
    """Every registered tier's companion, in the tiers' report order."""
    return [companion(t.name) for t in tier_classes()]
