"""What the sweep runner tells the user as it goes (the CLI's rich display implements it)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.matrix import Unit
from iomatrix.metrics import load_not_reached
from iomatrix.tiers.base import RunOutcome


class Progress:
    """What the runner tells the user; the CLI gives a rich implementation."""

    def cells(self, labels: Sequence[str]) -> None:
        """Every cell of the sweep (its labels), before the first run: a display may name each
        by what differs among them."""

    def start(self, total_estimate: int, resumed_runs: int) -> None: ...
    def run_started(
        self, index: int, unit: Unit, attempt: int, cell_no: int, cell_count: int
    ) -> None: ...
    def run_finished(self, unit: Unit, outcome: RunOutcome, summary: str) -> None: ...
    def grow(self, total_estimate: int) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


def run_headline(unit: Unit, outcome: RunOutcome) -> str:
    if not outcome.ok:
        return f"FAILED: {outcome.error}"
    m = unit.workload.primary_metric
    v = outcome.metrics.get(m)
    quantity = m.rpartition(".")[2]
    # the same quantity under another situation: a durability trial on Ceph RBD
    if v is None and quantity != m:
        # counts the acknowledged writes a client crash lost (qemu_crash.acked_lost), and cuts no
        # power
        same = next((k for k in sorted(outcome.metrics) if k.rpartition(".")[2] == quantity), None)
        if same is not None:
            m, v = same, outcome.metrics[same]
    shown = "?" if v is None else f"{v:,.1f}"
    line = f"{m}={shown} (wall {outcome.phases.get('wall_s', 0):.1f} s)"
    if load_not_reached(outcome.metrics):
        line += (
            f", offered load not reached ({outcome.metrics.get('load.achieved_frac', 0):.0%} of "
            f"{outcome.metrics.get('load.target_iops', 0):,.0f} IOPS): not counted"
        )
    return line
