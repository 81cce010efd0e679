"""One grammar for every ratio (issue 70): "A is N× B", always the pick against the other.

A Gain's ratio is oriented so that > 1 means the pick is better (report/recommend/verdict.py):
pick/other for a throughput, other/pick for a latency. A throughput is said as it is ("raw ·
writeback is 2.18× (1.47–3.21) qcow2 · cache=none"); a latency as "N× lower latency" when the pick
is better and "N× higher latency" (the interval turned with it) when it is worse, so that the number
always reads in the words next to it; a job's time to complete (a guest filesystem job's
``workload.seconds``) as "N× faster" / "N× slower" (``MetricInfo.lower_words``).

Worked example: a p99 latency of 700 µs for the pick against 1,000 µs: the gain is 1000/700 =
1.43×, said "1.43× lower latency"; 1,000 µs against 700 µs: 0.70×, said "1.43× higher latency"."""

from __future__ import annotations

from iomatrix.metrics import metric_info
from iomatrix.report.figures import imprecise, ratio_text
from iomatrix.stats import RatioCI


def ratio_words(ratio: RatioCI | None, metric: str, point: bool = False) -> str:
    """The pick's ratio to another on `metric` in words: "2.18× (1.47–3.21)" for a throughput,
    "1.43× (1.20–1.70) lower latency" or "… higher latency" for a latency; "–" without one.
    `point`: a ratio of means that has no interval by nature (a role's figure against the best),
    said "0.95×" without "(no interval)"."""
    if ratio is None or ratio.ratio is None:
        return "–"
    if ratio.low is not None and ratio.high is not None and imprecise(ratio.low, ratio.high):
        # the bounds only, in the pick's favour's direction (> 1: better): no figure to turn
        return f"{ratio.low:.2g}–{ratio.high:.3g}× (too wide to tell)"
    info = metric_info(metric)
    said = ratio if info.higher_is_better or ratio.ratio >= 1 else ratio.turned()
    assert said.ratio is not None
    text = f"{said.ratio:.2f}×" if point and said.low is None else ratio_text(*said)
    if info.higher_is_better:
        return text
    better, worse = info.lower_words
    return f"{text} {better if ratio.ratio >= 1 else worse}"


def directed(words: str) -> bool:
    """Whether ratio words carry their direction (a lower-is-better metric's): they then take
    "than" before the other cell."""
    return words.endswith(("latency", "faster", "slower"))


def ratio_against(ratio: RatioCI | None, metric: str, other: str, point: bool = False) -> str:
    """The pick against `other` without its subject, for a line under the pick's name: "2.18×
    (1.47–3.21) qcow2 · cache=none", "1.43× (1.20–1.70) lower latency than Nova's default"."""
    words = ratio_words(ratio, metric, point)
    return f"{words} than {other}" if directed(words) else f"{words} {other}"


def compared(ratio: RatioCI | None, metric: str, other: str, point: bool = False) -> str:
    """The pick against `other` after its subject: "is 2.18× (1.47–3.21) qcow2 · cache=none", "has
    1.43× (1.20–1.70) lower latency than Nova's default"."""
    said = ratio_against(ratio, metric, other, point)
    return f"has {said}" if ratio_words(ratio, metric, point).endswith("latency") else f"is {said}"


def to_best(ratio: RatioCI | None, metric: str) -> str:
    """A ranked cell against the best, the cell the subject (a table's "vs best" column): the ratio
    of centres as it is for a throughput, "0.65× (0.22–1.98)"; a latency's with its direction,
    "1.50× (1.20–1.80) higher latency" (a bare 1.50× of a latency reads either way, issue 70); the
    best itself "1.00× (1.00–1.00)". `ratio`: centre(cell)/centre(best) (stats/ranking.py)."""
    if ratio is None or ratio.ratio is None:
        return "–"
    if ratio == (1.0, 1.0, 1.0):  # the best itself: no direction to say
        return ratio_text(*ratio)
    if metric_info(metric).higher_is_better:
        return ratio_words(ratio, metric)
    return ratio_words(ratio.turned(), metric)


# The heading of the figure a ranking orders its cells by, and every "best" is the best of
# (issue 70: the table was headed "mean" over arithmetic means while the order was the geometric
# means', so the HTML's shortest latency bar ranked last): the geometric mean of a blocked analysis
# (stats/ranking.py), else the mean.
GEO_MEAN = "geo. mean"


def centre_heading(blocked: bool) -> str:
    """ "geo. mean" for a ranking blocked by round (its centres are geometric means), else
    "mean"."""
    return GEO_MEAN if blocked else "mean"


def versus(pick: str, other: str, parts: list[tuple[str, RatioCI | None, str]]) -> str:
    """The pick against another cell over several workloads, in one sentence: "raw · writeback is
    2.18× (1.47–3.21) qcow2 · cache=none on database:log, 1.41× (1.12–1.76) on file-server:files".
    `parts`: (workload, the pick's gain over `other`, its metric)."""
    said = []
    for i, (workload, ratio, metric) in enumerate(parts):
        words = compared(ratio, metric, other) if i == 0 else ratio_words(ratio, metric)
        said.append(f"{words} on {workload}")
    return f"{pick} {', '.join(said)}"


def interval_text(low: float, high: float) -> str:
    """An interval of a ratio, "1.08–1.35"; a bound that two decimals would show as 1.00 gets a
    third, so that an interval that excludes 1 never reads as if it touched it ("1.003–1.27")."""

    def bound(x: float) -> str:
        return f"{x:.3f}" if f"{x:.2f}" == "1.00" and x != 1 else f"{x:.2f}"

    return f"{bound(low)}–{bound(high)}"
