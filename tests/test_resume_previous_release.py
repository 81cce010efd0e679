"""A sweep the previous release left interrupted resumes under this one.

`data/golden/interrupted-schema4.sqlite` was written by the release before the axis registry (schema
4) running `interrupted-schema4.toml` (bare metal, cache none and writeback, 3 repetitions) and
stopped by SIGTERM after 5 runs. `iomatrix run` with the same plan must migrate it (after a backup),
recognise the sweep, keep its runs and run only what is left."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import DATA, needs, run_cli

OLD = DATA / "golden" / "interrupted-schema4.sqlite"
PLAN = DATA / "golden" / "interrupted-schema4.toml"


@pytest.mark.slow
@needs("fio")
def test_interrupted_sweep_of_the_previous_release_resumes(tmp_path: Path) -> None:
    db = tmp_path / "prev.sqlite"
    shutil.copy(OLD, db)
    shutil.copy(PLAN, tmp_path / "tiny.toml")
    con = sqlite3.connect(OLD)
    before = con.execute(
        "SELECT r.id, c.key, r.attempt, r.started_at FROM runs r JOIN cells c ON c.id=r.cell_id "
        "ORDER BY r.id"
    ).fetchall()
    con.close()
    proc = run_cli(
        "run", "tiny.toml", "--db", str(db), "--workdir", str(tmp_path / "work"), cwd=tmp_path
    )
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    assert "resum" in proc.stdout.lower(), proc.stdout
    assert (tmp_path / "prev.sqlite.schema4.bak").is_file()
    con = sqlite3.connect(db)
    # the same sweep, not a new one
    assert con.execute("SELECT COUNT(*) FROM sweeps").fetchone()[0] == 1
    assert con.execute("SELECT status FROM sweeps").fetchone()[0] == "finished"
    after = con.execute(
        "SELECT r.id, c.key, r.attempt, r.started_at FROM runs r JOIN cells c ON c.id=r.cell_id "
        "ORDER BY r.id"
    ).fetchall()
    assert after[: len(before)] == before  # every earlier run kept as it was
    ok = dict(
        con.execute(
            "SELECT c.key, COUNT(*) FROM runs r JOIN cells c ON c.id=r.cell_id WHERE r.status='ok' "
            "AND r.id NOT IN (SELECT retry_of FROM runs WHERE retry_of IS NOT NULL) GROUP BY c.key"
        )
    )
    assert set(ok) == {
        "baremetal/-/-/none/threads/-/dir/none",
        "baremetal/-/-/writeback/threads/-/dir/none",
    }
    assert all(n >= 3 for n in ok.values()), ok
    # The old cells got their axes as rows when the file was migrated.
    assert con.execute("SELECT COUNT(DISTINCT cell_id) FROM cell_axes").fetchone()[0] == 2
    con.close()
