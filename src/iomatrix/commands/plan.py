"""`iomatrix plan`: a plan expanded into matrix cells, the pruned ones with their reasons, the
estimated duration; `--explain` lists every cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from iomatrix.commands.common import check_allowed_devices, check_guest_image, load_plan
from iomatrix.commands.options import RoleOpt
from iomatrix.commands.run import plan_with_roles
from iomatrix.ui import console

if TYPE_CHECKING:
    from iomatrix.matrix import Expansion, Pruned
    from iomatrix.plan.model import Plan

NAME = "plan"
# What a prefill of a region beyond the page cache is costed at: a SATA SSD's sequential writes (a
# figure to size the cost by, not a measurement of this host's disk).
PREFILL_BYTES_PER_S = 500e6


def policy_text(p: Plan) -> str:
    """What decides how many runs a unit gets, in a few words."""
    if p.repetition_policy == "racing":
        text = "racing: units stop once the data settles them, from the minimum on"
    else:
        text = f"until the 95% CI is within ±{p.ci_target * 100:g}% of the mean"
    for tier, n in p.repetitions.precision_max.items():
        who = (
            f"{tier} units"
            if p.repetitions.precision_for == "all"
            else f"the {tier} tier's contenders (what the race did not eliminate, and what "
            "they are quoted against)"
        )
        text += f"; then {who} run on toward ±{p.ci_target * 100:g}%, up to {n} runs"
    return text


def plan_cmd(
    plan: Annotated[str, typer.Argument(help="Built-in plan name or TOML file.")] = "quick",
    explain: Annotated[
        bool, typer.Option("--explain", help="List every cell and every pruned cell.")
    ] = False,
    allow_destroy: Annotated[
        list[Path], typer.Option("--allow-destroy", help="Block device you hand over.")
    ] = [],  # noqa: B006
    role: RoleOpt = [],  # noqa: B006
) -> None:
    """Expand a plan into matrix cells; show pruned cells with their reasons and an estimated
    duration."""
    # as `run` checks them: a missing or wrong device is a mistake here too
    check_allowed_devices(allow_destroy)
    p, base = load_plan(plan)
    # What expands and estimates the plan, once it is read: a mistyped plan is refused at once.
    from iomatrix.estimate import estimate_sweep
    from iomatrix.matrix import estimate_seconds
    from iomatrix.runner import plan_expansion
    from iomatrix.safety import resolve_allowed

    p = plan_with_roles(p, role, plan)
    # a guest image that cannot serve is said here, not after the estimate of a sweep that would
    # fail (or wait for a boot that never comes)
    check_guest_image(p)
    allowed = resolve_allowed(allow_destroy)
    exp = plan_expansion(p, base, allowed)
    from iomatrix.guest.pace import recorded_pace

    estimate = estimate_sweep(p, exp, recorded_pace())
    # The description is the plan author's text, not markup: a '[bold]' or '[/]' in it is shown as
    # written.
    console.print(f"[bold]{escape(p.name)}[/]: {escape(p.description)}")
    console.print(
        f"{len(exp.cells)} cells × workloads = {len(exp.units)} units; "
        f"repetitions {p.repetitions.min}–{p.repetitions.max} ({policy_text(p)}); "
        f"{len(exp.pruned)} pruned"
    )
    for tier, axes in exp.collapsed.items():
        console.print(
            f"[dim]tier {tier}: axes {', '.join(axes)} do not apply and are collapsed "
            "(shown as -)[/]"
        )
    if p.tier_tables:
        for line in tier_table_lines(p, exp):
            console.print(line, highlight=False)
    for line in role_lines(p):
        console.print(escape(line), highlight=False)
    # the one estimate, as `plans` and the README give it (estimate.py)
    console.print(escape(estimate.sentence(p.time_budget)), highlight=False)
    unbatched, _ = estimate_seconds(p, exp, batching=False)
    if unbatched > estimate.minimum_s:
        rounds = (
            "rounds per boot chosen as the sweep goes"
            if p.adaptive_rounds_per_boot
            else f"{p.start_rounds_per_boot} round{'s' if p.start_rounds_per_boot > 1 else ''} "
            "per boot"
        )
        console.print(
            f"[dim]guest runs of one cell share a boot ({rounds}); one boot per run would take "
            f"{unbatched / 60:.1f} min with {p.repetitions.min} runs each[/]"
        )
    for note in exp.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    from iomatrix.metadata import mem_bytes

    line = page_cache_line(p, exp, mem_bytes(), plan)
    if line:
        console.print(escape(line), highlight=False)
    for b in p.backing:  # where a contention run's clients go, before anything is reached over SSH
        if hosts := getattr(b, "client_host", ()):
            console.print(
                f"backing {escape(b.label())}: client 1, 2, … run on "
                f"{escape(', '.join(h.label for h in hosts))} "
                "(over SSH; the block layer's runs)",
                highlight=False,
            )
    for line in serving_lines(p, exp, allowed):
        console.print(line, highlight=False)
    from iomatrix.backing.space import warnings
    from iomatrix.commands.options import DEFAULT_DB, DEFAULT_WORKDIR

    # as `run` would refuse it with its defaults
    for line in warnings(p, exp, DEFAULT_WORKDIR, DEFAULT_DB):
        console.print(f"[yellow]warning:[/] {escape(line)}")
    if explain:
        print_explain(exp, per_tier=bool(p.tier_tables))


def page_cache_line(p: Plan, exp: Expansion, ram_bytes: int | None, source: str) -> str | None:
    """What the plan's region measures on this host (issue 49: honest working sets): when a cache
    mode that keeps the host page cache runs on a region the page cache holds
    (report/shape_findings.py: PAGE_CACHE_SHARE of RAM), that it measures memory there, the key that
    measures the disk instead (size, twice the RAM: a reading run's prefill writes its whole region
    first, so nothing of it is cached from before) and what that costs; None when the plan's region
    does not fit or no such cache mode runs."""
    from importlib import resources

    from iomatrix.domain import NA
    from iomatrix.domain.axes import size_words
    from iomatrix.guest.fs_shape import fs_shape
    from iomatrix.report.shape_findings import PAGE_CACHE_SHARE

    specs = p.backing_by_label()
    cells = [c for c in exp.cells if c["cache"] != NA and _page_cached(c, specs)]
    fs_part = _fs_jobs_page_cache(exp, specs)
    if not ram_bytes or not cells or p.size_bytes > ram_bytes * PAGE_CACHE_SHARE:
        return f"page cache: {fs_part}" if fs_part and ram_bytes else None
    if fs_part and not any(fs_shape(u.workload.kind) is None for u in exp.units):
        return f"page cache: {fs_part}"  # only the guest's filesystem jobs: size changes nothing
    cached = sorted({c["cache"] for c in cells})
    beyond = -(-2 * ram_bytes // (1 << 30)) << 30  # twice the RAM, in whole GiB
    big = f"{beyond >> 30}G"
    reading = _reading_units(exp, specs)
    where = (
        f"a copy of {resources.files('iomatrix.plans') / (p.name + '.toml')}"
        if source == p.name
        else "the plan file"
    )
    cost = _disk_cost(p, reading, beyond)
    return (
        (f"page cache: {fs_part} For the other workloads: " if fs_part else "page cache: ")
        + f"size = {p.size}, the region each run works on, fits in this host's "
        "page cache "
        f"({size_words(ram_bytes)} of RAM), so {'/'.join(f'cache={c}' for c in cached)} "
        "measures memory there, "
        f'not the disk. To measure the disk, set size = "{big}" and image_size = "{big}" '
        "(twice the RAM) in "
        f"{where}{cost}; writes leave memory only past the kernel's dirty limit "
        "(vm.dirty_ratio), so they also "
        f"need runs longer than runtime = {p.runtime} s."
    )


def _page_cached(c: Mapping[str, str], specs: Mapping[str, Any]) -> bool:
    """Whether the cell's cache mode keeps the host page cache on its backing (a kernel client)."""
    from iomatrix.domain import CACHE, CacheMode
    from iomatrix.report.shape_findings import kernel_client

    spec = specs.get(c.get("backing", ""))
    return (
        c["cache"] in CacheMode._value2member_map_
        and not CACHE[CacheMode(c["cache"])].direct
        and (spec is None or kernel_client(spec.type, c))
    )


