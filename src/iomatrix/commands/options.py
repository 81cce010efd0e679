"""Options shared by several commands: one spelling, one help text and one default each.

Each is a typer `Annotated` alias; a command declares `db: DbOpt = DEFAULT_DB`. Options that only
one command has, or whose help differs per command (e.g. `--metric`), stay in that command's module.
rank, recommend and report take theirs from one option base built on these
(`iomatrix.commands.answer_options`)."""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from iomatrix.commands.thresholds import parse_fraction, parse_margin
from iomatrix.dburl import parse_db
from iomatrix.errors import UserError
from iomatrix.report.formats import OutputFormat

DEFAULT_DB = Path("iomatrix.sqlite")
DEFAULT_WORKDIR = Path("iomatrix-work")

DbOpt = Annotated[Path, typer.Option("--db", help="Results database (SQLite file).")]
# The read commands also take a fleet's central store (store/pg.py): the value stays a URL (a Path
# folds '//'), and prints without its password wherever a message names it (dburl.py).
ReadDbOpt = Annotated[
    Path,
    typer.Option(
        "--db",
        parser=parse_db,
        metavar="PATH|URL",
        help="Results database: an SQLite file, or a central store's postgresql:// URL "
        "(docs/fleet.md).",
    ),
]
SweepOpt = Annotated[int | None, typer.Option("--sweep", help="Sweep id (default: the latest).")]
# The fleet answers of a merged database (docs/fleet.md): per-host answers side by side and one per
# host group.
ByHostOpt = Annotated[
    bool,
    typer.Option(
        "--by-host",
        help="Answer for the fleet: every host's latest sweep of the plan side by side, and one "
        "configuration per group (the default when the database holds several hosts' sweeps and no "
        "--sweep is given).",
    ),
]
FleetGroupOpt = Annotated[
    str | None,
    typer.Option(
        "--group",
        help="The fleet answer for the hosts whose sweeps were recorded with this group (run "
        "--group).",
    ),
]
WorkloadOpt = Annotated[str | None, typer.Option(help="Only this workload.")]
ObjectiveOpt = Annotated[
    str | None,
    typer.Option(
        help="What to optimise: throughput, p99-latency or cpu-per-io (default: each "
        "workload's primary metric, "
        "a throughput for the speed presets).",
        metavar="OBJECTIVE",  # the help names the three: a narrow metavar column leaves room
    ),
]
KernelOpt = Annotated[
    Path | None, typer.Option(help="Guest kernel image to use instead of Debian's.")
]
WorkdirOpt = Annotated[
    Path, typer.Option(help="Working directory: images, fio files, loop files go here.")
]
CrashedWorkdirOpt = Annotated[Path, typer.Option(help="Working directory of the crashed run.")]

# Options of every command that ranks (rank, recommend, report): one spelling, one help text, one
# default.
MinRunsOpt = Annotated[
    int, typer.Option(help="Cells with fewer ok runs are listed but not ranked.")
]
MaxNoiseOpt = Annotated[
    float,
    typer.Option(
        help="Flag (never drop) cells whose CI half-width exceeds this fraction of the mean."
    ),
]
ThresholdOpt = Annotated[
    float,
    typer.Option(
        help="Practical threshold: cells within this much of the best are "
        "tied with it (5% or 0.05).",
        metavar="PCT%|FRACTION",
        parser=lambda v: parse_fraction(v, "--threshold"),
    ),
]
MarginOpt = Annotated[
    float | None,
    typer.Option(
        help="Margin of practical equivalence: a configuration shown within it of the best "
        "(TOST) is as good, and the "
        "answer keeps what you run (else the default). Every workload's and built-in "
        "role's (a role table's own "
        "margin stays its); default: the plan's key margin, else each role's own, 5%.",
        metavar="FRACTION|PCT%",
        parser=parse_margin,
    ),
]
TieBreakOpt = Annotated[
    str,
    typer.Option(
        help="How a tied top group is resolved, in order (comma-separated: "
        "safety, keeper (what you run, else QEMU's default), simplicity, performance, name).",
        # shown with spaces, so that a narrow help column wraps it instead of cutting it
        show_default="safety, keeper, simplicity",
    ),
]
DEFAULT_MIN_RUNS = 3
DEFAULT_MAX_NOISE = 0.10
DEFAULT_THRESHOLD = 0.05
DEFAULT_TIE_BREAK = "safety,keeper,simplicity"

# Options of the commands that answer "what should I use" (recommend, report): what the user runs
# today, what the answer must guarantee, and whose snippet it shows. (`run --current` is another
# option: it measures the configuration as a cell, and says so.)
CurrentOpt = Annotated[
    str | None,
    typer.Option(
        help="What you run today: a libvirt domain XML file, Proxmox 'qm config VMID' output "
        "(a file), a QEMU "
        "-drive/-blockdev string, or axes such as 'cache=none,aio=threads'."
    ),
]
RequireOpt = Annotated[
    list[str],
    typer.Option(
        "--require",
        help="power-loss-safe, every-write-durable, migratable or snapshots (repeatable).",
    ),
]
TargetOpt = Annotated[
    str,
    typer.Option(
        help="The tool whose snippet the answer shows: libvirt, proxmox, qemu, virt-install "
        "or nova; for network "
        "storage also its own (ceph, rbd; tgt, targetcli, san)."
    ),
]
DEFAULT_TARGET = "libvirt"


