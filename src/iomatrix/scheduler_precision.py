"""The scheduler's precision after the decision: whether a unit the stopping policy (or max) is
done with stops, or runs on toward ``ci_target`` as *decided*; when a decided unit stops; and which
units run on for precision once the race is over (all, or the contenders and what they are
compared with). The policy itself is scheduler.py's module docstring ("Precision after the
decision", "Precision for the contenders only").

Split from ``scheduler.py`` (whose ``Scheduler`` derives from :class:`PrecisionKeeping`, itself a
``scheduler_budget.BudgetKeeping``) along the seam between *how precise a unit's figures must be*
and *which unit runs next*, so that each stays small enough to change safely (issue 68)."""

from __future__ import annotations

from iomatrix.scheduler_budget import BudgetKeeping
from iomatrix.stats import needs_more_runs
from iomatrix.stop_kinds import StopKind
from iomatrix.stop_policy import StopVerdict, UnitState


class PrecisionKeeping(BudgetKeeping):
    """The precision part of ``scheduler.Scheduler``: reads the attributes its ``__init__`` sets
    (declared here for the type checker) and its deciding units, and sets only a unit's
    ``decided`` and ``stopped``."""

    ci_target: float | None
    precision_for: str

    def deciding_units(self) -> set[str]:
        """The units of the unsettled deciding pairs: ``scheduler.Scheduler``'s (stats/deciding.py
        over the race's data), which this part only reads."""
        raise NotImplementedError

    def _ci_gap(self, u: UnitState) -> str | None:
        """None when the unit's 95% CI half-width is within ci_target (or it has no precision_max);
        else what it is now, e.g. 'CI ±7.2% > target 5%'."""
        if u.precision_max is None or self.ci_target is None:
            return None
        # max beyond the runs so far: only "converged" or the CI's width can come back.
        more, why = needs_more_runs(u.values, 1, len(u.values) + 1, self.ci_target)
        return why if more else None

    def _unresolved_contender(self, why: StopVerdict | None) -> bool:
        """Under precision_for = "contenders", a unit the race could not separate from the best (or
        the best that could not be separated from the rest) runs on while the budget and its
        precision_max allow, whatever its own CI: what the answer lacks is the CI of their ratio,
        which only more (paired) rounds narrow. Measured: `quick` ended 55 s before its budget with
        two workloads "about 2-3 more rounds would separate them"."""
        return (
            self.precision_for == "contenders"
            and why is not None
            and why.kind is StopKind.UNRESOLVED
        )

    def _deciding_now(self, u: UnitState) -> bool:
        """`u` is in an unsettled deciding pair: it runs on (while its precision_max and the budget
        allow) whatever its own CI, as the pair's interval narrows only with more paired rounds."""
        return u.key in self.deciding_units()

    def _stop(self, u: UnitState, why: StopVerdict) -> None:
        """The policy (or max) is done with `u`: stop it, or let it run on toward ci_target
        (decided)."""
        if (
            u.precision_max is not None
            and u.ok < u.precision_max
            and self.budget_left()
            and (
                self._ci_gap(u) is not None
                or self._unresolved_contender(why)
                or self._deciding_now(u)
            )
        ):
            u.decided = why
        else:
            u.stopped = why

    def _precision_check(self, u: UnitState, budget_spent: bool = False) -> None:
        """A decided unit stops once its CI is within ci_target, at its precision_max, or when the
        budget is spent; its reason keeps the policy's (and so its kind) and says what the extra
        runs reached."""
        assert u.decided is not None and u.precision_max is not None and self.ci_target is not None
        gap = self._ci_gap(u)
        target = f"±{self.ci_target * 100:g}%"
        unresolved = self._unresolved_contender(u.decided) or self._deciding_now(u)
        # an unresolved contender may run on with its CI already within it
        width = gap or f"CI within {target}"
        # No futility stop here (unlike racing's): on a host with heavy-tailed noise the spread of a
        # few runs says little about how many more are needed (measured: cells given up at 6 runs as
        # "needing 34–112" reached ±5% within 22 runs in another sweep), and the runs would
        # otherwise go unused.
        if gap is None and not unresolved:
            then = f"CI within {target} after {u.ok} runs"
        elif u.ok >= u.precision_max:
            then = f"{width} at {u.ok} runs (precision_max)"
        elif not budget_spent and self.budget_left():
            return
        # the budget ended the race: it would not have run on anyway
        elif u.key not in self.precision_units():
            u.stopped = self._not_run_on(u)
            return
        else:
            then = f"{width} at {u.ok} runs (time budget spent)"
        u.stopped = u.decided.then(f"then run on toward {target}: {then}")

    def _not_run_on(self, u: UnitState) -> StopVerdict:
        """A decided unit's stop when it gets no precision runs (not a contender): its decision, and
        its CI."""
        assert u.decided is not None and self.ci_target is not None
        width = (self._ci_gap(u) or "CI within target").split(" > ", 1)[0]  # "CI ±9.1%"
        return u.decided.then(
            f"not run on toward ±{self.ci_target * 100:g}%: not a contender, {width}"
        )

    def precision_units(self) -> set[str]:
        """The units that run on for precision once the race is over: every decided unit, or under
        precision_for = "contenders" the contenders, the units a contender is compared with and the
        user's current configuration (`run --current`: the headline quotes the answer against
        it)."""
        if self.precision_for == "all":
            return set(self.units)
        # While the race is on, a racing unit may still turn out a contender: its comparison stays
        # wanted.
        wanted = {u.key for u in self.units.values() if u.contends or u.racing or u.current}
        wanted |= self.deciding_units()
        for key in list(wanted):
            wanted.update(k for k in self.units[key].compared_with if k in self.units)
        return wanted

    def _stop_non_contenders(self) -> None:
        """The race is over: decided units that are not wanted for precision stop with their
        decision, saying that they were not run on and how wide their CI is."""
        wanted = self.precision_units()
        for u in self.units.values():
            if u.decided is not None and not u.done and u.key not in wanted:
                u.stopped = self._not_run_on(u)