def _reading_units(exp: Expansion, specs: Mapping[str, Any]) -> int:
    """How many of the plan's fio units read under a mode that keeps the host page cache: each
    would write a region beyond the RAM first to measure the disk."""
    from iomatrix.domain import NA
    from iomatrix.fio.shape import shape_of_workload

    return sum(
        1
        for u in exp.units
        if u.cell["cache"] != NA
        and _page_cached(dict(u.cell), specs)
        and u.workload.kind == "fio"
        and shape_of_workload(u.workload).read_share > 0
    )


def _disk_cost(p: Plan, reading: int, beyond: int) -> str:
    """What measuring the disk costs the plan (page_cache_line): each of its `reading` units' runs
    writes a region of `beyond` bytes first; "" when none reads."""
    from iomatrix.domain.axes import size_words

    if not reading:
        return ""
    written = reading * p.repetitions.min * beyond
    minutes = written / PREFILL_BYTES_PER_S / 60
    fits = "within" if minutes * 60 <= p.time_budget_s else "beyond"
    return (
        f": its {reading} reading units × {p.repetitions.min} runs would each write those "
        f"{size_words(beyond)} first ({size_words(written)} at the least, about "
        f"{minutes:.0f} min at 500 MB/s: "
        f"{fits} its {p.time_budget} budget), with {size_words(beyond)} free per image"
    )


