"""The durability tier as declared: power losses and QEMU crashes at seeded points, its own workload
kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field

from iomatrix.domain.axes import Layer
from iomatrix.domain.workload import Workload
from iomatrix.protocol_registry import network_protocol, protocol
from iomatrix.tiers.declaration import TierDeclaration

if TYPE_CHECKING:
    from iomatrix.domain.axes import BackingFacts
    from iomatrix.domain.cell import Cell
    from iomatrix.domain.plan_view import PlanView


def _network_reason(cell: Cell, backing: BackingFacts | None) -> str | None:
    """Where the tier cannot cut a network backing's storage, why (None on a local backing): each
    protocol says where its cut is built (NetworkProtocol.durability_reason: a target power loss on
    a LUN of an iSCSI target iomatrix starts, tiers/durability_target.py; a Ceph client crash on a
    cluster it starts)."""
    if backing is None or backing.protocol is None:
        return None
    return protocol(backing.protocol).durability_reason(cell, backing.lab_started)


def _trial_s(backing_type: str, overhead_s: float) -> float:
    """A trial's seconds on a backing of `backing_type`: its protocol's own where it says (a Ceph
    trial makes and fences more), else the tier's overhead."""
    network = network_protocol(backing_type)
    trial_s = None if network is None else network.durability_trial_s
    return overhead_s if trial_s is None else trial_s


class Durability(TierDeclaration):
    name = "durability"
    summary = (
        "a guest writes acknowledged, checksummed records; then a power loss (nbdkit's "
        "volatile cache "
        "killed) and a QEMU crash at a seeded random point; counts acknowledged writes "
        "lost (on Ceph RBD "
        "a Ceph client crash only)"
    )
    implementation = "iomatrix.tiers.durability:DurabilityTier"
    report_companion = "iomatrix.report.companions.durability:DurabilityReport"
    # Not FRONTEND: what it measures is lost writes, and its two-disk command line attaches no
    # IOThread.
    layers = frozenset(Layer) - {Layer.FRONTEND}
    # a whole trial: boot, mkfs, writing until the cut, verification, with the runner's work: 2.8 s
    # per trial on a quiet host (`durability`, 200 trials in 9.36 min; `durability-quick` 2.9 s,
    # `durability-xfs` 3.4 s, its mkfs and mount included; bench/budgets.py,
    # docs/benchmarks-history.md "three more built-in plans", "five more built-in plans"). 5.6-6.6 s
    # on a host at load 5.8
    # ("Durability trial"): the estimate is a quiet host's, as for the other tiers.
    overhead_s = 3.0
    # TCG boots (and batches of runs) past a spent budget: run_timeout.py
    budget_margin_floor_s = 180.0
    order = 40
    uses_images = False  # its images are its own small ones (LAYOUTS), not the plan's image_size
    fixed_trials = True  # `cuts` trials per configuration
    # Trials (cuts) per configuration, each a power loss and a QEMU crash at a seeded random point.
    plan_settings: ClassVar[dict[str, tuple[Any, Any]]] = {
        "cuts": (Annotated[int, Field(ge=1, le=1000)], 20)
    }
    workload_kind = "durability"
    own_workloads = (
        Workload(
            "durability",
            "checksummed records, flushed and acknowledged in groups, to the raw disk (O_DIRECT) "
            "and to a file on the guest's ext4 (fsync); then a power loss and a QEMU "
            "crash at a seeded "
            "random point, and a count of acknowledged records lost",
            kind="durability",
            rw="write",
            primary_metric="power_loss.acked_lost",
            higher_is_better=False,
        ),
        Workload(
            "durability-xfs",
            "the durability trial with the file streams on the guest's xfs (fsync) instead "
            "of ext4; the host replays the XFS log on a copy and checks it with xfs_repair -n",
            kind="durability",
            rw="write",
            primary_metric="power_loss.acked_lost",
            higher_is_better=False,
        ),
    )
    verdicts = "measured durability verdicts"
    verdict_heading = "measured durability (acknowledged = flushed by the guest):"

    @classmethod
    def default_workloads(cls, plan_data: Mapping[str, Any]) -> list[str]:
        # The first of its workloads: the trial on the guest's ext4 (durability-xfs is asked for by
        # name).
        return [cls.own_workloads[0].name]

    @classmethod
    def check_plan(cls, plan: PlanView) -> None:
        # A durability trial is not a noisy sample to repeat until a CI settles: the plan asks for
        # `cuts` trials per configuration, exactly; the scheduler's repetitions are set from it.
        if cls.name not in plan.tier:
            return
        if len(plan.tier) > 1:
            raise ValueError(
                "the durability tier runs `cuts` trials per configuration: give it a "
                "plan of its own "
                f"(this plan also has {', '.join(t for t in plan.tier if t != cls.name)})"
            )
        cuts = plan.setting("cuts")
        reps = plan.repetitions
        if "repetitions" in plan.model_fields_set and (
            (reps.min, reps.max) != (cuts, cuts) or reps.precision_max
        ):
            raise ValueError(
                "the durability tier counts trials with `cuts`, not [repetitions]: remove "
                "[repetitions] and set cuts = N"
            )
        # The plan's own Repetitions model (its type, not an import of the plan model: the plan
        # reads this).
        plan.repetitions = type(reps)(min=cuts, max=cuts)

    @classmethod
    def estimate_run_s(cls, plan: PlanView, workload: Workload) -> float | None:
        # A trial's length is the tier's overhead (boot, write to a seeded cut, verify), not the
        # plan's runtime; the slowest backing of the plan sets it (an estimate, for the budget and
        # `plan`'s duration).
        if workload.kind != cls.workload_kind:
            return None
        return max(_trial_s(b.type, cls.overhead_s) for b in plan.backing)

    @classmethod
    def prune_reason(cls, cell: Cell, backing: BackingFacts | None) -> str | None:
        if (network := _network_reason(cell, backing)) is not None:
            return network
        if backing is not None and backing.is_device:
            return (
                "the durability tier serves an image file through nbdkit to simulate a power loss: "
                "give it a directory backing"
            )
        return None

    @classmethod
    def workload_prune_reason(
        cls, cell: Cell, workload: Workload, owner: str | None = None
    ) -> str | None:
        if workload.kind != cls.workload_kind:
            return (
                f"workload {workload.name} measures speed; the durability tier runs the "
                "'durability' workload"
            )
        return super().workload_prune_reason(cell, workload, owner)
