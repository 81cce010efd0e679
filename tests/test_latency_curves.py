"""Latency against load: the knee (stats/knee.py), one curve per configuration of a queue-depth
family, the HTML report's curves and CPU-per-I/O bars, and the same numbers in rank's exports. A
real SQLite store written through the store's API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from iomatrix.cli import app
from iomatrix.report.curves import latency_curves, sweep_curves
from iomatrix.report.html import render_report
from iomatrix.report.objective import Objective
from iomatrix.report.query import cell_workloads
from iomatrix.stats.knee import knee_index
from iomatrix.store import RunRecord, Store
from tests.conftest import run_cli


def test_knee_is_the_first_point_where_latency_grows_faster_than_iops():
    # qd1→4: IOPS ×3.5 (+250%), p99 ×1.5 (+50%); 4→16: IOPS +20%, p99 +100%: the knee is the qd16
    # point.
    assert knee_index([(10_000, 100), (35_000, 150), (42_000, 300), (43_000, 1200)]) == 2
    # still scaling: every step's relative latency increase is below the relative IOPS increase
    assert knee_index([(1000, 100), (3000, 120), (8000, 150)]) is None
    # equal relative increases are not a knee (strictly faster)
    assert knee_index([(1000, 100), (2000, 200)]) is None
    assert knee_index([(1000, 100)]) is None and knee_index([]) is None
    assert knee_index([(0, 100), (2000, 200)]) is None  # a relative change from zero is undefined


def _axes(aio: str) -> dict[str, str]:
    return {
        "tier": "blocklayer",
        "format": "raw",
        "preallocation": "off",
        "cache": "none",
        "aio": aio,
        "bus": "-",
        "backing": "dir",
        "modifier": "none",
    }


# (IOPS, p99 µs) per queue depth: io_uring keeps scaling to qd16, threads saturates after qd4.
CURVES = {
    "io_uring": {1: (10_000, 100), 4: (35_000, 150), 16: (60_000, 250), 64: (62_000, 900)},
    "threads": {1: (9_000, 110), 4: (20_000, 400), 16: (21_000, 1500), 64: (21_500, 6000)},
}
CPU_US = {"io_uring": 12.0, "threads": 25.0}


def _store(tmp_path: Path) -> tuple[Path, Store, int]:
    path = tmp_path / "r.sqlite"
    store = Store(path)
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2}), "p", "fp", "{}", [], []
    )
    for aio, points in CURVES.items():
        axes = _axes(aio)
        cid = store.cell_id(sid, "/".join(axes.values()), axes, {})
        for rnd in range(3):
            f = 1 + 0.02 * rnd
            for qd, (iops, p99) in points.items():
                store.record_run(
                    RunRecord(
                        cell_id=cid,
                        workload=f"rand-read-4k-qd{qd}",
                        status="ok",
                        started_at=rnd,
                        finished_at=rnd + 1,
                        accel="none (QEMU block layer, no guest)",
                        cache_state="dropped",
                        page_cache_method="-",
                        metrics={
                            "read.iops": iops * f,
                            "total.iops": iops * f,
                            "read.clat_p99_us": p99 * f,
                            "cost.cpu_us_per_io": CPU_US[aio] * f,
                        },
                        phases={},
                        round=rnd + 1,
                        round_position=0,
                    )
                )
    store.set_sweep_status(sid, "finished")
    return path, store, sid


def test_one_curve_per_configuration_with_its_knee(tmp_path: Path):
    _, store, sid = _store(tmp_path)
    curves = {c.label: c for c in latency_curves(cell_workloads(store, sid))}
    uring = next(c for label, c in curves.items() if "io_uring" in label)
    threads = next(c for label, c in curves.items() if "threads" in label)
    assert [p.queue_depth for p in uring.points] == [1, 4, 16, 64]
    assert (uring.family, uring.iops_metric, uring.latency_metric) == (
        "rand-read-4k",
        "read.iops",
        "read.clat_p99_us",
    )
    # means over runs scaled by 1, 1.02, 1.04: 1.02 × the base values
    assert uring.points[0].p99_us.mean == pytest.approx(102.0) and uring.points[0].p99_us.n == 3
    assert uring.knee == 3  # 16→64: IOPS +3%, p99 +260%
    assert threads.knee == 1  # 1→4: IOPS +122%, p99 +264%
    assert [r["knee"] for r in threads.as_rows()] == [False, True, False, False]
    # a workload outside the family has no curve
    assert sweep_curves(store, sid, "rand-read-4k") == []


def test_a_lone_queue_depth_is_not_a_curve(tmp_path: Path):
    _, store, sid = _store(tmp_path)
    lone = [c for c in cell_workloads(store, sid) if c.workload == "rand-read-4k-qd16"]
    assert latency_curves(lone) == []


def test_html_report_draws_curves_and_cpu_per_io_bars(tmp_path: Path):
    _, store, sid = _store(tmp_path)
    html = render_report(store, sid)
    assert 'id="latency-load"' in html and 'id="cost"' in html
    curve = html[html.index('id="latency-load"') : html.index('id="cost"')]
    # one chart; both knees in the table
    assert curve.count("<svg") == 1 and curve.count(">knee</td>") == 2
    cost = html[html.index('id="cost"') : html.index('id="host"')]
    # one per qd workload
    assert "cost.cpu_us_per_io (lower is better)" in cost and cost.count("<svg") == 4


def test_html_report_by_objective(tmp_path: Path):
    _, store, sid = _store(tmp_path)
    html = render_report(store, sid, objective=Objective.p99_latency)
    assert "<p>objective: p99-latency (99th percentile completion latency" in html
    ranking = html[html.index('id="ranking"') : html.index('id="blocksize"')]
    assert "read.clat_p99_us (lower is better)" in ranking and "read.iops (higher" not in ranking
    assert "objective:" not in render_report(store, sid)


def test_rank_exports_carry_the_curve_numbers(tmp_path: Path):
    path, _, _ = _store(tmp_path)
    runner = CliRunner()
    out = runner.invoke(app, ["rank", "--db", str(path), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    tables = doc if isinstance(doc, list) else doc.get("tables", doc)
    text = json.dumps(tables)
    assert "latency against load" in text and '"knee": "knee"' in text
    table = runner.invoke(app, ["rank", "--db", str(path), "--workload", "rand-read-4k-qd4"])
    assert table.exit_code == 0, table.output
    assert "latency against load" in table.output and re.search(r"\bknee\b", table.output)
    cost = runner.invoke(
        app,
        ["rank", "--db", str(path), "--objective", "cpu-per-io", "--workload", "rand-read-4k-qd4"],
    )
    assert (
        cost.exit_code == 0
        and "objective: cpu-per-io" in cost.output
        and "cost.cpu_us_per_io" in cost.output
    )


def test_unknown_objective_is_one_line(tmp_path: Path):
    path, _, _ = _store(tmp_path)
    for command in ("rank", "recommend", "report --html r.html"):
        proc = run_cli(*command.split(), "--db", str(path), "--objective", "fastest", cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "unknown objective 'fastest'" in proc.stderr and "cpu-per-io" in proc.stderr
