"""Time each `iomatrix` subcommand's start-up: the wall time of a fresh process given bad input (a
missing plan file, results database or working directory), which it must refuse at once with one
line (exit 2). What a refused command costs is its import time: what it loads before it reads its
input.

    python bench/cli_startup.py [--runs 10] [--cli PATH]

Each figure is the median of `--runs` fresh processes after one discarded warm-up run (so the page
cache holds the interpreter and the package), with the median CPU time (user + system) of a run
beside it: on a loaded host the wall time waits for a core, the CPU time less so (on this 2-core
host at load 4-7, `--help` took 0.19-1.08 s of wall time and 0.19-0.25 s of CPU). Target: every
refused command within 0.1 s of CPU of `iomatrix --help` (the CLI library and the command list,
which every command pays). Where src/iomatrix has no bytecode (an editable install where
PYTHONDONTWRITEBYTECODE is set and scripts/setup.sh's compileall did not run) each process also
compiles what it imports: measure both ways (docs/benchmarks-history.md). Prints numbers; not a
test."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

# bench/ is this script's directory, so its sibling is importable when run as `python bench/...`
from cli_help import add_cli_option, cli_or_refuse, time_runs

# How far past `--help` a refused command may answer: reading its input costs a few ms, what it
# imports to act on it should wait until the input is read.
TARGET_OVER_HELP_S = 0.10


def median_times(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float, int]:
    """(median wall seconds, median CPU seconds, exit status) of `runs` runs of `argv`, after one
    warm-up run."""
    wall, cpu, status = time_runs(argv, runs, env, check=False)
    return statistics.median(wall), statistics.median(cpu), status


def cases(missing: Path) -> list[tuple[str, list[str]]]:
    """(label, arguments): each subcommand refusing a bad input before it does any work."""
    db, plan = str(missing / "results.sqlite"), str(missing / "plan.toml")
    return [
        ("--help", ["--help"]),
        ("plan (missing plan file)", ["plan", plan]),
        ("run (missing plan file)", ["run", plan]),
        ("results (missing database)", ["results", "--db", db]),
        ("rank (missing database)", ["rank", "--db", db]),
        (
            "report (missing database)",
            ["report", "--db", db, "--html", str(missing.parent / "r.html")],
        ),
        ("compare (missing database)", ["compare", db, db]),
        ("recommend (missing database)", ["recommend", "--db", db]),
        ("history (missing database)", ["history", "--db", db]),
        ("monitor (missing database)", ["monitor", "--db", db, "--run", "1"]),
        ("clean (missing workdir)", ["clean", "--workdir", str(missing / "work")]),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    add_cli_option(ap)
    args = ap.parse_args()
    if cli_or_refuse(args.cli) is None:
        return 2
    print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="iomatrix-startup-") as tmp:
        # $HOME and the cache in a directory of this run's own: nothing is written elsewhere
        env = {**os.environ, "HOME": tmp, "XDG_CACHE_HOME": tmp, "COLUMNS": "100"}
        missing = Path(tmp) / "missing"
        help_cpu = None
        for label, argv in cases(missing):
            wall, cpu, status = median_times([args.cli, *argv], args.runs, env)
            help_cpu = cpu if help_cpu is None else help_cpu
            over = cpu - help_cpu
            if label == "--help":
                verdict = ""
            elif status != 2:  # not the refusal this times
                verdict = f"  NOT REFUSED (exit {status})"
            else:
                verdict = "  met" if over <= TARGET_OVER_HELP_S else "  MISSED"
            print(
                f"{label:32s} median {wall:.3f} s wall, {cpu:.3f} s CPU (exit {status}; "
                f"{args.runs} runs; +{max(over, 0):.3f} s CPU over --help){verdict}",
                flush=True,
            )
    print(f"target: each refusal within {TARGET_OVER_HELP_S:.2f} s of CPU of --help's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
