"""A sweep's process group SIGKILLed at seeded random moments, each kill followed by the next `run`
of the same command (issues 34 and 35: "leaves nothing, also when SIGKILLed at random moments and
the next `run` follows"). Shared by the shared-storage and the Ceph campaigns; the events a kill
waits for and the processes it counts as the sweep's are the caller's."""

from __future__ import annotations

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

from tests.conftest import descendants_named

EVENT_BOUND_S = 300  # a bound on waiting for an event, not a pace: the event ends the wait


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
    ports = set()
    for p in procs:
        try:
            ports |= {
                c.laddr.port
                for c in p.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            }
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return ports


def listening_now() -> set[int]:
    return {
        c.laddr.port for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    }


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
