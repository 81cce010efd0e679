"""A run stuck in fio's lay-out (a `size` typo: the prefill of 999 TiB) is killed at its timeout,
with fio's lay-out, and the tier says why: the runner's budget-bound timeout (run_timeout.py) is
then the bound that holds."""

from __future__ import annotations

from pathlib import Path

import psutil

from iomatrix.fio.jobs import JobShape
from iomatrix.matrix import Cell
from iomatrix.plan.load import plan_from_dict
from iomatrix.tiers.baremetal import BareMetalTier
from iomatrix.tiers.base import RunOptions, RunRequest, Target
from iomatrix.workloads import resolve
from tests.conftest import needs

EXABYTE_ISH = 999 << 40  # 999 TiB: the issue's `size = "999T"`


@needs("fio")
def test_a_run_laying_out_a_huge_region_is_killed_at_its_timeout(tmp_path: Path) -> None:
    plan = plan_from_dict(
        {"name": "t", "tier": ["baremetal"], "cache": ["writeback"], "workloads": ["rand-read-4k"]},
        "test",
    )
    tier = BareMetalTier(plan, RunOptions(workdir=tmp_path))
    cell = Cell.of(
        tier="baremetal",
        format="-",
        preallocation="-",
        cache="writeback",
        aio="threads",
        bus="-",
        backing="dev",
        modifier="none",
    )
    fios: list[int] = []
    # /dev/null as the "device": the prefill writes as fast as the CPU allows and fills no disk.
    req = RunRequest(
        cell=cell,
        workload=resolve("rand-read-4k", None),
        target=Target("device", Path("/dev/null")),
        shape=JobShape(size_bytes=EXABYTE_ISH, runtime_s=1.0),
        run_dir=tmp_path / "run",
        timeout_s=3.0,
        on_process=fios.append,
    )
    out = tier.run(req)
    assert not out.ok and out.error is not None and "did not finish within 3 s" in out.error, (
        out.error
    )
    [fio] = fios
    assert not psutil.pid_exists(fio) or psutil.Process(fio).status() == psutil.STATUS_ZOMBIE
