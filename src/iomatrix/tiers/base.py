"""The interface every tier implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from iomatrix.fio.jobs import JobShape
from iomatrix.matrix import Cell
from iomatrix.workloads import Workload


@dataclass(frozen=True)
class Target:
    """Where a run's data lives: a directory to create files in, or a whole block device."""

    kind: str  # "dir" | "device" | "null"
    path: Path | None


@dataclass(frozen=True)
class RunRequest:
    cell: Cell
    workload: Workload
    target: Target
    shape: JobShape
    run_dir: Path  # scratch directory for this run's files (inside the working dir)
    timeout_s: float
    wrapper: list[str] = field(default_factory=list)  # argv prefix from the host modifier (eatmydata)
    on_process: Callable[[int], None] | None = None  # told the pid doing the I/O (fio or QEMU)
    options: dict[str, Any] = field(default_factory=dict)  # tier-specific plan options


@dataclass
class RunOutcome:
    ok: bool
    metrics: dict[str, float] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    job_text: str = ""
    raw_output: str = ""
    console_tail: str = ""
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Tier(Protocol):
    name: str

    def accel(self) -> str:
        """The accelerator recorded with every result of this tier."""
        ...

    def run(self, req: RunRequest) -> RunOutcome: ...
