"""Damaged results databases (issue 50): every value read is validated in the store, by the schema's
own types.

A damaged row is one line naming its table, row and column; a report skips it and says how many, a
sweep and a merge refuse the file. Never a traceback, never a negative, infinite or missing sample
taken as a measurement.

The named cases are the ones a campaign found failing (tracebacks, a silent `rank`); the generated
ones start from a real sweep's database (tests/data/golden/quick-sweep.sqlite, trimmed to two cells
so each case costs little) and damage it in every way: random bytes on each page (the schema page
included, seeded), a wrong type in each column of each table (read from the schema, not listed by
hand), negatives, NaN and infinities in each number column."""

from __future__ import annotations

import math
import random
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.store import Store
from iomatrix.store.integrity import MEASUREMENTS, column_types
from iomatrix.store.schema import SCHEMA_VERSION
from tests.conftest import DATA
from tests.test_bad_input_campaign import run_cli

GOLDEN = DATA / "golden" / "quick-sweep.sqlite"


# The CLI in-process, as the bad-input campaign runs it: (exit status, stdout, stderr).
run_main = run_cli


def damaged_copy(tmp: Path, sql: str, source: Path = GOLDEN) -> Path:
    db = tmp / "d.sqlite"
    shutil.copyfile(source, db)
    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()
    return db


def no_traceback(code: int, out: str, err: str) -> None:
    assert code in (0, 2) and "Traceback" not in out + err and "internal error" not in err, (
        code,
        err,
    )


# -- the campaign's examples: each failed before (a traceback, or a silent exit 0) -----------------


def schema_page_not_utf8(tmp: Path) -> Path:
    """The golden database with random bytes on its schema page that are not UTF-8 where SQLite
    reads the schema (the first seed that does so: SQLite's message then quotes them, and Python
    could not decode it)."""
    data = GOLDEN.read_bytes()
    for seed in range(200):
        rnd = random.Random(seed)
        damaged = bytearray(data)
        at, n = rnd.randrange(100, 4096 - 16), rnd.randint(1, 64)
        damaged[at : at + n] = rnd.randbytes(n)
        path = tmp / f"schema-{seed}.sqlite"
        path.write_bytes(bytes(damaged))
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except UnicodeDecodeError:
            return path
        except sqlite3.DatabaseError:
            pass
        finally:
            con.close()
        path.unlink()
    raise AssertionError("no seed puts bytes that are not UTF-8 into the schema SQLite reads")


