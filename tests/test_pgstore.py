"""The fleet's central store on a real PostgreSQL (issue 52): migrations, idempotent publish,
conflicts refused whole, 8 hosts at once, a publish killed midway, a database that is down, and the
read commands on the store answering as on the merged SQLite file."""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.dburl import DatabaseURL, parse_db, redact
from iomatrix.store import Store
from iomatrix.store.schema import COLUMNS, MIGRATIONS, SCHEMA_1, SCHEMA_VERSION
from tests import pg_cluster
from tests.conftest import DATA, iomatrix_argv, run_cli
from tests.test_merge import fleet, make_sweep

psycopg = pytest.importorskip("psycopg")
needs_postgres = pytest.mark.skipif(
    not pg_cluster.available(), reason="Debian's postgresql 15 and root needed"
)
pytestmark = pytest.mark.xdist_group("postgresql")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    if not pg_cluster.available():
        pytest.skip("Debian's postgresql 15 and root needed")
    with pg_cluster.cluster() as url:
        yield url


@pytest.fixture
def store_url(cluster: str) -> str:
    """A new database of its own in the module's cluster."""
    return pg_cluster.create_database(cluster, "t" + uuid.uuid4().hex[:12])


def counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "hosts",
                "sweeps",
                "cells",
                "runs",
                "samples",
                "monitor",
                "unit_stops",
                "cell_axes",
            )
        }


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_urls_print_without_credentials() -> None:
    url = parse_db(
        "postgresql://lab:s3cret@db.example:5433/iomatrix?password=other&sslmode=require"
    )
    assert isinstance(url, DatabaseURL)
    for shown in (str(url), repr(url), f"{url}", f"{url:>80}"):
        assert "s3cret" not in shown and "=other" not in shown
        assert "lab@db.example:5433/iomatrix" in shown
    assert (
        redact("postgresql:///iomatrix?host=/run/postgresql")
        == "postgresql:///iomatrix?host=/run/postgresql"
    )
    assert parse_db("results/iomatrix.sqlite") == Path("results/iomatrix.sqlite")


@needs_postgres
def test_a_new_store_has_the_sqlite_schema_and_an_old_one_is_migrated(
    store_url: str, tmp_path: Path
) -> None:
    from iomatrix.store.pg import CENTRAL_STEPS, pg_statement, publish

    # A central store of schema 6 (as an iomatrix before run_clients made it): publishing migrates
    # it.
    with psycopg.connect(store_url) as conn:
        for stmt in (s for s in SCHEMA_1.split(";") if s.strip()):
            conn.execute(pg_statement(stmt))
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('central_version', '0')")
        for v in range(1, 6):
            for stmt in filter(None, map(pg_statement, MIGRATIONS[v])):
                conn.execute(stmt)
        assert conn.execute("SELECT to_regclass('run_clients')").fetchone()[0] is None
    host = tmp_path / "host.sqlite"
    s = Store(host)
    make_sweep(s, "host-a", "quick")
    s.close()
    publish(host, DatabaseURL(store_url))
    with psycopg.connect(store_url) as conn:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        assert meta == {
            "schema_version": str(SCHEMA_VERSION),
            "central_version": str(len(CENTRAL_STEPS)),
        }
        for table, cols in COLUMNS[SCHEMA_VERSION].items():
            have = {
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name=%s",
                    (table,),
                )
            }
            extra = (
                {"uid"} if table == "sweeps" else {"uid", "digest"} if table == "runs" else set()
            )
            assert have == set(cols) | extra, table


