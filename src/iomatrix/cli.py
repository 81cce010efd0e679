"""The `iomatrix` command line."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import traceback
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from iomatrix import __version__
from iomatrix.errors import UserError
from iomatrix.guest.accel import TCG_WARNING
from iomatrix.ui import console, err_console

if TYPE_CHECKING:
    from iomatrix.plan.model import Plan
    from iomatrix.store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)
guest_app = typer.Typer(no_args_is_help=True, help="Guest artifacts: kernel, initramfs with fio.")
app.add_typer(guest_app, name="guest")

DEFAULT_DB = Path("iomatrix.sqlite")
DEFAULT_WORKDIR = Path("iomatrix-work")

# Exit statuses (README, "Exit status"): 0 done; 1 internal error (a bug: the traceback is in a log file);
# 2 a problem the user can fix (bad plan, option, file); 3 a sweep ran but units gave up or every run
# failed; 130 interrupted.
EXIT_INTERNAL = 1
EXIT_USER = 2
EXIT_GAVE_UP = 3

# Kernel filesystems: a workdir there is never what the user meant, and writing to them can do harm.
KERNEL_FS_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))

DbOpt = Annotated[Path, typer.Option("--db", help="Results database (SQLite file).")]
SweepOpt = Annotated[int | None, typer.Option("--sweep", help="Sweep id (default: the latest).")]
# Options of every command that ranks (rank, recommend, report): one spelling, one help text.
MinRunsOpt = Annotated[int, typer.Option(help="Cells with fewer ok runs are listed but not ranked.")]
MaxNoiseOpt = Annotated[float, typer.Option(help="Flag (never drop) cells whose CI half-width exceeds this "
                                                 "fraction of the mean.")]
ThresholdOpt = Annotated[float, typer.Option(help="Practical threshold: cells within this fraction of the best "
                                                  "are tied with it.")]
TieBreakOpt = Annotated[str, typer.Option(help="How a tied top group is resolved, in order (comma-separated: "
                                               "safety, simplicity, performance, name).")]


def check_ranking_options(min_runs: int, max_noise: float) -> None:
    """The ranking options' ranges, checked once for rank, recommend and report (the threshold and tie-break are
    checked where they are parsed, in stats.decision)."""
    if min_runs < 2:
        raise UserError(f"--min-runs {min_runs} is out of range",
                        hint="use 2 or more: a confidence interval needs at least 2 runs")
    if not (math.isfinite(max_noise) and max_noise > 0):
        raise UserError(f"--max-noise {max_noise} is out of range",
                        hint="use a fraction of the mean above 0, e.g. 0.10 for ±10%")


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table, json, csv or markdown.")]


class Accel(StrEnum):
    auto = "auto"
    kvm = "kvm"
    tcg = "tcg"


def _version(value: bool) -> None:
    if value:
        console.print(f"iomatrix {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Sweep VM disk configurations (format × cache × aio × bus × backing) with error bars."""


def _policy_text(p: Plan) -> str:
    """What decides how many runs a unit gets, in a few words."""
    if p.repetition_policy == "racing":
        text = "racing: units stop once the data settles them, from the minimum on"
    else:
        text = f"until the 95% CI is within ±{p.ci_target * 100:g}% of the mean"
    for tier, n in p.repetitions.precision_max.items():
        text += f"; then {tier} units run on toward ±{p.ci_target * 100:g}%, up to {n} runs"
    return text


def _load_plan(plan: str) -> tuple[Plan, Path | None]:
    from iomatrix.plan.load import PLAN_ALIASES, load_plan

    if plan in PLAN_ALIASES:
        err_console.print(f"[yellow]note:[/] the built-in plan '{plan}' is now called '{PLAN_ALIASES[plan]}'",
                          soft_wrap=True)
    return load_plan(plan)


def _warn_tcg(accels: list[str]) -> None:
    if any("tcg" in a for a in accels):
        err_console.print(f"[yellow]warning:[/] {TCG_WARNING}")


