"""Which unit runs next, and when a unit has enough runs: scheduling policy without any I/O.

The runner (``runner.py``) does the I/O: it asks :meth:`Scheduler.next_round` for the units of the
next round, asks :meth:`Scheduler.should_start` before each run (the budget may run out mid-round),
runs the unit and reports the outcome with :meth:`Scheduler.record`. Everything here is decided from
the numbers it is given and an injectable clock, so the policy is unit-tested with scripted outcomes
and no fio or QEMU (as hyperfine tests its scheduler with a mock executor).

Design: **randomised complete blocks**. A round runs every still-active unit once, in a fresh random
order drawn from a seed that is a function of the sweep (its plan fingerprint) and the round number,
so the order is reproducible and slow drift of the machine spreads over all units instead of
favouring the ones that ran first. The units compared with each other (a group: one workload in one
tier) run one after another in the round, in a random order among themselves, so that the runs a
paired comparison subtracts are seconds apart (``order``). The round and the position in it are
stored with every run, so the statistics can use the round as a block, and a resumed sweep continues
the same design: the interrupted round is finished (in its recorded order) before the next one
starts.

Stopping, per unit, in this order:

* ``gave up after N failed runs``: ``max_failures`` failures and more failures than successes;
* fewer than ``min`` ok runs: another run while the budget holds it (the budget is a wall-clock
  limit the sweep keeps to, its minimum runs included); a unit's first run always, as a unit without
  a value answers nothing. A unit the budget stops short of its minimum keeps the runs it has
  (``time budget spent at 2 of its 3 minimum runs``; :meth:`Scheduler.short_of_minimum`), and the
  answer says how many cells kept their first runs only;
* the stopping policy says done: ``racing`` (the default; F-race style, per workload and tier: a
  unit significantly worse than the current best by more than the practical threshold stops, so does
  one practically equivalent to it (TOST) or one the rounds left cannot separate from it (futility:
  ``max`` and the budget, at the sweep's pace so far), baselines stop at their minimum, and the race
  ends when one best, a settled or stable tied group, or only unseparable contenders are left —
  ``stats/racing.py``) or ``ci-width`` (converged when the 95% CI half-width ≤ ``ci_target`` of the
  mean);
* ``max runs reached``;
* ``time budget spent``: no run beyond a unit's first starts once the wall clock of the sweep
  (earlier sessions and its set-up included) reaches the budget, or would reach it before the run
  ends at the unit's pace so far (before the unit's first run this session: the session's pace).

**Precision after the decision** (``[repetitions] precision_max``, per tier): the stopping policy
decides *which* unit is best; the numbers the reports quote for every unit (and the ratios between
them: "x% faster than what you run today") need an error bar that is tight too, and racing stops
losers and baselines with wide ones. A unit of a tier given a ``precision_max`` (a cheap tier: the
block layer's runs take about a second) is therefore *decided* rather than stopped when the policy
(or ``max``) is done with it and its 95% CI half-width is still above ``ci_target``: once no unit is
racing any more, decided units run in further rounds (complete blocks of their own) until their CI
reaches ``ci_target``, they reach ``precision_max`` runs, or the budget is spent. The race itself is
untouched: a decided unit takes no part in the policy's decisions, in its estimate of the rounds
left, or in the rounds while the race is on. Its stop keeps the policy's reason (and so its kind),
followed by what the extra runs reached.

**Precision for the contenders only** (``precision_for = "contenders"``; the default ``"all"`` runs
every decided unit on): the figures the first answer quotes are the chosen cell's and its ratio to
the comparison it is quoted against (QEMU's default, the user's current configuration), so only
those need the tight error bar. Once the race is over, a decided unit runs on only when it is a
*contender* (the policy did not eliminate it and it is no baseline: the best, those tied with it,
those the rounds could not separate from it, those stopped at ``max``) or when a contender names it
in ``compared_with`` (the runner fills that in from the axis registry's baselines). The others stop
there, their reason saying so ("…; not run on toward ±5%: not a contender, CI ±9.1%"), and the sweep
ends as soon as the contenders are precise: before its budget when that is enough. Contenders whose
race ended unresolved run on together to ``precision_max`` or the budget even when their own CIs are
within target (``_unresolved_contender``): the answer needs the CI of their ratio, which only more
paired rounds narrow.

Every stop is decided as a :class:`StopVerdict`, its kind (``stop_kinds.StopKind``) and its sentence
together, and reported once through :meth:`Scheduler.new_stops` (the runner stores it): eliminated,
equivalent (practically equivalent to the best), unresolved (the rounds left cannot separate it from
the best), settled (the race is over), baseline, converged, max-runs, budget, gave-up, or other (a
plug-in policy's own reason). Nothing reads the kind back from the sentence.

**Disturbed runs are retried**: the runner judges each run from the host samples taken during it
(``stats/interference.py``) and passes the verdict to :meth:`Scheduler.record`. An ok run disturbed
by an outside cause (CPU pressure, steal, other processes' CPU — not page-cache writeback, which our
own writes cause too) gets one retry at the end of the same round, so the block stays complete: the
retry's value replaces the disturbed one when it is clean, else the latest value counts (the store's
rule for reading, ``store/queries.py``, is the same). No retry when the budget is spent, after
``max_retries`` retries of the unit, or once the host is *busy*: retries themselves keep landing in
disturbed moments (more than half of the judged retries disturbed again, at least
``BUSY_MIN_RETRIES`` of them), so waiting for a quiet moment would only spend the budget. (Judged by
the retries, not by the share of disturbed runs: a load that comes and goes disturbs many runs, and
their retries find the quiet moments between.)

Batches: a tier that shares a start-up among runs (the guest tier boots once for several runs of one
cell) gets a round as batches (:meth:`Scheduler.next_batches`): the units of one cell form one batch
(split at the tier's limit), the cells in the round's order (a cell where its first unit falls in
:meth:`Scheduler.order`), the units inside a cell in that order too, and positions in the round
count on across the batches.
The randomisation is then at the cell level: the runs of one cell are adjacent in time, which is the
price of the shared boot; the runs' positions record it. With ``rounds_per_batch`` > 1 (in-boot
repetition) a batch holds the following rounds of its cell too. (The runner retries the disturbed
runs of one shared boot together, in one new boot.)"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The budget and time keeping (scheduler_budget.py), a base of Scheduler; its constants stay
# importable from here.
from iomatrix.scheduler_budget import BUSY_MIN_RETRIES, BUSY_SHARE

# The precision after the decision (scheduler_precision.py), a base of Scheduler over the budget's.
from iomatrix.scheduler_precision import PrecisionKeeping

# What a role's figures say of the units deciding its answer (scheduler_roles.py); RoleFigures
# stays importable from here.
from iomatrix.scheduler_roles import RoleFigures, role_view, veto_groups
from iomatrix.stats.deciding import deciding_pairs
from iomatrix.stop_kinds import StopKind

# The stopping policies and the unit state they judge (stop_policy.py), under the names callers
# import from here.
from iomatrix.stop_policy import (
    BASELINE,
    BUDGET_SHORT,
    BUDGET_SPENT,
    GAVE_UP,
    LOAD_NOT_REACHED,
    MAX_RUNS,
    NOT_CONTENDING,
    POLICIES,
    PRECISION_FOR,
    RACE_NOT_SEPARABLE,
    RACE_STOPS,
    CiWidthPolicy,
    RacingPolicy,
    Room,
    StopPolicy,
    StopVerdict,
    UnitState,
    race_over,
    race_verdict,
)

MAX_FAILED_ATTEMPTS = 3
MAX_RETRIES_PER_UNIT = 2  # retries of disturbed runs per unit over the sweep

__all__ = [
    "BASELINE",
    "BUDGET_SHORT",
    "BUDGET_SPENT",
    "BUSY_MIN_RETRIES",
    "BUSY_SHARE",
    "GAVE_UP",
    "LOAD_NOT_REACHED",
    "MAX_RUNS",
    "NOT_CONTENDING",
    "POLICIES",
    "PRECISION_FOR",
    "RACE_NOT_SEPARABLE",
    "RACE_STOPS",
    "CiWidthPolicy",
    "RacingPolicy",
    "RoleFigures",
    "Room",
    "Scheduler",
    "Slot",
    "Stop",
    "StopPolicy",
    "StopVerdict",
    "UnitState",
    "race_over",
    "race_verdict",
]


@dataclass(frozen=True)
class Slot:
    """One run to start: a unit, its round and its position in the round (both stored with the
    run)."""

    key: str
    round: int
    position: int
    retry: bool = False  # started again because the unit's run earlier in this round was disturbed


@dataclass(frozen=True)
class Deciding:
    """What the current data leave to decide (Scheduler.deciding_units): the units of the unsettled
    deciding pairs (stats/deciding.py) and of the roles' open trade-offs, and per group its pairs
    as (leader, the cells paired with it, the runner-up first), which a round runs back to back
    (Scheduler.order)."""

    units: set[str]
    pairs: dict[str, tuple[str, list[str]]]


@dataclass(frozen=True)
class Stop:
    """A unit's stop, as the store keeps it."""

    key: str
    kind: StopKind
    reason: str
    round: int | None  # the last round the unit ran in
    ok_runs: int
    against: str | None = None  # an elimination's reference unit (StopVerdict.against)


