"""The durability tier as declared: power losses and QEMU crashes at seeded points, its own workload kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field

from iomatrix.domain import NA
from iomatrix.domain.axes import Layer
from iomatrix.domain.workload import Workload
from iomatrix.tiers.declaration import TierDeclaration

if TYPE_CHECKING:
    from iomatrix.domain.axes import BackingFacts
    from iomatrix.domain.cell import Cell
    from iomatrix.domain.plan_view import PlanView


def _network_reason(cell: Cell, backing: BackingFacts | None) -> str | None:
    """Where the tier cannot cut a network backing's storage, why (None on a local backing; on a LUN of an iSCSI
    target iomatrix starts, where the cut is a target power loss, tiers/durability_target.py; and on a Ceph
    iomatrix starts, where the cut is a Ceph client crash: QEMU and librbd's cache in it killed)."""
    if backing is None or backing.protocol is None:
        return None
    if backing.protocol == "rbd":
        return _rbd_reason(cell, backing)
    if backing.protocol != "iscsi":
        return (f"the durability tier cuts the power of an iSCSI target, or crashes a Ceph client, on storage it "
                f"starts itself; a cut of a {backing.protocol} server is not built, so its risk lines stay "
                "documented")
    if not backing.lab_started:
        return ("the durability tier cuts the power of an iSCSI target it starts itself (a LUN over a volatile "
                "cache); an existing target cannot be cut: use a lab-started iscsi backing (no portal/iqn)")
    if cell.get("lun_type", NA) == "null":
        return "a null LUN stores nothing: a cut has nothing to lose, so it has no durability to measure"
    if cell.get("rtt", NA) not in (NA, "0"):
        return (f"rtt={cell['rtt']}: what a target power loss takes does not depend on the network's round trip; "
                "the durability tier runs at rtt=0")
    return None


def _rbd_reason(cell: Cell, backing: BackingFacts) -> str | None:
    """On RBD the trial's cut is a Ceph client crash (QEMU SIGKILLed with librbd's cache in it); the cluster is
    then told to forget the dead client (`ceph osd blocklist`), which takes a cluster iomatrix started."""
    if not backing.lab_started:
        return ("the durability tier crashes a Ceph client and then fences it (ceph osd blocklist) on a cluster it "
                "starts itself; it never fences clients of an existing cluster: use a lab-started rbd backing "
                "(no conf/pool)")
    if cell.get("rbd_client", NA) == "krbd":
        return ("rbd_client=krbd keeps no librbd cache: a QEMU crash leaves its writes in the host kernel; the "
                "durability tier crashes librbd clients")
    return None


class Durability(TierDeclaration):
    name = "durability"
    summary = ("a guest writes acknowledged, checksummed records; then a power loss (nbdkit's volatile cache "
               "killed) and a QEMU crash at a seeded random point; counts acknowledged writes lost (on Ceph RBD "
               "a Ceph client crash only)")
    implementation = "iomatrix.tiers.durability:DurabilityTier"
    report_companion = "iomatrix.report.companions.durability:DurabilityReport"
    # Not FRONTEND: what it measures is lost writes, and its two-disk command line attaches no IOThread.
    layers = frozenset(Layer) - {Layer.FRONTEND}
    overhead_s = 5.8  # a whole trial: boot, mkfs, writing until the cut, verification (docs/benchmarks.md)
    # A trial on Ceph RBD also makes two RBD images, fences the crashed client and reads both images back through
    # librbd: 7.5-11.4 s measured, about 9 s (docs/benchmarks.md, issue 35).
    trial_s_by_backing: ClassVar[dict[str, float]] = {"rbd": 9.0}
    budget_margin_floor_s = 180.0  # TCG boots (and batches of runs) past a spent budget: run_timeout.py
    order = 40
    uses_images = False  # its images are its own small ones (LAYOUTS), not the plan's image_size
    fixed_trials = True  # `cuts` trials per configuration
    # Trials (cuts) per configuration, each a power loss and a QEMU crash at a seeded random point.
    plan_settings: ClassVar[dict[str, tuple[Any, Any]]] = {"cuts": (Annotated[int, Field(ge=1, le=1000)], 20)}
    workload_kind = "durability"
    own_workloads = (
        Workload("durability", "checksummed records, flushed and acknowledged in groups, to the raw disk (O_DIRECT) "
                 "and to a file on the guest's ext4 (fsync); then a power loss and a QEMU crash at a seeded "
                 "random point, and a count of acknowledged records lost", kind="durability",
                 rw="write", primary_metric="power_loss.acked_lost", higher_is_better=False),
        Workload("durability-xfs", "the durability trial with the file streams on the guest's xfs (fsync) instead "
                 "of ext4; the host replays the XFS log on a copy and checks it with xfs_repair -n",
                 kind="durability", rw="write", primary_metric="power_loss.acked_lost", higher_is_better=False),
    )
    verdicts = "measured durability verdicts"
    verdict_heading = "measured durability (acknowledged = flushed by the guest):"

    @classmethod
    def default_workloads(cls, plan_data: Mapping[str, Any]) -> list[str]:
        # The first of its workloads: the trial on the guest's ext4 (durability-xfs is asked for by name).
        return [cls.own_workloads[0].name]

    @classmethod
    def check_plan(cls, plan: PlanView) -> None:
        # A durability trial is not a noisy sample to repeat until a CI settles: the plan asks for `cuts` trials
        # per configuration, exactly; the scheduler's repetitions are set from it.
        if cls.name not in plan.tier:
            return
        if len(plan.tier) > 1:
            raise ValueError("the durability tier runs `cuts` trials per configuration: give it a plan of its own "
                             f"(this plan also has {', '.join(t for t in plan.tier if t != cls.name)})")
        cuts = plan.setting("cuts")
        reps = plan.repetitions
        if "repetitions" in plan.model_fields_set and ((reps.min, reps.max) != (cuts, cuts) or reps.precision_max):
            raise ValueError("the durability tier counts trials with `cuts`, not [repetitions]: remove "
                             "[repetitions] and set cuts = N")
        # The plan's own Repetitions model (its type, not an import of the plan model: the plan reads this).
        plan.repetitions = type(reps)(min=cuts, max=cuts)

    @classmethod
    def estimate_run_s(cls, plan: PlanView, workload: Workload) -> float | None:
        # A trial's length is the tier's overhead (boot, write to a seeded cut, verify), not the plan's runtime;
        # the slowest backing of the plan sets it (an estimate, for the budget and `plan`'s duration).
        if workload.kind != cls.workload_kind:
            return None
        return max(cls.trial_s_by_backing.get(b.type, cls.overhead_s) for b in plan.backing)

    @classmethod
    def prune_reason(cls, cell: Cell, backing: BackingFacts | None) -> str | None:
        if (network := _network_reason(cell, backing)) is not None:
            return network
        if backing is not None and backing.is_device:
            return ("the durability tier serves an image file through nbdkit to simulate a power loss: "
                    "give it a directory backing")
        return None

    @classmethod
    def workload_prune_reason(cls, cell: Cell, workload: Workload, owner: str | None = None) -> str | None:
        if workload.kind != cls.workload_kind:
            return f"workload {workload.name} measures speed; the durability tier runs the 'durability' workload"
        return super().workload_prune_reason(cell, workload, owner)
