"""What a workload is: the job a run asks of the disk (``Workload``), apart from the catalogue of
presets (``iomatrix.workloads``), so that a tier's declaration can make its own workloads without
importing the catalogue, which asks the tier declarations for them."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from iomatrix.domain.axes import Layer, WorkloadShape

# What runs a workload: "fio" (a preset job), "fs-read" / "fs-write" (a filesystem job inside a
# guest), "custom" (a job file of the user's), or the `workload_kind` a tier declares for the
# workloads only it runs (iomatrix.tiers.declaration: its own kind, named like the tier, which its
# declaration makes the workloads of).
WorkloadKind = str


@dataclass(frozen=True)
class RateOfMax:
    """An offered load set as a share of the bare-metal maximum measured in the same sweep
    (rand-*-4k-rateNpct): `fraction` of the highest mean IOPS a bare-metal cell of `reference`
    reached on the same backing. ``iomatrix.rates`` checks the plan for it and resolves it from the
    stored runs."""

    fraction: float  # 0.5 for rate50pct
    # the same job without the rate limit (rand-read-4k-qd16): its bare-metal IOPS are the maximum
    reference: str


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    kind: WorkloadKind = "fio"
    rw: str = "read"
    bs: str = "4k"
    iodepth: int = 1
    fdatasync: int = 0  # sync every N writes, as the workload itself asks (a database would)
    rwmixread: int | None = None
    # offered load: fio's rate_iops (the rand-*-4k-rateN presets), None: as fast as it can
    rate_iops: int | None = None
    # the load arrives as a Poisson process (rate_process=poisson: the role profiles)
    rate_poisson: bool = False
    # rand-*-4k-rateNpct: the rate is N% of the sweep's bare-metal maximum, set (rate_iops) before
    # its runs start.
    rate_of_max: RateOfMax | None = None
    custom_path: Path | None = None
    custom_text: str | None = None  # the validated, canonical job file (what fio is given)
    # The figure adaptive repetition converges on and ranking sorts by.
    primary_metric: str = "read.iops"
    higher_is_better: bool = True
    # fio writes zero-filled buffers (zero_buffers=1) instead of its default non-zero data.
    zero_buffers: bool = False
    # The measured job acts on written blocks (rewrites, trims): the region is written first,
    # unmeasured, as for a read workload.
    prefill: bool = False
    # A layer of the I/O stack the workload needs, and why; tiers that do not run it prune the
    # workload.
    needs_layer: Layer | None = None
    needs_why: str = ""
    # The workload runs on a thin disk image of its own size (its region: the whole image), not the
    # plan's image_size and size: reads across an image larger than QEMU's default qcow2 L2 cache
    # covers.
    image_bytes: int | None = None
    # The prefill writes one 4 KiB block at the start of every `prefill_stride` bytes instead of the
    # whole region: a qcow2 image then has every L2 table of the region allocated while it holds
    # almost no data.
    prefill_stride: int | None = None

    @property
    def slug(self) -> str:
        """The name made safe for a file name ("file:jobs/a.fio" holds a '/'); distinct names stay
        distinct."""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip(".")
        if safe == self.name:
            return safe
        return f"{safe[:60]}-{hashlib.sha256(self.name.encode()).hexdigest()[:8]}"

    @property
    def reads(self) -> bool:
        if self.kind in ("fs-read", "fs-write"):
            return self.kind == "fs-read"
        return "read" in self.rw or self.rw in ("randrw", "rw")

    @property
    def writes(self) -> bool:
        if self.kind in ("fs-read", "fs-write"):
            return self.kind == "fs-write"
        return "write" in self.rw or self.rw in ("randrw", "rw")

    @property
    def shape(self) -> WorkloadShape:
        """What the workload does to the disk, for the axes whose effect needs a kind of I/O
        (Axis.shown_by). Only the fio presets are known: a custom job file may do anything, a guest
        filesystem job runs mkfs (which discards), and a tier's own workloads (its workload kind)
        are its own."""
        if self.kind != "fio":
            return WorkloadShape(self.name, known=False)
        return WorkloadShape(
            self.name,
            writes=self.writes,
            zero_writes=self.writes and self.zero_buffers,
            trims="trim" in self.rw,
        )

    @property
    def writes_first(self) -> bool:
        """Whether the region is written (unmeasured) before the measured job: reads would hit holes
        otherwise, and rewrites and trims need written blocks."""
        return self.reads or self.prefill

    @property
    def guest_only(self) -> bool:
        return self.kind in ("fs-read", "fs-write")
