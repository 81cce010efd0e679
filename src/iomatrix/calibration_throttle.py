"""The A/B calibration's throttle: one twin of a calibration sweep made slower by a known amount on
the block-layer tier. A calibration setting of bench/power_curve.py, not a tuning axis.

The power curve (issue 71) asks how often the decision rule tells apart two cells whose difference
is known. It runs the same configuration on backings that differ only in their name, and puts a
QEMU throttle group over some of them: the cell's own ``--blockdev`` graph, unchanged, under a
``throttle`` filter node whose ``throttle-group`` object caps the I/Os per second at a limit the
bench sets from the unthrottled twin's measured rate (``x-iops-total``; qemu-storage-daemon 7.2
takes both, ``qemu-storage-daemon --object throttle-group,help``). An I/O limit rather than a byte
limit: a preset's unmeasured prefill (128 writes of 1 MiB) then costs 128 I/Os, not the region's
bytes at the capped rate.

Where it comes from: the environment variable ``IOMATRIX_CALIBRATION_THROTTLE`` only, a JSON object
backing name → workload name → x-iops-total, e.g. ``{"twin-c": {"rand-write-4k": 8400}}``. No plan
key sets it: a plan with one is refused as any unknown key is, so a user's sweep cannot carry a
throttle, and a cell is never "throttled" as a configuration to recommend. Every run it slows
records ``calibration_throttle`` (the group, the limit) in its metadata beside the daemon's argv,
so a throttled run cannot be mistaken for a real configuration when its database is read later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.errors import UserError

ENV = "IOMATRIX_CALIBRATION_THROTTLE"
GROUP_ID = "iomx-calibration"
# QEMU's throttle (util/throttle.c throttle_compute_wait) lets a bucket without a burst setting
# (x-iops-total-max unset) run a tenth of a second's worth of I/Os ahead of the limit before it
# makes a request wait, and every run starts a fresh daemon with an empty bucket. A run of T seconds
# at full speed therefore does limit × (T + BURST_S) I/Os; a burst setting cannot make that smaller
# (QEMU refuses x-iops-total-max below x-iops-total, and the bucket is then max × length ≥ 1 s).
BURST_S = 0.1


@dataclass(frozen=True)
class Throttle:
    """A throttle group capping one cell's I/Os per second, over its graph."""

    iops_total: int

    def object_spec(self) -> str:
        """The ``--object`` value of the throttle group."""
        return f"throttle-group,id={GROUP_ID},x-iops-total={self.iops_total}"

    def filter_spec(self, node: str, child: str) -> str:
        """The ``--blockdev`` value of the throttle filter node `node` over the graph `child`."""
        return f"driver=throttle,node-name={node},throttle-group={GROUP_ID},file={child}"

    def meta(self) -> dict[str, object]:
        """What a run's metadata records: that it was throttled, by what."""
        return {
            "purpose": "A/B calibration (bench/power_curve.py): NOT a configuration to use",
            "throttle_group": GROUP_ID,
            "x_iops_total": self.iops_total,
        }


def iops_limit(rate_iops: float, slower: float, runtime_s: float) -> int:
    """The x-iops-total that makes a twin running at `rate_iops` unthrottled `slower` (a fraction)
    slower over a run of `runtime_s` seconds: the target rate (1 − slower) × rate, less the tenth
    of a second of burst QEMU's bucket lets through first (BURST_S):

        limit = (1 − slower) × rate × T / (T + 0.1)

    E.g. 10,000 IOPS, 20 % slower, 1 s runs: 8,000 × 1/1.1 → 7,273 (7,273 × 1.1 = 8,000 I/Os in
    the second). Only while the unthrottled twin would run faster than the limit does the throttle
    bind, so the effect a race sees is what the bench measures, not this nominal one."""
    if not (rate_iops > 0 and 0 < slower < 1 and runtime_s > 0):
        raise ValueError(
            f"rate {rate_iops}, slower {slower}, runtime {runtime_s}: "
            "need a positive rate and runtime and 0 < slower < 1"
        )
    return max(1, round((1 - slower) * rate_iops * runtime_s / (runtime_s + BURST_S)))


def capped_rate(rates: Sequence[float], slower: float) -> float:
    """The ceiling c that makes runs drawn like ``rates`` `slower` (a fraction) slower on average:

        mean(min(x_i, c)) = (1 − slower) · mean(x_i)

    A throttle is a ceiling, not a factor: it slows only the runs that would have gone faster than
    it. Set at (1 − slower) × the mean rate, it slows a twin by more than asked (the capped runs
    average at most the ceiling, and the slower runs were below the mean already): runs of 800,
    950, 1,000, 1,050 and 1,200 IOPS under a ceiling of 900 average 880, 12 % slower where 10 % was
    asked. The ceiling is therefore solved on the unthrottled twins' own runs. The left side rises
    from min(x) to mean(x) as c does, piecewise linearly, so the root is found exactly between two
    sorted rates.

    Worked example: rates 900, 1,000, 1,100 (mean 1,000), 10 % slower → 900·3 = 2,700 needed:
    c = 900 gives 2,700 exactly → 900. 20 % slower → 2,400 needed, below 3 × min = 2,700: every run
    capped, c = 800. Raises ValueError for no rates, a rate ≤ 0, or slower outside (0, 1)."""
    xs = sorted(rates)
    if not xs or xs[0] <= 0 or not 0 < slower < 1:
        raise ValueError(f"need positive rates and 0 < slower < 1, got {list(rates)}, {slower}")
    n, target = len(xs), (1 - slower) * sum(xs)
    below = 0.0  # the sum of the rates under the ceiling's interval
    for i, x in enumerate(xs):
        # c in [previous rate, x]: total = below + c · (n − i)
        c = (target - below) / (n - i)
        if c <= x:
            return c
        below += x
    return xs[-1]  # not reached: slower > 0 keeps the target below sum(xs)


def throttles(environ: Mapping[str, str] = os.environ) -> dict[tuple[str, str], Throttle]:
    """(backing name, workload name) → its Throttle, from ``IOMATRIX_CALIBRATION_THROTTLE``; {}
    when it is not set. A malformed value is a UserError naming the fix."""
    raw = environ.get(ENV, "").strip()
    if not raw:
        return {}
    example = '{"twin-c": {"rand-write-4k": 8400}}'
    try:
        table = json.loads(raw)
    except json.JSONDecodeError as err:
        raise UserError(
            f"{ENV} is not JSON ({err.msg})", hint=f"set it as bench/power_curve.py does: {example}"
        ) from None
    out: dict[tuple[str, str], Throttle] = {}
    ok = isinstance(table, dict)
    for backing, by_workload in table.items() if ok else ():
        ok = ok and isinstance(by_workload, dict)
        for workload, limit in by_workload.items() if ok else ():
            ok = ok and type(limit) is int and limit > 0
            if ok:
                out[(str(backing), str(workload))] = Throttle(limit)
    if not ok:
        raise UserError(
            f"{ENV} must map backing name → workload name → a positive x-iops-total",
            hint=f"e.g. {example}, or unset it (it is a calibration setting of bench/)",
        )
    return out
