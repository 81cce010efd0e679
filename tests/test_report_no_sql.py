"""Reports read the store through its typed query API (store/queries.py), never SQL of their own."""

from __future__ import annotations

import re
from pathlib import Path

import iomatrix.report
from iomatrix.store import RunListing, Store
from iomatrix.store.schema import CELL_AXIS_COLUMNS

REPORT = Path(iomatrix.report.__file__).parent
# What reaching the database looks like in source: the connection, a statement, the driver, SQL
# keywords.
SQL = re.compile(
    r"\.db\b|\bexecute(many)?\(|\bsqlite3\b|\bPRAGMA\b|\bSELECT\b|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\bDELETE\s+FROM\b"
)
# Modules still holding SQL that another change moves behind store/queries.py; each entry must still
# need it.
NOT_YET: set[str] = set()  # none since the "Every run" listing moved to store/queries.py


def sql_lines(path: Path) -> list[str]:
    return [
        f"{path.name}:{i}: {line.strip()}"
        for i, line in enumerate(path.read_text().splitlines(), start=1)
        if SQL.search(line)
    ]


def test_no_report_module_touches_the_database() -> None:
    modules = sorted(REPORT.rglob("*.py"))
    assert len(modules) > 5
    found = [hit for m in modules if m.name not in NOT_YET for hit in sql_lines(m)]
    assert found == [], "report modules must use store/queries.py:\n" + "\n".join(found)


def test_the_exemptions_are_still_needed() -> None:
    for name in NOT_YET:
        assert sql_lines(REPORT / name), f"report/{name} has no SQL any more: drop it from NOT_YET"


def test_the_check_sees_sql() -> None:
    for line in (
        'rows = store.db.execute("SELECT id FROM runs")',
        'cols = con.execute("PRAGMA table_info(runs)")',
        "import sqlite3",
    ):
        assert SQL.search(line), line
    assert not SQL.search("store.run_boots(run_ids)  # selected runs")


def test_the_every_run_listing_comes_typed_from_the_store() -> None:
    """store.run_listing, which the "Every run" table is built from: every run of a real sweep (ok
    and failed), in run order, with its cell's axis columns and the same metrics the samples hold
    for the ok runs."""
    golden = Path(__file__).parent / "data" / "golden" / "quick-sweep.sqlite"
    store = Store.open_existing(golden)
    try:
        sweep = store.sweep_ids()[0]
        listing = store.run_listing(sweep)
        assert all(isinstance(r, RunListing) for r in listing) and listing
        assert [r.run_id for r in listing] == sorted(r.run_id for r in store.runs(sweep))
        assert all(list(r.axes) == list(CELL_AXIS_COLUMNS) and r.axes["tier"] for r in listing)
        ok = {}
        for s in store.ok_samples(sweep):
            ok.setdefault(s.run_id, {})[s.metric] = s.value
        assert {r.run_id: r.metrics for r in listing if r.status == "ok"} == ok
        assert (
            store.run_raw_output(listing[0].run_id) is not None
            and store.run_raw_output(10**9) is None
        )
    finally:
        store.close()
