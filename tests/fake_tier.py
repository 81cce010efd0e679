"""A scripted tier and host for driving the sweep runner in-process (hyperfine's mock executor is
the model).

Each run's outcome comes from a script: ok with a value, failed with an error, ok on a disturbed
host, or Ctrl-C while it runs. The same script is the host the runner samples during the runs, so
the runner's own interference judgement (``runner.judge_interference`` → ``stats.interference``)
sees a disturbed run as disturbed; and a run takes time only on a fake monotonic clock, which the
runner's time budget reads. The store, the matrix, the scheduler, the backing (a ``dir`` under the
working directory) and the judgement are the real ones: no fio, no QEMU, no root, milliseconds a
sweep.

Use: register the tier classes for one test with ``iomatrix.tiers.registered(...)``, make one
:class:`ScriptedHost` per test (it outlives a runner, so a resumed sweep goes on with the same script), and
pass ``host.tier_factory``, ``host.sampler`` and ``host.clock`` to ``SweepRunner``.
"""  # noqa: E501

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from iomatrix.domain.axes import Layer
from iomatrix.matrix import Cell
from iomatrix.monitor.sampler import MonitorSample
from iomatrix.plan.model import Plan
from iomatrix.tiers import tier_class
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, RunsInterrupted, Tier


@dataclass(frozen=True)
class Ok:
    value: float = 100.0  # of the workload's primary metric
    wall_s: float = 1.0  # how long the run takes (on the fake clock and in its recorded span)
    # fio's total.iops, when the test needs it (offered load, a bare-metal maximum)
    iops: float | None = None


@dataclass(frozen=True)
class Fail:
    error: str = "scripted failure"
    wall_s: float = 1.0


@dataclass(frozen=True)
class Disturbed:
    """An ok run during which other work on the host took its CPUs (steal, and CPU pressure: steal
    alone is flagged but not retried): the runner must flag it and retry it."""

    value: float = 100.0
    wall_s: float = 1.0
    iops: float | None = None


@dataclass(frozen=True)
class Interrupt:
    """Ctrl-C while this run is going on: it never finishes; in a shared boot the runs before it
    did."""


Step = Ok | Fail | Disturbed | Interrupt
# What the host sampler reports during a quiet run and during a disturbed one (30% steal > the 2%
# limit, CPU pressure 40% > 10%, with no sample of the measured process: the pressure counts as an
# outside cause).
QUIET: dict[str, float] = {"cpu.steal_pct": 0.0, "psi.cpu_some_pct": 1.0}
BUSY: dict[str, float] = {"cpu.steal_pct": 30.0, "psi.cpu_some_pct": 40.0}


class FakeClock:
    """The runner's monotonic clock: it moves only when a scripted run takes time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Call:
    """One call of the tier (run or run_batch): its runs as (unit key, attempt), in order."""

    runs: tuple[tuple[str, int], ...]
    shared_boot: bool


class ScriptedHost:
    """The script of a test, and what happened.

    A run's step is looked up, in this order, by the run's number in the whole test (``per_run``: 1
    = the first run the tier was asked for, across sessions), by (unit key, attempt) or (workload
    name, attempt) in ``per_unit`` (the attempt counts every time the tier was asked to run the
    unit, interrupted runs included), else ``default`` (a step, or a function of (unit key, attempt)
    giving one)."""

    def __init__(
        self,
        per_unit: Mapping[tuple[str, int], Step] | None = None,
        per_run: Mapping[int, Step] | None = None,
        default: Step | Callable[[str, int], Step] = Ok(),
    ) -> None:
        self.per_unit = dict(per_unit or {})
        self.per_run = dict(per_run or {})
        self.default = default
        self.clock = FakeClock()
        self.attempts: Counter[str] = Counter()
        self.calls: list[Call] = []
        # (unit key, fio rate_iops) of every run of a rated workload
        self.offered: list[tuple[str, int | None]] = []
        self.runs_asked = 0
        # Recorded (wall-clock) span of every finished run, and whether the host was busy during it.
        self.spans: list[tuple[float, float, bool]] = []
        self._boots = 0

    # -- what the runner is given ------------------------------------------------------------------
    def tier_factory(self, name: str, plan: Plan, opts: RunOptions) -> Tier:
        cls = tier_class(name)
        assert issubclass(cls, FakeTier), f"{name} is not a scripted tier"
        return cls(plan, opts, self)

    def sampler(self, devices: list[str], interval: float) -> ScriptedSampler:
        return ScriptedSampler(self)

    # -- the runs ----------------------------------------------------------------------------------
    def _step(self, unit_key: str, workload: str) -> tuple[int, Step]:
        self.runs_asked += 1
        self.attempts[unit_key] += 1
        n = self.attempts[unit_key]
        if self.runs_asked in self.per_run:
            return n, self.per_run[self.runs_asked]
        step = self.per_unit.get((unit_key, n), self.per_unit.get((workload, n)))
        if step is None:
            step = self.default(unit_key, n) if callable(self.default) else self.default
        return n, step

    def perform(self, reqs: list[RunRequest], shared_boot: bool) -> list[RunOutcome]:
        """Run `reqs` one after the other by the script; a shared boot's runs get its id and their
        positions and, like the guest tier's, their own consecutive spans of the wall clock."""
        done: list[tuple[str, int]] = []
        self._boots += shared_boot
        boot_id = f"boot-{self._boots}" if shared_boot else None
        t = time.time()
        outcomes: list[RunOutcome] = []
        try:
            for pos, req in enumerate(reqs):
                key = f"{req.cell.key}::{req.workload.name}"
                n, step = self._step(key, req.workload.name)
                done.append((key, n))
                if req.workload.rate_iops is not None or req.workload.rate_of_max is not None:
                    self.offered.append((key, req.workload.rate_iops))
                if isinstance(step, Interrupt):
                    if shared_boot and outcomes:
                        raise RunsInterrupted([*outcomes, *[None] * (len(reqs) - pos)])
                    raise KeyboardInterrupt
                self.clock.now += step.wall_s
                self.spans.append((t, t + step.wall_s, isinstance(step, Disturbed)))
                if isinstance(step, Fail):
                    out = RunOutcome(ok=False, error=step.error, phases={"wall_s": step.wall_s})
                else:
                    metrics = {req.workload.primary_metric: step.value}
                    if step.iops is not None:
                        metrics.update({"total.iops": step.iops, "job.runtime_s": 1.0})
                    out = RunOutcome(ok=True, metrics=metrics, phases={"wall_s": step.wall_s})
                out.started_at, out.finished_at = t, t + step.wall_s
                t += step.wall_s
                if shared_boot:
                    out.boot_id, out.boot_position = boot_id, pos
                outcomes.append(out)
        finally:
            self.calls.append(Call(tuple(done), shared_boot))
        return outcomes


