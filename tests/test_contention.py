"""Many clients, one backend (issue 35): the `clients` axis, the contention run's aggregate, the
per-client rows in the store, the curves over N, and a real sweep of 1 and 2 clients on a
lab-started iSCSI target that leaves nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.iscsi import IscsiBacking
from iomatrix.backing.leftovers import clean
from iomatrix.domain import axes
from iomatrix.domain.axes import BackingFacts, RuleContext
from iomatrix.fio.parse import report_metrics
from iomatrix.matrix import Cell
from iomatrix.plan.load import load_plan
from iomatrix.report.contention import contention_curves
from iomatrix.report.query import CellWorkload
from iomatrix.store import Store
from iomatrix.tiers.contention import aggregate_metrics, client_reports_by_host, contention_job
from iomatrix.tiers.declared.blocklayer import BlockLayer
from iomatrix.tiers.declared.guest import Guest
from tests.conftest import descendants_named, iomatrix_argv, needs, root_only, run_cli

ISCSI = BackingFacts(None, True, False, protocol="iscsi")
LOCAL = BackingFacts(None, True, False)


def _why(facts: BackingFacts, **values: str) -> str | None:
    base = {a.name: a.default for a in axes.plan_axes()}
    cell = {**base, "tier": "blocklayer", "backing": "b", "bus": "-", "cache": "none", **values}
    return axes.prune_reason(cell, RuleContext(facts, "b"))


def test_clients_axis_prunes_local_backings_and_other_tiers_with_the_reason() -> None:
    assert _why(ISCSI, clients="2") is None
    assert _why(LOCAL, clients="1") is None
    assert "b is a local backing (no server to share): network backings only" in (
        _why(LOCAL, clients="4") or ""
    )
    guest = Cell.of(
        tier="guest", backing="iscsi", format="raw", cache="none", bus="virtio-blk", clients="2"
    )
    assert "block-layer tier only" in (Guest.prune_reason(guest, ISCSI) or "")
    assert (
        BlockLayer.prune_reason(
            Cell.of(tier="blocklayer", backing="iscsi", format="raw", clients="2"), ISCSI
        )
        is None
    )
    assert (
        axes.prune_reason(
            {
                **{a.name: a.default for a in axes.plan_axes()},
                "tier": "blocklayer",
                # a snippet: the user's storage, as they say
                "clients": "2",
            },
            RuleContext(),
        )
        is None
    )


def test_plan_reads_integer_clients_and_rejects_nonsense(tmp_path: Path) -> None:
    base = (
        'name = "c"\ntier = ["blocklayer"]\nworkloads = ["rand-read-4k"]\n[[backing]]\ntype '
        '= "iscsi"\n'
    )
    (tmp_path / "ok.toml").write_text(
        base.replace("[[backing]]", "clients = [1, 2, 4]\n[[backing]]")
    )
    proc = run_cli("plan", str(tmp_path / "ok.toml"), "--explain")
    assert proc.returncode == 0, proc.stderr
    assert "clients" in proc.stdout
    (tmp_path / "bad.toml").write_text(base.replace("[[backing]]", "clients = [0]\n[[backing]]"))
    proc = run_cli("plan", str(tmp_path / "bad.toml"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "not a number of clients" in proc.stdout + proc.stderr


def test_a_plan_without_clients_keeps_its_fingerprint(tmp_path: Path) -> None:
    base = (
        'name = "c"\ntier = ["blocklayer"]\nworkloads = ["rand-read-4k"]\n[[backing]]\ntype '
        '= "iscsi"\n'
    )
    (tmp_path / "a.toml").write_text(base)
    (tmp_path / "b.toml").write_text(base.replace("[[backing]]", "clients = [1]\n[[backing]]"))
    assert (
        load_plan(str(tmp_path / "a.toml"))[0].fingerprint()
        == load_plan(str(tmp_path / "b.toml"))[0].fingerprint()
    )


def test_contention_job_drops_only_the_per_interval_log_options() -> None:
    job = (
        "[global]\nioengine=nbd\nwrite_iops_log=iops\nlog_avg_msec=100\nper_job_logs=0\n"
        "[job]\nrw=randread\n"
    )
    assert contention_job(job) == "[global]\nioengine=nbd\n[job]\nrw=randread\n"


def _entry(host: str, iops: float, p99_ns: float, name: str = "job") -> dict:
    return {
        "hostname": host,
        "jobname": name,
        "error": 0,
        "job_runtime": 1000,
        "usr_cpu": 1.0,
        "sys_cpu": 2.0,
        "read": {
            "total_ios": int(iops),
            "iops": iops,
            "bw_bytes": iops * 4096,
            "clat_ns": {
                "mean": p99_ns / 2,
                "percentile": {"50.000000": p99_ns / 2, "99.000000": p99_ns},
            },
        },
    }


def test_client_reports_and_the_aggregate() -> None:
    report = {
        "client_stats": [
            _entry("b.sock", 1000.0, 4000.0),
            _entry("a.sock", 3000.0, 2000.0),
            _entry("a.sock", 4000.0, 0.0, name="All clients"),
        ]
    }
    reports = list(client_reports_by_host(report).values())
    assert [r["jobs"][0]["hostname"] for r in reports] == ["b.sock", "a.sock"]  # fio's sum left out
    per_client = [report_metrics(r) for r in reports]
    agg = aggregate_metrics(per_client, "read.iops")
    assert agg["read.iops"] == pytest.approx(4000.0)  # summed
    assert agg["cpu.sys_pct"] == pytest.approx(4.0)
    assert agg["read.clat_p99_us"] == pytest.approx(4.0)  # the worst client's
    # (1000+3000)²/(2·(1000²+3000²)) = 0.8
    assert agg["clients.fairness"] == pytest.approx(16e6 / (2 * 10e6))
    assert agg["clients.count"] == 2


def _cw(
    cell_id: int, clients: str, runs: list[int], iops: list[float], p99: list[float]
) -> CellWorkload:
    axes = {
        "tier": "blocklayer",
        "format": "raw",
        "cache": "none",
        "backing": "iscsi",
        "clients": clients,
    }
    cw = CellWorkload(cell_id, f"k{cell_id}", axes, {}, "rand-read-4k", ["none"], runs)
    cw.samples["read.iops"] = iops
    cw.samples["read.clat_p99_us"] = p99
    return cw


def test_curves_over_n_give_per_client_aggregate_fairness_and_saturation() -> None:
    cws = [
        _cw(1, "1", [1, 2, 3], [1000, 1010, 990], [100, 101, 99]),
        _cw(2, "2", [4, 5, 6], [1980, 2000, 2020], [210, 200, 205]),
        _cw(3, "4", [7, 8, 9], [2050, 2000, 1950], [420, 400, 410]),
    ]
    rows = {
        "read.iops": {
            4: [990, 990],
            5: [1000, 1000],
            6: [1010, 1010],
            7: [900, 500, 300, 350],
            8: [500, 500, 500, 500],
            9: [487.5] * 4,
        },
        "read.clat_p99_us": {
            4: [200, 210],
            5: [200, 200],
            6: [205, 205],
            7: [300, 420, 400, 400],
            8: [400] * 4,
            9: [410] * 4,
        },
    }
    [curve] = contention_curves(cws, rows)
    assert curve.label == "format=raw cache=none backing=iscsi"
    assert [p.clients for p in curve.points] == [1, 2, 4]
    one, two, four = curve.points
    assert (
        one.fairness is None
        and two.fairness is not None
        and two.fairness.mean == pytest.approx(1.0)
    )
    assert two.per_client.mean == pytest.approx(1000.0)
    assert four.per_client.mean == pytest.approx(500.0)
    assert four.fairness is not None and four.fairness.mean < 1.0  # run 7 was unfair
    assert four.worst_p99_us is not None and four.worst_p99_us.mean == pytest.approx(
        (420 + 400 + 410) / 3
    )
    assert curve.saturation == 2  # 1 → 2 doubled, 2 → 4 added nothing
    assert [r["saturation"] for r in curve.as_rows()] == [False, True, False]


SCRATCH = Path("/tmp/iomx-contention")

CONTENTION_PLAN = """
name = "contention-test"
tier = ["blocklayer"]
format = ["raw"]
preallocation = ["off"]
cache = ["none"]
aio = ["threads"]
clients = [1, 2]
workloads = ["rand-read-4k"]
size = "16M"
image_size = "64M"
runtime = 0.5
null_ceiling = false
time_budget = "10m"
[repetitions]
min = 2
max = 2
[[backing]]
type = "iscsi"
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="w-", dir=SCRATCH))
    yield d
    clean(d, mine=True)
    shutil.rmtree(d, ignore_errors=True)


