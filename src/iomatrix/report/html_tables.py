"""The HTML report's tables on a phone (issue 70: at 375 px a wide table was cut off or scrolled
sideways inside itself): every table whose first row names its columns gets each later cell
labelled with its column's name (`data-label`), so the report's CSS can stack a row's cells one
under the other at a narrow width, each under its column's name, and no column is ever out of
view. Text in, text out: the rendered page, its tables labelled.

Worked example: `<table><tr><th>rank</th><th>cell</th></tr><tr><td>1</td><td>raw</td></tr>` becomes
`<table><tr class="labels"><th>rank</th><th>cell</th></tr><tr><td data-label="rank">1</td>
<td data-label="cell">raw</td></tr>`; a table whose first row is not two or more plain column
names (a heading spanning the table, a `<th>` per row) is left as it is: its cells already read
one under the other when stacked."""

from __future__ import annotations

import html
import re

_TABLE = re.compile(r"<table\b[^>]*>.*?</table>", re.S)
_ROW = re.compile(r"<tr\b([^>]*)>(.*?)</tr>", re.S)
_HEAD_CELL = re.compile(r"<th\b([^>]*)>(.*?)</th>", re.S)
_CELL = re.compile(r"<td\b([^>]*)>", re.S)
_TAG = re.compile(r"<[^>]+>")
_SPAN = re.compile(r'colspan="?(\d+)')
# The class of a table's first row once its names are on every cell (hidden when stacked).
LABELS_CLASS = "labels"


def labelled_tables(page: str) -> str:
    """`page` with every table whose first row holds only column names labelled (module doc)."""
    return _TABLE.sub(lambda m: _labelled(m.group(0)), page)


def _labelled(table: str) -> str:
    rows = list(_ROW.finditer(table))
    if not rows:
        return table
    head = rows[0]
    names = _HEAD_CELL.findall(head.group(2))
    plain = len(names) >= 2 and not _CELL.search(head.group(2))
    if not plain or any("colspan" in attrs for attrs, _ in names):
        return table
    labels = [html.unescape(_TAG.sub("", text)).strip() for _, text in names]
    out = [table[: head.start()], f'<tr class="{LABELS_CLASS}"{head.group(1)}>{head.group(2)}</tr>']
    last = head.end()
    for row in rows[1:]:
        out += [
            table[last : row.start()],
            f"<tr{row.group(1)}>{_label_cells(row.group(2), labels)}</tr>",
        ]
        last = row.end()
    return "".join([*out, table[last:]])


def _label_cells(row: str, labels: list[str]) -> str:
    """A row's <td> cells, each with its column's name (a cell spanning columns: none)."""
    column = 0

    def label(m: re.Match[str]) -> str:
        nonlocal column
        attrs = m.group(1)
        span = _SPAN.search(attrs)
        mine = column
        column += int(span.group(1)) if span else 1
        if span or mine >= len(labels) or not labels[mine]:
            return m.group(0)
        return f'<td data-label="{html.escape(labels[mine], quote=True)}"{attrs}>'

    return _CELL.sub(label, row)
