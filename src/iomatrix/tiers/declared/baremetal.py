"""The bare-metal tier as declared: fio on the host, the reference every other tier is divided
by."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iomatrix.domain.axes import Layer
from iomatrix.protocol_registry import network_protocol
from iomatrix.tiers.declaration import TierDeclaration

if TYPE_CHECKING:
    from iomatrix.domain.axes import BackingFacts
    from iomatrix.domain.cell import Cell


class BareMetal(TierDeclaration):
    name = "baremetal"
    summary = "fio on the host, reproducing each cache mode's semantics: the baseline"
    implementation = "iomatrix.tiers.baremetal:BareMetalTier"
    report_companion = "iomatrix.report.companions.baremetal:BareMetalReport"
    layers = frozenset({Layer.PROCESS, Layer.HOST_IO})  # fio on the host: no image, no guest device
    overhead_s = 1.5  # fio start + prefill
    is_reference = True
    order = 0
    title = "bare metal"

    @classmethod
    def prune_reason(cls, cell: Cell, backing: BackingFacts | None) -> str | None:
        # On a network backing this tier is the server-side baseline: fio on the file that holds a
        # disk's bytes on the server, which only a server iomatrix started itself shows
        # (NetworkDisk.server_path).
        network = None if backing is None else network_protocol(backing.protocol)
        if network is not None and network.server_baseline_unavailable is not None:
            return network.server_baseline_unavailable
        if backing is not None and backing.protocol is not None and backing.lab_started is False:
            return (
                "the server-side baseline runs fio on the disk's file on the server, "
                "which an existing "
                f"{backing.protocol} server does not show; it runs on a lab-started one"
            )
        return super().prune_reason(cell, backing)
