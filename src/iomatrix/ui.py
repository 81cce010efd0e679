"""Terminal presentation: the consoles and how a figure is written. Cheap to import (the CLI's start-up
imports it); the sweep's progress display, which needs the runner, is in `commands/progress.py`."""

from __future__ import annotations

import sys

from rich.console import Console

# Piped output (CI logs, `| less`) gets wide lines instead of rich's 80-column default.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"
