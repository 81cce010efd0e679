"""The cost of shared guest boots, from the batches run so far: what `repetitions_per_boot = "auto"`
chooses the rounds per boot from (stats/runs_per_boot.py)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.tiers.base import RunOutcome


class BootLedger:
    """What shared guest boots cost and measured, for choosing the rounds per boot: per unit its ok
    runs as (boot id, position, primary metric); per batch its cost split into the boot's and the
    runs' share."""

    def __init__(self) -> None:
        self.runs: dict[str, list[tuple[str | None, int | None, float]]] = {}
        self._boot_costs: list[float] = []
        self._round_costs: list[float] = []

    def add_run(
        self, unit_key: str, boot_id: str | None, position: int | None, value: float
    ) -> None:
        self.runs.setdefault(unit_key, []).append((boot_id, position, float(value)))

    def add_batch(self, outcomes: Sequence[RunOutcome], wall_s: float, units: int) -> None:
        """A batch's wall (images, boot, runs, shutdown, removal) = c_boot + n · c_run, with c_run
        the median wall of its runs after the first (the first carries the boot, the last the
        shutdown); a round of the cell costs `units` runs."""
        later = sorted(
            o.phases["wall_s"]
            for o in outcomes
            if o.ok and (o.boot_position or 0) >= 1 and "wall_s" in o.phases
        )
        if not later or units < 1:
            return
        run_s = later[(len(later) - 1) // 2]
        self._boot_costs.append(max(0.0, wall_s - len(outcomes) * run_s))
        self._round_costs.append(units * run_s)

    @staticmethod
    def _median(xs: Sequence[float]) -> float | None:
        if not xs:
            return None
        s = sorted(xs)
        mid = len(s) // 2
        return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2

    def boot_cost_s(self) -> float | None:
        return self._median(self._boot_costs)

    def round_cost_s(self) -> float | None:
        return self._median(self._round_costs)
