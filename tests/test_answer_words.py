"""The answer's words (issues 70 and 71), on the captured quickstart (tests/data/quickstart-roles:
the built-in quick plan's roles, 128 MiB regions on a 23.5 GiB host):

* the first screen says its cache=writeback figures are memory's, within 30 lines at 80, 100 and
  160 columns and for every target (the roles' jobs had no shape, so it was never said);
* a comparison's basis is said without a count of rounds ("[paired run by run]");
* where a ratio's 95% interval is clear of 1 beside a status not decided, the answer says the
  intervals are 95% and the decision's test stricter: in the JSON, the HTML, and on the first
  screen after the pick's first "vs" line or at the end of its "more:" line where it has room,
  never at the cost of a fact or a snippet's whole form.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from iomatrix.report.headline import (
    INTERVAL_NOTE,
    TARGETS,
    Pick,
    WorkloadGain,
    headline,
    pick_interval_note,
)
from iomatrix.report.recommend import recommend
from iomatrix.report.recommend.verdict import Gain
from iomatrix.report.render import headline_text, render_recommendation
from iomatrix.report.screen import FIRST_SCREEN_LINES
from iomatrix.report.shape_findings import MEMORY_NOT_DISK
from iomatrix.stats import RatioCI
from iomatrix.store import Store
from tests.conftest import DATA

QUICKSTART = DATA / "quickstart-roles" / "sweep.sqlite"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    db = tmp_path_factory.mktemp("quickstart") / "sweep.sqlite"
    shutil.copy(QUICKSTART, db)
    s = Store.open_existing(db)
    yield s
    s.close()


def test_the_quickstarts_first_screen_says_its_writeback_figures_are_memorys(store: Store) -> None:
    rec = recommend(store, store.sweep_ids()[-1])
    for target in TARGETS:
        head = headline(rec, "vm", target)
        for width in (80, 100, 160):
            text = headline_text(head, width)
            lines = text.splitlines()
            assert len(lines) <= FIRST_SCREEN_LINES, (target, width, text)
            assert all(len(line) <= width for line in lines), (target, width, text)
            assert f"cache=writeback {MEMORY_NOT_DISK}" in " ".join(text.split()), (target, text)


def test_detail_says_a_comparisons_basis_without_a_round_count(store: Store) -> None:
    rec = recommend(store, store.sweep_ids()[-1])
    head = headline(rec, "vm")
    text = render_recommendation(rec, "table", headline=head, detail=True, width=100)
    flat = " ".join(text.split())
    assert "[paired run by run]" in flat, flat
    assert not re.search(r"\d+ rounds? both ran", flat), flat
    # the unresolved decision in the one vocabulary: the best by the figure the ranking orders by
    assert "has the best geo. mean" in flat and "has the best mean" not in flat
    assert "neither decided worse nor equivalent (within 5%)" in flat


def test_the_intervals_note_stands_where_a_ratio_clear_of_1_is_not_decided(store: Store) -> None:
    rec = recommend(store, store.sweep_ids()[-1])
    head = headline(rec, "vm")
    # raw · writeback 1.41× (1.19–1.67) cache=none on file-server:files, not told apart there
    assert head.interval_note == INTERVAL_NOTE
    assert head.as_dict()["interval_note"] == INTERVAL_NOTE
    # after the first "vs" line where the screen has room (80 columns: the <disk> is short there
    # anyway), else at the end of the "more:" line (100: the <disk> whole)
    flat = " ".join(headline_text(head, 80).split())
    assert f"on file-server:files ({INTERVAL_NOTE})" in flat, flat
    flat = " ".join(headline_text(head, 100).split())
    assert flat.endswith(f"live migration · {INTERVAL_NOTE}") and "</disk>" in flat, flat
    # Markdown is a document: the note whatever the room
    assert INTERVAL_NOTE in " ".join(headline_text(head, 100, markdown=True).split())


def _pick(status: str, low: float, high: float) -> Pick:
    gain = Gain("cache=none", "cache=none", RatioCI(1.4, low, high))
    wg = WorkloadGain("w", "read.iops", status, "QEMU's default", None, "blocklayer", "", (gain,))
    return Pick("cell", "cell", "cell", [wg])


def test_the_note_only_where_the_interval_and_the_status_disagree() -> None:
    assert pick_interval_note(_pick("tied", 1.19, 1.67)) == INTERVAL_NOTE
    assert pick_interval_note(_pick("provisional", 0.5, 0.9)) == INTERVAL_NOTE
    # decided: the interval and the status agree
    assert pick_interval_note(_pick("answer", 1.19, 1.67)) == ""
    # an interval that holds 1 beside "not told apart": nothing to explain
    assert pick_interval_note(_pick("tied", 0.89, 1.13)) == ""


def test_the_html_says_what_its_intervals_are(tmp_path: Path) -> None:
    from iomatrix.report.html import render_report

    db = tmp_path / "sweep.sqlite"
    shutil.copy(QUICKSTART, db)
    s = Store.open_existing(db)
    try:
        page = render_report(s, s.sweep_ids()[-1])
    finally:
        s.close()
    assert INTERVAL_NOTE.replace("'", "&#39;") in page


def test_cells_the_budget_cut_are_named_in_one_line(tmp_path: Path) -> None:
    """The captured quickstart with its database job's qcow2 · cache=none cell cut by the budget at
    2 runs (its stop made the budget's, its later runs removed): the answer names it, how many,
    and that the budget cut it, on the first screen and in the JSON; it is not ranked."""
    import sqlite3

    db = tmp_path / "cut.sqlite"
    shutil.copy(QUICKSTART, db)
    con = sqlite3.connect(db)
    with con:
        (cell,) = con.execute(
            "SELECT id FROM cells WHERE key='blocklayer/qcow2/off/none/threads/-/dir/none'"
        ).fetchone()
        keep = [
            r
            for (r,) in con.execute(
                "SELECT id FROM runs WHERE cell_id=? AND workload='database:data' AND "
                "status='ok' ORDER BY id",
                (cell,),
            )
        ][:2]
        con.execute(
            f"DELETE FROM runs WHERE cell_id=? AND workload='database:data' AND id NOT IN "
            f"({','.join('?' * len(keep))})",
            (cell, *keep),
        )
        con.execute(
            "UPDATE unit_stops SET kind='budget', reason='time budget spent at 2 of its 3 "
            "minimum runs', ok_runs=2 WHERE cell_id=? AND workload='database:data'",
            (cell,),
        )
    con.close()
    s = Store.open_existing(db)
    try:
        rec = recommend(s, s.sweep_ids()[-1])
    finally:
        s.close()
    said = (
        "the time budget cut 1 cell before its 3 runs, so it is not ranked: qcow2 · cache=none "
        "(database:data); a longer time_budget in the plan gives it its runs"
    )
    assert said in rec.warnings, rec.warnings
    head = headline(rec, "vm")
    assert said in head.as_dict()["warnings"]
    for width in (80, 100):
        text = headline_text(head, width)
        assert f"warning: {said}" in " ".join(text.split()), text
        assert len(text.splitlines()) <= FIRST_SCREEN_LINES, text
