"""What a tier declaration reads and sets of a plan, as a type low in the import graph.

The plan (`iomatrix.plan.model.Plan`) validates its tiers through the tier registry, so the tiers
cannot import it back without closing a loop (plan → tiers → plan). They take a :class:`PlanView`
instead: the part of the plan a tier's checks and estimates use, which `Plan` provides
(tests/test_import_graph.py checks the graph, tests/test_plan_view.py that a `Plan` provides it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class RepetitionsView(Protocol):
    """A plan's `[repetitions]`: the bounds of the adaptive stopping rule."""

    min: int
    max: int
    precision_max: dict[str, int]  # per tier: the runs a cheap tier keeps going to for precision


class BackingView(Protocol):
    """One `[[backing]]` table: its kind (dir, loop-ext4, iscsi, …) is what a tier's estimate
    reads."""

    type: str


class PlanView(Protocol):
    """The plan as a tier declaration sees it (check_plan, estimate_run_s, extra_cells)."""

    tier: list[str]
    # (a tier that sets it builds one of the plan's own type: type(plan.repetitions))
    repetitions: RepetitionsView
    null_ceiling: bool

    @property
    def backing(self) -> Sequence[BackingView]: ...

    @property
    def model_fields_set(self) -> set[str]: ...

    def axis_values(
        self, axis: str, tier: str | None = None, workload: str | None = None
    ) -> list[str]: ...

    def setting(self, key: str) -> Any: ...

    def set_setting(self, key: str, value: Any) -> None: ...
