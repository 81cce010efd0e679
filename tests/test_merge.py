"""`iomatrix merge`: per-host databases into one, idempotent, losing nothing, refusing conflicts."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from iomatrix.errors import UserError
from iomatrix.locks import db_lock_path, exclusive
from iomatrix.store import RunRecord, Store
from iomatrix.store.merge import TABLES, MergeConflict, declared_references, merge
from iomatrix.store.schema import SCHEMA_VERSION
from tests.conftest import DATA, run_cli

SCHEMA1 = DATA / "schema1" / "iomatrix-schema1.sqlite"
AXES = dict(
    tier="baremetal",
    format="-",
    preallocation="-",
    cache="none",
    aio="threads",
    bus="-",
    backing="dir",
    modifier="none",
)


def host_facts(name: str) -> dict[str, Any]:
    return {
        "hostname": name,
        "kernel": f"6.1.0-{len(name)}",
        "os": "Debian 12",
        "cpu_model": f"cpu of {name}",
        "cpu_count": 2 + len(name),
        "mem_bytes": 1 << 33,
        "fio_version": "fio-3.33",
        "python_version": "3.11",
        "iomatrix_version": "0.1.0",
        "cpu_governor": "performance",
        "euid": 0,
    }


def run(
    cell: int, workload: str, value: float, *, t0: float, status: str = "ok", **extra: Any
) -> RunRecord:
    return RunRecord(
        cell_id=cell,
        workload=workload,
        status=status,
        started_at=t0,
        finished_at=t0 + 2.5,
        accel="none (bare metal)",
        cache_state="dropped",
        page_cache_method="direct",
        metrics={"read.iops": value, "read.lat_mean_us": 1e6 / value} if status == "ok" else {},
        phases={"wall_s": 2.5},
        job_text=f"[job]\nrw=randread # {workload}",
        raw_output='{"jobs": []}',
        error=None if status == "ok" else "fio exited 1",
        meta={"round": 1},
        monitor=[(t0 + i, {"cpu.usr_pct": 5.0 + i, "disk.r_iops": value}) for i in range(3)],
        **extra,
    )


def make_sweep(
    store: Store,
    host: str,
    plan: str,
    *,
    cells: int = 2,
    status: str = "finished",
    base: float = 100.0,
    qemu_version: str | None = None,
) -> int:
    """A sweep of `cells` cells × two workloads, with a failed run, a retried run and unit stops."""
    host_id = store.host_id({**host_facts(host), "qemu_version": qemu_version})
    sweep = store.create_sweep(
        host_id,
        plan,
        f"fp-{plan}",
        f'{{"name": "{plan}"}}',
        [{"what": "x", "reason": "y"}],
        ["a note"],
        metric_registry={"read.iops": {"unit": "IOPS", "direction": "higher"}},
    )
    for c in range(cells):
        cell = store.cell_id(
            sweep,
            f"{plan}-cell{c}",
            {**AXES, "cache": ("none", "writeback")[c % 2]},
            {"fs": "ext4", "n": c},
        )
        for w, workload in enumerate(("rand-read-4k", "seq-read-1m")):
            first = store.record_run(
                run(cell, workload, base + c + w, t0=base, round=1, round_position=c)
            )
            store.record_run(run(cell, workload, 0, t0=base + 3, status="failed", round=2))
            store.record_run(
                run(
                    cell,
                    workload,
                    base + c + w + 0.5,
                    t0=base + 6,
                    round=2,
                    disturbed=False,
                    retry_of=first,
                    boot_id=f"b{c}",
                    boot_position=1,
                )
            )
            store.record_unit_stop(
                cell, workload, "settled", f"settled after 2 runs ({host})", 2, 2
            )
    store.set_sweep_status(sweep, status) if status != "running" else None
    return sweep


def fleet(tmp_path: Path) -> list[Path]:
    """Three hosts' databases (host a twice: a second database holds another sweep of it) and schema
    1."""
    made = []
    for name, sweeps in (
        ("host-a", [("quick", 100.0), ("full", 200.0)]),
        ("host-b", [("quick", 300.0)]),
        ("host-c", [("quick", 400.0), ("durability", 500.0)]),
    ):
        path = tmp_path / f"{name}.sqlite"
        s = Store(path)
        for i, (plan, base) in enumerate(sweeps):
            make_sweep(
                s,
                name,
                plan,
                status="interrupted" if (name, i) == ("host-c", 1) else "finished",
                base=base,
            )
        s.close()
        made.append(path)
    again = tmp_path / "host-a-later.sqlite"
    s = Store(again)
    make_sweep(s, "host-a", "block-size", cells=1, base=600.0)
    s.close()
    old = tmp_path / "schema1.sqlite"
    shutil.copy(SCHEMA1, old)
    return [*made, again, old]


# -- a canonical view of a database: every row, ids replaced by what they point at -----------------


def dump(path: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    """table -> multiset of rows, each column that is an id (or refers to one) replaced by the
    referenced row's own canonical content; the schema's REFERENCES clauses say which columns refer
    to what."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite%'"
        )
    ]
    cache: dict[tuple[str, int], tuple[Any, ...]] = {}

    def canon(table: str, row: sqlite3.Row | tuple[Any, ...], cols: list[str]) -> tuple[Any, ...]:
        refs = declared_references(db, table)
        out = []
        for col, value in zip(cols, row, strict=True):
            if col == "id":
                continue
            out.append(
                (col, ref_canon(refs[col], value) if col in refs and value is not None else value)
            )
        return tuple(out)

    def ref_canon(table: str, row_id: int) -> tuple[Any, ...]:
        if (table, row_id) not in cache:
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
            row = db.execute(f"SELECT * FROM {table} WHERE id=?", (row_id,)).fetchone()
            assert row is not None, f"{path}: {table} {row_id} is referenced but missing"
            cache[(table, row_id)] = (table, *canon(table, row, cols))
        return cache[(table, row_id)]

    out: dict[str, Counter[tuple[Any, ...]]] = {}
    for table in tables:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        out[table] = Counter(
            canon(table, row, cols) for row in db.execute(f"SELECT * FROM {table}")
        )
    db.close()
    return out


