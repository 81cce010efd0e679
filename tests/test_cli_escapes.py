"""Text from plans and databases reaches the terminal with its control characters escaped: a
description, a backing name, a plan or host name holding a screen clear, a window-title OSC or a
right-to-left override is shown
as written (`\\x1b[2J`), never obeyed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.store import Store
from iomatrix.textfile import escape_controls
from tests.conftest import run_cli
from tests.test_merge import AXES, run

SEQUENCES = {
    "clear-screen": "\x1b[2J",
    "osc-title": "\x1b]0;owned\x07",
    "right-to-left": "\u202e",
    "c1-csi": "\x9b31m",
}
# Not controls, but what rich would rewrite: an emoji code (':x:' in a passwd line became ❌) and
# markup. Every text path below shows them as written.
REWRITTEN = {"emoji-and-markup": ":x:[bold]b[/]:smile:"}
RAW = ("\x1b", "\x07", "\u202e", "\x9b")


def assert_escaped(text: str, seq: str) -> None:
    assert not any(c in text for c in RAW), repr(text[:400])
    assert escape_controls(seq).replace("\\x07", "") in text  # (rich drops a BEL itself)


@pytest.mark.parametrize("seq", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_escape_controls_makes_every_sequence_visible(seq: str) -> None:
    shown = escape_controls(f"a{seq}b\tc\n")
    assert not any(c in shown for c in RAW) and shown.startswith("a\\") and shown.endswith("b\tc\n")


@pytest.mark.parametrize(
    "seq", (SEQUENCES | REWRITTEN).values(), ids=(SEQUENCES | REWRITTEN).keys()
)
def test_plan_prints_a_hostile_description_and_backing_name_escaped(
    tmp_path: Path, seq: str
) -> None:
    toml_seq = seq.encode("unicode_escape").decode().replace("\\x", "\\u00")
    (tmp_path / "p.toml").write_text(
        f'tier = ["baremetal"]\ndescription = "before {toml_seq} after"\n'
        f'[[backing]]\ntype = "dir"\nname = "b{toml_seq}x"\n'
    )
    proc = run_cli("plan", "p.toml", "--explain", cwd=tmp_path)
    # refusing such a name at load is as safe as escaping it: one line, escaped too
    if proc.returncode == 2:
        assert_escaped(proc.stderr, seq)
        return
    assert proc.returncode == 0, proc.stderr
    assert "before " in proc.stdout and " after" in proc.stdout
    assert_escaped(proc.stdout, seq)


@pytest.mark.parametrize(
    "seq", (SEQUENCES | REWRITTEN).values(), ids=(SEQUENCES | REWRITTEN).keys()
)
def test_results_and_rank_print_hostile_database_text_escaped(tmp_path: Path, seq: str) -> None:
    db = tmp_path / "r.sqlite"
    s = Store(db)
    host = s.host_id({"hostname": f"host{seq}", "kernel": "6.1"})
    sweep = s.create_sweep(
        host, f"plan{seq}", "fp", json.dumps({"name": "plan", "description": f"d{seq}"}), [], []
    )
    for c, cache in enumerate(("none", "writeback")):
        cell = s.cell_id(
            sweep,
            f"cell{seq}{c}",
            {**AXES, "cache": cache, "backing": f"bk{seq}"},
            {"name": f"n{seq}"},
        )
        for i in range(3):
            s.record_run(run(cell, "rand-read-4k", 100.0 + c * 10 + i, t0=100.0 + i))
    s.set_sweep_status(sweep, "finished")
    s.close()
    for command in (
        ("results",),
        ("rank", "--min-runs", "2"),
        ("recommend", "--min-runs", "2"),
        ("history",),
        ("results", "--format", "table"),
    ):
        proc = run_cli(*command, "--db", str(db))
        assert proc.returncode == 0, proc.stderr
        assert_escaped(proc.stdout + proc.stderr, seq)


@pytest.mark.parametrize("seq", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_a_table_column_is_as_wide_as_the_escaped_text(seq: str) -> None:
    # Escaping after layout let a hostile cell widen its row past the column Rich measured for it
    # (an ESC is 0 columns to Rich, `\x1b` is 4 on screen): every row of a table must end where the
    # others do.
    import io

    from rich.table import Table

    from iomatrix.ui import EscapingConsole

    out = io.StringIO()
    console = EscapingConsole(file=out, width=100, highlight=False)
    table = Table("name", "value", box=None)
    table.add_row(f"a{seq}b", "1")
    table.add_row("plain-name-of-some-length", "2")
    console.print(table)
    lines = out.getvalue().splitlines()
    assert not any(c in out.getvalue() for c in RAW)
    assert len({len(line.rstrip()) for line in lines[1:]}) == 1, lines
    assert lines[1].rstrip().endswith("1") and lines[2].rstrip().endswith("2")


def test_plan_prints_markup_in_a_description_as_written(tmp_path: Path) -> None:
    # A description is the plan author's text: '[bold]' or '[/]' in it is shown, not obeyed (and
    # '[/]' alone would make Rich raise a markup error).
    (tmp_path / "p.toml").write_text(
        'tier = ["baremetal"]\ndescription = "a [bold]b[/] c [/] d [red]"\n'
    )
    proc = run_cli("plan", "p.toml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "p: a [bold]b[/] c [/] d [red]" in proc.stdout
