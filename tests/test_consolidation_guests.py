"""Consolidation tiles with real QEMU guests (slow): one 1-tile point of the file-copy pair end to
end, a role that fails marks its point failed and the sweep goes on, and Ctrl-C leaves no guest
running."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import iomatrix_argv, needs, qemu_pids_using, run_cli, sigint_default

pytestmark = [pytest.mark.slow, needs("qemu-system-x86_64"), needs("busybox")]


def _plan(
    tmp: Path,
    name: str,
    caches: list[str],
    tiles: list[int],
    scale: float,
    image_size: str = "256M",
    size: str = "16M",
) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(
        f"""
tier = ["consolidation"]
format = ["qcow2"]
cache = {caches!r}
aio = ["threads"]
bus = ["virtio-blk"]
size = "{size}"
image_size = "{image_size}"
guest_memory_mb = 256
run_timeout = 240
repetition_policy = "ci-width"

[repetitions]
min = 1
max = 1

[consolidation]
tiles = {tiles!r}
scale = {scale}

[[backing]]
type = "dir"
""".replace("'", '"')
    )
    return p


def _runs(db: Path) -> list[sqlite3.Row]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    return con.execute(
        "SELECT r.id, r.status, r.error, r.console_tail, c.cache, r.workload FROM runs r "
        "JOIN cells c ON c.id = r.cell_id ORDER BY r.id"
    ).fetchall()


def _metrics(db: Path, run_id: int) -> dict[str, float]:
    con = sqlite3.connect(db)
    return {
        m: v for m, v in con.execute("SELECT metric, value FROM samples WHERE run_id=?", (run_id,))
    }


def test_one_tile_file_copy_point(tmp_path: Path):
    plan = _plan(tmp_path, "one-tile", ["none"], [1], scale=0.1)
    db, wd = tmp_path / "r.sqlite", tmp_path / "wd"
    res = run_cli("run", str(plan), "--db", str(db), "--workdir", str(wd), timeout=400)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "consolidation tier: accelerator" in res.stdout
    runs = _runs(db)
    assert [(r["status"], r["workload"]) for r in runs] == [("ok", "tiles-1")], [
        dict(r) for r in runs
    ]
    m = _metrics(db, runs[0]["id"])
    # The tree made it there and back: the peer received what the source built, and all of it came
    # back (the guest fails the role otherwise).
    assert m["role.filecopy.files"] == m["role.filecopy_peer.files"] >= 10
    assert m["role.filecopy.kib"] > 1024  # two large files of at least 1 MiB
    assert 0 < m["role.filecopy.seconds"] <= m["point.wall_s"]
    assert m["role.filecopy.there_s"] > 0 and m["role.filecopy.back_s"] > 0
    assert m["point.guests"] == 2 and m["qemu.count"] == 2
    assert m["qemu.cpu_user_s"] > 0 and m["qemu.rss_peak_mb"] > 50
    assert m["guest.t1-filecopy.cpu_user_s"] > 0 and m["guest.t1-filecopy_peer.rss_peak_mb"] > 0
    assert "host.mem_used_peak_mb" in m and "host.cpu_usr_pct" in m
    assert qemu_pids_using(tmp_path) == []
    assert not list(wd.rglob("iomatrix-consol-*")), "guest images left behind"
    rank = run_cli("rank", "--db", str(db), "--min-runs", "2")
    assert rank.returncode == 0, rank.stderr
    assert "Consolidation: the most tiles" in rank.stdout and ": 1 tile" in rank.stdout
    html = tmp_path / "report.html"
    rep = run_cli("report", "--html", str(html), "--db", str(db))
    assert rep.returncode == 0, rep.stderr
    page = html.read_text()
    # the panels
    assert '<h2 id="consolidation">Consolidation</h2>' in page and "wall time per point" in page
    rec = run_cli("recommend", "--db", str(db), "--format", "json")
    assert rec.returncode == 0, rec.stderr
    answers = json.loads(rec.stdout)["consolidation"]
    assert answers and answers[0]["tested"] == [1] and answers[0]["max_tiles"] == 1


def test_role_failure_marks_the_point_failed_and_the_sweep_goes_on(tmp_path: Path):
    # A 4 MiB disk (an ext4 of 1 KiB blocks with a 1 MiB journal: under 3 MiB free) cannot hold the
    # source's tree at scale 0.25 (100 small files, 0.8 MiB, and two of 2 MiB): the source's role
    # fails on a full disk, its peer is stopped, and the next cell still runs. (A quarter of the
    # tree the guest writes at scale 1 on a 16 MiB disk: the same failure, less TCG time.)
    plan = _plan(
        tmp_path, "full-disk", ["none", "writeback"], [1], scale=0.25, image_size="4M", size="2M"
    )
    db, wd = tmp_path / "r.sqlite", tmp_path / "wd"
    res = run_cli("run", str(plan), "--db", str(db), "--workdir", str(wd), timeout=600)
    assert res.returncode != 0  # every run failed
    runs = _runs(db)
    assert {r["cache"] for r in runs} == {"none", "writeback"}, (
        "the sweep stopped after the first failure"
    )
    for r in runs:
        assert r["status"] == "failed"
        assert "role t1-filecopy failed" in r["error"] and "writing large file" in r["error"], r[
            "error"
        ]
        assert "[console of guest t1-filecopy]" in r["console_tail"]
        assert "file copy" in r["console_tail"]
    assert qemu_pids_using(tmp_path) == []


def test_ctrl_c_leaves_no_guest_running(tmp_path: Path):
    plan = _plan(tmp_path, "interrupted", ["none"], [1, 2], scale=1.0)
    db, wd = tmp_path / "r.sqlite", tmp_path / "wd"
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", str(plan), "--db", str(db), "--workdir", str(wd)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_default,
    )
    try:
        seen: list[int] = []
        deadline = time.monotonic() + 240
        while len(seen) < 2 and time.monotonic() < deadline and proc.poll() is None:
            seen = qemu_pids_using(tmp_path)
            time.sleep(0.2)
        assert len(seen) >= 2, "no guests started"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    for pid in seen:
        assert not Path(f"/proc/{pid}").exists() or pid not in qemu_pids_using(tmp_path), (
            f"QEMU {pid} survived"
        )
    assert qemu_pids_using(tmp_path) == []
    assert not list(wd.rglob("iomatrix-consol-*")), "guest images left behind"
    assert os.path.exists(db)
