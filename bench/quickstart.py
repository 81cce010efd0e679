"""The README's first command, timed as a new user meets it (not a test): a fresh clone, then
`scripts/quickstart`.

    python bench/quickstart.py [--source REPO] [--rev HEAD] [--columns 100] [--target-s 360] [--keep]
                               [--fresh-debian] [--runs N [--need K]]

In a temporary directory: `git clone` of REPO at REV (default: the repository this file is in, at
HEAD, so commit first), then `scripts/quickstart` run there as root exactly as the README says, its
output captured line by line with a timestamp (outside a terminal, at COLUMNS=`--columns`). Fresh:
the clone, its `.venv` (the Python dependencies downloaded from PyPI with pip's cache off), the
guest cache (IOMATRIX_CACHE) and the logs (XDG_CACHE_HOME). Not fresh, and not measurable here: the
Debian packages (`setup.sh` finds them installed, so apt's download and install time is not in the
figures) and the host's page cache.

`--fresh-debian` measures that too: a minimal Debian 12 (`debootstrap --variant=minbase bookworm`,
not timed) in the temporary directory, the clone inside it, and `scripts/quickstart` run there in a
chroot (the host's /proc, /sys and /dev bound in, the host's DNS resolver copied), so its `apt-get
install` starts from nothing, as on a fresh machine. Only the kernel and the page cache are the
host's. Everything is unmounted after; the temporary directory is removed only when nothing is
mounted below it any more.

Printed: set-up (until `setup: done`), sweep and report (the rest), total; lines printed and the
    widest;
the lines from the headline ("Answer for …") to the end of the snippet, and the line of the answer's
first role block ("For a database VM: …", on the first screen when within its first 30 lines); per
role of the default role set whether it was answered (`iomatrix recommend --format json` over the
database the quickstart wrote: settled, tied or equivalent ("keep …") answer it; only leading, or no
answer yet, does not: report/roles.py ANSWERED); the load average before and after. A sweep without
roles (an older revision) is judged per workload as before ("answer" or "tied"; "provisional" is not
an answer). One run's exit status: 0 when the total is within `--target-s` (default 360 s: six
minutes) and every role was answered, else 1.

`--runs N` runs it N times, each from a fresh clone, one after the other, and ends with how many
runs answered every role within the target; exit status 0 when at least `--need` did (default: 4 of
5, i.e. 80 % of N rounded up: issue 53's done-when).

Issue 71's checks, printed per run and over the runs: every role ends with a configuration and one of
the three statuses (decided, equivalent, not told apart at this resolution: its `resolution` in the
JSON); the answer's lines (from the headline on) that mention rounds; the per-axis lines ("cache:
writeback, 1.21× cache=none (decided)") and whether the cache axis's says decided. `--keep-db DIR`
copies each run's database there, for `bench/reproducibility.py --analyse DIR/*.sqlite` (no pair
decided both ways across the runs)."""  # noqa: E501

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ANSWERED = ("answer", "tied")  # headline statuses that answer a workload ("provisional" does not)
# Role statuses that answer a role (report/roles.py ANSWERED: settled, tied, equivalent = "keep");
# "provisional" (only leading) and "none" (no answer yet) do not. Repeated here: the bench judges
# the clone's output, and a clone of another revision need not have the same module.
ROLE_ANSWERED = ("answer", "tied", "equivalent")
# issue 71: the three statuses an answer ends with (report/recommend/resolution.py)
RESOLUTIONS = ("decided", "equivalent", "not told apart at this resolution")
ROUNDS = re.compile(r"\bround\(s\)|\brounds?\b", re.IGNORECASE)
# report/render.py FIRST_SCREEN_LINES: the answer's lines a terminal shows at once
FIRST_SCREEN = 30


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
    """Where the quickstart runs: the host itself, or a chroot (`root`), the clone at `clone` in
    both cases."""

    def __init__(self, clone: Path, root: Path | None = None) -> None:
        self.clone, self.root = clone, root

    def argv(self, *cmd: str) -> tuple[list[str], Path]:
        """The argv and cwd that run `cmd` in the clone (inside the chroot when there is one)."""
        if self.root is None:
            return list(cmd), self.clone
        inside = "/" / self.clone.relative_to(self.root)
        return [
            "chroot",
            str(self.root),
            "/bin/sh",
            "-c",
            f'cd {inside} && exec "$@"',
            "sh",
            *cmd,
        ], self.root


