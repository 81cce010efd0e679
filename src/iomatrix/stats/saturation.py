"""Where adding clients stops adding aggregate throughput: the saturation point of a contention sweep.

Points are the aggregate throughput of N clients sharing one backend, each with a 95% CI over repetitions,
for increasing N (e.g. 1, 2, 4). Going from N_{i−1} to N_i clients, the aggregate *still scales* when its CI at
N_i lies wholly above its CI at N_{i−1} (low_i > high_{i−1}) and its mean grew by at least `min_gain` of what
perfect scaling would give:

    mean_i − mean_{i−1}  ≥  min_gain · mean_{i−1} · (N_i − N_{i−1}) / N_{i−1}

(perfect scaling: every added client adds as much as an existing one had). The saturation point is N_{i−1} at
the first step that does not still scale: more clients from there on share the backend's throughput instead of
adding to it. None when every step still scales (the backend kept up over the measured range) or with fewer
than two points. A point without a CI (one repetition) uses its mean as both ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

MIN_GAIN = 0.25  # a step must add at least a quarter of what perfect scaling would add


@dataclass(frozen=True)
class AggregatePoint:
    clients: int
    mean: float
    ci_low: float | None = None
    ci_high: float | None = None


def saturation_clients(points: Sequence[AggregatePoint], min_gain: float = MIN_GAIN) -> int | None:
    """The number of clients at which the aggregate stops scaling (see the module docstring)."""
    ordered = sorted(points, key=lambda p: p.clients)
    for prev, cur in itertools.pairwise(ordered):
        prev_high = prev.mean if prev.ci_high is None else prev.ci_high
        cur_low = cur.mean if cur.ci_low is None else cur.ci_low
        perfect_gain = prev.mean * (cur.clients - prev.clients) / prev.clients
        if cur_low <= prev_high or cur.mean - prev.mean < min_gain * perfect_gain:
            return prev.clients
    return None
