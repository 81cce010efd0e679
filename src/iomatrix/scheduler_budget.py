"""The scheduler's budget and time keeping: the wall clock of the sweep against its time budget, a
run's expected share of it, the room left, and whether the host is too busy for retries.

Split from ``scheduler.py`` (whose ``Scheduler`` derives from :class:`BudgetKeeping`) along the
seam between *how much time is left* and *which unit runs next*, so that each stays small enough
to change safely (issue 68)."""

from __future__ import annotations

from collections.abc import Callable

from iomatrix.stop_kinds import StopKind
from iomatrix.stop_policy import BUDGET_SHORT, Room, StopVerdict, UnitState

# disturbed share of the judged retries above which the host counts as busy: no more retries
BUSY_SHARE = 0.5
BUSY_MIN_RETRIES = 3


class BudgetKeeping:
    """The budget part of ``scheduler.Scheduler``: reads the attributes its ``__init__`` sets
    (declared here for the type checker), and sets only a unit's budget stop."""

    units: dict[str, UnitState]
    min_runs: int
    max_runs: int
    budget_s: float
    clock: Callable[[], float]
    prior_elapsed_s: float
    session_runs: int
    retries_judged: int
    retries_disturbed: int
    _start: float

    def elapsed_s(self) -> float:
        return self.prior_elapsed_s + (self.clock() - self._start)

    def budget_left(self, run_s: float = 0.0) -> bool:
        """Whether the budget has room for `run_s` more seconds (a run of that length would end
        within it)."""
        return self.elapsed_s() + run_s < self.budget_s

    def expected_run_s(self, u: UnitState) -> float:
        """What `u`'s next run should take of the budget: its own runs' mean wall this session, else
        the mean of every run this session (a unit's first run here: the units of one sweep run
        alike for seconds, not minutes), else 0 (no run timed yet); times the session's time per
        second of run wall, as what lies between the runs (a guest tier's shared boots, the host's
        samples, storing each run) is spent from the budget too."""
        runs = sum(v.wall_runs for v in self.units.values())
        if not runs:
            return 0.0
        walls = sum(v.wall_total_s for v in self.units.values())
        own = u.expected_run_s if u.wall_runs else walls / runs
        between = (self.clock() - self._start) / walls if walls > 0 else 1.0
        return own * max(1.0, between)

    def short_of_minimum(self) -> list[str]:
        """The units the budget stopped before their minimum runs (each with its first run at
        least), in the sweep's order."""
        return [
            k
            for k, u in self.units.items()
            if u.stopped is not None
            and u.stopped.kind is StopKind.BUDGET
            and 0 < u.ok < self.min_runs
        ]

    def _stop_short(self, u: UnitState) -> None:
        """The budget cannot hold `u`'s next minimum run: it keeps the runs it has."""
        u.stopped = StopVerdict(StopKind.BUDGET, BUDGET_SHORT.format(ok=u.ok, min=self.min_runs))

    def room(self) -> Room:
        """What max and the budget still allow; the budget in runs at this session's pace (None
        before a run)."""
        runs_affordable = None
        if self.session_runs:
            per_run = max(self.clock() - self._start, 1e-9) / self.session_runs
            runs_affordable = max(0.0, self.budget_s - self.elapsed_s()) / per_run
        # Decided units are not counted: the race's futility judgement is made as if they had
        # stopped.
        return Room(self.max_runs, runs_affordable, sum(1 for u in self.units.values() if u.racing))

    def host_busy(self) -> bool:
        """More than BUSY_SHARE of this session's judged retries were disturbed again: retrying
        finds no quiet moment."""
        return (
            self.retries_judged >= BUSY_MIN_RETRIES
            and self.retries_disturbed > BUSY_SHARE * self.retries_judged
        )