@needs_postgres
def test_publishing_twice_adds_nothing_and_the_store_answers_as_the_merged_file(
    store_url: str, tmp_path: Path
) -> None:
    hosts = fleet(tmp_path)  # three hosts, one of them in two files, and a schema-1 database
    before = {p: digest(p) for p in hosts}
    for p in hosts:
        out = run_cli("publish", str(p), store_url)
        assert out.returncode == 0, out.stderr
    first = counts(store_url)
    for p in hosts:
        again = run_cli("publish", str(p), store_url)
        assert again.returncode == 0 and " 0 run(s) added" in again.stdout, (
            again.stdout + again.stderr
        )
    assert counts(store_url) == first
    assert {p: digest(p) for p in hosts} == before  # publishing never writes the host's file
    merged = tmp_path / "merged.sqlite"
    assert run_cli("merge", str(merged), *map(str, hosts)).returncode == 0
    with contextlib.closing(Store.open_existing(merged)) as m:
        assert first["runs"] == m.db.execute("SELECT count(*) FROM runs").fetchone()[0]
        assert first["sweeps"] == m.db.execute("SELECT count(*) FROM sweeps").fetchone()[0]
    for command in (("recommend", "--min-runs", "2"), ("rank", "--min-runs", "2"), ("results",)):
        on_store = run_cli(*command, "--db", store_url, "--format", "json")
        on_file = run_cli(*command, "--db", str(merged), "--format", "json")
        assert on_store.returncode == 0, on_store.stderr
        assert json.loads(on_store.stdout) == json.loads(on_file.stdout), command
    html = tmp_path / "fleet.html"
    report = run_cli("report", "--db", store_url, "--html", str(html))
    assert report.returncode == 0 and html.stat().st_size > 10_000, report.stderr


@needs_postgres
def test_a_conflict_is_refused_and_nothing_is_written(store_url: str, tmp_path: Path) -> None:
    host = tmp_path / "host.sqlite"
    s = Store(host)
    make_sweep(s, "host-a", "quick", base=100.0)
    s.close()
    assert run_cli("publish", str(host), store_url).returncode == 0
    before = counts(store_url)
    # The same file later: a new sweep, and one run of the published sweep edited (a restored or
    # doctored file).
    s = Store(host)
    make_sweep(s, "host-a", "full", base=900.0)
    s.db.execute("UPDATE samples SET value = value * 2 WHERE run_id = 1")
    s.close()
    out = run_cli("publish", str(host), store_url)
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        "other content; nothing was published" in out.stderr
        and len(out.stderr.strip().splitlines()) <= 2
    )
    assert counts(store_url) == before


@needs_postgres
def test_eight_hosts_publishing_at_once_lose_and_duplicate_no_run(
    store_url: str, tmp_path: Path
) -> None:
    files = []
    for i in range(8):
        path = tmp_path / f"host{i}.sqlite"
        s = Store(path)
        make_sweep(s, f"host-{i}", "quick", cells=3, base=100.0 + i)
        make_sweep(s, f"host-{i}", "full", cells=2, base=500.0 + i)
        s.close()
        files.append(path)
    expected = sum(
        Store.open_existing(p).db.execute("SELECT count(*) FROM runs").fetchone()[0] for p in files
    )
    procs = [
        subprocess.Popen(
            [*iomatrix_argv(), "publish", str(p), store_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in files
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with psycopg.connect(store_url) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT uid) FROM runs").fetchone() == (
            expected,
            expected,
        )
        assert conn.execute("SELECT count(*) FROM hosts").fetchone()[0] == 8
        assert conn.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 16


@needs_postgres
def test_a_publish_killed_midway_leaves_nothing_and_the_next_one_catches_up(
    store_url: str, tmp_path: Path
) -> None:
    from iomatrix.store.pg import ensure_schema

    host = tmp_path / "host.sqlite"
    s = Store(host)
    make_sweep(s, "host-a", "quick", cells=3)
    s.close()
    with psycopg.connect(store_url) as setup:
        ensure_schema(setup)
    # Another session holds the samples table: the publish writes its host, sweep, cells and first
    # run, then waits inside its transaction, where it is killed.
    blocker = psycopg.connect(store_url)
    # Polled from a session of its own: pg_stat_activity is a snapshot per transaction, and the
    # blocker's lasts.
    watcher = psycopg.connect(store_url, autocommit=True)
    try:
        blocker.execute("LOCK TABLE samples IN EXCLUSIVE MODE")
        child = subprocess.Popen(
            [*iomatrix_argv(), "publish", str(host), store_url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            waiting = _wait_for(
                lambda: (
                    watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE "
                        "wait_event_type='Lock' AND datname=current_database()"
                    ).fetchone()[0]
                    == 1
                ),
                120,
            )
            assert waiting, "the publish never reached the samples table"
            # its rows so far are inside its transaction only
            with psycopg.connect(store_url) as peek:
                assert peek.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=60)
        blocker.rollback()
        assert _wait_for(
            lambda: (
                watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE "
                    "datname=current_database() AND pid NOT IN "
                    "(pg_backend_pid(), %s)",
                    (blocker.info.backend_pid,),
                ).fetchone()[0]
                == 0
            ),
            120,
        )
    finally:
        blocker.close()
        watcher.close()
    assert set(counts(store_url).values()) == {0}
    out = run_cli("publish", str(host), store_url)
    assert out.returncode == 0 and "1 sweep(s) added" in out.stdout, out.stdout + out.stderr
    assert counts(store_url)["runs"] == 18


