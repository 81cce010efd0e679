"""What a plan expands to on this host: the facts of its backings, its workloads resolved, its cells and units
(``matrix.expand``). `plan --explain`, the space check and the sweep runner all start from it."""

from __future__ import annotations

from pathlib import Path

from iomatrix import qemu_caps, rates, storage_clients
from iomatrix import workloads as wl
from iomatrix.matrix import BackingFacts, Expansion, expand
from iomatrix.plan.model import Plan
from iomatrix.tiers import is_reference, reference_tier


def backing_facts(plan: Plan, allowed: set[Path]) -> dict[str, BackingFacts]:
    return {b.label(): storage_clients.backing_facts(b, allowed) for b in plan.backing}  # protocol, kernel client


def resolve_workloads(plan: Plan, base_dir: Path | None) -> list[wl.Workload]:
    """The plan's workloads; a rate set from the bare-metal maximum needs bare metal and its reference workload."""
    out = [wl.resolve(name, base_dir) for name in plan.workloads]
    rates.check_plan(out, [t for t in plan.tier if is_reference(t)], reference_tier().name)
    return out


def plan_expansion(plan: Plan, base_dir: Path | None, allowed: set[Path]) -> Expansion:
    own = {t: [wl.resolve(name, base_dir) for name in names] for t, names in plan.tier_workloads().items()}
    return expand(plan, backing_facts(plan, allowed), resolve_workloads(plan, base_dir), qemu_caps.facts_for(plan),
                  tier_workloads=own)
