"""`iomatrix run`: run a plan's sweep into a results database, resuming what an earlier run left."""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from iomatrix import children
from iomatrix.commands.common import (
    check_allowed_devices,
    check_guest_image,
    few_runs_hint,
    load_plan,
    refuse_system_workdir,
    warn_tcg,
)
from iomatrix.commands.options import (
    DEFAULT_DB,
    DEFAULT_WORKDIR,
    AllowDataLossOpt,
    KernelOpt,
    MarginOpt,
    RoleOpt,
    WorkdirOpt,
    check_kernel_option,
)
from iomatrix.dburl import DatabaseURL, parse_db
from iomatrix.errors import UserError
from iomatrix.ui import console, err_console, print_line

if TYPE_CHECKING:
    from iomatrix.matrix import Expansion
    from iomatrix.plan.model import Plan
    from iomatrix.store import Store
    from iomatrix.sweep.session import SweepResult

NAME = "run"


class Accel(StrEnum):
    auto = "auto"
    kvm = "kvm"
    tcg = "tcg"


class SweepIncomplete(Exception):
    """The sweep ran, but every run failed or some units gave up: the CLI prints the message (plain
    text) as one error line and exits with its own status (README, "Exit status")."""


def run(
    plan: Annotated[str, typer.Argument(help="Built-in plan name (e.g. quick) or TOML file.")],
    *,
    db: Annotated[
        Path,
        typer.Option(
            "--db",
            parser=parse_db,
            metavar="PATH",
            help="Results database (SQLite file) the sweep writes; a central store is given "
            "with --publish.",
        ),
    ] = DEFAULT_DB,
    workdir: WorkdirOpt = DEFAULT_WORKDIR,
    allow_destroy: Annotated[
        list[Path],
        typer.Option(
            "--allow-destroy",
            help="A block device (or an existing iSCSI LUN, iscsi://HOST:PORT/IQN/LUN) you hand "
            "over to be overwritten (repeatable).",
        ),
    ] = [],  # noqa: B006
    accel: Annotated[
        Accel, typer.Option(help="Guest accelerator: probe KVM, or force one.")
    ] = Accel.auto,
    monitor_interval: Annotated[float, typer.Option(help="Host sampler period in seconds.")] = 1.0,
    kernel: KernelOpt = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="One full line per run, a disturbed run's reasons "
            "included (they are always in the database).",
        ),
    ] = False,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="The host group this sweep answers for (e.g. the inventory group), recorded "
            "with it: the "
            "fleet answers of a merged database choose one configuration per group.",
        ),
    ] = None,
    current: Annotated[
        str | None,
        typer.Option(
            help="What you run today, measured as a cell of its own in every tier (so the "
            "answer's ratio to it is "
            "measured): a libvirt domain XML file, Proxmox 'qm config VMID' output (a "
            "file), a QEMU "
            "-drive/-blockdev string, or axes "
            "such as 'cache=none,aio=native'. Part of the plan: re-run with it to resume."
        ),
    ] = None,
    current_disk: Annotated[
        str | None,
        typer.Option(
            help="Which disk of the libvirt XML (target dev, e.g. vda) or "
            "of the qm config (scsi0); default: the first (Proxmox: "
            "the boot disk)."
        ),
    ] = None,
    allow_data_loss: AllowDataLossOpt = False,
    role: RoleOpt = [],  # noqa: B006
    margin: MarginOpt = None,
    start_at: Annotated[
        str | None,
        typer.Option(
            "--start-at",
            help="Start the first run at this time (seconds since the epoch, or ISO 8601 with "
            "its zone), "
            "after setting up: hosts sweeping one shared backend start together (the fleet role "
            "passes it). Recorded with every run.",
        ),
    ] = None,
    publish: Annotated[
        Path | None,
        typer.Option(
            "--publish",
            parser=parse_db,
            metavar="URL",
            help="When the sweep ends, publish --db into this central store (postgresql://…, "
            "as 'iomatrix publish'): "
            "the sweep is written to --db first, so a store that goes down loses nothing.",
        ),
    ] = None,
) -> None:
    """Run a plan, e.g. 'iomatrix run quick'. Re-running on the same --db resumes and skips
    completed runs."""
    sweep(
        RunArgs(
            plan=plan,
            db=db,
            workdir=workdir,
            allow_destroy=allow_destroy,
            accel=accel,
            monitor_interval=monitor_interval,
            kernel=kernel,
            verbose=verbose,
            group=group,
            current=current,
            current_disk=current_disk,
            allow_data_loss=allow_data_loss,
            roles=role,
            margin=margin,
            start_at=start_at,
            publish=publish,
        )
    )


