"""The interface every tier implements, and what travels between the runner and a tier.

A tier is a plug-in: one module under ``iomatrix/tiers/`` defining a subclass of :class:`Tier` decorated
with :func:`iomatrix.tiers.register`. Its class attributes tell the matrix which layers of the I/O stack it
runs, so which axes apply (the others collapse to ``-``), its class methods add its own prune rules and
extra cells, and an instance runs one measurement at a time. What is specific to a tier is declared here too,
and asked of the registry by the rest of the program: its plan settings (`plan_settings`, `check_plan`,
`default_workloads`), how a run kept the page cache out (`page_cache_wording`) and its report extras (`title`,
`missing_notes`, `report_section`, `verdict_lines`). Nothing outside the tier modules (and their own packages)
names a tier.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from iomatrix.backing.leftovers import register_temp_path
from iomatrix.domain import CACHE, CacheMode
from iomatrix.domain.axes import DiskContext, Layer, qemu_options
from iomatrix.fio.jobs import JobShape
from iomatrix.guest.images import create_image
from iomatrix.matrix import Cell
from iomatrix.workloads import Workload

if TYPE_CHECKING:
    from iomatrix.matrix import BackingFacts
    from iomatrix.plan.model import Plan
    from iomatrix.report.query import CellWorkload
    from iomatrix.store import Store


@dataclass
class RunOptions:
    """How this invocation runs (command-line options), as opposed to what it runs (the plan)."""

    workdir: Path
    allowed_devices: set[Path] = field(default_factory=set)
    accel: str = "auto"  # auto | kvm | tcg
    monitor_interval: float = 1.0
    kernel: Path | None = None
    log: Callable[[str], None] | None = None  # progress of slow set-up steps (guest artifact build, KVM probe)
    group: str | None = None  # the host group this sweep answers for (`run --group`), recorded with the sweep


@dataclass(frozen=True)
class Target:
    """Where a run's data lives: a directory to create files in, or a whole block device."""

    kind: str  # "dir" | "device" | "null"
    path: Path | None


@dataclass(frozen=True)
class RunRequest:
    cell: Cell
    workload: Workload
    target: Target
    shape: JobShape
    run_dir: Path  # scratch directory for this run's files (inside the working dir)
    timeout_s: float
    wrapper: list[str] = field(default_factory=list)  # argv prefix from the host modifier (eatmydata)
    on_process: Callable[[int], None] | None = None  # told the pid doing the I/O (fio or QEMU)
    # told the pid generating the load beside the I/O path (the block layer's fio): sampled, not counted as its cost
    on_load_process: Callable[[int], None] | None = None


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
    # Runs that shared a guest boot: the boot's id (unique in the sweep) and the run's position in it
    # (0 = the cold first run). None for a run that had a process or guest to itself.
    boot_id: str | None = None
    boot_position: int | None = None
    # Host clock (time.time()) of the run's own start and end when the tier knows them better than the
    # runner (the runs of one boot); None: the runner's clock around tier.run().
    started_at: float | None = None
    finished_at: float | None = None


class RunsInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a batch of runs that shared a start-up: `outcomes` holds, in the batch's
    order, the runs that had completed (None for the others), so the runner stores them before the sweep
    stops — a boot's finished runs are results like any other."""

    def __init__(self, outcomes: list[RunOutcome | None]) -> None:
        super().__init__()
        self.outcomes = outcomes


def fresh_image(req: RunRequest, workdir: Path, size_bytes: int, prefix: str) -> tuple[Path | None, bool]:
    """The disk under test of one run, created fresh on the cell's backing: (path, created_by_us).

    None for the null ceiling; a raw block device is used as it is; another format on a block device is
    written onto the device; on a directory a new image file is recorded in the leftovers ledger before it
    is created, so `iomatrix clean` can remove it after a kill -9. Shared by every tier that runs QEMU.
    """
    cell = req.cell
    if req.target.kind == "null":
        return None, False
    assert req.target.path is not None
    create_options = qemu_options(cell, DiskContext(size_bytes)).create
    if req.target.kind == "device":
        if cell.format != "raw":
            create_image(req.target.path, cell.format, cell.preallocation, size_bytes, create_options)
        return req.target.path, False
    # The slug, not the name: a custom workload's name holds the '/' of its path.
    path = req.target.path / f"{prefix}-{os.getpid()}-{req.workload.slug}.{cell.format}"
    register_temp_path(workdir, path)
    create_image(path, cell.format, cell.preallocation, size_bytes, create_options)
    return path, True


