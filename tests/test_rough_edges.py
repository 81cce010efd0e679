"""Rough edges of the report commands a new user met (issue 38): each is the command run as a user
runs it."""

from __future__ import annotations

import csv
import io
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from iomatrix.commands.common import few_runs_hint
from iomatrix.protocols import protocols
from iomatrix.sweep.expansion import setup_command
from tests.conftest import DATA, iomatrix_argv, needs

FIRST_RELEASE = DATA / "schema1" / "iomatrix-schema1.sqlite"


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*iomatrix_argv(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env={**os.environ, "COLUMNS": "100", **(env or {})},
    )


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "r.sqlite"
    shutil.copy(FIRST_RELEASE, db)
    return db


@pytest.mark.parametrize(
    "target", ["missing/dir/r.html", ".", "/proc/version"], ids=["missing", "dir", "proc"]
)
def test_report_refuses_an_unwritable_output_at_once_without_a_crash_log(
    tmp_path: Path, target: str
) -> None:
    cache = tmp_path / "cache"
    proc = _cli(
        "report",
        "--html",
        target,
        "--db",
        str(_db(tmp_path)),
        cwd=tmp_path,
        env={"XDG_CACHE_HOME": str(cache)},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--html" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (cache / "iomatrix").exists()  # no crash log
    assert not (tmp_path / "missing").exists()
    assert not (cache / "matplotlib").exists()  # refused before the charts' library was even loaded


def test_rank_footnote_says_each_thing_once(tmp_path: Path) -> None:
    proc = _cli("rank", "--db", str(_db(tmp_path)), cwd=tmp_path, env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    rankings = proc.stdout.count("Same group letter")
    assert rankings >= 1
    assert proc.stdout.count("'too noisy'") == rankings, proc.stdout
    assert proc.stdout.count("not ranked") == rankings, proc.stdout


def test_results_csv_names_the_analysis_unit_of_every_row(tmp_path: Path) -> None:
    proc = _cli("results", "--format", "csv", "--db", str(_db(tmp_path)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert rows and all(r["unit"] in ("runs", "boot-means") and r["unit_n"] for r in rows)
    runs = [r for r in rows if r["unit"] == "runs"]
    assert all(r["unit_n"] == r["n"] and r["unit_ci95_low"] == r["ci95_low"] for r in runs)


def test_a_plan_of_too_few_runs_ends_with_the_min_runs_hint(tmp_path: Path) -> None:
    answer = "no recommendation: no cell has enough runs to be ranked"
    hint = few_runs_hint(answer, tmp_path / "r.sqlite", 2)
    assert hint is not None and "--min-runs 2" in hint and "repetitions.min" in hint
    # the plan allowed enough: no such hint
    assert few_runs_hint(answer, tmp_path / "r.sqlite", 3) is None
    assert few_runs_hint("Use: cache=none", tmp_path / "r.sqlite", 2) is None


def test_every_cell_pruned_names_the_plan_as_given(tmp_path: Path) -> None:
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "rel.toml").write_text(
        'name = "rel"\ntier = ["blocklayer"]\ncache = ["writeback"]\naio = ["native"]\n'
        "null_ceiling = false\n"
    )
    proc = _cli("run", "plans/rel.toml", "--db", "r.sqlite", "--workdir", "w", cwd=tmp_path)
    assert proc.returncode == 2 and "nothing to run" in proc.stderr, proc.stdout + proc.stderr
    assert "iomatrix plan plans/rel.toml --explain" in proc.stderr, proc.stderr


def _refused_before_it_starts(
    tmp_path: Path, backing: str, env: dict[str, str] | None = None
) -> str:
    """`run` of a block-layer plan on one backing: refused with exit 2 and one line, nothing
    created; the line."""
    (tmp_path / "p.toml").write_text(
        f'name = "p"\ntier = ["blocklayer"]\nworkloads = ["rand-read-4k"]\n[[backing]]\n{backing}\n'
    )
    proc = _cli("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "r.sqlite").exists() and not (tmp_path / "w").exists()
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_a_plan_whose_backing_is_unavailable_is_refused_naming_the_setup_flag(
    tmp_path: Path,
) -> None:
    """Only the null ceiling could run (tgtd missing): refused before it starts, naming what is
    missing and the set-up flag that installs it (issue 49: it measured the ceiling alone and said
    "nothing to recommend")."""
    if shutil.which("qemu-storage-daemon") is None:
        pytest.skip("needs qemu-storage-daemon, for the null ceiling that would run")
    bin_dir = tmp_path / "bin"  # a PATH with QEMU and fio, without tgtd and tgtadm
    bin_dir.mkdir()
    for program in ("qemu-storage-daemon", "qemu-img", "fio"):
        if (found := shutil.which(program)) is not None:
            (bin_dir / program).symlink_to(found)
    line = _refused_before_it_starts(tmp_path, 'type = "iscsi"', env={"PATH": str(bin_dir)})
    for said in (
        "nothing to run",
        "null ceiling",
        "backing iscsi: 'tgtd' is not installed",
        "scripts/setup.sh --shared-storage",
        "iomatrix plan p.toml --explain",
    ):
        assert said in line, line


@pytest.mark.skipif(
    Path("/dev/zfs").exists(), reason="this host has ZFS: the pool check would be asked"
)
def test_a_backing_no_setup_flag_brings_is_refused_saying_so(tmp_path: Path) -> None:
    line = _refused_before_it_starts(tmp_path, 'type = "zfs"\npool = "tank"\nkind = "dataset"')
    assert (
        "backing zfs:tank/dataset: " in line and "no flag of scripts/setup.sh brings it" in line
    ), line


def test_the_setup_flags_named_are_setup_shs() -> None:
    """The packages iomatrix says `setup.sh --shared-storage` installs are the ones setup.sh adds
    for it."""
    text = (Path(__file__).resolve().parent.parent / "scripts" / "setup.sh").read_text()
    arrays = [
        line.split("=(", 1)[1].rstrip(")").split()
        for line in text.splitlines()
        if line.startswith(
            ("iscsi_packages=(", "nfs_packages=(", "rbd_packages=(", "nbd_packages=(")
        )
    ]
    wanted = {p for network in protocols() for p in network.packages}
    assert len(arrays) == 4 and wanted == {p for a in arrays for p in a}
    assert {setup_command(p) for p in wanted} == {"scripts/setup.sh --shared-storage"}
    assert setup_command("zfsutils-linux") is None and "--shared-storage) shared=1" in text


def _small_report(tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    html = tmp_path / "report.html"
    return html, _cli("report", "--html", str(html), "--db", str(_db(tmp_path)), cwd=tmp_path)


def test_a_small_report_prints_no_matplotlib_warning(tmp_path: Path) -> None:
    _, proc = _small_report(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "No artists" not in proc.stdout + proc.stderr and "UserWarning" not in proc.stderr, (
        proc.stderr
    )


@needs("chromium")
def test_the_html_report_fits_a_phone(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    from tests.browser import load

    html, proc = _small_report(tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = load(html, width=375)
    assert page.console_errors == []
    assert page.scroll_width <= 375, page.scroll_width  # the page itself never scrolls sideways
    shot = np.asarray(Image.open(io.BytesIO(page.screenshot_png)).convert("L"), dtype=int)
    assert shot.shape[1] == 375 and (shot < 128).sum() > 1000  # text was drawn: not a blank page
    text = html.read_text()
    assert "@media" in text


# On the loaded report: the smallest chart text in CSS pixels (font size × the SVG's scale on
# screen), and the table cells narrower than their longest word (a word broken across lines: one
# character per line at worst; a hyphen is a place a line may end, as in 'rand-/read-4k').
LEGIBILITY = """(() => {
  const sizes = [...document.querySelectorAll('svg text')].map(t => {
    const m = t.getScreenCTM();
    return parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
  });
  const ctx = document.createElement('canvas').getContext('2d');
  const broken = [];
  for (const cell of document.querySelectorAll('td, th')) {
    if (!cell.getClientRects().length) continue;  // not shown (a phone's hidden header row)
    const cs = getComputedStyle(cell);
    const room = cell.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (n.parentElement.closest('pre')) continue;
      ctx.font = getComputedStyle(n.parentElement).font;
      for (const w of n.textContent.split(/\\s+/).flatMap(w => w.split(/(?<=-)/)))  // a line may end after '-'
        if (ctx.measureText(w).width > room + 1) broken.push(w);
    }
  }
  return {charts: sizes.length, smallest: Math.min(...sizes), broken: broken.slice(0, 10)};
})()"""  # noqa: E501


@needs("chromium")
@pytest.mark.parametrize("width", [375, 1280])
def test_the_html_report_s_tables_scroll_and_its_chart_text_is_legible(
    tmp_path: Path, width: int
) -> None:
    """At 375 and 1280 px (issue 49): no table cell breaks a word (they wrapped one character at a
    time on a phone: the table scrolls instead), and no chart text is under 9 px (the labels were
    about 5 px)."""
    from tests.browser import load

    html, proc = _small_report(tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = load(html, width=width, evaluate=LEGIBILITY)
    assert page.console_errors == [] and page.scroll_width <= width, page.scroll_width
    found = page.value
    assert found["charts"] > 0 and found["smallest"] >= 9, found
    assert found["broken"] == [], found


def test_a_chart_without_labelled_series_draws_no_legend_and_no_warning(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import warnings

    from iomatrix.report.charts import SizeSeries, blocksize_chart, latency_curve_chart

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels" is a UserWarning
        svg = blocksize_chart([SizeSeries("cache=none", {})], ["4k", "64k"], "IOPS")
        curves = latency_curve_chart([])
    assert "<svg" in svg and "<svg" in curves
    assert "No artists" not in capfd.readouterr().err


def test_help_names_values_as_a_cli_does(tmp_path: Path) -> None:
    from iomatrix.commands import COMMANDS

    for module in COMMANDS:
        proc = _cli(module.NAME, "--help", cwd=tmp_path, env={"COLUMNS": "120"})
        assert proc.returncode == 0, proc.stderr
        for python_word in ("<bool>", "<str>", "<int>", "<float>", "<path>", "<list[", "{"):
            assert python_word not in proc.stdout, (module.NAME, python_word, proc.stdout)
    usage = _cli("compare", "--help", cwd=tmp_path).stdout
    assert "DB_A DB_B" in usage and "INTEGER" in usage
    assert "[PLAN]" in _cli("plan", "--help", cwd=tmp_path).stdout


def test_plans_lists_estimated_durations(tmp_path: Path) -> None:
    """One figure a plan, the one `plan` gives (estimate.estimate_sweep; issue 70)."""
    from iomatrix.estimate import duration_text, estimate_sweep
    from iomatrix.plan.load import builtin_names, load_plan
    from iomatrix.sweep.expansion import plan_expansion

    # an empty cache: no guest pace recorded on this host (guest/pace.py), the reference figures
    proc = _cli("plans", cwd=tmp_path, env={"COLUMNS": "200", "IOMATRIX_CACHE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "estimated" in proc.stdout.splitlines()[0]
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:] if line.split()}
    for name in builtin_names():
        plan, base = load_plan(name)
        figure = estimate_sweep(plan, plan_expansion(plan, base, set())).minutes()
        assert name in rows and f" {figure} " in rows[name], (figure, rows.get(name))
        assert "–" not in rows[name].split(figure)[0], rows[name]  # one figure, not a range
    assert duration_text(420) == "7.0 min" and duration_text(720) == "12 min"
    assert duration_text(9000) == "2.5 h"


def test_guest_info_prints_lines_for_people_and_json_for_machines(tmp_path: Path) -> None:
    import json

    proc = _cli("guest", "info", cwd=tmp_path, env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert "{'" not in proc.stdout and "['" not in proc.stdout, proc.stdout
    assert "would use:" in proc.stdout
    machine = _cli("guest", "info", "--format", "json", cwd=tmp_path)
    assert machine.returncode == 0, machine.stderr
    assert "would_use" in json.loads(machine.stdout)


def test_a_run_line_keeps_the_value_and_shortens_the_cell() -> None:
    from iomatrix.commands.progress import run_line

    cell = (
        "format=qcow2 preallocation=metadata cache=writeback aio=io_uring bus=virtio-scsi-single "
        "backing=loopfs-xfs iothread=1 discard=unmap cluster_size=64k l2_cache=whole-image"
    )
    summary = "write.iops 12,345 (p99 1,234 µs)"
    for width in (80, 100):
        line = run_line("ok", cell, "rand-write-4k", summary, width, verbose=False)
        assert len(line) <= width, line
        assert line.endswith("· rand-write-4k: write.iops 12,345 (p99 1,234 µs)"), line
    assert "l2_cache" not in run_line("ok", cell, "rand-write-4k", summary, 100, verbose=False)


@pytest.mark.parametrize("width", [80, 100])
def test_plan_explain_cuts_no_cell_name(tmp_path: Path, width: int) -> None:
    proc = _cli("plan", "modern", "--explain", cwd=tmp_path, env={"COLUMNS": str(width)})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout, proc.stdout
    assert all(len(line) <= width for line in proc.stdout.splitlines())
    assert "whole-image" in proc.stdout and "seq-write-zeroes-1m-first" in proc.stdout
    assert "virtio-scsi-single" in proc.stdout


@pytest.mark.parametrize("width", [80, 100])
def test_plan_explain_names_pruned_cells_by_their_settings_under_their_reason(
    tmp_path: Path, width: int
) -> None:
    """The full guest matrix prunes 68 cells for 6 reasons: each reason said once with its count,
    each cell a row of its settings, never its store key (a 60-character word the table cut
    mid-name: 'guest/qed/metadata/directsync/native/virtio-bl' / 'k/dir/none')."""
    from iomatrix.plan.load import load_plan
    from iomatrix.sweep.expansion import plan_expansion

    plan, base = load_plan("full-matrix-fs")
    pruned = plan_expansion(plan, base, set()).pruned
    proc = _cli("plan", "full-matrix-fs", "--explain", cwd=tmp_path, env={"COLUMNS": str(width)})
    assert proc.returncode == 0, proc.stderr
    assert all(len(line) <= width for line in proc.stdout.splitlines())
    assert "guest/" not in proc.stdout and "/dir/" not in proc.stdout, proc.stdout
    text = " ".join(proc.stdout.split())
    reasons: dict[str, int] = {}
    for p in pruned:
        reasons[p.reason] = reasons.get(p.reason, 0) + 1
    assert len(reasons) == 6
    for reason, n in reasons.items():
        assert text.count(f"pruned ({n}): {reason}") == 1, reason
    section = proc.stdout[proc.stdout.index("pruned (") :]
    rows = [line for line in section.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == len(pruned) == 68
    # what every cell of a reason shares is said once above its rows
    assert "all tier=guest format=qed preallocation=metadata backing=dir" in text


def test_the_default_report_shows_latency_percentiles(tmp_path: Path) -> None:
    import re

    html, proc = _small_report(tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = html.read_text()
    ranking = text[text.index('id="ranking"') :]
    assert "p50 µs" in ranking and "p99 µs" in ranking
    # the schema-1 sweep's read workload: its cells' read p50/p99 as figures, not dashes
    cells = re.findall(
        r'<td[^>]* class="num">([\d,.]+)</td><td[^>]* class="num">([\d,.]+)</td><td[^>]*>', ranking
    )
    assert cells, ranking[:2000]


def test_recommend_names_the_other_sweeps_of_the_database(tmp_path: Path) -> None:
    """A second plan run into an existing database (here interrupted before its first run): the
    answer of either sweep names the other in one statement (issue 49: the earlier sweep was not
    mentioned)."""
    db = tmp_path / "two.sqlite"
    shutil.copy(DATA / "golden" / "quick-sweep.sqlite", db)
    with sqlite3.connect(db) as con:
        con.execute(
            "INSERT INTO sweeps (host_id, plan_name, plan_fingerprint, plan_json, "
            "started_at, finished_at, "
            "status) SELECT host_id, 'shared-storage', 'another', plan_json, started_at "
            "+ 3600, NULL, "
            "'interrupted' FROM sweeps WHERE id = 1"
        )
    con.close()
    first = _cli("recommend", "--db", str(db), "--sweep", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert (
        "other sweeps in this database: 2 (shared-storage, interrupted); this answer is sweep 1's"
        in " ".join(first.stdout.split())
    ), first.stdout
    assert max(len(line) for line in first.stdout.splitlines()) <= 100
    latest = _cli("recommend", "--db", str(db), cwd=tmp_path)
    assert "other sweeps in this database: 1 (golden, finished)" in " ".join(
        latest.stdout.split()
    ), latest.stdout
    alone = _cli("recommend", "--db", str(_db(tmp_path)), cwd=tmp_path)
    assert alone.returncode == 0 and "other sweeps" not in alone.stdout, alone.stdout


def test_a_run_line_names_the_cell_by_what_varies_and_never_cuts_a_word() -> None:
    """With the sweep's short names a run line names its cell by the settings that vary among the
    sweep's cells; too long still, it drops whole settings from the middle, never part of one (it
    printed 'raw …ck threads dir')."""
    from iomatrix.commands.progress import run_line
    from iomatrix.report.naming import cell_names

    cells = [
        f"format={f} preallocation=off cache={c} aio=threads bus=virtio-blk backing=dir"
        for f in ("raw", "qcow2")
        for c in ("none", "writeback")
    ]
    names = cell_names(cells)
    summary = "write.iops 12,345 (p99 1,234 µs)"
    line = run_line("ok", cells[1], "rand-write-4k", summary, 100, False, short=names.of(cells[1]))
    assert line == f"ok raw · writeback · rand-write-4k: {summary}"
    long = "qcow2 · metadata · writeback · io_uring · virtio-scsi-single · loopfs-xfs · 64k"
    for width in (60, 70, 80):
        line = run_line("ok", "x", "rand-write-4k", summary, width, False, short=long)
        assert len(line) <= width and line.endswith(f"rand-write-4k: {summary}"), line
        words = line.removeprefix("ok ").split(" · rand-write-4k")[0].split(" · ")
        assert words[0] == "qcow2" and all(w == "…" or w in long.split(" · ") for w in words)


def test_guest_info_keeps_each_path_whole_when_not_a_terminal(tmp_path: Path) -> None:
    """Piped at 30 columns, `guest info` still prints each fact on one line: its cache paths are
    whole (they were split mid-name), for a log or a script to read."""
    import json

    proc = _cli("guest", "info", cwd=tmp_path, env={"COLUMNS": "30"})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(_cli("guest", "info", "--format", "json", cwd=tmp_path).stdout)

    def paths(value: object) -> list[str]:
        if isinstance(value, dict):
            return [p for v in value.values() for p in paths(v)]
        if isinstance(value, list):
            return [p for v in value for p in paths(v)]
        return [value] if isinstance(value, str) and value.startswith("/") else []

    found = [p for p in paths(info) if len(p) > 30]
    assert found, info
    for path in found:
        assert any(path in line for line in proc.stdout.splitlines()), (path, proc.stdout)
