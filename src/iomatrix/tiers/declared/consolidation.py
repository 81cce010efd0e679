"""The consolidation tier as declared: tiles of guests started together, its own workload kind
(tiles-N)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from iomatrix.consolidation.roles import guests_per_tile
from iomatrix.consolidation.spec import (
    DEFAULT_TILES,
    SECTION,
    ConsolidationSpec,
    tile_workload_name,
    tiles_of,
)
from iomatrix.domain.axes import Layer
from iomatrix.domain.workload import Workload
from iomatrix.tiers.declaration import (
    TierDeclaration,
    network_backing_reason,
    qemu_host_cache_wording,
)

if TYPE_CHECKING:
    from iomatrix.domain.axes import BackingFacts
    from iomatrix.domain.cell import Cell
    from iomatrix.domain.plan_view import PlanView

# Seconds of guest CPU one boot costs under TCG here, and the fixed part of a point (for estimates
# only).
BOOT_CPU_S = 3.0
HOST_CPUS_FALLBACK = 2


def spec_of(plan: PlanView) -> ConsolidationSpec:
    """The plan's [consolidation] table, or the defaults."""
    return plan.setting(SECTION) or ConsolidationSpec()


class Consolidation(TierDeclaration):
    name = "consolidation"
    summary = (
        "tiles of guests started together that load each other (file copies over a "
        "private network, "
        "a database, a web server, bursty writes): how the host scales with the cache mode"
    )
    implementation = "iomatrix.tiers.consolidation:ConsolidationTier"
    report_companion = "iomatrix.report.companions.consolidation:ConsolidationReport"
    # No host modifier: a tile's guests share the host, and a wrapper of one QEMU would not describe
    # the tile.
    layers = frozenset({Layer.HOST_IO, Layer.IMAGE, Layer.DEVICE})
    overhead_s = 10.0
    # TCG boots (and batches of runs) past a spent budget: run_timeout.py
    budget_margin_floor_s = 180.0
    order = 40
    uses_images = True
    loads_host = True  # 2–6 guests at once: their CPU pressure is what a tile measures
    # Its [consolidation] table: tiles, roles, slowdown bound and KSM permission
    # (iomatrix.consolidation.spec).
    plan_settings: ClassVar[dict[str, tuple[Any, Any]]] = {
        SECTION: (ConsolidationSpec | None, None)
    }
    workload_kind = "consolidation"

    @classmethod
    def default_workloads(cls, plan_data: Mapping[str, Any]) -> list[str]:
        # A consolidation plan's sweep points are its tile counts: the workloads tiles-1, tiles-2,
        # ... (read from the table as written, so only when its tile counts are plausible; the
        # table's own validation reports the others).
        spec = plan_data.get(SECTION)
        tiles = (
            spec.get("tiles", list(DEFAULT_TILES))
            if isinstance(spec, dict)
            else list(DEFAULT_TILES)
        )
        if (
            isinstance(tiles, list)
            and tiles
            and all(isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= 99 for t in tiles)
        ):
            return [tile_workload_name(t) for t in sorted(set(tiles))]
        return []

    @classmethod
    def workload_named(cls, name: str) -> Workload | None:
        """The sweep point ``tiles-N`` (N tiles of guests at once), or None for another name."""
        n = tiles_of(name)
        if n is None:
            return None
        return Workload(
            name=name,
            description=f"{n} consolidation tile{'s' if n > 1 else ''} started together",
            kind=cls.workload_kind,
            rw="randrw",
            primary_metric="point.wall_s",
            higher_is_better=False,
        )

    @classmethod
    def check_plan(cls, plan: PlanView) -> None:
        runs = cls.name in plan.tier
        if runs and plan.setting(SECTION) is None:
            plan.set_setting(SECTION, ConsolidationSpec())
        if plan.setting(SECTION) is not None and not runs:
            raise ValueError(f'a [{SECTION}] table needs tier = ["{cls.name}"]')

    @classmethod
    def page_cache_wording(cls, cache: str) -> str:
        return f"guest O_DIRECT; {qemu_host_cache_wording(cache)}"

    @classmethod
    def prune_reason(cls, cell: Cell, backing: BackingFacts | None) -> str | None:
        if (network := network_backing_reason(cls.name, backing)) is not None:
            return network
        if backing is not None and backing.is_device:
            return (
                "the consolidation tier gives every guest an image of its own: it needs a "
                "directory backing"
            )
        return None

    @classmethod
    def workload_prune_reason(
        cls, cell: Cell, workload: Workload, owner: str | None = None
    ) -> str | None:
        if workload.kind != cls.workload_kind:
            return f"the consolidation tier runs tile counts (tiles-N), not {workload.name}"
        return None

    @classmethod
    def estimate_run_s(cls, plan: PlanView, workload: Workload) -> float | None:
        spec = spec_of(plan)
        guests = (tiles_of(workload.name) or 1) * guests_per_tile(spec.roles)
        cpus = os.cpu_count() or HOST_CPUS_FALLBACK
        # Boots compete for the host's CPUs under emulation; the roles' own work is a few seconds at
        # scale 1.
        return 4.0 + guests * BOOT_CPU_S / cpus + 14.0 * spec.scale * max(1.0, guests / cpus)