def _fs_jobs_page_cache(exp: Expansion, specs: dict) -> str:
    """What the host page cache serves of the guest's filesystem jobs (guest/fs_shape.py) under the
    plan's cache modes, and that the plan's size does not change it (their tree is the built-in
    guest's): "" when the plan runs none of them under a mode the page cache serves."""
    from iomatrix.domain.axes import size_words
    from iomatrix.guest.fs_shape import fs_shape
    from iomatrix.report.query import CellWorkload
    from iomatrix.report.shape_findings import cache_modes_text, memory_served

    served: dict[str, list[str]] = {}
    sets: dict[str, int] = {}
    for u in exp.units:
        shape = fs_shape(u.workload.kind)
        if shape is None:
            continue
        spec = specs.get(u.cell.get("backing", ""))
        backing = {"backing_type": spec.type if spec is not None else "dir"}
        cell = CellWorkload(0, "", dict(u.cell), backing, u.workload.name, [])
        sets[u.workload.name] = shape.working_set or 0
        what = memory_served(cell, shape)
        if what:  # each mode said once (cache_modes_text)
            served.setdefault(f"{u.workload.name}'s {what}", []).append(u.cell["cache"])
    if not served:
        return ""
    said = "; ".join(f"{w} under {cache_modes_text(m)}" for w, m in served.items())
    works = " and ".join(f"{w} ({size_words(b)})" for w, b in sets.items())
    return (
        f"the host page cache serves {said}, so those figures are memory's. {works} work on the "
        "built-in guest's tree whatever the plan's size: cache=none measures their disk."
    )


def role_lines(p: Plan) -> list[str]:
    """One line per role of the plan (docs/roles.md): its jobs (the workloads that run them), what
    decides it (the first figure decides) and its margin."""
    from iomatrix.roles import plan_roles

    out = []
    for r in plan_roles(p.roles, p.role, p.margin):
        jobs = ", ".join(w if w == f"{r.name}:{j}" else f"{j} = {w}" for j, w in r.jobs)
        first, *vetoes = (f"{f.says} ({f.key})" for f in r.figures)
        # the others veto (report/roles.py): "then" would read as a tie-break order
        veto = (
            f"; not chosen if worse by more than the margin on {' or '.join(vetoes)}"
            if vetoes
            else ""
        )
        out.append(f"role {r.name}: jobs {jobs}; decided by {first}{veto}; margin {r.margin:.0%}")
    return out


def serving_lines(p: Plan, exp: Expansion, allowed: set[Path]) -> list[str]:
    """Whether each network backing a cell uses can serve, as `run` checks it before its sweep: an
    existing iSCSI LUN is asked here (a login and a READ CAPACITY, read-only); an existing NFS
    server or Ceph cluster and client hosts (reached over SSH) are not reached by `plan`, and say
    so."""
    used = {c.backing for c in exp.cells if not c.is_null_ceiling}
    lines = []
    for label, spec in p.backing_by_label().items():
        if label not in used or spec.kind != "network" or spec.availability(allowed) is not None:
            continue
        if spec.plan_checks_server and (why := spec.serving_problem(allowed)) is not None:
            lines.append(
                f"[yellow]warning:[/] backing {escape(label)} cannot serve: "
                f"{escape(why)} ('run' refuses "
                "it)"
            )
        elif not spec.plan_checks_server and not getattr(spec, "lab_started", True):
            lines.append(
                f"backing {escape(label)}: whether its server answers is checked only when run"
            )
        if getattr(spec, "client_host", ()):
            lines.append(
                f"backing {escape(label)}: whether its client hosts answer over SSH is "
                "checked only when "
                "run"
            )
    return lines


