"""One grammar for every ratio (issue 70): "A is N× B", always the pick against the other.

A Gain's ratio is oriented so that > 1 means the pick is better (report/recommend/verdict.py):
pick/other for a throughput, other/pick for a latency. A throughput is said as it is ("raw ·
writeback is 2.18× (1.47–3.21) qcow2 · cache=none"); a latency as "N× lower latency" when the pick
is better and "N× higher latency" (the interval turned with it) when it is worse, so that the number
always reads in the words next to it.

Worked example: a p99 latency of 700 µs for the pick against 1,000 µs: the gain is 1000/700 =
1.43×, said "1.43× lower latency"; 1,000 µs against 700 µs: 0.70×, said "1.43× higher latency"."""

from __future__ import annotations

from iomatrix.metrics import metric_info
from iomatrix.report.figures import imprecise, ratio_text
from iomatrix.stats import RatioCI


def turned(r: RatioCI) -> RatioCI:
    """The same ratio the other way round: B over A from A over B, its interval turned with it."""
    return RatioCI(
        None if not r.ratio else 1 / r.ratio,
        None if not r.high else 1 / r.high,
        None if not r.low else 1 / r.low,
    )


def ratio_words(ratio: RatioCI | None, metric: str) -> str:
    """The pick's ratio to another on `metric` in words: "2.18× (1.47–3.21)" for a throughput,
    "1.43× (1.20–1.70) lower latency" or "… higher latency" for a latency; "–" without one."""
    if ratio is None or ratio.ratio is None:
        return "–"
    if ratio.low is not None and ratio.high is not None and imprecise(ratio.low, ratio.high):
        # the bounds only, in the pick's favour's direction (> 1: better): no figure to turn
        return f"{ratio.low:.2g}–{ratio.high:.3g}× (too wide to tell)"
    if metric_info(metric).higher_is_better:
        return ratio_text(ratio.ratio, ratio.low, ratio.high)
    if ratio.ratio >= 1:
        return f"{ratio_text(ratio.ratio, ratio.low, ratio.high)} lower latency"
    return f"{ratio_text(*turned(ratio))} higher latency"


def versus(pick: str, other: str, parts: list[tuple[str, RatioCI | None, str]]) -> str:
    """The pick against another cell over several workloads, in one sentence: "raw · writeback is
    2.18× (1.47–3.21) qcow2 · cache=none on database:log, 1.41× (1.12–1.76) on file-server:files".
    `parts`: (workload, the pick's gain over `other`, its metric)."""
    said = []
    for i, (workload, ratio, metric) in enumerate(parts):
        words = ratio_words(ratio, metric)
        if i == 0:
            latency = words.endswith("latency")  # "has N× lower latency than B"
            words = f"has {words} than {other}" if latency else f"is {words} {other}"
        said.append(f"{words} on {workload}")
    return f"{pick} {', '.join(said)}"


def interval_text(low: float, high: float) -> str:
    """An interval of a ratio, "1.08–1.35"; a bound that two decimals would show as 1.00 gets a
    third, so that an interval that excludes 1 never reads as if it touched it ("1.003–1.27")."""

    def bound(x: float) -> str:
        return f"{x:.3f}" if f"{x:.2f}" == "1.00" and x != 1 else f"{x:.2f}"

    return f"{bound(low)}–{bound(high)}"
