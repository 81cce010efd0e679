"""Hosts sweeping one shared backend start their runs together (`iomatrix run --start-at`, issue
35), and the fleet report says which did and how long their runs overlapped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.report.fleet import select_fleet
from iomatrix.report.fleet_render import render_fleet
from iomatrix.report.formats import OutputFormat
from iomatrix.store import Store
from iomatrix.store.merge import merge
from iomatrix.sweep.start import parse_start_at, wait_until
from tests.conftest import run_cli
from tests.test_merge import AXES, host_facts, run

NOW = 1_764_054_000.0  # 2025-11-25 07:00:00 UTC


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("1764054030", NOW + 30),
        (" 1764054030.5 ", NOW + 30.5),
        ("2025-11-25T07:00:30Z", NOW + 30),
        ("2025-11-25T08:00:30+01:00", NOW + 30),
    ],
)
def test_a_start_time_is_epoch_seconds_or_an_iso_time_with_its_zone(text: str, at: float) -> None:
    assert parse_start_at(text, NOW) == at


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("soon", "is not a time"),
        ("2025-11-25T07:00:30", "has no time zone"),
        ("1764054030000", "hours ahead"),
        ("nan", "is not a time"),
    ],
)
def test_a_bad_start_time_is_one_line(text: str, why: str) -> None:
    with pytest.raises(UserError, match=why):
        parse_start_at(text, NOW)


def test_the_cli_refuses_a_bad_start_time_before_anything_is_made(tmp_path: Path) -> None:
    proc = run_cli("run", "quick", "--db", "r.sqlite", "--start-at", "tomorrow", cwd=tmp_path)
    assert proc.returncode != 0 and "--start-at 'tomorrow' is not a time" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r.sqlite").exists()


class FakeClock:
    """Wall-clock time that moves only when slept on (hyperfine's mock executor habit: no real
    waiting)."""

    def __init__(self, t: float) -> None:
        self.t = t
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_a_host_ready_early_waits_for_the_common_time_and_a_late_one_starts_at_once() -> None:
    clock, told = FakeClock(NOW), []
    early = wait_until(NOW + 3.2, clock, clock.sleep, told.append)
    assert clock.t == pytest.approx(NOW + 3.2) and told == [pytest.approx(3.2)]
    assert (early.waited_s, early.late_s) == (pytest.approx(3.2), 0.0) and max(clock.slept) <= 0.5
    assert "waited 3.2 s to start at 07:00:03 UTC" in early.describe()
    late = wait_until(NOW - 4.0, FakeClock(NOW), clock.sleep)
    assert (late.waited_s, late.late_s) == (0.0, 4.0) and "started 4.0 s after" in late.describe()


def _host_db(path: Path, name: str, at: float | None, first: float, last: float) -> None:
    """One host's finished sweep of the same plan: two ok runs spanning first..last, given start
    time `at`."""
    store = Store(path)
    sweep = store.create_sweep(
        store.host_id(host_facts(name)),
        "shared-backend",
        "fp",
        '{"name": "x"}',
        [],
        [],
        metric_registry={"read.iops": {"unit": "IOPS", "direction": "higher"}},
    )
    cell = store.cell_id(sweep, "c", AXES, {"fs": "ext4"})
    extra = {} if at is None else {"started_together": {"at": at, "waited_s": 1.0, "late_s": 0.0}}
    for t0 in (first, last - 2.5):
        rec = run(cell, "rand-read-4k", 100.0, t0=t0)
        store.record_run(type(rec)(**{**rec.__dict__, "meta": {**(rec.meta or {}), **extra}}))
    store.set_sweep_status(sweep, "finished")
    store.close()


def test_the_fleet_says_which_hosts_ran_together_and_for_how_long_all_at_once(
    tmp_path: Path,
) -> None:
    _host_db(tmp_path / "a.sqlite", "host-a", NOW, NOW + 1, NOW + 40)
    # set up more slowly, finished first
    _host_db(tmp_path / "b.sqlite", "host-b", NOW, NOW + 6, NOW + 30)
    # not given the time: not counted
    _host_db(tmp_path / "c.sqlite", "host-c", None, NOW + 2, NOW + 50)
    merge(tmp_path / "fleet.sqlite", [tmp_path / f"{h}.sqlite" for h in "abc"])
    store = Store.open_existing(tmp_path / "fleet.sqlite")
    fleet = select_fleet(store)
    [together] = fleet.together
    assert together.hosts == ("host-a", "host-b")
    assert together.overlap_s == pytest.approx(24.0) and together.late_s == pytest.approx(6.0)
    text = render_fleet(fleet, [], OutputFormat.table, 200)
    assert (
        "host-a, host-b started their runs together at 2025-11-25 07:00:00 UTC (run "
        "--start-at); all 2 were "
        "running at once for 24 s"
    ) in " ".join(text.split())
    data = json.loads(render_fleet(fleet, [], OutputFormat.json, 200))
    rows = next(t for t in data if t["title"].startswith("hosts that started their runs together"))[
        "rows"
    ]
    assert [(r["host"], r["all_running_at_once_s"]) for r in rows] == [
        ("host-a", 24.0),
        ("host-b", 24.0),
    ]


def test_hosts_given_one_time_whose_runs_never_overlapped_are_said_to_have_run_alone(
    tmp_path: Path,
) -> None:
    _host_db(tmp_path / "a.sqlite", "host-a", NOW, NOW + 1, NOW + 10)
    _host_db(tmp_path / "b.sqlite", "host-b", NOW, NOW + 20, NOW + 30)
    merge(tmp_path / "fleet.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    [together] = select_fleet(Store.open_existing(tmp_path / "fleet.sqlite")).together
    assert together.overlap_s == 0 and "never all overlapped" in together.text()
