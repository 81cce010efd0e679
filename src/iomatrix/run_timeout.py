"""How long one run may take before it is killed: the plan's `run_timeout`, and no longer than the
time budget left plus a margin.

The scheduler starts no run beyond a unit's first once the budget is spent, but a run that never ends
(a `size` typo laying out a 999 TiB file, a job stuck in the kernel) used to be stopped only by
`run_timeout` (300 s by default), whatever the budget. Each run's timeout is therefore

    timeout = min(run_timeout, max(0, budget − elapsed) + margin),   margin = max(floor, 3 × (runtime + ramp))

where `elapsed` is the sweep's wall clock so far (earlier sessions included). The margin lets a run
that starts just before the budget ends finish normally (fio's start-up, prefill and final flush, a
guest's boot), and lets a unit's first run, which the scheduler always starts, even with the
budget spent, take a run's normal length; it never lets one run go on past `run_timeout`. The floor is the
tier's `budget_margin_floor_s`: 60 s for fio on the host, 180 s for tiers that boot TCG guests (a
boot and a batch of runs in it swing several-fold under load). The tier kills fio (or QEMU) with
everything it started, its file lay-out included, and deletes the file it was writing."""  # noqa: E501

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iomatrix.plan.model import Plan

BUDGET_MARGIN_FLOOR_S = 60.0
BUDGET_MARGIN_RUNTIMES = 3.0


def budget_margin_s(
    runtime_s: float, ramp_s: float, floor_s: float = BUDGET_MARGIN_FLOOR_S
) -> float:
    """Seconds a run may go on past the time budget: max(floor, 3 × (runtime + ramp))."""
    return max(floor_s, BUDGET_MARGIN_RUNTIMES * (runtime_s + ramp_s))


def run_timeout_s(
    *,
    run_timeout: float,
    budget_s: float,
    elapsed_s: float,
    runtime_s: float,
    ramp_s: float = 0.0,
    floor_s: float = BUDGET_MARGIN_FLOOR_S,
) -> float:
    """min(run_timeout, max(0, budget_s − elapsed_s) + budget_margin_s(runtime_s, ramp_s,
    floor_s))."""
    return min(
        run_timeout, max(0.0, budget_s - elapsed_s) + budget_margin_s(runtime_s, ramp_s, floor_s)
    )


def plan_run_timeout_s(
    plan: Plan, elapsed_s: float, floor_s: float = BUDGET_MARGIN_FLOOR_S
) -> float:
    """The timeout of a run that starts `elapsed_s` into a sweep of `plan` (run_timeout_s with the
    plan's values and the tier's floor)."""
    return run_timeout_s(
        run_timeout=plan.run_timeout,
        budget_s=plan.time_budget_s,
        elapsed_s=elapsed_s,
        runtime_s=plan.runtime,
        ramp_s=plan.ramp,
        floor_s=floor_s,
    )