@app.command()
def plans() -> None:
    """List the built-in plans."""
    from iomatrix.plan.load import builtin_names, load_plan

    t = Table("plan", "description", box=None)
    for name in builtin_names():
        plan, _ = load_plan(name)
        t.add_row(name + (" (default)" if name == "quick" else ""), plan.description)
    console.print(t)


@app.command("plan")
def plan_cmd(
    plan: Annotated[str, typer.Argument(help="Built-in plan name or TOML file.")] = "quick",
    explain: Annotated[bool, typer.Option("--explain", help="List every cell and every pruned cell.")] = False,
    allow_destroy: Annotated[list[Path], typer.Option("--allow-destroy", help="Block device you hand over.")] = [],  # noqa: B006
) -> None:
    """Expand a plan into matrix cells; show pruned cells with their reasons and an estimated duration."""
    from iomatrix.matrix import estimate_seconds
    from iomatrix.runner import plan_expansion

    p, base = _load_plan(plan)
    exp = plan_expansion(p, base, set(allow_destroy))
    low, high = estimate_seconds(p, exp)
    console.print(f"[bold]{p.name}[/]: {p.description}")
    console.print(f"{len(exp.cells)} cells × workloads = {len(exp.units)} units; "
                  f"repetitions {p.repetitions.min}–{p.repetitions.max} ({_policy_text(p)}); "
                  f"{len(exp.pruned)} pruned")
    for tier, axes in exp.collapsed.items():
        console.print(f"[dim]tier {tier}: axes {', '.join(axes)} do not apply and are collapsed (shown as -)[/]")
    console.print(f"estimated duration: {low / 60:.1f} min with {p.repetitions.min} runs each, up to "
                  f"{high / 60:.1f} min (time budget {p.time_budget})")
    unbatched, _ = estimate_seconds(p, exp, batching=False)
    if unbatched > low:
        console.print(f"[dim]guest runs of one cell share a boot each round; one boot per run would take "
                      f"{unbatched / 60:.1f} min with {p.repetitions.min} runs each[/]")
    for note in exp.notes:
        console.print(f"[yellow]note:[/] {note}")
    if explain:
        t = Table("#", "tier", "format", "prealloc", "cache", "aio", "bus", "backing", "modifier", "workloads",
                  title="cells", box=None)
        for i, c in enumerate(exp.cells, 1):
            wls = [u.workload.name for u in exp.units if u.cell == c]
            t.add_row(str(i), c.tier, c.format, c.preallocation, c.cache, c.aio, c.bus, c.backing, c.modifier,
                      ", ".join(wls))
        console.print(t)
        if exp.pruned:
            pt = Table("pruned", "reason", title="pruned", box=None)
            for pr in exp.pruned:
                pt.add_row(pr.what, pr.reason)
            console.print(pt)


@app.command()
def run(
    plan: Annotated[str, typer.Argument(help="Built-in plan name (e.g. quick) or TOML file.")],
    db: DbOpt = DEFAULT_DB,
    workdir: Annotated[Path, typer.Option(help="Working directory: images, fio files, loop files go here.")]
    = DEFAULT_WORKDIR,
    allow_destroy: Annotated[list[Path], typer.Option(
        "--allow-destroy", help="A block device you hand over to be overwritten (repeatable).")] = [],  # noqa: B006
    accel: Annotated[Accel, typer.Option(help="Guest accelerator: probe KVM, or force one.")] = Accel.auto,
    monitor_interval: Annotated[float, typer.Option(help="Host sampler period in seconds.")] = 1.0,
    kernel: Annotated[Path | None, typer.Option(help="Guest kernel image to use instead of Debian's.")] = None,
) -> None:
    """Run a plan, e.g. 'iomatrix run quick'. Re-running on the same --db resumes and skips completed runs."""
    from iomatrix.locks import WORKDIR_LOCK, db_lock_path, exclusive, refuse_if_held
    from iomatrix.store import Store

    if not 0.05 <= monitor_interval <= 60:
        raise UserError(f"--monitor-interval {monitor_interval} is out of range", hint="use 0.05 to 60 seconds")
    from iomatrix.safety import check_allowed_devices

    check_allowed_devices(allow_destroy)  # every handed-over device, before anything runs, whatever the plan
    p, base = _load_plan(plan)
    # Everything is checked before anything is created: a bad --db leaves no workdir behind. A database
    # another sweep holds may be half-created: say who holds it rather than judge its contents.
    refuse_if_held(db_lock_path(db.absolute()), f"results database {db}")
    Store.preflight(db)
    work = _check_workdir(workdir)
    if os.geteuid() != 0 and not p.keep_caches_warm:
        err_console.print("[yellow]warning:[/] not running as root: the host page cache cannot be dropped "
                          "before each run (each run records it as not-dropped); run as root for cold-cache "
                          "figures", soft_wrap=True)
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create --workdir {workdir}: {err.strerror}",
                        hint="choose a writable directory") from None
    with contextlib.ExitStack() as held:
        held.enter_context(exclusive(work / WORKDIR_LOCK, f"working directory {work}"))
        held.enter_context(exclusive(db_lock_path(db.absolute()), f"results database {db}"))
        _run_locked(p, base, plan, Store(db), db, work, allow_destroy, accel, monitor_interval, kernel)


