"""A sweep's process group SIGKILLed at seeded random moments, each kill followed by the next `run`
of the same command (issues 34 and 35: "leaves nothing, also when SIGKILLed at random moments and
the next `run` follows"). Shared by the suite's kill campaigns (tests/test_kill_campaign*.py), the
interrupted sweeps of tests/test_network_disks.py and bench/kill_campaign.py: the small sweep they
kill (`sweep_plan`), the events a kill waits for that they share, the campaign, the `run` that
resumes it and what must not be left after it. The events a kill waits for and the processes it
counts as the sweep's are the caller's."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from iomatrix.backing import leftovers
from iomatrix.mountinfo import parse_mountinfo
from tests.conftest import descendants_named, run_cli
from tests.own_network import listening_sockets

EVENT_BOUND_S = 300  # a bound on waiting for an event, not a pace: the event ends the wait
PLAN_FILE = "p.toml"  # the sweep's plan, in the campaign's directory


def sweep_plan(
    backings: str,
    tiers: Sequence[str] = ("blocklayer",),
    rounds: int = 2,
    runtime: float = 1,
    more: str = "",
) -> str:
    """The small sweep a campaign kills: raw, cache none and writeback, aio threads,
    rand-write-4k on 16 MiB of a 64 MiB image, `runtime` seconds a run and `rounds` runs a cell
    (min = max: no race ends it early), no null ceiling, and no retry of a disturbed run (what a
    run records is checked, not how clean it was); `more` top-level lines, then `backings`
    ([[backing]] tables)."""
    tier_list = ", ".join(f'"{t}"' for t in tiers)
    return f"""
