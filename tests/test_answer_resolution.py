"""The pieces of an answer not told apart (report/recommend/resolution.py) and of the one ratio
grammar (report/recommend/grammar.py), on constructed inputs whose right wording is known."""

from __future__ import annotations

from iomatrix.report.recommend.change import decided_better, not_decided
from iomatrix.report.recommend.grammar import compared, ratio_against, ratio_words, to_best, versus
from iomatrix.report.recommend.resolution import pick_reason, run_seconds, settle_text
from iomatrix.report.recommend.verdict import Gain
from iomatrix.stats import RatioCI

RAW_WB = {"format": "raw", "cache": "writeback", "aio": "threads"}
QCOW2_WB = {"format": "qcow2", "cache": "writeback", "aio": "threads"}
RAW_NONE = {"format": "raw", "cache": "none", "aio": "threads"}
RAW_UNSAFE = {"format": "raw", "cache": "unsafe", "aio": "threads"}


def test_the_pick_names_the_property_it_rests_on() -> None:
    assert pick_reason(RAW_WB, RAW_UNSAFE) == "power-loss safety"
    assert pick_reason(RAW_WB, RAW_NONE, "QEMU's default") == "QEMU's default"
    assert pick_reason(RAW_NONE, RAW_WB, "what you run") == "keeps what you run"
    # raw and qcow2 both at QEMU's default cache and aio: the format's own property decides
    assert pick_reason(RAW_WB, QCOW2_WB, "QEMU's default").startswith("raw: the simpler format")
    assert pick_reason(QCOW2_WB, RAW_WB) == "qcow2: snapshots and thin provisioning"


def test_rounds_needed_become_minutes_and_a_budget() -> None:
    """44 runs of 2.35 s in a sweep whose wall time is 1.03× its runs' sum: 60 rounds of two cells
    are 60 × 2 × 2.42 s = 4.8 minutes, 5 with the plan's 4 minutes: "9m"."""
    runs = [("files", 2.35)] * 44
    per = run_seconds(runs, 44 * 2.35 * 1.03)
    assert abs(per["files"] - 2.35 * 1.03) < 1e-9
    said = settle_text(60, per["files"], "4m")
    assert said == 'about 5 minutes more would settle it (time_budget = "9m" in the plan, now "4m")'
    assert "round" not in said
    assert settle_text(1272, 2.4, "4m").startswith("about 2 hours more")
    assert settle_text(None, 2.4, "4m") == ""  # no estimate: nothing promised
    # more than a day of runs: no budget a user would set; said as such, in days, not rounds
    absurd = settle_text(100_000, 2.4, "4m")
    assert absurd == "not within any budget: about 6 days more would settle it", absurd


def test_every_ratio_reads_the_pick_against_the_other() -> None:
    assert ratio_words(RatioCI(2.18, 1.47, 3.21), "write.iops") == "2.18× (1.47–3.21)"
    # a latency gain is other/pick: 1.43 = the pick's latency is 1.43× lower
    assert ratio_words(RatioCI(1.43, 1.2, 1.7), "read.clat_p99_us").endswith("lower latency")
    worse = ratio_words(RatioCI(0.7, 0.5, 0.8), "read.clat_p99_us")
    assert worse == "1.43× (1.25–2.00) higher latency", worse
    line = versus(
        "raw · writeback",
        "qcow2 · cache=none",
        [("database:log", RatioCI(2.18, 1.47, 3.21), "write.iops")],
    )
    assert line == "raw · writeback is 2.18× (1.47–3.21) qcow2 · cache=none on database:log"


def test_every_other_ratio_reads_in_the_same_grammar() -> None:
    """A workload line under the pick, a --detail line, a ranking's "vs best" column and a role's
    figure against the best (issue 70: "4,975 µs, 0.60× the best" had no direction)."""
    assert ratio_against(RatioCI(1.06, 0.63, 1.78), "write.iops", "Nova's default") == (
        "1.06× (0.63–1.78) Nova's default"
    )
    assert ratio_against(RatioCI(0.7, 0.5, 0.8), "read.clat_p99_us", "QEMU's default") == (
        "1.43× (1.25–2.00) higher latency than QEMU's default"
    )
    assert compared(RatioCI(1.43, 1.2, 1.7), "read.clat_p99_us", "X").startswith("has 1.43× (")
    assert compared(RatioCI(2.18, 1.47, 3.21), "write.iops", "X") == "is 2.18× (1.47–3.21) X"
    # a role's ratio of means has no interval by nature: no "(no interval)"
    point = ratio_against(RatioCI(0.6, None, None), "read.clat_p99_us", "the best", point=True)
    assert point == "1.67× higher latency than the best"
    # a ranked row against the best, the row the subject: centre(row)/centre(best)
    assert to_best(RatioCI(0.65, 0.22, 1.98), "read.iops") == "0.65× (0.22–1.98)"
    assert to_best(RatioCI(1.5, 1.2, 1.8), "read.clat_p99_us") == "1.50× (1.20–1.80) higher latency"
    assert to_best(RatioCI(1.0, 1.0, 1.0), "read.clat_p99_us") == "1.00× (1.00–1.00)"
    assert to_best(None, "read.iops") == "–"


def test_a_change_is_decided_only_where_its_interval_clears_one() -> None:
    cur = "current (qcow2 · cache=none)"
    clear = Gain(cur, "qcow2 · none", RatioCI(1.41, 1.12, 1.76))
    wide = Gain(cur, "qcow2 · none", RatioCI(6.9, 0.36, 133.0))
    touching = Gain(cur, "qcow2 · none", RatioCI(1.06, 0.96, 1.16))
    assert decided_better(clear) and not decided_better(wide) and not decided_better(touching)
    assert not_decided([("files", clear), ("data", wide)]) == ["data 0.36–133×"]
    assert not_decided([("files", clear)]) == []
    # a current configuration no cell ran: nothing measured to decide against, the gains say so
    assert not_decided([("files", Gain(cur, None, None, "not in this sweep"))]) == []
