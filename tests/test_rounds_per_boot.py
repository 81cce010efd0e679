"""repetitions_per_boot = "auto": the plan value, the boot ledger the runner keeps, and (slow) a
real guest sweep that records its choice with every run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.plan.load import load_plan
from iomatrix.runner import BootLedger
from iomatrix.tiers.base import RunOutcome
from tests.conftest import needs, run_cli

BASE = 'tier = ["guest"]\n[[backing]]\ntype = "dir"\n'


@pytest.mark.parametrize("value", ['"sometimes"', "0", "9", "true", "2.5"])
def test_bad_repetitions_per_boot_is_a_one_line_error_listing_the_valid_values(
    tmp_path: Path, value: str
) -> None:
    (tmp_path / "p.toml").write_text(f"repetitions_per_boot = {value}\n" + BASE)
    with pytest.raises(UserError) as err:
        load_plan(str(tmp_path / "p.toml"))
    assert "repetitions_per_boot" in str(err.value) and 'valid values: 1 to 8, or "auto"' in str(
        err.value
    )
    assert "\n" not in str(err.value)


def test_auto_starts_with_two_rounds_and_a_number_is_fixed(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('repetitions_per_boot = "auto"\n' + BASE)
    plan, _ = load_plan(str(tmp_path / "p.toml"))
    assert plan.adaptive_rounds_per_boot and plan.start_rounds_per_boot == 2
    (tmp_path / "p.toml").write_text("repetitions_per_boot = 3\n" + BASE)
    plan, _ = load_plan(str(tmp_path / "p.toml"))
    assert not plan.adaptive_rounds_per_boot and plan.start_rounds_per_boot == 3


def _out(position: int, wall: float) -> RunOutcome:
    return RunOutcome(ok=True, phases={"wall_s": wall}, boot_id="b", boot_position=position)


def test_boot_ledger_splits_a_batch_into_boot_and_round_cost() -> None:
    ledger = BootLedger()
    assert ledger.boot_cost_s() is None and ledger.round_cost_s() is None
    # Runs after the first took 6, 7, 8 s (median 7); 4 runs in a 40 s batch: c_boot = 40 − 4·7 = 12
    # s; two workloads in the cell: a round costs 14 s. The first run's 9 s (with the boot) is not a
    # run cost.
    ledger.add_batch([_out(0, 9.0), _out(1, 6.0), _out(2, 8.0), _out(3, 7.0)], 40.0, units=2)
    assert ledger.boot_cost_s() == pytest.approx(12.0) and ledger.round_cost_s() == pytest.approx(
        14.0
    )
    # c_boot 10, round 10 → medians 11, 12
    ledger.add_batch([_out(0, 9.0), _out(1, 5.0)], 20.0, units=2)
    assert ledger.boot_cost_s() == pytest.approx(11.0) and ledger.round_cost_s() == pytest.approx(
        12.0
    )
    # a one-run boot says nothing about a run's own cost
    ledger.add_batch([_out(0, 9.0)], 20.0, units=1)
    assert ledger.boot_cost_s() == pytest.approx(11.0)
    ledger.add_run("u", "b", 0, 5.0)
    assert ledger.runs == {"u": [("b", 0, 5.0)]}


@pytest.mark.slow
@needs("qemu-system-x86_64")
def test_auto_rounds_per_boot_records_its_choice_with_every_run(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        'tier = ["guest"]\nformat = ["qcow2"]\ncache = ["none"]\nbus = ["virtio-blk"]\n'
        'workloads = ["rand-write-4k", "rand-read-4k"]\nsize = "16M"\nimage_size = '
        '"64M"\nruntime = 0.5\n'
        "run_timeout = 120\nnull_ceiling = false\nrepetitions_per_boot = "
        '"auto"\nretry_disturbed = false\n'
        "[repetitions]\nmin = 6\nmax = 6\n"
    )
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    con = sqlite3.connect(tmp_path / "r.sqlite")
    rows = con.execute(
        "SELECT boot_id, round, json_extract(meta_json, '$.rounds_per_boot') FROM runs "
        "WHERE status = 'ok' ORDER BY started_at"
    ).fetchall()
    assert len(rows) == 12
    choices = [json.loads(r[2]) for r in rows]
    assert all(c["mode"] == "auto" for c in choices)
    # The first boot holds the start value, 2 rounds, before anything is measured.
    assert choices[0]["rounds"] == 2 and "to start" in choices[0]["reason"]
    rounds_of: dict[str, set[int]] = {}
    for (boot, rnd, _), c in zip(rows, choices, strict=True):
        rounds_of.setdefault(boot, set()).add(rnd)
        # no boot holds more rounds than its recorded choice
        assert len(rounds_of[boot]) <= c["rounds"]
    # After two boots the variances are estimable: the choice names its reason, and the progress
    # says so.
    assert any("median of 2 units' optimum" in c["reason"] for c in choices)
    assert "guest boots:" in proc.stdout + proc.stderr
    # Each boot dropped the caches behind its gate, and each boot after the first removed the
    # previous boot's images there first (the whole removal is recorded with the boot that waited
    # for it).
    boots = con.execute(
        "SELECT boot_id, MIN(started_at), json_extract(meta_json, '$.boot_phases.host_ready_s'), "
        "json_extract(meta_json, '$.boot_host_s.previous_images_remove_s'), cache_state FROM runs "
        "WHERE boot_id IS NOT NULL GROUP BY boot_id ORDER BY 2"
    ).fetchall()
    assert len(boots) >= 3 and all(b[2] is not None and b[4] == "dropped" for b in boots)
    assert boots[0][3] is None and all(b[3] is not None for b in boots[1:])
    assert not [p for p in (tmp_path / "iomatrix-work").rglob("*") if p.suffix == ".qcow2"]
