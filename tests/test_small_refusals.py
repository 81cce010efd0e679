"""Smaller refusals of issue 69, each one line with exit 2 and no crash log: what a Proxmox config
without a disk lacks, a database name too long for the filesystem, a history whose sweeps name no
host the database holds; and an error line shows ':x:' and '[bold]' as written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from iomatrix.store import Store
from tests.test_bad_input_campaign import plan_text, run_cli
from tests.test_merge import make_sweep


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "100")


def one_line(argv: list[str], tmp_path: Path) -> str:
    code, out, err = run_cli(argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (code, out, err)
    assert not (tmp_path / "cache" / "iomatrix" / "logs").exists(), "a crash log"
    return lines[0]


def test_a_proxmox_config_without_a_disk_says_what_it_lacks(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(plan_text())
    conf = tmp_path / "vm.conf"
    conf.write_text("boot: order=net0\nmemory: 2048\nnet0: virtio=AA:BB:CC:DD:EE:FF,bridge=vmbr0\n")
    line = one_line(
        [
            "run",
            str(tmp_path / "p.toml"),
            "--db",
            str(tmp_path / "r.sqlite"),
            "--current",
            str(conf),
        ],
        tmp_path,
    )
    assert "no disk drive" in line and "not XML" not in line and "dumpxml" not in line, line


@pytest.mark.parametrize("command", ["results", "run"])
def test_a_database_name_too_long_is_one_line_without_a_crash_log(
    command: str, tmp_path: Path
) -> None:
    (tmp_path / "p.toml").write_text(plan_text())
    db = str(tmp_path / ("x" * 300 + ".sqlite"))
    argv = (
        ["results", "--db", db]
        if command == "results"
        else ["run", str(tmp_path / "p.toml"), "--db", db]
    )
    assert "shorter name" in one_line(argv, tmp_path)


def test_history_of_sweeps_naming_no_host_says_what_is_damaged(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    s = Store(db)
    make_sweep(s, "host-a", "quick")
    s.close()
    with sqlite3.connect(db) as con:
        con.execute("UPDATE sweeps SET host_id = 999")
    line = one_line(["history", "--db", str(db)], tmp_path)
    assert "damaged" in line and "sweeps.host_id" in line, line


def test_an_error_line_shows_emoji_codes_and_markup_as_written(tmp_path: Path) -> None:
    name = str(tmp_path / "a:x:[bold]b[/]:smile:.toml")
    line = one_line(["plan", name], tmp_path)
    assert "a:x:[bold]b[/]:smile:.toml" in line, line
