"""Run a plan: provision backings, interleave repetitions across cells, sample
the host, and commit every finished run to the store at once.

What runs next is decided by the pure scheduler (`scheduler.py`: randomised complete blocks,
stopping policy, budget, giving up); the sweep runner does the I/O around each run: backings, tiers,
the host sampler, the store. Tiers come from the registry (`iomatrix.tiers`), so a new tier needs no
change here.

This module holds the sweep's set-up (the sweep in the store, the backings, the tiers) and its one
entry point, `SweepRunner.run`; its parts are in `iomatrix.sweep` (the units' scheduling, the round
loop, one batch of runs, the host around it), and the names other code imports from here are
re-exported."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from iomatrix import rates
from iomatrix.backing.provision import BackingHandle, provision
from iomatrix.errors import UserError
from iomatrix.metadata import host_metadata
from iomatrix.metrics import REGISTRY
from iomatrix.monitor.devices import resolve_device_chain
from iomatrix.monitor.sampler import HostSampler
from iomatrix.plan.model import Plan
from iomatrix.stats.runs_per_boot import RoundsPerBoot
from iomatrix.store import Store
from iomatrix.sweep.batch import BatchRunning
from iomatrix.sweep.boots import BootLedger
from iomatrix.sweep.expansion import (
    backing_facts,
    nothing_measured,
    plan_expansion,
    resolve_workloads,
)
from iomatrix.sweep.host import (
    HostMonitor,
    SamplerFactory,
    judge_interference,
    sigterm_as_interrupt,
)
from iomatrix.sweep.progress import Progress
from iomatrix.sweep.rounds import NOT_SETTLED, RoundLoop
from iomatrix.sweep.session import RunItem, Session, SweepResult
from iomatrix.sweep.start import StartTogether, wait_until
from iomatrix.sweep.units import UnitScheduling, compared_with
from iomatrix.tiers.base import RunOptions, Tier, tier_implementation

__all__ = [
    "NOT_SETTLED",
    "BootLedger",
    "HostMonitor",
    "Progress",
    "RunItem",
    "RunOptions",
    "SamplerFactory",
    "SweepResult",
    "SweepRunner",
    "backing_facts",
    "compared_with",
    "default_tier_factory",
    "judge_interference",
    "plan_expansion",
    "resolve_workloads",
]


class SweepRunner(UnitScheduling, RoundLoop, BatchRunning):
    """A sweep of one plan on this host: `run()` sets it up, walks the scheduler's rounds and tears
    it down."""

    def __init__(
        self,
        plan: Plan,
        base_dir: Path | None,
        store: Store,
        options: RunOptions,
        progress: Progress | None = None,
        tier_factory: Callable[[str, Plan, RunOptions], Tier] | None = None,
        sampler_factory: SamplerFactory = HostSampler,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`sampler_factory` and `clock` (the time budget's and the boot costs' monotonic clock) are
        the host a test scripts; `tier_factory` makes the tiers (default: the registered tier's
        class)."""
        self.plan = plan
        self.store = store
        self.opts = options
        self.progress = progress or Progress()
        self.expansion = plan_expansion(plan, base_dir, options.allowed_devices)
        # no cell, or only the null ceiling, which alone answers nothing: refused before anything is
        # created
        if (refused := nothing_measured(plan, self.expansion)) is not None:
            raise UserError(refused[0], hint=refused[1])
        # host checks a tier can make before anything is created (e.g. memory)
        for tier_name in plan.tier:
            tier_implementation(tier_name).preflight(plan)
        self.tier_factory = tier_factory or default_tier_factory
        self.sampler_factory = sampler_factory
        self.clock = clock
        self.tiers: dict[str, Tier] = {}
        self.handles: dict[str, BackingHandle] = {}
        self.devices: dict[str, list[str]] = {}
        # the scheduler's round orders; a resumed sweep keeps its own
        self.design_seed = int(plan.fingerprint(), 16)
        # Interference scores of this session's judged runs: each run is flagged relative to them.
        self.host_baseline: list[dict[str, float]] = []
        # ok runs of an interrupted shared boot, stored on the way out
        self.stored_while_interrupted = 0
        self.boots = BootLedger()
        # set by --start-at once the wait is over
        self.started_together: StartTogether | None = None
        # (workload, backing) → its offered load
        self.rates: dict[tuple[str, str], rates.ResolvedRate] = {}
        self.rounds_per_boot = RoundsPerBoot(
            plan.start_rounds_per_boot,
            "set by the plan"
            if not plan.adaptive_rounds_per_boot
            else f"{plan.start_rounds_per_boot} rounds per boot to start",
            {},
        )

    # -- setup ------------------------------------------------------------
    def _sweep(self) -> tuple[int, bool]:
        sweep_id, resumed = self._find_or_create_sweep()
        if self.opts.group is not None:
            # Recorded as the sweep starts, so a sweep killed before its end still answers for its
            # group; a resumed sweep takes the group given last.
            self.store.set_sweep_group(sweep_id, self.opts.group)
        return sweep_id, resumed

    def _find_or_create_sweep(self) -> tuple[int, bool]:
        host_id = self.store.host_id(host_metadata())
        fp = self.plan.fingerprint()
        for candidate in (fp, *self.plan.legacy_fingerprints()):
            row = self.store.resumable_sweep(candidate)
            if row is not None:
                # the resumed sweep keeps its rounds' orders
                self.design_seed = int(row["plan_fingerprint"], 16)
                return int(row["id"]), True
        pruned = [{"what": p.what, "reason": p.reason} for p in self.expansion.pruned]
        # Units and directions as this version understood them, so the sweep can be read right years
        # later.
        registry = {
            n: {"unit": m.unit, "direction": m.direction, "description": m.description}
            for n, m in REGISTRY.items()
        }
        return self.store.create_sweep(
            host_id,
            self.plan.name,
            fp,
            self.plan.canonical_json(),
            pruned,
            self.expansion.notes,
            metric_registry=registry,
        ), False

    def _provision(self, stack: contextlib.ExitStack) -> None:
        specs = self.plan.backing_by_label()
        used = sorted({c.backing for c in self.expansion.cells if not c.is_null_ceiling})
        for label in used:
            self.progress.message(f"setting up backing {label}")
            handle = stack.enter_context(
                provision(specs[label], self.opts.workdir, self.opts.allowed_devices)
            )
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

    def _wait_for_the_others(self) -> None:
        """With `--start-at`, wait (set up, before the first run) for the time every host sharing
        the backend starts at; recorded with each run of this session."""
        if self.opts.start_at is None:
            return
        self.started_together = wait_until(
            self.opts.start_at,
            time.time,
            time.sleep,
            lambda left: self.progress.message(
                f"set up; waiting {left:.0f} s for the common start time (--start-at)"
            ),
        )
        self.progress.message(self.started_together.describe())

    # -- the sweep ------------------------------------------------------------
    def run(self) -> SweepResult:
        sweep_id, resumed = self._sweep()
        result = SweepResult(
            sweep_id=sweep_id,
            runs_done=0,
            runs_failed=0,
            not_converged=[],
            gave_up=[],
            accel={},
            resumed=resumed,
        )
        session: Session | None = None
        t_session = self.clock()
        with sigterm_as_interrupt(), contextlib.ExitStack() as stack:
            try:
                self._provision(stack)
                self._open_tiers(stack, result)
                self._wait_for_the_others()
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


def default_tier_factory(name: str, plan: Plan, opts: RunOptions) -> Tier:
    return tier_implementation(name)(plan, opts)