@needs_postgres
def test_a_database_that_is_down_is_one_line_and_the_host_file_is_untouched(tmp_path: Path) -> None:
    host = tmp_path / "host.sqlite"
    s = Store(host)
    make_sweep(s, "host-a", "quick")
    s.close()
    before = digest(host)
    down = f"postgresql://lab:s3cret@127.0.0.1:{pg_cluster.free_port()}/iomatrix"
    for argv in (("publish", str(host), down), ("recommend", "--db", down)):
        out = run_cli(*argv)
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.startswith(
            "error: cannot reach the PostgreSQL store postgresql://lab@127.0.0.1:"
        ), out.stderr
        assert "s3cret" not in out.stdout + out.stderr and "Traceback" not in out.stderr
    assert digest(host) == before


def as_role(url: str, role: str) -> str:
    """`url` (postgresql://postgres@host:port/db) for another role of the cluster (trust auth)."""
    return url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


def one_line_refusal(argv: tuple[str, ...], *needles: str) -> None:
    out = run_cli(*argv)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@needs_postgres
def test_a_role_without_rights_or_a_missing_schema_is_one_line_and_nothing_is_written(
    store_url: str, tmp_path: Path
) -> None:
    # Issue 69: a read-only role publishing into an empty store (PostgreSQL 15 grants no CREATE on
    # schema public), or into a filled one, and a search_path naming no schema, were internal
    # errors with a crash log. Each is one line naming the fix, and the store is as it was.
    host = tmp_path / "host.sqlite"
    s = Store(host)
    make_sweep(s, "host-a", "quick")
    s.close()
    role = "reader" + uuid.uuid4().hex[:8]
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    reader = as_role(store_url, role)
    one_line_refusal(("publish", str(host), reader), "create", "GRANT USAGE, CREATE ON SCHEMA")
    with psycopg.connect(store_url) as conn:
        assert conn.execute("SELECT to_regclass('meta')").fetchone()[0] is None
    evil = store_url + "?options=-c%20search_path%3Devil"
    one_line_refusal(("publish", str(host), evil), "no schema", "search_path")
    one_line_refusal(("results", "--db", evil), "no schema", "search_path")
    assert run_cli("publish", str(host), store_url).returncode == 0
    filled = counts(store_url)
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    one_line_refusal(("publish", str(host), reader), "may not add rows", "GRANT SELECT, INSERT")
    one_line_refusal(("results", "--db", reader), "may not read", "GRANT SELECT ON ALL TABLES")
    # read rights only: reading works, publishing is still refused before it writes
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    assert run_cli("results", "--db", reader).returncode == 0
    one_line_refusal(("publish", str(host), reader), "may not add rows", "GRANT SELECT, INSERT")
    assert counts(store_url) == filled


