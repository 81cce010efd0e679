"""Tier tables: a plan's [blocklayer] table sweeps axis values (and workloads) on that tier only, so
one plan holds the guests' device questions and the block layer's image questions without
multiplying the guests' cells."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from iomatrix import qemu_caps
from iomatrix import workloads as wl
from iomatrix.domain import NA, axes
from iomatrix.errors import UserError
from iomatrix.matrix import (
    BackingFacts,
    Cell,
    Expansion,
    collapsed_axes,
    estimate_seconds,
    expand,
    prune_reason,
)
from iomatrix.plan.load import builtin_names, load_plan, plan_from_dict
from iomatrix.plan.model import Plan
from iomatrix.runner import plan_expansion
from iomatrix.tiers import declaration
from tests.conftest import run_cli

OK = BackingFacts(unavailable=None, o_direct=True, is_device=False)

BASE = {
    "name": "t",
    "tier": ["blocklayer", "guest"],
    "format": ["qcow2"],
    "cache": ["none", "writeback"],
    "aio": ["threads", "io_uring"],
    "bus": ["virtio-blk"],
    "workloads": ["rand-write-4k"],
    "null_ceiling": False,
    "blocklayer": {"detect_zeroes": ["off", "on"], "cluster_size": ["64k", "1M"]},
}


def plan_with(**kw: object) -> dict:
    """BASE with `kw` in place (None: the key left out)."""
    return {k: v for k, v in {**BASE, **kw}.items() if v is not None}


def plan(**kw: object) -> Plan:
    return plan_from_dict(plan_with(**kw), "test")


def expansion(p: Plan) -> Expansion:
    own = {t: [wl.resolve(n) for n in names] for t, names in p.tier_workloads().items()}
    return expand(
        p,
        {b.label(): OK for b in p.backing},
        [wl.resolve(n) for n in p.workloads],
        tier_workloads=own,
    )


def test_a_tier_table_sweeps_its_axes_on_that_tier_only() -> None:
    e = expansion(plan())
    block = [c for c in e.cells if c.tier == "blocklayer"]
    guest = [c for c in e.cells if c.tier == "guest"]
    # The block layer: cache 2 × aio 2 × detect_zeroes 2 × cluster_size 2; the guests: cache × aio
    # at QEMU's defaults for the block layer's own axes (not multiplied by them).
    assert len(block) == 16 and len(guest) == 4
    assert {(c.detect_zeroes, c.cluster_size) for c in block} == {
        ("off", "64k"),
        ("off", "1M"),
        ("on", "64k"),
        ("on", "1M"),
    }
    assert {(c.detect_zeroes, c.cluster_size) for c in guest} == {("off", "64k")}
    # keys as before
    assert all("detect_zeroes" not in c.key and "cluster_size" not in c.key for c in guest)
    assert any(c.key.endswith("+detect_zeroes=on+cluster_size=1M") for c in block)


def test_a_tier_table_replaces_the_plan_wide_values_for_its_tier() -> None:
    p = plan(blocklayer={"cache": ["none"]})
    e = expansion(p)
    assert {c.cache for c in e.cells if c.tier == "blocklayer"} == {"none"}
    assert {c.cache for c in e.cells if c.tier == "guest"} == {"none", "writeback"}
    assert p.axis_values("cache") == ["none", "writeback"] and p.axis_values(
        "cache", "blocklayer"
    ) == ["none"]
    assert p.axis_values("cache", "guest") == ["none", "writeback"]


def test_a_tier_table_runs_its_own_workloads() -> None:
    p = plan(
        blocklayer={
            "detect_zeroes": ["off", "on"],
            "workloads": ["rand-write-4k", "seq-write-zeroes-1m"],
        }
    )
    assert p.tier_workloads() == {"blocklayer": ["rand-write-4k", "seq-write-zeroes-1m"]}
    assert p.workloads_of("guest") == ["rand-write-4k"]
    e = expansion(p)
    per_tier = {
        t: sorted({u.workload.name for u in e.units if u.cell.tier == t})
        for t in ("blocklayer", "guest")
    }
    assert per_tier == {
        "blocklayer": ["rand-write-4k", "seq-write-zeroes-1m"],
        "guest": ["rand-write-4k"],
    }
    # rand-write-4k writes random data: zero detection cannot change it, so it runs at
    # detect_zeroes=off only (4 block-layer cells); the zero-filled writes run on all 8; the guests'
    # 4 cells.
    assert len(e.units) == 4 + 8 + 4
    assert {u.cell.detect_zeroes for u in e.units if u.workload.name == "rand-write-4k"} == {"off"}
    # The runner resolves a tier's own workloads the same way (plan_expansion is what `run` and
    # `plan` use).
    assert sorted(u.key for u in plan_expansion(p, None, set()).units) == sorted(
        u.key for u in e.units
    )


def test_a_guest_table_gives_the_null_ceiling_its_buses() -> None:
    p = plan(
        null_ceiling=True,
        blocklayer=None,
        guest={"bus": ["virtio-blk", "virtio-scsi-single"]},
        bus=["virtio-blk"],
    )
    ceilings = [c for c in expansion(p).cells if c.is_null_ceiling and c.tier == "guest"]
    assert sorted(c.bus for c in ceilings) == ["virtio-blk", "virtio-scsi-single"]


def _old_expand_keys(p: Plan) -> list[str]:
    """The expansion before tier tables: one product over every axis, collapsed and deduplicated (a
    copy of the old code, the reference that a plan without tier tables must still match cell for
    cell, in order)."""
    values = {a: p.axis_values(a) for a in axes.names()}
    seen: list[Cell] = []
    for combo in itertools.product(*values.values()):
        cell = Cell(dict(zip(values, combo, strict=True)))
        cell = cell.replace(**{a: NA for a in collapsed_axes(cell.tier)})
        if cell not in seen:
            seen.append(cell)
    return [c.key for c in seen if prune_reason(c, OK) is None]


@pytest.mark.parametrize("name", [n for n in builtin_names() if not load_plan(n)[0].tier_tables])
def test_a_plan_without_tier_tables_expands_and_dumps_as_before(name: str) -> None:
    p, _ = load_plan(name)
    e = expand(p, {b.label(): OK for b in p.backing}, [wl.resolve(n) for n in p.workloads])
    extra = [Cell(v).key for t in p.tier for v in declaration(t).extra_cells(p)]
    assert [c.key for c in e.cells] == _old_expand_keys(p) + extra
    dumped = p.model_dump(mode="json")
    assert not set(dumped) & {"blocklayer", "guest", "baremetal", "durability", "tier_tables"}
    assert "tier_tables" not in p.canonical_json()


def test_dump_round_trips_and_fingerprint_follows_the_tables() -> None:
    p = plan()
    dumped = p.model_dump(mode="json")
    assert dumped["blocklayer"] == {"detect_zeroes": ["off", "on"], "cluster_size": ["64k", "1M"]}
    again = Plan.model_validate(json.loads(json.dumps(dumped)))
    assert again == p and again.fingerprint() == p.fingerprint()
    # Written in another order, the same table: the same plan.
    reordered = plan(blocklayer={"cluster_size": ["64k", "1M"], "detect_zeroes": ["off", "on"]})
    assert reordered.fingerprint() == p.fingerprint()
    assert plan(blocklayer={"detect_zeroes": ["off", "on"]}).fingerprint() != p.fingerprint()
    assert plan(blocklayer=None).fingerprint() != p.fingerprint()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"tier": ["guest"]},
            "blocklayer: a [blocklayer] table, but the plan does not run the blocklayer tier",
        ),
        (
            {
                "tier": ["baremetal", "blocklayer"],
                "blocklayer": None,
                "baremetal": {"detect_zeroes": ["on"]},
            },
            "baremetal.detect_zeroes: the baremetal tier does not act on detect_zeroes",
        ),
        ({"blocklayer": {"bus": ["virtio-blk"]}}, "move it to the [guest] table"),
        (
            {"blocklayer": {"detect_zeroes": ["maybe"]}},
            "blocklayer.detect_zeroes.0: 'maybe' is not valid",
        ),
        (
            {"blocklayer": {"detect_zeroe": ["on"]}},
            "blocklayer: unknown key 'detect_zeroe' — did you mean 'detect_zeroes'",
        ),
        ({"blocklayer": {"tier": ["guest"]}}, "blocklayer: unknown key 'tier'"),
        ({"blocklayer": {}}, "the [blocklayer] table is empty"),
        ({"blocklayer": 3}, "blocklayer: must be a table"),
        ({"blocklayer": {"workloads": []}}, "blocklayer.workloads"),
        ({"blocklayer": {"workloads": "rand-read-4k"}}, "blocklayer.workloads: must be a list"),
        (
            {"blocklayer": None, "blocklayr": {"cache": ["none"]}},
            "unknown key 'blocklayr' — did you mean 'blocklayer'",
        ),
        ({"tier_tables": {}}, "unknown key 'tier_tables'"),
        (
            {
                "tier": ["consolidation"],
                "blocklayer": None,
                "workloads": None,
                "consolidation": {"cache": ["none"]},
            },
            "the [consolidation] table holds the consolidation tier's settings",
        ),
    ],
)
def test_bad_tier_tables_are_one_line_errors(change: dict, expected: str) -> None:
    with pytest.raises(UserError) as e:
        plan_from_dict(plan_with(**change), "p.toml")
    msg = e.value.one_line()
    assert expected in msg and "\n" not in msg, msg


def test_a_table_naming_only_new_axes_probes_qemu() -> None:
    # The facts are probed for plans that name a later axis; a tier table naming one counts.
    assert not qemu_caps.plan_needs_facts(plan(blocklayer=None, aio=["threads"]))
    assert qemu_caps.plan_needs_facts(plan(aio=["threads"]))


def test_modern_is_one_plan_within_its_budget() -> None:
    p, _ = load_plan("modern")
    assert "modern-image" not in builtin_names()
    e = plan_expansion(p, None, set())
    block = [c for c in e.cells if c.tier == "blocklayer"]
    guest = [c for c in e.cells if c.tier == "guest"]
    assert {c.detect_zeroes for c in block} == {"off", "on"} and {
        c.cluster_size for c in block
    } == {"64k", "1M"}
    assert {c.l2_cache for c in block} == {"default", "whole-image"}
    assert {c.detect_zeroes for c in guest} == {"off"} and {c.cluster_size for c in guest} == {
        "64k"
    }
    assert {c.l2_cache for c in guest} == {"default"}
    assert {c.iothread for c in guest} == {"off", "on"} and {c.bus for c in guest} == {
        "virtio-blk",
        "virtio-scsi-single",
    }
    assert {u.workload.name for u in e.units if u.cell.tier == "blocklayer"} >= {
        "seq-write-zeroes-1m-first",
        "rand-write-4k-first",
    }
    # Each image-layer question on one cell of its own; the guests' workloads on the 5 aio × cache
    # cells.
    per_workload = {
        w: {c.label() for c in block if any(u.cell == c and u.workload.name == w for u in e.units)}
        for w in (
            "seq-write-zeroes-1m-first",
            "rand-write-4k-first",
            "rand-read-4k-sparse-1t",
            "rand-read-4k-qd32",
        )
    }
    assert (
        len(per_workload["seq-write-zeroes-1m-first"]) == 2
        and len(per_workload["rand-write-4k-first"]) == 2
    )
    assert len(per_workload["rand-read-4k-sparse-1t"]) == 2
    assert len(per_workload["rand-read-4k-qd32"]) == 5
    assert "seq-write-zeroes-1m-first" not in {
        u.workload.name for u in e.units if u.cell.tier == "guest"
    }
    low, _ = estimate_seconds(p, e)
    assert low <= p.time_budget_s == 20 * 60  # the minimum repetitions fit the 20-minute budget


def test_plan_explain_shows_each_tier_and_its_own_values(tmp_path: Path) -> None:
    proc = run_cli("plan", "modern", "--explain", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "cells: blocklayer" in out and "cells: guest" in out
    assert "tier blocklayer: 8 cells, 16 units" in out
    assert (
        "seq-write-zeroes-1m-first on cache none, aio io_uring, detect_zeroes off/on"
        in " ".join(out.split())
    )
    assert "then the blocklayer tier's contenders (what the race did not eliminate" in " ".join(
        out.split()
    )
    assert "tier guest: 20 cells, 40 units" in out and "estimated duration" in out
    guest_table = out.split("cells: guest")[1].split("pruned")[0]
    assert "detect_zeroes" not in guest_table and "iothread" in guest_table
