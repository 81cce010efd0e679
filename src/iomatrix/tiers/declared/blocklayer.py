"""The block-layer tier as declared: fio over NBD to qemu-storage-daemon, QEMU's storage stack
without a guest."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iomatrix import domain
from iomatrix.domain import NULL_BACKING
from iomatrix.domain.axes import Layer
from iomatrix.protocol_registry import network_protocol
from iomatrix.qemu_block import NULL_FORMAT
from iomatrix.tiers.declaration import TierDeclaration, qemu_host_cache_wording

if TYPE_CHECKING:
    from iomatrix.domain.axes import BackingFacts
    from iomatrix.domain.cell import Cell
    from iomatrix.domain.plan_view import PlanView
    from iomatrix.domain.workload import Workload


class BlockLayer(TierDeclaration):
    name = "blocklayer"
    summary = (
        "fio over NBD to qemu-storage-daemon running the cell's block graph: QEMU's storage "
        "stack, no guest"
    )
    implementation = "iomatrix.tiers.blocklayer:BlockLayerTier"
    # QEMU's block graph and its NBD export (the request issuer: FRONTEND), no guest device
    layers = frozenset({Layer.PROCESS, Layer.HOST_IO, Layer.IMAGE, Layer.FRONTEND})
    runs_many_clients = True  # tiers/contention.py
    # Measured on the development host (docs/benchmarks-history.md, "Block layer: where a run's
    # overhead goes, and what was cut"): image + daemon start + teardown.
    overhead_s = 0.7
    order = 10
    uses_images = True

    @classmethod
    def page_cache_wording(cls, cache: str) -> str:
        return (
            "no guest page cache (fio sends NBD requests to QEMU's block layer); "
            f"{qemu_host_cache_wording(cache)}"
        )

    @classmethod
    def extra_cells(cls, plan: PlanView) -> list[dict[str, str]]:
        if not plan.null_ceiling:
            return []
        return [
            {
                "tier": cls.name,
                "format": NULL_FORMAT,
                "backing": NULL_BACKING,
                "modifier": domain.Modifier.NONE,
            }
        ]

    @classmethod
    def prune_reason(cls, cell: Cell, backing: BackingFacts | None) -> str | None:
        # A network disk is opened by QEMU's own client (driver=iscsi, driver=nfs, driver=rbd);
        # through the kernel's client it would be a block device or a file on a mount, which the
        # tier does not set up (issue 34; nor a krbd mapping: a krbd cell measured librbd).
        network = network_protocol(backing.protocol if backing is not None else None)
        if network is not None and network.client_is_kernel(cell):
            return (
                f"{network.client_axis}={network.kernel_client}: the block-layer tier opens a "
                "network disk with QEMU's own client only; logging in, mounting or mapping through "
                "the host's kernel is not set up by iomatrix yet"
            )
        return None

    @classmethod
    def workload_prune_reason(
        cls, cell: Cell, workload: Workload, owner: str | None = None
    ) -> str | None:
        if workload.guest_only:
            return (
                f"workload {workload.name} runs on a guest filesystem; the block-layer "
                "tier has no guest "
                "(and no filesystem): guest tier only"
            )
        return super().workload_prune_reason(cell, workload, owner)
