"""The round loop of a sweep: the scheduler's rounds batch by batch, a disturbed run's retry at the
end of its round, every outcome told to the scheduler, the result and the user, and the session's
counts at its end."""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

from iomatrix.matrix import Unit
from iomatrix.metrics import load_not_reached
from iomatrix.plan.model import Plan
from iomatrix.scheduler import Scheduler, Slot
from iomatrix.stats.interference import RunInterference
from iomatrix.stop_kinds import StopKind
from iomatrix.sweep.progress import Progress, run_headline
from iomatrix.sweep.session import RunItem, Session, SweepResult
from iomatrix.tiers import declaration
from iomatrix.tiers.base import RunOutcome

# Reasons a unit stopped before its data settled anything.
# the stops a limit made, not the data
NOT_SETTLED = frozenset({StopKind.MAX_RUNS, StopKind.BUDGET})


class RoundLoop:
    """The sweep runner's loop over rounds (a part of `runner.SweepRunner`, which sets these
    attributes and has the scheduling (`sweep.units`) and batch (`sweep.batch`) sides it calls)."""

    plan: Plan
    progress: Progress
    stored_while_interrupted: int

    def _run_rounds(self, s: Session, result: SweepResult) -> None:
        """Every round the scheduler gives, batch by batch; a disturbed run's retry joins the end of
        its round."""
        while batches := s.sched.next_batches(s.cell_of, s.max_batch, self.rounds_per_boot.rounds):
            self._record_stops(s.sched, s.units)
            self.progress.grow(s.index + s.sched.pending_estimate())
            queue = deque(batches)
            while queue:
                todo = self._startable(s.sched, queue.popleft())
                if not todo:
                    continue
                retries = self._run_slots(s, todo, result)
                # The retries of one shared boot share the next boot too (a tier that starts once
                # per run gets them one by one): a boot per disturbed run cost more than the runs.
                if retries and s.cell_of[retries[0].key] != retries[0].key:
                    queue.append(retries)
                else:
                    queue.extend([r] for r in retries)
                if retries:
                    self.progress.grow(s.index + len(queue) + s.sched.pending_estimate())
            self._adapt_rounds_per_boot(s.units, s.cell_of, s.max_batch)
        self._record_stops(s.sched, s.units)

    @staticmethod
    def _startable(sched: Scheduler, batch: list[Slot]) -> list[Slot]:
        """The slots of one batch the budget holds, each judged with the runs accepted before it:
        a batch (one guest boot) runs whole once started, so its last run must end within the
        budget too."""
        todo: list[Slot] = []
        ahead = 0.0
        for slot in batch:
            if sched.should_start(slot, ahead):
                todo.append(slot)
                ahead += sched.expected_run_s(sched.units[slot.key])
        return todo

    def _run_slots(self, s: Session, todo: list[Slot], result: SweepResult) -> list[Slot]:
        """Run one batch of slots and count its outcomes; the retries of its disturbed runs."""
        items = []
        for slot in todo:
            unit, cell_id = s.units[slot.key]
            offered: dict[str, Any] | None = None
            # its rate, from the bare-metal runs done before it
            if unit.workload.rate_of_max is not None:
                resolved = self._resolve_rate(s, unit)
                if resolved is None:
                    s.sched.give_up(
                        slot.key,
                        f"no bare-metal maximum of {unit.workload.rate_of_max.reference} to "
                        "set its rate from (no bare-metal run of it succeeded)",
                    )
                    continue
                unit = Unit(unit.cell, dataclasses.replace(unit.workload, rate_iops=resolved.iops))
                offered = resolved.meta()
            st = s.sched.units[slot.key]
            s.index += 1
            self.progress.run_started(
                s.index,
                unit,
                st.ok + st.failed + 1,
                s.cells_order[unit.cell] + 1,
                len(s.cells_order),
            )
            items.append(
                RunItem(
                    unit,
                    cell_id,
                    slot,
                    s.last_run.get((slot.key, slot.round)) if slot.retry else None,
                    offered,
                )
            )
        if not items:
            return []
        retries: list[Slot] = []
        for item, (outcome, run_id, flags) in zip(
            items, self._run_batch(s.sweep_id, items), strict=True
        ):
            s.last_run[(item.slot.key, item.slot.round)] = run_id
            retry = self._count(s.sched, item, outcome, flags, result)
            if retry is not None:
                retries.append(retry)
        return retries

    def _count(
        self,
        sched: Scheduler,
        item: RunItem,
        outcome: RunOutcome,
        flags: RunInterference | None,
        result: SweepResult,
    ) -> Slot | None:
        """Tell the scheduler, the result and the user how a run went; its retry, if it gets one."""
        unit = item.unit
        value = outcome.metrics.get(unit.workload.primary_metric) if outcome.ok else None
        disturbed = flags is not None and flags.disturbed
        unreached = outcome.ok and load_not_reached(outcome.metrics)
        retry = sched.record(
            item.slot,
            outcome.ok,
            value,
            disturbed,
            retry_worthy=flags is not None and flags.retry_worthy and self._retries_disturbed(unit),
            wall_s=outcome.phases.get("wall_s"),
            load_reached=not unreached,
            # a role's other figures on this job: its trade-off is weighed over them all
            figures={
                m: v
                for m in sched.units[item.slot.key].figures
                if outcome.ok and (v := outcome.metrics.get(m)) is not None
            },
        )
        if outcome.ok:
            result.disturbed += int(disturbed)
            for cause in flags.causes if disturbed and flags is not None else ():
                result.disturbed_by[cause] = result.disturbed_by.get(cause, 0) + 1
            result.load_not_reached += int(unreached)
        else:
            result.runs_failed += 1
        summary = run_headline(unit, outcome)
        if disturbed and flags is not None:
            summary += f" — disturbed: {'; '.join(flags.reasons)}" + (
                ", retried at the end of the round" if retry is not None else ""
            )
        self.progress.run_finished(unit, outcome, summary)
        result.retried += retry is not None
        return retry

    def _retries_disturbed(self, unit: Unit) -> bool:
        """Whether a disturbed run of `unit` is started again. A fixed-trial tier (durability)
        counts trials, not speed: a busy host changes no verdict; a tier that loads the host itself
        (consolidation) would only disturb its own retry."""
        tc = declaration(unit.cell.tier)
        return self.plan.retry_disturbed and not (tc.fixed_trials or tc.loads_host)

    def _conclude(self, s: Session, result: SweepResult) -> None:
        """The session's counts and the units that stopped without an answer."""
        # Ok runs that count: a disturbed run its retry replaced is not one (its retry is).
        result.runs_done = (
            sum(u.ok + len(u.pending) for u in s.sched.units.values())
            - s.already
            + self.stored_while_interrupted
        )
        result.budget_s = s.sched.budget_s
        result.setup_s = s.setup_s
        result.elapsed_s = s.sched.elapsed_s()
        short = set(s.sched.short_of_minimum())
        for key in short:
            unit = s.units[key][0]
            result.short_of_minimum.append((key, unit.cell.label(), s.sched.units[key].ok))
        for key, verdict in s.sched.verdicts().items():
            if verdict is None or key in short:
                continue
            if verdict.kind is StopKind.GAVE_UP:
                result.gave_up.append((key, verdict.reason))
            elif verdict.kind is StopKind.LOAD_NOT_REACHED:
                result.unreached_units.append((key, verdict.reason))
            elif (
                verdict.kind in NOT_SETTLED
                and not declaration(s.units[key][0].cell.tier).fixed_trials
            ):
                # Stopped by a limit, not by the data: racing's eliminations, race ends and
                # baselines are answers, and "converged" is one too.
                result.not_converged.append((key, verdict.reason))
