"""Adding an axis is adding one registry entry: a demonstration axis, kept here and never shipped.

The axis below is QEMU's zero detection on the format node (``detect-zeroes``), declared only as an
:class:`~iomatrix.domain.axes.Axis` — its values, default, the layer it acts on, its QEMU option and its
libvirt spelling. With no other change, a plan names it, the matrix expands and collapses it (bare
metal has no format node), the block-layer tier runs it in a real qemu-storage-daemon with real fio,
the store keeps it as a row of the cell, and ranking, results and CSV carry it; a cell that leaves
it at its default keeps the key it had before the axis existed."""  # noqa: E501

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.commands.plan import print_explain
from iomatrix.domain import NA, axes
from iomatrix.domain.axes import Axis, Layer, QemuOptions, ToolOption
from iomatrix.matrix import expand, from_key
from iomatrix.plan.load import plan_from_dict
from iomatrix.report.export import render_tables
from iomatrix.report.exports import results_table
from iomatrix.report.rank import rank_sweep
from iomatrix.report.results import results_document
from iomatrix.runner import RunOptions, SweepRunner, plan_expansion
from iomatrix.store import Store
from iomatrix.ui import console
from iomatrix.workloads import resolve
from tests.conftest import axis_set_aside, needs

DEMO = Axis(
    "demo_zeroes",
    "QEMU's zero detection on the format node (demonstration axis)",
    ("off", "on"),
    "off",
    ("off",),
    frozenset({Layer.IMAGE}),
    simpler=("off", "on"),
    qemu=lambda v: QemuOptions(format_node=(("detect-zeroes", v),)),
    tools={"libvirt": lambda v: ToolOption((("detect_zeroes", v),))},
)


@pytest.fixture(autouse=True)
def without_zero_detection() -> Iterator[None]:
    """The demonstration axis sets the format node's detect-zeroes, which the registry's
    detect_zeroes axis sets since (and the registry refuses two axes setting one option): set the
    real one aside for the demo."""
    with axis_set_aside("detect_zeroes"):
        yield


PLAN = {
    "name": "demo-axis",
    "tier": ["baremetal", "blocklayer"],
    "format": ["raw"],
    "cache": ["none"],
    "demo_zeroes": ["off", "on"],
    "workloads": ["seq-write-1m"],
    "size": "32M",
    "image_size": "64M",
    "runtime": 0.5,
    "null_ceiling": False,
    "retry_disturbed": False,
    "repetitions": {"min": 2, "max": 2},
}


def test_plan_validates_and_expands_the_new_axis() -> None:
    with axes.registered(DEMO):
        plan = plan_from_dict(dict(PLAN), "demo.toml")
        assert plan.axis_values("demo_zeroes") == ["off", "on"]
        # The plan's dump carries the axis like any other key (stored with the sweep, part of its
        # fingerprint).
        assert plan.model_dump(mode="json")["demo_zeroes"] == ["off", "on"]
        exp = expand(plan, {}, [resolve(w) for w in plan.workloads])
        keys = sorted(c.key for c in exp.cells)
        # Bare metal has no format node: the axis collapses there ("-") instead of multiplying it.
        assert "demo_zeroes" in exp.collapsed["baremetal"]
        assert keys == [
            "baremetal/-/-/none/threads/-/dir/none",
            # the default: the key from before the axis
            "blocklayer/raw/off/none/threads/-/dir/none",
            "blocklayer/raw/off/none/threads/-/dir/none+demo_zeroes=on",
        ]
        # `plan --explain` gets a column for the axis the plan varies
        with console.capture() as cap:
            print_explain(exp)
        header = next(line for line in cap.get().splitlines() if "workloads" in line)
        assert header.split()[-2:] == ["demo_zeroes", "workloads"]
        on = next(c for c in exp.cells if c["demo_zeroes"] == "on")
        assert from_key(on.key) == on and on.label().endswith("demo_zeroes=on")
        with pytest.raises(
            Exception, match=r"demo_zeroes\.0: 'maybe' is not valid; valid values: 'off', 'on'"
        ):
            plan_from_dict({**PLAN, "demo_zeroes": ["maybe"]}, "demo.toml")
    # Without the axis, the plan is refused as naming an unknown key, not silently run without it.
    with pytest.raises(Exception, match="unknown key 'demo_zeroes'"):
        plan_from_dict(dict(PLAN), "demo.toml")


@pytest.mark.slow
@needs("fio")
@needs("qemu-storage-daemon")
def test_block_layer_runs_stores_and_ranks_the_new_axis(tmp_path: Path) -> None:
    with axes.registered(DEMO):
        plan = plan_from_dict(dict(PLAN), "demo.toml")
        db = tmp_path / "r.sqlite"
        store = Store(db)
        opts = RunOptions(workdir=tmp_path / "work", monitor_interval=0.5)
        assert len(plan_expansion(plan, None, set()).units) == 3
        result = SweepRunner(plan, None, store, opts).run()
        store.close()
        assert result.runs_failed == 0 and result.runs_done == 6, result

        con = sqlite3.connect(db)
        argv = {
            key: json.loads(meta)["daemon_argv"]
            for key, meta in con.execute(
                "SELECT c.key, r.meta_json FROM runs r JOIN cells c ON c.id=r.cell_id "
                "WHERE c.tier='blocklayer'"
            )
        }
        graph = {key: a[a.index("--blockdev") + 1] for key, a in argv.items()}
        on_key = "blocklayer/raw/off/none/threads/-/dir/none+demo_zeroes=on"
        assert "detect-zeroes=on" in graph[on_key]
        assert "detect-zeroes=off" in graph["blocklayer/raw/off/none/threads/-/dir/none"]
        # The store keeps every axis of a cell as a row: the new one needed no schema change.
        rows = dict(
            con.execute(
                "SELECT a.axis, a.value FROM cell_axes a JOIN cells c ON c.id=a.cell_id "
                "WHERE c.key=?",
                (on_key,),
            ).fetchall()
        )
        assert rows["demo_zeroes"] == "on" and rows["format"] == "raw"
        con.close()

        ro = Store.open_existing(db)
        ranking = rank_sweep(ro, 1, "seq-write-1m", None, min_n=2)
        block = next(r for r in ranking if r.tier == "blocklayer")
        ranked = set(block.cells)
        assert len(ranked) == 2
        assert any("demo_zeroes=on" in label for label in ranked), ranked
        doc = results_document(ro, [1])
        assert {r["axes"]["demo_zeroes"] for r in doc["sweeps"][0]["results"]} == {NA, "off", "on"}
        csv_text = render_tables(results_table(doc), "csv")
        # A column per axis of the first release, and one for a later axis the sweep sets (the
        # demonstration axis; the registry's other later axes stay at their defaults here and name
        # nothing).
        names = [a.name for a in axes.axes() if a.always_named] + ["demo_zeroes"]
        assert csv_text.splitlines()[0].split(",")[: len(names)] == names
        ro.close()
