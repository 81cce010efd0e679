"""The exporters: each output format renders the same table data (`DataTable`). The expected texts
are the bytes the CLI wrote before the exporters were split into one module per format (`--format`
output of rank, compare, monitor and results must not change)."""

from __future__ import annotations

import json

import pytest

from iomatrix.report.export import EXPORTERS, DataTable, csv, markdown, render_tables, text
from iomatrix.report.export import json as json_export
from iomatrix.report.formats import OutputFormat

AXES = ["tier", "cache"]


def _tables() -> list[DataTable]:
    ranked = DataTable(
        "rand-read-4k · read.iops",
        [*AXES, "n", "mean", "95% CI", "flags"],
        [
            {
                "tier": "guest",
                "cache": "none",
                "n": 3,
                "mean": 1234.5,
                "95% CI": "1,200–1,269",
                "ci95_low": 1200.25,
                "ci95_high": 1268.75,
                "flags": None,
            },
            {
                "tier": "guest",
                "cache": "writeback",
                "n": 3,
                "mean": 0.123456,
                "95% CI": "≥0–0.3",
                "ci95_low": -0.05,
                "ci95_high": 0.3,
                "flags": "too noisy | wide",
            },
        ],
        axes=AXES,
        notes=["≥0: bounded"],
    )
    series = DataTable(
        "host time series", ["t (s)", "cpu.usr_pct"], [{"t (s)": 0.5, "cpu.usr_pct": 12.0}]
    )
    return [ranked, series]


TEXT = (
    "rand-read-4k · read.iops\nconstant: tier=guest\n"
    "cache      n  mean   95% CI       flags           \n"
    "none       3  1,234  1,200–1,269  –               \n"
    "writeback  3  0.123  ≥0–0.3       too noisy | wide\n"
    "≥0: bounded\n"
)
CSV = (
    "tier,cache,n,mean,95% CI,flags,ci95_low,ci95_high\n"
    'guest,none,3,1234.5,"1,200–1,269",,1200.25,1268.75\n'
    "guest,writeback,3,0.123456,≥0–0.3,too noisy | wide,-0.05,0.3\n"
)
CSV_TWO = (
    "table,tier,cache,n,mean,95% CI,flags,t (s),cpu.usr_pct,ci95_low,ci95_high\n"
    'rand-read-4k · read.iops,guest,none,3,1234.5,"1,200–1,269",,,,1200.25,1268.75\n'
    "rand-read-4k · read.iops,guest,writeback,3,0.123456,≥0–0.3,too noisy | wide,,,-0.05,0.3\n"
    "host time series,,,,,,,0.5,12.0,,\n"
)
MARKDOWN = (
    "### rand-read-4k · read.iops\n\nConstant across rows: `tier=guest`\n\n"
    "| cache | n | mean | 95% CI | flags |\n|---|---|---|---|---|\n"
    "| none | 3 | 1,234 | 1,200–1,269 | – |\n"
    "| writeback | 3 | 0.123 | ≥0–0.3 | too noisy \\| wide |\n\n*≥0: bounded*\n"
)
MARKDOWN_SECOND = "### host time series\n\n| t (s) | cpu.usr_pct |\n|---|---|\n| 0.5 | 12 |\n"


def test_every_output_format_has_one_exporter() -> None:
    assert set(EXPORTERS) == set(OutputFormat)
    assert (
        EXPORTERS[OutputFormat.table] is text.export and EXPORTERS[OutputFormat.csv] is csv.export
    )
    assert EXPORTERS[OutputFormat.json] is json_export.export
    assert EXPORTERS[OutputFormat.markdown] is markdown.export


@pytest.mark.parametrize(
    ("format", "expected"), [("table", TEXT), ("csv", CSV), ("markdown", MARKDOWN)]
)
def test_each_exporter_renders_the_same_table_as_before(format: str, expected: str) -> None:
    assert render_tables(_tables()[:1], format) == expected
    assert render_tables(_tables()[:1], OutputFormat(format)) == expected


def test_json_carries_every_field_of_every_row() -> None:
    out = render_tables(_tables(), "json")
    assert out.endswith("]\n") and out == json_export.dumps([t.as_dict() for t in _tables()]) + "\n"
    doc = json.loads(out)
    assert [t["title"] for t in doc] == ["rand-read-4k · read.iops", "host time series"]
    assert doc[0]["rows"][1] == _tables()[0].rows[1]  # the CI ends too, though not a shown column
    assert doc[0]["notes"] == ["≥0: bounded"] and doc[0]["columns"][:2] == AXES


def test_several_tables_make_one_csv_stream_with_a_table_column() -> None:
    assert render_tables(_tables(), "csv") == CSV_TWO


def test_several_tables_in_text_and_markdown_follow_each_other() -> None:
    assert render_tables(_tables(), "markdown") == MARKDOWN + "\n" + MARKDOWN_SECOND
    assert render_tables(_tables(), "table").startswith(TEXT + "\nhost time series\n")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="xml"):
        render_tables(_tables(), "xml")
