"""The HTML report at a phone's width (issue 70): at 375 px no table column is cut off or scrolled
out of view: each row's cells stack one under the other, each under its column's name
(report/html_tables.py), and at a desktop's width the tables stay tables."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix.report.html_tables import LABELS_CLASS, labelled_tables
from tests.conftest import DATA, iomatrix_argv, needs


def test_a_table_s_cells_are_labelled_with_their_column_s_name() -> None:
    page = (
        "<p>x</p><table><tr><th>rank</th><th class='num'>mean &amp; CI</th><th>cell</th></tr>\n"
        '<tr><td>1</td><td class="num">4,021</td><td>raw</td></tr>\n'
        '<tr><td colspan="2">no runs</td><td>qcow2</td></tr></table>'
    )
    out = labelled_tables(page)
    assert f'<tr class="{LABELS_CLASS}">' in out
    assert '<td data-label="rank">1</td>' in out
    assert '<td data-label="mean &amp; CI" class="num">4,021</td>' in out
    # a cell spanning two columns has no one name; the one after it is the third column's
    assert '<td colspan="2">no runs</td><td data-label="cell">qcow2</td>' in out


@pytest.mark.parametrize(
    "table",
    [
        '<table class="risk"><tr><th colspan="2">raw · none</th></tr><tr><td>a</td></tr></table>',
        "<table><tr><th>plan</th><td>quick</td></tr><tr><th>kernel</th><td>6.1</td></tr></table>",
    ],
    ids=["heading-spans-the-table", "a-heading-per-row"],
)
def test_a_table_without_a_row_of_column_names_is_left_as_it_is(table: str) -> None:
    assert labelled_tables(table) == table


# Every details element opened (a closed one's tables are not laid out), then each table and cell
# that lies past the viewport's right edge or scrolls inside itself; and what the first labelled
# table shows.
CUT_OFF = """(() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const width = document.documentElement.clientWidth;
  const cut = [];
  for (const t of document.querySelectorAll('table')) {
    if (!t.getClientRects().length) continue;
    if (t.scrollWidth > t.clientWidth + 1) cut.push('table scrolls: ' + t.innerText.slice(0, 60));
    for (const c of t.querySelectorAll('td, th')) {
      if (!c.getClientRects().length) continue;
      const r = c.getBoundingClientRect();
      if (r.left < -1 || r.right > width + 1) cut.push('cell cut: ' + c.innerText.slice(0, 60));
    }
  }
  const head = document.querySelector('tr.labels');
  const cell = document.querySelector('td[data-label]');
  return {
    cut: cut.slice(0, 10),
    tables: document.querySelectorAll('table').length,
    head_shown: head !== null && head.getClientRects().length > 0,
    label: cell === null ? null : getComputedStyle(cell, '::before').content,
  };
})()"""


# The golden quick sweep, and the guest's filesystem jobs of full-matrix-fs (a raw slice: its
# page-cache finding and a job's time, said faster/slower).
SWEEPS = {
    "quick-sweep": DATA / "golden" / "quick-sweep.sqlite",
    "full-matrix-fs": DATA / "answers" / "full-matrix-fs-raw.sqlite",
}


def _report(tmp_path: Path, sweep: str = "quick-sweep") -> Path:
    db = tmp_path / f"{sweep}.sqlite"
    shutil.copy(SWEEPS[sweep], db)
    html = tmp_path / "report.html"
    proc = subprocess.run(
        [*iomatrix_argv(), "report", "--html", str(html), "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return html


@needs("chromium")
@pytest.mark.parametrize("sweep", list(SWEEPS))
def test_at_375_px_no_table_column_is_cut_off(tmp_path: Path, sweep: str) -> None:
    from tests.browser import load

    html = _report(tmp_path, sweep)
    assert "data-label=" in html.read_text()
    phone = load(html, width=375, evaluate=CUT_OFF)
    assert phone.console_errors == [] and phone.scroll_width <= 375, phone.scroll_width
    found = phone.value
    assert found["tables"] > 3 and found["cut"] == [], found
    # stacked: the column names are on the cells, the row of names is not shown
    assert not found["head_shown"] and found["label"] not in (None, "none", "normal"), found
    desktop = load(html, width=1280, evaluate=CUT_OFF).value
    assert desktop["head_shown"] and desktop["label"] in ("none", "normal"), desktop
