"""Issue 69's kills per protocol: a sweep on a lab backing of each network protocol (NBD, iSCSI,
NFS, Ceph RBD) SIGKILLed 20 times at seeded random moments, and a publish to PostgreSQL SIGKILLed 10
times, losing nothing.

    python bench/kill_campaign.py [--kills 20] [--publish-kills 10]
                                  [--only nbd,iscsi,nfs,rbd,publish]

A sweep: tests/kill_campaigns.py's campaign (the suite's, with fewer kills: tests/
test_kill_campaign_network.py 4 over iSCSI and NFS, tests/test_kill_campaign_ceph.py 3; the suite
cannot take 80 sweeps' start-ups). Each kill starts the same `run`, waits for a seeded event of
that protocol's sweep (its server serving, a block-layer run on its disk), a seeded offset after
it, then SIGKILLs the sweep's whole process group; the completed runs may never decrease. Then one
more `run` must finish the same sweep, with no process, listening port, disk file or ledger entry
of the killed ones left.

A publish: a host file of 40 sweeps (~1,000 runs) is published into a throw-away PostgreSQL cluster
(tests/pg_cluster.py) and SIGKILLed at a seeded moment within its measured duration, 10 times;
after each kill the store holds all of its runs or none (one transaction), and a last publish
gives the exact count.

Needs root and what the suite's kill campaigns need (scripts/setup.sh --fleet). Prints one line per
protocol; exits 1 when anything was lost or left. Not a test: its minutes are the point."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from tests.conftest import descendants_named, iomatrix_argv  # noqa: E402
from tests.kill_campaigns import (  # noqa: E402
    PLAN_FILE,
    kill_campaign,
    left_behind,
    ok_runs,
    qsd_on,
    resumed,
    run_args,
    sweep_plan,
    sweep_processes,
)

# Enough runs that 20 kills land in a running sweep (each kill lets a run or so finish): 2 cells ×
# 10 repetitions.
ROUNDS = 10
SEED = 6969  # the campaign's moments; a failure names the kill, and this seed replays it

# Per protocol: its server processes (what a kill must not leave running) and the events a kill
# waits for.
PROTOCOLS: dict[str, tuple[tuple[str, ...], dict[str, Callable[[int], list[psutil.Process]]]]] = {
    "nbd": (
        ("nbdkit",),
        {
            "nbdkit serving": lambda pid: descendants_named(pid, "nbdkit"),
            "a block-layer run on an NBD export": qsd_on("nbd"),
        },
    ),
    "iscsi": (
        ("tgtd",),
        {
            "tgtd serving": lambda pid: descendants_named(pid, "tgtd"),
            "a block-layer run on an iSCSI LUN": qsd_on("iscsi"),
        },
    ),
    "nfs": (
        ("ganesha.nfsd", "rpcbind"),
        {
            "ganesha serving": lambda pid: descendants_named(pid, "ganesha.nfsd"),
            "a block-layer run on an NFS file": qsd_on("nfs"),
        },
    ),
    "rbd": (
        ("ceph-mon", "ceph-osd"),
        {
            "the monitor serving": lambda pid: descendants_named(pid, "ceph-mon"),
            "the OSD serving": lambda pid: descendants_named(pid, "ceph-osd"),
            "a block-layer run on an RBD image": qsd_on("rbd"),
        },
    ),
}


def sweep_campaign(protocol: str, kills: int, tmp: Path) -> list[str]:
    """Run one protocol's campaign in `tmp`; what went wrong (nothing when nothing was lost or
    left)."""
    servers, events = PROTOCOLS[protocol]
    (tmp / PLAN_FILE).write_text(sweep_plan(f'[[backing]]\ntype = "{protocol}"\n', rounds=ROUNDS))
    work, db = tmp / "w", tmp / "r.sqlite"
    argv = [*iomatrix_argv(), *run_args(db, work)]
    ours = sweep_processes((*servers, "qemu-storage-daemon", "fio"))
    t0 = time.monotonic()
    try:
        c = kill_campaign(argv, tmp, db, events, ours, SEED, kills)
    except AssertionError as err:  # a lost run, or a kill's processes still running
        return [f"{protocol}: {err}"]
    _, problems = resumed(tmp, db, work, c.kept, timeout=1800)
    took = time.monotonic() - t0
    problems += left_behind(work, c.killed, c.ports)
    events_hit = sorted({n for names in c.names_killed for n in names})
    print(
        f"{protocol}: {kills} SIGKILLs, {c.landed} in a running sweep, processes killed "
        f"{', '.join(events_hit)}; {ok_runs(db)} runs complete after the last run, never fewer "
        f"than before a kill; {took:.0f} s; {'nothing lost or left' if not problems else 'FAILED'}",
        flush=True,
    )
    return [f"{protocol}: {p}" for p in problems]


def publish_campaign(kills: int, tmp: Path) -> list[str]:
    """SIGKILL a publish `kills` times at seeded moments within its duration, each into a database
    of its own: after each, it holds all of the file's runs or none; then a last publish into it
    gives the exact count."""
    import psycopg

    from iomatrix.store import Store
    from tests import pg_cluster
    from tests.test_merge import make_sweep

    host = tmp / "host.sqlite"
    s = Store(host)
    for i in range(40):
        make_sweep(s, "host-a", f"plan{i % 4}", cells=4, base=1000.0 + 10 * i)
    s.close()
    rng = random.Random(SEED)
    problems = []

    def runs_in(url: str) -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM runs").fetchone()
        return int(row[0]) if row else 0

    with pg_cluster.cluster() as base:
        timing = pg_cluster.create_database(base, "timing")
        t0 = time.monotonic()
        one = subprocess.run([*iomatrix_argv(), "publish", str(host), timing], capture_output=True)
        whole = time.monotonic() - t0
        if one.returncode != 0:
            return [f"publish: the timing publish failed: {one.stderr.decode()[-300:]}"]
        expected = runs_in(timing)
        landed = 0
        for kill in range(kills):
            url = pg_cluster.create_database(base, f"kill{kill}")
            child = subprocess.Popen(
                [*iomatrix_argv(), "publish", str(host), url],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            time.sleep(rng.uniform(0.3, 1.0) * whole)
            landed += child.poll() is None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
            have = _settled(lambda url=url: runs_in(url) if _has_runs(url) else 0)
            if have not in (0, expected):
                problems.append(f"publish kill {kill}: {have} runs of {expected}: partial")
            again = subprocess.run(
                [*iomatrix_argv(), "publish", str(host), url], capture_output=True
            )
            if again.returncode != 0 or runs_in(url) != expected:
                problems.append(
                    f"publish kill {kill}: the next publish gave {runs_in(url)} runs of {expected}"
                )
    print(
        f"publish: {kills} SIGKILLs ({landed} during a publish; one takes {whole:.1f} s, "
        f"{expected} runs); after each the store held all or none, and the next publish all; "
        f"{'nothing partial' if not problems else 'FAILED'}",
        flush=True,
    )
    return problems


def _has_runs(url: str) -> bool:
    """Whether the database has its tables yet (a publish killed before it made them has none)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regclass('runs') IS NOT NULL").fetchone() == (True,)


def _settled(count: Callable[[], int]) -> int:
    """`count` once PostgreSQL has ended the killed client's backend (its transaction rolled
    back): the same answer twice, half a second apart."""
    last = count()
    for _ in range(20):
        time.sleep(0.5)
        now = count()
        if now == last:
            return now
        last = now
    return last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs per protocol's sweep")
    ap.add_argument("--publish-kills", type=int, default=10)
    ap.add_argument("--only", default="nbd,iscsi,nfs,rbd,publish", help="comma-separated")
    args = ap.parse_args()
    problems: list[str] = []
    for what in args.only.split(","):
        with tempfile.TemporaryDirectory(prefix=f"iomatrix-bench-kills-{what}-") as d:
            try:
                if what == "publish":
                    problems += publish_campaign(args.publish_kills, Path(d))
                else:
                    problems += sweep_campaign(what, args.kills, Path(d))
            except Exception as err:  # one protocol's failure does not cost the others' figures
                problems.append(f"{what}: {type(err).__name__}: {err}")
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
