"""How long a sweep of a plan takes: the one estimate `iomatrix plan`, `iomatrix plans` and the
README show (issue 70: `plans` said "3–5 min" for ceph, the README 8, and the sweep took 18.7).

The estimate is one figure, the sweep's wall clock set-up included:

    wall = min(time budget, set-up + minimum + share × (most − minimum))

* set-up: what a sweep does before its first run, per backing it uses: a lab-started server
  (its protocol's ``lab_setup_s``: Ceph's monitor and OSD 16 s, tgtd and nfs-ganesha 1 s) or a
  local backing's preparation (``LOCAL_SETUP_S``);
* minimum: every unit's minimum runs, ``matrix.estimate_seconds``' first figure (the tiers' own
  per-run costs, a guest tier's boots shared by a cell's runs);
* most: every unit to ``max`` runs, and a tier's ``precision_max`` beyond it, not capped;
* share (``ADAPTIVE_SHARE``): the part of the runs between the minimum and the most that an adaptive
  sweep (racing, ci-width) makes before its data settle; a fixed design (``min = max`` with no
  precision runs) makes none of them;
* the built-in guest's TCG work (its boots, its filesystem jobs) is estimated at the reference
  host's pace, or at this host's when a quiet sweep recorded it (guest/pace.py: on the
  2026-11-29 VM the quiet runs took 1.84× their reference costs, and full-matrix-fs's estimate went
  from 1.6 h to 2.9 h, its minimum runs 0.92× those measured);
* the time budget caps it: the scheduler starts no run that the budget cannot hold
  (scheduler.py), set-up included, so a sweep whose runs would take longer ends at its budget, and
  the estimate says so (``budget_bound``). Its minimum runs beyond the budget are then cut too:
  ``minimum_cut`` says so, and the sweep's answer says how many cells kept their first runs only.

Checked against the sweeps the project recorded (tests/test_estimate.py): the captured databases in
tests/data (their stored plans and wall clocks) and the wall times docs/benchmarks-history.md
records, within ±25 %."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from iomatrix.matrix import estimate_seconds
from iomatrix.protocol_registry import network_protocol
from iomatrix.tiers import declaration

if TYPE_CHECKING:
    from iomatrix.guest.pace import GuestPace
    from iomatrix.matrix import Expansion
    from iomatrix.plan.model import Plan

# Seconds from a sweep's start to its first run per backing that is not a lab-started server (each
# protocol gives its own server's: NetworkProtocol.lab_setup_s): a directory, a loop device's mkfs
# and mount (0.1–2.7 s in tests/data's captured sweeps), an existing server's check.
LOCAL_SETUP_S = 1.0
# The share of the runs between every unit's minimum and its most that an adaptive sweep makes:
# racing stops most cells at or near their minimum and runs the close ones on. Fitted to the sweeps
# recorded on a quiet host (tests/test_estimate.py): 0.21 of the way for shared-storage (8.0 min,
# minimum 4.9, most 19.6), 0.18 for modern (15.0 min; 8.1, 45.9), 0.18 for full-matrix-fs (89.5
# min; 76.1, 152.1). A loaded host makes every cell noisier and runs longer: its sweeps run to 0.6-1
# of the way (shared-storage 13.5 and 18.9 min), which the budget then caps.
ADAPTIVE_SHARE = 0.25


@dataclass(frozen=True)
class SweepEstimate:
    """A plan's sweep as estimated (seconds): its parts, and the one figure shown (`wall_s`)."""

    setup_s: float  # before the first run: lab servers, local backings
    minimum_s: float  # every unit's minimum runs
    most_s: float  # every unit to max (and a tier's precision_max), not capped by the budget
    budget_s: float  # the plan's time budget: a wall-clock limit, set-up included
    wall_s: float  # the estimate: set-up and the expected runs, at most the budget
    # this host's pace for the built-in guest's TCG work, where the plan runs it and a quiet sweep
    # recorded it; None: the reference host's
    pace: GuestPace | None = None

    @property
    def budget_bound(self) -> bool:
        """The time budget ends the sweep before its runs would."""
        return self.wall_s >= self.budget_s

    @property
    def minimum_cut(self) -> bool:
        """Even every unit's minimum runs do not fit the budget: some cells keep their first runs
        only."""
        return self.setup_s + self.minimum_s > self.budget_s

    def minutes(self) -> str:
        """The figure as `plans` and the README give it: '4.5 min', '12 min', '1.5 h'."""
        return duration_text(self.wall_s)

    def sentence(self, budget: str) -> str:
        """What `iomatrix plan` says of it, e.g. 'estimated duration: 12 min, set-up 21 s included
        (the minimum runs alone 4.9 min; time budget 18m, a wall-clock limit)', and the pace it
        assumed where it is this host's."""
        said = self._sentence(budget)
        return said if self.pace is None else f"{said}; {self.pace.sentence()}"

    def _sentence(self, budget: str) -> str:
        setup = f"set-up {self.setup_s:.0f} s included"
        minimum = f"the minimum runs alone {duration_text(self.minimum_s)}"
        if self.minimum_cut:
            return (
                f"estimated duration: {self.minutes()}, {setup}: the time budget {budget} ends it "
                f"({minimum}, so some cells keep their first runs only; raise time_budget to give "
                "them all their minimum)"
            )
        if self.budget_bound:
            return (
                f"estimated duration: {self.minutes()}, {setup}: the time budget {budget} ends it "
                f"({minimum}; the sweep ends sooner once its answers settle)"
            )
        return (
            f"estimated duration: {self.minutes()}, {setup} ({minimum}; time budget {budget}, a "
            "wall-clock limit)"
        )


