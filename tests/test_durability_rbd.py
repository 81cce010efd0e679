"""The durability tier on Ceph RBD (issue 35): a Ceph client crash with librbd's cache settings.

Fast: the prune rules (which RBD cells a client crash can be made on), the documented expectation
    (librbd keeps a
flushed write back only when QEMU drops the guest's flushes, its policy acknowledges early and it
does not stay writethrough until a flush), the verdict's name and that an RBD verdict speaks only
for RBD cells with the same librbd settings. Slow: real trials on a lab-started Ceph under a TCG
guest, the dead client fenced, nothing left."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from iomatrix.domain.axes import BackingFacts
from iomatrix.durability.verdict import (
    POWER_LOSS,
    QEMU_CRASH,
    LibrbdCache,
    config_verdict,
    documented_keeps_acked,
)
from iomatrix.matrix import Cell
from iomatrix.plan.load import load_plan
from iomatrix.protocols.rbd import CLIENT_CRASH as RBD_CLIENT_CRASH
from iomatrix.report.durability import MeasuredIndex
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend import DOCUMENTED, risk_statements
from iomatrix.store import Store
from iomatrix.tiers.declared.durability import Durability
from tests.conftest import needs, ok_samples, run_cli, speed_cell

LAB_RBD = BackingFacts(None, o_direct=True, is_device=False, protocol="rbd", lab_started=True)


def _cell(**more: str) -> Cell:
    values = {
        "tier": "durability",
        "format": "raw",
        "preallocation": "off",
        "cache": "unsafe",
        "aio": "threads",
        "bus": "virtio-blk",
        "backing": "rbd",
        "modifier": "none",
        "rbd_cache_policy": "writeback",
        "rbd_cache_writethrough_until_flush": "off",
    }
    return Cell({**values, **more})


# --------------------------------------------------------------------------- rules (fast)


def test_a_client_crash_is_made_on_a_lab_started_ceph_only_and_never_through_krbd() -> None:
    assert Durability.prune_reason(_cell(), LAB_RBD) is None
    existing = BackingFacts(None, o_direct=True, is_device=False, protocol="rbd", lab_started=False)
    assert "never fences clients of an existing cluster" in (
        Durability.prune_reason(_cell(), existing) or ""
    )
    assert "krbd keeps no librbd cache" in (
        Durability.prune_reason(_cell(rbd_client="krbd"), LAB_RBD) or ""
    )


@pytest.mark.parametrize(
    ("cache", "policy", "until_flush", "keeps"),
    [
        # no flush ever reaches librbd, which acknowledges from its cache
        ("unsafe", "writeback", "off", False),
        # write-around acknowledges a write while it is still in flight
        ("unsafe", "writearound", "off", False),
        ("unsafe", "writeback", "on", True),  # librbd never sees a flush, so it stays writethrough
        ("unsafe", "writethrough", "off", True),  # acknowledged once the OSDs have it
        # the guest's flush writes librbd's cache out before it completes
        ("writeback", "writeback", "off", True),
        ("none", "writeback", "off", True),  # QEMU turns librbd's cache off (cache.direct=on)
    ],
)
def test_a_ceph_client_crash_is_documented_to_lose_only_what_librbd_acknowledged_past_a_dropped_flush(  # noqa: E501
    cache: str, policy: str, until_flush: str, keeps: bool
) -> None:
    librbd = LibrbdCache(policy, until_flush)
    assert documented_keeps_acked(QEMU_CRASH, cache, "none", librbd=librbd) is keeps
    # not a librbd flush
    assert documented_keeps_acked(QEMU_CRASH, cache, "eatmydata", librbd=librbd) is keeps


def test_an_rbd_verdict_is_a_ceph_client_crash_and_has_no_power_loss_line() -> None:
    v = config_verdict(
        {"qemu_crash.acked_lost": [128.0, 0.0], "fs.clean": [0.0, 1.0]},
        "unsafe",
        librbd=LibrbdCache("writeback", "off"),
    )
    assert (
        v.lines()[0]
        == "Ceph client crash: LOST acknowledged writes in 1/2 cuts (up to 128 records)"
    )
    assert not any("power loss" in line for line in v.lines())
    kept = config_verdict(
        {"qemu_crash.acked_lost": [0.0]}, "unsafe", librbd=LibrbdCache("writearound", "off")
    )
    assert "no loss was caught in 1 cuts (not called safe)" in (
        kept.situations[QEMU_CRASH].disagreement or ""
    )
    assert kept.situations[POWER_LOSS].trials == 0


def test_an_rbd_trial_is_estimated_at_its_measured_length() -> None:
    plan, _ = load_plan("ceph-durability")
    # 7.5-11.4 s measured
    assert Durability.estimate_run_s(plan, Durability.own_workloads[0]) == 9.0
    local, _ = load_plan("durability-quick")
    assert Durability.estimate_run_s(local, Durability.own_workloads[0]) == Durability.overhead_s


def test_a_trials_live_line_shows_the_client_crash_where_no_power_loss_was_cut() -> None:
    from types import SimpleNamespace

    from iomatrix.sweep.progress import run_headline
    from iomatrix.tiers.base import RunOutcome

    # primary metric: power_loss.acked_lost
    unit = SimpleNamespace(workload=Durability.own_workloads[0])
    rbd = RunOutcome(ok=True, metrics={"qemu_crash.acked_lost": 12.0}, phases={"wall_s": 8.0})
    assert run_headline(unit, rbd).startswith("qemu_crash.acked_lost=12.0")  # type: ignore[arg-type]
    nothing = RunOutcome(ok=True, metrics={}, phases={"wall_s": 8.0})
    assert run_headline(unit, nothing).startswith("power_loss.acked_lost=?")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- real trials (slow)

SWEEP = """
tier = ["durability"]
format = ["raw"]
cache = ["unsafe"]
rbd_cache_policy = ["writeback"]
rbd_cache_writethrough_until_flush = ["off", "on"]
workloads = ["durability"]
cuts = 2
run_timeout = 180

