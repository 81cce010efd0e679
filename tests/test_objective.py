"""`--objective`: rank and recommend by throughput, p99 latency or CPU per I/O, with each metric's
direction; runs that missed their offered load are never ranked. A real SQLite store written through
the store's API."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.report.objective import Objective, objective_metric, parse_objective
from iomatrix.report.query import cell_workloads
from iomatrix.report.rank import rank_sweep
from iomatrix.report.recommend import recommend
from iomatrix.report.render import render_recommendation
from iomatrix.report.results import results_document
from iomatrix.store import RunRecord, Store

WORKLOAD = "rand-write-4k-rate2000"


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


# Per aio mode: (p99 µs, CPU µs per I/O). threads answers faster at the tail, io_uring costs less
# CPU.
LEVELS = {"threads": (80.0, 30.0), "io_uring": (120.0, 15.0)}


def _store(tmp_path: Path) -> tuple[Store, int, int]:
    """Two block-layer cells at the same offered load over 4 rounds; io_uring's round-4 run reached
    only 80% of the 2000 IOPS offered (its p99 is far off: it must not count). Returns (store,
    sweep, that run's id)."""
    store = Store(tmp_path / "r.sqlite")
    sid = store.create_sweep(
        store.host_id({"hostname": "h", "cpu_count": 2}), "p", "fp", "{}", [], []
    )
    short = -1
    for aio, (p99, cpu) in LEVELS.items():
        axes = _axes(aio)
        cid = store.cell_id(sid, "/".join(axes.values()), axes, {})
        for rnd in range(4):
            f = 1 + 0.01 * rnd
            reached = not (aio == "io_uring" and rnd == 3)
            iops = 1995.0 if reached else 1600.0
            rid = store.record_run(
                RunRecord(
                    cell_id=cid,
                    workload=WORKLOAD,
                    status="ok",
                    started_at=rnd,
                    finished_at=rnd + 1,
                    accel="none (QEMU block layer, no guest)",
                    cache_state="dropped",
                    page_cache_method="-",
                    metrics={
                        "write.iops": iops,
                        "total.iops": iops,
                        "write.clat_p99_us": p99 * f if reached else 9e3,
                        "cost.cpu_us_per_io": cpu * f,
                        "load.target_iops": 2000.0,
                        "load.achieved_frac": iops / 2000,
                        "load.reached": 1.0 if reached else 0.0,
                    },
                    phases={},
                    round=rnd + 1,
                    round_position=0,
                )
            )
            if not reached:
                short = rid
    store.set_sweep_status(sid, "finished")
    return store, sid, short


def test_objective_picks_the_metric_and_its_direction(tmp_path: Path) -> None:
    store, sid, _ = _store(tmp_path)
    [cpu] = rank_sweep(store, sid, None, None, objective=Objective.cpu_per_io)
    assert cpu.metric == "cost.cpu_us_per_io" and not cpu.ranking.higher_is_better
    assert "aio=io_uring" in cpu.ranking.rows[0].name
    [lat] = rank_sweep(store, sid, None, None, objective=Objective.p99_latency)
    assert lat.metric == "write.clat_p99_us" and "aio=threads" in lat.ranking.rows[0].name
    # no objective: the workload's primary metric, as before
    [default] = rank_sweep(store, sid, None, None)
    assert default.metric == "write.clat_p99_us"


def test_offered_load_not_reached_is_never_ranked(tmp_path: Path) -> None:
    store, sid, short = _store(tmp_path)
    [uring] = [c for c in cell_workloads(store, sid) if c.axes["aio"] == "io_uring"]
    assert short not in uring.runs and uring.unreached == {short: 0.8}
    # the far-off p99 of the short run is not analysed
    assert 9e3 not in uring.samples["write.clat_p99_us"]
    [lat] = rank_sweep(store, sid, None, None, objective=Objective.p99_latency)
    [note] = [
        n for n in lat.notes() if n.startswith("offered load not reached, 1 run(s) not ranked")
    ]
    assert f"run(s) {short} (80% of it)" in note
    [cell] = [
        c
        for c in results_document(store, [sid], with_monitor=False)["sweeps"][0]["cells"]
        if c["axes"]["aio"] == "io_uring"
    ]
    assert cell["load_not_reached"] == [{"run_id": short, "achieved_frac": 0.8}]


def test_recommend_says_which_objective_was_used(tmp_path: Path) -> None:
    store, sid, _ = _store(tmp_path)
    rec = recommend(store, sid, objective=Objective.cpu_per_io)
    [v] = rec.verdicts
    assert (
        v.metric == "cost.cpu_us_per_io"
        and v.choice is not None
        and "aio=io_uring" in v.choice.cell
    )
    assert rec.as_dict()["objective"] == "cpu-per-io"
    assert "objective: cpu-per-io (host CPU time of the I/O path per I/O" in render_recommendation(
        rec, "table"
    )
    plain = recommend(store, sid)
    assert "objective" not in plain.as_dict() and "objective:" not in render_recommendation(
        plain, "table"
    )


def test_metric_and_objective_together_or_an_unknown_objective_are_refused(tmp_path: Path) -> None:
    store, sid, _ = _store(tmp_path)
    with pytest.raises(UserError, match="--metric and --objective"):
        rank_sweep(store, sid, None, "write.iops", objective=Objective.throughput)
    with pytest.raises(UserError, match="unknown objective 'latency'"):
        parse_objective("latency")
    assert parse_objective(None) is None and parse_objective("p99-latency") == Objective.p99_latency


def test_objective_metric_per_workload() -> None:
    assert objective_metric(Objective.throughput, "rand-read-4k") == "read.iops"
    assert objective_metric(Objective.throughput, "seq-write-1m") == "write.bw_mbps"
    # primary is its p99
    assert objective_metric(Objective.throughput, "rand-write-4k-qd1") == "write.iops"
    assert objective_metric(Objective.throughput, "mixed-70-30") == "total.iops"
    assert objective_metric(Objective.p99_latency, "mixed-70-30") == "read.clat_p99_us"
    assert objective_metric(Objective.p99_latency, "rand-write-4k-rate500") == "write.clat_p99_us"
    assert objective_metric(Objective.cpu_per_io, "seq-read-1m") == "cost.cpu_us_per_io"
    assert objective_metric(Objective.throughput, "file:jobs/a.fio") == "total.iops"
