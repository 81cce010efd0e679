"""The bare-metal tier as declared: fio on the host, the reference every other tier is divided by."""

from __future__ import annotations

from iomatrix.domain.axes import Layer
from iomatrix.tiers.declaration import TierDeclaration


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