class Tier(ABC):
    """One way of measuring a cell. Subclass, set the class attributes, register with @register."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line: what this tier measures
    # The layers of the I/O stack the tier runs (iomatrix.domain.axes.Layer): an axis applies to the tier where
    # its layers meet these; the others are collapsed to "-", not multiplied.
    layers: ClassVar[frozenset[Layer]]
    # Seconds per run beyond the workload's runtime (start-up, prefill, teardown), for estimates only.
    overhead_s: ClassVar[float] = 2.0
    # Bare metal is the reference other tiers' cells are divided by (ratio to bare metal).
    is_reference: ClassVar[bool] = False
    # Where it sorts in reports: the reference first, then the tiers closest to it.
    order: ClassVar[int] = 50
    # Whether the tier can run filesystem workloads (fs-read / fs-write need a guest filesystem).
    runs_fs_workloads: ClassVar[bool] = False
    # Whether each run creates a disk image of the plan's image_size (which must then hold `size`).
    uses_images: ClassVar[bool] = False
    # Whether a unit runs a fixed number of trials (reaching it is the answer, not "not converged").
    fixed_trials: ClassVar[bool] = False
    # Whether a run loads the host's CPUs itself (several guests at once): its CPU pressure is the measurement,
    # so the runner flags such runs but never retries them as disturbed.
    loads_host: ClassVar[bool] = False
    # Whether several runs of one cell can share a start-up (a guest boot): the runner then hands a
    # round's runs of a cell to run_batch() together. For estimates: seconds of that shared start-up, and
    # seconds per run inside a batch beyond its runtime.
    batches_runs: ClassVar[bool] = False
    # run_batch runs `host_ready` during its shared start-up (overlapping it) rather than before it.
    overlaps_host_ready: ClassVar[bool] = False
    batch_overhead_s: ClassVar[float] = 0.0
    batch_run_overhead_s: ClassVar[float] = 0.0
    # Plan keys the tier owns, written at the plan's top level like any other (`cuts = 20`, a
    # `[consolidation]` table): key → (type, default). The plan model validates (strictly) and dumps them as
    # its own, whether or not the plan runs the tier; read them with `plan.setting(key)`.
    plan_settings: ClassVar[dict[str, tuple[Any, Any]]] = {}
    # The workload kind only this tier runs (its own workloads: "runs on the X tier only" elsewhere); None:
    # it runs the workloads the tiers share.
    workload_kind: ClassVar[str | None] = None
    # How reports name the tier in prose ("bare metal"); empty: its name.
    title: ClassVar[str] = ""
    # Its cells are what a VM's own I/O sees (fio inside a guest): reports chart them by block size and score
    # them (the weighted scores) in preference to the reference's.
    vm_view: ClassVar[bool] = False
    # Non-empty for a tier whose trials are verdicts, not a speed ranking (what `recommend` shows instead of a
    # choice, "... verdicts, not a speed ranking"), with the heading of its lines at the end of `iomatrix run`.
    verdicts: ClassVar[str] = ""
    verdict_heading: ClassVar[str] = ""

    @classmethod
    def prose_name(cls) -> str:
        return cls.title or cls.name

    @classmethod
    def default_workloads(cls, plan_data: Mapping[str, Any]) -> list[str]:
        """The workloads a plan running this tier gets when it names none (from the plan as written, before
        validation: check what you read); empty: the plan's defaults."""
        return []

    @classmethod
    def check_plan(cls, plan: Plan) -> None:
        """Check (and complete) the settings the tier owns, and the plan as this tier needs it: raise
        ValueError with a one-line message. Called for every registered tier, whether the plan runs it or not
        (a tier's own table in a plan without the tier is a mistake to report)."""
        return None

    @classmethod
    def page_cache_wording(cls, cache: str) -> str:
        """How a read measurement kept the page cache out, for `cache` (recorded per run, before what was
        done with the host's caches). The default: fio on the host."""
        if CACHE[CacheMode(cache)].direct:
            return "direct I/O (O_DIRECT)"
        return "buffered: fio invalidate=1 (POSIX_FADV_DONTNEED) before the job"

    @classmethod
    def missing_notes(cls, cells: Sequence[Mapping[str, str]]) -> list[str]:
        """What the HTML report says is missing from a sweep because of this tier (its cells' axes, every
        tier's). Asked of every registered tier."""
        return []

    @classmethod
    def report_section(cls, store: Store, sweep_id: int, cws: list[CellWorkload]) -> dict[str, Any] | None:
        """A section of the HTML report of the tier's own (id, title, lines; svg and svg_caption optional), or
        None when the sweep has nothing for it."""
        return None

    @classmethod
    def verdict_lines(cls, store: Store, sweep_id: int, workload: str | None = None) -> list[str]:
        """For a tier with `verdicts`: its verdicts in a sweep as text lines (`workload`: only that one's)."""
        return []

    @classmethod
    def prune_reason(cls, cell: Cell, backing: BackingFacts | None) -> str | None:
        """Why this tier cannot run `cell`, beyond the domain's rules (checked by the matrix first)."""
        return None

    @classmethod
    def workload_prune_reason(cls, cell: Cell, workload: Workload) -> str | None:
        from iomatrix.tiers import workload_owner

        owner = workload_owner(workload)
        if owner is not None and owner is not cls:
            return f"workload {workload.name} runs on the {owner.name} tier only"
        if workload.guest_only and not cls.runs_fs_workloads:
            return f"workload {workload.name} runs on a guest filesystem: guest tier only"
        if workload.needs_layer is not None and workload.needs_layer not in cls.layers:
            return f"workload {workload.name} {workload.needs_why}"
        return None

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        """Refuse a plan this host cannot run (raise UserError), before anything is created or started."""
        return None

    @classmethod
    def estimate_run_s(cls, plan: Plan, workload: Workload) -> float | None:
        """Seconds one run of `workload` takes, for estimates; None: the workload's runtime + overhead_s."""
        return None

    @classmethod
    def extra_cells(cls, plan: Plan) -> list[Cell]:
        """Cells the tier adds by itself (e.g. the null-co ceiling of the virtual I/O path)."""
        return []

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        self.plan = plan
        self.opts = opts

    def open(self) -> None:  # noqa: B027 - optional hook: slow set-up (artifacts, probes), once per sweep
        """Prepare to run (called once per sweep, before the first run)."""

    def describe(self) -> str:
        """One line for the user when the sweep starts: accelerator, versions."""
        return f"{self.name} tier: {self.summary}"

    @abstractmethod
    def accel(self) -> str:
        """The accelerator recorded with every result of this tier."""

    @abstractmethod
    def run(self, req: RunRequest) -> RunOutcome: ...

    @classmethod
    def max_batch(cls, cell: Cell) -> int:
        """How many runs of `cell` one batch may hold (a tier that batches overrides this)."""
        return 1

    def run_batch(self, reqs: list[RunRequest], host_ready: Callable[[], None] | None = None) -> list[RunOutcome]:
        """Several runs of one cell; one outcome per request, in order. The default runs them one by one;
        a tier with ``batches_runs`` shares one start-up among them. `host_ready` (the runner's cache
        preparation) must have run before the first run's workload starts; a tier with
        ``overlaps_host_ready`` runs it during its shared start-up, the default first."""
        if host_ready is not None:
            host_ready()
        return [self.run(r) for r in reqs]

    def finish_background_work(self) -> None:  # noqa: B027 - optional hook
        """Wait for work the tier left running after its last run (the guest tier removes a boot's images
        while the next boot starts); the runner calls it before any run that work could disturb."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release everything the tier started (called on success, error, Ctrl-C and SIGTERM)."""
