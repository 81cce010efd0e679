"""The README's first command, timed as a new user meets it (not a test): a fresh clone, then `scripts/quickstart`.

    python bench/quickstart.py [--source REPO] [--rev HEAD] [--columns 100] [--target-s 360] [--keep]

In a temporary directory: `git clone` of REPO at REV (default: the repository this file is in, at HEAD, so
commit first), then `scripts/quickstart` run there as root exactly as the README says, its output captured
line by line with a timestamp (outside a terminal, at COLUMNS=`--columns`). Fresh: the clone, its `.venv` (the
Python dependencies downloaded from PyPI with pip's cache off), the guest cache (IOMATRIX_CACHE) and the logs
(XDG_CACHE_HOME). Not fresh, and not measurable here: the Debian packages (`setup.sh` finds them installed, so
apt's download and install time is not in the figures) and the host's page cache.

Printed: set-up (until `setup: done`), sweep and report (the rest), total; lines printed and the widest;
the lines from the headline ("Answer for …") to the end of the snippet; per workload whether it was answered
(`iomatrix recommend --format json` over the database the quickstart wrote: "answer", or "tied" with the
tie-break's pick; "provisional" is not an answer); the load average before and after. Exit status 0 when the
total is within `--target-s` (default 360 s: six minutes) and every workload was answered, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ANSWERED = ("answer", "tied")  # headline statuses that answer a workload ("provisional" does not)


@dataclass
class Timeline:
    """The quickstart's output lines with the seconds since it started."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    exit_status: int = 0
    total_s: float = 0.0

    def first(self, starts: str) -> int | None:
        return next((i for i, (_, text) in enumerate(self.lines) if text.startswith(starts)), None)

    def at(self, starts: str) -> float | None:
        i = self.first(starts)
        return None if i is None else self.lines[i][0]


def run_quickstart(clone: Path, env: dict[str, str]) -> Timeline:
    """`scripts/quickstart` in `clone`, every line it prints (stdout and stderr together) with its time."""
    t0 = time.monotonic()
    out = Timeline()
    proc = subprocess.Popen(["scripts/quickstart"], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        out.lines.append((time.monotonic() - t0, line.rstrip("\n")))
    out.exit_status = proc.wait()
    out.total_s = time.monotonic() - t0
    return out


def workload_statuses(clone: Path, env: dict[str, str]) -> dict[str, str]:
    """workload → how the headline answers it ("answer", "tied", "provisional", or "unanswered: why")."""
    res = subprocess.run([str(clone / ".venv/bin/iomatrix"), "recommend", "--db", "iomatrix.sqlite",
                          "--format", "json"], cwd=clone, env=env, capture_output=True, text=True, check=True)
    data = json.loads(res.stdout)
    heads = data.get("headlines") or [data.get("headline", data)]
    statuses: dict[str, str] = {}
    for head in heads:
        for pick in head.get("picks", []):
            for gain in pick.get("workloads", []):
                statuses[gain["workload"]] = gain["status"]
        for why in head.get("unanswered", []):
            name, _, reason = why.partition(": ")
            statuses[name] = f"unanswered: {reason}"
    return statuses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=HERE, help="repository to clone (default: this one)")
    ap.add_argument("--rev", default="HEAD", help="revision to check out (default: HEAD)")
    ap.add_argument("--columns", type=int, default=100, help="COLUMNS for the quickstart's output")
    ap.add_argument("--target-s", type=float, default=360.0, help="the target for the whole command")
    ap.add_argument("--keep", action="store_true", help="keep the temporary clone (its database and report)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("quickstart bench: run as root (the quickstart is run as root, as the README says)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="iomatrix-quickstart-"))
    try:
        clone = tmp / "iomatrix"
        t_clone = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", str(args.source), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", args.rev], check=True)
        clone_s = time.monotonic() - t_clone
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
        env.update(COLUMNS=str(args.columns), IOMATRIX_CACHE=str(tmp / "cache"), XDG_CACHE_HOME=str(tmp / "xdg"),
                   PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        load_before = os.getloadavg()
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        tl = run_quickstart(clone, env)
        load_after = os.getloadavg()
        setup_s = tl.at("setup: done")
        head, snippet_end = tl.first("Answer for"), tl.first("    </disk>")
        widest = max((len(text) for _, text in tl.lines), default=0)
        statuses = workload_statuses(clone, env) if tl.exit_status == 0 else {}
        all_answered = bool(statuses) and all(s in ANSWERED for s in statuses.values())
        met = tl.exit_status == 0 and tl.total_s <= args.target_s and all_answered
        print(f"started {started}, commit {args.rev} of {args.source}, COLUMNS={args.columns}")
        print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
              f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
        print(f"git clone (not in the total): {clone_s:.1f} s")
        print("set-up (setup.sh: packages checked, .venv from PyPI): "
              + ("not reached" if setup_s is None else f"{setup_s:.1f} s"))
        if setup_s is not None:
            print(f"sweep, answer and HTML report: {tl.total_s - setup_s:.1f} s")
        print(f"total: {tl.total_s:.1f} s (target {args.target_s:.0f} s: {'met' if met else 'MISSED'}), "
              f"exit status {tl.exit_status}")
        print(f"lines printed: {len(tl.lines)}, widest {widest} characters")
        for _, text in tl.lines:
            if len(text) > args.columns:
                print(f"  wider than {args.columns}: {text[:args.columns - 30]}…")
        (tmp / "quickstart.log").write_text("".join(f"{t:7.1f} {text}\n" for t, text in tl.lines))
        if head is not None and snippet_end is not None:
            print(f"headline to the end of the snippet: {snippet_end - head + 1} lines")
        else:
            print("headline or snippet not found in the output")
        print("workloads: " + (", ".join(f"{w} {s}" for w, s in sorted(statuses.items())) or "none read")
              + f" ({'every one answered' if all_answered else 'NOT every one answered'})")
        if tl.exit_status != 0:
            print("its last lines:", *(text for _, text in tl.lines[-15:]), sep="\n")
        return 0 if met else 1
    finally:
        if args.keep:
            print(f"kept: {tmp}")
        else:
            # The quickstart's sweep leaves no mount or loop device (the plan's backing is a directory).
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