@dataclass(frozen=True)
class RunArgs:
    """What `iomatrix run` was given, as its options parsed it (each option's help says what it
    means)."""

    plan: str  # a built-in plan's name or a TOML file, as the user gave it
    db: Path
    workdir: Path
    allow_destroy: list[Path]
    accel: Accel
    monitor_interval: float
    kernel: Path | None
    verbose: bool
    group: str | None
    current: str | None
    current_disk: str | None
    allow_data_loss: bool
    roles: list[str]
    margin: float | None
    start_at: str | None
    publish: Path | None


@dataclass(frozen=True)
class Sweep:
    """A run's plan once accepted, and where it runs: what the locked part of `run` needs."""

    args: RunArgs
    plan: Plan
    base: Path | None  # the directory the plan's relative paths are read from
    work: Path  # the checked working directory
    start_at: float | None  # seconds since the epoch, from --start-at


def sweep(args: RunArgs) -> None:
    """Check everything before anything is created (a bad --db leaves no workdir behind), then run
    the sweep holding the working directory's and the database's locks; publish it when asked."""
    publish_to, start = _checked_options(args)
    p, base = _plan_of(args)
    work = _checked_places(args)
    from iomatrix.locks import WORKDIR_LOCK, db_lock_path, exclusive, exclusive_identity

    _refuse_what_cannot_run(args, p, base, work)
    if os.geteuid() != 0 and not p.keep_caches_warm:
        err_console.print(
            "[yellow]warning:[/] not running as root: the host page cache cannot be dropped "
            "before each run (each run records it as not-dropped); run as root for cold-cache "
            "figures",
            soft_wrap=True,
        )
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"cannot create --workdir {args.workdir}: {err.strerror}",
            hint="choose a writable directory",
        ) from None
    db = args.db
    with published_after(db, publish_to), contextlib.ExitStack() as held:
        held.enter_context(exclusive(work / WORKDIR_LOCK, f"working directory {work}"))
        held.enter_context(exclusive_identity(work, f"working directory {work}"))
        held.enter_context(exclusive(db_lock_path(db.absolute()), f"results database {db}"))
        # by its inode before SQLite opens it (a new file: once it is created, below)
        if db.exists():
            held.enter_context(exclusive_identity(db, f"results database {db}"))
        reclaim_leftovers(work)
        # every fio/QEMU child in the ledger until it is reaped
        held.enter_context(children.record_in(work))
        store = _open_locked(held, db)
        # Closing the last connection checkpoints the WAL: a finished sweep leaves no -wal/-shm
        # beside the file.
        held.callback(store.close)
        _run_locked(Sweep(args, p, base, work, start), store)


def _checked_options(args: RunArgs) -> tuple[DatabaseURL | None, float | None]:
    """(the store to publish to, the start time) once the options that need no plan are checked."""
    from iomatrix.sweep.start import parse_start_at

    check_group_name(args.group)
    publish_to = check_publish(args.db, args.publish)
    start = None if args.start_at is None else parse_start_at(args.start_at, time.time())
    if not 0.05 <= args.monitor_interval <= 60:
        raise UserError(
            f"--monitor-interval {args.monitor_interval} is out of range",
            hint="use 0.05 to 60 seconds",
        )
    # every handed-over device, before anything runs, whatever the plan
    check_allowed_devices(args.allow_destroy)
    return publish_to, start


