"""Change what the user runs only on a decision (issue 71).

With `--current` the answer is a change to a running VM: converting its data, switching its cache
mode. Such a change is proposed only where the sweep decided it: the candidate's ratio to the
current configuration, over the rounds both ran (report/recommend/verdict.py: Gain, > 1 = the
candidate is better), has its 95% interval above 1 on every job the answer is for. Anywhere else
(not told apart, tied, an interval that reaches below 1) the answer is to keep what runs today, and
it says what the candidate measured and why that is not enough.

Which test decides: the printed 95% interval of the paired ratio, the one shown beside the answer,
so that the text and the figures agree; the race's own sequential test (stats/decision.py) may
separate two cells at a stricter level, never at a looser one.

Worked example (tests/data/quickstart-roles, current qcow2 · cache=none): raw · writeback is
2.18× (1.47–3.21) current on database:log and 1.41× (1.12–1.76) on file-server:files, but
0.36–133× on database:data: not decided there, so the answer keeps qcow2 · cache=none and prints
neither a `qemu-img convert` nor a cache change."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.report.recommend.verdict import Gain

CURRENT = "current"


def decided_better(g: Gain | None) -> bool:
    """The candidate is shown better than the configuration `g` compares it with: a measured ratio
    (> 1 = better) whose 95% interval lies above 1 and is not too wide to be a figure."""
    r = None if g is None else g.ratio
    if r is None or r.ratio is None or r.low is None or r.high is None:
        return False
    return r.low > 1 and not r.imprecise


def measured_against_current(g: Gain | None) -> bool:
    """`g` compares with the current configuration as a cell the sweep measured (a ratio can then
    decide; a current configuration no cell runs is said so by the gain's own note)."""
    return g is not None and g.against.startswith(CURRENT) and g.label is not None


def interval_words(g: Gain | None) -> str:
    """A ratio's interval in a few words, "0.36–133×", or "no interval"."""
    r = None if g is None else g.ratio
    if r is None or r.low is None or r.high is None:
        return "no interval"
    high = f"{r.high:.3g}" if r.high >= 10 else f"{r.high:.2f}"
    return f"{r.low:.2f}–{high}×"


def not_decided(gains: Sequence[tuple[str, Gain | None]]) -> list[str]:
    """The jobs (name, the candidate's gain against the current configuration) on which the change
    is not decided better, each with the interval reached: ["database:data 0.36–133×"]. Empty
    when the change is decided on every one, or when the current configuration was not measured
    (nothing to decide against: the gains' notes say so)."""
    if not any(measured_against_current(g) for _, g in gains):
        return []
    return [f"{job} {interval_words(g)}" for job, g in gains if not decided_better(g)]


def keep_reason(candidate: str, undecided: Sequence[str]) -> str:
    """Why the answer keeps what runs: "raw · writeback is not decided better on database:data
    (0.36–133× here): a change is made only on a decision"."""
    where = ", ".join(undecided)
    return f"{candidate} is not decided better here ({where}): a change is made only on a decision"
