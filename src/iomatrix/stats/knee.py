"""The knee of a latency-against-load curve: where latency starts to grow faster than throughput.

Points are a configuration's (IOPS, p99 latency) at increasing offered load (queue depth 1, 4, 16,
64), in load order.  Between neighbours i−1 and i:

    ΔIOPS_rel    = (IOPS_i − IOPS_{i−1}) / IOPS_{i−1}
    Δlatency_rel = (lat_i − lat_{i−1}) / lat_{i−1}

The knee is the first point i (i ≥ 1) where Δlatency_rel > ΔIOPS_rel: deeper queues from there on
buy less throughput, relatively, than they cost in tail latency (Little's law: with throughput flat,
every extra request in flight is waiting).  Before it, throughput grows at least as fast as latency.
None when there is no such point (the device kept scaling over the measured range), when fewer than
two points are given, or when a value needed is not positive (a relative change from 0 is
undefined)."""

from __future__ import annotations

from collections.abc import Sequence


def knee_index(points: Sequence[tuple[float, float]]) -> int | None:
    """Index of the knee of ``points`` = [(iops, latency), ...] in load order (see the module
    docstring)."""
    for i in range(1, len(points)):
        (iops0, lat0), (iops1, lat1) = points[i - 1], points[i]
        if iops0 <= 0 or lat0 <= 0:
            return None
        if (lat1 - lat0) / lat0 > (iops1 - iops0) / iops0:
            return i
    return None
