"""What a tier is, apart from how it runs: the light half of a tier that the plan, the matrix and
the fio builders read.

A tier is two classes. Its *declaration* (a subclass of :class:`TierDeclaration`, one module under
``iomatrix/tiers/declared/`` or an installed package's ``iomatrix.tiers`` entry point) says which
layers of the I/O stack it runs, where it sorts, its plan settings, its workload kind, its prune
rules, its wording and its estimates; it imports only the domain and the workloads, so reading it
never imports QEMU, fio or guest code. Its *implementation* (a subclass of the declaration and of
:class:`iomatrix.tiers.base.Tier`, named by `implementation` as ``"module:Class"``) runs
measurements; the registry imports it only when a sweep runs the tier. Its report hooks live on a
*report companion* (``iomatrix.report.companions``), named by `report_companion`, so neither half
imports the store or the reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from iomatrix.domain import CACHE, NA, CacheMode
from iomatrix.domain.axes import Layer

if TYPE_CHECKING:
    from iomatrix.domain.axes import BackingFacts
    from iomatrix.domain.cell import Cell
    from iomatrix.domain.plan_view import PlanView
    from iomatrix.domain.workload import Workload


def network_backing_reason(tier: str, backing: BackingFacts | None) -> str | None:
    """Why a tier that gives QEMU an image file does not run on a network backing (iSCSI, NFS: a
    disk per run made by the backing's server, opened by QEMU's own iscsi/nfs driver), or None on a
    local one. The block-layer and guest tiers run that same -blockdev graph
    (docs/shared-storage.md)."""
    if backing is None or backing.protocol is None:
        return None
    return (
        f"the {tier} tier does not open network disks yet; the block-layer and guest "
        "tiers run the same QEMU "
        f"graph (driver={backing.protocol}) on this {backing.protocol} backing"
    )


def qemu_host_cache_wording(cache: str) -> str:
    """Whether the host's page cache was in a QEMU tier's read path, for cell `cache` (a null
    ceiling's "-": no)."""
    if cache not in CACHE or CACHE[CacheMode(cache)].direct:
        return "host O_DIRECT"
    return (
        f"host page cache in use (cache={cache}: reads after the prefill may hit it, as in a "
        "real VM)"
    )


class TierDeclaration:
    """One tier as the rest of the program sees it. Subclass, set the class attributes, override the
    hooks."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line: what this tier measures
    # "module:Class" of the implementation (a subclass of this declaration and of tiers.base.Tier),
    # imported only to run; empty: this class is its own implementation (a test's scripted tier
    # registered whole).
    implementation: ClassVar[str] = ""
    # "module:Class" of the report companion (iomatrix.report.companions.ReportCompanion); empty: no
    # report hooks of its own.
    report_companion: ClassVar[str] = ""
    # The layers of the I/O stack the tier runs (iomatrix.domain.axes.Layer): an axis applies to the
    # tier where its layers meet these; the others are collapsed to "-", not multiplied.
    layers: ClassVar[frozenset[Layer]]
    # Seconds per run beyond the workload's runtime (start-up, prefill, teardown), for estimates
    # only.
    overhead_s: ClassVar[float] = 2.0
    # Seconds a run may go on past the spent time budget at the least (run_timeout.py): a tier that
    # boots TCG guests, whose boots and batches swing several-fold on a loaded host, declares more
    # than fio's 60 s.
    budget_margin_floor_s: ClassVar[float] = 60.0
    # Bare metal is the reference other tiers' cells are divided by (ratio to bare metal).
    is_reference: ClassVar[bool] = False
    # Where it sorts in reports: the reference first, then the tiers closest to it.
    order: ClassVar[int] = 50
    # Whether the tier can run filesystem workloads (fs-read / fs-write need a guest filesystem).
    runs_fs_workloads: ClassVar[bool] = False
    # Whether the tier runs several clients against one shared backing at once (the `clients` axis:
    # tiers/contention.py); another tier with the axis's layer prunes clients ≠ 1 with the reason.
    runs_many_clients: ClassVar[bool] = False
    # Whether each run creates a disk image of the plan's image_size (which must then hold `size`).
    uses_images: ClassVar[bool] = False
    # Whether a unit runs a fixed number of trials (reaching it is the answer, not "not converged").
    fixed_trials: ClassVar[bool] = False
    # Whether a run loads the host's CPUs itself (several guests at once): its CPU pressure is the
    # measurement, so the runner flags such runs but never retries them as disturbed.
    loads_host: ClassVar[bool] = False
    # Whether several runs of one cell can share a start-up (a guest boot): the runner then hands a
    # round's runs of a cell to run_batch() together. For estimates: seconds of that shared
    # start-up, and seconds per run inside a batch beyond its runtime.
    batches_runs: ClassVar[bool] = False
    # run_batch runs `host_ready` during its shared start-up (overlapping it) rather than before it.
    overlaps_host_ready: ClassVar[bool] = False
    batch_overhead_s: ClassVar[float] = 0.0
    batch_run_overhead_s: ClassVar[float] = 0.0
    # Plan keys the tier owns, written at the plan's top level like any other (`cuts = 20`, a
    # `[consolidation]` table): key → (type, default). The plan model validates (strictly) and dumps
    # them as its own, whether or not the plan runs the tier; read them with `plan.setting(key)`.
    plan_settings: ClassVar[dict[str, tuple[Any, Any]]] = {}
    # Settings written in the tier's own table (`[guest] image = "PATH"`): table key -> plan setting
    # (one of plan_settings, default None), read as that top-level setting and left out of dumps
    # while unset.
    table_settings: ClassVar[dict[str, str]] = {}
    # The workload kind only this tier runs (its own workloads: "runs on the X tier only"
    # elsewhere); None: it runs the workloads the tiers share.
    workload_kind: ClassVar[str | None] = None
    # The workloads of that kind, by name (what `workload_named` finds and `iomatrix.workloads`
    # lists beside its presets); a tier whose workloads are made from their names (tiles-N)
    # overrides `workload_named` instead.
    own_workloads: ClassVar[tuple[Workload, ...]] = ()
    # How reports name the tier in prose ("bare metal"); empty: its name.
    title: ClassVar[str] = ""
    # Its cells are what a VM's own I/O sees (fio inside a guest): reports chart them by block size
    # and score them (the weighted scores) in preference to the reference's.
    vm_view: ClassVar[bool] = False
    # Non-empty for a tier whose trials are verdicts, not a speed ranking (what `recommend` shows
    # instead of a choice, "... verdicts, not a speed ranking"), with the heading of its lines at
    # the end of `iomatrix run`.
    verdicts: ClassVar[str] = ""
    verdict_heading: ClassVar[str] = ""

    @classmethod
    def prose_name(cls) -> str:
        return cls.title or cls.name

    @classmethod
    def default_workloads(cls, plan_data: Mapping[str, Any]) -> list[str]:
        """The workloads a plan running this tier gets when it names none (from the plan as written,
        before validation: check what you read); empty: the plan's defaults."""
        return []

    @classmethod
    def workload_named(cls, name: str) -> Workload | None:
        """A workload of the tier's own kind by its name (one of `own_workloads`, or one made from
        its name, as the consolidation tier's ``tiles-N``), or None: `iomatrix.workloads` asks every
        tier for a name it has no preset of."""
        return next((w for w in cls.own_workloads if w.name == name), None)

    @classmethod
    def check_plan(cls, plan: PlanView) -> None:
        """Check (and complete) the settings the tier owns, and the plan as this tier needs it:
        raise ValueError with a one-line message. Called for every registered tier, whether the plan
        runs it or not (a tier's own table in a plan without the tier is a mistake to report)."""
        return None

    @classmethod
    def page_cache_wording(cls, cache: str) -> str:
        """How a read measurement kept the page cache out, for `cache` (recorded per run, before
        what was done with the host's caches). The default: fio on the host."""
        if CACHE[CacheMode(cache)].direct:
            return "direct I/O (O_DIRECT)"
        return "buffered: fio invalidate=1 (POSIX_FADV_DONTNEED) before the job"

    @classmethod
    def prune_reason(cls, cell: Cell, backing: BackingFacts | None) -> str | None:
        """Why this tier cannot run `cell`, beyond the domain's rules (checked by the matrix
        first)."""
        return cls.clients_reason(cell)

    @classmethod
    def clients_reason(cls, cell: Cell) -> str | None:
        """Why this tier cannot run the cell's number of clients (the `clients` axis), or None."""
        clients = cell.get("clients", NA)
        if cls.runs_many_clients or clients in (NA, "1"):
            return None
        return (
            f"clients={clients} runs that many disks, exports and fio clients against "
            "one shared backing; the "
            f"{cls.name} tier runs one client: block-layer tier only"
        )

    @classmethod
    def workload_prune_reason(
        cls, cell: Cell, workload: Workload, owner: str | None = None
    ) -> str | None:
        """Why this tier does not run `workload` on `cell`, or None. `owner`: the tier whose own
        workload it is (its workload kind), None for a workload the tiers share (the registry finds
        it)."""
        if owner is not None and owner != cls.name:
            return f"workload {workload.name} runs on the {owner} tier only"
        if workload.guest_only and not cls.runs_fs_workloads:
            return f"workload {workload.name} runs on a guest filesystem: guest tier only"
        if workload.needs_layer is not None and workload.needs_layer not in cls.layers:
            return f"workload {workload.name} {workload.needs_why}"
        return None

    @classmethod
    def estimate_run_s(cls, plan: PlanView, workload: Workload) -> float | None:
        """Seconds one run of `workload` takes, for estimates; None: the workload's runtime +
        overhead_s."""
        return None

    @classmethod
    def paced_by_guest(cls, plan: PlanView) -> bool:
        """Whether the tier's estimated costs are the built-in guest's TCG work, which a slower
        host does at its own pace (guest/pace.py): its start-ups and its filesystem jobs."""
        return False

    @classmethod
    def start_up_s(cls, plan: PlanView) -> tuple[float, float, float]:
        """For estimates: (seconds of a run's own start-up, of a batch's shared start-up, per run
        inside a batch beyond its runtime); by default `overhead_s`, `batch_overhead_s` and
        `batch_run_overhead_s` (a plan setting may change them: a guest tier's real image)."""
        return cls.overhead_s, cls.batch_overhead_s, cls.batch_run_overhead_s

    @classmethod
    def extra_cells(cls, plan: PlanView) -> list[dict[str, str]]:
        """Cells the tier adds by itself (e.g. the null-co ceiling of the virtual I/O path), as axis
        → value (axes not given do not apply); the matrix makes them cells."""
        return []

    @classmethod
    def max_batch(cls, cell: Cell) -> int:
        """How many runs of `cell` one batch may hold (a tier that batches overrides this)."""
        return 1
