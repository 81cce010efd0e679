"""Publish 100 synthetic hosts × 10 sweeps into a throw-away PostgreSQL cluster, and time
`recommend` on it.

    python bench/publish.py [--hosts 100] [--sweeps 10]

Each host's file holds `--sweeps` finished sweeps of 4 cells × 2 workloads × 3 runs (one of them
failed), with samples, 3 monitor points per run, unit stops and axes (tests/test_merge.py's
make_sweep): 240 runs per host at the default. The files are copies of one template with the host's
identity and its figures changed (building 100 by the Store API would time SQLite, not the publish).
Prints the publish time per host (median and max, in process), the store's size, then `recommend
--db URL` as a fresh CLI process (median of 3) and the in-memory read it includes (the whole store,
and the sweeps the fleet answer reads: what `recommend --db URL` reads), and `recommend` on the same
rows as an SQLite file (what is not the store's). Needs root and Debian's postgresql
(scripts/setup.sh --fleet). Prints numbers; not a test."""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from iomatrix.dburl import DatabaseURL  # noqa: E402
from iomatrix.report.fleet import answer_sweeps  # noqa: E402
from iomatrix.store import Store  # noqa: E402
from iomatrix.store.pg import open_central, publish  # noqa: E402
from iomatrix.store.schema import HOST_COLUMNS  # noqa: E402
from tests import pg_cluster  # noqa: E402
from tests.conftest import iomatrix_argv  # noqa: E402
from tests.test_merge import host_facts, make_sweep  # noqa: E402


def template(path: Path, sweeps: int) -> None:
    s = Store(path)
    for i in range(sweeps):
        make_sweep(s, "template", f"plan{i % 2}", cells=4, base=1000.0 + 100 * i)
    s.close()


def host_copy(template_file: Path, out: Path, i: int) -> None:
    """The template as host i: its own identity, its figures scaled a little."""
    shutil.copy(template_file, out)
    db = sqlite3.connect(out)
    facts = host_facts(f"host-{i:03d}")
    db.execute(
        "UPDATE hosts SET hostname=?, fingerprint=?",
        (
            facts["hostname"],
            json.dumps({k: facts.get(k) for k in HOST_COLUMNS}, sort_keys=True),
        ),
    )
    db.execute("UPDATE samples SET value = value * ?", (1 + (i % 7) / 100,))
    db.commit()
    db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="recommend runs per database (median)")
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="iomatrix-bench-publish-") as tmp,
        pg_cluster.cluster() as base,
    ):
        work = Path(tmp)
        tpl = work / "template.sqlite"
        template(tpl, args.sweeps)
        url = DatabaseURL(pg_cluster.create_database(base, "fleet"))
        times = []
        for i in range(args.hosts):
            f = work / f"host-{i:03d}.sqlite"
            host_copy(tpl, f, i)
            t0 = time.perf_counter()
            r = publish(f, url)
            times.append(time.perf_counter() - t0)
            f.unlink()
        runs = r.runs_added
        print(
            f"publish (psycopg {psycopg.pq.__impl__}): {args.hosts} hosts × {args.sweeps} sweeps "
            f"({runs} runs per host): median "
            f"{statistics.median(times):.3f} s per host, max {max(times):.3f} s, total "
            f"{sum(times):.1f} s"
        )
        t0 = time.perf_counter()
        mem = open_central(url)
        print(f"read of the whole store into memory: {time.perf_counter() - t0:.2f} s")
        # What recommend --db URL reads for the fleet answer: each host's latest sweep of each plan
        # and group.
        t0 = time.perf_counter()
        part = open_central(url, lambda meta: answer_sweeps(meta, False, None))
        kept = part.db.execute("SELECT count(*) FROM sweeps").fetchone()[0]
        part.close()
        print(
            f"read of the fleet answer's sweeps ({kept} of {args.hosts * args.sweeps}): "
            f"{time.perf_counter() - t0:.2f} s"
        )
        # The same rows as an SQLite file: recommend on it is the part of the time that is not the
        # store's.
        copy = sqlite3.connect(work / "fleet.sqlite")
        mem.db.backup(copy)
        copy.close()
        mem.close()
        for label, db in (
            ("URL", url.conninfo),
            ("the same rows as an SQLite file", str(work / "fleet.sqlite")),
        ):
            walls = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = subprocess.run(
                    [*iomatrix_argv(), "recommend", "--db", db, "--min-runs", "2"],
                    capture_output=True,
                    text=True,
                    timeout=1200,
                )
                walls.append(time.perf_counter() - t0)
                assert out.returncode == 0, out.stderr
            print(
                f"recommend --db {label} (fresh process, median of {args.repeats}): "
                f"{statistics.median(walls):.2f} s"
                f" (min {min(walls):.2f}, max {max(walls):.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
