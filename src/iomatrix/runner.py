"""Run a plan: provision backings, interleave repetitions across cells, sample
the host, and commit every finished run to the store at once.

What runs next is decided by the pure scheduler (`scheduler.py`: randomised complete blocks, stopping
policy, budget, giving up); this module does the I/O around each run: backings, tiers, the host sampler,
the store. Tiers come from the registry (`iomatrix.tiers`), so a new tier needs no change here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from iomatrix import qemu_caps, rates, storage_clients
from iomatrix import workloads as wl
from iomatrix.backing.provision import BackingHandle, provision
from iomatrix.domain import BASELINES, axes
from iomatrix.errors import UserError
from iomatrix.fio.jobs import JobShape, page_cache_method
from iomatrix.hygiene import CacheState, modifier_notes, modifier_wrapper, prepare_cache
from iomatrix.matrix import NA, BackingFacts, Cell, Expansion, Unit, expand
from iomatrix.metadata import host_metadata
from iomatrix.metrics import io_cost_metrics, load_not_reached, offered_load_metrics
from iomatrix.monitor.devices import resolve_device_chain
from iomatrix.monitor.sampler import HostSampler, MonitorSample
from iomatrix.monitor.summary import field_total, summarize_samples
from iomatrix.plan.model import Plan
from iomatrix.run_timeout import plan_run_timeout_s
from iomatrix.scheduler import CiWidthPolicy, RacingPolicy, Scheduler, Slot, StopPolicy, UnitState
from iomatrix.stats.interference import RunInterference, interference_flags, interference_scores
from iomatrix.stats.runs_per_boot import RoundsPerBoot, choose_rounds_per_boot
from iomatrix.stop_kinds import StopKind
from iomatrix.store import RunRecord, Store
from iomatrix.tiers import declaration, is_reference, reference_tier, tier_class
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, RunsInterrupted, Target, Tier

__all__ = ["RunOptions", "SweepResult", "SweepRunner"]


@dataclass
class SweepResult:
    sweep_id: int
    runs_done: int  # ok runs this session that the analysis uses (a run its clean retry replaced is not one)
    runs_failed: int
    not_converged: list[tuple[str, str]]  # (unit key, reason)
    gave_up: list[tuple[str, str]]
    accel: dict[str, str]
    resumed: bool
    interrupted: bool = False
    disturbed: int = 0  # ok runs the host disturbed (flagged in the store)
    retried: int = 0  # …of which were started again
    load_not_reached: int = 0  # ok runs that missed their offered load: not counted by racing nor ranked
    # Units stopped because most of their runs missed the offered load: (unit key, reason)
    unreached_units: list[tuple[str, str]] = field(default_factory=list)


def backing_facts(plan: Plan, allowed: set[Path]) -> dict[str, BackingFacts]:
    return {b.label(): storage_clients.backing_facts(b, allowed) for b in plan.backing}  # protocol, kernel client


def resolve_workloads(plan: Plan, base_dir: Path | None) -> list[wl.Workload]:
    """The plan's workloads; a rate set from the bare-metal maximum needs bare metal and its reference workload."""
    out = [wl.resolve(name, base_dir) for name in plan.workloads]
    rates.check_plan(out, [t for t in plan.tier if is_reference(t)], reference_tier().name)
    return out


def plan_expansion(plan: Plan, base_dir: Path | None, allowed: set[Path]) -> Expansion:
    own = {t: [wl.resolve(name, base_dir) for name in names] for t, names in plan.tier_workloads().items()}
    return expand(plan, backing_facts(plan, allowed), resolve_workloads(plan, base_dir), qemu_caps.facts_for(plan),
                  tier_workloads=own)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM gets the same orderly teardown as Ctrl-C."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class HostMonitor(Protocol):
    """What the runner needs of a host sampler (monitor/sampler.py's HostSampler; a test's scripted host)."""

    def attach_pid(self, pid: int, role: str = "io") -> None: ...
    def followed_processes(self) -> list[dict[str, object]]: ...
    def start(self) -> None: ...
    def stop(self) -> list[MonitorSample]: ...


# (devices to sample, interval in seconds) → a sampler; raises ValueError for a device it cannot sample.
SamplerFactory = Callable[[list[str], float], HostMonitor]


class Progress:
    """What the runner tells the user; the CLI gives a rich implementation."""

    def start(self, total_estimate: int, resumed_runs: int) -> None: ...
    def run_started(self, index: int, unit: Unit, attempt: int, cell_no: int, cell_count: int) -> None: ...
    def run_finished(self, unit: Unit, outcome: RunOutcome, summary: str) -> None: ...
    def grow(self, total_estimate: int) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