[[backing]]
type = "rbd"
store = "memstore"
"""


def _speed_cell(until_flush: str, backing_type: str = "rbd") -> CellWorkload:
    """A block-layer cell a Ceph sweep would rank, on `backing_type`."""
    return speed_cell(
        backing_type,
        cache="unsafe",
        rbd_cache_policy="writeback",
        rbd_cache_writethrough_until_flush=until_flush,
    )


@pytest.mark.slow
@needs("ceph-mon")
@needs("ceph-osd")
@needs("qemu-system-x86_64")
def test_a_ceph_client_crash_loses_acknowledged_writes_only_when_librbd_acknowledged_past_dropped_flushes(  # noqa: E501
    tmp_path: Path,
) -> None:
    (tmp_path / "p.toml").write_text(SWEEP)
    proc = run_cli(
        "run", "p.toml", "--db", "r.sqlite", "--workdir", str(tmp_path / "wd"), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db = sqlite3.connect(tmp_path / "r.sqlite")
    rows = ok_samples(tmp_path / "r.sqlite")
    lost: dict[str, list[float]] = {"on": [], "off": []}
    for key, metric, value in rows:
        assert not metric.startswith("power_loss."), metric  # no power loss is cut on RBD
        if metric == "qemu_crash.acked_lost":
            # a cell's key leaves out an axis at its default (until-flush "on")
            lost["off" if "rbd_cache_writethrough_until_flush=off" in key else "on"].append(value)
    # Physics: with cache=unsafe librbd never sees a flush. Under writethrough-until-flush it
    # therefore stays writethrough (nothing acknowledged before the OSDs have it); without it,
    # librbd's writeback cache holds the last second of writes (rbd_cache_max_dirty_age 1 s) when
    # QEMU is killed.
    assert len(lost["off"]) == 2 and all(v > 0 for v in lost["off"]), lost
    assert lost["on"] == [0.0, 0.0], lost
    meta = json.loads(
        db.execute("SELECT meta_json FROM runs WHERE status = 'ok' LIMIT 1").fetchone()[0]
    )
    crash = meta["client_crash"]
    assert crash["fenced"] and all(d.startswith("rbd:iomatrix/") for d in crash["disks"])
    assert meta["network_disk"]["protocol"] == "rbd" and isinstance(meta[QEMU_CRASH], list)
    out = " ".join(proc.stdout.split())
    assert "Ceph client crash: LOST acknowledged writes in 2/2 cuts" in out
    assert "Ceph client crash: acknowledged writes kept in 2/2 cuts" in out
    assert "DISAGREES" not in out and "qemu_crash.acked_lost=" in out
    # the short answer's one sentence
    assert "2 configurations cut; LOST acknowledged writes:" in out

    # What recommend says of Ceph speed cells with the same librbd settings: the measured client
    # crash in place of the documented line, and nothing measured for a local disk.
    index = MeasuredIndex.from_store(Store(tmp_path / "r.sqlite", read_only=True))
    risks = {r.situation: r for r in risk_statements("unsafe", "none", _speed_cell("off"), index)}
    assert risks["QEMU crash"].basis == "measured" and RBD_CLIENT_CRASH not in risks
    assert risks["QEMU crash"].text.startswith(
        "Ceph client crash: LOST acknowledged writes in 2/2 cuts"
    )
    assert risks["host crash or power loss"].basis == DOCUMENTED  # not cut on RBD
    risks = {r.situation: r for r in risk_statements("unsafe", "none", _speed_cell("on"), index)}
    assert risks["QEMU crash"].text.startswith(
        "Ceph client crash: acknowledged writes kept in 2/2 cuts"
    )
    local = {
        r.situation: r for r in risk_statements("unsafe", "none", _speed_cell("off", "dir"), index)
    }
    assert local["QEMU crash"].basis == DOCUMENTED

    ours = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()
    assert ours == []  # no ceph-mon, ceph-osd or QEMU of this sweep
    left = [p for p in (tmp_path / "wd").rglob("*") if p.is_file() and ".iomatrix" not in p.parts]
    assert left == []
