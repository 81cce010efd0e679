"""Reports print the same figures for the same database, release after release.

`data/golden/quick-sweep.sqlite` is a real sweep of the default plan's matrix (bare metal, block
layer and TCG guests; 4-minute budget) written by the release before the axis registry (schema 4;
fio's raw JSON emptied to keep the file small: no report reads it). `data/schema1/` is the first
release's file. For both, every report command and format is run as a user would (the installed CLI,
COLUMNS=100) and compared with the output recorded when the file was written; then the file is
migrated as `iomatrix run` migrates it and the reports must still print exactly the same. The HTML
report is compared without its chart drawings (the charts' text, i.e. their labels and legends, is
kept).

JSON outputs are compared as data, each float to 12 significant digits: the ranking's centres come
from a least-squares fit (numpy's lstsq through OpenBLAS), whose last bits differ between numpy
builds and CPUs (numpy 2.4 on this host printed 8016.518057596911 where the file says …924). Every
other format prints figures rounded to a few digits and is compared exactly.

After a deliberate change of output, regenerate with IOMATRIX_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from iomatrix.store import Store
from tests.conftest import DATA, iomatrix_argv

GOLDEN = DATA / "golden"
DATABASES = {
    "quick-sweep": GOLDEN / "quick-sweep.sqlite",
    "schema1": DATA / "schema1" / "iomatrix-schema1.sqlite",
}
COMMANDS: dict[str, tuple[str, ...]] = {
    "results.txt": ("results",),
    "results.json": ("results", "--format", "json"),
    "results.csv": ("results", "--format", "csv"),
    "results.md": ("results", "--format", "markdown"),
    "rank.txt": ("rank",),
    "rank.json": ("rank", "--format", "json"),
    "rank.md": ("rank", "--format", "markdown"),
    "recommend.txt": ("recommend",),
    "recommend.json": ("recommend", "--format", "json"),
    "recommend.md": ("recommend", "--format", "markdown"),
    "report.html": ("report", "--html", "{out}"),
}


def _charts_as_text(html: str) -> str:
    """Each inline SVG chart replaced by the text it shows (matplotlib keeps text as <text>)."""

    def texts(m: re.Match[str]) -> str:
        return (
            "<svg>"
            + " | ".join(t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", m.group(0)))
            + "</svg>"
        )

    return re.sub(r"<svg.*?</svg>", texts, html, flags=re.S)


def _outputs(db: Path, tmp: Path) -> dict[str, str]:
    """Every command's output. The commands only read the database, so they run side by side, one
    per core: each is a process of its own, as a user's would be, and its output is compared
    whole."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    env = {**os.environ, "COLUMNS": "100"}
    html = tmp / "report.html"

    def one(name: str) -> subprocess.CompletedProcess[str]:
        argv = [a.replace("{out}", str(html)) for a in COMMANDS[name]]
        return subprocess.run(
            [*iomatrix_argv(), *argv, "--db", str(db)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        done = dict(zip(COMMANDS, pool.map(one, COMMANDS), strict=True))
    out: dict[str, str] = {}
    for name, proc in done.items():
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
        out[name] = _charts_as_text(html.read_text()) if name == "report.html" else proc.stdout
    return out


# Relative tolerance for a float in a JSON report: far above the 1e-16 of a BLAS difference, far
# below the 3 significant digits any report shows a user.
FLOAT_REL_TOL = 1e-12


def _same(got: object, expected: object) -> bool:
    """Equal JSON data, floats within FLOAT_REL_TOL of each other (ints and strings exactly)."""
    if isinstance(got, float) and isinstance(expected, float):
        return math.isclose(got, expected, rel_tol=FLOAT_REL_TOL)
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_same(got[k], expected[k]) for k in got)
    if isinstance(got, list) and isinstance(expected, list):
        if len(got) != len(expected):
            return False
        return all(_same(g, e) for g, e in zip(got, expected, strict=True))
    return type(got) is type(expected) and got == expected


def test_json_floats_compare_within_the_tolerance_only() -> None:
    """The comparison forgives a BLAS build's last bits, and nothing a user could see."""
    assert _same({"geo. mean": 8016.518057596911}, {"geo. mean": 8016.518057596924})
    assert not _same({"geo. mean": 8016.518}, {"geo. mean": 8016.519})
    assert not _same({"n": 3}, {"n": 3.0})
    assert not _same([1.0, 2.0], [1.0])
    assert not _same({"a": 1.0}, {"b": 1.0})


def _check(label: str, db: Path, tmp: Path) -> None:
    got = _outputs(db, tmp)
    expected_dir = GOLDEN / label
    if os.environ.get("IOMATRIX_UPDATE_GOLDEN") == "1":
        expected_dir.mkdir(parents=True, exist_ok=True)
        for name, text in got.items():
            (expected_dir / name).write_text(text)
    for name, text in got.items():
        expected = (expected_dir / name).read_text()
        if name.endswith(".json"):
            assert _same(json.loads(text), json.loads(expected)), (
                f"{label}: '{' '.join(COMMANDS[name])}' prints other data than before"
            )
            continue
        assert text == expected, (
            f"{label}: '{' '.join(COMMANDS[name])}' prints something else than before"
        )


@pytest.mark.slow
@pytest.mark.parametrize("label", sorted(DATABASES))
def test_reports_unchanged_on_an_old_database(label: str, tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(DATABASES[label], db)
    _check(label, db, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("label", sorted(DATABASES))
def test_reports_unchanged_after_migration(label: str, tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(DATABASES[label], db)
    # what `iomatrix run` does to an older file: backup, then migrate to this schema
    Store(db).close()
    assert Store.open_existing(db).schema_version > 4 or label == "schema1"
    _check(label, db, tmp_path)


@pytest.mark.parametrize("label", sorted(DATABASES))
def test_html_rankings_name_cells_as_the_terminal_does(label: str) -> None:
    """One page, one way of naming a cell (issue 70): the HTML's ranking tables name each cell as
    `iomatrix rank` prints it ("raw · writeback"), never by the full label's `format=raw
    cache=writeback` the page's "Every run" table and the answer do not use. The recorded outputs
    are compared with live ones above, so what holds between them holds for the CLI."""
    html = (GOLDEN / label / "report.html").read_text()
    rank_txt = (GOLDEN / label / "rank.txt").read_text()
    ranked = re.findall(r'<tr><td data-label="rank">[^<]*</td>.*?data-label="cell">([^<]*)<', html)
    assert ranked, f"{label}: no ranking rows found in the HTML (did the table's markup change?)"
    for name in set(ranked):
        assert re.search(rf"\s{re.escape(name)}\s{{2,}}\d", rank_txt), (
            f"{label}: the HTML ranks '{name}', a name 'iomatrix rank' does not print"
        )
