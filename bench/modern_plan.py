"""The `modern` plan end to end (issue 24's target; not a test): `iomatrix run modern`, timed, then
how its headline answers each workload.

    python bench/modern_plan.py [--db PATH]

Runs `iomatrix run modern --db PATH` with this checkout's sources (a fresh database in a temporary
directory by default; the directory, with the run's log, is left for reading), its output captured
line by line with a timestamp; then `iomatrix recommend --format json` on that database. Printed:
the wall time against the plan's time budget, the load average before and after, the runs stored per
tier (analysed, and disturbed runs that were run again), what `plan modern` estimated beforehand,
and per workload the headline's status ("answer", or "tied" with the tie-break's pick; "provisional"
— the race left contenders unresolved — is not an answer). Exit status 0 when the sweep ended within
its budget (one minute of grace for the report) and every workload was answered, else 1. Guests run
under TCG on a host without usable KVM: their figures swing 30–50% run to run, and the block layer
is then the headline's basis."""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quickstart import ANSWERED, headline_statuses

HERE = Path(__file__).resolve().parent.parent
IOMATRIX = [sys.executable, "-c", "import sys; from iomatrix.cli import main; sys.exit(main())"]
GRACE_S = 60.0  # the end-of-run report and answer, after the budget's last run


def iomatrix(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*IOMATRIX, *args], env=env, capture_output=True, text=True)


def run_counts(db: Path) -> dict[str, tuple[int, int]]:
    """tier → (runs analysed, disturbed runs that were run again)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT c.tier, SUM(r.retry_of IS NULL), SUM(r.retry_of IS NOT NULL) FROM runs r "
            "JOIN cells c ON c.id = r.cell_id GROUP BY c.tier"
        ).fetchall()
    finally:
        con.close()
    return {tier: (int(a or 0), int(b or 0)) for tier, a, b in rows}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--db", type=Path, help="database to write (default: a fresh one in a temporary directory)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("modern bench: run as root (the block layer and guests need it)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="iomatrix-modern-"))
    db = args.db or tmp / "modern.sqlite"
    env = {**os.environ, "PYTHONPATH": str(HERE / "src"), "COLUMNS": "100"}
    plan = iomatrix("plan", "modern", env=env)
    estimate = re.search(r"estimated duration: .*", plan.stdout.replace("\n", " "))
    budget_s = 20 * 60.0
    m = re.search(r"time budget (\d+)m", plan.stdout)
    if m:
        budget_s = float(m.group(1)) * 60
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(
        [*IOMATRIX, "run", "modern", "--db", str(db)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    status = proc.wait()
    wall = time.monotonic() - t0
    load_after = os.getloadavg()
    (tmp / "run.log").write_text("".join(f"{t:7.1f} {text}\n" for t, text in lines))
    rec = iomatrix("recommend", "--db", str(db), "--format", "json", env=env)
    statuses = headline_statuses(rec.stdout) if rec.returncode == 0 else {}
    answered = bool(statuses) and all(s in ANSWERED for s in statuses.values())
    in_budget = status == 0 and wall <= budget_s + GRACE_S
    print(f"started {started}; database {db}; log {tmp / 'run.log'}")
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}"
    )
    print(f"plan's {estimate.group(0) if estimate else 'estimate: not found'}")
    print(
        f"wall: {wall / 60:.1f} min (budget {budget_s / 60:.0f} min: "
        f"{'within' if in_budget else 'OVER'}), "
        f"exit status {status}"
    )
    for tier, (ok, retried) in sorted(run_counts(db).items()):
        print(f"  {tier}: {ok} runs analysed, {retried} disturbed runs run again")
    print(
        "workloads: "
        + (", ".join(f"{w} {s}" for w, s in sorted(statuses.items())) or "none read")
        + f" ({'every one answered' if answered else 'NOT every one answered'})"
    )
    head = next((i for i, (_, text) in enumerate(lines) if text.startswith("Answer for")), None)
    if head is not None:
        print("headline:", *(text for _, text in lines[head : head + 14]), sep="\n")
    elif status != 0:
        print("its last lines:", *(text for _, text in lines[-15:]), sep="\n")
    return 0 if in_budget and answered else 1


if __name__ == "__main__":
    sys.exit(main())