def _plan_of(args: RunArgs) -> tuple[Plan, Path | None]:
    """The plan with what the options add to it (--current, --role, --margin), and its base
    directory."""
    p, base = load_plan(args.plan)
    p = plan_with_current(p, args.current, args.current_disk)
    p = plan_with_roles(p, args.roles, args.plan)
    p = plan_with_margin(p, args.margin)
    check_guest_image(p)  # again: the file may have changed since `plan`
    return p, base


def _checked_places(args: RunArgs) -> Path:
    """The working directory, once it and the database are known usable and held by no other sweep.
    A database another sweep holds may be half-created: say who holds it rather than judge its
    contents."""
    from iomatrix.locks import db_lock_path, refuse_if_held, refuse_if_identity_held
    from iomatrix.store import Store

    db = args.db
    refuse_kernel_fs_db(db)
    refuse_if_held(db_lock_path(db.absolute()), f"results database {db}")
    # The same file under another name (a hard link, a bind mount): the lock beside the name does
    # not see it.
    for f in _db_files(db):
        refuse_if_identity_held(f, f"results database {db}")
    Store.preflight(db)
    work = check_workdir(args.workdir)
    refuse_if_identity_held(work, f"working directory {work}")
    check_kernel_option(args.kernel)
    return work


def _refuse_what_cannot_run(args: RunArgs, p: Plan, base: Path | None, work: Path) -> None:
    """A plan that measures nothing here, does not fit the disk, or names backings that cannot serve
    is refused before the database and the workdir are made."""
    from iomatrix.backing.provision import refuse_backings_that_cannot_serve
    from iomatrix.backing.space import refuse_if_short
    from iomatrix.runner import plan_expansion
    from iomatrix.safety import resolve_allowed
    from iomatrix.sweep.expansion import nothing_measured

    exp = plan_expansion(p, base, resolve_allowed(args.allow_destroy))
    # No cell, or only the null ceiling (its backings unavailable here): as the runner would say it.
    if (refused := nothing_measured(p, exp)) is not None:
        raise UserError(refused[0], hint=_as_given(refused[1], p, args.plan))
    refuse_if_short(p, exp, work, args.db)  # the whole plan's space, up front
    used = {c.backing for c in exp.cells if not c.is_null_ceiling}
    refuse_backings_that_cannot_serve(
        (s for label, s in p.backing_by_label().items() if label in used),
        resolve_allowed(args.allow_destroy),
    )


def _as_given(hint: str, p: Plan, plan: str) -> str:
    """A hint naming the plan as the user gave it (a path, or a plan name) where the runner names
    it by its name."""
    return hint.replace(f"plan {p.name} --explain", f"plan {plan} --explain")


def check_publish(db: Path | DatabaseURL, publish: Path | DatabaseURL | None) -> DatabaseURL | None:
    """--db must be the local file the sweep writes, --publish a store's URL (its driver installed):
    a one-line error otherwise, before anything runs. Why a local file and a publish at the end
    rather than runs written to the store as they complete: every completed run is committed to the
    file, so a store (or the network to it) that goes down mid-sweep loses nothing and stalls
    nothing; resuming and the sweep's locks stay those of a file; and the next publish catches up
    (publishing twice adds nothing)."""
    if isinstance(db, DatabaseURL):
        raise UserError(
            f"run writes its sweep to a local SQLite file, not to a central store ({db})",
            hint=f"iomatrix run PLAN --db host.sqlite --publish {db} (the sweep is saved "
            "locally, then "
            "published when it ends)",
        )
    if publish is None:
        return None
    if not isinstance(publish, DatabaseURL):
        raise UserError(
            f"--publish {publish} is not a PostgreSQL URL",
            hint="give postgresql://[user@]host[:port]/database (an SQLite file is --db)",
        )
    from iomatrix.commands.common import pg_store

    pg_store()  # the driver, checked before the sweep rather than after it
    return publish


