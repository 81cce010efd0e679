"""The progress display of `iomatrix run`: in a terminal one live line (units done / total, runs,
elapsed and ETA, the cell running, disturbed runs counted); outside a terminal one line of at most
the report width (100 unless COLUMNS says otherwise) per run, and every 5 minutes where the sweep
stands (runs done of about how many, the rest at its pace). A disturbed run's full reasons are in
the database ('iomatrix results' shows them) and, with `--verbose`, on the run's line.

Apart from `ui.py` because it builds on the runner: only the `run` command imports it, when it runs,
so the CLI's start-up (`iomatrix --help`) does not import the runner."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from iomatrix import runner
from iomatrix.matrix import Unit
from iomatrix.report.naming import SEPARATOR, CellNames, cell_names
from iomatrix.tiers.base import RunOutcome
from iomatrix.ui import console, print_line, report_width

DISTURBED = " — disturbed: "
# Outside a terminal (a log, a CI job, `nohup`), where there is no live line with its ETA, a line of
# where the sweep stands at most this often: a full guest matrix runs for hours, and its log said
# only each run.
PROGRESS_EVERY_S = 300.0


def run_line(
    mark: str,
    cell: str,
    workload: str,
    summary: str,
    width: int,
    verbose: bool,
    short: str | None = None,
) -> str:
    """One finished run as one line: the full summary with `verbose`, else at most `width`
    characters (a disturbed run says so; its reasons are in the database). The cell is named by
    `short` where the sweep gave one (its settings that vary among the sweep's cells,
    report/naming.py: 'raw · writeback'), else by the values it sets. What is shortened to fit is
    the cell's name, never the measured value (the value is what the line is for), and a name is
    shortened by whole settings from its middle ('qcow2 · … · whole-image'), never mid-word."""
    head, sep, _reasons = summary.partition(DISTURBED)
    # what it sets
    cell = " ".join(p for p in cell.split() if not p.endswith("=-") and p != "modifier=none")
    tail = f" · {workload}: {summary if verbose else head + (' · disturbed' if sep else '')}"
    if verbose:
        return f"{mark} {cell}{tail}"
    name = short or cell
    if len(mark) + 1 + len(name) + len(tail) <= width:
        return f"{mark} {name}{tail}"
    room = width - len(mark) - 1 - len(tail)
    # 'cache=none aio=native' → ['none', 'native']
    parts = short.split(SEPARATOR) if short else [p.split("=", 1)[-1] for p in cell.split()]
    return f"{mark} {_fitted_name(parts, room)}{tail}"


def _fitted_name(parts: list[str], room: int) -> str:
    """A cell's settings joined, shortened by whole settings to `room` characters where it can be:
    the start and the end of the name stay, which is where cells of a sweep differ: the setting
    nearest the middle goes first, its place said once by '…'; the first setting alone when even
    that does not fit."""
    name = SEPARATOR.join(parts)
    while len(name) > room and sum(p != "…" for p in parts) > 2:
        real = [i for i, p in enumerate(parts) if p != "…"]
        parts[real[len(real) // 2]] = "…"
        parts = [p for i, p in enumerate(parts) if not (p == "…" and i and parts[i - 1] == "…")]
        name = SEPARATOR.join(parts)
    return parts[0] if len(name) > room else name


def progress_note(done: int, total: int, resumed: int, elapsed_s: float) -> str:
    """Where a sweep stands, for a log: runs done of the runner's estimate of its total, the time
    since it started, and what the rest takes at this sweep's own pace so far (its runs, not the
    ones a resumed sweep kept). The total is an estimate (racing adds runs to close cells and skips
    settled ones), so both figures say "about".

    e.g. progress_note(112, 560, 0, 2040.0) == 'progress: 112 of about 560 runs done, 34 min in;
    about 2.3 h more at this pace'"""
    from iomatrix.estimate import duration_text

    own = done - resumed
    line = f"progress: {done} of about {max(total, done)} runs done, {duration_text(elapsed_s)} in"
    if own > 0 and total > done:
        line += f"; about {duration_text(elapsed_s / own * (total - done))} more at this pace"
    return line


class RichProgress(runner.Progress):
    """One live line in a terminal; one short line per finished run elsewhere (every line with
    `verbose`)."""

    def __init__(self, verbose: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.live = sys.stdout.isatty()
        # a log's progress lines (PROGRESS_EVERY_S) read the bar's task (runs done, the runner's
        # total, the time since the start, on `clock`), which counts whether or not it is drawn;
        # kept here: the runs an interrupted sweep kept (not this sweep's pace) and the last line's
        # time
        self.clock = clock
        self.resumed = 0
        self.noted = 0.0
        self.names: CellNames | None = None
        self.verbose = verbose
        self.disturbed = 0
        self.where = "starting"
        self.bar = Progress(
            # plain text: a workload named 'file:[bold]x.fio' or ':x:' is shown as written (a
            # markup column parses emoji codes too)
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(bar_width=12),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=not self.live,
            get_time=clock,
        )
        self.task = None

    def cells(self, labels: Sequence[str]) -> None:
        self.names = cell_names(labels)

    def start(self, total_estimate: int, resumed_runs: int) -> None:
        self.resumed, self.noted = resumed_runs, self.clock()
        self.bar.start()
        self.task = self.bar.add_task("starting", total=total_estimate, completed=resumed_runs)
        if resumed_runs:
            console.print(f"resuming: {resumed_runs} completed runs kept, skipping them")

    def grow(self, total_estimate: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, total=total_estimate)

    def run_started(
        self, index: int, unit: Unit, attempt: int, cell_no: int, cell_count: int
    ) -> None:
        self.where = f"cell {cell_no}/{cell_count} · {unit.workload.name} · run {attempt}"
        self._describe()

    def _describe(self) -> None:
        if self.task is not None:
            disturbed = f" · {self.disturbed} disturbed" if self.disturbed else ""
            self.bar.update(self.task, description=f"{self.where}{disturbed}")

    def run_finished(self, unit: Unit, outcome: RunOutcome, summary: str) -> None:
        self.disturbed += DISTURBED in summary
        if self.verbose or not self.live or not outcome.ok:
            # The mark is plain text: a line measured in characters is the line printed.
            line = run_line(
                "ok" if outcome.ok else "FAILED",
                unit.cell.label(),
                unit.workload.name,
                summary,
                min(report_width(), 100),
                self.verbose,
                short=self.names.of(unit.cell.label()) if self.names else None,
            )
            console.print(line, markup=False, highlight=False, soft_wrap=self.verbose)
        self._describe()
        if self.task is None:
            return
        self.bar.advance(self.task)
        if not self.live and (now := self.clock()) - self.noted >= PROGRESS_EVERY_S:
            self.noted = now
            (task,) = self.bar.tasks  # (the one task `start` added)
            done, total = int(task.completed), int(task.total or 0)
            print_line(progress_note(done, total, self.resumed, task.elapsed or 0.0), dim=True)

    def message(self, text: str) -> None:
        # whole in a log: "guest booting: … console: …" was broken at 100 columns there (issue 70)
        print_line(text, dim=True)

    def stop(self) -> None:
        self.bar.stop()
