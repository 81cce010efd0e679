"""Issue 27: the first answer on one screen. Every report command fits 80 and 100 columns over the
stored quick-sweep database; `recommend` starts with the headline (configuration, ratio, three
risks, the target's snippet) within 40 lines; `--target`/`--detail` behave; cells are named by the
axes that vary; the HTML report's first screen shows the headline, not an error box; a sweep's run
lines stay short."""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iomatrix.commands.progress import run_line
from iomatrix.report.fit import Column, fit_columns
from iomatrix.report.naming import cell_names
from iomatrix.report.render import code_lines, wrap
from tests.conftest import DATA, iomatrix_argv, needs

GOLDEN_DB = DATA / "golden" / "quick-sweep.sqlite"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("golden") / "quick-sweep.sqlite"
    shutil.copy(GOLDEN_DB, copy)  # reports may migrate or lock it: never the stored file
    return copy


@functools.cache
def _cli(*args: str, columns: int = 100) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it at `columns`, run once per module: the width tests run every
    report command at 80 and 100 columns, and the tests of recommend's screens read the same
    renderings (each command here reads the module's copy of the sweep, never writes it)."""
    return subprocess.run(
        [*iomatrix_argv(), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def _report_commands(db: Path) -> list[tuple[str, ...]]:
    d = ("--db", str(db))
    return [
        ("results", *d),
        ("rank", *d),
        ("compare", str(db), str(db)),
        ("monitor", "--run", "1", *d),
        ("recommend", *d),
        ("recommend", "--detail", *d),
        ("plan", "quick", "--explain"),
        ("plans",),
    ]


def _cli_each(
    commands: list[tuple[str, ...]], columns: int
) -> list[subprocess.CompletedProcess[str]]:
    """Each command in a process of its own, as a user runs it; side by side, one per core (they
    only read)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        return list(pool.map(lambda args: _cli(*args, columns=columns), commands))


@pytest.mark.parametrize("columns", [80, 100])
def test_every_report_command_fits_the_width(db: Path, columns: int) -> None:
    commands = _report_commands(db)
    for args, res in zip(commands, _cli_each(commands, columns), strict=True):
        assert res.returncode == 0, (args, res.stderr[-800:])
        lines = (res.stdout + res.stderr).splitlines()
        assert lines, args
        wide = [line for line in lines if len(line) > columns]
        assert not wide, (args, columns, wide[:3])


def test_narrower_than_60_columns_wraps_and_never_fails(db: Path) -> None:
    commands = _report_commands(db)
    for args, res in zip(commands, _cli_each(commands, 40), strict=True):
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr[-800:])


def test_recommend_starts_with_the_headline_within_40_lines(db: Path) -> None:
    # At 80 columns the first screen (30 lines, issue 49) has room for the snippet's <driver>
    # element only: the whole <disk> is in --detail, and whole at 100 columns (below).
    narrow = _cli("recommend", "--db", str(db), columns=80)
    assert narrow.returncode == 0, narrow.stderr
    # and says where it goes (the <disk> of `virsh edit VM`)
    assert any(
        line.strip().startswith("libvirt (virsh edit VM, the <disk>'s <driver>): <driver ")
        for line in narrow.stdout.splitlines()
    )
    res = _cli("recommend", "--db", str(db), columns=100)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Answer for "))
    # the first snippet's end
    end = next(i for i, line in enumerate(lines) if line.strip() == "</disk>")
    assert start == 0 and end - start < 40, lines
    head = " ".join(" ".join(lines[: end + 1]).split())  # wrapped prose read as one text
    # Named by what varies, not by every axis; the tie-break's pick among cells not separated yet is
    # named so, never "Use:" (what --detail says: no recommendation yet). This golden sweep ran 3
    # rounds per cell: at the first look's level (docs/statistics.md §10b) no workload settles,
    # rand-write-4k included (it was "the answer" when a one-sided "cannot be 5% better" at 3 rounds
    # and α = 0.05 made it one).
    # (the densest screen, laid out for the most crowded target's: "Use for now", issue 70)
    assert (
        "Use for now, the tie-break's pick: raw · writeback" in head
        or "Use for now: raw · writeback" in head
    ) and "Use:" not in head
    assert "where the axis applies: preallocation=off aio=threads" in head
    rest = " ".join(res.stdout.split())
    assert "Use:" not in rest
    # the answer fits 30 lines (issue 49): the line's status short, its verb above says whose pick
    # (with a line per axis above them, the screen is the crowded one: the verb says "the
    # tie-break's pick" for every line under it)
    assert "rand-write-4k: 1.00×: it is QEMU's default" in rest
    # the risks whole or (the densest screen) named on its last line
    assert all(r in rest for r in ("QEMU crash", "power loss", "live migration"))
    assert "QEMU's default" in head and ("the tie-break's pick" in head or "Use for now:" in head)
    # Under TCG the block layer is the basis, and the headline says so in one place.
    assert "ran under TCG" in head and "blocklayer tier is the basis" in head
    # Without --detail: no per-workload detail, no weighted score without its inputs.
    assert "Recommendation · sweep" not in res.stdout and "no recommendation" not in res.stdout


def test_detail_and_targets(db: Path) -> None:
    detail = _cli("recommend", "--detail", "--db", str(db)).stdout
    assert detail.index("Answer for ") < detail.index("Recommendation · sweep 1")
    # a score the plan has no inputs for is not an answer it could give
    assert "weighted-read" not in detail
    proxmox = _cli("recommend", "--target", "proxmox", "--db", str(db)).stdout
    # the golden sweep ran one bus (virtio-blk): a new disk goes where Proxmox puts one, scsi0
    # (issue 70: only what was measured changes)
    assert "qm set VMID --scsi0" in proxmox and "<disk" not in proxmox
    bad = _cli("recommend", "--target", "xen", "--db", str(db))
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    err = [line for line in bad.stderr.splitlines() if line.strip()]
    assert (
        len(err) == 1
        and "xen" in err[0]
        and all(t in err[0] for t in ("libvirt", "proxmox", "nova"))
    )


def test_json_carries_the_headline_and_full_labels(db: Path) -> None:
    doc = json.loads(_cli("recommend", "--format", "json", "--db", str(db)).stdout)
    # One cell, one pick: the tie-break's (not settled) on all three workloads; 3 rounds per cell
    # settle none at the first look's level (docs/statistics.md §10b; rand-write-4k was "the answer"
    # before that rule).
    [pick] = doc["headline"]["picks"]
    assert pick["name"] == "raw · writeback" and pick["settled"] is False
    assert pick["cell"] == "format=raw preallocation=off cache=writeback aio=threads backing=dir"
    assert [w["workload"] for w in pick["workloads"]] == [
        "rand-read-4k",
        "rand-write-4k",
        "seq-write-1m",
    ]
    assert [r["situation"] for r in pick["risks"]] == ["QEMU crash", "power loss", "live migration"]
    assert pick["snippet"]["tool"] == "libvirt"
    # The verdict keeps the tie-break's pick with its figures, apart from a choice it does not have.
    v = doc["verdicts"][0]
    assert v["choice"] is None and v["provisional"]["choice"]["cell"] == pick["cell"]


def test_cell_names_show_what_varies() -> None:
    labels = [
        "format=raw preallocation=off cache=writeback aio=threads",
        "format=qcow2 preallocation=off cache=none aio=threads",
        # bare metal names no format: format still varies only by raw/qcow2
        "cache=none aio=threads",
    ]
    names = cell_names(labels)
    assert names.varying == ("format", "cache")
    assert [names.of(x) for x in labels] == ["raw · writeback", "qcow2 · cache=none", "cache=none"]
    assert names.constant_text() == "preallocation=off aio=threads"
    assert (
        names.rename(f"{labels[0]} leads {labels[1]}") == "raw · writeback leads qcow2 · cache=none"
    )
    one = cell_names(labels[:1])
    assert one.of(labels[0]) == labels[0] and one.constant_text() == ""


def test_columns_are_left_out_least_needed_first() -> None:
    cols = [
        Column("cell", 0),
        Column("mean", 0),
        Column("CV", 4),
        Column("accel", 5),
        Column("notes", 2, True),
    ]
    rows = [["raw · writeback", "1,234", "3.1%", "none (bare metal)", "a long note " * 5]]
    assert fit_columns(cols, rows, 200) == [0, 1, 2, 3, 4]
    assert fit_columns(cols, rows, 60) == [0, 1, 2, 4]
    assert fit_columns(cols, rows, 10) == [0, 1]  # never below the columns that must stay


def test_prose_wraps_and_xml_breaks_between_attributes() -> None:
    assert all(len(x) <= 30 for x in wrap("word " * 40, 30, "  "))
    xml = (
        '  <driver name="qemu" type="raw" cache="writeback" io="threads" discard="ignore" '
        'detect_zeroes="off" />'
    )
    broken = code_lines(xml, "xml", 60)
    assert all(len(x) <= 60 for x in broken) and " ".join(x.strip() for x in broken) == xml.strip()
    # the tag's end stays with its last attribute, never on a line of its own
    for width in range(40, 90):
        lines = code_lines(xml, "xml", width)
        assert lines[-1].strip().endswith('detect_zeroes="off" />'), (width, lines)
    # a shell word is never broken
    assert code_lines("qemu " + "x" * 100, "sh", 60) == ["qemu " + "x" * 100]


def test_the_first_screens_qemu_snippet_pastes_into_a_shell_as_the_words_it_measured(
    db: Path,
) -> None:
    """A long -blockdev value is continued at its commas with a bare backslash
    (vmconfig.config.shell_word); the answer shows snippets indented, and an indent at the start of
    such a line would split the word in two when pasted. The lines the terminal shows, run through a
    real sh, give the same words as the snippet's own."""
    res = _cli("recommend", "--db", str(db), "--target", "qemu")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("-blockdev "))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
    shown = lines[start : end + 1]
    # the case this guards: an in-word continuation
    assert any(line.endswith(",\\") for line in shown), shown

    def words(text: str) -> list[str]:
        out = subprocess.run(["sh", "-c", "printf '%s\\n' " + text], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    assert words("\n".join(shown)) == words("\n".join(line.lstrip() for line in shown))
    assert words("\n".join(shown))[0::2] == ["-blockdev", "-device"]


def test_a_run_line_stays_within_the_width() -> None:
    summary = (
        "read.iops 12,345 — disturbed: CPU pressure: PSI cpu some 65% > 63.5%; other "
        "processes used 167%"
    )
    label = "format=qcow2 preallocation=off cache=writeback aio=threads bus=virtio-blk backing=dir"
    short = run_line("ok", label, "rand-read-4k", summary, 100, verbose=False)
    assert len(short) <= 100 and "PSI" not in short
    assert "PSI cpu some" in run_line("ok", label, "rand-read-4k", summary, 100, verbose=True)
    assert (
        run_line("ok", "raw", "w", "read.iops 1 — disturbed: x", 100, verbose=False)
        == "ok raw · w: read.iops 1 · disturbed"
    )


@needs("chromium")
def test_html_first_screen_shows_the_headline_not_an_error_box(db: Path, tmp_path: Path) -> None:
    from tests.browser import load

    html = tmp_path / "report.html"
    res = _cli("report", "--html", str(html), "--db", str(db))
    assert res.returncode == 0, res.stderr
    page = load(html, width=1400)
    assert page.console_errors == []
    (tmp_path / "shot.png").write_bytes(page.screenshot_png)
    first = np.asarray(Image.open(io.BytesIO(page.screenshot_png)).convert("RGB"), dtype=int)[:900]
    r, g, b = first[..., 0], first[..., 1], first[..., 2]
    headline_border = (abs(r - 0x1B) < 12) & (abs(g - 0x5E) < 12) & (abs(b - 0x20) < 12)
    error_border = (abs(r - 0xC0) < 12) & (abs(g - 0x39) < 12) & (abs(b - 0x2B) < 12)
    # The headline's box: a vertical border line hundreds of pixels tall (no chart bar is that
    # shape).
    assert headline_border.sum(axis=0).max() > 300, "the headline's box is not on the first screen"
    assert error_border.sum() == 0, "an error box is on the first screen"
    text = html.read_text()
    assert text.index('class="headline"') < text.index('class="missing"')


def test_detail_on_a_sweep_with_nothing_to_detail_says_so(tmp_path: Path) -> None:
    from iomatrix.metadata import host_metadata
    from iomatrix.store import Store

    store = Store(tmp_path / "empty.sqlite")
    store.create_sweep(store.host_id(host_metadata()), "empty", "0" * 16, "{}", [], [])
    store.close()
    res = _cli("recommend", "--detail", "--db", str(tmp_path / "empty.sqlite"))
    assert res.returncode == 0, res.stderr
    assert "nothing to recommend" in res.stdout and "nothing to detail" in res.stdout
