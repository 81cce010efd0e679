"""The terminal tables of `monitor` and `results` read at 80 and 100 columns: no heading or value
cut to '…', no line wider than the terminal, the default `monitor` works on every run, `results
--monitor` shows the host monitor and `results --metric all` keeps each metric's name, n and CI."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from iomatrix.report.terminal import monitor_heading
from tests.conftest import DATA, iomatrix_argv

QUICK = DATA / "golden" / "quick-sweep.sqlite"
OLD_RELEASE = DATA / "golden" / "interrupted-schema4.sqlite"
FIRST_RELEASE = DATA / "schema1" / "iomatrix-schema1.sqlite"


def _cli(width: int, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*iomatrix_argv(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env={**os.environ, "COLUMNS": str(width)},
    )


def _copy(src: Path, tmp_path: Path) -> Path:
    db = tmp_path / src.name
    shutil.copy(src, db)
    return db


def _wider(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.mark.parametrize("width", [80, 100])
def test_monitor_prints_every_field_whole_within_the_width(tmp_path: Path, width: int) -> None:
    db = _copy(QUICK, tmp_path)
    proc = _cli(width, "monitor", "--run", "1", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "…" not in proc.stdout, proc.stdout
    assert not _wider(proc.stdout, width), _wider(proc.stdout, width)
    fields = [
        f
        for (f,) in sqlite3.connect(db).execute(
            "SELECT DISTINCT field FROM monitor WHERE run_id = 1"
        )
        if f.split(".")[0] in ("cpu", "disk", "mem", "proc")
    ]
    assert fields
    for f in fields:
        assert monitor_heading(f) in proc.stdout, f


def test_monitor_with_default_fields_works_on_a_run_without_disk_fields(tmp_path: Path) -> None:
    db = _copy(QUICK, tmp_path)
    # a run sampled where no block device was watched (no disk.* field)
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM monitor WHERE run_id = 1 AND field LIKE 'disk.%'")
    proc = _cli(100, "monitor", "--run", "1", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usr %" in proc.stdout and "used MiB" in proc.stdout
    asked = _cli(100, "monitor", "--run", "1", "--db", str(db), "--fields", "disk.", cwd=tmp_path)
    assert asked.returncode == 2 and "'disk.'" in asked.stderr  # asked for by name: still an error


def test_results_monitor_adds_the_host_monitor(tmp_path: Path) -> None:
    db = _copy(QUICK, tmp_path)
    plain = _cli(80, "results", "--db", str(db), cwd=tmp_path)
    with_monitor = _cli(80, "results", "--monitor", "--db", str(db), cwd=tmp_path)
    assert with_monitor.returncode == 0, with_monitor.stderr
    assert with_monitor.stdout != plain.stdout
    assert "host CPU %" in with_monitor.stdout and "iowait %" in with_monitor.stdout
    assert not _wider(with_monitor.stdout, 80)


@pytest.mark.parametrize("width", [80, 100])
def test_results_metric_all_keeps_the_metric_n_and_ci(tmp_path: Path, width: int) -> None:
    db = _copy(QUICK, tmp_path)
    proc = _cli(width, "results", "--metric", "all", "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not _wider(proc.stdout, width), _wider(proc.stdout, width)
    heads = [
        line.split() for line in proc.stdout.splitlines() if line.split()[:2] == ["metric", "n"]
    ]
    assert heads and all(h[:5] == ["metric", "n", "mean", "95%", "CI"] for h in heads)
    for metric in ("read.iops", "cpu.sys_pct", "read.clat_p99_us"):
        assert metric in proc.stdout


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("db", [OLD_RELEASE, FIRST_RELEASE], ids=["schema4", "schema1"])
@pytest.mark.parametrize("command", [("rank",), ("results",)])
def test_old_databases_print_within_the_width(
    tmp_path: Path, width: int, db: Path, command: tuple[str, ...]
) -> None:
    proc = _cli(width, *command, "--db", str(_copy(db, tmp_path)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not _wider(proc.stdout, width), _wider(proc.stdout, width)


CEPH = DATA / "answers" / "ceph-flush-trap.sqlite"  # cell names of 70 characters
# a figure as a table writes it: 4,673 · 5,067–9,437 · (0.47–0.76)
FIGURE = re.compile(r"[(≥±]*\d[\d,.–×%/]*[)]*")


def _figures(text: str) -> set[str]:
    """The figures of a text, but for the line saying which columns were left out to fit the
    width."""
    return {
        w
        for line in text.splitlines()
        if "left out to fit" not in line
        for w in line.split()
        if FIGURE.fullmatch(w)
    }


@pytest.mark.parametrize("command", ["rank", "results"])
def test_rank_and_results_fit_80_and_100_columns_without_splitting_a_figure(command: str) -> None:
    """At 80 and 100 columns every line fits and every figure printed is one the wide table prints
    whole (issue 49: the DataTables were drawn 100 wide whatever COLUMNS said, and folded figures:
    "(4,673–3 / 2,333)"; at 80 columns the rank table squeezed its figures out of sight beside a
    70-character cell name)."""

    def at(width: int) -> str:
        proc = subprocess.run(
            [*iomatrix_argv(), command, "--db", str(CEPH)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": str(width)},
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    whole = _figures(at(400))
    for width in (80, 100):
        text = at(width)
        assert max(len(line) for line in text.splitlines()) <= width
        assert _figures(text) <= whole, sorted(_figures(text) - whole)
        # rank: the geometric mean it orders by (issue 70), the mean's interval beside it
        assert "7,150" in text and "5,067–9,437" in text if command == "rank" else "7,026" in text
