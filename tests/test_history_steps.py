"""Lasting steps over a host's whole history (stats/steps.py, issue 52's step detection in the way
asv does it): the procedure on series with a known answer, its false-step rate on step-free series,
and `iomatrix history` showing the step at the sweep it starts from."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from iomatrix.stats.steps import detect_steps, real_steps
from iomatrix.store import Store
from tests.conftest import run_cli
from tests.test_merge import make_sweep


def _one_run_each(levels: list[float]) -> list[list[float]]:
    return [[x] for x in levels]


def test_the_docstrings_worked_example_is_one_step_of_19_percent_after_the_fourth_sweep() -> None:
    steps = detect_steps(_one_run_each([100, 98, 101, 99, 80, 82, 79, 81]))
    assert [(s.at, s.sweeps_before, s.sweeps_after) for s in steps] == [(4, 4, 4)]
    assert math.isclose(steps[0].ratio, 0.809, abs_tol=0.002) and steps[0].p < 0.05


def test_six_sweeps_cannot_show_a_step_and_a_lone_sweep_off_the_line_is_not_one() -> None:
    assert detect_steps(_one_run_each([100, 98, 101, 80, 82, 79])) == []  # p = 2/20 at best
    assert detect_steps(_one_run_each([100, 98, 101, 99, 60, 100, 99, 101, 98, 100])) == []


def test_a_slow_drift_no_consecutive_pair_shows_is_found() -> None:
    # 2 % lower every sweep, with ±1 % noise: no two neighbours differ by 5 %, the series by 30 %
    rng = random.Random(7)
    levels = [100 * 0.98**i * (1 + rng.uniform(-0.01, 0.01)) for i in range(16)]
    assert all(abs(b / a - 1) < 0.05 for a, b in itertools.pairwise(levels))
    steps = real_steps({"f": detect_steps(_one_run_each(levels))}, 0.05, 0.05)
    assert steps and all(s.ratio < 0.95 for s, _ in steps["f"])


def test_identical_sweeps_are_called_stepped_in_about_alpha_of_series() -> None:
    # step-free series of 4-30 sweeps, sweep-to-sweep noise 10 % (this host's 7-23 %), 3 runs each:
    # the permutation test holds its level (binomial 95 % upper bound for 5 % of 200 series is 8.5
    # %)
    rng = random.Random(52)
    stepped = 0
    for _ in range(200):
        n = rng.randint(4, 30)
        series = []
        for _ in range(n):
            day = rng.gauss(0, 0.1)
            series.append([math.exp(day + rng.gauss(0, 0.02)) for _ in range(3)])
        stepped += bool(real_steps({"f": detect_steps(series)}, 0.05, 0.05))
    assert stepped <= 17, stepped


def test_history_shows_a_lasting_step_at_the_sweep_it_starts_from(tmp_path: Path) -> None:
    path = tmp_path / "host.sqlite"
    s = Store(path)
    bases = [100, 98, 101, 99, 100, 80, 82, 79, 81, 80]
    for base in bases:
        make_sweep(s, "host-a", "quick", base=float(base))
    s.close()
    out = run_cli("history", "--db", str(path), "--format", "json")
    assert out.returncode == 0, out.stderr
    sweeps = json.loads(out.stdout)
    lasting = {
        i: s["lasting_steps_from_here"]
        for i, s in enumerate(sweeps)
        if s["lasting_steps_from_here"]
    }
    assert set(lasting) == {5}, lasting
    assert all(
        st["ratio"] < 0.85 and st["sweeps_before"] == 5 and st["p_adjusted"] < 0.05
        for st in lasting[5]
    )
    text = run_cli("history", "--db", str(path), "--workload", "rand-read-4k")
    assert "lasting step from here:" in text.stdout, text.stdout


def test_the_html_report_has_a_history_chart_per_host_with_the_step_marked(tmp_path: Path) -> None:
    from iomatrix.report.html import render_report

    path = tmp_path / "host.sqlite"
    s = Store(path)
    for base in [100, 98, 101, 99, 100, 80, 82, 79, 81, 80]:
        last = make_sweep(s, "host-a", "quick", base=float(base))
    make_sweep(s, "host-b", "quick", base=300.0)  # one sweep: no history of its own
    s.close()
    store = Store.open_existing(path)
    try:
        html = render_report(store, last)
    finally:
        store.close()
    assert 'id="history-1"' in html and "History: host-a" in html and "History: host-b" not in html
    section = html[html.index('id="history-1"') : html.index('id="sweep"')]
    assert "<svg" in section and "lasting step" in section and "stroke-dasharray" in section


def test_a_database_of_one_sweep_per_host_has_no_history_section(tmp_path: Path) -> None:
    from iomatrix.report.html import render_report

    path = tmp_path / "one.sqlite"
    s = Store(path)
    sid = make_sweep(s, "host-a", "quick")
    s.close()
    store = Store.open_existing(path)
    try:
        assert 'id="history-' not in render_report(store, sid)
    finally:
        store.close()


@pytest.mark.parametrize(
    "db",
    ["answers/ceph-flush-trap.sqlite", "answers/quick-roles.sqlite", "golden/quick-sweep.sqlite"],
)
def test_history_fits_100_columns_whether_or_not_stdout_is_a_terminal(db: str) -> None:
    """A sweep's figures one a line, cells named by what differs among the sweep's cells (what all
    share said once), a cell name too long for the line below its figure, broken only between its
    parts: no line over 100 characters (a ceph sweep's cells printed 170 before), nothing lost."""
    path = Path(__file__).parent / "data" / db
    out = run_cli("history", "--db", str(path))  # at COLUMNS=200, not a terminal
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines and max(map(len, lines)) <= 100, out.stdout
    answers = json.loads(run_cli("history", "--db", str(path), "--format", "json").stdout)
    for sweep in answers:
        for workload, answer in sweep["answers"].items():
            assert f"    {workload}: " in out.stdout
            # every part of the cell's full label is said: on its line, or once for every cell
            for part in answer["cell"].split():
                assert part in out.stdout or part.split("=", 1)[1] in out.stdout, part
