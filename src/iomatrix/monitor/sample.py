"""One interval of the host sampler's output: what a sweep stores and a report reads back. Its own
module, so that a report summarising stored samples does not import the sampler and psutil (issue
52)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MonitorSample:
    """One sampling interval: `t` is seconds since start() at the end of the
    interval; `values` maps documented field names (docs/monitoring.md) to floats."""

    t: float
    values: dict[str, float] = field(default_factory=dict)