def _run_locked(p: Plan, base: Path | None, plan: str, store: Store, db: Path, work: Path,
                allow_destroy: list[Path], accel: Accel, monitor_interval: float, kernel: Path | None) -> None:
    from iomatrix.runner import RunOptions, SweepRunner
    from iomatrix.ui import RichProgress

    opts = RunOptions(workdir=work, allowed_devices={d.resolve() for d in allow_destroy},
                      accel=accel.value, monitor_interval=monitor_interval, kernel=kernel,
                      log=lambda m: console.print(f"[dim]{m}[/]"))
    runner = SweepRunner(p, base, store, opts, progress=RichProgress())
    exp = runner.expansion
    console.print(f"[bold]{p.name}[/]: {len(exp.cells)} cells, {len(exp.units)} cell×workload units, "
                  f"{len(exp.pruned)} pruned (see 'iomatrix plan {plan} --explain'); results → {db}")
    res = runner.run()
    accels = sorted(set(res.accel.values()))
    console.print(f"sweep {res.sweep_id}: {res.runs_done} runs ok, {res.runs_failed} failed; accelerator: "
                  + ", ".join(f"{t}={a}" for t, a in res.accel.items()))
    if res.disturbed:
        console.print(f"[yellow]{res.disturbed} run(s) disturbed by the rest of the host[/] ({res.retried} retried); "
                      "see the notes in 'iomatrix results'")
    for key, why in res.not_converged:
        console.print(f"[yellow]not converged:[/] {key}: {why}")
    for key, why in res.gave_up:
        console.print(f"[red]gave up:[/] {key}: {why}")
    _warn_tcg(accels)
    if res.interrupted:
        console.print(f"[yellow]interrupted[/]: completed runs are saved in {db}; run the same command to resume")
        raise typer.Exit(130)
    if res.runs_done:
        from iomatrix.report.recommend import short_verdict

        console.print(short_verdict(store, res.sweep_id))
    console.print(f"next: iomatrix recommend --db {db}   ·   iomatrix report --html report.html --db {db}   ·   "
                  f"iomatrix rank --db {db}")
    if res.runs_done == 0 and res.runs_failed > 0:
        err_console.print(f"[red]error:[/] every run failed ({res.runs_failed} runs); see the errors above and "
                          f"'iomatrix results --db {escape(str(db))}'", soft_wrap=True)
        raise typer.Exit(EXIT_GAVE_UP)
    if res.gave_up:
        err_console.print(f"[red]error:[/] {len(res.gave_up)} of {len(exp.units)} cell×workload units gave up "
                          "after repeated failures; their figures are missing", soft_wrap=True)
        raise typer.Exit(EXIT_GAVE_UP)


