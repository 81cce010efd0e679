"""How long one run may take before it is killed: the plan's `run_timeout`, and no longer than the time budget
left plus a margin.

The scheduler starts no run beyond the minimum once the budget is spent, but a run that never ends (a `size`
typo laying out a 999 TiB file, a job stuck in the kernel) used to be stopped only by `run_timeout` (300 s by
default), whatever the budget. Each run's timeout is therefore

    timeout = min(run_timeout, max(0, budget − elapsed) + margin),   margin = max(60 s, 3 × (runtime + ramp))

where `elapsed` is the sweep's wall clock so far (earlier sessions included). The margin lets a run that starts
just before the budget ends finish normally (fio's start-up, prefill and final flush, a guest's boot), and lets
the minimum repetitions the scheduler always runs, even with the budget spent, take a run's normal length; it
never lets one run go on past `run_timeout`. The tier kills fio (or QEMU) with everything it started, its
file lay-out included, and deletes the file it was writing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iomatrix.plan.model import Plan

BUDGET_MARGIN_FLOOR_S = 60.0
BUDGET_MARGIN_RUNTIMES = 3.0


def budget_margin_s(runtime_s: float, ramp_s: float) -> float:
    """Seconds a run may go on past the time budget: max(60 s, 3 × (runtime + ramp))."""
    return max(BUDGET_MARGIN_FLOOR_S, BUDGET_MARGIN_RUNTIMES * (runtime_s + ramp_s))


def run_timeout_s(*, run_timeout: float, budget_s: float, elapsed_s: float, runtime_s: float,
                  ramp_s: float = 0.0) -> float:
    """min(run_timeout, max(0, budget_s − elapsed_s) + budget_margin_s(runtime_s, ramp_s))."""
    return min(run_timeout, max(0.0, budget_s - elapsed_s) + budget_margin_s(runtime_s, ramp_s))


def plan_run_timeout_s(plan: Plan, elapsed_s: float) -> float:
    """The timeout of a run that starts `elapsed_s` into a sweep of `plan` (run_timeout_s with the plan's values)."""
    return run_timeout_s(run_timeout=plan.run_timeout, budget_s=plan.time_budget_s, elapsed_s=elapsed_s,
                         runtime_s=plan.runtime, ramp_s=plan.ramp)
