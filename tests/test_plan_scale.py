"""A big plan expands in work linear in its cells and units (issue 68: `plan` of a 14,040-unit plan
did not finish in 400 s). The plan is read once per tier and workload (matrix.PlanValues), every
cell of the product is checked against the rules once, and every unit against what its workload can
show once. The work is counted, not timed: bench/plan_expansion.py prints the time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iomatrix import matrix
from iomatrix.domain import axes
from iomatrix.plan.load import load_plan
from iomatrix.plan.model import Plan
from iomatrix.sweep.expansion import plan_expansion

# Two tiers, nine swept axes, five workloads: 2,022 cells × 5 = 10,110 units, 6,984 cells pruned.
BIG_PLAN = """
tier = ["blocklayer", "guest"]
format = ["raw", "qcow2", "qed"]
preallocation = ["off", "metadata", "falloc", "full"]
cache = ["unsafe", "none", "writeback", "writethrough", "directsync"]
aio = ["threads", "native", "io_uring"]
bus = ["virtio-blk", "virtio-scsi", "virtio-scsi-single", "ide", "sata", "nvme"]
iothread = ["off", "on"]
queues = {queues}
workloads = ["rand-read-4k", "rand-write-4k", "seq-read-1m", "seq-write-1m", "rand-read-4k-qd32"]
size = "64M"
runtime = 1
"""


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Count the calls of owner.name, which still runs as it is."""
    calls = [0]
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _expand_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queues: list[str]
) -> tuple[matrix.Expansion, dict[str, int]]:
    path = tmp_path / f"big-{len(queues)}.toml"
    path.write_text(BIG_PLAN.format(queues=repr(queues).replace("'", '"')))
    plan, base = load_plan(str(path))
    with monkeypatch.context() as m:
        reads = _counting(m, Plan, "axis_values")
        rules = _counting(m, matrix, "prune_reason")
        shown = _counting(m, axes, "unshown_reason")
        exp = plan_expansion(plan, base, set())
    return exp, {"axis_values": reads[0], "prune_reason": rules[0], "unshown": shown[0]}


def test_a_ten_thousand_unit_plan_is_expanded_in_linear_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp, work = _expand_counted(tmp_path, monkeypatch, ["auto", "1", "2", "4"])
    assert len(exp.units) >= 10_000
    cell_pruned = [p for p in exp.pruned if " × " not in p.what]
    unit_pruned = len(exp.pruned) - len(cell_pruned)
    # each cell of the product checked once against the rules (a tier's extra cells, the null
    # ceiling's, are the tier's own and not checked)
    assert len(cell_pruned) < work["prune_reason"] <= len(exp.cells) + len(cell_pruned)
    # each unit checked once at most against what its workload can show
    assert work["unshown"] <= len(exp.units) + unit_pruned
    # the plan read once per tier and workload, not per cell or unit
    per_read = len(axes.names())
    assert work["axis_values"] <= per_read * 2 * 6, work


def test_twice_the_plan_is_twice_the_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    half, half_work = _expand_counted(tmp_path, monkeypatch, ["auto", "1"])
    full, full_work = _expand_counted(tmp_path, monkeypatch, ["auto", "1", "2", "4"])
    assert len(full.cells) > 1.3 * len(half.cells)
    assert full_work["axis_values"] == half_work["axis_values"]
    # the rules and the workloads' checks grow with the cells and units, no faster
    for exp, work in ((half, half_work), (full, full_work)):
        assert work["prune_reason"] <= len(exp.cells) + len(exp.pruned)
        assert work["unshown"] <= len(exp.units) + len(exp.pruned)
