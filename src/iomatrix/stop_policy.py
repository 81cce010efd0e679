"""Stopping policies: when a unit has enough runs, decided once per round from the numbers alone.

What the scheduler (``scheduler.py``) asks of a policy, the state of a unit it passes, and the two
policies: ``racing`` (the default; F-race style per workload and tier, its decisions the pure
functions of ``stats/racing.py``) and ``ci-width`` (converged when the 95% CI half-width is within
``ci_target``). A stop is a
:class:`StopVerdict`: its kind (``stop_kinds.StopKind``) and its sentence together. Split from ``scheduler.py``,
which re-exports these names, along the seam between *whether* a unit stops and *which* unit runs
next."""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from iomatrix.stats import needs_more_runs
from iomatrix.stats.looks import DECISION_ALPHA
from iomatrix.stats.racing import race_step, stop_reason
from iomatrix.stop_kinds import StopKind

# stats.racing.stop_reason's reason when the race ends with only contenders the rounds left cannot
# separate.
RACE_NOT_SEPARABLE = "not separable within the budget"


@dataclass(frozen=True)
class StopVerdict:
    """Why a unit gets no more runs: the kind reports group by, and the sentence they print."""

    kind: StopKind
    # e.g. "eliminated: significantly worse than cache=unsafe by 38% (…)", "time budget spent"
    reason: str
    # An elimination's reference: the unit key of the best of the race's look it was eliminated
    # against. The decision at the end keeps the elimination while that cell is still a candidate
    # (stats/decision.py); None for every other kind.
    against: str | None = None

    def then(self, more: str) -> StopVerdict:
        """The same decision, with what happened after it (a decided unit's precision runs)."""
        return StopVerdict(self.kind, f"{self.reason}; {more}", self.against)


# The policy's stops of a unit that is out of the running: no precision runs for it under
# precision_for = "contenders".
NOT_CONTENDING = frozenset({StopKind.ELIMINATED, StopKind.BASELINE, StopKind.GAVE_UP})
PRECISION_FOR = ("all", "contenders")
GAVE_UP = "gave up after {failed} failed runs"
LOAD_NOT_REACHED = (
    "offered load not reached in {n} of {ok} runs: not comparable at the asked load, not counted "
    "(lower the workload's rate)"
)
MAX_RUNS = StopVerdict(StopKind.MAX_RUNS, "max runs reached")
BUDGET_SPENT = StopVerdict(StopKind.BUDGET, "time budget spent")
# A unit the budget stopped before its minimum runs (scheduler.Scheduler.short_of_minimum).
BUDGET_SHORT = "time budget spent at {ok} of its {min} minimum runs"
BASELINE = StopVerdict(StopKind.BASELINE, "baseline: minimum runs kept")