@contextlib.contextmanager
def published_after(db: Path, url: DatabaseURL | None) -> Iterator[None]:
    """Publish `db` into `url` when the sweep ends: finished, or with units that gave up (still
    results). An interrupted sweep is not published (the next run resumes it, then publishes); nor
    is one refused before it ran."""
    if url is None:
        yield
        return
    try:
        yield
    except SweepIncomplete:
        _publish(db, url, failure_is_error=False)
        raise
    _publish(db, url, failure_is_error=True)


def _publish(db: Path, url: DatabaseURL, *, failure_is_error: bool) -> None:
    from iomatrix.commands.common import pg_store

    try:
        r = pg_store().publish(db, url)
    except UserError as err:
        failed = UserError(
            f"the sweep is saved in {db}, but publishing it failed: {err.message}",
            hint=f"once the store is back: iomatrix publish {db} {url} (publishing twice adds "
            "nothing)",
        )
        if failure_is_error:
            raise failed from None

        err_console.print(
            f"[red]error:[/] {escape(failed.one_line())}",
            soft_wrap=True,
            markup=True,
            highlight=False,
        )
        return
    console.print(
        f"published {db} → {url}: {r.sweeps_added} sweep(s) added, {r.sweeps_present} "
        "already there; "
        f"{r.runs_added} run(s) added, {r.runs_present} already there",
        soft_wrap=True,
        markup=False,
    )


def _db_files(db: Path) -> list[Path]:
    """The database file and its write-ahead log: a sweep holds both by their inodes."""
    return [db, Path(f"{db}-wal")]


def _open_locked(held: contextlib.ExitStack, db: Path) -> Store:
    """The store of `db`, opened for the sweep, with the database file (when it was just created)
    and its -wal locked by their inodes (locks.exclusive_identity). The store is closed before those
    locks are let go: closing a descriptor of the file would drop SQLite's own fcntl locks of it."""
    from iomatrix.locks import exclusive_identity
    from iomatrix.store import Store

    created = not db.exists()
    store = Store(db)
    try:
        if created:
            held.enter_context(exclusive_identity(db, f"results database {db}"))
        # SQLite opens its -wal on a first read
        store.db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        wal = _db_files(db)[1]
        if wal.is_file():
            held.enter_context(exclusive_identity(wal, f"results database {db}"))
    except BaseException:
        store.close()
        raise
    return store


# A group name is shown in tables and used as a filter: printable, no spaces that would read as two
# words.
GROUP_NAME_MAX = 64


def check_group_name(group: str | None) -> None:
    """A one-line error for a `--group` that is empty, too long, or holds spaces or control
    characters."""
    if group is None:
        return
    if (
        not group
        or len(group) > GROUP_NAME_MAX
        or any(c.isspace() or not c.isprintable() for c in group)
    ):
        raise UserError(
            f"--group {group!r} is not a group name",
            hint=f"use 1 to {GROUP_NAME_MAX} printable characters without spaces, e.g. gen10",
        )


