"""The block-layer tier: qemu-storage-daemon with the cell's graph, exported over NBD, measured by
fio's nbd engine. Pure tests of the graph and job, then real sweeps, an interrupt and failures (real
daemon, real fio)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from iomatrix.domain import CACHE, NA, CacheMode
from iomatrix.errors import UserError
from iomatrix.fio.jobs import SUBST_FDATASYNC, JobShape, nbd_job, nbd_uri
from iomatrix.matrix import Cell, expand, from_key
from iomatrix.plan.load import load_plan
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec, blockdev_spec
from iomatrix.runner import backing_facts, plan_expansion
from iomatrix.tiers import tier_class
from iomatrix.tiers.base import RunOptions, RunRequest, Target
from iomatrix.tiers.blocklayer import BlockLayerTier, daemon_argv, disk_for, export_spec
from iomatrix.workloads import resolve
from tests.conftest import iomatrix_argv, needs, root_only, run_cli, sigint_default

needs_qsd = needs("qemu-storage-daemon")


def _opts(spec: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in spec.split(","))


# --------------------------------------------------------------------------- pure: graph, export,
# job


@pytest.mark.parametrize("cache", [c.value for c in CacheMode])
def test_graph_and_export_per_cache_mode(cache: str) -> None:
    sem = CACHE[CacheMode(cache)]
    disk = DiskSpec("/w/img.qcow2", "qcow2", CacheMode(cache), "threads")  # type: ignore[arg-type]
    argv = daemon_argv("/usr/bin/qemu-storage-daemon", disk, 7)
    graph = _opts(argv[argv.index("--blockdev") + 1])
    onoff = {True: "on", False: "off"}
    # The node half of the cache mode: the very string the guest passes to -blockdev.
    assert argv[argv.index("--blockdev") + 1] == blockdev_spec(disk)
    assert graph["cache.direct"] == graph["file.cache.direct"] == onoff[sem.direct]
    assert graph["cache.no-flush"] == graph["file.cache.no-flush"] == onoff[sem.no_flush]
    assert (
        graph["driver"] == "qcow2"
        and graph["file.driver"] == "file"
        and graph["file.aio"] == "threads"
    )
    # The device half: no write cache means the export is writethrough (QEMU flushes after every
    # write).
    export = _opts(argv[argv.index("--export") + 1])
    assert export["writethrough"] == onoff[not sem.write_cache]
    assert (
        export["type"] == "nbd"
        and export["writable"] == "on"
        and export["node-name"] == graph["node-name"]
    )
    # The listening socket is inherited (fd 7 here), so fio can connect before the daemon is up.
    assert argv[argv.index("--nbd-server") + 1] == "addr.type=fd,addr.str=7"
    assert export_spec(DiskSpec(target="/x.qcow2", cache=cache)) == argv[argv.index("--export") + 1]


def test_expected_writethrough_table() -> None:
    wt = {
        c: _opts(export_spec(DiskSpec(target="/x.qcow2", cache=c)))["writethrough"]
        for c in CacheMode
    }
    assert wt == {
        "none": "off",
        "writeback": "off",
        "unsafe": "off",
        "writethrough": "on",
        "directsync": "on",
    }


def test_null_ceiling_graph_and_wrapper() -> None:
    cell = Cell.of(
        tier="blocklayer",
        format="null",
        preallocation=NA,
        cache=NA,
        aio=NA,
        bus=NA,
        backing="null",
        modifier="none",
    )
    disk = disk_for(cell, None, 1 << 30)
    argv = daemon_argv("qsd", disk, 3, wrapper=["eatmydata"])
    # the modifier wraps QEMU, the process issuing the flushes
    assert argv[:2] == ["eatmydata", "qsd"]
    graph = _opts(argv[argv.index("--blockdev") + 1])
    assert (
        graph["driver"] == "null-co"
        and graph["size"] == str(1 << 30)
        and graph["cache.no-flush"] == "off"
    )


def test_nbd_job_substitutes_fdatasync() -> None:
    shape = JobShape(size_bytes=64 << 20, runtime_s=1.0)
    uri = nbd_uri("nbd.sock", "iomx")
    assert uri == "nbd+unix:///iomx?socket=nbd.sock"
    db = nbd_job(resolve("db-write-4k-fdatasync", None), uri=uri, shape=shape)
    lines = db.text.splitlines()
    assert "ioengine=nbd" in lines and f"uri={uri}" in lines and "fsync=1" in lines
    assert not any(line.startswith("fdatasync") for line in lines)
    assert db.substitutions == [SUBST_FDATASYNC]
    plain = nbd_job(resolve("rand-read-4k", None), uri=uri, shape=shape)
    assert plain.substitutions == [] and "[prefill]" in plain.text and "filename" not in plain.text
    custom = nbd_job(
        resolve("rand-write-4k", None),
        uri=uri,
        shape=shape,
        custom_text="[mine]\nrw=randwrite\n  fdatasync = 4\n",
    )
    assert "  fsync = 4" in custom.text and custom.substitutions == [SUBST_FDATASYNC]


def _plan(**kw: object) -> Plan:
    base: dict[str, object] = {
        "name": "t",
        "tier": ["blocklayer"],
        "size": "16M",
        "image_size": "64M",
    }
    return Plan.model_validate({**base, **kw})


def test_matrix_collapses_bus_prunes_fs_and_native_without_direct() -> None:
    plan = _plan(
        format=["raw", "qcow2"],
        cache=["none", "writeback"],
        aio=["threads", "native"],
        bus=["virtio-blk", "ide"],
        workloads=["rand-write-4k", "fs-write"],
    )
    exp = plan_expansion(plan, None, set())
    assert all(c.bus == NA for c in exp.cells)
    assert exp.collapsed["blocklayer"] == ("bus",)
    keys = {c.key for c in exp.cells}
    assert "blocklayer/raw/off/none/native/-/dir/none" in keys
    assert "blocklayer/null/-/-/-/-/null/none" in keys  # the null-co ceiling
    reasons = {p.what: p.reason for p in exp.pruned}
    assert "aio=native needs O_DIRECT" in reasons["blocklayer/raw/off/writeback/native/-/dir/none"]
    fs = [r for w, r in reasons.items() if w.endswith("× fs-write")]
    assert fs and all("no guest" in r for r in fs)
    assert {u.workload.name for u in exp.units} == {"rand-write-4k"}
    # 2 formats × (none: threads+native, writeback: threads) + the ceiling
    assert len(exp.cells) == 7


def test_image_must_hold_the_data() -> None:
    with pytest.raises(ValueError, match="image_size"):
        _plan(size="256M", image_size="64M")


def test_quick_plan_includes_the_tier() -> None:
    plan, _ = load_plan("quick")
    assert "blocklayer" in plan.tier
    exp = expand(plan, backing_facts(plan, set()), [resolve(w, None) for w in plan.workloads])
    assert any(c.tier == "blocklayer" for c in exp.cells)
    assert tier_class("blocklayer").overhead_s < tier_class("guest").overhead_s


def test_missing_daemon_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a host without qemu-storage-daemon (nor anything else)
    monkeypatch.setenv("PATH", str(tmp_path))
    tier = BlockLayerTier(_plan(), RunOptions(workdir=tmp_path))
    with pytest.raises(UserError) as err:
        tier.open()
    assert (
        "qemu-storage-daemon" in err.value.one_line()
        and "qemu-system-common" in err.value.one_line()
    )


@needs("fio")
@needs_qsd
def test_fio_without_nbd_engine_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink("/usr/bin/qemu-storage-daemon", bindir / "qemu-storage-daemon")
    # An fio built without libnbd: the real fio, minus the nbd line in its engine list.
    (bindir / "fio").write_text('#!/bin/sh\n/usr/bin/fio "$@" | grep -vx "[[:space:]]*nbd"\n')
    (bindir / "fio").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    tier = BlockLayerTier(_plan(), RunOptions(workdir=tmp_path))
    with pytest.raises(UserError) as err:
        tier.open()
    assert "nbd ioengine" in err.value.one_line() and "apt-get install fio" in err.value.one_line()


# --------------------------------------------------------------------------- real runs


def _ours(tmp_path: Path) -> list[str]:
    """Processes (of any kind: qemu-storage-daemon, fio) whose command line names this test's
    directory."""
    return subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()


def _left_files(tmp_path: Path) -> list[Path]:
    work = tmp_path / "iomatrix-work"
    return [
        p for p in work.rglob("*") if p.name.startswith("iomatrix-blk-") or p.name.endswith(".sock")
    ]


SWEEP = """
tier = ["blocklayer"]
format = ["raw", "qcow2"]
cache = ["none", "writeback", "unsafe"]
workloads = ["rand-write-4k", "db-write-4k-fdatasync"]
size = "32M"
image_size = "64M"
runtime = 0.5  # unsafe vs none on fdatasync is an order of magnitude: half a second shows it as well as one
null_ceiling = true
retry_disturbed = false  # a run the loaded host disturbed is kept, flagged: its records are checked, and the direction unsafe > none holds by an order of magnitude
[repetitions]
min = 2
max = 2
# The flushing workload runs on every cell (the cache modes' export, flush counts and direction,
# the cost per I/O are checked on it); the plain random writes, which show a run with no
# substitution, on one cell and the ceiling (issue 67: on all six they were 10 runs of ~1.8 s that
# checked nothing the one cell does not).
[blocklayer.rand-write-4k]
format = ["qcow2"]
cache = ["writeback"]
"""  # noqa: E501


@pytest.mark.slow
@needs("fio")
@needs_qsd
def test_small_sweep(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(SWEEP)
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--monitor-interval", "0.2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ((6 cells + the ceiling) × db-write-4k-fdatasync + (1 cell + the ceiling) × rand-write-4k) × 2
    assert "18 runs ok, 0 failed" in proc.stdout

    db = sqlite3.connect(tmp_path / "r.sqlite")
    rows = db.execute(
        "SELECT c.key, r.workload, r.meta_json, r.accel FROM runs r "
        "JOIN cells c ON c.id = r.cell_id"
    ).fetchall()
    retries = db.execute("SELECT COUNT(*) FROM runs WHERE retry_of IS NOT NULL").fetchone()[0]
    assert len(rows) == 18 + retries  # a failed run is run again (a disturbed one is kept)
    # both workloads ran, each on the cells it was given
    assert {(w, from_key(k).cache) for k, w, _, _ in rows} == {
        *(("db-write-4k-fdatasync", c) for c in ("none", "writeback", "unsafe", NA)),
        ("rand-write-4k", "writeback"),
        ("rand-write-4k", NA),
    }
    for key, workload, meta_json, accel in rows:
        meta = json.loads(meta_json)
        assert meta["tier"] == "blocklayer" and meta["qemu_version"].startswith(
            "qemu-storage-daemon version"
        )
        assert meta["export"].startswith("nbd over a private UNIX socket")
        assert "--export" in meta["daemon_argv"] and accel.startswith("none")
        assert (meta["substitutions"] != []) == (workload == "db-write-4k-fdatasync")
        cache = from_key(key).cache
        if cache != NA:
            # none, writeback and unsafe all have a write cache
            assert meta["export_writethrough"] is False
        # The I/O path is the daemon; fio beside it generates the load and is not counted in its
        # cost.
        roles = {
            (p["name"].startswith("qemu-storage"), p["name"] == "fio", p["role"])
            for p in meta["processes"]
        }
        assert (True, False, "io") in roles and (False, True, "load") in roles
        assert (False, True, "io") not in roles

    doc = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    means = {
        (r["axes"]["format"], r["axes"]["cache"], r["workload"]): r["mean"]
        for r in doc["sweeps"][0]["results"]
        if r["metric"] == "write.iops"
    }
    for fmt in ("raw", "qcow2"):
        # cache=unsafe drops every flush; cache=none sends each one to the disk: usually an order
        # of magnitude apart here, but a loaded CI host measured 2.0x once: only the direction is
        # asserted (how much faster is bench/'s business, not a test's).
        assert (
            means[(fmt, "unsafe", "db-write-4k-fdatasync")]
            > means[(fmt, "none", "db-write-4k-fdatasync")]
        )
    flushes = {
        (r["axes"]["format"], r["axes"]["cache"]): r["mean"]
        for r in doc["sweeps"][0]["results"]
        if r["metric"] == "sync.count" and r["workload"] == "db-write-4k-fdatasync"
    }
    # fio really sent a flush after every write
    assert flushes and all(v > 0 for v in flushes.values())
    cost = [r for r in doc["sweeps"][0]["results"] if r["metric"] == "cost.cpu_us_per_io"]
    assert cost and all(r["mean"] > 0 for r in cost)  # the daemon's CPU per I/O, every cell

    assert _ours(tmp_path) == []
    assert _left_files(tmp_path) == []
    ledger = json.loads((tmp_path / "iomatrix-work" / ".iomatrix" / "leftovers.json").read_text())
    assert ledger["entries"] == []


LONG = """
tier = ["blocklayer"]
format = ["qcow2"]
cache = ["none", "writeback"]
workloads = ["rand-write-4k"]
size = "32M"
image_size = "64M"
runtime = 3
null_ceiling = false
[repetitions]
min = 4
max = 4
"""


def _runs(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        return sqlite3.connect(db, timeout=5).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.slow
@needs("fio")
@needs_qsd
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_no_daemon_socket_or_image(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "p.toml").write_text(LONG)
    db = tmp_path / "r.sqlite"
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    # Signal while a daemon serves a run: after one run is stored, wait for the next daemon to be
    # up.
    deadline = time.monotonic() + 120
    while _runs(db) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    while time.monotonic() < deadline and proc.poll() is None:
        qsd = subprocess.run(
            ["pgrep", "-f", f"qemu-storage-daemon.*{tmp_path}"], capture_output=True, text=True
        )
        if qsd.stdout.split():
            break
        time.sleep(0.05)
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    assert _ours(tmp_path) == []
    assert _left_files(tmp_path) == []
    ledger = json.loads((tmp_path / "iomatrix-work" / ".iomatrix" / "leftovers.json").read_text())
    assert [
        e
        for e in ledger["entries"]
        if "iomatrix-blk-" in e["target"] or e["target"].endswith(".sock")
    ] == []


# --------------------------------------------------------------------------- failures


def test_native_aio_without_direct_is_pruned_not_run(tmp_path: Path) -> None:
    plan = _plan(cache=["writeback", "writethrough"], aio=["native"], null_ceiling=False)
    exp = plan_expansion(plan, None, set())
    assert exp.units == []
    assert all("requires cache.direct=on" in p.reason for p in exp.pruned)
    (tmp_path / "p.toml").write_text(
        'tier = ["blocklayer"]\ncache = ["writeback"]\naio = ["native"]\nnull_ceiling = false\n'
    )
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert proc.returncode == 2 and "nothing to run" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


@root_only
@pytest.mark.slow
@needs("fio")
@needs_qsd
def test_daemon_refusing_the_graph_is_a_failed_run(tmp_path: Path) -> None:
    """ramfs has no O_DIRECT; no backing type maps to it, so nothing prunes it: QEMU refuses at run
    time."""
    mnt = tmp_path / f"ramfs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mnt)], check=True)
    try:
        plan = _plan(null_ceiling=False)
        work = tmp_path / "work"
        tier = BlockLayerTier(plan, RunOptions(workdir=work))
        tier.open()
        cell = Cell.of(
            tier="blocklayer",
            format="raw",
            preallocation="off",
            cache="none",
            aio="threads",
            bus=NA,
            backing="ramfs",
            modifier="none",
        )
        req = RunRequest(
            cell=cell,
            workload=resolve("rand-write-4k", None),
            target=Target("dir", mnt),
            shape=JobShape(size_bytes=16 << 20, runtime_s=1.0),
            run_dir=work / "run",
            timeout_s=60,
        )
        out = tier.run(req)
        tier.close()
        assert not out.ok
        assert out.error is not None and "does not support O_DIRECT" in out.error
        assert "qemu-storage-daemon exited" in out.error
        assert (work / "run" / "daemon.log").exists()  # kept for the failed run
        assert list(mnt.iterdir()) == [] and not (work / "run" / "nbd.sock").exists()
        assert _ours(tmp_path) == []
        ledger = json.loads((work / ".iomatrix" / "leftovers.json").read_text())
        assert ledger["entries"] == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.slow
@needs("fio")
@needs_qsd
def test_custom_job_file_runs_as_checked_at_plan_load(tmp_path: Path) -> None:
    """A `file:dir/job.fio` workload: its image is named by the workload's slug (the name holds a
    '/'), and what fio runs is the allowlist-checked text, not the file re-read at run time."""
    (tmp_path / "jobs").mkdir()
    job = tmp_path / "jobs" / "w.fio"
    job.write_text("[w]\nrw=randwrite\nbs=4k\n")
    (tmp_path / "p.toml").write_text(
        'tier = ["blocklayer"]\nworkloads = ["file:jobs/w.fio"]\nsize = "16M"\n'
        'image_size = "64M"\nruntime = 1\nnull_ceiling = false\n'
        "[repetitions]\nmin = 1\nmax = 1\n"
    )
    plan, base = load_plan(str(tmp_path / "p.toml"))
    (unit,) = plan_expansion(plan, base, set()).units
    w = unit.workload
    # edited after load
    job.write_text("[w]\nrw=randwrite\nbs=4k\nexec_prerun=touch /tmp/should-never-run\n")
    tier = BlockLayerTier(plan, RunOptions(workdir=tmp_path / "work"))
    tier.open()
    try:
        out = tier.run(
            RunRequest(
                cell=unit.cell,
                workload=w,
                target=Target("dir", tmp_path),
                shape=JobShape(plan.size_bytes, plan.runtime),
                run_dir=tmp_path / "run",
                timeout_s=120,
            )
        )
    finally:
        tier.close()
    assert out.ok, out.error
    assert "exec_prerun" not in out.job_text and "rw=randwrite" in out.job_text
    assert not list(tmp_path.glob("iomatrix-blk-*")), "the run's image was not removed"


PRECISION = """
tier = ["baremetal", "blocklayer"]
format = ["raw"]
cache = ["none", "writeback"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "64M"
runtime = 0.3
null_ceiling = false
ci_target = 0.001
# How far each unit runs is checked, not how clean its runs were: a retry of a run the loaded host
# disturbed was one run more per disturbed run (most short runs at load 1-3; issue 67).
retry_disturbed = false
[repetitions]
min = 2
max = 3
precision_max = { blocklayer = 5 }
"""


@pytest.mark.slow
@needs("fio")
@needs_qsd
def test_block_layer_units_run_on_toward_the_ci_target_after_the_race(tmp_path: Path) -> None:
    # ±0.1% is out of reach of any real fio figure in 5 runs, so every block-layer unit runs to
    # precision_max.
    (tmp_path / "p.toml").write_text(PRECISION)
    explained = run_cli("plan", "p.toml", cwd=tmp_path)
    assert "then blocklayer units run on toward ±0.1%, up to 5 runs" in explained.stdout.replace(
        "\n", " "
    )
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db = sqlite3.connect(tmp_path / "r.sqlite")
    stops = {
        (c.split("/")[0], c.split("/")[3]): (kind, reason, ok)
        for c, kind, reason, ok in db.execute(
            "SELECT c.key, u.kind, u.reason, u.ok_runs FROM unit_stops u JOIN cells c ON "
            "c.id = u.cell_id"
        )
    }
    assert {k: v[0] for k, v in stops.items() if k[0] == "baremetal"} == {
        ("baremetal", "none"): "baseline",
        ("baremetal", "writeback"): "baseline",
    }
    for cache in ("none", "writeback"):
        kind, reason, ok = stops[("blocklayer", cache)]
        assert ok == 5, reason
        assert kind in ("eliminated", "equivalent", "unresolved", "settled", "max-runs"), reason
        assert "; then run on toward ±0.1%: CI ±" in reason and reason.endswith(
            "at 5 runs (precision_max)"
        )
    # Every round is still a block: at most one kept run per unit.
    assert (
        db.execute(
            "SELECT COUNT(*) FROM runs WHERE status = 'ok' AND retry_of IS NULL "
            "GROUP BY cell_id, workload, round HAVING COUNT(*) > 1"
        ).fetchall()
        == []
    )
    doc = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    n = {
        r["axes"]["cache"]: r["n"]
        for r in doc["sweeps"][0]["results"]
        if r["axes"]["tier"] == "blocklayer" and r["metric"] == "write.iops"
    }
    assert n == {"none": 5, "writeback": 5}
    assert _ours(tmp_path) == [] and _left_files(tmp_path) == []