def migrated_dump(path: Path, tmp_path: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    copy = tmp_path / f"migrated-{path.name}"
    shutil.copy(path, copy)
    Store(copy).close()
    return dump(copy)


def expected(inputs: Iterable[Path], tmp_path: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    """What merging the distinct `inputs` must give: every sweep's rows once; hosts and meta
    shared."""
    total: dict[str, Counter[tuple[Any, ...]]] = {}
    for path in dict.fromkeys(inputs):
        for table, rows in migrated_dump(path, tmp_path).items():
            acc = total.setdefault(table, Counter())
            if table in ("hosts", "meta"):
                acc |= Counter(set(rows))
            else:
                acc += rows
    return total


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- tests -----------------------------------------------------------------------------------------


def test_the_declared_tables_are_the_schema(tmp_path: Path) -> None:
    s = Store(tmp_path / "fresh.sqlite")
    tables = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {t.name for t in TABLES} == tables, (
        "store/merge.py TABLES must list every table of the schema"
    )
    seen: set[str] = set()
    for spec in TABLES:
        assert declared_references(s.db, spec.name) == dict(spec.refs), spec.name
        assert all(t in seen or t == spec.name for t in spec.refs.values()), (
            f"{spec.name} before what it refers to"
        )
        cols = {r[1] for r in s.db.execute(f"PRAGMA table_info({spec.name})")}
        assert set(spec.key) <= cols and (spec.owner is None or spec.owner in spec.refs), spec.name
        seen.add(spec.name)
    s.close()


def test_merging_in_any_order_and_twice_gives_every_run_once(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    before = {p: digest(p) for p in inputs}
    want = expected(inputs, tmp_path)
    one, two = tmp_path / "one.sqlite", tmp_path / "two.sqlite"
    res = merge(one, inputs)
    # host-a, b, c and the schema-1 host 'vm'
    assert res.created and res.hosts == 4 and res.sweeps == 7
    assert [r.sweeps_added for r in res.inputs] == [2, 1, 2, 1, 1]
    assert res.inputs[-1].schema_version == 1
    merge(two, list(reversed(inputs)))
    assert dump(one) == dump(two) == want
    # schema 1, 2-cell and 1-cell sweeps
    assert sum(want["runs"].values()) == res.runs == 4 + 5 * 2 * 2 * 3 + 2 * 3

    # The same databases again, all of them and one twice: nothing added, nothing changed.
    again = merge(one, [*inputs, inputs[0]])
    assert [r.sweeps_added for r in again.inputs] == [0] * 6 and again.runs == res.runs
    assert [r.sweeps_present for r in again.inputs] == [2, 1, 2, 1, 1, 2]
    assert dump(one) == want
    assert {p: digest(p) for p in inputs} == before, "an input was modified"
    # No staging directory and no lock file is left behind.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".one", "one"))) == [
        "one.sqlite"
    ]


def test_merging_is_incremental(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    out = tmp_path / "out.sqlite"
    merge(out, inputs[:2])
    merge(out, inputs[1:])
    assert dump(out) == expected(inputs, tmp_path)


def test_an_old_output_is_merged_into_after_a_backup(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    out = tmp_path / "old-out.sqlite"
    shutil.copy(SCHEMA1, out)
    res = merge(out, inputs[:3])
    assert not res.created and res.sweeps == 1 + 5
    backup = out.with_name("old-out.sqlite.schema1.bak")  # the output as it was, schema 1
    # read a copy: never the fixture itself
    original = shutil.copy(SCHEMA1, tmp_path / "original.sqlite")
    assert dump(backup) == dump(original) and Store.open_existing(backup).schema_version == 1
    assert dump(out) == expected([SCHEMA1, *inputs[:3]], tmp_path)


def test_merged_hosts_keep_their_facts_and_are_shared(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    out = tmp_path / "out.sqlite"
    merge(out, inputs)
    s = Store.open_existing(out)
    per_host = dict(
        s.db.execute(
            "SELECT h.hostname, COUNT(*) FROM sweeps s JOIN hosts h ON h.id=s.host_id "
            "GROUP BY h.hostname"
        ).fetchall()
    )
    assert per_host == {"host-a": 3, "host-b": 1, "host-c": 2, "vm": 1}
    cpu = dict(s.db.execute("SELECT hostname, cpu_model FROM hosts").fetchall())
    assert cpu["host-b"] == "cpu of host-b"
    s.close()


def test_a_running_sweep_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    busy = tmp_path / "busy.sqlite"
    s = Store(busy)
    make_sweep(s, "host-d", "quick", status="running")
    s.close()
    out = tmp_path / "out.sqlite"
    merge(out, inputs[:1])
    kept = digest(out)
    with pytest.raises(
        MergeConflict, match=r"busy.sqlite: sweep 1 \(quick\) is still running"
    ) as err:
        merge(out, [inputs[1], busy])
    assert "\n" not in err.value.one_line() and "nothing was merged" in err.value.one_line()
    assert digest(out) == kept
    with pytest.raises(MergeConflict):
        merge(tmp_path / "new.sqlite", [busy])
    assert not (tmp_path / "new.sqlite").exists()


def test_the_same_sweep_with_other_runs_is_a_conflict(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    out = tmp_path / "out.sqlite"
    merge(out, inputs[:2])
    kept = digest(out)
    # The same database after one more run of an already merged sweep (its sweep row unchanged).
    grown = tmp_path / "grown.sqlite"
    shutil.copy(inputs[0], grown)
    s = Store(grown)
    s.record_run(run(1, "rand-read-4k", 7.0, t0=900.0))
    s.close()
    with pytest.raises(
        MergeConflict,
        match=r"plan quick on host host-a .* already merged with other contents "
        r"\(has a runs row \(workload='rand-read-4k', attempt=4\)",
    ):
        merge(out, [grown])
    assert digest(out) == kept
    # A run missing from it is one too, and so is a changed sample value.
    for sql, what in (
        (
            "DELETE FROM samples WHERE run_id=(SELECT MAX(id) FROM runs); "
            "DELETE FROM monitor WHERE run_id=(SELECT MAX(id) FROM runs); "
            "DELETE FROM runs WHERE id=(SELECT MAX(id) FROM runs)",
            r"merged copy has 6 runs rows of a cell where this database has 5",
        ),
        ("UPDATE samples SET value=value+1 WHERE rowid=1", r"samples row .* differs in value"),
        ("UPDATE monitor SET value=value+1 WHERE rowid=1", r"its monitor rows differ"),
        ("UPDATE sweeps SET status='finished', finished_at=1 WHERE id=1", r"finished_at differ"),
    ):
        changed = tmp_path / "changed.sqlite"
        shutil.copy(inputs[0], changed)
        db = sqlite3.connect(changed)
        db.executescript(sql)
        db.close()
        with pytest.raises(MergeConflict, match=what):
            merge(out, [changed])
        assert digest(out) == kept


def test_bad_inputs_and_outputs_are_one_line_errors(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database\n" * 100)
    out = tmp_path / "out.sqlite"
    with pytest.raises(UserError, match=r"junk\.sqlite is not an iomatrix results database"):
        merge(out, [inputs[0], junk])
    assert not out.exists()
    newer = tmp_path / "newer.sqlite"
    shutil.copy(inputs[0], newer)
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(UserError, match="written by a newer iomatrix"):
        merge(out, [newer])
    with pytest.raises(UserError, match="does not exist"):
        merge(out, [tmp_path / "missing.sqlite"])
    with pytest.raises(UserError, match=r"directory .* does not exist"):
        merge(tmp_path / "no" / "out.sqlite", inputs[:1])
    with (
        exclusive(db_lock_path(out), f"results database {out}"),
        pytest.raises(UserError, match="is in use by"),
    ):
        merge(out, inputs[:1])
    assert not out.exists()


def test_the_cli_merges_and_the_reports_read_the_result(tmp_path: Path) -> None:
    inputs = fleet(tmp_path)
    out = tmp_path / "fleet.sqlite"
    done = run_cli("merge", str(out), *map(str, inputs))
    assert done.returncode == 0, done.stderr
    assert (
        "schema1.sqlite (schema 1, migrated on a copy): 1 sweep(s) added with 4 run(s)"
        in done.stdout
    )
    assert f"{out}: 4 host(s), 7 sweep(s)" in done.stdout
    again = run_cli("merge", str(out), str(inputs[0]))
    assert "0 sweep(s) added with 0 run(s), 2 already merged" in again.stdout
    results = run_cli("results", "--db", str(out), "--format", "json")
    assert results.returncode == 0, results.stderr
    grown = tmp_path / "grown.sqlite"
    shutil.copy(inputs[0], grown)
    db = sqlite3.connect(grown)
    db.execute("UPDATE sweeps SET notes_json='[]' WHERE id=1")
    db.commit()
    db.close()
    refused = run_cli("merge", str(out), str(grown))
    assert refused.returncode == 2 and refused.stderr.startswith("error:"), refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "notes_json" in refused.stderr


def test_a_symlinked_output_is_locked_and_written_through_and_a_failed_merge_leaves_no_lock(
    tmp_path: Path,
) -> None:
    inputs = fleet(tmp_path)
    real = tmp_path / "real.sqlite"
    alias = tmp_path / "alias.sqlite"
    alias.symlink_to(real.name)
    merge(alias, inputs[:1])
    assert alias.is_symlink() and real.is_file()  # written through the link, the link kept
    merge(alias, inputs[1:2])
    assert alias.is_symlink() and dump(real) == expected(inputs[:2], tmp_path)
    # A merge into the target while one holds the link's lock (the same file) is refused.
    with (
        exclusive(db_lock_path(alias), f"results database {alias}"),
        pytest.raises(UserError, match="in use by"),
    ):
        merge(real, inputs[2:3])
    assert db_lock_path(alias) == db_lock_path(real) == tmp_path / "real.sqlite.lock"
    # A failed merge (a damaged input) leaves the output as it was and no lock file.
    kept = digest(real)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database\n" * 100)
    with pytest.raises(UserError):
        merge(alias, [junk])
    assert digest(real) == kept and alias.is_symlink()
    assert not list(tmp_path.glob("*.lock"))


@pytest.mark.parametrize(
    ("value", "shown"), [("'garbage'", "'garbage'"), ("9e999", "Inf"), ("-5.0", "-5.0")]
)
def test_merge_refuses_a_sample_that_is_not_a_measurement_naming_its_row(
    tmp_path: Path, value: str, shown: str
) -> None:
    inputs = fleet(tmp_path)
    bad = tmp_path / "bad.sqlite"
    shutil.copy(inputs[0], bad)
    db = sqlite3.connect(bad)
    run_id, metric = db.execute(
        "SELECT run_id, metric FROM samples ORDER BY rowid LIMIT 1"
    ).fetchone()
    db.execute(f"UPDATE samples SET value={value} WHERE rowid=(SELECT MIN(rowid) FROM samples)")
    db.commit()
    db.close()
    out = tmp_path / "out.sqlite"
    with pytest.raises(
        UserError, match=rf"bad\.sqlite.*samples row \(run {run_id}, metric '{metric}'\)"
    ) as err:
        merge(out, [inputs[1], bad])
    assert shown in err.value.one_line() and "\n" not in err.value.one_line()
    assert not out.exists()


def test_one_machine_swept_before_and_after_an_upgrade_is_one_host(tmp_path: Path) -> None:
    """A host row is a machine with its software: the same machine before and after a QEMU upgrade
    is two rows in the database (its runs must stay apart) and one host in what merge says."""
    before, after = tmp_path / "before.sqlite", tmp_path / "after.sqlite"
    for path, qemu, plan in ((before, "7.2.0", "quick"), (after, "8.0.0", "full")):
        s = Store(path)
        make_sweep(s, "host-a", plan, cells=1, qemu_version=qemu)
        s.close()
    out = tmp_path / "out.sqlite"
    merged = merge(out, [before, after])
    assert (merged.hosts, merged.machines) == (2, 1)
    done = run_cli("merge", str(tmp_path / "cli.sqlite"), str(before), str(after))
    assert done.returncode == 0, done.stderr
    assert "1 host(s) (2 host configurations: software or memory differ)" in done.stdout
    other = tmp_path / "other.sqlite"
    s = Store(other)
    make_sweep(s, "host-b", "quick", cells=1)
    s.close()
    assert merge(tmp_path / "two.sqlite", [before, other]).machines == 2