# what a chroot needs from the host: loop/drop_caches/sampler, /dev/null, kvm
BOUND = ("proc", "sys", "dev")


def make_fresh_debian(root: Path) -> float:
    """A minimal Debian 12 in `root` with the host's /proc, /sys, /dev bound in; seconds debootstrap
    took."""
    if shutil.which("debootstrap") is None:
        raise SystemExit(
            "quickstart bench: --fresh-debian needs debootstrap (apt-get install debootstrap)"
        )
    t0 = time.monotonic()
    subprocess.run(
        ["debootstrap", "--variant=minbase", "bookworm", str(root), "http://deb.debian.org/debian"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    took = time.monotonic() - t0
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    # This network's own TLS set-up (e.g. an egress proxy's CA, pip's cert setting), as its admin
    # gives any new machine: the local CAs join the bundle when the quickstart installs
    # ca-certificates.
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
    """Unmount what `make_fresh_debian` bound (deepest first); the mount points still there
    afterwards."""
    for name in BOUND:
        if mounts_below(root / name):
            subprocess.run(["umount", "-R", str(root / name)], check=False)
    return mounts_below(root)


def run_quickstart(place: Place, env: dict[str, str]) -> Timeline:
    """`scripts/quickstart` in the clone, every line it prints (stdout and stderr together) with its
    time."""
    t0 = time.monotonic()
    out = Timeline()
    argv, cwd = place.argv("scripts/quickstart")
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        out.lines.append((time.monotonic() - t0, line.rstrip("\n")))
    out.exit_status = proc.wait()
    out.total_s = time.monotonic() - t0
    return out


def recommend_json(place: Place, env: dict[str, str]) -> str:
    """`iomatrix recommend --format json` over the database the quickstart wrote."""
    argv, cwd = place.argv(
        ".venv/bin/iomatrix", "recommend", "--db", "iomatrix.sqlite", "--format", "json"
    )
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def role_statuses(recommend_json: str) -> dict[str, str]:
    """role → its status ("answer", "tied", "equivalent", "provisional", "none"), from `iomatrix
    recommend --format json` (its `roles`, first); {} for a sweep without roles."""
    return {r["role"]: r["status"] for r in json.loads(recommend_json).get("roles") or []}


@dataclass(frozen=True)
class Outcome:
    """One run of the quickstart, judged: the time, and every role (else every workload)
    answered."""

    total_s: float
    exit_status: int
    statuses: dict[str, str]  # role (or workload, without roles) → status
    by_role: bool
    target_s: float
    # issue 71: each role's resolution (one of RESOLUTIONS) and configuration, the answer's lines
    # that mention rounds, and its per-axis lines ("cache: …")
    resolutions: dict[str, str] = field(default_factory=dict)
    round_lines: list[str] = field(default_factory=list)
    axis_lines: list[str] = field(default_factory=list)

    @property
    def all_resolved(self) -> bool:
        """Every role ends with one configuration and one of the three statuses."""
        return bool(self.resolutions) and all(r in RESOLUTIONS for r in self.resolutions.values())

    @property
    def cache_decided(self) -> bool | None:
        """The cache axis's line says it is decided: one level better overall ("… (decided)") or in
        every cell ("decided in every cell"); "decided per cell" (the cells disagree) is not. None:
        no cache line printed."""
        lines = [x for x in self.axis_lines if x.lstrip().startswith("cache:")]
        return (
            None
            if not lines
            else all(
                x.rstrip().endswith("(decided)") or "decided in every cell" in x for x in lines
            )
        )

    def cache_decided_on(self) -> dict[str, bool]:
        """Per workload ("… on database:data"), whether its cache line says decided (as
        :attr:`cache_decided`); a line that names no workload is keyed "all"."""
        out: dict[str, bool] = {}
        for x in self.axis_lines:
            if not x.lstrip().startswith("cache:"):
                continue
            # every workload the line names: one decided line may hold several ("… on
            # database:data (…), 1.31× … on file-server:files (decided)"); only the last was read
            # until 2026-11-28
            named = re.findall(r" on ([\w:.-]*\w)", x)
            decided = x.rstrip().endswith("(decided)") or "decided in every cell" in x
            for w in named or ["all"]:
                out[w] = decided
        return out

    @property
    def answered(self) -> list[str]:
        wanted = ROLE_ANSWERED if self.by_role else ANSWERED
        return [k for k, s in self.statuses.items() if s in wanted]

    @property
    def all_answered(self) -> bool:
        return bool(self.statuses) and len(self.answered) == len(self.statuses)

    @property
    def in_time(self) -> bool:
        return self.exit_status == 0 and self.total_s <= self.target_s

    @property
    def met(self) -> bool:
        return self.in_time and self.all_answered

    def summary(self) -> str:
        what = "roles" if self.by_role else "workloads"
        yes = set(self.answered)
        told = (
            ", ".join(
                f"{k} {s} ({'answered' if k in yes else 'NOT answered'})"
                for k, s in sorted(self.statuses.items())
            )
            or "none read"
        )
        return (
            f"{what}: {told} ({len(self.answered)} of {len(self.statuses)} answered: "
            f"{'every one' if self.all_answered else 'NOT every one'})"
        )


def judge(
    total_s: float,
    exit_status: int,
    recommend_out: str | None,
    target_s: float,
    answer: list[str] | None = None,
) -> Outcome:
    """The run's outcome from its time, exit status, `recommend --format json` (None: not read, the
    run failed) and the answer's printed lines: per role when the sweep ran roles, else per
    workload."""
    if recommend_out is None:
        return Outcome(total_s, exit_status, {}, True, target_s)
    roles = role_statuses(recommend_out)
    statuses = roles or headline_statuses(recommend_out)
    resolutions = {
        r["role"]: (r.get("resolution") or "none") if r.get("cell") else "no configuration"
        for r in json.loads(recommend_out).get("roles") or []
    }
    lines = answer or []
    # The per-axis answers as the answer states them (its JSON headline's `axes`): a crowded first
    # screen points to --detail for them instead of printing them (report/screen.py AXES_IN_DETAIL).
    axes = json.loads(recommend_out).get("headline", {}).get("axes") or []
    axis = re.compile(r"\s*(cache|format|aio|bus|preallocation): ")
    printed = [x.strip() for x in lines if axis.match(x)]
    return Outcome(
        total_s,
        exit_status,
        statuses,
        bool(roles),
        target_s,
        resolutions,
        [x for x in lines if ROUNDS.search(x)],
        [str(x) for x in axes] or printed,
    )


def answer_lines(tl: Timeline) -> list[str]:
    """The printed answer: from the headline ("Answer for …") to the end."""
    head = tl.first("Answer for")
    return [] if head is None else [text for _, text in tl.lines[head:]]


def first_snippet_end(tl: Timeline) -> int | None:
    """The line that ends the answer's first libvirt snippet: the whole <disk> element's
    "</disk>", or the end ("/>") of the <driver> element a crowded first screen shows instead
    (issue 49), which may wrap."""
    texts = [text.strip() for _, text in tl.lines]
    disk = next((i for i, t in enumerate(texts) if t == "</disk>"), None)
    # "libvirt (virsh edit VM, the <disk>'s <driver>): <driver …" (report/screen.py: DRIVER_WHERE)
    driver = next(
        (i for i, t in enumerate(texts) if t.startswith("libvirt") and ": <driver " in t), None
    )
    if driver is not None:
        driver = next((i for i in range(driver, len(texts)) if texts[i].endswith("/>")), None)
    found = [i for i in (disk, driver) if i is not None]
    return min(found, default=None)


def first_role_line(tl: Timeline) -> int | None:
    """The line of the answer's first role block ("For a database VM: …"), counted from the headline
    ("Answer for …" is line 1); None when either is missing."""
    head = tl.first("Answer for")
    if head is None:
        return None
    return next(
        (
            i - head + 1
            for i, (_, text) in enumerate(tl.lines[head:], head)
            if text.startswith("For ")
        ),
        None,
    )


def runs_summary(outcomes: list[Outcome], need: int) -> tuple[str, bool]:
    """The --runs verdict: how many runs answered every role within the target, against `need`;
    then issue 71's: every role resolved, no round mentioned, the cache axis decided."""
    met = sum(o.met for o in outcomes)
    answered = sum(o.all_answered for o in outcomes)
    in_time = sum(o.in_time for o in outcomes)
    ok = met >= need
    cache = [o.cache_decided for o in outcomes]
    return (
        f"runs that answered every role within the target: {met} of {len(outcomes)} "
        f"(needed {need}: "
        f"{'met' if ok else 'MISSED'}); every role answered in {answered}, within the "
        f"time in {in_time}; "
        f"totals {', '.join(f'{o.total_s:.0f} s' for o in outcomes)}\n"
        f"issue 71: every role one of the three statuses in "
        f"{sum(o.all_resolved for o in outcomes)} of {len(outcomes)}; no round mentioned in "
        f"{sum(not o.round_lines for o in outcomes)}; the cache axis decided in "
        f"{sum(c is True for c in cache)} (not decided {sum(c is False for c in cache)}, "
        f"no cache line {sum(c is None for c in cache)}); per workload: "
        + (
            ", ".join(
                f"{w} {sum(o.cache_decided_on().get(w, False) for o in outcomes)} of "
                f"{len(outcomes)}"
                for w in sorted({w for o in outcomes for w in o.cache_decided_on()})
            )
            or "none"
        )
    ), ok


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
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--source", type=Path, default=HERE, help="repository to clone (default: this one)"
    )
    ap.add_argument("--rev", default="HEAD", help="revision to check out (default: HEAD)")
    ap.add_argument("--columns", type=int, default=100, help="COLUMNS for the quickstart's output")
    ap.add_argument(
        "--target-s", type=float, default=360.0, help="the target for the whole command"
    )
    ap.add_argument(
        "--keep", action="store_true", help="keep the temporary clone (its database and report)"
    )
    ap.add_argument(
        "--fresh-debian",
        action="store_true",
        help="run it in a chroot of a minimal Debian 12 made with debootstrap (apt included)",
    )
    ap.add_argument(
        "--runs", type=int, default=1, help="run it this many times, each from a fresh clone"
    )
    ap.add_argument(
        "--keep-db",
        type=Path,
        help="copy each run's database here (for bench/reproducibility.py --analyse)",
    )
    ap.add_argument(
        "--need",
        type=int,
        default=None,
        help="runs that must answer every role within the target (default: 80%% of --runs, "
        "rounded up)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print(
            "quickstart bench: run as root (the quickstart is run as root, as the README says)",
            file=sys.stderr,
        )
        return 2
    if not 1 <= args.runs <= 20:
        print("quickstart bench: --runs must be 1 to 20", file=sys.stderr)
        return 2
    need = math.ceil(0.8 * args.runs) if args.need is None else args.need
    if not 1 <= need <= args.runs:
        print(f"quickstart bench: --need must be 1 to --runs ({args.runs})", file=sys.stderr)
        return 2
    outcomes = []
    for n in range(args.runs):
        if args.runs > 1:
            print(f"== run {n + 1} of {args.runs}", flush=True)
        outcomes.append(one_run(args))
    if args.runs == 1:
        return 0 if outcomes[0].met else 1
    line, ok = runs_summary(outcomes, need)
    print(line)
    return 0 if ok else 1


def one_run(args: argparse.Namespace) -> Outcome:
    """One fresh clone and quickstart, printed and judged."""
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
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))
        }
        env.update(
            COLUMNS=str(args.columns),
            IOMATRIX_CACHE=str(tmp / "cache"),
            XDG_CACHE_HOME=str(tmp / "xdg"),
            PIP_NO_CACHE_DIR="1",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
        )
        # the chroot's own paths: nothing of the host's PATH (pyenv shims) or caches
        if root is not None:
            env.update(
                PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                HOME="/root",
                IOMATRIX_CACHE="/tmp/iomatrix-cache",
                XDG_CACHE_HOME="/tmp/xdg",
            )
        load_before = os.getloadavg()
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        tl = run_quickstart(place, env)
        load_after = os.getloadavg()
        outcome = judge(
            tl.total_s,
            tl.exit_status,
            recommend_json(place, env) if tl.exit_status == 0 else None,
            args.target_s,
            answer_lines(tl),
        )
        if args.keep_db is not None and (clone / "iomatrix.sqlite").exists():
            args.keep_db.mkdir(parents=True, exist_ok=True)
            kept = args.keep_db / f"quickstart-{time.strftime('%Y%m%d-%H%M%S')}.sqlite"
            shutil.copy(clone / "iomatrix.sqlite", kept)
            print(f"database kept: {kept}")
        print(f"started {started}, commit {args.rev} of {args.source}, COLUMNS={args.columns}")
        print(
            f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
            f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}"
        )
        print(f"git clone (not in the total): {clone_s:.1f} s")
        if debootstrap_s is not None:
            print(
                f"fresh Debian 12 (debootstrap minbase, not in the total): {debootstrap_s:.1f} s; "
                "the quickstart installs its Debian packages there"
            )
        print_timeline(tl, args, outcome)
        (tmp / "quickstart.log").write_text("".join(f"{t:7.1f} {text}\n" for t, text in tl.lines))
        return outcome
    finally:
        left = unmount_fresh_debian(root) if root is not None else mounts_below(tmp)
        if left:
            # Never remove a tree with the host's /dev or /sys bound below it.
            print(
                f"still mounted below {tmp}, so it was not removed: {', '.join(left)}",
                file=sys.stderr,
            )
        elif args.keep:
            print(f"kept: {tmp}")
        else:
            # The quickstart's sweep leaves no mount or loop device (the plan's backing is a
            # directory).
            shutil.rmtree(tmp, ignore_errors=True)