def _ours(workdir: Path) -> list[str]:
    """Processes still running whose command line names the test's directory (tgtd, daemons, fio
    servers)."""
    return [
        f"{p.info['pid']} {p.info['name']}"
        for p in psutil.process_iter(["pid", "name", "cmdline"])
        if str(workdir) in " ".join(p.info["cmdline"] or [])
    ]


@needs("fio")
@needs("qemu-storage-daemon")
@root_only
@pytest.mark.slow
def test_one_and_two_clients_on_a_lab_iscsi_target_give_per_client_aggregate_and_fairness(
    workdir: Path,
) -> None:
    """`iomatrix run` with clients = [1, 2] on a lab-started tgtd: the two-client runs store each
    client's metrics and the aggregate (their sum) with Jain's index; `rank --format json` carries
    the curve; nothing is left (no tgtd, qemu-storage-daemon or fio server, no socket or LUN file,
    no ledger entry)."""
    if (why := IscsiBacking().availability(set())) is not None:
        pytest.skip(why)
    (workdir / "p.toml").write_text(CONTENTION_PLAN)
    run = run_cli("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=workdir, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    # never ranked against one client alone
    assert "rand-read-4k on iscsi with 2 clients" in run.stdout
    store = Store.open_existing(workdir / "r.sqlite")
    try:
        per_client = store.run_client_metrics(1, "read.iops")
        runs = {r.run_id: r for r in store.runs(1)}
        totals = store.run_metric_values(list(per_client), "read.iops")
        fairness = store.run_metric_values(list(per_client), "clients.fairness")
    finally:
        store.close()
    assert len(per_client) >= 2 and all(len(v) == 2 and min(v) > 0 for v in per_client.values())
    assert all(runs[rid].status == "ok" for rid in per_client)
    for rid, values in per_client.items():
        assert totals[rid] == pytest.approx(sum(values))
        assert fairness[rid] == pytest.approx(sum(values) ** 2 / (2 * sum(v * v for v in values)))
    rank = run_cli("rank", "--db", "r.sqlite", "--min-runs", "2", "--format", "json", cwd=workdir)
    assert rank.returncode == 0, rank.stderr
    [table] = [t for t in json.loads(rank.stdout) if "many clients" in t["title"]]
    by_n = {row["clients"]: row for row in table["rows"]}
    assert set(by_n) == {1, 2}
    assert by_n[2]["aggregate"] == pytest.approx(2 * by_n[2]["per_client"])
    assert 0.5 <= by_n[2]["fairness"] <= 1.0 and by_n[1]["fairness"] is None
    assert by_n[2]["per_client_p99_us"] > 0 and by_n[2]["aggregate_ci95_low"] is not None
    results = run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=workdir)
    assert results.returncode == 0, results.stderr
    [sweep] = json.loads(results.stdout)["sweeps"]
    assert {row["clients"] for row in sweep["contention"]} == {1, 2}
    assert _ours(workdir) == []
    assert leftovers.pending(workdir / "w") == []
    left = [p for p in (workdir / "w").rglob("*") if p.is_socket() or p.suffix in (".img", ".sock")]
    assert left == [], left


