"""Time `iomatrix --help` (the CLI's start-up: every command module is imported to list it), and
what reading the tiers costs on top (`iomatrix plan quick`'s import of the tier registry and its
declarations).

    python bench/cli_help.py [--runs 15] [--cli PATH]

Each figure is the median wall time of `--runs` fresh processes (after one discarded warm-up run, so
the page cache holds the interpreter and the package), with the median CPU time of a run beside it
(steadier when other work shares the cores). Target: `--help` no slower than before the tier
declarations were split from their implementations (0.15-0.18 s on the development VM). Prints
numbers; not a test."""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_HELP_S = 0.18


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_runs(
    argv: list[str], runs: int, env: dict[str, str] | None = None, *, check: bool = True
) -> tuple[list[float], list[float], int]:
    """(wall seconds, CPU seconds (user + system)) of each of `runs` fresh processes of `argv`,
    after one discarded warm-up run (so the page cache holds the interpreter and the package), and
    the warm-up's exit status. `check`: a non-zero exit is an error (bench/cli_startup.py times
    refusals, which exit 2, so it passes False)."""
    status = subprocess.run(argv, capture_output=True, env=env, check=check).returncode
    wall, cpu = [], []
    for _ in range(runs):
        start, cpu0 = time.perf_counter(), _children_cpu()
        subprocess.run(argv, capture_output=True, env=env, check=check)
        wall.append(time.perf_counter() - start)
        cpu.append(_children_cpu() - cpu0)
    return wall, cpu, status


def median_wall(argv: list[str], runs: int) -> tuple[float, float, float, float]:
    """(median, min, max) wall seconds of `runs` runs of `argv`, and the median CPU seconds of a
    run: on a loaded host the wall time waits for a core, the CPU time less so."""
    times, cpu, _ = time_runs(argv, runs)
    return statistics.median(times), min(times), max(times), statistics.median(cpu)


def add_cli_option(ap: argparse.ArgumentParser) -> None:
    """`--cli PATH`: the `iomatrix` executable to time, by default the one beside this Python's."""
    default_cli = Path(sys.executable).parent / "iomatrix"
    ap.add_argument(
        "--cli", default=str(default_cli) if default_cli.exists() else shutil.which("iomatrix")
    )


def cli_or_refuse(cli: str | None) -> str | None:
    """The executable `--cli` named, or None after one line saying what to pass."""
    if not cli:
        print("no iomatrix executable found: pass --cli PATH", file=sys.stderr)
    return cli or None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    add_cli_option(ap)
    args = ap.parse_args()
    if cli_or_refuse(args.cli) is None:
        return 2
    rows = [
        ("iomatrix --help", [args.cli, "--help"]),
        (
            "python: import the tier registry + declarations",
            [sys.executable, "-c", "from iomatrix import tiers; tiers.tier_names()"],
        ),
        ("python: bare interpreter start", [sys.executable, "-c", "pass"]),
    ]
    for label, argv in rows:
        med, lo, hi, cpu = median_wall(argv, args.runs)
        print(
            f"{label:50s} median {med:.3f} s (min {lo:.3f}, max {hi:.3f}; CPU {cpu:.3f} "
            f"s; {args.runs} runs)"
        )
        if label == "iomatrix --help":
            verdict = "met" if med <= TARGET_HELP_S else "MISSED"
            print(
                f"{'':50s} target ≤ {TARGET_HELP_S:.2f} s (wall, quiet host): {verdict}", flush=True
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
