"""A database holding megabyte strings (a run's error, a host and plan name, a sweep's notes and
pruned reasons: a damaged or hostile store) is printed with each string cut and a note of how much
was left out, not laid out whole for minutes (issue 69: `results` was still printing at 90 s)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from iomatrix.store import Store
from iomatrix.ui import MAX_SHOWN_CHARS
from tests.test_bad_input_campaign import run_cli
from tests.test_merge import make_sweep

BIG = 2_000_000


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("long") / "huge.sqlite"
    s = Store(db)
    make_sweep(s, "host-a", "quick", cells=3)
    s.close()
    big = "Z" * BIG
    with sqlite3.connect(db) as con:
        con.execute("UPDATE runs SET error=? WHERE status='failed'", (big,))
        con.execute("UPDATE hosts SET hostname=?", ("h" + big,))
        con.execute(
            "UPDATE sweeps SET plan_name=?, notes_json=?, pruned_json=?",
            ("p" + big, json.dumps([big]), json.dumps([{"what": big, "reason": big}])),
        )
    return db


@pytest.mark.parametrize("command", ["results", "recommend", "history", "rank"])
def test_megabyte_strings_are_cut_with_a_note(command: str, huge: Path) -> None:
    code, out, err = run_cli([command, "--db", str(huge)])
    assert code == 0, err[-500:]
    # every string is shown at most MAX_SHOWN_CHARS long: the output is a few screens, not megabytes
    assert len(out) + len(err) < 40 * MAX_SHOWN_CHARS, len(out)
    if command != "rank":  # (rank shows none of these strings)
        assert "more characters not shown" in out + err


def test_json_keeps_a_long_string_whole(huge: Path) -> None:
    code, out, _ = run_cli(["results", "--db", str(huge), "--format", "json"])
    assert code == 0 and "Z" * BIG in out