def tier_table_lines(p: Plan, exp: Expansion) -> list[str]:
    """A plan with tier tables: what each tier sweeps of its own, and each tier's share of the
    cells, units and estimated minutes (with the minimum runs each), so the cost of a tier's own
    axes shows where it is paid."""
    from iomatrix.matrix import Expansion, estimate_seconds

    lines = []
    for tier in p.tier:
        cells = [c for c in exp.cells if c["tier"] == tier]
        units = [u for u in exp.units if u.cell["tier"] == tier]
        low, _ = estimate_seconds(p, Expansion(cells, units))
        own = "; ".join(
            f"{k} {'/'.join(v)}" if k != "workloads" else f"workloads {', '.join(v)}"
            for k, v in p.tier_tables.get(tier, {}).items()
        )
        for workload, values in p.workload_tables.get(tier, {}).items():
            on = ", ".join(f"{k} {'/'.join(v)}" for k, v in values.items())
            own += ("; " if own else "") + f"{workload} on {on}"
        lines.append(
            f"tier {tier}: {len(cells)} cells, {len(units)} units ({low / 60:.1f} min at "
            f"{p.repetitions.min} runs each)"
            + (f"; its own {own}" if own else ": the plan's values")
        )
    return lines


def print_explain(exp: Expansion, per_tier: bool = False) -> None:
    """`--explain`: every cell with its workloads, then the pruned ones, a table per reason.
    `per_tier` (a plan with tier tables): one table per tier, with the columns of the axes that tier
    sweeps."""
    groups = (
        [
            (f"cells: {t}", [c for c in exp.cells if c["tier"] == t])
            for t in dict.fromkeys(c["tier"] for c in exp.cells)
        ]
        if per_tier
        else [("cells", exp.cells)]
    )
    for title, cells in groups:
        rows = [(c, [u.workload.name for u in exp.units if u.cell == c]) for c in cells]
        _print_cells(title, rows, _shown_axes(cells, per_tier))
    # Pruned cells are named by their settings, as the cells above are, not by their store key (a
    # 60-character word a table could only cut mid-name); one table per reason, the reason said once
    # above it: the full guest matrix prunes 68 cells for 6 reasons.
    by_reason: dict[str, list[Pruned]] = {}
    for pr in exp.pruned:
        by_reason.setdefault(pr.reason, []).append(pr)
    for reason, pruned in by_reason.items():
        console.print(f"[bold]pruned[/] ({len(pruned)}): {escape(reason)}", highlight=False)
        rows = [(pr.cell, [pr.workload] if pr.workload else []) for pr in pruned]
        _print_cells("", rows, _shown_axes([pr.cell for pr in pruned], per_tier=False))


def _shown_axes(cells: Sequence[Mapping[str, str]], per_tier: bool) -> list[Any]:
    """The first release's axes always (a tier's own table: those that apply to it, not the tier
    itself); a later axis where some cell sets it away from its default."""
    from iomatrix.domain import NA, axes

    return [
        a
        for a in axes.axes()
        if not (per_tier and a.name == "tier")
        and (
            (a.always_named and not (per_tier and all(c[a.name] == NA for c in cells)))
            or any(c[a.name] not in (NA, a.default) for c in cells)
        )
    ]


def _print_cells(
    title: str, rows: Sequence[tuple[Mapping[str, str], list[str]]], shown: list[Any]
) -> None:
    """One `--explain` table of (cell, its workloads) rows. An axis every cell of the table sets
    alike tells no cell apart: said once in the title line ("all tier=guest format=qed …"), so the
    columns that do fit the terminal whole. Nothing is cut with '…': a value too long folds onto
    the next line, and each workload has a line of its own (no workloads column where no row has
    one: a pruned cell's)."""
    from rich.table import Table

    cells = [c for c, _ in rows]
    same = [a for a in shown if len(cells) > 1 and len({c[a.name] for c in cells}) == 1]
    varying = [a for a in shown if a not in same]
    # (a plan every cell of which is pruned has an empty table of cells: its title and headings)
    if line := _title_line(title, cells[0] if cells else {}, same):
        console.print(line, highlight=False)
    with_workloads = any(wls for _, wls in rows)
    t = Table(box=None)
    for heading in ("#", *(a.heading for a in varying)):
        t.add_column(heading, overflow="fold")
    if with_workloads:
        t.add_column("workloads", overflow="fold", ratio=1)
    for i, (c, wls) in enumerate(rows, 1):
        wl_cell = ["\n".join(wls)] if with_workloads else []
        t.add_row(str(i), *(c[a.name] for a in varying), *wl_cell)
    console.print(t)


def _title_line(title: str, first: Mapping[str, str], same: list[Any]) -> str:
    """A table's title and what all its cells share (markup, the values escaped): "cells: all
    tier=guest modifier=none", or "  all …" under a pruned reason; an axis that applies to none of
    them ("-") is not worth a word."""
    from iomatrix.domain import NA

    alike = " ".join(f"{a.name}={first[a.name]}" for a in same if first[a.name] != NA)
    head = f"[bold]{escape(title)}[/]" if title else ""
    if not alike:
        return head
    return head + (": " if title else "  ") + escape(f"all {alike}")


def register(app: typer.Typer) -> None:
    app.command(NAME)(plan_cmd)
