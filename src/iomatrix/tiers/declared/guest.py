"""The guest tier as declared: fio inside a freshly booted QEMU guest, the whole virtual I/O
path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field

from iomatrix import domain
from iomatrix.domain import NULL_BACKING, Bus
from iomatrix.domain.axes import Layer
from iomatrix.guest.cmdline import machine_for, max_runs_per_boot
from iomatrix.qemu_block import NULL_FORMAT
from iomatrix.tiers.declaration import TierDeclaration, qemu_host_cache_wording

# A real image under TCG: its boot, shared by the runs of one cell in it (tiers/real_guest.py), and
# each run beyond its runtime (the guest made ready, its facts and view of the disk read, fio's job
# written, fio's own start-up in the TCG guest, its output and log read back: each a guest-exec).
# The estimate is a quiet host's (estimate.py): `iomatrix run real-guest` on a quiet 2-core host
# (bench/budgets.py, 2026-11-28, docs/benchmarks-history.md "Issue 70: the last built-in plans")
# booted to the agent in 39-41 s, its first run of a boot took 50-61 s of wall (the boot, the disks
# made, the host's cache dropped, the run) and each later one 12-19 s for a 2 s runtime: ~50 s a
# boot and ~15 s a run. At load ~3 they were 83 s, 152 s and 50 s (tests/test_real_guest.py), which
# a loaded host's sweep pays, to its budget at most.
REAL_IMAGE_BOOT_S = 50.0
REAL_IMAGE_RUN_OVERHEAD_S = 15.0

if TYPE_CHECKING:
    from iomatrix.domain.cell import Cell
    from iomatrix.domain.plan_view import PlanView
    from iomatrix.domain.workload import Workload


class Guest(TierDeclaration):
    name = "guest"
    summary = "fio inside a freshly booted QEMU guest on a fresh image: the whole virtual I/O path"
    implementation = "iomatrix.tiers.guest:GuestTier"
    report_companion = "iomatrix.report.companions.guest:GuestReport"
    layers = frozenset(Layer)
    overhead_s = 4.5  # one boot per run under TCG (pc machine)
    # TCG boots (and batches of runs) past a spent budget: run_timeout.py
    budget_margin_floor_s = 180.0
    batches_runs = True
    # the runner's cache dropping waits for the boot, behind a gate (HostGate)
    overlaps_host_ready = True
    # One microvm boot and shutdown shared by a batch, under TCG, with the host's work between boots
    # (sync and cache dropping, images created and removed): ~2.3 s + 1.2–2.3 s on a quiet host
    # (docs/benchmarks-history.md, "Guest tier efficiency: shared boots and microvm", "Sweeps
    # through the runner"); `modern`'s sweeps measured 3.2–3.8 s at load 1–3.
    batch_overhead_s = 3.3
    # Per run inside a boot: fio's own start-up beyond its runtime (0.38–0.46 s measured) and
    # finding the disk.
    batch_run_overhead_s = 0.5
    order = 20
    runs_fs_workloads = True
    uses_images = True
    vm_view = True
    # `[guest] image = "PATH"` (or "debian": the image `iomatrix guest build debian` makes): the
    # runs boot that image's own userspace instead of the built-in initramfs
    # (iomatrix.guest.real_image; docs/guest.md).
    plan_settings: ClassVar[dict[str, tuple[Any, Any]]] = {
        "guest_image": (Annotated[str, Field(min_length=1, max_length=4096)] | None, None),
        # `[guest] filesystem = "ext4"`: in a real image, fio runs on a file of an ext4 made on the
        # disk under test inside the guest, not on the raw disk (tiers/real_guest.py).
        "guest_filesystem": (Literal["none", "ext4"] | None, None),
    }
    table_settings: ClassVar[dict[str, str]] = {
        "image": "guest_image",
        "filesystem": "guest_filesystem",
    }

    @classmethod
    def check_plan(cls, plan: PlanView) -> None:
        image = plan.setting("guest_image")
        if image is not None and cls.name not in plan.tier:
            raise ValueError(
                f"guest.image: the plan names a guest image ({image[:60]}) but does not "
                "run the guest "
                "tier; add guest to `tier` or remove the image"
            )
        if plan.setting("guest_filesystem") not in (None, "none") and image is None:
            raise ValueError(
                "guest.filesystem: a guest filesystem runs in a real guest image only; add "
                '[guest] image = "debian" (or your image\'s path), or remove filesystem'
            )
        if image is not None and ("\n" in image or "\0" in image):
            raise ValueError(
                'guest.image: a path of one line, e.g. image = "/var/lib/images/debian.qcow2", or '
                'image = "debian" for the image iomatrix builds'
            )

    @classmethod
    def paced_by_guest(cls, plan: PlanView) -> bool:
        # a real image's costs (REAL_IMAGE_BOOT_S, ...) were measured whole, on the slower VM
        return plan.setting("guest_image") is None

    @classmethod
    def start_up_s(cls, plan: PlanView) -> tuple[float, float, float]:
        # A real image's boot, not the built-in guest's, sets the cost: once per boot, which the
        # runs of one cell share (`repetitions_per_boot` rounds of them, up to the bus's disks).
        if plan.setting("guest_image") is None:
            return super().start_up_s(plan)
        return (
            REAL_IMAGE_BOOT_S + REAL_IMAGE_RUN_OVERHEAD_S,
            REAL_IMAGE_BOOT_S,
            REAL_IMAGE_RUN_OVERHEAD_S,
        )

    @classmethod
    def page_cache_wording(cls, cache: str) -> str:
        return f"guest O_DIRECT; {qemu_host_cache_wording(cache)}"

    @classmethod
    def extra_cells(cls, plan: PlanView) -> list[dict[str, str]]:
        # One null-co ceiling per bus: no format, preallocation, host cache or backing; what is left
        # is the emulated device and QEMU's block layer.
        if not plan.null_ceiling:
            return []
        return [
            {
                "tier": cls.name,
                "format": NULL_FORMAT,
                "bus": bus,
                "backing": NULL_BACKING,
                "modifier": domain.Modifier.NONE,
            }
            for bus in plan.axis_values("bus", cls.name)
            if domain.bus_rule(bus) is None
        ]

    @classmethod
    def workload_prune_reason(
        cls, cell: Cell, workload: Workload, owner: str | None = None
    ) -> str | None:
        if workload.guest_only and cell.is_null_ceiling:
            return "the null ceiling has no data to hold a filesystem"
        return super().workload_prune_reason(cell, workload, owner)

    @classmethod
    def max_batch(cls, cell: Cell) -> int:
        return max_runs_per_boot(Bus(cell.bus), machine_for(cell.bus, cell.iothread))
