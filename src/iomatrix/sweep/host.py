"""The host around a batch of runs: its caches made ready, the sampler that watches it, the
interference verdict on each run from the samples of its own span; and SIGTERM taken as Ctrl-C for
an orderly teardown."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from iomatrix.hygiene import CacheState, prepare_cache
from iomatrix.monitor.sample import MonitorSample
from iomatrix.monitor.summary import summarize_samples
from iomatrix.stats.interference import RunInterference, interference_flags, interference_scores


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
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
    """What the runner needs of a host sampler (monitor/sampler.py's HostSampler; a test's scripted
    host)."""

    def attach_pid(self, pid: int, role: str = "io") -> None: ...
    def followed_processes(self) -> list[dict[str, object]]: ...
    def start(self) -> None: ...
    def stop(self) -> list[MonitorSample]: ...


# (devices to sample, interval in seconds) → a sampler; raises ValueError for a device it cannot
# sample.
SamplerFactory = Callable[[list[str], float], HostMonitor]


class CachePreparation:
    """Sync and drop the host's caches (or keep them warm, as the plan says), before the runs or
    during a tier's shared start-up; what the first preparation did holds for every run of the
    batch."""

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
class BatchHost:
    """The host around one batch of runs, which each run is stored with its share of."""

    cache: CacheState
    notes: list[str]
    samples: list[MonitorSample]  # t: seconds since `started`
    started: float  # host clock (time.time()) when the sampler started
    finished: float
    batched: bool  # several runs: each keeps the samples of its own span
    # followed by the sampler (pid, name, role)
    processes: list[dict[str, object]] = field(default_factory=list)

    def samples_between(self, start: float, end: float) -> list[MonitorSample]:
        if not self.batched:
            return self.samples
        lo, hi = start - self.started, end - self.started
        return [x for x in self.samples if lo - 1e-6 <= x.t <= hi + 1e-6]


def judge_interference(
    samples: Sequence[MonitorSample], baseline: list[dict[str, float]] | None = None
) -> RunInterference | None:
    """The run's interference verdict from the host samples taken during it (None: nothing was
    sampled), relative to `baseline` (the sweep's earlier runs' scores; this run's are appended to
    it)."""
    if not samples:
        return None
    means = {k: f.mean for k, f in summarize_samples(samples).items()}
    cpus = os.cpu_count() or 1
    flags = interference_flags(means, cpus, baseline=baseline or ())
    if baseline is not None:
        baseline.append(interference_scores(means, cpus))
    return flags