class Scheduler(PrecisionKeeping):
    def __init__(
        self,
        units: Iterable[UnitState],
        *,
        min_runs: int,
        max_runs: int,
        budget_s: float,
        policy: StopPolicy,
        seed: int,
        clock: Callable[[], float],
        prior_elapsed_s: float = 0.0,
        max_failures: int = MAX_FAILED_ATTEMPTS,
        max_retries: int = MAX_RETRIES_PER_UNIT,
        ci_target: float | None = None,
        precision_for: str = "all",
        roles: Sequence[RoleFigures] = (),
    ) -> None:
        if not 1 <= min_runs <= max_runs:
            raise ValueError(f"need 1 ≤ min ≤ max repetitions, got {min_runs}, {max_runs}")
        if precision_for not in PRECISION_FOR:
            raise ValueError(
                f"precision_for must be one of {', '.join(PRECISION_FOR)}, got {precision_for!r}"
            )
        self.precision_for = precision_for
        self.roles = tuple(roles)
        self.units: dict[str, UnitState] = {u.key: u for u in units}
        if ci_target is None and any(u.precision_max is not None for u in self.units.values()):
            raise ValueError("units with a precision_max need the sweep's ci_target")
        self.ci_target = ci_target
        self.min_runs = min_runs
        self.max_runs = max_runs
        self.budget_s = budget_s
        self.policy = policy
        self.seed = seed
        self.clock = clock
        self.prior_elapsed_s = prior_elapsed_s
        self.max_failures = max_failures
        self.max_retries = max_retries
        self.judged = 0  # ok runs judged for interference this session
        self.disturbed = 0  # …of which disturbed
        self.retries_judged = 0  # retries of disturbed runs judged this session
        self.retries_disturbed = 0  # …of which disturbed again
        # runs recorded this session (ok or failed): the pace for Room.runs_affordable
        self.session_runs = 0
        self._next_position: dict[int, int] = {}
        self._reported: set[str] = set()
        self._active: set[str] = set()  # the units of the round next_round last gave
        # what the current data leave to decide (None: to compute; _decided())
        self._deciding: Deciding | None = None
        self._start = clock()
        # The round in progress: the highest round any unit has a run in (0 = none yet).
        self.round = max((r for u in self.units.values() for r in u.rounds), default=0)

    # -- decisions --------------------------------------------------------------
    def deciding_units(self) -> set[str]:
        """The units of the comparisons that decide an answer and are not settled yet
        (stats/deciding.py): per group, the leader with every cell not settled against it (the
        runner-up, the current configuration, its default twin among them). Only under racing (its
        threshold and α judge what is settled); computed once per refresh."""
        return self._decided().units

    def _decided(self) -> Deciding:
        """deciding_units() with each group's pairs, computed once per refresh."""
        if self._deciding is not None:
            return self._deciding
        out: set[str] = set()
        pairs: dict[str, tuple[str, list[str]]] = {}
        policy = self.policy
        if isinstance(policy, RacingPolicy):
            levels = functools.partial(self._levels, policy)
            views = [role_view(role, self.units, levels) for role in self.roles]
            only_with = veto_groups(self.roles, views, self.units)
            groups: dict[str, list[UnitState]] = {}
            for u in self.units.values():
                if not u.baseline and len(u.points) >= 2:
                    groups.setdefault(u.group, []).append(u)
            for group, members in groups.items():
                data = {u.key: u.points for u in members}
                # The current configuration and the default twins are members: paired like every
                # other.
                for pair in deciding_pairs(data, **self._levels(policy, group)):
                    if group not in only_with or only_with[group] & set(pair):
                        out.update(pair)
                        leader, other = pair
                        pairs.setdefault(group, (leader, []))[1].append(other)
            for view in views:
                out.update(view.tradeoff)
        self._deciding = Deciding(out, pairs)
        return self._deciding

    def _levels(self, policy: RacingPolicy, group: str) -> dict[str, Any]:
        """What a group's pairs are judged at after the race (its direction, θ, α, margin), as
        stats/deciding.py and stats/racing.py take them; no pair before 2 complete rounds."""
        return {
            "higher_is_better": policy.higher_is_better(group),
            "threshold": policy.threshold_for(group),
            "alpha": policy.alpha,
            "min_rounds": max(2, min(self.min_runs, 3)),
            "margin": policy.margin(group),
        }

    def _refresh(self) -> None:
        """Mark units done: failures, then policy/max/budget for units past their minimum; decided
        units once precise enough, at their precision_max or out of budget."""
        self._deciding = None  # the data changed since the last refresh
        candidates: list[UnitState] = []
        for u in self.units.values():
            if u.done:
                continue
            if u.failed >= self.max_failures and u.failed > u.ok:
                u.stopped = StopVerdict(StopKind.GAVE_UP, GAVE_UP.format(failed=u.failed))
            elif u.ok >= self.min_runs and u.unreached > len(u.points):
                # Most of its runs missed the offered load: more of them would not make it
                # comparable.
                u.stopped = StopVerdict(
                    StopKind.LOAD_NOT_REACHED, LOAD_NOT_REACHED.format(n=u.unreached, ok=u.ok)
                )
            elif u.decided is not None:
                self._precision_check(u)
            elif u.ok >= self.min_runs:
                candidates.append(u)
            elif u.ok and not self.budget_left():
                self._stop_short(u)
        if not candidates:
            return
        for key, why in self.policy.finished(candidates, self.room()).items():
            self._stop(self.units[key], why)
        for u in candidates:
            if not u.racing:
                continue
            if u.ok >= self.max_runs:
                self._stop(u, MAX_RUNS)
            elif not self.budget_left():
                u.stopped = BUDGET_SPENT

    def order(self, round_no: int, keys: Sequence[str]) -> list[str]:
        """`keys` in the round's random order: each group's units (the cells compared with each
        other: one workload in one tier) one after another, the groups in a random order, and the
        cells inside a group in a random order of their own, except that a group's unsettled
        deciding pairs run back to back (:meth:`_pairs_together`). The permutations are drawn over
        all units from the sweep's seed and the round number only, so they are reproducible and the
        same whichever units are still active (a resumed round keeps its order while the data name
        the same deciding pairs).

        Why a group's runs sit together: a comparison is paired by round (stats/paired.py), and the
        host's state drifts over seconds. Runs of the log's commits 1.4 s apart on this 2-core host
        (2026-11-26) had residuals correlated 0.56 at one run apart, ~0.5 at two and three, ~0.2 at
        four to six; spread over a round of 15-20 units the runs of one pair sat ~7 apart (0.23
        in a quickstart). The variance of a paired difference is 2σ²(1 − ρ): run together, a pair
        needs about half the rounds (docs/statistics.md §10c). Randomising inside the group keeps
        every cell's position fair; the groups' order does not enter any comparison."""
        pairs = self._decided().pairs
        groups: dict[str, list[str]] = {}
        for k in sorted(self.units):
            groups.setdefault(self.units[k].group, []).append(k)
        names = sorted(groups)
        random.Random(f"{self.seed}:{round_no}").shuffle(names)
        everything: list[str] = []
        for g in names:
            members = groups[g]
            rng = random.Random(f"{self.seed}:{round_no}:{g}")
            rng.shuffle(members)
            everything += self._pairs_together(members, pairs.get(g), rng)
        wanted = set(keys)
        return [k for k in everything if k in wanted]

    @staticmethod
    def _pairs_together(
        members: list[str], deciding: tuple[str, list[str]] | None, rng: random.Random
    ) -> list[str]:
        """A group's shuffled `members` with its deciding pairs' units made one stretch: the
        leader, and the cells paired with it (stats/deciding.py, the runner-up first) alternately on
        its two sides, the runner-up's side drawn. The runner-up and the next cell run right next to
        the leader, the two after them one run away, and so on. The stretch sits where its first
        unit fell in the shuffle; the other units keep their shuffled order.

        Why: a decision rests on the pair's paired difference, and a run between the two adds the
        host's drift over it. In ten quickstarts at a574cf5 and 62f365f (2026-11-27) the file
        server's writeback pair deviated from its mean log ratio by 0.15 (rms) when its runs were
        adjacent, 0.19-0.25 with one or two runs between (early rounds; issue 53).

        E.g. members [n, c, a, b], leader a, partners b (the runner-up) then c: [n, c, a, b] or
        [n, b, a, c]."""
        if deciding is None:
            return members
        leader, partners = deciding
        others = [p for p in partners if p in members and p != leader]
        if leader not in members or not others:
            return members
        flip = rng.random() < 0.5
        left = [p for i, p in enumerate(others) if (i % 2 == 0) == flip]
        right = [p for i, p in enumerate(others) if (i % 2 == 0) != flip]
        stretch = [*reversed(left), leader, *right]
        # every unit before the stretch's first is outside it: `at` of them come first
        at = min(members.index(k) for k in stretch)
        rest = [m for m in members if m not in stretch]
        return [*rest[:at], *stretch, *rest[at:]]

    def next_round(self) -> list[Slot]:
        """The runs of the next round (or of the interrupted round of a resumed sweep); [] when
        finished."""
        for u in self.units.values():  # a retry that never ran: the disturbed value counts
            for rnd in list(u.pending):
                self._settle(u, rnd)
        self._refresh()
        racing = [u.key for u in self.units.values() if u.racing and self._ready(u)]
        active = racing or self._precision_round()
        round_no, todo = self._round_of(active, not racing)
        if racing and round_no > self.round:  # a new round of the race (not a resumed one)
            todo = todo + self._joining()
        self._active = set(active).union(todo)
        if not active:
            return []
        self.round = round_no
        # A resumed round's positions continue after the runs it already has.
        offset = sum(1 for u in self.units.values() if round_no in u.rounds)
        slots = [Slot(k, round_no, offset + i) for i, k in enumerate(self.order(round_no, todo))]
        self._next_position[round_no] = offset + len(slots)
        return slots

    def _precision_round(self) -> list[str]:
        """The race is over: the decided units run on toward ci_target, each round a new block; the
        pairs that decide an answer first (stats/deciding.py), every job's alike: a role's veto
        figures decide its answer as much as its first figure does (a veto needs the 95% interval
        of its ratio beyond the margin, and a vetoed pick is weighed over every figure:
        report/roles.py). Measured (issue 53, a quickstart at 5afaa9c): with the deciding job's
        pairs first, the data files' two cache=none cells stayed at their 3 race runs (p99 416,
        635 and 5,014 µs against writeback's 232-334: not shown beyond the margin on 3 runs) while
        the log's and the file server's pairs ran to round 8, and the database's answer waited on
        that veto."""
        self._stop_non_contenders()
        active = [k for k, u in self.units.items() if self._may_run(u)]
        deciding = [k for k in active if k in self.deciding_units()]
        return deciding or active

    def _may_run(self, u: UnitState) -> bool:
        return not u.done and self._ready(u)

    def _joining(self) -> list[str]:
        """Decided units of an unsettled deciding pair (stats/deciding.py) that join a new
        round of another group's race rather than wait for every race to end
        (tests/test_scheduler.py, issue 53). Their runs are precision runs: they take no part in the
        race."""
        deciding = self.deciding_units()
        return [
            k
            for k in deciding
            if self.units[k].decided is not None and self._may_run(self.units[k])
        ]

    def _round_of(self, active: list[str], precision: bool) -> tuple[int, list[str]]:
        """(the round the active units run next, the units that run in it): the interrupted round of
        a resumed sweep, for the units that have not run in it yet, else a new round for all."""
        if (
            not precision
            and self.round
            and any(self.round not in self.units[k].rounds for k in active)
            and any(self.round in u.rounds for u in self.units.values())
        ):
            # Resuming: finish the interrupted round, in its order, for the units that have not run
            # in it.
            return self.round, [k for k in active if self.round not in self.units[k].rounds]
        return self.round + 1, active

    def _ready(self, u: UnitState) -> bool:
        """Whether every unit `u` waits for (UnitState.after) is done."""
        return all(self.units[k].done for k in u.after if k in self.units)

    def give_up(self, key: str, reason: str) -> None:
        """The runner cannot run the unit at all (its rate has no bare-metal maximum to come from):
        it stops."""
        self.units[key].stopped = StopVerdict(StopKind.GAVE_UP, reason)

    def batches(
        self, slots: Sequence[Slot], cell_of: Mapping[str, str], max_batch: Mapping[str, int]
    ) -> list[list[Slot]]:
        """`slots` (of one round, or of consecutive rounds, in :meth:`order`'s order) regrouped into
        batches: the units of one cell together (at most `max_batch[cell]` a batch), the cells in
        the order their first slot comes in `slots`, inside a cell the rounds in turn and each
        round's units in `slots`' order; each slot keeps its round and is renumbered within it in
        the new order. A unit that does not batch (``cell_of[k] == k``) is a cell of its own, so a
        round without batching tiers runs exactly in :meth:`order`'s order. Reproducible, and a
        resumed round keeps its order, because :meth:`order` is.

        Why the order is :meth:`order`'s and not a draw of its own: a paired comparison subtracts
        two runs of one round, and :meth:`order` puts a group's runs (and its deciding pairs) next
        to each other so that the host's drift between them is small. Until 2026-11-28 this method
        shuffled the cells again, which for units that do not batch (bare metal, the block layer)
        undid that: a group's runs sat anywhere in the round (bench/power_curve.py's sweeps of
        2026-11-28, before the change)."""
        if not slots:
            return []
        rounds = sorted({s.round for s in slots})
        cells: list[str] = []
        wanted: dict[str, list[Slot]] = {}
        for slot in slots:
            cell = cell_of[slot.key]
            if cell not in wanted:
                cells.append(cell)
                wanted[cell] = []
            wanted[cell].append(slot)
        position = {r: min(s.position for s in slots if s.round == r) for r in rounds}
        out: list[list[Slot]] = []
        for cell in cells:
            # rounds in turn; inside a round, the order `slots` gives (sorted() is stable)
            ordered = sorted(wanted[cell], key=lambda sl: sl.round)
            size = max(1, max_batch.get(cell, 1))
            for i in range(0, len(ordered), size):
                batch = []
                for sl in ordered[i : i + size]:
                    batch.append(Slot(sl.key, sl.round, position[sl.round], sl.retry))
                    position[sl.round] += 1
                out.append(batch)
        return out

    def next_batches(
        self, cell_of: Mapping[str, str], max_batch: Mapping[str, int], rounds_per_batch: int = 1
    ) -> list[list[Slot]]:
        """The next round (see :meth:`next_round`) as batches (see :meth:`batches`); [] when
        finished.

        `rounds_per_batch` > 1 (in-boot repetition): the units that batch (``cell_of[k] != k``) also
        get the following rounds now, so one batch holds several repetitions of each; a unit gets no
        more runs than its maximum. Units that do not batch join those rounds at the next call (the
        round is then resumed), so every round stays a complete block. No extra rounds when
        resuming."""
        first = self.next_round()
        if not first or rounds_per_batch <= 1:
            return self.batches(first, cell_of, max_batch)
        slots = list(first)
        if {s.key for s in first} != self._active:  # a resumed round: finish it first
            return self.batches(slots, cell_of, max_batch)
        planned = {s.key: 1 for s in first}
        for _ in range(rounds_per_batch - 1):
            keys = [
                s.key
                for s in first
                if cell_of[s.key] != s.key
                and self.units[s.key].ok + planned[s.key] < self._max_of(self.units[s.key])
            ]
            if not keys:
                break
            self.round += 1
            extra = [Slot(k, self.round, i) for i, k in enumerate(self.order(self.round, keys))]
            self._next_position[self.round] = len(extra)
            slots += extra
            for k in keys:
                planned[k] += 1
        return self.batches(slots, cell_of, max_batch)

    def _max_of(self, u: UnitState) -> int:
        """Runs the unit may still reach: its precision_max once decided, else the plan's max."""
        return (
            u.precision_max
            if u.decided is not None and u.precision_max is not None
            else self.max_runs
        )

    def should_start(self, slot: Slot, ahead_s: float = 0.0) -> bool:
        """Re-checked before each run: a unit with a value does not start once its run would end
        past the budget (its minimum runs included), and a retry does not start then at all (the
        disturbed value counts). `ahead_s`: the expected seconds of the runs that start before it
        together (a batch sharing one guest boot is started whole)."""
        u = self.units[slot.key]
        expected = ahead_s + self.expected_run_s(u)
        if slot.retry and not self.budget_left(expected):
            self._settle(u, slot.round)
            return False
        if u.done:
            return False
        # A run would end past the budget: not started (at the unit's own pace, so that a sweep of
        # cheap and expensive runs ends close to its budget, not one long run after it). Measured:
        # quick-micro took 7.2 min against its 4.5-minute budget while the minimum runs were always
        # run (issue 70). A unit's first run always starts: without a value it answers nothing.
        if u.ok and not self.budget_left(expected):
            if u.decided is not None:
                self._precision_check(u, budget_spent=True)
            elif u.ok < self.min_runs:
                self._stop_short(u)
            else:
                u.stopped = BUDGET_SPENT
            return False
        return True

    def _may_retry(self, u: UnitState, slot: Slot) -> bool:
        return (
            not slot.retry
            and u.retries < self.max_retries
            and self.budget_left()
            and not self.host_busy()
        )

    def _settle(self, u: UnitState, round_no: int) -> None:
        """The disturbed run of `round_no` counts after all (its retry failed or never ran)."""
        value = u.pending.pop(round_no, None)
        figures = u.pending_figures.pop(round_no, {})
        if value is not None:
            u.ok += 1
            u.points.append((round_no, value))
            self._add_figures(u, round_no, figures)

    def record(
        self,
        slot: Slot,
        ok: bool,
        value: float | None,
        disturbed: bool = False,
        retry_worthy: bool | None = None,
        wall_s: float | None = None,
        load_reached: bool = True,
        figures: Mapping[str, float] | None = None,
    ) -> Slot | None:
        """Count one finished run. ``disturbed``: the run's interference verdict; ``retry_worthy``
        (default: ``disturbed``): whether the cause lies outside the measured process, so a retry
        can avoid it; ``wall_s``: how long the run took (for :meth:`should_start`'s budget check);
        ``load_reached`` False: an ok run that missed its offered load
        (``metrics.load_not_reached``), counted as a run but its value not (the reports leave it out
        too); ``figures``: the run's values of the unit's other role figures (UnitState.figures).
        Returns the retry to run at the end of this round, or None."""
        u = self.units[slot.key]
        if ok and not load_reached:
            u.unreached += 1
            # no value: neither racing nor the CI sees it, and it is not retried for its value
            value = None
        u.rounds.add(slot.round)
        self.session_runs += 1
        if wall_s is not None:
            u.wall_total_s += wall_s
            u.wall_runs += 1
        if not ok:
            u.failed += 1
            if slot.retry:
                self._settle(u, slot.round)
            return None
        self.judged += 1
        self.disturbed += int(disturbed)
        if slot.retry:
            self.retries_judged += 1
            self.retries_disturbed += int(disturbed)
        worthy = disturbed if retry_worthy is None else retry_worthy
        if disturbed and worthy and value is not None and self._may_retry(u, slot):
            u.pending[slot.round] = value
            u.pending_figures[slot.round] = dict(figures or {})
            u.retries += 1
            position = self._next_position.get(slot.round, slot.position + 1)
            self._next_position[slot.round] = position + 1
            return Slot(slot.key, slot.round, position, retry=True)
        # a retry's value replaces the disturbed one (clean or not: the latest)
        u.pending.pop(slot.round, None)
        u.pending_figures.pop(slot.round, None)
        u.ok += 1
        if value is not None:
            u.points.append((slot.round, value))
            self._add_figures(u, slot.round, figures or {})
        return None

    @staticmethod
    def _add_figures(u: UnitState, round_no: int, values: Mapping[str, float]) -> None:
        for metric, pts in u.figures.items():
            if (v := values.get(metric)) is not None:
                pts.append((round_no, v))

    # -- reporting ----------------------------------------------------------------
    def pending_estimate(self) -> int:
        """Runs still owed at least: the minimum of every unit, plus one for each unit still
        converging."""
        owed = sum(max(0, self.min_runs - u.ok) for u in self.units.values() if not u.done)
        extra = sum(1 for u in self.units.values() if not u.done and u.ok >= self.min_runs)
        return owed + extra

    def reasons(self) -> Mapping[str, str | None]:
        return {k: u.done_reason for k, u in self.units.items()}

    def verdicts(self) -> Mapping[str, StopVerdict | None]:
        """unit key → why it stopped (kind and sentence), None while it runs on."""
        return {k: u.stopped for k, u in self.units.items()}

    def new_stops(self) -> list[Stop]:
        """Units that stopped since the last call, each reported once."""
        out = []
        for k, u in self.units.items():
            if u.stopped is not None and k not in self._reported:
                self._reported.add(k)
                out.append(
                    Stop(
                        k,
                        u.stopped.kind,
                        u.stopped.reason,
                        max(u.rounds, default=None),
                        u.ok,
                        u.stopped.against,
                    )
                )
        return out
