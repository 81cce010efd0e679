"""The interface every tier's implementation has, and what travels between the runner and a tier.

A tier is a declaration (iomatrix.tiers.declaration: layers, plan settings, workload kind, prune
rules, wording, estimates), an implementation (a subclass of the declaration and of :class:`Tier`:
it runs measurements) and a report companion (iomatrix.report.companions). The registry
(iomatrix.tiers) imports an implementation only when a sweep runs the tier. Nothing outside the tier
modules (and their own packages) names a tier."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iomatrix import tiers
from iomatrix.backing.client_host import ClientHost
from iomatrix.backing.leftovers import register_temp_path
from iomatrix.backing.network import NetworkServer
from iomatrix.domain.axes import DiskContext, qemu_options
from iomatrix.fio.jobs import JobShape
from iomatrix.images import create_image
from iomatrix.matrix import Cell
from iomatrix.tiers.declaration import TierDeclaration
from iomatrix.workloads import Workload

if TYPE_CHECKING:
    from iomatrix.plan.model import Plan


@dataclass
class RunOptions:
    """How this invocation runs (command-line options), as opposed to what it runs (the plan)."""

    workdir: Path
    allowed_devices: set[Path] = field(default_factory=set)
    accel: str = "auto"  # auto | kvm | tcg
    monitor_interval: float = 1.0
    kernel: Path | None = None
    # progress of slow set-up steps (guest artifact build, KVM probe)
    log: Callable[[str], None] | None = None
    # the host group this sweep answers for (`run --group`), recorded with the sweep
    group: str | None = None
    # `run --start-at`: wall-clock time the first run waits for (sweep/start.py)
    start_at: float | None = None


@dataclass(frozen=True)
class Target:
    """Where a run's data lives: a directory to create files in, a whole block device, or a network
    server that makes a disk per run (iomatrix.backing.network)."""

    kind: str  # "dir" | "device" | "null" | "network"
    path: Path | None
    server: NetworkServer | None = None
    # The hosts a contention run's clients run on (`[[backing.client_host]]`); empty: on this host.
    client_hosts: tuple[ClientHost, ...] = ()


@dataclass(frozen=True)
class RunRequest:
    cell: Cell
    workload: Workload
    target: Target
    shape: JobShape
    run_dir: Path  # scratch directory for this run's files (inside the working dir)
    timeout_s: float
    # argv prefix from the host modifier (eatmydata)
    wrapper: list[str] = field(default_factory=list)
    on_process: Callable[[int], None] | None = None  # told the pid doing the I/O (fio or QEMU)
    # told the pid generating the load beside the I/O path (the block layer's fio): sampled, not
    # counted as its cost
    on_load_process: Callable[[int], None] | None = None
    # told the pids of a network backing's server (tgtd, ganesha.nfsd): sampled and counted in the
    # I/O path's CPU
    on_server_process: Callable[[int], None] | None = None


@dataclass
class RunOutcome:
    ok: bool
    metrics: dict[str, float] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    job_text: str = ""
    raw_output: str = ""
    console_tail: str = ""
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # Runs that shared a guest boot: the boot's id (unique in the sweep) and the run's position in
    # it (0 = the cold first run). None for a run that had a process or guest to itself.
    boot_id: str | None = None
    boot_position: int | None = None
    # Host clock (time.time()) of the run's own start and end when the tier knows them better than
    # the runner (the runs of one boot); None: the runner's clock around tier.run().
    started_at: float | None = None
    finished_at: float | None = None
    # A run of several clients against one shared backing at once (the `clients` axis): each
    # client's own metrics in client order; `metrics` then holds the aggregate
    # (tiers/contention.py). Empty for a run of one client.
    clients: list[dict[str, float]] = field(default_factory=list)


class RunsInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a batch of runs that shared a start-up: `outcomes` holds, in the
    batch's order, the runs that had completed (None for the others), so the runner stores them
    before the sweep stops — a boot's finished runs are results like any other."""

    def __init__(self, outcomes: list[RunOutcome | None]) -> None:
        super().__init__()
        self.outcomes = outcomes


def fresh_image(
    req: RunRequest, workdir: Path, size_bytes: int, prefix: str
) -> tuple[Path | None, bool]:
    """The disk under test of one run, created fresh on the cell's backing: (path, created_by_us).

    None for the null ceiling; a raw block device is used as it is; another format on a block device
    is written onto the device; on a directory a new image file is recorded in the leftovers ledger
    before it is created, so `iomatrix clean` can remove it after a kill -9. Shared by every tier
    that runs QEMU."""
    cell = req.cell
    if req.target.kind == "null":
        return None, False
    assert req.target.path is not None
    create_options = qemu_options(cell, DiskContext(size_bytes)).create
    if req.target.kind == "device":
        if cell.format != "raw":
            create_image(
                req.target.path, cell.format, cell.preallocation, size_bytes, create_options
            )
        return req.target.path, False
    # The slug, not the name: a custom workload's name holds the '/' of its path.
    path = req.target.path / f"{prefix}-{os.getpid()}-{req.workload.slug}.{cell.format}"
    register_temp_path(workdir, path)
    create_image(path, cell.format, cell.preallocation, size_bytes, create_options)
    return path, True


class Tier(TierDeclaration, ABC):
    """One way of measuring a cell, as it runs: subclass the tier's declaration
    (iomatrix.tiers.declaration) and this, and name the subclass in the declaration's
    `implementation`. An instance runs one measurement at a time; what the plan, the matrix and the
    reports read of a tier is on its declaration."""

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        """Refuse a plan this host cannot run (raise UserError), before anything is created or
        started."""
        return None

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        self.plan = plan
        self.opts = opts

    def open(self) -> None:
        """Prepare to run (called once per sweep, before the first run)."""

    def describe(self) -> str:
        """One line for the user when the sweep starts: accelerator, versions."""
        return f"{self.name} tier: {self.summary}"

    @abstractmethod
    def accel(self) -> str:
        """The accelerator recorded with every result of this tier."""

    @abstractmethod
    def run(self, req: RunRequest) -> RunOutcome: ...

    def run_batch(
        self, reqs: list[RunRequest], host_ready: Callable[[], None] | None = None
    ) -> list[RunOutcome]:
        """Several runs of one cell; one outcome per request, in order. The default runs them one by
        one; a tier with ``batches_runs`` shares one start-up among them. `host_ready` (the runner's
        cache preparation) must have run before the first run's workload starts; a tier with
        ``overlaps_host_ready`` runs it during its shared start-up, the default first."""
        if host_ready is not None:
            host_ready()
        return [self.run(r) for r in reqs]

    def finish_background_work(self) -> None:
        """Wait for work the tier left running after its last run (the guest tier removes a boot's
        images while the next boot starts); the runner calls it before any run that work could
        disturb."""

    def close(self) -> None:
        """Release everything the tier started (called on success, error, Ctrl-C and SIGTERM)."""


def tier_implementation(name: str) -> type[Tier]:
    """The Tier of the tier named `name`, as a sweep instantiates it (the registry's `tier_class`,
    imported on first use, checked to be a Tier: an installed package's implementation might not
    be)."""
    cls = tiers.tier_class(name)
    if not issubclass(cls, Tier):
        raise TypeError(
            f"tier '{name}': {cls.__module__}.{cls.__qualname__} is no iomatrix.tiers.base.Tier"
        )
    return cls
