"""The README's first command, timed as a new user meets it (not a test): a fresh clone, then `scripts/quickstart`.

    python bench/quickstart.py [--source REPO] [--rev HEAD] [--columns 100] [--target-s 360] [--keep]
                               [--fresh-debian]

In a temporary directory: `git clone` of REPO at REV (default: the repository this file is in, at HEAD, so
commit first), then `scripts/quickstart` run there as root exactly as the README says, its output captured
line by line with a timestamp (outside a terminal, at COLUMNS=`--columns`). Fresh: the clone, its `.venv` (the
Python dependencies downloaded from PyPI with pip's cache off), the guest cache (IOMATRIX_CACHE) and the logs
(XDG_CACHE_HOME). Not fresh, and not measurable here: the Debian packages (`setup.sh` finds them installed, so
apt's download and install time is not in the figures) and the host's page cache.

`--fresh-debian` measures that too: a minimal Debian 12 (`debootstrap --variant=minbase bookworm`, not timed)
in the temporary directory, the clone inside it, and `scripts/quickstart` run there in a chroot (the host's
/proc, /sys and /dev bound in, the host's DNS resolver copied), so its `apt-get install` starts from nothing,
as on a fresh machine. Only the kernel and the page cache are the host's. Everything is unmounted after; the
temporary directory is removed only when nothing is mounted below it any more.

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


class Place:
    """Where the quickstart runs: the host itself, or a chroot (`root`), the clone at `clone` in both cases."""

    def __init__(self, clone: Path, root: Path | None = None) -> None:
        self.clone, self.root = clone, root

    def argv(self, *cmd: str) -> tuple[list[str], Path]:
        """The argv and cwd that run `cmd` in the clone (inside the chroot when there is one)."""
        if self.root is None:
            return list(cmd), self.clone
        inside = "/" / self.clone.relative_to(self.root)
        return ["chroot", str(self.root), "/bin/sh", "-c", f"cd {inside} && exec \"$@\"", "sh", *cmd], self.root


BOUND = ("proc", "sys", "dev")  # what a chroot needs from the host: loop/drop_caches/sampler, /dev/null, kvm


def make_fresh_debian(root: Path) -> float:
    """A minimal Debian 12 in `root` with the host's /proc, /sys, /dev bound in; seconds debootstrap took."""
    if shutil.which("debootstrap") is None:
        raise SystemExit("quickstart bench: --fresh-debian needs debootstrap (apt-get install debootstrap)")
    t0 = time.monotonic()
    subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(root), "http://deb.debian.org/debian"],
                   check=True, stdout=subprocess.DEVNULL)
    took = time.monotonic() - t0
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    # This network's own TLS set-up (e.g. an egress proxy's CA, pip's cert setting), as its admin gives any new
    # machine: the local CAs join the bundle when the quickstart installs ca-certificates.
    local_cas = Path("/usr/local/share/ca-certificates")
    if local_cas.is_dir():
        shutil.copytree(local_cas, root / "usr/local/share/ca-certificates", dirs_exist_ok=True)
    if Path("/etc/pip.conf").is_file():
        shutil.copy("/etc/pip.conf", root / "etc/pip.conf")
    for name in BOUND:
        subprocess.run(["mount", "--rbind", f"/{name}", str(root / name)], check=True)
        subprocess.run(["mount", "--make-rslave", str(root / name)], check=True)
    return took


def mounts_below(path: Path) -> list[str]:
    """Mount points at or below `path` (from /proc/self/mounts)."""
    prefix = str(path.resolve())
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def unmount_fresh_debian(root: Path) -> list[str]:
    """Unmount what `make_fresh_debian` bound (deepest first); the mount points still there afterwards."""
    for name in BOUND:
        if mounts_below(root / name):
            subprocess.run(["umount", "-R", str(root / name)], check=False)
    return mounts_below(root)


def run_quickstart(place: Place, env: dict[str, str]) -> Timeline:
    """`scripts/quickstart` in the clone, every line it prints (stdout and stderr together) with its time."""
    t0 = time.monotonic()
    out = Timeline()
    argv, cwd = place.argv("scripts/quickstart")
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        out.lines.append((time.monotonic() - t0, line.rstrip("\n")))
    out.exit_status = proc.wait()
    out.total_s = time.monotonic() - t0
    return out


def workload_statuses(place: Place, env: dict[str, str]) -> dict[str, str]:
    """workload → how the headline answers it ("answer", "tied", "provisional", or "unanswered: why")."""
    argv, cwd = place.argv(".venv/bin/iomatrix", "recommend", "--db", "iomatrix.sqlite", "--format", "json")
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return headline_statuses(res.stdout)


def headline_statuses(recommend_json: str) -> dict[str, str]:
    """workload → its headline status, from `iomatrix recommend --format json`."""
    data = json.loads(recommend_json)
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
    ap.add_argument("--fresh-debian", action="store_true",
                    help="run it in a chroot of a minimal Debian 12 made with debootstrap (apt included)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("quickstart bench: run as root (the quickstart is run as root, as the README says)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="iomatrix-quickstart-"))
    root = tmp / "debian" if args.fresh_debian else None
    try:
        debootstrap_s = make_fresh_debian(root) if root is not None else None
        clone = (root / "root" if root is not None else tmp) / "iomatrix"
        place = Place(clone, root)
        t_clone = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", str(args.source), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", args.rev], check=True)
        clone_s = time.monotonic() - t_clone
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
        env.update(COLUMNS=str(args.columns), IOMATRIX_CACHE=str(tmp / "cache"), XDG_CACHE_HOME=str(tmp / "xdg"),
                   PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        if root is not None:  # the chroot's own paths: nothing of the host's PATH (pyenv shims) or caches
            env.update(PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME="/root",
                       IOMATRIX_CACHE="/tmp/iomatrix-cache", XDG_CACHE_HOME="/tmp/xdg")
        load_before = os.getloadavg()
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        tl = run_quickstart(place, env)
        load_after = os.getloadavg()
        setup_s = tl.at("setup: done")
        head, snippet_end = tl.first("Answer for"), tl.first("    </disk>")
        widest = max((len(text) for _, text in tl.lines), default=0)
        statuses = workload_statuses(place, env) if tl.exit_status == 0 else {}
        all_answered = bool(statuses) and all(s in ANSWERED for s in statuses.values())
        met = tl.exit_status == 0 and tl.total_s <= args.target_s and all_answered
        print(f"started {started}, commit {args.rev} of {args.source}, COLUMNS={args.columns}")
        print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
              f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
        print(f"git clone (not in the total): {clone_s:.1f} s")
        if debootstrap_s is not None:
            print(f"fresh Debian 12 (debootstrap minbase, not in the total): {debootstrap_s:.1f} s; "
                  "the quickstart installs its Debian packages there")
        print(f"set-up (setup.sh: packages {'installed' if root is not None else 'checked'}, .venv from PyPI): "
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
        left = unmount_fresh_debian(root) if root is not None else mounts_below(tmp)
        if left:
            # Never remove a tree with the host's /dev or /sys bound below it.
            print(f"still mounted below {tmp}, so it was not removed: {', '.join(left)}", file=sys.stderr)
        elif args.keep:
            print(f"kept: {tmp}")
        else:
            # The quickstart's sweep leaves no mount or loop device (the plan's backing is a directory).
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