@pytest.mark.parametrize("command", ["results", "rank", "recommend", "merge"])
def test_random_bytes_on_the_schema_page_are_one_line(tmp_path: Path, command: str) -> None:
    db = schema_page_not_utf8(tmp_path)
    argv = (
        ["merge", str(tmp_path / "m.sqlite"), str(db)]
        if command == "merge"
        else [command, "--db", str(db)]
    )
    code, out, err = run_main(argv)
    no_traceback(code, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    assert f"results database {db} is damaged: its schema page (sqlite_master)" in lines[0], lines[
        0
    ]
    assert not (tmp_path / "m.sqlite").exists()


@pytest.mark.parametrize(
    ("sql", "command", "place"),
    [
        (
            "UPDATE sweeps SET started_at='garbage'",
            "results",
            "sweeps row 1 holds 'garbage' in column started_at",
        ),
        (
            "UPDATE hosts SET cpu_count='garbage'",
            "rank",
            "hosts row 1 holds 'garbage' in column cpu_count",
        ),
        (
            "UPDATE unit_stops SET ok_runs='garbage' WHERE rowid=3",
            "results",
            "unit_stops row (cell 1, workload 'seq-write-1m') holds 'garbage' in column ok_runs",
        ),
    ],
)
def test_text_where_a_number_belongs_is_named_and_skipped(
    tmp_path: Path, sql: str, command: str, place: str
) -> None:
    db = damaged_copy(tmp_path, sql)
    code, out, err = run_main([command, "--db", str(db)])
    no_traceback(code, out, err)
    warned = [ln for ln in err.splitlines() if ln.startswith("warning:") and "damaged row" in ln]
    assert len(warned) == 1 and "1 damaged row skipped" in warned[0] and place in warned[0], err
    # the only sweep was the damaged row (or stood on it): nothing left to report, said in one line
    if code == 2:
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert (
            len(errors) == 1 and "no sweep left once its damaged rows are skipped" in errors[0]
        ), err
    # merge refuses the file with the same words, and writes nothing
    code, out, err = run_main(["merge", str(tmp_path / "m.sqlite"), str(db)])
    assert (
        code == 2 and f"results database {db} is damaged: {place}" in err and "Traceback" not in err
    ), err
    assert not (tmp_path / "m.sqlite").exists()


def test_a_negative_sample_is_skipped_by_rank_and_said(tmp_path: Path) -> None:
    db = damaged_copy(tmp_path, "UPDATE samples SET value=-5 WHERE rowid=1")
    code, out, err = run_main(["rank", "--db", str(db)])
    # it ranks the rest (before: it printed nothing and exited 0)
    assert code == 0 and out.strip(), err
    warned = [ln for ln in err.splitlines() if "damaged row" in ln]
    assert len(warned) == 1 and "holds -5.0 in column value, not a measurement" in warned[0], err
    # no figure -5 (a kernel release such as 6.1.0-56 in the guest's line is no figure)
    assert not re.search(r"(?<![\w.])-5(?:\.0+)?(?![\w%.])", out), out
    code, _, err = run_main(["merge", str(tmp_path / "m.sqlite"), str(db)])
    assert code == 2 and "samples row (run 1, metric " in err and "holds -5.0" in err, err


# -- the generated campaign ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden sweep's database at the current schema, trimmed to its first two cells (every
    table keeps rows; one run of several clients is added, the only table the golden sweep left
    empty)."""
    path = tmp_path_factory.mktemp("sound") / "sound.sqlite"
    shutil.copyfile(GOLDEN, path)
    Store(path).close()  # migrated by the store's own steps
    con = sqlite3.connect(path)
    keep = "(SELECT id FROM cells WHERE id <= 2)"
    runs = f"(SELECT id FROM runs WHERE cell_id IN {keep})"
    for table, owner in (
        ("samples", f"run_id IN {runs}"),
        ("monitor", f"run_id IN {runs}"),
        ("unit_stops", f"cell_id IN {keep}"),
        ("cell_axes", f"cell_id IN {keep}"),
        ("runs", f"cell_id IN {keep}"),
        ("cells", "id <= 2"),
    ):
        con.execute(f"DELETE FROM {table} WHERE NOT ({owner})")
    con.execute(
        "INSERT INTO run_clients SELECT run_id, 0, metric, value FROM samples WHERE rowid = "
        "(SELECT MIN(rowid) FROM samples)"
    )
    con.commit()
    con.execute("VACUUM")
    con.close()
    assert all(
        sqlite3.connect(path).execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in column_types(SCHEMA_VERSION)
    )
    return path


def read_everything(store: Store) -> None:
    """Every read of the store's API a report makes, over every sweep; a sample read is a
    measurement."""
    store.fleet_sweeps()
    for sid in store.sweep_ids():
        store.sweep(sid)
        runs = store.runs(sid)
        store.run_listing(sid)
        store.unit_stops(sid)
        store.failed_runs(sid)
        store.run_window(sid)
        store.ok_run_series(sid)
        values = [s.value for s in store.ok_samples(sid)]
        values += [v for vs in store.run_client_metrics(sid, "read.iops").values() for v in vs]
        ids = [r.run_id for r in runs]
        values += list(store.run_metric_values(ids, "read.iops").values())
        store.run_round_numbers(ids)
        store.run_boots(ids)
        for r in runs[:3]:
            store.monitor_points(r.run_id)
            values += store.metric_series(r.cell_id, r.workload, "read.iops")
        assert all(math.isfinite(v) and v >= 0 for v in values), values


def judge(db: Path, place: tuple[str, str] | None = None) -> str:
    """Open `db` as a report does and as merge does; the outcome in a word. `place`: the (table,
    column) damaged, which the one line must name."""
    try:
        report = Store.open_existing(db, skip_damaged=True)
    except UserError as err:
        assert "\n" not in err.one_line()
        outcome = "refused"
    else:
        try:
            read_everything(report)
            damage = report.damage
        finally:
            report.close()
        if not damage:
            return "sound"
        if place is not None and damage.first is not None:
            assert (damage.first.table, damage.first.column) == place, (str(damage), place)
        outcome = "skipped"
    with pytest.raises(UserError) as refused:  # merge and run: never a damaged file
        Store.open_existing(db).close()
    line = refused.value.one_line()
    assert ("\n" not in line and "damaged" in line) or "not an iomatrix results database" in line, (
        line
    )
    if place is not None and outcome == "skipped":
        assert f"{place[0]} row" in line and f"column {place[1]}" in line, line
    return outcome


def test_random_bytes_on_every_page(tmp_path: Path, sound: Path) -> None:
    data = sound.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    pages = len(data) // page
    outcomes: dict[str, int] = {}
    for p in range(pages):
        rnd = random.Random(p)  # seeded: the same campaign every time
        damaged = bytearray(data)
        # past the header's magic on the first (schema) page
        start = p * page + (100 if p == 0 else 0)
        for _ in range(3):
            at, n = rnd.randrange(start, (p + 1) * page - 8), rnd.randint(1, 48)
            damaged[at : at + n] = rnd.randbytes(n)
        db = tmp_path / f"page-{p}.sqlite"
        db.write_bytes(bytes(damaged))
        outcome = judge(db)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        db.unlink()
    assert pages >= 10 and sum(outcomes.values()) == pages
    # both kinds of damage were met
    assert outcomes.get("refused", 0) and outcomes.get("skipped", 0), outcomes


# a value of another type per type
WRONG = {"INTEGER": "'garbage'", "REAL": "'garbage'", "TEXT": "x'00ff'"}


def column_cases() -> list[tuple[str, str, str]]:
    """(table, column, value) for every column of every table of the current schema, and for every
    number column also the values no measurement or time is: negative (where it must be ≥ 0) and
    ±infinite. (A NaN is stored by SQLite as NULL, which every NOT NULL number column refuses to
    store.)"""
    cases = []
    for table, cols in column_types(SCHEMA_VERSION).items():
        for name, col in cols.items():
            # the rowid itself; meta: the version, checked by inspect
            if name == "id" or table == "meta":
                continue
            cases.append((table, name, WRONG[col.type]))
            if col.type == "REAL":
                cases += [(table, name, v) for v in ("1e999", "-1e999")]
                if (table, name) in MEASUREMENTS:
                    cases.append((table, name, "-5"))
    return cases


def test_a_wrong_value_in_every_column(tmp_path: Path, sound: Path) -> None:
    cases = column_cases()
    assert len(cases) >= 100
    # The generator sees every column the schema has, and the measurement columns get their
    # negatives.
    assert ("hosts", "cpu_count", "'garbage'") in cases and ("samples", "value", "-5") in cases
    assert ("run_clients", "value", "-5") in cases and (
        "unit_stops",
        "ok_runs",
        "'garbage'",
    ) in cases
    problems = []
    for table, name, value in cases:
        db = tmp_path / "c.sqlite"
        shutil.copyfile(sound, db)
        con = sqlite3.connect(db)
        con.execute(
            f"UPDATE {table} SET {name} = {value} WHERE rowid = (SELECT MIN(rowid) FROM {table})"
        )
        con.commit()
        con.close()
        try:
            if judge(db, (table, name)) != "skipped":
                problems.append(f"{table}.{name} = {value}: not found")
        except AssertionError as err:
            problems.append(f"{table}.{name} = {value}: {err}")
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", '"fast"', "null"])
def test_nan_and_infinities_in_a_runs_phases_are_no_measurement(
    tmp_path: Path, sound: Path, value: str
) -> None:
    # SQLite stores a float NaN as NULL, which samples.value (NOT NULL) refuses: a NaN reaches a
    # file only in JSON.
    con = sqlite3.connect(sound)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            con.execute("UPDATE samples SET value = 0.0 * 1e999")  # (Inf·0: NaN → NULL)
    finally:
        con.close()
    db = damaged_copy(
        tmp_path,
        f"UPDATE runs SET phases_json = '{{\"fio_s\": {value}}}' WHERE id = "
        "(SELECT MIN(id) FROM runs)",
        source=sound,
    )
    assert judge(db, ("runs", "phases_json")) == "skipped"


@pytest.mark.parametrize(
    "values",
    [
        [b"caf\xe9"],  # a Latin-1 byte
        # a cut sequence, and a row starting where it would go on: both named
        [b"ab\xe2\x82", b"\xac cd"],
        [b"ok \xe2\x82\xac", b"\xed\xa0\x80"],  # a surrogate after sound text
    ],
)
def test_text_that_is_not_utf8_is_named_in_every_text_column(
    tmp_path: Path, sound: Path, values: list[bytes]
) -> None:
    """The scan decodes each text column at once (issue 52): a bad row among sound ones, or bad rows
    side by side whose bytes would join into UTF-8, are still each found, in every TEXT column of
    the schema."""
    from iomatrix.store.integrity import find_damage

    checked = 0
    for table, cols in column_types(SCHEMA_VERSION).items():
        for name, col in cols.items():
            if col.type != "TEXT" or table == "meta":
                continue
            db = tmp_path / "u.sqlite"
            shutil.copyfile(sound, db)
            con = sqlite3.connect(db)
            rowids = [
                r[0]
                for r in con.execute(
                    f"SELECT rowid FROM {table} WHERE typeof({name}) = 'text' "
                    f"ORDER BY rowid LIMIT {len(values)}"
                )
            ]
            if len(rowids) < len(values):
                con.close()
                continue
            for rowid, raw in zip(rowids, values, strict=True):
                con.execute(
                    f"UPDATE {table} SET {name} = CAST(? AS TEXT) WHERE rowid = ?", (raw, rowid)
                )
            con.commit()
            damage = find_damage(con, SCHEMA_VERSION)
            con.close()
            bad = {rowid for rowid, raw in zip(rowids, values, strict=True) if not _decodes(raw)}
            assert bad <= damage.rows.get(table, set()), (table, name, str(damage))
            assert damage.first is not None and damage.first.why == "not UTF-8 text", (
                table,
                name,
                str(damage),
            )
            checked += 1
    assert checked >= 10


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