@needs("fio")
@needs("qemu-storage-daemon")
@root_only
@pytest.mark.slow
def test_a_sigkill_during_a_four_client_run_then_clean_leaves_nothing(workdir: Path) -> None:
    """iomatrix is killed with SIGKILL while four clients run (four fio servers serving): their
    daemons, fio servers and tgtd die with it (PR_SET_PDEATHSIG), and `iomatrix clean` removes every
    LUN, socket and ledger entry."""
    if (why := IscsiBacking().availability(set())) is not None:
        pytest.skip(why)
    plan = CONTENTION_PLAN.replace("clients = [1, 2]", "clients = [4]").replace(
        "runtime = 0.5", "runtime = 60"
    )
    (workdir / "p.toml").write_text(plan)
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite", "--workdir", "w"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while len(descendants_named(proc.pid, "fio", "--server")) < 4:
            assert proc.poll() is None, "the sweep ended before its four fio servers ran"
            assert time.monotonic() < deadline, "four fio servers never ran"
            time.sleep(0.05)
        assert len(descendants_named(proc.pid, "qemu-storage-daemon")) == 4
    finally:
        proc.kill()
        proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    # the kernel kills the children of a SIGKILLed parent (pdeathsig): bounded wait
    while _ours(workdir):
        assert time.monotonic() < deadline, _ours(workdir)
        time.sleep(0.05)
    assert leftovers.pending(workdir / "w") != []  # what the run had recorded, for clean to undo
    cleaned = run_cli("clean", "--workdir", "w", cwd=workdir)
    assert cleaned.returncode == 0, cleaned.stderr
    assert leftovers.pending(workdir / "w") == []
    left = [p for p in (workdir / "w").rglob("*") if p.is_socket() or p.suffix in (".img", ".sock")]
    assert left == [], left