def _wait_for(check, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_the_throw_away_cluster_is_removed_after() -> None:
    if not pg_cluster.available():
        pytest.skip("Debian's postgresql 15 and root needed")
    with pg_cluster.cluster() as url, psycopg.connect(url) as conn:
        data = Path(conn.execute("SHOW data_directory").fetchone()[0])
        assert data.is_dir()
    assert not data.parent.exists()


def _history_host(path: Path) -> None:
    """host-a: three sweeps of one plan; the third after a kernel update, its reads half as fast."""
    from tests.test_merge import host_facts

    s = Store(path)
    make_sweep(s, "host-a", "quick", base=100.0)
    make_sweep(s, "host-a", "quick", base=100.2)
    third = make_sweep(s, "host-a", "quick", base=50.0)
    updated = s.host_id({**host_facts("host-a"), "kernel": "6.1.0-99"})
    with s.tx() as db:
        db.execute(
            "UPDATE sweeps SET host_id=?, started_at=started_at+1000 WHERE id=?", (updated, third)
        )
    s.close()


def test_history_flags_only_the_real_change_and_names_the_versions_that_changed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "host.sqlite"
    _history_host(path)
    out = run_cli("history", "--db", str(path), "--format", "json")
    assert out.returncode == 0, out.stderr
    steps = json.loads(out.stdout)
    assert [s["sweep"] for s in steps] == [1, 2, 3] and {s["host"] for s in steps} == {"host-a"}
    first, second, third = steps
    assert first["figures_compared"] == 0 and second["figures_compared"] > 0
    assert second["slower"] == [] and second["faster"] == [] and second["versions_changed"] == []
    assert third["versions_changed"] == ["kernel 6.1.0-6 → 6.1.0-99"]
    assert third["slower"] and all(c["after"] < c["before"] for c in third["slower"])
    text = run_cli("history", "--db", str(path), "--host", "host-a", "--workload", "rand-read-4k")
    assert "changed: kernel 6.1.0-6 → 6.1.0-99" in text.stdout and "slower:" in text.stdout, (
        text.stdout
    )
    bad = run_cli("history", "--db", str(path), "--host", "nope")
    assert bad.returncode == 2 and "no host 'nope'" in bad.stderr


@needs_postgres
def test_history_on_the_store_equals_history_on_the_file(store_url: str, tmp_path: Path) -> None:
    path = tmp_path / "host.sqlite"
    _history_host(path)
    assert run_cli("publish", str(path), store_url).returncode == 0
    on_store = json.loads(run_cli("history", "--db", store_url, "--format", "json").stdout)
    on_file = json.loads(run_cli("history", "--db", str(path), "--format", "json").stdout)
    assert on_store == on_file


def test_run_merge_and_monitor_say_what_to_do_with_a_url_they_cannot_take(tmp_path: Path) -> None:
    """run writes a local file (and publishes it with --publish), merge reads files: a URL where
    they cannot take one is one line naming what to do, without the password, and nothing is made
    (no 'postgresql:' directory)."""
    url = "postgresql://lab:s3cret@127.0.0.1:1/iomatrix"
    cases = {
        (
            "run",
            "quick",
            "--db",
            url,
            "--workdir",
            str(tmp_path / "w"),
        ): "error: run writes its sweep to a local SQLite file, not to a central store "
        "(postgresql://lab@127.0.0.1:1"
        "/iomatrix) — iomatrix run PLAN --db host.sqlite --publish "
        "postgresql://lab@127.0.0.1:1/iomatrix",
        (
            "run",
            "quick",
            "--db",
            str(tmp_path / "h.sqlite"),
            "--publish",
            str(tmp_path / "o.sqlite"),
        ): f"error: --publish {tmp_path / 'o.sqlite'} is not a PostgreSQL URL",
        (
            "merge",
            str(tmp_path / "m.sqlite"),
            url,
        ): "error: merge reads per-host SQLite files, not a central store",
    }
    for argv, said in cases.items():
        out = run_cli(*argv, cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.startswith(said), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "s3cret" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@needs_postgres
def test_merge_into_the_store_is_all_or_nothing_and_monitor_reads_it(
    store_url: str, tmp_path: Path
) -> None:
    hosts = fleet(tmp_path)
    # A copy of host-a's file with one run edited: merged with the others into the store, it is
    # refused whole.
    doctored = tmp_path / "host-a-doctored.sqlite"
    doctored.write_bytes(hosts[0].read_bytes())
    with contextlib.closing(Store(doctored)) as s:
        s.db.execute("UPDATE samples SET value = value * 2 WHERE run_id = 1")
    refused = run_cli("merge", store_url, *map(str, hosts), str(doctored))
    assert refused.returncode == 2 and "other content; nothing was published" in refused.stderr, (
        refused.stderr
    )
    # nothing of the good files either (the tables may exist, empty)
    with psycopg.connect(store_url) as conn:
        if conn.execute("SELECT to_regclass('runs')").fetchone()[0] is not None:
            assert set(counts(store_url).values()) == {0}
    merged = run_cli("merge", store_url, *map(str, hosts))
    assert merged.returncode == 0, merged.stderr
    assert f"{hosts[0]} → {store_url}: 2 sweep(s) added with " in merged.stdout, merged.stdout
    again = run_cli("merge", store_url, *map(str, hosts))
    assert again.returncode == 0 and again.stdout.count("0 sweep(s) added with 0 run(s)") == len(
        hosts
    ), again.stdout
    local = tmp_path / "merged.sqlite"
    assert run_cli("merge", str(local), *map(str, hosts)).returncode == 0
    assert (
        counts(store_url)["runs"]
        == Store.open_existing(local).db.execute("SELECT count(*) FROM runs").fetchone()[0]
    )
    # monitor --db URL: a run's series as on the merged file. The first run of both is host-a's
    # first (inputs taken in the same order); its id in the store is not 1 (the refused merge drew
    # ids from the store's sequences).
    with psycopg.connect(store_url) as conn:
        first_run = conn.execute("SELECT min(id) FROM runs").fetchone()[0]
    on_store = run_cli("monitor", "--db", store_url, "--run", str(first_run), "--format", "json")
    on_file = run_cli("monitor", "--db", str(local), "--run", "1", "--format", "json")
    assert on_store.returncode == 0, on_store.stderr
    assert (
        json.loads(on_store.stdout) == json.loads(on_file.stdout)
        and "cpu.usr_pct" in on_store.stdout
    )


TINY_PLAN = (
    'tier = ["baremetal"]\ncache = ["none"]\nworkloads = ["rand-read-4k"]\nsize = '
    '"16M"\nruntime = 1\n'
    '[repetitions]\nmin = 1\nmax = 1\n[[backing]]\ntype = "dir"\n'
)


@needs_postgres
def test_run_publishes_at_the_end_and_a_store_that_is_down_loses_nothing(
    store_url: str, tmp_path: Path
) -> None:
    """run --publish: the sweep is written to --db as it goes and published when it ends. With the
    store down the sweep is still saved whole (exit 2, one line saying how to catch up), and
    publishing it later adds it; a second sweep into the same file publishes only itself."""
    plan = tmp_path / "tiny.toml"
    plan.write_text(TINY_PLAN)
    db, work = tmp_path / "host.sqlite", tmp_path / "work"
    down = f"postgresql://lab:s3cret@127.0.0.1:{pg_cluster.free_port()}/iomatrix"
    first = run_cli("run", str(plan), "--db", str(db), "--workdir", str(work), "--publish", down)
    assert first.returncode == 2, first.stdout[-2000:] + first.stderr
    assert first.stderr.startswith(
        f"error: the sweep is saved in {db}, but publishing it failed: cannot reach the "
        "PostgreSQL store postgresql://lab@127.0.0.1:"
    ), first.stderr
    assert (
        f"once the store is back: iomatrix publish {db} postgresql://lab@127.0.0.1:" in first.stderr
    )
    assert "s3cret" not in first.stdout + first.stderr
    with contextlib.closing(Store.open_existing(db)) as s:
        assert [s.sweep(i).status for i in s.sweep_ids()] == ["finished"]
        # a disturbed run's retry counts too
        runs = s.db.execute("SELECT count(*) FROM runs").fetchone()[0]
    caught_up = run_cli("publish", str(db), store_url)
    assert (
        caught_up.returncode == 0
        and f"1 sweep(s) added, 0 already there; {runs} run(s) added" in caught_up.stdout
    )
    second = run_cli(
        "run", str(plan), "--db", str(db), "--workdir", str(work), "--publish", store_url
    )
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr
    assert f"published {db} → {store_url}: 1 sweep(s) added, 1 already there;" in second.stdout, (
        second.stdout[-2000:]
    )
    with psycopg.connect(store_url) as conn:
        assert (
            conn.execute("SELECT count(*) FROM sweeps WHERE status='finished'").fetchone()[0] == 2
        )


def test_every_table_of_a_sweep_is_found_from_the_sweeps_read() -> None:
    """open_central's read of some sweeps copies every table of theirs: a table added to the schema
    needs its way from the sweeps (store/pg.py _OF_SWEEPS), or a fleet answer read from the store
    would lack its rows."""
    from iomatrix.store.pg import _OF_SWEEPS

    assert set(_OF_SWEEPS) == set(COLUMNS[SCHEMA_VERSION]) - {"meta", "hosts", "sweeps"}


def many_sweeps_fleet(tmp_path: Path) -> list[Path]:
    """Four hosts with many sweeps each: three of plan quick and two of plan full, rack-a and
    rack-b, one host moved from rack-b to rack-a after its first sweep, and one sweep interrupted (a
    fleet answer reads a few of them)."""
    files = []
    for i in range(4):
        path = tmp_path / f"host-{i}.sqlite"
        s = Store(path)
        for k, plan in enumerate(("quick", "full", "quick", "full", "quick")):
            sid = make_sweep(s, f"host-{i}", plan, base=100.0 + 10 * i + k)
            group = "rack-a" if i < 2 else "rack-b"
            s.db.execute(
                "UPDATE sweeps SET host_group=?, started_at=started_at+? WHERE id=?",
                ("rack-b" if (i, k) == (1, 0) else group, 1000 * k, sid),
            )
        if i == 0:
            make_sweep(s, "host-0", "quick", status="interrupted", base=900.0)
        s.close()
        files.append(path)
    return files


@needs_postgres
def test_the_fleet_answer_from_the_store_reads_only_its_sweeps_and_answers_as_the_file(
    store_url: str, tmp_path: Path
) -> None:
    """recommend --db URL reads each host's latest sweep of a plan and group, not the whole store:
    the same answer as on the merged file, for all hosts and per group, in JSON and as text; --sweep
    N still reads any sweep."""
    from iomatrix.dburl import DatabaseURL
    from iomatrix.report.fleet import answer_sweeps
    from iomatrix.store.pg import open_central

    files = many_sweeps_fleet(tmp_path)
    merged = tmp_path / "fleet.sqlite"
    assert run_cli("merge", str(merged), *map(str, files)).returncode == 0
    assert run_cli("merge", store_url, *map(str, files)).returncode == 0  # same order: the same ids
    read = open_central(DatabaseURL(store_url), lambda meta: answer_sweeps(meta, False, None))
    with contextlib.closing(read):
        kept = {r[0] for r in read.db.execute("SELECT DISTINCT c.sweep_id FROM cells c")}
        assert {r[0] for r in read.db.execute("SELECT id FROM sweeps")} == kept
        # 4 hosts × 2 plans; host-1's quick sweep of rack-b (its latest of that group) and host-0's
        # interrupted one (recorded without a group): 10 of 21 sweeps.
        assert len(kept) == 10, kept
    for argv in (
        ("--format", "json"),
        ("--group", "rack-a", "--format", "json"),
        ("--group", "rack-b"),
        ("--by-host", "--format", "markdown"),
        ("--sweep", "2", "--format", "json"),
    ):
        on_store = run_cli("recommend", "--min-runs", "2", *argv, "--db", store_url)
        on_file = run_cli("recommend", "--min-runs", "2", *argv, "--db", str(merged))
        assert on_store.returncode == 0, on_store.stderr
        assert on_store.stdout.replace(store_url, "DB") == on_file.stdout.replace(
            str(merged), "DB"
        ), argv


@needs_postgres
def test_the_fleet_demos_hosts_published_answer_as_their_merged_file(
    store_url: str, tmp_path: Path
) -> None:
    """The three databases scripts/fleet-demo --store postgresql fetched from its hosts
    (tests/data/fleet-demo, kept with --keep-results), published one by one in the reverse order of
    the merge (so the store numbers their sweeps otherwise): recommend and history give the merged
    file's answers, sweep ids aside. The demo itself checks the same on the store its playbook
    publishes into (tests/test_fleet_demo.py)."""
    hosts = sorted((DATA / "fleet-demo").glob("fleet-host-*.sqlite"))
    assert [p.name for p in hosts] == [
        "fleet-host-1.sqlite",
        "fleet-host-2.sqlite",
        "fleet-host-3.sqlite",
    ]
    copies = []
    # publishing only reads them; merge reads them too, but the data stays untouched either way
    for p in hosts:
        copies.append(tmp_path / p.name)
        copies[-1].write_bytes(p.read_bytes())
    for p in reversed(copies):
        assert run_cli("publish", str(p), store_url).returncode == 0
    merged = tmp_path / "merged.sqlite"
    assert run_cli("merge", str(merged), *map(str, copies)).returncode == 0
    with psycopg.connect(store_url) as conn:
        first_host = conn.execute(
            "SELECT h.hostname FROM sweeps s JOIN hosts h ON h.id=s.host_id ORDER BY s.id LIMIT 1"
        ).fetchone()[0]
    assert first_host == "fleet-host-3"  # the store's sweep 1 is the merged file's sweep 3
    for argv in (
        ("recommend", "--min-runs", "2", "--format", "json"),
        ("history", "--format", "json"),
    ):
        on_store = run_cli(*argv, "--db", store_url)
        on_file = run_cli(*argv, "--db", str(merged))
        assert on_store.returncode == 0 and on_file.returncode == 0, (
            on_store.stderr + on_file.stderr
        )
        assert pg_cluster.same_answers(on_store.stdout, on_file.stdout) is None, argv
        assert all(f"fleet-host-{n}" in on_file.stdout for n in (1, 2, 3)), argv


@needs_postgres
def test_a_service_file_entry_and_pghost_pgport_open_the_store_and_their_errors_name_them(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`service=NAME` (a pg_service.conf entry) and PGHOST/PGPORT: libpq reads them, iomatrix opens
    the store they lead to as the full URL's; an error names the service file (or the variables)
    in one line, and a password the file holds is never printed."""
    host = tmp_path / "host.sqlite"
    s = Store(host)
    make_sweep(s, "host-a", "quick")
    s.close()
    assert run_cli("publish", str(host), store_url).returncode == 0
    direct = run_cli("results", "--db", store_url, "--format", "json")
    assert direct.returncode == 0, direct.stderr
    user_host, database = store_url.removeprefix("postgresql://").split("/", 1)
    user, address = user_host.split("@")
    ip, port = address.split(":")
    secret = "pw-in-the-service-file-7f3a"
    services = tmp_path / "pg_service.conf"
    services.write_text(
        f"[lab]\nhost={ip}\nport={port}\ndbname={database}\nuser={user}\npassword={secret}\n"
        f"[down]\nhost={ip}\nport={pg_cluster.free_port()}\ndbname={database}\nuser={user}\n"
        f"password={secret}\n"
    )
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pg_service.conf or ~/.pgpass of the host's
    for url in ("postgresql://?service=lab", f"postgresql:///{database}?service=lab"):
        via = run_cli("results", "--db", url, "--format", "json")
        assert via.returncode == 0, via.stderr
        assert json.loads(via.stdout) == json.loads(direct.stdout), url
    with monkeypatch.context() as env:
        env.setenv("PGHOST", ip)
        env.setenv("PGPORT", port)
        via = run_cli("results", "--db", f"postgresql://{user}@/{database}", "--format", "json")
        assert via.returncode == 0, via.stderr
        assert json.loads(via.stdout) == json.loads(direct.stdout)
        env.setenv("PGPORT", str(pg_cluster.free_port()))
        one_line_refusal(
            ("results", "--db", f"postgresql://{user}@/{database}"),
            "cannot reach the PostgreSQL store",
            f"PGHOST={ip}; PGPORT=",
        )
    # a service no file defines: both files libpq looks in, named with the fix
    one_line_refusal(
        ("results", "--db", "postgresql://?service=nosuch"),
        'the PostgreSQL service "nosuch"',
        str(services),
        "pg_service.conf",
        "add a [nosuch] section",
    )
    # a server that does not answer, reached through the service file: the file is named
    one_line_refusal(
        ("publish", str(host), "postgresql://?service=down"),
        "cannot reach the PostgreSQL store",
        f'service "down" from {services}',
    )
    # a file libpq cannot read (a line that is no key=value): the file, by libpq's own words
    services.write_text(services.read_text().replace(f"user={user}\n", "user\n", 1))
    one_line_refusal(
        ("results", "--db", "postgresql://?service=lab"),
        "the PostgreSQL service file",
        f'"{services}", line 5',
    )
    # no output ever held the file's password
    for argv in (
        ("results", "--db", "postgresql://?service=lab"),
        ("publish", str(host), "postgresql://?service=down"),
        ("results", "--db", f"postgresql://?service=lab&password={secret}"),
    ):
        out = run_cli(*argv)
        assert out.returncode == 2 and secret not in out.stdout + out.stderr, out.stderr