def _run_locked(sw: Sweep, store: Store) -> None:
    """Run the sweep, holding its locks, and print its end: what ran, what was disturbed or gave up,
    and the answer."""
    args, p = sw.args, sw.plan
    from iomatrix.commands.progress import RichProgress
    from iomatrix.runner import RunOptions, SweepRunner
    from iomatrix.safety import resolve_allowed

    db, plan = args.db, args.plan
    opts = RunOptions(
        workdir=sw.work,
        allowed_devices=resolve_allowed(args.allow_destroy),
        accel=args.accel.value,
        monitor_interval=args.monitor_interval,
        kernel=args.kernel,
        group=args.group,
        start_at=sw.start_at,
        # plain text, not markup: a line may carry what a guest's console printed
        # ('[    0.000000] Linux …'); whole in a log (issue 70)
        log=lambda m: print_line(m, dim=True),
    )
    try:
        runner = SweepRunner(p, sw.base, store, opts, progress=RichProgress(args.verbose))
    # the runner names the plan by its name; the user gave `plan` (a path, or a plan name)
    except UserError as e:
        if e.hint is None or f"plan {p.name} --explain" not in e.hint:
            raise
        raise UserError(e.message, hint=_as_given(e.hint, p, plan)) from None
    exp = runner.expansion
    print_line(
        f"[bold]{escape(p.name)}[/]: {len(exp.cells)} cells, {len(exp.units)} cell×workload "
        f"units, {len(exp.pruned)} pruned "
        + escape(f"(see 'iomatrix plan {plan} --explain'); results → {db}"),
        markup=True,
    )
    for line in current_lines(p, exp, console.width):
        console.print(line, markup=False, highlight=False)
    from iomatrix.estimate import estimate_sweep
    from iomatrix.guest.pace import recorded_pace

    # said before the sweep, not only at its end: the budget will cut minimum runs
    if (estimate := estimate_sweep(p, exp, recorded_pace())).minimum_cut:
        print_line(f"[yellow]note:[/] {escape(estimate.sentence(p.time_budget))}", markup=True)
    res = runner.run()
    # an interrupted sweep's quiet runs say the host's pace as well as a whole one's
    _record_guest_pace(store, res.sweep_id, p, exp)
    accels = sorted(set(res.accel.values()))
    print_line(
        f"sweep {res.sweep_id}: {res.runs_done} runs ok, {res.runs_failed} failed; accelerator: "
        + ", ".join(f"{t}={a}" for t, a in res.accel.items())
    )
    _say_what_did_not_settle(res, exp, p)
    if res.interrupted or not res.runs_done:
        # said once: the answer printed below carries it among its warnings
        warn_tcg(accels, whole=True)
    if res.interrupted:
        print_line(
            f"[yellow]interrupted[/]: completed runs are saved in {escape(str(db))}; run the "
            "same command to resume",
            markup=True,
        )
        raise typer.Exit(130)
    if res.runs_done:
        from iomatrix.report.render import end_of_run_text

        answer = end_of_run_text(
            store, res.sweep_id, console.width, allow_data_loss=args.allow_data_loss
        )
        console.print(answer, markup=False, highlight=False)
        if hint := few_runs_hint(answer, db, p.repetitions.max):
            console.print(hint, markup=False, highlight=False)
    _print_next_commands(db)
    if res.runs_done == 0 and res.runs_failed > 0:
        raise SweepIncomplete(
            f"every run failed ({res.runs_failed} runs); see the errors above and "
            f"'iomatrix results --db {db}'"
        )
    if res.gave_up:
        raise SweepIncomplete(
            f"{len(res.gave_up)} of {len(exp.units)} cell×workload units gave up "
            "after repeated failures; their figures are missing"
        )


def _record_guest_pace(store: Store, sweep_id: int, plan: Plan, exp: Expansion) -> None:
    """Keep this host's pace for the built-in guest's TCG work (guest/pace.py) for the next
    estimates: what the sweep's quiet runs of it took beyond their time-based part, against the
    reference costs of the same (matrix.run_parts_s; a boot's first run carries the boot)."""
    from iomatrix.guest.pace import pace_of_runs, record_pace
    from iomatrix.matrix import run_parts_s
    from iomatrix.tiers import declaration

    units = {(u.cell.key, u.workload.name): u for u in exp.units}
    runs = []
    for r in store.runs(sweep_id):
        u = units.get((r.cell_key, r.workload))
        if u is None or r.status != "ok" or r.accel != "tcg" or r.disturbed is not False:
            continue
        tier = declaration(u.cell.tier)
        if not tier.paced_by_guest(plan) or "wall_s" not in r.phases:
            continue
        timed, work = run_parts_s(plan, u.cell, u.workload)
        boot = tier.start_up_s(plan)[1] if tier.batches_runs and r.boot_position == 0 else 0.0
        runs.append((r.phases["wall_s"] - timed, work + boot))
    if (pace := pace_of_runs(runs)) is not None:
        record_pace(pace)


