"""bench/quickstart.py judges a quickstart per role (issue 53): settled, tied or equivalent ("keep
…") answer a role, only leading does not; a run meets the target when every role is answered and the
total is within 360 s; `--runs N` says how many runs did. Judged here on `iomatrix recommend
--format json` over captured `quick` sweeps given a role of the user's (the sweep itself is the
lead's to run, on a quiet host)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import run_cli

CAPTURED = Path(__file__).parent / "data" / "quick-reversals"
BENCH = Path(__file__).parent.parent / "bench" / "quickstart.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("bench_quickstart", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _role_sweep(tmp_path: Path, sweep: str, workload: str, margin: float) -> str:
    """`recommend --format json` over a copy of a captured sweep whose `workload` is the one job of
    a role [role.mine] with `margin`."""
    db = tmp_path / f"{sweep}.sqlite"
    shutil.copy(CAPTURED / f"{sweep}.sqlite", db)
    con = sqlite3.connect(db)
    try:
        plan = json.loads(con.execute("SELECT plan_json FROM sweeps").fetchone()[0])
        plan["role"] = {
            "mine": {"jobs": {"j": "j.fio"}, "decides": ["j:total.iops"], "margin": margin}
        }
        con.execute("UPDATE sweeps SET plan_json = ?", (json.dumps(plan),))
        for table in ("runs", "unit_stops"):
            con.execute(
                f"UPDATE {table} SET workload = 'file:j.fio' WHERE workload = ?", (workload,)
            )
        con.commit()
    finally:
        con.close()
    proc = run_cli("recommend", "--db", str(db), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_an_equivalent_role_is_answered(bench: ModuleType, tmp_path: Path) -> None:
    # Sweep c's random writes: raw and qcow2 under writeback shown within 10 %
    # (test_role_margin.py).
    told = _role_sweep(tmp_path, "sweep-c", "rand-write-4k", 0.10)
    out = bench.judge(250.0, 0, told, 360.0)
    assert out.by_role and out.statuses == {"mine": "equivalent"}
    assert out.all_answered and out.met and "mine equivalent (answered)" in out.summary()
    late = bench.judge(361.0, 0, told, 360.0)
    assert late.all_answered and not late.met  # over six minutes: missed, answered or not


def test_a_role_only_leading_is_not_answered(bench: ModuleType, tmp_path: Path) -> None:
    # Sweep a's random reads: 3 shared rounds between raw and qcow2 under writeback, inconclusive.
    out = bench.judge(250.0, 0, _role_sweep(tmp_path, "sweep-a", "rand-read-4k", 0.05), 360.0)
    assert out.statuses == {"mine": "provisional"} and not out.all_answered and not out.met
    assert "mine provisional (NOT answered)" in out.summary()


def test_without_roles_judged_per_workload(bench: ModuleType, tmp_path: Path) -> None:
    db = tmp_path / "a.sqlite"
    shutil.copy(CAPTURED / "sweep-a.sqlite", db)
    out = bench.judge(
        250.0,
        0,
        run_cli("recommend", "--db", str(db), "--format", "json", cwd=tmp_path).stdout,
        360.0,
    )
    assert not out.by_role and "rand-read-4k" in out.statuses and not out.met
    assert not bench.judge(100.0, 1, None, 360.0).met  # a failed quickstart: nothing read, missed


def test_runs_summary_needs_four_of_five(bench: ModuleType) -> None:
    def outcome(answered: bool, total: float = 250.0) -> object:
        status = "answer" if answered else "provisional"
        return bench.Outcome(total, 0, {"database": "answer", "file-server": status}, True, 360.0)

    four = [outcome(True)] * 4 + [outcome(False)]
    line, ok = bench.runs_summary(four, 4)
    assert ok and line.startswith(
        "runs that answered every role within the target: 4 of 5 (needed 4: met)"
    )
    line, ok = bench.runs_summary([outcome(True)] * 3 + [outcome(True, 400.0), outcome(False)], 4)
    assert not ok and "3 of 5" in line and "every role answered in 4, within the time in 4" in line


def test_first_snippet_end(bench: ModuleType) -> None:
    """The whole <disk> element's end, or the end of the <driver> short form, wrapped or not."""
    whole = ["Answer for vm", "  libvirt: libvirt domain XML", "    <disk>", "    </disk>"]
    assert bench.first_snippet_end(bench.Timeline([(0.0, t) for t in whole])) == 3
    short = [
        "Answer for vm",
        '  libvirt (virsh edit VM, the <disk>\'s <driver>): <driver name="qemu"',
        '    io="t" />',
        "    </disk>",
    ]
    assert bench.first_snippet_end(bench.Timeline([(0.0, t) for t in short])) == 2
    assert bench.first_snippet_end(bench.Timeline([(0.0, "Answer for vm")])) is None


def test_first_role_line(bench: ModuleType) -> None:
    tl = bench.Timeline(
        [
            (0.0, "setup: done"),
            (1.0, "Answer for vm · sweep 1 (quick, finished)"),
            (1.0, ""),
            (1.0, "For a database VM: use raw · cache=writeback (settled)"),
        ]
    )
    assert bench.first_role_line(tl) == 3
    assert bench.first_role_line(bench.Timeline([(0.0, "For a database VM: use x")])) is None


def test_a_cache_line_naming_two_workloads_counts_both(bench: ModuleType) -> None:
    """One decided line may hold several workloads (the 2026-11-28 batch's run 1 counted only
    file-server:files from "… on database:data, 1.33× … on file-server:files (decided)"); a per-cell
    line is not decided for the workload it names."""
    o = bench.Outcome(
        250.0,
        0,
        {"database": "answer"},
        True,
        360.0,
        axis_lines=[
            "cache: writeback, 2.09× (1.72–2.53) lower latency than cache=none on database:data "
            "(2.08× at format=qcow2, 2.39× at format=raw), 1.33× (1.23–1.43) on file-server:files "
            "(decided)",
            "cache: decided per cell, its effect differs with the other axes (cache=none against "
            "writeback: 0.99× at format=qcow2, 1.13× at format=raw on database:log)",
        ],
    )
    assert o.cache_decided_on() == {
        "database:data": True,
        "file-server:files": True,
        "database:log": False,
    }
