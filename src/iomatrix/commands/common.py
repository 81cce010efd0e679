"""What several commands do the same way: open a results database, load a plan, warn about TCG
numbers. Heavy modules are imported inside the functions, so that importing a command costs
nothing."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from iomatrix.errors import UserError, no_results_database
from iomatrix.ui import err_console

if TYPE_CHECKING:
    from iomatrix.dburl import DatabaseURL
    from iomatrix.plan.model import Plan
    from iomatrix.report.objective import Objective
    from iomatrix.store import Store


def open_store(
    db: Path | DatabaseURL, choose: Callable[[Store], Collection[int] | None] | None = None
) -> Store:
    """An existing results database, for reading (a missing or foreign file is a one-line error).
    Damaged rows are skipped, with one warning line saying how many and naming the first
    (store/integrity.py). `choose`: the sweeps the command reads, read alone from a central store
    (store/pg.py open_central); a file is read whole."""
    if isinstance(db, Path) and not db.exists():
        # The store's own first check (store/schema.py check_file), made before the store and the
        # reports are imported: a mistyped --db is refused at once, not after ~0.3 s of imports.
        raise no_results_database(db)
    from rich.markup import escape

    from iomatrix.dburl import DatabaseURL
    from iomatrix.store import Store

    if isinstance(db, DatabaseURL):
        return open_central_store(db, choose)
    store = Store.open_existing(db, skip_damaged=True)
    if store.damage:
        n = store.damage.count
        err_console.print(
            f"[yellow]warning:[/] results database {escape(str(db))}: {n} damaged "
            f"row{'s' if n > 1 else ''} "
            f"skipped, the figures stand on the rest (first: {escape(str(store.damage.first))})",
            soft_wrap=True,
            markup=True,
            highlight=False,
        )
    return store


def pg_store() -> ModuleType:
    """iomatrix.store.pg, or one line when its driver (psycopg, an extra) is not installed."""
    try:
        from iomatrix.store import pg
    except ImportError:
        raise UserError(
            "reading or publishing a PostgreSQL store needs the psycopg driver",
            hint="install it with scripts/setup.sh --fleet (or pip install 'iomatrix[postgresql]')",
        ) from None
    return pg


def open_central_store(
    url: DatabaseURL, choose: Callable[[Store], Collection[int] | None] | None = None
) -> Store:
    """A fleet's central PostgreSQL store, read into memory (store/pg.py)."""
    return pg_store().open_central(url, choose)


def refuse_system_workdir(workdir: Path, option: str = "--workdir") -> None:
    """A one-line error for a working directory on a kernel filesystem, in the host's own system
    files or at a host root: iomatrix makes (and later deletes) its images, loop files and ledger
    there, so `run` must not write into them and `clean` must not read them as a workdir that is
    "all clean" (the places a dir backing may not be, backing/spec.py)."""
    from iomatrix.backing.spec import HOST_ROOTS, PSEUDO_ROOTS, SYSTEM_ROOTS

    real = os.path.realpath(workdir)
    for root in SYSTEM_ROOTS:
        if real == root or real.startswith(root + "/"):
            what = "a kernel filesystem" if root in PSEUDO_ROOTS else "the host's own system files"
            raise UserError(
                f"{option} {workdir} is under {root}, {what}",
                hint="choose a directory on a real filesystem, e.g. ./iomatrix-work",
            )
    if real in HOST_ROOTS:
        raise UserError(
            f"{option} {workdir} is a host root ({real}), not a working directory",
            hint=f"name a directory of its own, e.g. {real.rstrip('/')}/iomatrix-work",
        )


def check_allowed_devices(paths: list[Path]) -> None:
    """Every --allow-destroy argument checked (safety.py), that module (~0.1 s of imports) loaded
    only when one is given: none is nothing to check."""
    if paths:
        from iomatrix.safety import check_allowed_devices as check

        check(paths)


def load_plan(plan: str) -> tuple[Plan, Path | None]:
    """A built-in plan by name (old names still work, with a note) or a TOML file."""
    from iomatrix.plan.source import PLAN_ALIASES, plan_source

    if plan in PLAN_ALIASES:
        err_console.print(
            f"[yellow]note:[/] the built-in plan '{plan}' is now called '{PLAN_ALIASES[plan]}'",
            soft_wrap=True,
        )
    # a missing file or an unknown name refused before the plan models are imported (~0.3 s)
    plan_source(plan)
    from iomatrix.plan.load import load_plan as load

    return load(plan)


def check_target(target: str) -> None:
    """`--target` checked (report/headline.py), that module (the answer's: ~1 s of imports) loaded
    only for a target the user gave: the default is valid (tests/test_ranking_options.py)."""
    from iomatrix.commands.options import DEFAULT_TARGET

    if target != DEFAULT_TARGET:
        from iomatrix.report.headline import check_target as check

        check(target)


def parse_objective(text: str | None) -> Objective | None:
    """`--objective` checked (report/objective.py), its module imported only when one is given:
    without it, a command reaches its --db (refused at once when missing) importing no report."""
    if text is None:
        return None
    from iomatrix.report.objective import parse_objective as parse

    return parse(text)


def warn_tcg(accels: list[str], *, whole: bool = False) -> None:
    """Once, if anything shown ran under TCG: its numbers are not a KVM host's. `whole`: a long
    job's line (`run`'s end), one line where stderr is not a terminal (a log keeps it whole, as
    ui.print_line does); a report's warning fits the report's width like the rest of it."""
    if any("tcg" in a for a in accels):
        from iomatrix.guest.accel import TCG_WARNING

        err_console.print(
            f"[yellow]warning:[/] {TCG_WARNING}", soft_wrap=whole and not err_console.is_terminal
        )


def few_runs_hint(answer: str, db: Path, most_runs: int) -> str | None:
    """The line after an answer that ranked nothing because no cell reached the default --min-runs:
    how many runs the plan allowed and the two ways out (more repetitions, or reading the sweep with
    a lower --min-runs)."""
    from iomatrix.commands.options import DEFAULT_MIN_RUNS

    if "enough runs" not in answer or most_runs >= DEFAULT_MIN_RUNS:
        return None
    return (
        f"hint: ranking needs {DEFAULT_MIN_RUNS} ok runs per cell and this plan allows "
        f"at most {most_runs}: "
        f"raise repetitions.min and repetitions.max, or rank what you have with "
        f"'iomatrix rank --db {db} --min-runs {max(most_runs, 2)}' (fewer runs: a weaker answer)"
    )


def check_guest_image(p: Plan) -> None:
    """The plan's `[guest] image` checked as `run` checks it before anything is built or booted
    (guest/real_image.py: a local, readable, bootable qcow2 or raw file); one line when it is
    not."""
    from iomatrix.guest.real_image import check_plan_image

    check_plan_image(p.tier, p.setting("guest_image"))