def _check_workdir(workdir: Path) -> Path:
    """The resolved workdir, after refusing kernel filesystems, files and unwritable places."""
    w = workdir.expanduser().resolve()
    for root in KERNEL_FS_ROOTS:
        if w == root or root in w.parents:
            raise UserError(f"--workdir {workdir} is under {root}, a kernel filesystem",
                            hint="choose a directory on a real filesystem, e.g. ./iomatrix-work")
    if w.exists() and not w.is_dir():
        raise UserError(f"--workdir {workdir} exists and is not a directory",
                        hint="give a directory (it is created if missing)")
    existing = w
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"--workdir {workdir}: {existing} is not a directory", hint="give a directory path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--workdir {workdir}: {existing} is not writable", hint="choose a writable directory")
    return w


@app.command()
def results(
    db: DbOpt = DEFAULT_DB,
    format: FormatOpt = OutputFormat.table,
    sweep: SweepOpt = None,
    metric: Annotated[str | None, typer.Option(help="Only this metric ('all' for every metric; default: "
                                                    "each workload's primary metric).")] = None,
    monitor: Annotated[bool, typer.Option("--monitor", help="Show host monitor summaries beside each cell.")]
    = False,
    run_id: Annotated[int | None, typer.Option("--run", help="With --raw: the run whose tool output to print.")]
    = None,
    raw: Annotated[bool, typer.Option("--raw", help="Print the raw fio JSON of the run given with --run.")]
    = False,
) -> None:
    """Results per cell × workload × metric: n, mean, CI and the samples."""
    from iomatrix.report.query import pick_sweep, sweep_ids
    from iomatrix.report.results import results_document, to_csv, to_json

    store = _open(db)
    if raw or run_id is not None:
        from iomatrix.report.query import run_raw_output

        if not (raw and run_id is not None):
            raise UserError("--raw and --run go together", hint="e.g. 'iomatrix results --run 12 --raw'")
        sys.stdout.write(run_raw_output(store, run_id))
        return
    ids = sweep_ids(store) if (format != OutputFormat.table and sweep is None) else [pick_sweep(store, sweep)]
    doc = results_document(store, ids)
    if metric not in (None, "all"):
        known = sorted({r["metric"] for sw in doc["sweeps"] for r in sw["results"]})
        if metric not in known:
            raise UserError(f"no metric '{metric}' in {db}",
                            hint=f"metrics: {', '.join(known) or 'none yet'}, or 'all'")
    if format == OutputFormat.json:
        sys.stdout.write(to_json(doc) + "\n")
        return
    if format == OutputFormat.csv:
        sys.stdout.write(to_csv(doc))
        return
    if format == OutputFormat.markdown:
        from iomatrix.report.exports import results_table
        from iomatrix.report.render import render_tables

        sys.stdout.write(render_tables(results_table(doc, metric), format.value))
        return
    from iomatrix.report.terminal import print_results

    _warn_tcg(print_results(console, doc, metric, monitor))