@dataclass
class UnitState:
    key: str
    # units compared with each other (one workload in one tier): racing decides per group
    group: str = ""
    # (round, primary metric) of the ok runs
    points: list[tuple[int, float]] = field(default_factory=list)
    # metric → (round, value) of the ok runs, for a role's other figures on this unit's job (the
    # database's data files: the write p99 beside the read p99, its primary): a role's trade-off is
    # weighed over all its figures (scheduler.RoleFigures)
    figures: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # rounds in which the unit has an ok or failed run
    rounds: set[int] = field(default_factory=set)
    ok: int = 0
    failed: int = 0
    stopped: StopVerdict | None = None  # why no more runs: converged, max runs, gave up …
    # Baselines the report needs (bare metal, the null ceiling) keep the minimum only under racing.
    baseline: bool = False
    # The user's current configuration (`run --current`): once racing decides on it, it leaves the
    # race but keeps running until its group's race is over (the comparison the user came for needs
    # its ratio to the winner).
    current: bool = False
    # Ok runs that missed their offered load (metrics.load_not_reached): counted as runs (min, max,
    # budget), never as values (racing, the CI), as the reports leave them out too.
    unreached: int = 0
    # round → value of a disturbed run awaiting its retry (and its other figures' values)
    pending: dict[int, float] = field(default_factory=dict)
    pending_figures: dict[int, dict[str, float]] = field(default_factory=dict)
    retries: int = 0  # disturbed runs started again
    # Runs up to which the unit keeps running toward ci_target once the policy is done with it
    # (None: it stops).
    precision_max: int | None = None
    decided: StopVerdict | None = None  # the policy's stop while the unit runs on for precision
    # Units that must be done before this one starts (a rate set from bare metal's maximum waits for
    # bare metal).
    after: frozenset[str] = frozenset()
    # Units the reports quote this one against (its QEMU-default twin: same tier, workload and other
    # axes, the default cache and aio): under precision_for = "contenders" they run on for precision
    # when this one contends.
    compared_with: tuple[str, ...] = ()
    # wall time of this session's runs of the unit (the runner reports it)
    wall_total_s: float = 0.0
    wall_runs: int = 0

    @property
    def expected_run_s(self) -> float:
        """What the unit's next run should take: the mean wall of its runs so far (0 before any)."""
        return self.wall_total_s / self.wall_runs if self.wall_runs else 0.0

    @property
    def done_reason(self) -> str | None:
        return None if self.stopped is None else self.stopped.reason

    @property
    def done(self) -> bool:
        return self.stopped is not None

    @property
    def racing(self) -> bool:
        """Still up to the stopping policy (not done, not decided and running on for precision)."""
        return self.stopped is None and self.decided is None

    @property
    def values(self) -> list[float]:
        return [v for _, v in self.points]

    @property
    def contends(self) -> bool:
        """Still in the running when the policy was done with it: not eliminated, not a baseline,
        not given up (False while it races: no decision yet)."""
        verdict = self.decided or self.stopped
        return verdict is not None and verdict.kind not in NOT_CONTENDING


@dataclass(frozen=True)
class Room:
    """What the sweep can still afford, for a policy that stops early when the rest cannot settle
    anything."""

    max_runs: int  # the plan's maximum runs per unit
    # runs the time budget still allows at this session's pace; None = unknown
    runs_affordable: float | None
    # units still racing (all groups; decided units not): a round costs about this many runs
    active_units: int

    def rounds_left(self, rounds_done: int) -> int:
        """Rounds a unit with `rounds_done` rounds may still run: up to max, and what the budget
        allows."""
        left = max(0, self.max_runs - rounds_done)
        if self.runs_affordable is not None and self.active_units > 0:
            left = min(left, max(0, math.floor(self.runs_affordable / self.active_units)))
        return left


class StopPolicy(Protocol):
    """Decides, once per round, which units (beyond their minimum runs) need no more runs."""

    name: str

    def finished(self, units: Sequence[UnitState], room: Room) -> dict[str, StopVerdict]:
        """unit key → why, for the units that should stop (only units with ≥ min ok runs are
        passed)."""
        ...


@dataclass
class CiWidthPolicy:
    """Stop a unit when the 95% CI half-width of its mean is within ``ci_target`` of the mean."""

    ci_target: float
    min_runs: int
    max_runs: int
    name: str = "ci-width"

    def finished(self, units: Sequence[UnitState], room: Room) -> dict[str, StopVerdict]:
        out: dict[str, StopVerdict] = {}
        for u in units:
            more, why = needs_more_runs(u.values, self.min_runs, self.max_runs, self.ci_target)
            if not more:  # needs_more_runs stops with exactly "converged" or "max runs reached"
                out[u.key] = StopVerdict(
                    StopKind.CONVERGED if why == "converged" else StopKind.MAX_RUNS, why
                )
        return out


