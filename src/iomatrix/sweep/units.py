"""The units of a sweep as the scheduler sees them: their state so far (a resumed sweep's runs
count), which units race each other and which they are quoted against, the offered load of a
rate-of-maximum workload, the stopping policy, and the rounds per boot chosen as the runs come in.
The pure scheduling is `scheduler.py`'s; this is the glue between it, the expansion and the
store."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from iomatrix import rates
from iomatrix.backing.network import CONDITION_AXES, answers_per_backing
from iomatrix.backing.provision import BackingHandle
from iomatrix.domain import BASELINES, axes, is_ceiling
from iomatrix.matrix import NA, Cell, Expansion, Unit
from iomatrix.metrics import load_not_reached
from iomatrix.plan.model import MAX_REPETITIONS_PER_BOOT, Plan
from iomatrix.roles import decided_at, plan_margins, plan_roles
from iomatrix.scheduler import (
    CiWidthPolicy,
    RacingPolicy,
    RoleFigures,
    Scheduler,
    StopPolicy,
    UnitState,
)
from iomatrix.stats.runs_per_boot import RoundsPerBoot, choose_rounds_per_boot
from iomatrix.store import Store
from iomatrix.sweep.boots import BootLedger
from iomatrix.sweep.progress import Progress
from iomatrix.sweep.session import Session
from iomatrix.sweep.start import StartTogether
from iomatrix.tiers import is_reference
from iomatrix.tiers.base import Tier


class UnitScheduling:
    """The sweep runner's scheduling side (a part of `runner.SweepRunner`, which sets these
    attributes)."""

    plan: Plan
    store: Store
    progress: Progress
    expansion: Expansion
    tiers: dict[str, Tier]
    handles: dict[str, BackingHandle]
    design_seed: int
    clock: Callable[[], float]
    budget_elapsed_s: Callable[[], float]
    boots: BootLedger
    rates: dict[tuple[str, str], rates.ResolvedRate]
    rounds_per_boot: RoundsPerBoot
    started_together: StartTogether | None

    def _unit_states(
        self, sweep_id: int, other_figures: dict[str, list[str]], compared: bool
    ) -> tuple[dict[str, tuple[Unit, int]], list[UnitState]]:
        """Every unit with its cell id, and its scheduling state so far (a resumed sweep's runs
        count); `other_figures`: unit key → its role figures other than its primary
        (`_role_figures`)."""
        counts = self.store.run_counts(sweep_id)
        rounds = self.store.run_rounds(sweep_id)
        unreached = self._unreached_rounds(sweep_id)
        units: dict[str, tuple[Unit, int]] = {}
        states: list[UnitState] = []
        twins = compared_with(self.expansion.units)
        for unit in self.expansion.units:
            backing_meta = (
                {} if unit.cell.is_null_ceiling else dict(self.handles[unit.cell.backing].metadata)
            )
            cid = self.store.cell_id(sweep_id, unit.cell.key, dict(unit.cell), backing_meta)
            ok, bad = counts.get((cid, unit.workload.name), (0, 0))
            units[unit.key] = (unit, cid)
            missed = unreached.get((cid, unit.workload.name), set())
            states.append(
                UnitState(
                    key=unit.key,
                    group=race_group(unit, self._per_backing),
                    unreached=len(missed),
                    after=self._rate_reference_units(unit),
                    points=[
                        p
                        for p in self.store.metric_points(
                            cid, unit.workload.name, unit.workload.primary_metric
                        )
                        if p[0] not in missed
                    ],
                    rounds=rounds.get((cid, unit.workload.name), set()),
                    ok=ok,
                    failed=bad,
                    baseline=is_baseline(unit, compared),
                    # the comparison the user came for: never eliminated
                    current=unit.cell in self.expansion.current,
                    precision_max=self.plan.repetitions.precision_max.get(unit.cell.tier),
                    compared_with=twins.get(unit.key, ()),
                    figures={
                        m: [
                            p
                            for p in self.store.metric_points(cid, unit.workload.name, m)
                            if p[0] not in missed
                        ]
                        for m in other_figures.get(unit.key, ())
                    },
                )
            )
        return units, states

    def _role_figures(self, compared: bool) -> tuple[list[RoleFigures], dict[str, list[str]]]:
        """The plan's roles as the scheduler weighs their trade-offs (scheduler.RoleFigures), one
        per tier (and backing, condition) their deciding job races in, and unit key → the metrics
        of its role figures other than its primary (recorded with every run)."""
        roles = plan_roles(self.plan.roles or [], self.plan.role or {}, self.plan.margin)
        by_context: dict[tuple[str, str], dict[str, str]] = {}  # (context, workload) → cell → unit
        for u in self.expansion.units:
            if is_baseline(u, compared):
                continue
            group = race_group(u, self._per_backing).split("::")
            context = "::".join(group[:1] + group[2:])
            by_context.setdefault((context, u.workload.name), {})[u.cell.key] = u.key
        out: list[RoleFigures] = []
        others: dict[str, list[str]] = {}
        contexts = sorted({c for c, _ in by_context})
        for role in roles:
            for context in contexts:
                per = [by_context.get((context, role.workload_of(f.job)), {}) for f in role.figures]
                if not per[0] or not all(per):
                    continue
                primary = tuple(
                    self._primary_of(role.workload_of(f.job)) == f.metric for f in role.figures
                )
                out.append(
                    RoleFigures(
                        tuple(
                            (units, f.metric, f.higher_is_better, f.weight)
                            for units, f in zip(per, role.figures, strict=True)
                        ),
                        primary,
                        role.margin,
                    )
                )
                for units, f, is_primary in zip(per, role.figures, primary, strict=True):
                    for key in units.values():
                        if not is_primary and f.metric not in others.setdefault(key, []):
                            others[key].append(f.metric)
        return out, others

    def _primary_of(self, workload: str) -> str:
        return next(
            u.workload.primary_metric for u in self.expansion.units if u.workload.name == workload
        )

    def _rate_reference_cells(self, unit: Unit) -> list[Unit]:
        """The bare-metal units whose IOPS set the rate of `unit` (a rate-of-maximum workload; []
        otherwise): its reference workload on the same backing (none there — the null ceiling, bare
        metal pruned: every backing's)."""
        rate = unit.workload.rate_of_max
        if rate is None:
            return []
        refs = [
            u
            for u in self.expansion.units
            if u.workload.name == rate.reference and is_reference(u.cell.tier)
        ]
        same = [u for u in refs if u.cell.backing == unit.cell.backing]
        return same or refs

    def _rate_reference_units(self, unit: Unit) -> frozenset[str]:
        return frozenset(u.key for u in self._rate_reference_cells(unit))

    def _resolve_rate(self, s: Session, unit: Unit) -> rates.ResolvedRate | None:
        """The offered load of a rate-of-maximum unit from the stored bare-metal runs (rates.py);
        the same for every cell of its backing, and recomputed alike when a sweep resumes."""
        key = (unit.workload.name, unit.cell.backing)
        if key not in self.rates:
            cell_ids = {u.key: cid for u, cid in s.units.values()}
            ref_cells = {cell_ids[u.key]: u.cell.key for u in self._rate_reference_cells(unit)}
            mine = {
                cid
                for u, cid in s.units.values()
                if u.workload.name == unit.workload.name and u.cell.backing == unit.cell.backing
            }
            stored = self.store.runs(s.sweep_id)
            iops = self.store.run_metric_values(
                [r.run_id for r in stored if r.cell_id in ref_cells], "total.iops"
            )
            assert unit.workload.rate_of_max is not None
            resolved = rates.resolve_rate(
                unit.workload.rate_of_max,
                rates.reference_runs(
                    stored,
                    iops,
                    ref_cells,
                    unit.workload.rate_of_max.reference,
                    mine,
                    unit.workload.name,
                ),
            )
            if resolved is None:
                return None
            self.rates[key] = resolved
            self.progress.message(
                f"{unit.workload.name} on {unit.cell.backing}: {resolved.iops} IOPS offered = "
                f"{resolved.fraction:.0%} of {resolved.maximum_iops:,.0f} IOPS, the bare-metal "
                f"maximum of {resolved.reference} ({resolved.maximum_cell}, runs "
                f"{', '.join(map(str, resolved.runs))})"
            )
        return self.rates[key]

    def _unreached_rounds(self, sweep_id: int) -> dict[tuple[int, str], set[int]]:
        """(cell id, workload) → the rounds of its stored runs that missed their offered load (one
        counted ok run per round: a replaced run is not one), so a resumed sweep's racing leaves
        them out as the reports do."""
        kept = [
            r
            for r in self.store.runs(sweep_id)
            if r.status == "ok" and not r.replaced and r.round is not None
        ]
        reached = self.store.run_metric_values([r.run_id for r in kept], "load.reached")
        out: dict[tuple[int, str], set[int]] = {}
        for r in kept:
            if r.run_id in reached and load_not_reached({"load.reached": reached[r.run_id]}):
                out.setdefault((r.cell_id, r.workload), set()).add(int(r.round))  # type: ignore[arg-type]
        return out

    @property
    def _per_backing(self) -> bool:
        """Whether the sweep's answers (and so its races) are per backing: shared storage."""
        return answers_per_backing(b.type for b in self.plan.backing)

    def _policy(self) -> StopPolicy:
        reps = self.plan.repetitions
        if self.plan.repetition_policy == "ci-width":
            return CiWidthPolicy(self.plan.ci_target, reps.min, reps.max)
        direction = {
            race_group(u, self._per_backing): u.workload.higher_is_better
            for u in self.expansion.units
        }
        # Each race ties and stops cells at its decision's threshold and margin (a role job's are
        # its role's margin; roles.decided_at).
        default, margins = plan_margins(
            {"margin": self.plan.margin, "roles": self.plan.roles, "role": self.plan.role}
        )
        levels = {
            race_group(u, self._per_backing): decided_at(
                u.workload.name, margins, default, self.plan.threshold
            )
            for u in self.expansion.units
        }
        return RacingPolicy(
            self.plan.threshold,
            reps.min,
            higher_is_better=direction.__getitem__,
            margin_of={g: margin for g, (_, margin) in levels.items()},
            threshold_of={g: theta for g, (theta, _) in levels.items()},
        )

    def _adapt_rounds_per_boot(
        self, units: dict[str, tuple[Unit, int]], cell_of: dict[str, str], max_batch: dict[str, int]
    ) -> None:
        """`repetitions_per_boot = "auto"`: after each batch round, choose the rounds the next boots
        hold from the runs so far (stats/runs_per_boot.py); one value for the sweep keeps the rounds
        aligned."""
        if not self.plan.adaptive_rounds_per_boot:
            return
        members: dict[str, int] = {}
        for key, cell in cell_of.items():
            if cell != key:
                members[cell] = members.get(cell, 0) + 1
        if not members:
            return
        fits = max(max(1, max_batch.get(cell, 1) // n) for cell, n in members.items())
        cap = min(MAX_REPETITIONS_PER_BOOT, self.plan.repetitions.max, fits)
        choice = choose_rounds_per_boot(
            self.boots.runs,
            self.boots.boot_cost_s(),
            self.boots.round_cost_s(),
            self.rounds_per_boot.rounds,
            cap,
        )
        if choice.reason != self.rounds_per_boot.reason:
            self.progress.message(f"guest boots: {choice.reason}")
        self.rounds_per_boot = choice

    def _record_stops(self, sched: Scheduler, units: dict[str, tuple[Unit, int]]) -> None:
        for st in sched.new_stops():
            unit, cell_id = units[st.key]
            # an elimination's reference by its cell's key (unique in the sweep, kept by a merge)
            against = units[st.against][0].cell.key if st.against in units else None
            self.store.record_unit_stop(
                cell_id=cell_id,
                workload=unit.workload.name,
                kind=st.kind,
                reason=st.reason,
                round_no=st.round,
                ok_runs=st.ok_runs,
                against=against,
            )

    def _session_states(
        self, sweep_id: int
    ) -> tuple[list[RoleFigures], dict[str, tuple[Unit, int]], list[UnitState]]:
        """What a session's scheduler starts from: the roles' trade-off figures, every unit with its
        cell id, and the units' state so far (`_unit_states`; a resumed sweep's runs count)."""
        # Bare metal is a baseline (its minimum only) when the sweep measures another tier against
        # it; in a bare-metal-only sweep it is what is being compared, and races like any tier.
        compared = any(not is_reference(u.cell.tier) for u in self.expansion.units)
        roles, other_figures = self._role_figures(compared)
        units, states = self._unit_states(sweep_id, other_figures, compared)
        return roles, units, states

    def _waited_s(self) -> float:
        """Seconds this session waited for --start-at's common start time (0 without it)."""
        return self.started_together.waited_s if self.started_together is not None else 0.0

    def _start_session(self, sweep_id: int, t_session: float) -> Session:
        """The scheduler of this session, from the units' state so far (a resumed sweep's runs
        count)."""
        roles, units, states = self._session_states(sweep_id)
        reps = self.plan.repetitions
        sched = Scheduler(
            states,
            min_runs=reps.min,
            max_runs=reps.max,
            budget_s=self.plan.time_budget_s,
            policy=self._policy(),
            ci_target=self.plan.ci_target,
            precision_for=reps.precision_for,
            roles=roles,
            seed=self.design_seed,
            clock=self.clock,
            # Wall clock of this session (its set-up included: provisioning backings, opening tiers)
            # plus the run time of earlier sessions of a resumed sweep; not the wait for
            # --start-at's common start, which the fleet chose (its minimum runs would pay for it).
            prior_elapsed_s=self.store.sweep_elapsed(sweep_id)
            + max(0.0, self.clock() - t_session - self._waited_s()),
        )
        # each run's timeout keeps to the budget left (run_timeout.py)
        self.budget_elapsed_s = sched.elapsed_s
        # The set-up is inside the budget, and said so before the first run (issue 70: a budget is
        # a wall-clock limit the user plans by).
        setup_s = max(0.0, self.clock() - t_session - self._waited_s())
        left = max(0.0, sched.budget_s - sched.elapsed_s())
        self.progress.message(
            f"set up in {setup_s:.0f} s, inside the {self.plan.time_budget} time budget: "
            f"{left / 60:.1f} min left for the runs"
        )
        # Every ok run stored counts as kept and done, a disturbed one its retry replaced included.
        stored = sum(ok for ok, _ in self.store.run_counts(sweep_id, replaced_too=True).values())
        session = Session(
            sweep_id,
            sched,
            units,
            # Units of a tier that shares start-ups (guest boots) are batched per cell; others
            # alone.
            cell_of={
                k: (u.cell.key if self.tiers[u.cell.tier].batches_runs else k)
                for k, (u, _) in units.items()
            },
            max_batch={
                u.cell.key: self.tiers[u.cell.tier].max_batch(u.cell) for u, _ in units.values()
            },
            cells_order={
                c: i for i, c in enumerate(dict.fromkeys(u.cell for u in self.expansion.units))
            },
            already=sum(s.ok for s in states),
            index=stored,
            setup_s=setup_s,
        )
        self.progress.cells([u.cell.label() for u in self.expansion.units])
        self.progress.start(max(stored, len(states) * reps.min), stored)
        return session


def compared_with(units: Sequence[Unit]) -> dict[str, tuple[str, ...]]:
    """unit key → the units the reports quote it against: its twins at each tool default's cache and
    aio (QEMU's, libvirt's; ``domain.BASELINES``, as report/recommend.py matches them:
    axes.baseline_values) in the same tier and workload, the other axes equal; where neither was
    measured, its twin with the later axes at their defaults (axes.later_at_default). The scheduler
    runs those on for precision with a contender (precision_for = "contenders")."""
    by_cell = {(u.cell, u.workload.name): u.key for u in units}
    out: dict[str, tuple[str, ...]] = {}
    for u in units:
        if u.cell.is_null_ceiling or NA in (u.cell["cache"], u.cell["aio"]):
            continue
        twins = []
        for b in BASELINES:
            twin = by_cell.get((Cell(axes.baseline_values(u.cell, b)), u.workload.name))
            if twin is not None and twin != u.key and twin not in twins:
                twins.append(twin)
        # No twin at QEMU's default cache and aio (a workload table's one cell): its own axes at
        # QEMU's defaults.
        own = by_cell.get((Cell({**u.cell, **axes.later_at_default(u.cell)}), u.workload.name))
        if not twins and own is not None and own != u.key:
            twins.append(own)
        if twins:
            out[u.key] = tuple(twins)
    return out


def is_baseline(unit: Unit, compared: bool) -> bool:
    """A unit kept at its minimum runs, never raced: bare metal when the sweep measures another tier
    against it (``compared``), and a ceiling (null-co, a null iSCSI LUN), which stores nothing and
    so is never an answer."""
    return (compared and is_reference(unit.cell.tier)) or is_ceiling(dict(unit.cell))


def race_group(unit: Unit, per_backing: bool = False) -> str:
    """Units that race each other: one workload within one tier (tiers measure different things);
    with ``per_backing`` (shared storage: `answers_per_backing`) within one backing too, and always
    within one value of each condition axis (an emulated RTT, a number of clients). These are the
    groups the answers are decided in (report/per_backing.py): a race across them stopped an NFS
    cell as "significantly worse" than an iSCSI null LUN's, and its answer, among NFS cells only,
    then lacked the runs to settle."""
    values = dict(unit.cell)
    parts = [unit.cell.tier, unit.workload.name]
    if per_backing:
        parts.append(unit.cell.backing)
    parts += [f"{a}={values[a]}" for a in CONDITION_AXES if values.get(a, NA) != NA]
    return "::".join(parts)