def _say_what_did_not_settle(res: SweepResult, exp: Expansion, p: Plan) -> None:
    """After a sweep's tally: the runs the host disturbed or that missed their load, the units
    that stopped without an answer or gave up, and what the budget cut."""
    from iomatrix.stats.interference import disturbance_lines

    if res.disturbed:
        console.print(
            f"[yellow]{res.disturbed} run(s) disturbed by the rest of the host[/] "
            f"({res.retried} retried); "
            "see the notes in 'iomatrix results'"
        )
        for line in disturbance_lines(res.disturbed_by):
            console.print(line, markup=False, highlight=False)
    if res.load_not_reached:
        console.print(
            f"[yellow]{res.load_not_reached} run(s) missed their offered load[/]: not "
            "counted by racing nor "
            "ranked (their latency is not at the asked load)"
        )
    # a unit by its settings and workload, as the progress lines name it, not by its store key
    # ("blocklayer/qcow2/off/…::seq-write-1m")
    named = {u.key: f"{u.cell.label()} × {u.workload.name}" for u in exp.units}
    for key, why in res.unreached_units:
        print_line(
            f"[yellow]load not reached:[/] {escape(f'{named.get(key, key)}: {why}')}", markup=True
        )
    for key, why in res.not_converged:
        print_line(
            f"[yellow]not converged:[/] {escape(f'{named.get(key, key)}: {why}')}", markup=True
        )
    for line in budget_lines(res, p.time_budget, p.repetitions.min):
        console.print(line, markup=False, highlight=False)
    for key, why in res.gave_up:
        print_line(f"[red]gave up:[/] {escape(f'{named.get(key, key)}: {why}')}", markup=True)


def budget_lines(res: SweepResult, budget: str, min_runs: int) -> list[str]:
    """The sweep's wall clock against its time budget, its set-up said apart, and the cells the
    budget stopped before their minimum runs (scheduler.Scheduler.short_of_minimum): e.g. "time:
    4.4 min of the 4.5m time budget, set-up 12 s included" and "budget reached: 3 cells kept their
    first runs only (…)". [] before the session started."""
    if res.elapsed_s is None:
        return []
    setup = f", set-up {res.setup_s:.0f} s included" if res.setup_s is not None else ""
    lines = [f"time: {res.elapsed_s / 60:.1f} min of the {budget} time budget{setup}"]
    if res.short_of_minimum:
        cells = len({label for _, label, _ in res.short_of_minimum})
        low = min(ok for _, _, ok in res.short_of_minimum)
        high = max(ok for _, _, ok in res.short_of_minimum)
        had = str(low) if low == high else f"{low}–{high}"
        lines.append(
            f"budget reached: {cells} cell{'s' if cells != 1 else ''} kept "
            f"{'their' if cells != 1 else 'its'} first runs only "
            f"({len(res.short_of_minimum)} cell×workload units at {had} of the {min_runs} minimum "
            f"runs; a longer time_budget in the plan gives them all their minimum)"
        )
    return lines


def plan_with_current(p: Plan, current: str | None, current_disk: str | None) -> Plan:
    """`p` with the user's current configuration (--current) as its `current`
    (plan/current_cell.py)."""
    if current is None:
        if current_disk is not None:
            raise UserError(
                "--current-disk needs --current",
                hint="give the libvirt domain XML with --current vm.xml",
            )
        return p
    from iomatrix.current import parse_current
    from iomatrix.plan.model import with_current

    return with_current(p, parse_current(current, current_disk))


def plan_with_roles(p: Plan, roles: list[str], source: str) -> Plan:
    """`p` with the roles of --role added (iomatrix.roles, docs/roles.md): their jobs run as its
    workloads."""
    if not roles:
        return p
    from iomatrix.plan.model import with_roles

    return with_roles(p, roles, source)


def plan_with_margin(p: Plan, margin: float | None) -> Plan:
    """`p` with --margin as its key `margin` (part of the plan, as --role and --current are: its
    races stop an equivalent cell at it, and the stored plan gives it to recommend and the
    report)."""
    from iomatrix.plan.model import with_margin

    return with_margin(p, margin)