@dataclass
class RacingPolicy:
    """F-race / irace style: per group (one workload in one tier), after every round past the
    minimum, eliminate the units significantly worse than the current best by more than
    ``threshold``, stop the units practically equivalent to it (TOST) and the contenders the rounds
    left (``Room``: max and the budget) cannot separate from it (futility); baselines (bare metal,
    the null ceiling) stop at their minimum; the group stops when one best, a settled or stable tied
    group, or only unseparable contenders are left. The decisions themselves are pure functions in
    ``stats/racing.py``."""

    threshold: float
    min_runs: int
    higher_is_better: Callable[[str], bool]  # group → direction of its primary metric
    alpha: float = DECISION_ALPHA
    name: str = "racing"
    # group → its margin of practical equivalence (a role job's is its role's: the race stops a cell
    # as equivalent exactly when the decision calls it so); None, or a group it does not know: the
    # threshold.
    margin_of: Mapping[str, float] | None = None
    # group → the difference not worth choosing on where it is not `threshold`: a role job's is its
    # role's margin (recommend decides it so: report/recommend), so a file server's race ties its
    # cells within the file server's 10 %, not the plan's 5 %.
    threshold_of: Mapping[str, float] | None = None
    history: dict[str, list] = field(default_factory=dict)  # group → its RaceStep per round
    # current units decided on, run to the race's end
    held: dict[str, StopVerdict] = field(default_factory=dict)

    def margin(self, group: str) -> float | None:
        return None if self.margin_of is None else self.margin_of.get(group)

    def threshold_for(self, group: str) -> float:
        return (self.threshold_of or {}).get(group, self.threshold)

    def finished(self, units: Sequence[UnitState], room: Room) -> dict[str, StopVerdict]:
        out: dict[str, StopVerdict] = {}
        groups: dict[str, list[UnitState]] = {}
        for u in units:
            if u.baseline:
                out[u.key] = BASELINE
            elif u.key not in self.held:
                groups.setdefault(u.group, []).append(u)
        # A comparison needs a variance: at least two rounds, whatever the plan's minimum.
        min_rounds = max(2, self.min_runs)
        for group, members in groups.items():
            if len(members) < 2 or any(len(u.points) < 2 for u in members):
                continue  # a lone unit, or one with a single value: nothing can be tested yet
            self._race_round(group, members, units, room, min_rounds, out)
        return out

    def _race_round(
        self,
        group: str,
        members: list[UnitState],
        units: Sequence[UnitState],
        room: Room,
        min_rounds: int,
        out: dict[str, StopVerdict],
    ) -> None:
        """One round of one group's race: its units' decisions into `out` (a current unit's held to
        the race's end), and every unit of the group's verdict once the race is over."""
        rounds_done = min(len({r for r, _ in u.points}) for u in members)
        step = race_step(
            {u.key: u.points for u in members},
            self.higher_is_better(group),
            threshold=self.threshold_for(group),
            alpha=self.alpha,
            min_rounds=min_rounds,
            rounds_left=room.rounds_left(rounds_done),
            margin=self.margin(group),
        )
        steps = self.history.setdefault(group, [])
        steps.append(step)
        current = {u.key for u in members if u.current}
        for d in step.decisions:
            if d.status in RACE_STOPS:
                verdict = race_verdict(d.status, d.reason, step.best)
                if d.unit in current:
                    self.held[d.unit] = verdict.then(
                        "run on to the end of the race: the current configuration"
                    )
                else:
                    out[d.unit] = verdict
        why = stop_reason(steps, rounds_done, max_rounds=10**9, min_rounds=min_rounds)
        if why:
            over = race_over(why, step.best)
            for u in [*members, *(u for u in units if u.key in self.held and u.group == group)]:
                out.setdefault(u.key, self.held.get(u.key, over))


# Racing's per-unit decisions that stop a unit, by their status (stats.racing.STATUSES), with their
# kind.
RACE_STOPS = {
    "eliminated": StopKind.ELIMINATED,
    "equivalent": StopKind.EQUIVALENT,
    "futile": StopKind.UNRESOLVED,
}


def race_verdict(status: str, reason: str, best: str | None = None) -> StopVerdict:
    """A unit racing stopped: eliminated ("eliminated: significantly worse than X …"), equivalent
    ("equivalent to X: …") or futile ("not separable from X within the budget: …"). ``best``: the
    look's best unit X, kept with an elimination as its reference."""
    kind = RACE_STOPS[status]
    if kind is StopKind.ELIMINATED:
        return StopVerdict(kind, f"eliminated: {reason}", best)
    return StopVerdict(kind, reason)


def race_over(why: str, best: str | None) -> StopVerdict:
    """The race of a group ended (``stats.racing.stop_reason``'s `why`): settled, or unresolved when
    only contenders the rounds left cannot separate were left."""
    kind = StopKind.UNRESOLVED if why == RACE_NOT_SEPARABLE else StopKind.SETTLED
    return StopVerdict(kind, f"race over: {why}" + (f" ({best} best)" if best else ""))


POLICIES = ("racing", "ci-width")
