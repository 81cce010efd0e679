"""How many rounds the next guest boots of a sweep should hold (`repetitions_per_boot = "auto"`):
Kalibera & Jones' optimal repetition count at the boot level, from the runs measured so far.

Inputs: per unit (cell × workload) its ok runs as (boot id, position in the boot, value); the
    measured
cost of a boot c_boot (everything a boot adds: images, QEMU start, boot, shutdown, between boots)
and of one round of a cell inside a boot c_round (the wall time of the cell's runs of one round, u
runs for a cell of u workloads — a boot holding r rounds costs c_boot + r · c_round).

Per unit with estimable components (``two_level.variance_components``: ≥ 2 boots, some with ≥ 2
runs):

    r*_unit = ⌊or⌉ √( (c_boot / c_round) · (σ_w² / σ_b²) )     (``two_level.optimal_runs_per_boot``;
                                                                σ_b² = 0 → the cap)

One value serves the whole sweep, so every cell's boots cover the same rounds and the rounds stay
complete blocks: the median of the units' r* (the lower middle value for an even count), within
[1, cap], where cap is the plan's bound and the disks one boot can hold. Before any unit can be
estimated the current value is kept (the start value, 2: the least that separates within-boot from
between-boot variation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.two_level import boots_of, optimal_runs_per_boot, variance_components

START = 2


@dataclass(frozen=True)
class RoundsPerBoot:
    rounds: int
    reason: str  # one line: why this many
    per_unit: dict[str, int]  # the units' own r*


def _rounds(n: int) -> str:
    return f"{n} round" if n == 1 else f"{n} rounds"


def choose_rounds_per_boot(
    units: Mapping[str, Sequence[tuple[str | None, int | None, float]]],
    boot_cost_s: float | None,
    round_cost_s: float | None,
    current: int,
    cap: int,
) -> RoundsPerBoot:
    """The rounds the next boots hold (see the module docstring)."""
    if cap < 1 or current < 1:
        raise ValueError("need cap ≥ 1 and current ≥ 1")
    current = min(current, cap)
    if not boot_cost_s or not round_cost_s or boot_cost_s < 0 or round_cost_s <= 0:
        return RoundsPerBoot(current, f"{_rounds(current)} per boot: no boot measured yet", {})
    per_unit: dict[str, int] = {}
    for key, runs in units.items():
        tl = variance_components(boots_of(runs)) if runs else None
        if tl is None or tl.between_var is None or tl.within_var is None:
            continue
        per_unit[key] = optimal_runs_per_boot(
            tl.between_var, tl.within_var, boot_cost_s, round_cost_s, cap
        )
    costs = f"boot {boot_cost_s:.1f} s, round {round_cost_s:.1f} s"
    if not per_unit:
        return RoundsPerBoot(
            current,
            f"{_rounds(current)} per boot: variances not estimable yet (need 2 boots with "
            f"≥ 2 runs of a unit); {costs}",
            {},
        )
    ordered = sorted(per_unit.values())
    chosen = ordered[(len(ordered) - 1) // 2]
    return RoundsPerBoot(
        chosen,
        f"{_rounds(chosen)} per boot: median of {len(ordered)} units' optimum "
        f"√((c_boot/c_round)·(σ_w²/σ_b²)) (range {ordered[0]}–{ordered[-1]}); {costs}; "
        f"at most {cap}",
        per_unit,
    )