tier = [{tier_list}]
format = ["raw"]
preallocation = ["off"]
cache = ["none", "writeback"]
aio = ["threads"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "64M"
runtime = {runtime:g}
null_ceiling = false
{more}retry_disturbed = false
[repetitions]
min = {rounds}
max = {rounds}
{backings}"""


def run_args(db: Path, work: Path) -> list[str]:
    """`iomatrix run`'s arguments for the campaign's plan into `db`, working in `work` (after
    `iomatrix_argv()`, or to `run_cli`)."""
    return ["run", PLAN_FILE, "--db", str(db), "--workdir", str(work)]


def qsd_on(driver: str) -> Callable[[int], list[psutil.Process]]:
    """An event: the sweep's qemu-storage-daemon opening a disk with QEMU's `driver` (a block-layer
    run on that protocol's disk)."""
    return lambda pid: descendants_named(pid, "qemu-storage-daemon", f"driver={driver}")


def bare_metal_fio(pid: int) -> list[psutil.Process]:
    """An event: a bare-metal fio of the sweep (on a local file, or the server's own file of a
    network disk: the server-side baseline); a block-layer fio talks NBD to a daemon instead."""
    return [
        p
        for p in descendants_named(pid, "fio")
        if not descendants_named(pid, "qemu-storage-daemon")
    ]


@dataclass
class Campaign:
    # the last kill's processes of the sweep
    killed: list[psutil.Process] = field(default_factory=list)
    ports: set[int] = field(default_factory=set)  # every port a killed process listened on
    kept: int = 0  # completed runs after the last kill
    landed: int = 0  # kills that landed in a running sweep
    # per kill, the names of the processes it stopped
    names_killed: list[set[str]] = field(default_factory=list)


def alive(procs: list[psutil.Process]) -> list[str]:
    """Those of `procs` still running after a bounded moment (a killed group is reaped by init)."""
    deadline = time.monotonic() + 30

    def running() -> list[str]:
        out = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{p.name()} {p.pid}")
            except psutil.NoSuchProcess:
                continue
        return out

    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    return running()


def process_name(p: psutil.Process) -> str:
    """The process's name, "" when it ended between being listed and being asked (a daemon the
    sweep was stopping: seen as psutil.NoSuchProcess on a loaded CI host)."""
    try:
        return p.name()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def listening_ports(procs: list[psutil.Process]) -> set[int]:
    """The TCP ports `procs` listen on, each read in its own network namespace (/proc/PID/net: a
    server in a test's own namespace, tests/own_network.py, is not in the reader's /proc/net)."""
    ports = set()
    for p in procs:
        with contextlib.suppress(OSError):
            fds = Path(f"/proc/{p.pid}/fd")
            mine = {os.readlink(fd) for fd in fds.iterdir()}
            listening = listening_sockets(p.pid)
            ports |= {port for inode, port in listening.items() if f"socket:[{inode}]" in mine}
    return ports


def listening_now(netns_of: int | str = "self") -> set[int]:
    """The TCP ports listened on in the network namespace of process `netns_of` (this one's unless
    named)."""
    return set(listening_sockets(netns_of).values())


def ok_runs(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return con.execute("SELECT count(*) FROM runs WHERE status = 'ok'").fetchone()[0]


def sweep_processes(names: Sequence[str]) -> Callable[[int], list[psutil.Process]]:
    return lambda pid: [p for name in names for p in descendants_named(pid, name)]


def kill_campaign(
    argv: list[str],
    cwd: Path,
    db: Path,
    events: dict[str, Callable[[int], list[psutil.Process]]],
    ours: Callable[[int], list[psutil.Process]],
    seed: int,
    kills: int,
) -> Campaign:
    """`kills` times: start the sweep in a session of its own, wait for a seeded event of `events`
    (bounded), check the previous kill's processes are gone (the run reclaimed them before serving
    anything of its own), wait a seeded offset, snapshot `ours`, SIGKILL the whole group; completed
    runs may never decrease."""
    rng = random.Random(seed)
    c = Campaign()
    for kill in range(kills):
        event = rng.choice(sorted(events))
        # somewhere in or after the event, never a bet on the host's speed
        offset = rng.uniform(0.0, 1.5)
        sweep = subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + EVENT_BOUND_S
            while (
                not events[event](sweep.pid)
                and sweep.poll() is None
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            assert alive(c.killed) == [], (
                f"kill {kill} ({event}): the previous kill's processes still run"
            )
            time.sleep(offset)
            c.killed = ours(sweep.pid)
            c.names_killed.append({n for p in c.killed if (n := process_name(p))})
            c.ports |= listening_ports(c.killed)
            c.landed += sweep.poll() is None
        finally:
            if sweep.poll() is None:
                os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait(timeout=60)
        now = ok_runs(db)
        assert now >= c.kept, f"kill {kill} ({event}): completed runs lost ({c.kept} -> {now})"
        c.kept = now
    assert c.landed >= kills - 1, f"only {c.landed} of {kills} kills landed in a running sweep"
    return c


def resumed(
    cwd: Path,
    db: Path,
    work: Path,
    kept: int,
    timeout: float = 900,
    cli: Callable[..., subprocess.CompletedProcess[str]] = run_cli,
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The next `run` after the last kill (through `cli`: tests.conftest.run_cli, or a namespace's
    own), which must finish the same sweep (its "sweep 1:") with at least the `kept` completed runs;
    its outcome and what went wrong (nothing: [])."""
    last = cli(*run_args(db, work), cwd=cwd, timeout=timeout)
    problems = []
    if last.returncode != 0 or "sweep 1:" not in last.stdout:
        problems.append(
            f"the last run: exit {last.returncode}: {last.stdout[-1500:]} {last.stderr[-1500:]}"
        )
    if (now := ok_runs(db)) < kept:
        problems.append(f"{now} completed runs after the last run, fewer than {kept}")
    return last, problems


def left_behind(
    work: Path,
    killed: Sequence[psutil.Process] = (),
    ports: set[int] | None = None,
    netns_of: int | str = "self",
) -> list[str]:
    """What a killed (and resumed) sweep in `work` left that it must not: a `killed` process still
    running, one of their listening `ports` still listened on (in the network namespace of process
    `netns_of`, where the sweep ran), a ledger entry, a disk file under the workdir's backings."""
    problems = []
    if left := alive(list(killed)):
        problems.append(f"still running: {left}")
    if ports and (listening := ports & listening_now(netns_of)):
        problems.append(f"ports of killed servers still listening: {sorted(listening)}")
    if pending := leftovers.pending(work):
        problems.append(f"ledger entries left: {pending}")
    backings = work / "backings"
    if backings.exists() and (files := [f for f in backings.rglob("*") if f.is_file()]):
        problems.append(f"disk files left: {files[:3]}")
    return problems


def loops_and_mounts(work: Path) -> list[str]:
    """The mounts under `work` and the loop devices backed by a file in it."""
    mounts = [
        m["mountpoint"] for m in parse_mountinfo() if Path(m["mountpoint"]).is_relative_to(work)
    ]
    loops = subprocess.run(
        ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return mounts + [line for line in loops.splitlines() if str(work) in line]
