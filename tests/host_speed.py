"""How fast the machine under the suite was, said at the end of every suite run.

A suite's wall time is the machine's as much as the code's: the same tests (b73a40b and c31d012,
whose only differences print text) took 19.8 min on one 2-vCPU VM and 33–35 min on another, where
test_guest_sweep's TCG sweep alone took 67–68 s at either commit against 57 s inside a loaded suite
before. A suite time in docs/benchmarks.md is only comparable with the machine's speed beside it, so
the controller measures it and the log keeps it:

- a fixed pure-Python loop (the best of 3), timed before the tests: the vCPU's speed for the
  interpreter the tests and the CLI run in, and, roughly, for QEMU's TCG;
- the CPUs' time over the run from /proc/stat: busy (user + system + irq), and steal (the hypervisor
  ran another guest on a vCPU that had work).

Read-only: it starts nothing and writes nothing but the summary line.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# sum(range(LOOP_N)): 0.11–0.13 s on the quiet 2-vCPU EPYC VM where the suite took 34 min
LOOP_N = 5_000_000


def loop_seconds(repeat: int = 3) -> float:
    """The best of `repeat` timings of the fixed loop (the best: the least disturbed)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        sum(range(LOOP_N))
        best = min(best, time.perf_counter() - started)
    return best


@dataclass(frozen=True)
class CpuTimes:
    """The `cpu` line of /proc/stat, in clock ticks: all CPUs summed since boot."""

    busy: int  # user + nice + system + irq + softirq
    idle: int  # idle + iowait
    steal: int

    @classmethod
    def read(cls, stat: Path = Path("/proc/stat")) -> CpuTimes | None:
        try:
            first = stat.read_text().splitlines()[0].split()
        except (OSError, IndexError):
            return None
        if not first or first[0] != "cpu" or len(first) < 9:
            return None
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in first[1:9])
        return cls(user + nice + system + irq + softirq, idle + iowait, steal)


def summary(before: CpuTimes | None, after: CpuTimes | None, loop_s: float) -> str:
    """One line: the loop's seconds, and the CPUs' busy and steal shares over the run. From
    CpuTimes(100, 100, 0) to CpuTimes(180, 110, 10): 80 ticks busy, 10 idle, 10 stolen, so "busy
    80% of their time, steal 10%"."""
    cpus = os.cpu_count() or 1
    line = f"host speed: a fixed pure-Python loop in {loop_s:.3f} s (best of 3, before the tests)"
    if before is None or after is None:
        return line + "; /proc/stat not readable"
    busy = after.busy - before.busy
    idle = after.idle - before.idle
    steal = after.steal - before.steal
    total = busy + idle + steal
    if total <= 0:
        return line
    return (
        f"{line}; over the run the CPUs were busy {100 * busy / total:.0f}% of their time, "
        f"steal {100 * steal / total:.0f}% ({cpus} CPUs)"
    )
