"""Why the scheduler stopped repeating a unit, as a kind: the values stored in ``unit_stops.kind``.

The scheduler decides each stop with its kind and its sentence together (``scheduler.StopVerdict``);
the store keeps both and reports group and sort by the kind, never by the sentence. The values are
the strings databases have always held, so older files read the same. (A module of its own: the
scheduler writes kinds, the store and the reports read them, and none of those should depend on
another for it.)"""

from __future__ import annotations

from enum import StrEnum


class StopKind(StrEnum):
    ELIMINATED = "eliminated"  # racing: significantly and materially worse than the current best
    EQUIVALENT = "equivalent"  # racing: practically equivalent to the best (TOST)
    UNRESOLVED = "unresolved"  # racing: the rounds left cannot separate it from the best (futility)
    SETTLED = "settled"  # racing: the race of its group is over
    # racing: a baseline (bare metal, the null ceiling) keeps its minimum runs only
    BASELINE = "baseline"
    CONVERGED = "converged"  # ci-width: the CI half-width reached the target
    MAX_RUNS = "max-runs"  # the plan's maximum runs
    BUDGET = "budget"  # the time budget is spent
    GAVE_UP = "gave-up"  # too many failed runs
    # most of its runs missed their offered load (rate-limited workloads)
    LOAD_NOT_REACHED = "load-not-reached"
    OTHER = "other"  # a stop policy's own reason (plug-in policies)

    @classmethod
    def stored(cls, text: str) -> StopKind:
        """The kind a database holds; OTHER for a value this version does not know."""
        try:
            return cls(text)
        except ValueError:
            return cls.OTHER
