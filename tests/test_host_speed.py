"""tests/host_speed.py: the suite's log says how fast the machine was."""

from __future__ import annotations

import math
from pathlib import Path

from tests.host_speed import CpuTimes, loop_seconds, summary


def _stat(tmp_path: Path, cpu_line: str) -> Path:
    stat = tmp_path / "stat"
    stat.write_text(cpu_line + "\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    return stat


def test_cpu_times_sum_busy_idle_and_steal_from_the_cpu_line(tmp_path: Path) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    got = CpuTimes.read(_stat(tmp_path, "cpu  10 1 5 100 4 2 3 7 0 0"))
    assert got == CpuTimes(busy=10 + 1 + 5 + 2 + 3, idle=100 + 4, steal=7)


def test_an_unreadable_or_foreign_stat_gives_none_and_the_line_says_so(tmp_path: Path) -> None:
    assert CpuTimes.read(tmp_path / "missing") is None
    assert CpuTimes.read(_stat(tmp_path, "intr 1 2 3")) is None
    assert CpuTimes.read(_stat(tmp_path, "cpu 1 2")) is None
    line = summary(None, CpuTimes(1, 1, 0), 0.25)
    assert line.endswith("; /proc/stat not readable") and "0.250 s" in line


def test_the_summary_gives_busy_and_steal_shares_of_the_run() -> None:
    line = summary(CpuTimes(100, 100, 0), CpuTimes(180, 110, 10), 0.15)
    assert "loop in 0.150 s" in line
    assert "busy 80% of their time, steal 10%" in line
    # no time passed: no shares, no division by zero
    assert "busy" not in summary(CpuTimes(5, 5, 5), CpuTimes(5, 5, 5), 0.15)


def test_the_loop_is_timed() -> None:
    seconds = loop_seconds(repeat=1)
    assert math.isfinite(seconds) and seconds > 0