@app.command("rank")
def rank_cmd(
    db: DbOpt = DEFAULT_DB,
    sweep: SweepOpt = None,
    workload: Annotated[str | None, typer.Option(help="Only this workload.")] = None,
    metric: Annotated[str | None, typer.Option(help="Rank by this metric (default: the workload's primary).")]
    = None,
    score: Annotated[str | None, typer.Option(help="Rank by a block-size-weighted bare-metal-relative score: "
                                                   "weighted-read, weighted-write or weighted-mixed.")] = None,
    top: Annotated[int, typer.Option(help="Rows per table.")] = 20,
    min_runs: MinRunsOpt = 3,
    max_noise: MaxNoiseOpt = 0.10,
    threshold: ThresholdOpt = 0.05,
    tie_break: TieBreakOpt = "safety,simplicity",
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Order cells per tier, group those not significantly different, and decide: one answer, a tie, or
    what it would take to separate the leaders."""
    from iomatrix.report.query import pick_sweep
    from iomatrix.report.rank import rank_sweep, weighted_scores
    from iomatrix.report.terminal import print_rankings, print_scores

    if top < 1:
        raise UserError(f"--top {top} is out of range", hint="use 1 or more rows per table")
    check_ranking_options(min_runs, max_noise)
    store = _open(db)
    sid = pick_sweep(store, sweep)
    if score is not None:
        rows, factors = weighted_scores(store, sid, score)
        print_scores(console, score, rows, factors, top)
        return
    rankings = rank_sweep(store, sid, workload, metric, min_n=min_runs, max_noise=max_noise, threshold=threshold,
                          tie_break=[x.strip() for x in tie_break.split(",") if x.strip()])
    if format != OutputFormat.table:
        from iomatrix.report.exports import rank_tables
        from iomatrix.report.render import render_tables

        sys.stdout.write(render_tables(rank_tables(rankings), format.value))
        return
    accels = print_rankings(console, rankings, top, min_runs)
    from iomatrix.report.consolidation import consolidation_groups, consolidation_lines

    for line in consolidation_lines(consolidation_groups(store, sid)):  # consolidation tier: how many tiles
        console.print(line, markup=False, highlight=False)
    _warn_tcg(accels)


@app.command()
def compare(
    db_a: Annotated[Path, typer.Argument(help="Before (or host A).")],
    db_b: Annotated[Path, typer.Argument(help="After (or host B).")],
    sweep_a: Annotated[int | None, typer.Option(help="Sweep in DB_A (default: latest).")] = None,
    sweep_b: Annotated[int | None, typer.Option(help="Sweep in DB_B (default: latest).")] = None,
    metric: Annotated[str | None, typer.Option(help="Metric (default: each workload's primary).")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Also list cells that did not change.")] = False,
    format: FormatOpt = OutputFormat.table,
    fail_above: Annotated[float | None, typer.Option(
        help="Exit 1 when any figure got significantly worse by more than this many percent (a CI gate).")]
    = None,
) -> None:
    """Cells that changed significantly between two sweeps (Welch, Holm-corrected), and by how much."""
    from iomatrix.report.exports import compare_table, regressions
    from iomatrix.report.query import pick_sweep
    from iomatrix.report.rank import compare_stores
    from iomatrix.report.render import render_tables
    from iomatrix.report.terminal import print_changes

    if fail_above is not None and not (math.isfinite(fail_above) and fail_above >= 0):
        raise UserError(f"--fail-above {fail_above} is out of range", hint="use a percentage ≥ 0, e.g. 5")
    a, b = _open(db_a), _open(db_b)
    changes = compare_stores(a, pick_sweep(a, sweep_a), b, pick_sweep(b, sweep_b), metric)
    worse = regressions(changes, fail_above) if fail_above is not None else []
    if format != OutputFormat.table:
        sys.stdout.write(render_tables([compare_table(changes, show_all)], format.value))
        if worse:
            raise typer.Exit(1)
        return
    print_changes(console, changes, show_all)
    if worse:
        err_console.print(f"[red]regression:[/] {len(worse)} figure(s) significantly worse by more than "
                          f"{fail_above:g}%: " + ", ".join(c.key for c in worse[:5]), soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def monitor(
    run_id: Annotated[int, typer.Option("--run", help="Run id (see 'iomatrix results --format json').")],
    db: DbOpt = DEFAULT_DB,
    fields: Annotated[str, typer.Option(help="Comma-separated field prefixes to show.")]
    = "cpu.,disk.,mem.,proc.",
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Print a run's host time series (one row per sample)."""
    from iomatrix.report.query import monitor_series

    store = _open(db)
    series = monitor_series(store, run_id)
    prefixes = tuple(x.strip() for x in fields.split(",") if x.strip())
    groups = sorted({n.split(".")[0] + "." for n in series})
    unknown = [x for x in prefixes if not any(n.startswith(x) for n in series)]
    if not prefixes or (series and unknown):
        raise UserError(f"--fields {fields!r} matches no monitor field of run {run_id}"
                        if not unknown else f"--fields: no monitor field of run {run_id} starts with "
                        + ", ".join(repr(u) for u in unknown),
                        hint=f"field prefixes: {', '.join(groups) or 'none recorded'}")
    names = sorted(n for n in series if n.startswith(prefixes))
    if format != OutputFormat.table:
        from iomatrix.report.exports import monitor_table
        from iomatrix.report.render import render_tables

        sys.stdout.write(render_tables([monitor_table(series, prefixes)], format.value))
        return
    if not names:
        console.print(f"run {run_id} has no monitor samples matching {fields}")
        return
    from iomatrix.report.terminal import print_monitor

    print_monitor(console, series, names)


@app.command()
def clean(
    workdir: Annotated[Path, typer.Option(help="Working directory of the crashed run.")] = DEFAULT_WORKDIR,
) -> None:
    """Remove what a crashed or killed run left behind (mounts, loop devices, images) — and only that."""
    from iomatrix.backing.leftovers import clean as clean_leftovers
    from iomatrix.backing.leftovers import pending

    lines = clean_leftovers(workdir.resolve())
    for line in lines:
        console.print(line)
    if not lines:
        console.print(f"nothing left behind in {workdir}")
    if remaining := pending(workdir.resolve()):  # refused, failed or still in use: say so in the exit status
        err_console.print(f"[red]{len(remaining)} leftover(s) remain[/] in {workdir} (see above)")
        raise typer.Exit(1)


@guest_app.command("build")
def guest_build(
    kernel: Annotated[Path | None, typer.Option(help="Guest kernel image to use instead of Debian's.")] = None,
    rebuild: Annotated[bool, typer.Option(help="Rebuild even if cached.")] = False,
) -> None:
    """Build (or reuse) the guest kernel + initramfs with fio."""
    from iomatrix.guest.artifacts import ensure_artifacts

    art = ensure_artifacts(kernel=kernel, rebuild=rebuild, log=lambda m: console.print(f"[dim]{m}[/]"))
    for k, v in art.as_metadata().items():
        console.print(f"{k}: {v}")


@guest_app.command("info")
def guest_info() -> None:
    """Show which guest kernel and initramfs would be used, and why."""
    from iomatrix.guest.artifacts import artifact_info

    for k, v in artifact_info().items():
        console.print(f"{k}: {v}")


def _open(db: Path):  # type: ignore[no-untyped-def]
    from iomatrix.store import Store

    return Store.open_existing(db)


def crash_log_dir() -> Path:
    """Where full tracebacks of internal errors go: $XDG_CACHE_HOME/iomatrix/logs (~/.cache/iomatrix/logs)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iomatrix" / "logs"


def _write_crash_log(err: BaseException) -> Path | None:
    text = (f"iomatrix {__version__}\nargv: {sys.argv!r}\ntime: {time.strftime('%Y-%m-%d %H:%M:%S')}\n\n"
            + "".join(traceback.format_exception(err)))
    try:
        d = crash_log_dir()
        d.mkdir(parents=True, exist_ok=True)
        log = d / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        log.write_text(text)
        return log
    except OSError:
        return None


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> None:
    # Standalone mode: the CLI library prints usage errors and --help itself and turns typer.Exit
    # into the exit code; what is left for us is the user's own mistakes (UserError), Ctrl-C, and
    # anything unexpected, which becomes one line here and a full traceback in a log file.
    try:
        app(args=argv, prog_name="iomatrix")
    except UserError as err:
        err_console.print(f"[red]error:[/] {escape(_one_line(err.one_line(), 1000))}", soft_wrap=True)
        sys.exit(EXIT_USER)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as err:
        log = _write_crash_log(err)
        where = f"full traceback in {log}" if log else f"no log could be written in {crash_log_dir()}"
        if isinstance(err, OSError) and err.strerror:
            # The host refused something (disk full, permission, read-only filesystem): the user can act.
            what = f"{err.strerror}" + (f": {err.filename}" if err.filename else "")
            err_console.print(f"[red]error:[/] {escape(_one_line(what))} — {escape(where)}", soft_wrap=True)
            sys.exit(EXIT_USER)
        err_console.print(f"[red]internal error:[/] {escape(_one_line(f'{type(err).__name__}: {err}'))} — "
                          f"{escape(where)}; please report it", soft_wrap=True)
        sys.exit(EXIT_INTERNAL)


# Commands defined in their own modules register themselves on `app` when imported.
__import__("iomatrix.commands_merge", fromlist=["register"]).register(app)  # iomatrix merge (store/merge.py)
import iomatrix.cli_verdict  # noqa: E402, F401
