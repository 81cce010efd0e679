"""Where adding clients stops adding aggregate throughput: the saturation point of a contention
sweep.

Points are the aggregate throughput of N clients sharing one backend, each with a 95% CI over
repetitions, for increasing N (e.g. 1, 2, 4). Going from N_{i−1} to N_i clients, with the gain
perfect scaling would give (every added client adds as much as an existing one had) and the least
gain that counts as scaling

    perfect = mean_{i−1} · (N_i − N_{i−1}) / N_{i−1},      needed = min_gain · perfect,

each step is one of three:

* *still scales*: the CI at N_i lies wholly above the CI at N_{i−1} (low_i > high_{i−1}) and the
  mean grew by at least `needed`;
* *stopped scaling*: even the CI's upper end at N_i adds less than `needed` (high_i < mean_{i−1} +
  needed) — the saturation point is then N_{i−1}: more clients from there on share the backend's
  throughput instead of adding to it;
* *not decided*: neither (the intervals overlap and could hold a scaling step): too few or too noisy
  runs to say; nothing is claimed from there on.

No saturation when every step still scales (the backend kept up over the measured range) or with
fewer than two points. A point without a CI (one repetition) uses its mean as both ends."""

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


@dataclass(frozen=True)
class Saturation:
    """Where the aggregate stopped scaling (`clients`), or the step from which the intervals could
    not tell (`undecided`: its lower number of clients); both None when every measured step still
    scaled."""

    clients: int | None = None
    undecided: int | None = None


def saturation(points: Sequence[AggregatePoint], min_gain: float = MIN_GAIN) -> Saturation:
    """The saturation point, or the first step the intervals cannot decide (see the module
    docstring)."""
    ordered = sorted(points, key=lambda p: p.clients)
    for prev, cur in itertools.pairwise(ordered):
        prev_high = prev.mean if prev.ci_high is None else prev.ci_high
        cur_low = cur.mean if cur.ci_low is None else cur.ci_low
        cur_high = cur.mean if cur.ci_high is None else cur.ci_high
        needed = min_gain * prev.mean * (cur.clients - prev.clients) / prev.clients
        if cur_low > prev_high and cur.mean - prev.mean >= needed:
            continue  # still scales
        if cur_high < prev.mean + needed:
            return Saturation(clients=prev.clients)
        return Saturation(undecided=prev.clients)
    return Saturation()