def check_ranking_options(min_runs: int, max_noise: float) -> None:
    """The ranking options' ranges, checked once for rank, recommend and report (the threshold and
    tie-break are checked where they are parsed, in stats.decision)."""
    if min_runs < 2:
        raise UserError(
            f"--min-runs {min_runs} is out of range",
            hint="use 2 or more: a confidence interval needs at least 2 runs",
        )
    if not (math.isfinite(max_noise) and max_noise > 0):
        raise UserError(
            f"--max-noise {max_noise} is out of range",
            hint="use a fraction of the mean above 0, e.g. 0.10 for ±10%",
        )


def ranking_arguments(
    min_runs: int, max_noise: float, threshold: float, tie_break: str
) -> dict[str, Any]:
    """The ranking options of rank, recommend and report, checked, as the keyword arguments the
    rankings take (`min_n`, `max_noise`, `threshold`, `tie_break`). Every range is checked here,
    before the database is opened or a report's charts are imported (seconds), so each command
    refuses the same mistake with the same line."""
    check_ranking_options(min_runs, max_noise)
    keys = tie_break_keys(tie_break)
    if threshold != DEFAULT_THRESHOLD or tie_break != DEFAULT_TIE_BREAK:
        # The defaults pass these checks (tests/test_ranking_options.py); only a value the user gave
        # needs the decision rule's module (~0.15 s of imports), which a command refusing a missing
        # --db at once should not load.
        from iomatrix.stats.decision import check_threshold, check_tie_break

        check_tie_break(keys)
        threshold = check_threshold(threshold)
    return {
        "min_n": min_runs,
        "max_noise": max_noise,
        "threshold": float(threshold),
        "tie_break": keys,
    }


def tie_break_keys(text: str) -> list[str]:
    """`--tie-break safety, simplicity` → ['safety', 'simplicity']; an empty list is refused (it
    would silently leave a tie to the order of the cells' names)."""
    keys = [x.strip() for x in text.split(",") if x.strip()]
    if not keys:
        raise UserError(
            f"--tie-break {text!r} names no tie-break key",
            hint="give keys in order, e.g. safety,keeper,simplicity (keys: safety, keeper, "
            "simplicity, performance, name)",
        )
    return keys


def _spoken(formats: tuple[OutputFormat, ...]) -> str:
    names = [f.value for f in formats]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def check_format(value: OutputFormat, accepted: tuple[OutputFormat, ...]) -> OutputFormat:
    """`value` if the command renders it; else a one-line error naming the formats it does
    render."""
    if value not in accepted:
        raise UserError(
            f"--format {value.value} is not available here", hint=f"use {_spoken(accepted)}"
        )
    return value


@functools.cache
def format_option(*accepted: OutputFormat) -> Any:
    """`--format` of a command that renders the formats `accepted`: its help names them, and any
    other member of `OutputFormat` is refused with a one-line error (`check_format`). Commands that
    render the same formats get the one same option (cached)."""
    # typer names every member of the type as the choices; a subset names only its own.
    metavar = (
        None
        if set(accepted) == set(OutputFormat)
        else "<" + "|".join(f.value for f in accepted) + ">"
    )
    return Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            help=f"{_spoken(accepted)}.",
            metavar=metavar,
            callback=lambda value: check_format(value, accepted),
        ),
    ]


# Roles (docs/roles.md): what the VM runs, answered first, one block per role; `run` and `plan`
# share the flag.
RoleOpt = Annotated[
    list[str],
    typer.Option(
        "--role",
        help="A role to answer for (repeatable): database, file-server, vdi, web, backup, log "
        "(docs/roles.md). "
        "Its jobs run as workloads beside the plan's; the answer gives one block per role, first.",
    ),
]

# The answer is power-loss-safe unless the user opts in (issue 38); recommend, report and run share
# the flag.
AllowDataLossOpt = Annotated[
    bool,
    typer.Option(
        "--allow-data-loss",
        help="Let the answer be a configuration that drops guest flushes (cache=unsafe, "
        "eatmydata): faster, but the guest's data may be lost on a host crash or power loss. "
        "Default: only power-loss-safe configurations are chosen; a faster unsafe one is "
        "named in one line.",
    ),
]


def check_kernel_option(kernel: Path | None) -> None:
    """A one-line error for a `--kernel` that names nothing a guest could boot (checked whatever the
    plan's tiers: a mistyped path is a mistake even when no guest tier runs)."""
    if kernel is None:
        return
    real = Path(os.path.realpath(kernel.expanduser()))
    if any(real == r or r in real.parents for r in (Path("/proc"), Path("/sys"), Path("/dev"))):
        raise UserError(
            f"--kernel {kernel} is a kernel interface, not a kernel image",
            hint="pass a vmlinuz file, a .deb or an unpacked kernel package directory",
        )
    if not real.exists():
        raise UserError(
            f"--kernel {kernel} does not exist",
            hint="pass a vmlinuz file, a .deb or an unpacked kernel package directory",
        )
    if real.is_dir() and not any(real.glob("boot/vmlinuz-*")):
        raise UserError(
            f"--kernel {kernel}: no boot/vmlinuz-* in it",
            hint="pass an unpacked linux-image package",
        )