class ScriptedSampler:
    """The host sampler of one batch: a sample in the middle of each run that finished while it ran,
    busy for a disturbed run, quiet otherwise (times in seconds since start(), as HostSampler's)."""

    def __init__(self, host: ScriptedHost) -> None:
        self.host = host
        self.pids: list[int] = []
        self._first = 0
        self._t0 = 0.0

    def attach_pid(self, pid: int, role: str = "io") -> None:
        self.pids.append(pid)

    def followed_processes(self) -> list[dict[str, object]]:
        return [{"pid": pid, "name": "fake", "role": "io"} for pid in self.pids]

    def start(self) -> None:
        self._first = len(self.host.spans)
        self._t0 = time.time()

    def stop(self) -> list[MonitorSample]:
        return [
            MonitorSample((start + end) / 2 - self._t0, dict(BUSY if busy else QUIET))
            for start, end, busy in self.host.spans[self._first :]
        ]


class FakeTier(Tier):
    """Runs that follow the host's script, each with a process of its own."""

    name = "fake"
    summary = "scripted runs (the runner's tests)"
    # cache (and aio), like fio on the host without its modifier
    layers = frozenset({Layer.HOST_IO})
    overhead_s = 0.0

    def __init__(self, plan: Plan, opts: RunOptions, host: ScriptedHost) -> None:
        super().__init__(plan, opts)
        self.host = host

    def accel(self) -> str:
        return "none (scripted)"

    def run(self, req: RunRequest) -> RunOutcome:
        return self.host.perform([req], shared_boot=False)[0]


class FakeBatchTier(FakeTier):
    """Runs of one cell share a start-up, like the guest tier's boots: at most `batch_limit` a
    batch, and the runner's cache preparation runs during the start-up (as behind the guest tier's
    gate)."""

    name = "fake-batch"
    batches_runs = True
    overlaps_host_ready = True
    batch_limit: ClassVar[int] = 2

    @classmethod
    def max_batch(cls, cell: Cell) -> int:
        return cls.batch_limit

    def run_batch(
        self, reqs: list[RunRequest], host_ready: Callable[[], None] | None = None
    ) -> list[RunOutcome]:
        if host_ready is not None:
            host_ready()
        return self.host.perform(reqs, shared_boot=True)


class FakeHostLoadTier(FakeTier):
    """A tier whose runs load the host themselves (as consolidation's guests do): flagged, never
    retried."""

    name = "fake-load"
    loads_host = True


class FakeReferenceTier(FakeTier):
    """The reference (bare metal) of a scripted sweep: a baseline, and what a rate-of-maximum
    workload's rate is a share of. Not in SCRIPTED_TIERS (a second reference tier is registered only
    by the tests that need one)."""

    name = "fake-ref"
    is_reference = True


SCRIPTED_TIERS: tuple[type[FakeTier], ...] = (FakeTier, FakeBatchTier, FakeHostLoadTier)