def _headline(unit: Unit, outcome: RunOutcome) -> str:
    if not outcome.ok:
        return f"FAILED: {outcome.error}"
    m = unit.workload.primary_metric
    v = outcome.metrics.get(m)
    shown = "?" if v is None else f"{v:,.1f}"
    line = f"{m}={shown} (wall {outcome.phases.get('wall_s', 0):.1f} s)"
    if load_not_reached(outcome.metrics):
        line += (f", offered load not reached ({outcome.metrics.get('load.achieved_frac', 0):.0%} of "
                 f"{outcome.metrics.get('load.target_iops', 0):,.0f} IOPS): not counted")
    return line


class SweepRunner:
    def __init__(self, plan: Plan, base_dir: Path | None, store: Store, options: RunOptions,
                 progress: Progress | None = None,
                 tier_factory: Callable[[str, Plan, RunOptions], Tier] | None = None,
                 sampler_factory: SamplerFactory = HostSampler,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`sampler_factory` and `clock` (the time budget's and the boot costs' monotonic clock) are the host
        a test scripts; `tier_factory` makes the tiers (default: the registered tier's class)."""
        self.plan = plan
        self.store = store
        self.opts = options
        self.progress = progress or Progress()
        self.expansion = plan_expansion(plan, base_dir, options.allowed_devices)
        if not self.expansion.units:
            first = self.expansion.pruned[0].reason if self.expansion.pruned else "the plan expands to no cell"
            raise UserError(f"nothing to run: every cell of plan '{plan.name}' was pruned ({first})",
                            hint=f"see 'iomatrix plan {plan.name} --explain'")
        for tier_name in plan.tier:  # host checks a tier can make before anything is created (e.g. memory)
            tier_class(tier_name).preflight(plan)
        self.tier_factory = tier_factory or default_tier_factory
        self.sampler_factory = sampler_factory
        self.clock = clock
        self.tiers: dict[str, Tier] = {}
        self.handles: dict[str, BackingHandle] = {}
        self.devices: dict[str, list[str]] = {}
        self.design_seed = int(plan.fingerprint(), 16)  # the scheduler's round orders; a resumed sweep keeps its own
        # Interference scores of this session's judged runs: each run is flagged relative to them.
        self.host_baseline: list[dict[str, float]] = []
        self.stored_while_interrupted = 0  # ok runs of an interrupted shared boot, stored on the way out
        self.boots = BootLedger()
        self.rates: dict[tuple[str, str], rates.ResolvedRate] = {}  # (workload, backing) → its offered load
        self.rounds_per_boot = RoundsPerBoot(plan.start_rounds_per_boot,
                                             "set by the plan" if not plan.adaptive_rounds_per_boot
                                             else f"{plan.start_rounds_per_boot} rounds per boot to start", {})

    # -- setup ------------------------------------------------------------
    def _sweep(self) -> tuple[int, bool]:
        sweep_id, resumed = self._find_or_create_sweep()
        if self.opts.group is not None:
            # Recorded as the sweep starts, so a sweep killed before its end still answers for its group; a
            # resumed sweep takes the group given last.
            self.store.set_sweep_group(sweep_id, self.opts.group)
        return sweep_id, resumed

    def _find_or_create_sweep(self) -> tuple[int, bool]:
        host_id = self.store.host_id(host_metadata())
        fp = self.plan.fingerprint()
        for candidate in (fp, *self.plan.legacy_fingerprints()):
            row = self.store.resumable_sweep(candidate)
            if row is not None:
                self.design_seed = int(row["plan_fingerprint"], 16)  # the resumed sweep keeps its rounds' orders
                return int(row["id"]), True
        pruned = [{"what": p.what, "reason": p.reason} for p in self.expansion.pruned]
        from iomatrix.metrics import REGISTRY

        # Units and directions as this version understood them, so the sweep can be read right years later.
        registry = {n: {"unit": m.unit, "direction": m.direction, "description": m.description}
                    for n, m in REGISTRY.items()}
        return self.store.create_sweep(host_id, self.plan.name, fp, self.plan.canonical_json(), pruned,
                                       self.expansion.notes, metric_registry=registry), False

    def _target(self, cell: Cell) -> Target:
        if cell.is_null_ceiling:
            return Target("null", None)
        h = self.handles[cell.backing]
        return Target(h.kind, Path(h.path), server=h.server)

    def _provision(self, stack: contextlib.ExitStack) -> None:
        specs = self.plan.backing_by_label()
        used = sorted({c.backing for c in self.expansion.cells if not c.is_null_ceiling})
        for label in used:
            self.progress.message(f"setting up backing {label}")
            handle = stack.enter_context(provision(specs[label], self.opts.workdir, self.opts.allowed_devices))
            self.handles[label] = handle
            try:
                self.devices[label] = resolve_device_chain(Path(handle.path))
            except (OSError, ValueError):
                self.devices[label] = []

    def _open_tiers(self, stack: contextlib.ExitStack, result: SweepResult) -> None:
        for tier_name in sorted({c.tier for c in self.expansion.cells}):
            tier = self.tier_factory(tier_name, self.plan, self.opts)
            stack.callback(tier.close)
            tier.open()
            self.tiers[tier_name] = tier
            result.accel[tier_name] = tier.accel()
            self.progress.message(tier.describe())

    def _unit_states(self, sweep_id: int) -> tuple[dict[str, tuple[Unit, int]], list[UnitState]]:
        """Every unit with its cell id, and its scheduling state so far (a resumed sweep's runs count)."""
        counts = self.store.run_counts(sweep_id)
        # Bare metal is a baseline (its minimum only) when the sweep measures another tier against it; in a
        # bare-metal-only sweep it is what is being compared, and races like any tier.
        compared = any(not is_reference(u.cell.tier) for u in self.expansion.units)
        rounds = self.store.run_rounds(sweep_id)
        unreached = self._unreached_rounds(sweep_id)
        units: dict[str, tuple[Unit, int]] = {}
        states: list[UnitState] = []
        twins = compared_with(self.expansion.units)
        for unit in self.expansion.units:
            backing_meta = {} if unit.cell.is_null_ceiling else dict(self.handles[unit.cell.backing].metadata)
            cid = self.store.cell_id(sweep_id, unit.cell.key,
                                     dict(unit.cell),
                                     backing_meta)
            ok, bad = counts.get((cid, unit.workload.name), (0, 0))
            units[unit.key] = (unit, cid)
            missed = unreached.get((cid, unit.workload.name), set())
            states.append(UnitState(
                key=unit.key, group=_race_group(unit), unreached=len(missed), after=self._rate_reference_units(unit),
                points=[p for p in self.store.metric_points(cid, unit.workload.name, unit.workload.primary_metric)
                        if p[0] not in missed],
                rounds=rounds.get((cid, unit.workload.name), set()), ok=ok, failed=bad,
                baseline=(compared and is_reference(unit.cell.tier)) or unit.cell.is_null_ceiling,
                current=unit.cell in self.expansion.current,  # the comparison the user came for: never eliminated
                precision_max=self.plan.repetitions.precision_max.get(unit.cell.tier),
                compared_with=twins.get(unit.key, ())))
        return units, states

    def _rate_reference_cells(self, unit: Unit) -> list[Unit]:
        """The bare-metal units whose IOPS set the rate of `unit` (a rate-of-maximum workload; [] otherwise): its
        reference workload on the same backing (none there — the null ceiling, bare metal pruned: every backing's)."""
        rate = unit.workload.rate_of_max
        if rate is None:
            return []
        refs = [u for u in self.expansion.units
                if u.workload.name == rate.reference and is_reference(u.cell.tier)]
        same = [u for u in refs if u.cell.backing == unit.cell.backing]
        return same or refs

    def _rate_reference_units(self, unit: Unit) -> frozenset[str]:
        return frozenset(u.key for u in self._rate_reference_cells(unit))

    def _resolve_rate(self, s: _Session, unit: Unit) -> rates.ResolvedRate | None:
        """The offered load of a rate-of-maximum unit from the stored bare-metal runs (rates.py); the same for every
        cell of its backing, and recomputed alike when a sweep resumes."""
        key = (unit.workload.name, unit.cell.backing)
        if key not in self.rates:
            cell_ids = {u.key: cid for u, cid in s.units.values()}
            ref_cells = {cell_ids[u.key]: u.cell.key for u in self._rate_reference_cells(unit)}
            mine = {cid for u, cid in s.units.values()
                    if u.workload.name == unit.workload.name and u.cell.backing == unit.cell.backing}
            stored = self.store.runs(s.sweep_id)
            iops = self.store.run_metric_values([r.run_id for r in stored if r.cell_id in ref_cells], "total.iops")
            assert unit.workload.rate_of_max is not None
            resolved = rates.resolve_rate(unit.workload.rate_of_max, rates.reference_runs(
                stored, iops, ref_cells, unit.workload.rate_of_max.reference, mine, unit.workload.name))
            if resolved is None:
                return None
            self.rates[key] = resolved
            self.progress.message(f"{unit.workload.name} on {unit.cell.backing}: {resolved.iops} IOPS offered = "
                                  f"{resolved.fraction:.0%} of {resolved.maximum_iops:,.0f} IOPS, the bare-metal "
                                  f"maximum of {resolved.reference} ({resolved.maximum_cell}, runs "
                                  f"{', '.join(map(str, resolved.runs))})")
        return self.rates[key]

    def _unreached_rounds(self, sweep_id: int) -> dict[tuple[int, str], set[int]]:
        """(cell id, workload) → the rounds of its stored runs that missed their offered load (one counted ok run
        per round: a replaced run is not one), so a resumed sweep's racing leaves them out as the reports do."""
        kept = [r for r in self.store.runs(sweep_id) if r.status == "ok" and not r.replaced and r.round is not None]
        reached = self.store.run_metric_values([r.run_id for r in kept], "load.reached")
        out: dict[tuple[int, str], set[int]] = {}
        for r in kept:
            if r.run_id in reached and load_not_reached({"load.reached": reached[r.run_id]}):
                out.setdefault((r.cell_id, r.workload), set()).add(int(r.round))  # type: ignore[arg-type]
        return out

    def _policy(self) -> StopPolicy:
        reps = self.plan.repetitions
        if self.plan.repetition_policy == "ci-width":
            return CiWidthPolicy(self.plan.ci_target, reps.min, reps.max)
        direction = {_race_group(u): u.workload.higher_is_better for u in self.expansion.units}
        return RacingPolicy(self.plan.threshold, reps.min, higher_is_better=direction.__getitem__)

    # -- one batch of runs ------------------------------------------------------
    def _run_batch(self, sweep_id: int, items: list[RunItem]) -> list[tuple[RunOutcome, int, RunInterference | None]]:
        """Runs of one cell: one by one, or together when the tier shares a start-up among them (one guest
        boot). One host sampler covers the batch; each run keeps, and is judged on, the samples of its own
        time span. Every finished run is stored at once; after Ctrl-C in a shared start-up its finished runs are
        stored before the RunsInterrupted goes on up."""
        t_batch = self.clock()  # the batch's whole cost, cache dropping included (for the boot ledger)
        cell = items[0].unit.cell
        tier = self.tiers[cell.tier]
        overlap = len(items) > 1 and tier.overlaps_host_ready
        cache = self._ready_host(tier, overlap)
        notes: list[str] = modifier_notes(cell.modifier, cell.aio) if cell.modifier != NA else []
        sampler = self._sampler(cell, notes)
        reqs = self._requests(sweep_id, items, sampler)
        outcomes, interrupted, host = self._execute(tier, reqs, sampler, cache, overlap, notes)
        if len(items) > 1 and interrupted is None:
            self.boots.add_batch([o for o in outcomes if o is not None], self.clock() - t_batch,
                                 len({item.unit.key for item in items}))
        results = [self._store_run(tier, host, item, outcome)
                   for item, outcome in zip(items, outcomes, strict=True)
                   if outcome is not None]  # None: never finished; the interrupted sweep runs it again when resumed
        if interrupted is not None:
            self.stored_while_interrupted = sum(1 for o in outcomes if o is not None and o.ok)
            raise interrupted
        return results

    def _ready_host(self, tier: Tier, overlap: bool) -> _CachePreparation:
        """A tier that shares a start-up among the batch (`overlap`) drops the caches behind a gate during it
        (after its own clean-up of the previous start-up); otherwise every tier's background work ends, then
        the caches are dropped, before anything starts."""
        for other in self.tiers.values():
            if other is not tier or not overlap:
                other.finish_background_work()
        cache = _CachePreparation(self.plan.keep_caches_warm)
        if not overlap:
            cache()
        return cache

    def _sampler(self, cell: Cell, notes: list[str]) -> HostMonitor:
        devices = [] if cell.is_null_ceiling else self.devices.get(cell.backing, [])
        try:
            return self.sampler_factory(devices, self.opts.monitor_interval)
        except ValueError as err:  # a device vanished from /proc/diskstats: still sample CPU and memory
            notes.append(f"disk not sampled: {err}")
            return self.sampler_factory([], self.opts.monitor_interval)

    def _shape(self, w: wl.Workload) -> JobShape:
        """The plan's region and image, or the workload's own (a wide image: Workload.image_bytes)."""
        return JobShape.for_workload(w, size_bytes=self.plan.size_bytes, image_bytes=self.plan.image_size_bytes,
                                     runtime_s=self.plan.runtime, ramp_s=self.plan.ramp)

    def _requests(self, sweep_id: int, items: list[RunItem], sampler: HostMonitor) -> list[RunRequest]:
        cell = items[0].unit.cell
        runs_dir = self.opts.workdir / "runs" / f"sweep{sweep_id}"
        return [RunRequest(
            cell=cell, workload=item.unit.workload, target=self._target(cell), shape=self._shape(item.unit.workload),
            run_dir=runs_dir / f"{item.cell_id}-{item.unit.workload.slug}" if len(items) == 1
            else runs_dir / f"{item.cell_id}-{item.unit.workload.slug}-r{item.slot.round}",
            timeout_s=plan_run_timeout_s(self.plan, self.budget_elapsed_s(),
                                         declaration(cell.tier).budget_margin_floor_s),
            wrapper=modifier_wrapper(cell.modifier) if cell.modifier != NA else [],
            on_process=sampler.attach_pid,
            on_load_process=lambda pid: sampler.attach_pid(pid, role="load"),
            on_server_process=lambda pid: sampler.attach_pid(pid, role="server"),
        ) for item in items]

    @staticmethod
    def _execute(tier: Tier, reqs: list[RunRequest], sampler: HostMonitor, cache: _CachePreparation, overlap: bool,
                 notes: list[str]) -> tuple[list[RunOutcome | None], RunsInterrupted | None, _BatchHost]:
        """Run the requests under the sampler: (outcomes, the interruption of a shared start-up if any, the
        host around them). `overlap`: the tier runs `cache` during its shared start-up (else it ran already)."""
        started = time.time()
        sampler.start()
        interrupted: RunsInterrupted | None = None
        try:
            outcomes: list[RunOutcome | None] = list(
                tier.run_batch(reqs, host_ready=cache) if overlap
                else tier.run_batch(reqs) if len(reqs) > 1 else [tier.run(reqs[0])])
        except RunsInterrupted as intr:  # Ctrl-C in a shared boot: store its finished runs, then stop
            interrupted, outcomes = intr, intr.outcomes
        finally:
            try:
                samples = sampler.stop()
            except Exception as err:  # the monitor must never cost a measured run
                samples = []
                notes.append(f"host sampler failed: {err}")
        return outcomes, interrupted, _BatchHost(cache.result(), notes, samples, started, time.time(), len(reqs) > 1,
                                                 sampler.followed_processes())

    def _store_run(self, tier: Tier, host: _BatchHost, item: RunItem, outcome: RunOutcome
                   ) -> tuple[RunOutcome, int, RunInterference | None]:
        """Judge one finished run from its host samples and commit it: (outcome, run id, interference)."""
        unit, cell, cache = item.unit, item.unit.cell, host.cache
        run_start = outcome.started_at if outcome.started_at is not None else host.started
        run_end = outcome.finished_at if outcome.finished_at is not None else host.finished
        if outcome.ok and outcome.boot_id is not None:
            value = outcome.metrics.get(unit.workload.primary_metric)
            if value is not None:
                self.boots.add_run(unit.key, outcome.boot_id, outcome.boot_position, value)
        mine = host.samples_between(run_start, run_end)
        if outcome.ok:  # the derived figures join what the run measured: the scheduler and the run's line read them
            outcome.metrics.update(self._derived_metrics(unit.workload, outcome, mine))
        metrics = outcome.metrics
        flags = judge_interference(mine, self.host_baseline) if outcome.ok else None
        run_id = self.store.record_run(RunRecord(
            cell_id=item.cell_id, workload=unit.workload.name, status="ok" if outcome.ok else "failed",
            started_at=run_start, finished_at=run_end, accel=tier.accel(), cache_state=cache.state,
            page_cache_method=page_cache_method(unit.workload, tier=cell.tier, cache=cell.cache,
                                                caches_dropped=cache.state == "dropped"),
            metrics=metrics, phases=outcome.phases, job_text=outcome.job_text,
            raw_output=outcome.raw_output, console_tail=outcome.console_tail, error=outcome.error,
            meta={**self._run_meta(outcome, host),
                  **({"offered_load": item.offered_load} if item.offered_load else {})},
            monitor=[(x.t, x.values) for x in mine],
            # The randomised-block design: the statistics use the round as a block.
            round=item.slot.round, round_position=item.slot.position,
            disturbed=None if flags is None else flags.disturbed,
            disturbance=flags.reasons if flags is not None else (), retry_of=item.retry_of,
            boot_id=outcome.boot_id, boot_position=outcome.boot_position))
        return outcome, run_id, flags

    @staticmethod
    def _derived_metrics(workload: wl.Workload, outcome: RunOutcome, samples: list[MonitorSample]) -> dict[str, float]:
        """What the run cost the host per I/O (the I/O path's sampled CPU and context switches) and, for a
        rate-limited workload, whether it ran at the offered load."""
        return {**io_cost_metrics(outcome.metrics, field_total(samples, "iopath.cpu_s"),
                                  field_total(samples, "iopath.ctx_switches")),
                **offered_load_metrics(outcome.metrics, workload.rate_iops)}

    def _run_meta(self, outcome: RunOutcome, host: _BatchHost) -> dict[str, Any]:
        meta: dict[str, Any] = dict(outcome.meta)
        if host.processes:
            meta["processes"] = host.processes  # what the sampler followed: cost.* counts the role "io" ones
        meta["cache_detail"] = host.cache.detail
        if host.batched:
            meta["round_order"] = "cell"  # randomised at the cell level: a cell's runs shared a boot
            meta["rounds_per_boot"] = {"rounds": self.rounds_per_boot.rounds,
                                       "mode": "auto" if self.plan.adaptive_rounds_per_boot else "fixed",
                                       "reason": self.rounds_per_boot.reason}
        if host.notes:
            meta["notes"] = host.notes
        return meta

    def _adapt_rounds_per_boot(self, units: dict[str, tuple[Unit, int]], cell_of: dict[str, str],
                               max_batch: dict[str, int]) -> None:
        """`repetitions_per_boot = "auto"`: after each batch round, choose the rounds the next boots hold from
        the runs so far (stats/runs_per_boot.py); one value for the sweep keeps the rounds aligned."""
        if not self.plan.adaptive_rounds_per_boot:
            return
        from iomatrix.plan.model import MAX_REPETITIONS_PER_BOOT

        members: dict[str, int] = {}
        for key, cell in cell_of.items():
            if cell != key:
                members[cell] = members.get(cell, 0) + 1
        if not members:
            return
        fits = max(max(1, max_batch.get(cell, 1) // n) for cell, n in members.items())
        cap = min(MAX_REPETITIONS_PER_BOOT, self.plan.repetitions.max, fits)
        choice = choose_rounds_per_boot(self.boots.runs, self.boots.boot_cost_s(), self.boots.round_cost_s(),
                                        self.rounds_per_boot.rounds, cap)
        if choice.reason != self.rounds_per_boot.reason:
            self.progress.message(f"guest boots: {choice.reason}")
        self.rounds_per_boot = choice

    def _record_stops(self, sched: Scheduler, units: dict[str, tuple[Unit, int]]) -> None:
        for st in sched.new_stops():
            unit, cell_id = units[st.key]
            self.store.record_unit_stop(cell_id, unit.workload.name, st.kind, st.reason, st.round, st.ok_runs)

    # -- the sweep ------------------------------------------------------------
    def run(self) -> SweepResult:
        sweep_id, resumed = self._sweep()
        result = SweepResult(sweep_id, 0, 0, [], [], {}, resumed)
        session: _Session | None = None
        t_session = self.clock()
        with _sigterm_as_interrupt(), contextlib.ExitStack() as stack:
            try:
                self._provision(stack)
                self._open_tiers(stack, result)
                session = self._start_session(sweep_id, t_session)
                self._run_rounds(session, result)
                self.store.set_sweep_status(sweep_id, "finished")
            except KeyboardInterrupt:
                result.interrupted = True
                self.store.set_sweep_status(sweep_id, "interrupted")
            finally:
                self.progress.stop()
        if session is not None:
            self._conclude(session, result)
        return result

    def _start_session(self, sweep_id: int, t_session: float) -> _Session:
        """The scheduler of this session, from the units' state so far (a resumed sweep's runs count)."""
        units, states = self._unit_states(sweep_id)
        reps = self.plan.repetitions
        sched = Scheduler(
            states, min_runs=reps.min, max_runs=reps.max, budget_s=self.plan.time_budget_s,
            policy=self._policy(), ci_target=self.plan.ci_target, precision_for=reps.precision_for,
            seed=self.design_seed, clock=self.clock,
            # Wall clock of this session (its set-up included: provisioning backings, opening tiers) plus
            # the run time of earlier sessions of a resumed sweep.
            prior_elapsed_s=self.store.sweep_elapsed(sweep_id) + (self.clock() - t_session))
        self.budget_elapsed_s = sched.elapsed_s  # each run's timeout keeps to the budget left (run_timeout.py)
        # Every ok run stored counts as kept and done, a disturbed one its retry replaced included.
        stored = sum(ok for ok, _ in self.store.run_counts(sweep_id, replaced_too=True).values())
        session = _Session(
            sweep_id, sched, units,
            # Units of a tier that shares start-ups (guest boots) are batched per cell; others alone.
            cell_of={k: (u.cell.key if self.tiers[u.cell.tier].batches_runs else k) for k, (u, _) in units.items()},
            max_batch={u.cell.key: self.tiers[u.cell.tier].max_batch(u.cell) for u, _ in units.values()},
            cells_order={c: i for i, c in enumerate(dict.fromkeys(u.cell for u in self.expansion.units))},
            already=sum(s.ok for s in states), index=stored)
        self.progress.start(max(stored, len(states) * reps.min), stored)
        return session

    def _run_rounds(self, s: _Session, result: SweepResult) -> None:
        """Every round the scheduler gives, batch by batch; a disturbed run's retry joins the end of its round."""
        while batches := s.sched.next_batches(s.cell_of, s.max_batch, self.rounds_per_boot.rounds):
            self._record_stops(s.sched, s.units)
            self.progress.grow(s.index + s.sched.pending_estimate())
            queue = deque(batches)
            while queue:
                todo = [slot for slot in queue.popleft() if s.sched.should_start(slot)]
                if not todo:
                    continue
                retries = self._run_slots(s, todo, result)
                # The retries of one shared boot share the next boot too (a tier that starts once per run gets
                # them one by one): a boot per disturbed run cost more than the runs.
                if retries and s.cell_of[retries[0].key] != retries[0].key:
                    queue.append(retries)
                else:
                    queue.extend([r] for r in retries)
                if retries:
                    self.progress.grow(s.index + len(queue) + s.sched.pending_estimate())
            self._adapt_rounds_per_boot(s.units, s.cell_of, s.max_batch)
        self._record_stops(s.sched, s.units)

    def _run_slots(self, s: _Session, todo: list[Slot], result: SweepResult) -> list[Slot]:
        """Run one batch of slots and count its outcomes; the retries of its disturbed runs."""
        items = []
        for slot in todo:
            unit, cell_id = s.units[slot.key]
            offered: dict[str, Any] | None = None
            if unit.workload.rate_of_max is not None:  # its rate, from the bare-metal runs done before it
                resolved = self._resolve_rate(s, unit)
                if resolved is None:
                    s.sched.give_up(slot.key, f"no bare-metal maximum of {unit.workload.rate_of_max.reference} to "
                                              "set its rate from (no bare-metal run of it succeeded)")
                    continue
                unit = Unit(unit.cell, dataclasses.replace(unit.workload, rate_iops=resolved.iops))
                offered = resolved.meta()
            st = s.sched.units[slot.key]
            s.index += 1
            self.progress.run_started(s.index, unit, st.ok + st.failed + 1, s.cells_order[unit.cell] + 1,
                                      len(s.cells_order))
            items.append(RunItem(unit, cell_id, slot, s.last_run.get((slot.key, slot.round)) if slot.retry else None,
                                 offered))
        if not items:
            return []
        retries: list[Slot] = []
        for item, (outcome, run_id, flags) in zip(items, self._run_batch(s.sweep_id, items), strict=True):
            s.last_run[(item.slot.key, item.slot.round)] = run_id
            retry = self._count(s.sched, item, outcome, flags, result)
            if retry is not None:
                retries.append(retry)
        return retries

    def _count(self, sched: Scheduler, item: RunItem, outcome: RunOutcome, flags: RunInterference | None,
               result: SweepResult) -> Slot | None:
        """Tell the scheduler, the result and the user how a run went; its retry, if it gets one."""
        unit = item.unit
        value = outcome.metrics.get(unit.workload.primary_metric) if outcome.ok else None
        disturbed = flags is not None and flags.disturbed
        unreached = outcome.ok and load_not_reached(outcome.metrics)
        retry = sched.record(item.slot, outcome.ok, value, disturbed,
                             retry_worthy=flags is not None and flags.retry_worthy and self._retries_disturbed(unit),
                             wall_s=outcome.phases.get("wall_s"), load_reached=not unreached)
        if outcome.ok:
            result.disturbed += int(disturbed)
            result.load_not_reached += int(unreached)
        else:
            result.runs_failed += 1
        summary = _headline(unit, outcome)
        if disturbed and flags is not None:
            summary += f" — disturbed: {'; '.join(flags.reasons)}" + (
                ", retried at the end of the round" if retry is not None else "")
        self.progress.run_finished(unit, outcome, summary)
        result.retried += retry is not None
        return retry

    def _retries_disturbed(self, unit: Unit) -> bool:
        """Whether a disturbed run of `unit` is started again. A fixed-trial tier (durability) counts trials, not
        speed: a busy host changes no verdict; a tier that loads the host itself (consolidation) would only
        disturb its own retry."""
        tc = declaration(unit.cell.tier)
        return self.plan.retry_disturbed and not (tc.fixed_trials or tc.loads_host)

    def _conclude(self, s: _Session, result: SweepResult) -> None:
        """The session's counts and the units that stopped without an answer."""
        # Ok runs that count: a disturbed run its retry replaced is not one (its retry is).
        result.runs_done = (sum(u.ok + len(u.pending) for u in s.sched.units.values()) - s.already
                            + self.stored_while_interrupted)
        for key, verdict in s.sched.verdicts().items():
            if verdict is None:
                continue
            if verdict.kind is StopKind.GAVE_UP:
                result.gave_up.append((key, verdict.reason))
            elif verdict.kind is StopKind.LOAD_NOT_REACHED:
                result.unreached_units.append((key, verdict.reason))
            elif verdict.kind in NOT_SETTLED and not declaration(s.units[key][0].cell.tier).fixed_trials:
                # Stopped by a limit, not by the data: racing's eliminations, race ends and baselines are
                # answers, and "converged" is one too.
                result.not_converged.append((key, verdict.reason))


class RunItem(NamedTuple):
    """One run to start: its unit, the unit's cell in the store, its place in the design, the run it retries."""

    unit: Unit  # a rate-of-maximum workload's with its rate set
    cell_id: int
    slot: Slot
    retry_of: int | None
    offered_load: dict[str, Any] | None = None  # where a rate-of-maximum workload's rate came from (rates.py)


@dataclass
class _Session:
    """One session's walk through the scheduler's rounds."""

    sweep_id: int
    sched: Scheduler
    units: dict[str, tuple[Unit, int]]  # unit key → (unit, cell id)
    cell_of: dict[str, str]  # unit key → what it is batched by: its cell's key, or its own key (not batched)
    max_batch: dict[str, int]  # cell key → runs one batch of it may hold
    cells_order: dict[Cell, int]  # for "cell i of n"
    already: int  # ok runs of earlier sessions
    index: int  # runs started, earlier sessions' included (the progress display's count)
    last_run: dict[tuple[str, int], int] = field(default_factory=dict)  # (unit, round) → latest run id, for retries


class _CachePreparation:
    """Sync and drop the host's caches (or keep them warm, as the plan says), before the runs or during a
    tier's shared start-up; what the first preparation did holds for every run of the batch."""

    def __init__(self, keep_warm: bool) -> None:
        self.keep_warm = keep_warm
        self.state: CacheState | None = None

    def __call__(self) -> None:
        state = prepare_cache(self.keep_warm)
        if self.state is None:
            self.state = state

    def result(self) -> CacheState:
        return self.state or CacheState("not-dropped", "the tier did not run the cache preparation")


@dataclass
class _BatchHost:
    """The host around one batch of runs, which each run is stored with its share of."""

    cache: CacheState
    notes: list[str]
    samples: list[MonitorSample]  # t: seconds since `started`
    started: float  # host clock (time.time()) when the sampler started
    finished: float
    batched: bool  # several runs: each keeps the samples of its own span
    processes: list[dict[str, object]] = field(default_factory=list)  # followed by the sampler (pid, name, role)

    def samples_between(self, start: float, end: float) -> list[MonitorSample]:
        if not self.batched:
            return self.samples
        lo, hi = start - self.started, end - self.started
        return [x for x in self.samples if lo - 1e-6 <= x.t <= hi + 1e-6]


class BootLedger:
    """What shared guest boots cost and measured, for choosing the rounds per boot: per unit its ok runs as
    (boot id, position, primary metric); per batch its cost split into the boot's and the runs' share."""

    def __init__(self) -> None:
        self.runs: dict[str, list[tuple[str | None, int | None, float]]] = {}
        self._boot_costs: list[float] = []
        self._round_costs: list[float] = []

    def add_run(self, unit_key: str, boot_id: str | None, position: int | None, value: float) -> None:
        self.runs.setdefault(unit_key, []).append((boot_id, position, float(value)))

    def add_batch(self, outcomes: Sequence[RunOutcome], wall_s: float, units: int) -> None:
        """A batch's wall (images, boot, runs, shutdown, removal) = c_boot + n · c_run, with c_run the median
        wall of its runs after the first (the first carries the boot, the last the shutdown); a round of the
        cell costs `units` runs."""
        later = sorted(o.phases["wall_s"] for o in outcomes
                       if o.ok and (o.boot_position or 0) >= 1 and "wall_s" in o.phases)
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


def judge_interference(samples: Sequence[MonitorSample],
                       baseline: list[dict[str, float]] | None = None) -> RunInterference | None:
    """The run's interference verdict from the host samples taken during it (None: nothing was sampled),
    relative to `baseline` (the sweep's earlier runs' scores; this run's are appended to it)."""
    if not samples:
        return None
    means = {k: f.mean for k, f in summarize_samples(samples).items()}
    cpus = os.cpu_count() or 1
    flags = interference_flags(means, cpus, baseline=baseline or ())
    if baseline is not None:
        baseline.append(interference_scores(means, cpus))
    return flags


# Reasons a unit stopped before its data settled anything.
NOT_SETTLED = frozenset({StopKind.MAX_RUNS, StopKind.BUDGET})  # the stops a limit made, not the data


def compared_with(units: Sequence[Unit]) -> dict[str, tuple[str, ...]]:
    """unit key → the units the reports quote it against: its twins at each tool default's cache and aio (QEMU's,
    libvirt's; ``domain.BASELINES``, as report/recommend.py matches them: axes.baseline_values) in the same tier
    and workload, the other axes equal; where neither was measured, its twin with the later axes at their defaults
    (axes.later_at_default). The scheduler runs those on for precision with a contender
    (precision_for = "contenders")."""
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
        # No twin at QEMU's default cache and aio (a workload table's one cell): its own axes at QEMU's defaults.
        own = by_cell.get((Cell({**u.cell, **axes.later_at_default(u.cell)}), u.workload.name))
        if not twins and own is not None and own != u.key:
            twins.append(own)
        if twins:
            out[u.key] = tuple(twins)
    return out


def _race_group(unit: Unit) -> str:
    """Units that race each other: one workload within one tier (tiers measure different things)."""
    return f"{unit.cell.tier}::{unit.workload.name}"


def default_tier_factory(name: str, plan: Plan, opts: RunOptions) -> Tier:
    return tier_class(name)(plan, opts)