def current_lines(p: Plan, exp: Expansion, width: int) -> list[str]:
    """What became of the current configuration in each tier: a cell of its own, the matrix's own
    cell, or pruned with the reason (each line wrapped to `width`)."""
    if p.current is None:
        return []
    from iomatrix.domain import NA
    from iomatrix.matrix import current_cells
    from iomatrix.plan.current_cell import CURRENT_PRUNED
    from iomatrix.report.render import wrap

    defaulted = f" (defaulted: {'; '.join(p.current.defaulted)})" if p.current.defaulted else ""
    read = f" (read: {'; '.join(p.current.notes)})" if p.current.notes else ""
    given = " ".join(f"{k}={v}" for k, v in p.current.axes.items())
    out = wrap(f"current configuration, from {p.current.source}: {given}{defaulted}{read}", width)
    pruned = {x.what: x.reason.removeprefix(CURRENT_PRUNED) for x in exp.pruned}
    # what became of it → the tiers (one line for tiers pruning it alike)
    said: dict[str, list[str]] = {}
    for cell in current_cells(p):
        if cell in exp.current:
            in_matrix = all(v == NA or v in p.axis_values(a, cell.tier) for a, v in cell.items())
            shown = cell.label().removeprefix(f"tier={cell.tier} ")
            text = f"{'a cell the plan has already' if in_matrix else 'a cell of its own'}: {shown}"
        else:
            text = f"not measured: {pruned.get(cell.key, 'pruned')}"
        said.setdefault(text, []).append(cell.tier)
    for text, tiers in said.items():
        out += wrap(
            f"{', '.join(dict.fromkeys(tiers))} tier{'s' if len(set(tiers)) > 1 else ''}: {text}",
            width,
            "  ",
        )
    return out


def reclaim_leftovers(work: Path) -> list[str]:
    """What a killed sweep in `work` left behind (its ledger says what: mounts, loop devices,
    images), removed and said. Called with the workdir's lock held, so no other sweep is using them;
    the ledger undoes only entries whose creating process is dead, and refuses what it cannot show
    it created."""
    from iomatrix.backing.leftovers import clean, pending

    if not pending(work):
        return []
    lines = clean(work)
    for line in lines:
        print_line(f"reclaimed from a killed sweep: {line}")
    return lines


def refuse_kernel_fs_db(db: Path) -> None:
    """A `--db` under /proc, /sys or /dev is a typo, not a results file: said as such, not as a full
    disk (the space check would find 0 bytes free there)."""
    real = Path(os.path.realpath(db.expanduser()))
    for root in (Path("/proc"), Path("/sys"), Path("/dev")):
        if real.parent == root or root in real.parents:
            raise UserError(
                f"--db {db} is under {root}, a kernel filesystem",
                hint="choose a file on a real filesystem, e.g. ./iomatrix.sqlite",
            )


def check_workdir(workdir: Path) -> Path:
    """The resolved workdir, after refusing kernel filesystems, system directories, host roots,
    files and unwritable places."""
    w = workdir.expanduser().resolve()
    refuse_system_workdir(workdir.expanduser())
    if w.exists() and not w.is_dir():
        raise UserError(
            f"--workdir {workdir} exists and is not a directory",
            hint="give a directory (it is created if missing)",
        )
    existing = w
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(
            f"--workdir {workdir}: {existing} is not a directory", hint="give a directory path"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(
            f"--workdir {workdir}: {existing} is not writable", hint="choose a writable directory"
        )
    return w


def register(app: typer.Typer) -> None:
    app.command(NAME)(run)


def _print_next_commands(db: Path) -> None:
    """The three commands to paste next, each whole: on one line where they fit the width, else one
    a line under "next:" (a database's path made the one line 262 characters; width changes the
    layout, not what is said; issue 70)."""
    # quoted for a shell: a path with a space pastes as one argument
    where = shlex.quote(str(db))
    commands = [
        f"iomatrix recommend --db {where}",
        f"iomatrix report --html report.html --db {where}",
        f"iomatrix rank --db {where}",
    ]
    one_line = "next: " + "   ·   ".join(commands)
    if len(one_line) <= console.width:
        print_line(one_line)
        return
    print_line("next:")
    for command in commands:
        print_line(f"  {command}")
