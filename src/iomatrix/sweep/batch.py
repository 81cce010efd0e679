"""One batch of runs of one cell: the host made ready (background work ended, caches dropped), one
host sampler around the batch, the tier run (one by one, or together in a shared start-up), and
every finished run judged on the samples of its own span and committed to the store at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iomatrix import workloads as wl
from iomatrix.backing.provision import BackingHandle
from iomatrix.fio.jobs import JobShape
from iomatrix.hygiene import modifier_notes, modifier_wrapper
from iomatrix.matrix import NA, Cell
from iomatrix.metrics import io_cost_metrics, offered_load_metrics
from iomatrix.monitor.sample import MonitorSample
from iomatrix.monitor.summary import field_total
from iomatrix.plan.model import Plan
from iomatrix.run_timeout import plan_run_timeout_s
from iomatrix.stats.interference import RunInterference
from iomatrix.stats.runs_per_boot import RoundsPerBoot
from iomatrix.store import RunRecord, Store
from iomatrix.sweep.boots import BootLedger
from iomatrix.sweep.host import (
    BatchHost,
    CachePreparation,
    HostMonitor,
    SamplerFactory,
    judge_interference,
)
from iomatrix.sweep.session import RunItem
from iomatrix.sweep.start import StartTogether
from iomatrix.tiers import declaration, page_cache_method
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, RunsInterrupted, Target, Tier


class BatchRunning:
    """The sweep runner's running and recording side (a part of `runner.SweepRunner`, which sets
    these)."""

    plan: Plan
    store: Store
    opts: RunOptions
    tiers: dict[str, Tier]
    handles: dict[str, BackingHandle]
    devices: dict[str, list[str]]
    sampler_factory: SamplerFactory
    clock: Callable[[], float]
    budget_elapsed_s: Callable[[], float]
    boots: BootLedger
    host_baseline: list[dict[str, float]]
    stored_while_interrupted: int
    rounds_per_boot: RoundsPerBoot
    started_together: StartTogether | None

    def _target(self, cell: Cell) -> Target:
        if cell.is_null_ceiling:
            return Target("null", None)
        h = self.handles[cell.backing]
        return Target(h.kind, Path(h.path), server=h.server, client_hosts=h.client_hosts)

    # -- one batch of runs ------------------------------------------------------
    def _run_batch(
        self, sweep_id: int, items: list[RunItem]
    ) -> list[tuple[RunOutcome, int, RunInterference | None]]:
        """Runs of one cell: one by one, or together when the tier shares a start-up among them (one
        guest boot). One host sampler covers the batch; each run keeps, and is judged on, the
        samples of its own time span. Every finished run is stored at once; after Ctrl-C in a shared
        start-up its finished runs are stored before the RunsInterrupted goes on up."""
        # the batch's whole cost, cache dropping included (for the boot ledger)
        t_batch = self.clock()
        cell = items[0].unit.cell
        tier = self.tiers[cell.tier]
        overlap = len(items) > 1 and tier.overlaps_host_ready
        cache = self._ready_host(tier, overlap)
        notes: list[str] = modifier_notes(cell.modifier, cell.aio) if cell.modifier != NA else []
        sampler = self._sampler(cell, notes)
        reqs = self._requests(sweep_id, items, sampler)
        outcomes, interrupted, host = self._execute(tier, reqs, sampler, cache, overlap, notes)
        if len(items) > 1 and interrupted is None:
            self.boots.add_batch(
                [o for o in outcomes if o is not None],
                self.clock() - t_batch,
                len({item.unit.key for item in items}),
            )
        results = [
            self._store_run(tier, host, item, outcome)
            for item, outcome in zip(items, outcomes, strict=True)
            # None: never finished; the interrupted sweep runs it again when resumed
            if outcome is not None
        ]
        if interrupted is not None:
            self.stored_while_interrupted = sum(1 for o in outcomes if o is not None and o.ok)
            raise interrupted
        return results

    def _ready_host(self, tier: Tier, overlap: bool) -> CachePreparation:
        """A tier that shares a start-up among the batch (`overlap`) drops the caches behind a gate
        during it (after its own clean-up of the previous start-up); otherwise every tier's
        background work ends, then the caches are dropped, before anything starts."""
        for other in self.tiers.values():
            if other is not tier or not overlap:
                other.finish_background_work()
        cache = CachePreparation(self.plan.keep_caches_warm)
        if not overlap:
            cache()
        return cache

    def _sampler(self, cell: Cell, notes: list[str]) -> HostMonitor:
        devices = [] if cell.is_null_ceiling else self.devices.get(cell.backing, [])
        try:
            return self.sampler_factory(devices, self.opts.monitor_interval)
        # a device vanished from /proc/diskstats: still sample CPU and memory
        except ValueError as err:
            notes.append(f"disk not sampled: {err}")
            return self.sampler_factory([], self.opts.monitor_interval)

    def _shape(self, w: wl.Workload) -> JobShape:
        """The plan's region and image, or the workload's own (a wide image:
        Workload.image_bytes)."""
        return JobShape.for_workload(
            w,
            size_bytes=self.plan.size_bytes,
            image_bytes=self.plan.image_size_bytes,
            runtime_s=self.plan.runtime,
            ramp_s=self.plan.ramp,
        )

    def _requests(
        self, sweep_id: int, items: list[RunItem], sampler: HostMonitor
    ) -> list[RunRequest]:
        cell = items[0].unit.cell
        runs_dir = self.opts.workdir / "runs" / f"sweep{sweep_id}"
        return [
            RunRequest(
                cell=cell,
                workload=item.unit.workload,
                target=self._target(cell),
                shape=self._shape(item.unit.workload),
                run_dir=runs_dir / f"{item.cell_id}-{item.unit.workload.slug}"
                if len(items) == 1
                else runs_dir / f"{item.cell_id}-{item.unit.workload.slug}-r{item.slot.round}",
                timeout_s=plan_run_timeout_s(
                    self.plan, self.budget_elapsed_s(), declaration(cell.tier).budget_margin_floor_s
                ),
                wrapper=modifier_wrapper(cell.modifier) if cell.modifier != NA else [],
                on_process=sampler.attach_pid,
                on_load_process=lambda pid: sampler.attach_pid(pid, role="load"),
                on_server_process=lambda pid: sampler.attach_pid(pid, role="server"),
            )
            for item in items
        ]

    @staticmethod
    def _execute(
        tier: Tier,
        reqs: list[RunRequest],
        sampler: HostMonitor,
        cache: CachePreparation,
        overlap: bool,
        notes: list[str],
    ) -> tuple[list[RunOutcome | None], RunsInterrupted | None, BatchHost]:
        """Run the requests under the sampler: (outcomes, the interruption of a shared start-up if
        any, the host around them). `overlap`: the tier runs `cache` during its shared start-up
        (else it ran already)."""
        started = time.time()
        sampler.start()
        interrupted: RunsInterrupted | None = None
        try:
            outcomes: list[RunOutcome | None] = list(
                tier.run_batch(reqs, host_ready=cache)
                if overlap
                else tier.run_batch(reqs)
                if len(reqs) > 1
                else [tier.run(reqs[0])]
            )
        # Ctrl-C in a shared boot: store its finished runs, then stop
        except RunsInterrupted as intr:
            interrupted, outcomes = intr, intr.outcomes
        finally:
            try:
                samples = sampler.stop()
            except Exception as err:  # the monitor must never cost a measured run
                samples = []
                notes.append(f"host sampler failed: {err}")
        return (
            outcomes,
            interrupted,
            BatchHost(
                cache=cache.result(),
                notes=notes,
                samples=samples,
                started=started,
                finished=time.time(),
                batched=len(reqs) > 1,
                processes=sampler.followed_processes(),
            ),
        )

    def _store_run(
        self, tier: Tier, host: BatchHost, item: RunItem, outcome: RunOutcome
    ) -> tuple[RunOutcome, int, RunInterference | None]:
        """Judge one finished run from its host samples and commit it: (outcome, run id,
        interference)."""
        unit, cell, cache = item.unit, item.unit.cell, host.cache
        run_start = outcome.started_at if outcome.started_at is not None else host.started
        run_end = outcome.finished_at if outcome.finished_at is not None else host.finished
        if outcome.ok and outcome.boot_id is not None:
            value = outcome.metrics.get(unit.workload.primary_metric)
            if value is not None:
                self.boots.add_run(unit.key, outcome.boot_id, outcome.boot_position, value)
        mine = host.samples_between(run_start, run_end)
        # the derived figures join what the run measured: the scheduler and the run's line read them
        if outcome.ok:
            outcome.metrics.update(self._derived_metrics(unit.workload, outcome, mine))
        metrics = outcome.metrics
        flags = judge_interference(mine, self.host_baseline) if outcome.ok else None
        run_id = self.store.record_run(
            RunRecord(
                cell_id=item.cell_id,
                workload=unit.workload.name,
                status="ok" if outcome.ok else "failed",
                started_at=run_start,
                finished_at=run_end,
                accel=tier.accel(),
                cache_state=cache.state,
                page_cache_method=page_cache_method(
                    unit.workload,
                    tier=cell.tier,
                    cache=cell.cache,
                    caches_dropped=cache.state == "dropped",
                ),
                metrics=metrics,
                phases=outcome.phases,
                job_text=outcome.job_text,
                raw_output=outcome.raw_output,
                console_tail=outcome.console_tail,
                error=outcome.error,
                meta={
                    **self._run_meta(outcome, host),
                    **({"offered_load": item.offered_load} if item.offered_load else {}),
                },
                monitor=[(x.t, x.values) for x in mine],
                # The randomised-block design: the statistics use the round as a block.
                round=item.slot.round,
                round_position=item.slot.position,
                disturbed=None if flags is None else flags.disturbed,
                disturbance=flags.reasons if flags is not None else (),
                retry_of=item.retry_of,
                boot_id=outcome.boot_id,
                boot_position=outcome.boot_position,
                clients=outcome.clients,
            )
        )
        return outcome, run_id, flags

    @staticmethod
    def _derived_metrics(
        workload: wl.Workload, outcome: RunOutcome, samples: list[MonitorSample]
    ) -> dict[str, float]:
        """What the run cost the host per I/O (the I/O path's sampled CPU and context switches) and,
        for a rate-limited workload, whether it ran at the offered load."""
        return {
            **io_cost_metrics(
                outcome.metrics,
                field_total(samples, "iopath.cpu_s"),
                field_total(samples, "iopath.ctx_switches"),
            ),
            **offered_load_metrics(outcome.metrics, workload.rate_iops, workload.rate_poisson),
        }

    def _run_meta(self, outcome: RunOutcome, host: BatchHost) -> dict[str, Any]:
        meta: dict[str, Any] = dict(outcome.meta)
        if host.processes:
            # what the sampler followed: cost.* counts the role "io" ones
            meta["processes"] = host.processes
        meta["cache_detail"] = host.cache.detail
        if host.batched:
            # randomised at the cell level: a cell's runs shared a boot
            meta["round_order"] = "cell"
            meta["rounds_per_boot"] = {
                "rounds": self.rounds_per_boot.rounds,
                "mode": "auto" if self.plan.adaptive_rounds_per_boot else "fixed",
                "reason": self.rounds_per_boot.reason,
            }
        if host.notes:
            meta["notes"] = host.notes
        # run --start-at: the fleet report reads which hosts ran together
        if self.started_together is not None:
            meta["started_together"] = self.started_together.as_meta()
        return meta
