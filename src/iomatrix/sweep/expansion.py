"""What a plan expands to on this host: the facts of its backings, its workloads resolved, its cells
and units (``matrix.expand``). `plan --explain`, the space check and the sweep runner all start from
it."""

from __future__ import annotations

import re
from pathlib import Path

from iomatrix import qemu_caps, rates, storage_clients
from iomatrix import workloads as wl
from iomatrix.matrix import BackingFacts, Expansion, expand
from iomatrix.plan.model import Plan
from iomatrix.protocol_registry import protocols
from iomatrix.tiers import is_reference, reference_tier


def setup_command(package: str) -> str | None:
    """The set-up command that installs `package`: 'scripts/setup.sh --shared-storage' for one a
    network protocol needs (its `packages`: the shared-storage servers and QEMU drivers, which a
    --minimal install leaves out), None for a package no flag of setup.sh installs (zfsutils-linux,
    lvm2). tests/test_protocol_packages.py holds setup.sh to those lists."""
    shared = {p for network in protocols() for p in network.packages}
    return "scripts/setup.sh --shared-storage" if package in shared else None


def backing_facts(plan: Plan, allowed: set[Path]) -> dict[str, BackingFacts]:
    # protocol, kernel client
    return {b.label(): storage_clients.backing_facts(b, allowed) for b in plan.backing}


def resolve_workloads(plan: Plan, base_dir: Path | None) -> list[wl.Workload]:
    """The plan's workloads; a rate set from the bare-metal maximum needs bare metal and its
    reference workload."""
    out = [wl.resolve(name, base_dir) for name in plan.workloads]
    rates.check_plan(out, [t for t in plan.tier if is_reference(t)], reference_tier().name)
    return out


def plan_expansion(plan: Plan, base_dir: Path | None, allowed: set[Path]) -> Expansion:
    own = {
        t: [wl.resolve(name, base_dir) for name in names]
        for t, names in plan.tier_workloads().items()
    }
    return expand(
        plan,
        backing_facts(plan, allowed),
        resolve_workloads(plan, base_dir),
        qemu_caps.facts_for(plan),
        tier_workloads=own,
    )


# A backing's unavailability names the Debian package that brings what is missing ("(apt-get install
# tgt)").
_APT_INSTALL = re.compile(r"\(apt-get install ([a-z0-9][a-z0-9.+-]*)\)")


def nothing_measured(plan: Plan, expansion: Expansion) -> tuple[str, str] | None:
    """(message, fix) when no cell of the plan but the null ceiling can run here, else None. The
    null ceiling measures QEMU's own path with no disk under it: alone it is no answer, so the
    runner refuses the plan before it starts instead of measuring it and saying "nothing to
    recommend" (issue 49). The message names each backing that is unavailable and why (a missing
    server, pool or volume group), the fix the set-up flag that installs what is missing
    (scripts/setup.sh --shared-storage for tgtd, ganesha and Ceph)."""
    if any(not u.cell.is_null_ceiling for u in expansion.units):
        return None
    why: dict[str, str] = {}  # backing → why it is unavailable, first seen
    for p in expansion.pruned:
        if m := re.fullmatch(r"backing (\S+) is unavailable here: (.*)", p.reason):
            why.setdefault(m[1], m[2])
    ceiling = " but the null ceiling" if expansion.units else ""
    if not why:  # the rules between axes pruned every cell
        first = expansion.pruned[0].reason if expansion.pruned else "the plan expands to no cell"
        return (
            f"nothing to run: every cell of plan '{plan.name}'{ceiling} was pruned ({first})",
            f"see 'iomatrix plan {plan.name} --explain'",
        )
    unavailable = "; ".join(f"backing {b}: {r}" for b, r in why.items())
    commands = sorted(
        {c for r in why.values() for pkg in _APT_INSTALL.findall(r) if (c := setup_command(pkg))}
    )
    installs = (
        f"install what is missing with {' and '.join(commands)}"
        if commands
        else "no flag of scripts/setup.sh brings it (a ZFS pool, a volume group, a kernel "
        "module are the "
        "host's own): make it available as said"
    )
    return (
        f"nothing to run: no cell of plan '{plan.name}'{ceiling} can run on this host: "
        f"{unavailable}",
        f"{installs}, or drop those backings; see 'iomatrix plan {plan.name} --explain'",
    )
