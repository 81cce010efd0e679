"""The `iomatrix` command line."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from iomatrix.errors import UserError
from iomatrix.guest.accel import TCG_WARNING
from iomatrix.ui import console, err_console, fmt

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Sweep VM disk configurations (format × cache × aio × bus × backing) with error bars.")
guest_app = typer.Typer(no_args_is_help=True, help="Guest artifacts: kernel, initramfs with fio.")
app.add_typer(guest_app, name="guest")

DEFAULT_DB = Path("iomatrix.sqlite")
DEFAULT_WORKDIR = Path("iomatrix-work")

DbOpt = Annotated[Path, typer.Option("--db", help="Results database (SQLite file).")]
SweepOpt = Annotated[int | None, typer.Option("--sweep", help="Sweep id (default: the latest).")]


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


class Accel(StrEnum):
    auto = "auto"
    kvm = "kvm"
    tcg = "tcg"


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
    from iomatrix.plan.load import load_plan
    from iomatrix.runner import plan_expansion

    p, base = load_plan(plan)
    exp = plan_expansion(p, base, set(allow_destroy))
    low, high = estimate_seconds(p, exp)
    console.print(f"[bold]{p.name}[/]: {p.description}")
    console.print(f"{len(exp.cells)} cells × workloads = {len(exp.units)} units; "
                  f"repetitions {p.repetitions.min}–{p.repetitions.max} (CI target ±{p.ci_target:.0%}); "
                  f"{len(exp.pruned)} pruned")
    for tier, axes in exp.collapsed.items():
        console.print(f"[dim]tier {tier}: axes {', '.join(axes)} do not apply and are collapsed (shown as -)[/]")
    console.print(f"estimated duration: {low / 60:.1f} min with {p.repetitions.min} runs each, up to "
                  f"{high / 60:.1f} min (time budget {p.time_budget})")
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
    plan: Annotated[str, typer.Argument(help="Built-in plan name or TOML file.")] = "quick",
    db: DbOpt = DEFAULT_DB,
    workdir: Annotated[Path, typer.Option(help="Working directory: images, fio files, loop files go here.")]
    = DEFAULT_WORKDIR,
    allow_destroy: Annotated[list[Path], typer.Option(
        "--allow-destroy", help="A block device you hand over to be overwritten (repeatable).")] = [],  # noqa: B006
    accel: Annotated[Accel, typer.Option(help="Guest accelerator: probe KVM, or force one.")] = Accel.auto,
    monitor_interval: Annotated[float, typer.Option(help="Host sampler period in seconds.")] = 1.0,
    kernel: Annotated[Path | None, typer.Option(help="Guest kernel image to use instead of Debian's.")] = None,
) -> None:
    """Run a plan (default: quick). Re-running on the same --db resumes and skips completed runs."""
    from iomatrix.plan.load import load_plan
    from iomatrix.runner import RunOptions, SweepRunner
    from iomatrix.store import Store
    from iomatrix.ui import RichProgress

    if not 0.05 <= monitor_interval <= 60:
        raise UserError(f"--monitor-interval {monitor_interval} is out of range", hint="use 0.05 to 60 seconds")
    from iomatrix.safety import check_allowed_devices

    check_allowed_devices(allow_destroy)  # every handed-over device, before anything runs, whatever the plan
    p, base = load_plan(plan)
    workdir.mkdir(parents=True, exist_ok=True)
    store = Store(db)
    opts = RunOptions(workdir=workdir.resolve(), allowed_devices={d.resolve() for d in allow_destroy},
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
    for key, why in res.not_converged:
        console.print(f"[yellow]not converged:[/] {key}: {why}")
    for key, why in res.gave_up:
        console.print(f"[red]gave up:[/] {key}: {why}")
    _warn_tcg(accels)
    if res.interrupted:
        console.print(f"[yellow]interrupted[/]: completed runs are saved in {db}; run the same command to resume")
        raise typer.Exit(130)
    console.print(f"next: iomatrix results --db {db}   ·   iomatrix rank --db {db}")


@app.command()
def results(
    db: DbOpt = DEFAULT_DB,
    format: Annotated[OutputFormat, typer.Option("--format", help="table, json or csv.")] = OutputFormat.table,
    sweep: SweepOpt = None,
    metric: Annotated[str | None, typer.Option(help="Only this metric ('all' for every metric; default: "
                                                    "each workload's primary metric).")] = None,
    monitor: Annotated[bool, typer.Option("--monitor", help="Show host monitor summaries beside each cell.")]
    = False,
) -> None:
    """Results per cell × workload × metric: n, mean, CI and the samples."""
    from iomatrix.report.quality import notes as quality_notes
    from iomatrix.report.query import pick_sweep, sweep_ids
    from iomatrix.report.rank import primary_metric
    from iomatrix.report.results import MONITOR_HEADLINE, results_document, to_csv, to_json

    store = _open(db)
    ids = sweep_ids(store) if (format != OutputFormat.table and sweep is None) else [pick_sweep(store, sweep)]
    doc = results_document(store, ids)
    if format == OutputFormat.json:
        sys.stdout.write(to_json(doc) + "\n")
        return
    if format == OutputFormat.csv:
        sys.stdout.write(to_csv(doc))
        return
    s = doc["sweeps"][0]
    console.print(f"sweep {s['id']} · plan {s['plan']} · {s['status']} · host {s['host']['hostname']} "
                  f"(kernel {s['host']['kernel']}, {s['host']['fio_version']}, {s['host']['qemu_version']})")
    t = Table("tier", "cell", "workload", "metric", "n", "mean", "95% CI", "±%", "CV", "accel", "notes", box=None)
    mon_cols = list(MONITOR_HEADLINE) if monitor else []
    for f in mon_cols:
        t.add_column(f.replace("_pct", " %").replace("_ms", " ms").replace("_mb", " MiB").replace("_", " "))
    cells = {(c["cell"], c["workload"]): c for c in s.get("cells", [])}
    accels: list[str] = []
    for r in s["results"]:
        primary = primary_metric(r["workload"])[0]
        if metric is None and r["metric"] != primary:
            continue
        if metric not in (None, "all") and r["metric"] != metric:
            continue
        accels += r["accel"]
        label = " ".join(f"{k}={v}" for k, v in r["axes"].items()
                         if v != "-" and k != "tier" and not (k == "modifier" and v == "none"))
        ci = "–" if r["ci95_low"] is None else f"{fmt(r['ci95_low'])}–{fmt(r['ci95_high'])}"
        rel = "–" if r["ci95_rel_half_width"] is None else f"{r['ci95_rel_half_width']:.1%}"
        cv = "–" if r["cv"] is None else f"{r['cv']:.1%}"
        n = f"{r['n']}" + (f" (+{r['failed_runs']} failed)" if r["failed_runs"] else "")
        row = [r["axes"]["tier"], label, r["workload"], r["metric"], n, fmt(r["mean"]), ci, rel, cv,
               ",".join(r["accel"]), "; ".join(quality_notes(r))]
        view = cells.get((r["cell"], r["workload"]), {}).get("host_view", {})
        row += [fmt(view.get(f)) for f in mon_cols]
        t.add_row(*row)
    console.print(t)
    for pr in s["pruned"][:5]:
        console.print(f"[dim]pruned: {pr['what']}: {pr['reason']}[/]")
    if len(s["pruned"]) > 5:
        console.print(f"[dim]… {len(s['pruned']) - 5} more pruned (iomatrix plan --explain)[/]")
    for f in s["failures"][:5]:
        console.print(f"[red]failed run {f['id']}[/] {f['key']} · {f['workload']}: {f['error']}")
    _warn_tcg(accels)


@app.command("rank")
def rank_cmd(
    db: DbOpt = DEFAULT_DB,
    sweep: SweepOpt = None,
    workload: Annotated[str | None, typer.Option(help="Only this workload.")] = None,
    metric: Annotated[str | None, typer.Option(help="Rank by this metric (default: the workload's primary).")]
    = None,
    score: Annotated[str | None, typer.Option(help="Weighted score over sequential and 4 KiB random results: "
                                                   "weighted-read, weighted-write or weighted-mixed.")] = None,
    top: Annotated[int, typer.Option(help="Rows per table.")] = 20,
    min_runs: Annotated[int, typer.Option(help="Cells with fewer ok runs are not ranked.")] = 3,
    max_noise: Annotated[float, typer.Option(help="Flag (never drop) cells whose CI half-width exceeds this "
                                                  "fraction of the mean.")] = 0.10,
    threshold: Annotated[float, typer.Option(help="Practical threshold: cells within this fraction of the "
                                                  "best are tied with it.")] = 0.05,
    tie_break: Annotated[str, typer.Option(help="How a tied top group is resolved, in order (comma-separated: "
                                                "safety, simplicity).")] = "safety,simplicity",
) -> None:
    """Order cells per tier, group those not significantly different, and decide: one answer, a tie, or
    what it would take to separate the leaders."""
    from iomatrix.report.query import pick_sweep
    from iomatrix.report.rank import rank_sweep, weighted_scores
    from iomatrix.risk import risk_of

    store = _open(db)
    sid = pick_sweep(store, sweep)
    if score is not None:
        rows, factors = weighted_scores(store, sid, score)
        console.print(f"[bold]top performers, {score}[/]: factor(s) "
                      + ", ".join(f"{k}={v:.3g}" for k, v in factors.items()))
        t = Table("#", "cell", "score", "95% CI", box=None)
        for i, r in enumerate(rows[:top], 1):
            ci = "–" if r.score.low is None else f"{fmt(r.score.low)}–{fmt(r.score.high)}"
            t.add_row(str(i), r.label, fmt(r.score.score), ci)
        console.print(t)
        return
    rankings = rank_sweep(store, sid, workload, metric, min_n=min_runs, max_noise=max_noise, threshold=threshold,
                          tie_break=[x.strip() for x in tie_break.split(",") if x.strip()])
    accels: list[str] = []
    for wr in rankings:
        r = wr.ranking
        accels += wr.accel
        better = "higher" if r.higher_is_better else "lower"
        console.print(f"\n[bold]{wr.workload}[/] · {wr.metric} ({better} is better) · tier {wr.tier}")
        t = Table("rank", "group", "cell", "n", "mean", "95% CI", "vs best", "vs bare metal", "power loss",
                  "flags", box=None)
        for row in r.rows[:top]:
            s = row.summary
            ci = "–" if s.ci_low is None else f"{fmt(s.ci_low)}–{fmt(s.ci_high)}"
            vb = _ratio(row.ratio_to_best)
            vm = _ratio(wr.to_baremetal.get(row.name))
            cell = wr.cells[row.name]
            risk = risk_of(cell.axes["cache"], cell.axes["modifier"])
            flags = ", ".join([f.replace("_", " ") for f in row.flags]
                              + (["cold run apart"] if row.name in wr.cold_apart else []))
            t.add_row(str(row.rank) if row.rank else "–", row.group_label or "–", row.name, str(s.n),
                      fmt(s.mean), ci, vb, vm, risk.level if risk else "–", f"[yellow]{flags}[/]" if flags else "")
        console.print(t)
        for cw, mean in wr.ceiling:
            console.print(f"  ceiling (null-co, {cw.axes['bus']}): {fmt(mean)} — the fastest the virtual I/O "
                          "path goes on this host")
        for line in wr.notes():
            console.print(f"  {line}")
        console.print(f"  [dim]{r.test_description}. Same group letter = not significantly different; "
                      "'too noisy' is a flag, never a filter; cells with too few runs are listed, not ranked.[/]")
        if wr.cold_apart:
            console.print("  [dim]'cold run apart': the first run differed significantly from the rest "
                          "(see 'iomatrix results'); the cell is ranked on its warm runs[/]")
        if r.best is None:
            console.print(f"  [yellow]no cell has {min_runs} ok runs yet[/] — run more repetitions "
                          "(repetitions.min, time_budget) or lower --min-runs")
    _warn_tcg(accels)


def _ratio(rc) -> str:  # type: ignore[no-untyped-def]
    if rc is None or rc.ratio is None:
        return "–"
    if rc.low is None:
        return f"{rc.ratio:.2f}×"
    return f"{rc.ratio:.2f}× ({rc.low:.2f}–{rc.high:.2f})"


@app.command()
def compare(
    db_a: Annotated[Path, typer.Argument(help="Before (or host A).")],
    db_b: Annotated[Path, typer.Argument(help="After (or host B).")],
    sweep_a: Annotated[int | None, typer.Option(help="Sweep in DB_A (default: latest).")] = None,
    sweep_b: Annotated[int | None, typer.Option(help="Sweep in DB_B (default: latest).")] = None,
    metric: Annotated[str | None, typer.Option(help="Metric (default: each workload's primary).")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Also list cells that did not change.")] = False,
) -> None:
    """Cells that changed significantly between two sweeps (Welch, Holm-corrected), and by how much."""
    from iomatrix.report.query import pick_sweep
    from iomatrix.report.rank import compare_stores

    a, b = _open(db_a), _open(db_b)
    changes = compare_stores(a, pick_sweep(a, sweep_a), b, pick_sweep(b, sweep_b), metric)
    sig = [c for c in changes if c.significant]
    console.print(f"{len(sig)} of {len(changes)} cell × workload figures changed significantly "
                  "(Welch's t-test, Holm-corrected, α=0.05)")
    t = Table("cell · workload · metric", "A mean", "B mean", "B/A", "95% CI", "p (Holm)", "", box=None)
    for c in sorted(changes, key=lambda c: (not c.significant, c.p_adjusted if c.p_adjusted is not None else 1)):
        if not (c.significant or show_all):
            continue
        ci = "–" if c.ratio.low is None else f"{c.ratio.low:.3f}–{c.ratio.high:.3f}"
        t.add_row(c.key, fmt(c.a.mean), fmt(c.b.mean), f"{c.ratio.ratio:.3f}" if c.ratio.ratio else "–", ci,
                  "–" if c.p_adjusted is None else f"{c.p_adjusted:.3g}", "[bold]changed[/]" if c.significant
                  else "")
    console.print(t)


@app.command()
def monitor(
    run_id: Annotated[int, typer.Option("--run", help="Run id (see 'iomatrix results --format json').")],
    db: DbOpt = DEFAULT_DB,
    fields: Annotated[str, typer.Option(help="Comma-separated field prefixes to show.")]
    = "cpu.,disk.,mem.,proc.",
) -> None:
    """Print a run's host time series (one row per sample)."""
    from iomatrix.report.query import monitor_series

    store = _open(db)
    series = monitor_series(store, run_id)
    prefixes = tuple(x.strip() for x in fields.split(",") if x.strip())
    names = sorted(n for n in series if n.startswith(prefixes))
    if not names:
        console.print(f"run {run_id} has no monitor samples matching {fields}")
        return
    times = sorted({t for n in names for t, _ in series[n]})
    t = Table("t (s)", *names, box=None)
    index = {n: dict(series[n]) for n in names}
    for ts in times:
        t.add_row(f"{ts:.2f}", *(fmt(index[n].get(ts)) for n in names))
    console.print(t)


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


def main() -> None:
    # Standalone mode: the CLI library prints usage errors and --help itself and turns typer.Exit
    # into the exit code; what is left for us is the user's own mistakes (UserError) and Ctrl-C.
    try:
        app()
    except UserError as err:
        err_console.print(f"[red]error:[/] {err.one_line()}")
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
