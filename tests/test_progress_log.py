"""Where a long sweep stands, in a log: outside a terminal (no live line, no ETA) `run` says every
PROGRESS_EVERY_S how many runs are done of about how many, and what the rest takes at the sweep's
own pace (a full guest matrix runs for hours; its log said only each run)."""

from __future__ import annotations

import pytest

from iomatrix import workloads as wl
from iomatrix.commands.progress import PROGRESS_EVERY_S, RichProgress, progress_note
from iomatrix.matrix import Cell, Unit
from iomatrix.tiers.base import RunOutcome


def test_the_note_says_runs_done_of_about_how_many_and_the_rest_at_this_pace() -> None:
    assert progress_note(112, 560, 0, 2040.0) == (
        "progress: 112 of about 560 runs done, 34 min in; about 2.3 h more at this pace"
    )
    # the pace is this sweep's own runs: 100 runs kept from an interrupted sweep took no time here
    assert progress_note(300, 560, 100, 3600.0).endswith("about 78 min more at this pace")
    # nothing run yet here, or nothing left: no guess of what is left
    assert "more" not in progress_note(100, 560, 100, 30.0)
    assert progress_note(560, 560, 0, 3600.0) == "progress: 560 of about 560 runs done, 60 min in"
    # a racing sweep can run past its first estimate: never "560 of about 500"
    assert progress_note(560, 500, 0, 3600.0).startswith("progress: 560 of about 560 runs")


def test_a_log_gets_a_progress_line_at_most_every_five_minutes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = [1000.0]
    progress = RichProgress(clock=lambda: now[0])
    assert not progress.live  # (pytest's captured stdout is not a terminal)
    unit = Unit(Cell.of(tier="blocklayer", format="raw", cache="none"), wl.resolve("rand-read-4k"))
    outcome = RunOutcome(ok=True, metrics={"read.iops": 1000.0}, phases={"wall_s": 60.0})
    progress.start(20, 0)
    seen = []
    for _ in range(12):  # a run a minute
        now[0] += 60.0
        progress.run_finished(unit, outcome, "read.iops=1,000.0 (wall 60.0 s)")
        seen += [
            line for line in capsys.readouterr().out.splitlines() if line.startswith("progress:")
        ]
    progress.stop()
    # at 5 and 10 minutes: 5 and 10 runs of 20 done, the rest at a minute a run
    assert seen == [
        "progress: 5 of about 20 runs done, 5.0 min in; about 15 min more at this pace",
        "progress: 10 of about 20 runs done, 10 min in; about 10 min more at this pace",
    ]
    assert PROGRESS_EVERY_S == 300.0


def test_a_logs_tcg_warning_is_one_line_and_a_reports_fits_its_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run`'s end in a log: 'warning: TCG (software emulation): … the' / 'storage stack.' was
    split at 100 columns; a report's warning still fits the report's width."""
    from iomatrix.commands.common import warn_tcg
    from iomatrix.guest.accel import TCG_WARNING
    from iomatrix.ui import err_console

    monkeypatch.setattr(err_console, "width", 100)  # (the width a pipe gets; COLUMNS may differ)
    assert len(TCG_WARNING) > err_console.width  # (else there is nothing to wrap)
    warn_tcg(["none (bare metal)", "tcg"], whole=True)
    assert capsys.readouterr().err == f"warning: {TCG_WARNING}\n"
    warn_tcg(["tcg"])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) > 1 and all(len(line) <= err_console.width for line in lines)
    warn_tcg(["kvm"], whole=True)
    assert capsys.readouterr().err == ""
