"""The progress display of `iomatrix run`: cell i/N, run j, a bar with ETA, one line per finished run.

Apart from `ui.py` because it builds on the runner: only the `run` command imports it, when it runs, so the
CLI's start-up (`iomatrix --help`) does not import the runner.
"""

from __future__ import annotations

import sys

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from iomatrix import runner
from iomatrix.matrix import Unit
from iomatrix.tiers.base import RunOutcome
from iomatrix.ui import console


class RichProgress(runner.Progress):
    """Cell i/N, run j, a bar with ETA, and one line per finished run."""

    def __init__(self) -> None:
        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
            disable=not sys.stdout.isatty())
        self.task = None

    def start(self, total_estimate: int, resumed_runs: int) -> None:
        self.bar.start()
        self.task = self.bar.add_task("starting", total=total_estimate, completed=resumed_runs)
        if resumed_runs:
            console.print(f"resuming: {resumed_runs} completed runs kept, skipping them")

    def grow(self, total_estimate: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, total=total_estimate)

    def run_started(self, index: int, unit: Unit, attempt: int, cell_no: int, cell_count: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, description=f"cell {cell_no}/{cell_count} · {unit.workload.name} · "
                                                   f"run {attempt}")

    def run_finished(self, unit: Unit, outcome: RunOutcome, summary: str) -> None:
        mark = "[green]✓[/]" if outcome.ok else "[red]✗[/]"
        console.print(f"{mark} {unit.cell.label()} · {unit.workload.name}: {summary}")
        if self.task is not None:
            self.bar.advance(self.task)

    def message(self, text: str) -> None:
        console.print(f"[dim]{text}[/]")

    def stop(self) -> None:
        self.bar.stop()