def setup_s(plan: Plan, expansion: Expansion) -> float:
    """Seconds before a sweep's first run: each backing a cell uses, set up once."""
    used = {c.backing for c in expansion.cells if not c.is_null_ceiling}
    total = 0.0
    for label, spec in plan.backing_by_label().items():
        if label not in used:
            continue
        network = network_protocol(getattr(spec, "protocol", None))  # None: a local backing
        if network is not None and getattr(spec, "lab_started", False):
            total += network.lab_setup_s
        else:
            total += LOCAL_SETUP_S
    return total


def adaptive(plan: Plan) -> bool:
    """Whether the sweep's runs per unit depend on its data (between min and max, or a tier's
    precision_max): racing or ci-width with room beyond the minimum."""
    reps = plan.repetitions
    return reps.max > reps.min or any(n > reps.min for n in reps.precision_max.values())


def estimate_sweep(
    plan: Plan, expansion: Expansion, pace: GuestPace | None = None
) -> SweepEstimate:
    """The one estimate of a sweep of `plan` (the module's docstring has the formula); `pace`: this
    host's for the built-in guest (guest.pace.recorded_pace()), None for the reference host's (the
    README's figures, checked against the recorded sweeps)."""
    if pace is not None and not paced(plan, expansion):
        pace = None
    minimum, most = estimate_seconds(
        plan, expansion, capped=False, guest_pace=1.0 if pace is None else pace.factor
    )
    setup = setup_s(plan, expansion)
    runs = minimum + (ADAPTIVE_SHARE * (most - minimum) if adaptive(plan) else 0.0)
    budget = plan.time_budget_s
    return SweepEstimate(setup, minimum, most, budget, min(budget, setup + runs), pace)


def paced(plan: Plan, expansion: Expansion) -> bool:
    """Whether some cell of the sweep is the built-in guest's TCG work (a host's pace changes its
    estimate)."""
    return any(declaration(t).paced_by_guest(plan) for t in {c.tier for c in expansion.cells})


def duration_text(seconds: float) -> str:
    """'4.5 min' under 10 minutes, '12 min' to 90 minutes, '1.5 h' beyond."""
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    minutes = seconds / 60
    return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
