"""The render layer: constant axes fold into a header, intervals of positive quantities never go
below 0, tables fit 100 columns; the compare gate finds regressions in the worse direction only."""

from __future__ import annotations

import csv
import io
import json

import pytest

from iomatrix.report.export import DataTable, render_tables
from iomatrix.report.export.text import table_text as to_terminal
from iomatrix.report.exports import regressions
from iomatrix.report.figures import ci_text, ratio_text
from iomatrix.report.recommend.verdict import Declined, Gain
from iomatrix.stats import RatioCI, compare_sweeps

AXES = ["tier", "cache", "backing"]


def _table() -> DataTable:
    rows = [
        {
            "tier": "guest",
            "cache": c,
            "backing": "ext4-loop-with-a-long-name",
            "mean": m,
            "95% CI": ci_text(lo, hi)[0],
            "ci95_low": lo,
            "ci95_high": hi,
        }
        for c, m, lo, hi in (("none", 120.0, 100.0, 140.0), ("writeback", 20.0, -15.0, 55.0))
    ]
    return DataTable("t", [*AXES, "mean", "95% CI"], rows, axes=AXES)


def test_constant_axes_fold_into_a_header_line() -> None:
    text = to_terminal(_table())
    lines = text.splitlines()
    assert lines[1] == "constant: tier=guest backing=ext4-loop-with-a-long-name"
    assert "backing" not in lines[2] and "cache" in lines[2]
    assert all(len(line) <= 100 for line in lines)


def test_positive_intervals_never_reach_below_zero() -> None:
    # An interval of a quantity that cannot be negative that reaches ≤ 0 (or spans > 10×) says
    # nothing about its size: "not measured precisely", never a negative figure (issue 38).
    assert ci_text(-15.0, 55.0) == ("not measured precisely", False)
    assert ci_text(0.0, 55.0) == ("not measured precisely", False)
    assert ci_text(6.0, 55.0) == ("6–55", False)  # 9.2×: wide, but a figure
    assert ci_text(-15.0, 55.0, positive=False) == ("-15–55", False)
    assert ratio_text(1.5, -0.2, 3.0) == "not measured precisely (-0.2–3×)"
    assert ratio_text(2.71, 0.04, 195.49) == "not measured precisely (0.04–195×)"
    assert ratio_text(1.5, 1.2, 3.0) == "1.50× (1.20–3.00)"
    assert "not measured precisely" in to_terminal(_table())


@pytest.mark.parametrize(
    "low, high, says, not_says",
    [
        (
            1.2,
            15.03,
            "may gain over the answer, not measured precisely (1.2–15×), but is not",
            "4.84×",
        ),
        (
            -0.3,
            9.0,
            "not measured precisely (-0.3–9×)",
            "0.00–",
        ),  # not bounded at "0.00" as a figure
        # 4.7×: a figure
        (2.1, 9.9, "would gain 4.84× (2.10–9.90) over the answer but is not", "precisely"),
    ],
)
def test_the_not_chosen_line_of_the_answer_states_a_wide_ratio_as_no_figure(
    low: float, high: float, says: str, not_says: str
) -> None:
    """The headline's "not chosen" line (a faster configuration the requirements exclude) writes its
    ratio as every other ratio: more than 10× between the interval's ends is "not measured
    precisely" (issue 49: it printed "4.84× (1.20–15.03)")."""
    line = Declined(
        "unsafe",
        Gain("best without the requirements", "unsafe", RatioCI(4.84, low, high)),
        ("power-loss-safe",),
        "writes lost",
        "--allow-data-loss",
    ).text()
    assert says in line and not_says not in line, line


def test_long_cell_names_wrap_instead_of_truncating() -> None:
    long = (
        "format=qcow2 preallocation=metadata cache=writethrough aio=io_uring "
        "bus=virtio-scsi backing=x" * 2
    )
    t = DataTable("", ["cell", "mean"], [{"cell": long, "mean": 1.0}])
    text = to_terminal(t)
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "".join(text.split()).count("backing=x") == 2 and "…" not in text


def test_machine_formats_carry_every_field() -> None:
    t = _table()
    rows = list(csv.DictReader(io.StringIO(render_tables([t], "csv"))))
    assert rows[1]["ci95_low"] == "-15.0" and rows[1]["backing"] == "ext4-loop-with-a-long-name"
    doc = json.loads(render_tables([t], "json"))
    assert doc[0]["rows"][0]["ci95_high"] == 140.0
    md = render_tables([t], "markdown")
    assert "Constant across rows: `tier=guest`, `backing=ext4-loop-with-a-long-name`" in md
    assert "| cache | mean | 95% CI |" in md


def test_fail_above_flags_only_significant_changes_for_the_worse() -> None:
    a = {
        "cache=none · rand-read-4k · read.iops": [1000.0, 1010.0, 990.0, 1005.0],
        "cache=none · rand-read-4k · read.clat_mean_us": [100.0, 101.0, 99.0, 100.5],
        "cache=writeback · rand-read-4k · read.iops": [1000.0, 1010.0, 990.0, 1005.0],
    }
    # 20 % fewer IOPS: worse
    b = {
        "cache=none · rand-read-4k · read.iops": [800.0, 805.0, 795.0, 810.0],
        # 20 % less latency: better
        "cache=none · rand-read-4k · read.clat_mean_us": [80.0, 81.0, 79.0, 80.5],
        "cache=writeback · rand-read-4k · read.iops": [1200.0, 1190.0, 1210.0, 1205.0],
    }  # better
    changes = compare_sweeps(a, b)
    assert all(c.significant for c in changes)
    assert [c.key for c in regressions(changes, 10)] == ["cache=none · rand-read-4k · read.iops"]
    assert regressions(changes, 25) == []


def test_block_size_chart_uses_a_log2_axis() -> None:
    from iomatrix.report.charts import SizeSeries, blocksize_chart, blocksize_positions

    where, group = blocksize_positions(["512", "4k", "64k", "1m"])
    # log2(bytes): each doubling one step
    assert where == {"512": 9.0, "4k": 12.0, "64k": 16.0, "1m": 20.0}
    assert group == pytest.approx(0.8 * 3)  # 512 → 4k is the closest pair (3 doublings)
    assert blocksize_positions(["4k"]) == ({"4k": 12.0}, 0.8)
    svg = blocksize_chart(
        [SizeSeries("a", {"4k": (100.0, 90.0, 110.0), "1m": (900.0, 850.0, 950.0)})],
        ["4k", "1m"],
        "MB/s",
    )
    assert "log₂" in svg and svg.startswith("<svg")