def print_timeline(tl: Timeline, args: argparse.Namespace, outcome: Outcome) -> None:
    """What one run measured: set-up, sweep, total, the lines, where the answer and its first role
    block are, and each role's (else workload's) status."""
    setup_s = tl.at("setup: done")
    print(
        f"set-up (setup.sh: packages {'installed' if args.fresh_debian else 'checked'}, "
        ".venv from PyPI): " + ("not reached" if setup_s is None else f"{setup_s:.1f} s")
    )
    if setup_s is not None:
        print(f"sweep, answer and HTML report: {tl.total_s - setup_s:.1f} s")
    # The time target alone here: whether every role was answered is the roles line's, below.
    print(
        f"total: {tl.total_s:.1f} s (target {args.target_s:.0f} s: "
        f"{'met' if outcome.in_time else 'MISSED'}), "
        f"exit status {tl.exit_status}"
    )
    widest = max((len(text) for _, text in tl.lines), default=0)
    print(f"lines printed: {len(tl.lines)}, widest {widest} characters")
    for _, text in tl.lines:
        if len(text) > args.columns:
            print(f"  wider than {args.columns}: {text[: args.columns - 30]}…")
    head, snippet_end = tl.first("Answer for"), first_snippet_end(tl)
    if head is not None and snippet_end is not None:
        print(f"headline to the end of the first snippet: {snippet_end - head + 1} lines")
    else:
        print("headline or snippet not found in the output")
    at = first_role_line(tl)
    if outcome.by_role:
        print(
            "first role answer: "
            + (
                "not found"
                if at is None
                else f"line {at} of the answer ({'on' if at <= FIRST_SCREEN else 'NOT on'} "
                f"the first screen of {FIRST_SCREEN} lines)"
            )
        )
    print(outcome.summary())
    print(
        "issue 71: roles' statuses: "
        + (", ".join(f"{k} {v}" for k, v in sorted(outcome.resolutions.items())) or "none read")
        + f" ({'every one of the three' if outcome.all_resolved else 'NOT every one resolved'})"
    )
    print(f"  lines mentioning rounds: {len(outcome.round_lines)}")
    for x in outcome.round_lines[:5]:
        print(f"    {x.strip()[:120]}")
    print(f"  per-axis lines: {'; '.join(outcome.axis_lines) or 'none'}")
    if tl.exit_status != 0:
        print("its last lines:", *(text for _, text in tl.lines[-15:]), sep="\n")


if __name__ == "__main__":
    sys.exit(main())
