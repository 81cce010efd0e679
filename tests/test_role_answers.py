"""One answer per role (report/recommend/roles.py): the deciding figure's pick, passed over when it
is worse than the role's margin on another deciding figure, on constructed data where the right
answer is known."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace

import pytest

from iomatrix import roles
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend.roles import (
    FigureMeans,
    combine,
    interval_text,
    role_answer,
    role_answers,
    shortfall,
)
from iomatrix.report.recommend.verdict import Choice, Verdict

BUILTIN_DB = roles.builtin("database")
assert BUILTIN_DB is not None
LOG_RATE, DATA_P99, DATA_WRITE_P99 = BUILTIN_DB.figures
# The mechanics below are shown on a database role decided by its data files' p99 read latency
# first, as a custom role may order them (the built-in one lets its log decide: the test below).
DB = replace(BUILTIN_DB, figures=(DATA_P99, LOG_RATE, DATA_WRITE_P99))


def test_the_builtin_database_is_decided_by_its_commits_first() -> None:
    """The log's commit rate decides a database (steadier than a p99 of a 1 s run: docs/roles.md);
    the data files' p99 latencies veto."""
    assert [f.key for f in BUILTIN_DB.figures] == [
        "log:write.iops",
        "data:read.clat_p99_us",
        "data:write.clat_p99_us",
    ]


def test_shortfall_both_directions() -> None:
    # a p99 20% above the best
    assert shortfall(1.2, 1.0, higher_is_better=False) == pytest.approx(0.2)
    assert shortfall(900, 1000, higher_is_better=True) == pytest.approx(0.1)  # 10% less throughput
    assert shortfall(1100, 1000, higher_is_better=True) == 0.0


def test_combine_vetoes_a_pick_worse_than_the_margin_elsewhere() -> None:
    log = FigureMeans(LOG_RATE, {"A": 800.0, "B": 1000.0})
    got = combine(["A", "B"], [log], margin=0.05)
    assert got.cell == "B"
    assert [(v.cell, v.best, round(v.worse, 2)) for v in got.vetoes] == [("A", "B", 0.2)]
    assert "A not chosen: 20% worse than B on commits per second" in got.vetoes[0].text(0.05)


def test_combine_keeps_the_pick_within_the_margin() -> None:
    log = FigureMeans(LOG_RATE, {"A": 960.0, "B": 1000.0})  # 4% worse: within 5%
    assert combine(["A", "B"], [log], margin=0.05).cell == "A"
    assert combine(["A", "B"], [log], margin=0.03).cell == "B"


def test_combine_every_candidate_vetoed() -> None:
    write = FigureMeans(DATA_WRITE_P99, {"A": 300.0, "B": 400.0, "C": 100.0})  # lower is better
    got = combine(["A", "B"], [write], margin=0.05)
    assert got.cell is None and [v.cell for v in got.vetoes] == ["A", "B"]


def _cw(cell_id: int, cache: str, workload: str, samples: dict[str, list[float]]) -> CellWorkload:
    axes = {
        "tier": "blocklayer",
        "format": "raw",
        "cache": cache,
        "aio": "threads",
        "backing": "dir",
    }
    return CellWorkload(
        cell_id, f"k{cell_id}", axes, {}, workload, [], samples=defaultdict(list, samples)
    )


def _sweep(log_none: float) -> tuple[list[CellWorkload], dict[str, Verdict]]:
    cws = [
        _cw(
            1,
            "none",
            "database:data",
            {"read.clat_p99_us": [100, 102], "write.clat_p99_us": [158, 162]},
        ),
        _cw(
            2,
            "writeback",
            "database:data",
            {"read.clat_p99_us": [103, 105], "write.clat_p99_us": [150, 160]},
        ),
        _cw(1, "none", "database:log", {"write.iops": [log_none, log_none]}),
        _cw(2, "writeback", "database:log", {"write.iops": [1000, 1000]}),
    ]
    none, writeback = cws[0].label(), cws[1].label()
    data = Verdict(
        "database:data", "read.clat_p99_us", False, "blocklayer", Choice(none, (), "separated")
    )
    log = Verdict(
        "database:log", "write.iops", True, "blocklayer", Choice(writeback, (), "separated")
    )
    return cws, {"database:data": data, "database:log": log}


def test_role_answer_follows_the_deciding_figure() -> None:
    cws, verdicts = _sweep(log_none=990)
    a = role_answer(DB, verdicts, cws)
    assert a.cell == cws[0].label() and a.status == "answer" and not a.vetoes
    assert a.headline().startswith(f"For a database VM: use {cws[0].label()} (decided)")
    rows = {f["figure"]: f for f in a.figures}
    assert rows["data:read.clat_p99_us"]["best_cell"] == a.cell
    # On the other figures cache=none is within 5% of writeback, the best there (1% fewer commits, a
    # 3% longer write p99): stated against the best, not a reason to pass it over.
    assert rows["log:write.iops"]["ratio_to_best"] == pytest.approx(0.99)
    # the figures are geometric means, the ranking's (issue 70): 155 against 160 µs, about
    assert rows["data:write.clat_p99_us"]["ratio_to_best"] == pytest.approx(155 / 160, rel=1e-3)
    lines = a.lines()
    assert lines[0].startswith(
        "p99 read latency of the data files at the offered rate (data:read.clat_p99_us): "
        "101 µs, the best"
    )
    assert lines[1].endswith(f"0.99× the best, {cws[1].label()}")


def test_role_answer_says_why_the_pick_was_not_chosen() -> None:
    cws, verdicts = _sweep(log_none=500)  # cache=none commits half as fast: beyond the 5% margin
    a = role_answer(DB, verdicts, cws)
    assert a.cell == cws[1].label()
    assert any("not chosen: 50% worse than" in v and "commits per second" in v for v in a.vetoes)
    assert any("not chosen" in line for line in a.lines())
    d = a.as_dict()
    assert (
        d["cell"] == a.cell
        and d["not_chosen"] == a.vetoes
        and d["text"].startswith("For a database VM: use")
    )


def test_role_without_a_decision_says_which_figure() -> None:
    cws, verdicts = _sweep(log_none=990)
    verdicts["database:data"] = Verdict(
        "database:data", "read.clat_p99_us", False, "blocklayer", None, missing="not separated yet"
    )
    a = role_answer(DB, verdicts, cws)
    assert a.cell is None and "not separated yet" in a.missing
    assert a.headline().startswith(
        "For a database VM: no answer yet: p99 read latency of the data files"
    )


def test_role_answers_from_a_stored_plan_definition() -> None:
    cws, verdicts = _sweep(log_none=990)
    plan = {
        "roles": ["database"],
        "role": {"mine": {"jobs": {"d": "d.fio"}, "decides": ["d:total.iops"]}},
    }
    got = role_answers(plan, list(verdicts.values()), cws)
    assert [a.role for a in got] == ["database", "mine"]
    assert got[1].cell is None and "file:d.fio has no ranked cells" in got[1].missing
    assert role_answers({}, list(verdicts.values()), cws) == []


def test_passing_the_pick_over_never_falls_to_a_cell_worse_on_the_deciding_figure() -> None:
    """The pick (writeback) is 23% worse on write p99; cache=none, the only other cell, is 2.5×
    worse on read p99, the figure that decides: no cell is near the best on both, so it is a
    trade-off, and the role's weights (1 each for vdi) settle it: the pick's read advantage
    outweighs its write loss, √(2.5 / 1.23) = 1.43×, and with no run-to-run noise that is
    separated (stats/weighed.py)."""
    vdi = roles.builtin("vdi")
    assert vdi is not None

    def cw(cell_id: int, cache: str, workload: str, metric: str, v: float) -> CellWorkload:
        return _cw(cell_id, cache, workload, {metric: [v, v]})

    cws = [
        cw(1, "none", "vdi:read", "read.clat_p99_us", 10000),
        cw(2, "writeback", "vdi:read", "read.clat_p99_us", 4000),
        cw(1, "none", "vdi:write", "write.clat_p99_us", 10000),
        cw(2, "writeback", "vdi:write", "write.clat_p99_us", 12300),
    ]
    read = Verdict(
        "vdi:read", "read.clat_p99_us", False, "blocklayer", Choice(cws[1].label(), (), "separated")
    )
    a = role_answer(vdi, {"vdi:read": read}, cws)
    assert (a.cell, a.status, a.answered) == (cws[1].label(), "answer", True)
    assert len(a.vetoes) == 1 and "23% worse than" in a.vetoes[0]
    assert a.instead_of is None and a.tradeoff == ""
    assert a.brief() == (
        f"For {vdi.answer_for}: use {cws[1].label()} (a trade-off, weighed: 1.43–1.43× "
        f"{cws[0].label()})"
    )
    assert a.headline() == (
        f"For {vdi.answer_for}: use {cws[1].label()} (a trade-off, weighed: {cws[1].label()} "
        f"1.43–1.43× {cws[0].label()} with its figures weighed (read:read.clat_p99_us ×1, "
        "write:write.clat_p99_us ×1; 90% CI): better)"
    )
    w = a.as_dict()["weighed"]
    assert (w["cell"], w["against"], w["outcome"]) == (cws[1].label(), cws[0].label(), "separated")
    assert w["ratio"] == pytest.approx((2.5 / 1.23) ** 0.5)
    assert [f["figure"] for f in a.figures] == ["read:read.clat_p99_us", "write:write.clat_p99_us"]


def test_a_balanced_trade_off_stays_one_and_says_what_weighing_gives() -> None:
    """Each side 2.5× better on one p99, over noisy runs: weighed, they are even (1.00×) but the
    interval is wider than the margin both ways, so it stays a trade-off, named as one, with the
    weighed interval; the other side's advantage is the 95% interval of the ratio, turned so that it
    reads as that cell's advantage (a latency: the pick's p99 over the best's). It still ends with
    one configuration (issue 71): the deciding figure's pick, not told apart, the trade-off its
    reason."""
    vdi = roles.builtin("vdi")
    assert vdi is not None
    spread = [1.0, 1.15, 0.85, 1.1, 0.9]
    cws = [
        _cw(1, "none", "vdi:read", {"read.clat_p99_us": [10000 * x for x in spread]}),
        _cw(2, "writeback", "vdi:read", {"read.clat_p99_us": [4000 * x for x in spread[::-1]]}),
        _cw(1, "none", "vdi:write", {"write.clat_p99_us": [4000 * x for x in spread]}),
        _cw(2, "writeback", "vdi:write", {"write.clat_p99_us": [10000 * x for x in spread]}),
    ]
    read = Verdict(
        "vdi:read", "read.clat_p99_us", False, "blocklayer", Choice(cws[1].label(), (), "separated")
    )
    a = role_answer(vdi, {"vdi:read": read}, cws)
    assert a.cell == cws[1].label() and a.answered and not a.missing
    assert a.resolution == "not told apart at this resolution"
    w = a.as_dict()["weighed"]
    assert w["outcome"] == "open" and w["low"] < 1 / 1.05 and w["high"] > 1.05
    assert w["ratio"] == pytest.approx(1.0)
    side = a.tradeoff.split("; ")[1]
    # the one grammar (issue 70): a latency's ratio says its direction
    assert side.startswith(f"{cws[0].label()} has ") and side.endswith(
        f"× lower latency than {cws[1].label()} on write:write.clat_p99_us"
    )
    found = re.search(r" ([0-9.]+)–([0-9.]+)× lower latency", side)
    assert found is not None
    low, high = float(found[1]), float(found[2])
    assert 1.9 < low < 2.5 < high < 3.3  # writeback's write p99 2.5× cache=none's
    assert a.brief() == (
        f"For {vdi.answer_for}: use {cws[1].label()} (a trade-off, not told apart: "
        f"{a.tradeoff.split('; weighed')[0]})"
    )
    assert "picked for " in a.headline() and "the role's first figure" in a.headline()
    assert a.tradeoff.endswith("90% CI): not separated, nor within 5%")


def test_the_database_weighs_its_commits_as_much_as_both_data_p99s() -> None:
    """The built-in database's weights (2 : 1 : 1): cache=none commits 1.25× faster and is vetoed
    on the data files' p99 read (2× worse); with its write p99 even, the weighed ratio is
    1.25^½ · 0.5^¼ = 0.94: writeback better by 6%, separated over steady runs."""
    spread = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0]

    def runs(v: float) -> list[float]:
        return [v * x for x in spread]

    def data(cell_id: int, cache: str, read_p99: float) -> CellWorkload:
        samples = {"read.clat_p99_us": runs(read_p99), "write.clat_p99_us": runs(300)}
        return _cw(cell_id, cache, "database:data", samples)

    cws = [
        _cw(1, "none", "database:log", {"write.iops": runs(1250)}),
        _cw(2, "writeback", "database:log", {"write.iops": runs(1000)}),
        data(1, "none", 800),
        data(2, "writeback", 400),
    ]
    log = Verdict("database:log", "write.iops", True, "blocklayer", Choice(cws[0].label(), (), "x"))
    a = role_answer(BUILTIN_DB, {"database:log": log}, cws)
    assert (a.cell, a.status, a.instead_of) == (cws[1].label(), "answer", cws[0].label())
    w = a.as_dict()["weighed"]
    assert w["weights"] == {
        "log:write.iops": 2.0,
        "data:read.clat_p99_us": 1.0,
        "data:write.clat_p99_us": 1.0,
    }
    assert w["ratio"] == pytest.approx(1 / (1.25**0.5 * 0.5**0.25), rel=1e-3)
    assert 1.0 < w["low"] < w["ratio"] < w["high"]
    # commits 1.6× faster outweigh the p99 read: the pick stands, weighed
    faster = [_cw(1, "none", "database:log", {"write.iops": runs(1600)}), *cws[1:]]
    b = role_answer(BUILTIN_DB, {"database:log": log}, faster)
    assert (b.cell, b.status, b.instead_of) == (cws[0].label(), "answer", None)
    # commits 1.19× faster, p99 read 1.19² = 1.42× worse: 1.19^½ · (1/1.42)^¼ = 1.00, within 5%
    # both ways: the deciding figure's pick kept, as a tie
    even = [
        _cw(1, "none", "database:log", {"write.iops": runs(1190)}),
        cws[1],
        data(1, "none", 400 * 1.19**2),
        cws[3],
    ]
    c = role_answer(BUILTIN_DB, {"database:log": log}, even)
    assert (c.cell, c.status, c.answered) == (cws[0].label(), "tied", True)
    assert c.as_dict()["weighed"]["outcome"] == "within"
    assert "within 5% both ways, the deciding figure's pick kept" in c.headline()


def test_the_answer_says_which_pick_it_replaced() -> None:
    cws, verdicts = _sweep(log_none=500)
    a = role_answer(DB, verdicts, cws)
    assert a.instead_of == cws[0].label()
    assert (
        f"in place of {cws[0].label()}, the deciding figure's pick (decided): see below"
        in a.headline()
    )


def test_an_equivalent_deciding_figure_keeps_and_answers_the_role() -> None:
    """The deciding job's decision ended as equivalent (stats/decision.py): the role keeps that
    cell, says so with the measured bounds, and counts as answered; only leading does not."""
    cws, verdicts = _sweep(log_none=990)
    kept = f"nothing measured is faster by more than 5% ({cws[1].label()} 0.97–1.04×)"
    verdicts["database:data"] = Verdict(
        "database:data",
        "read.clat_p99_us",
        False,
        "blocklayer",
        Choice(cws[0].label(), (cws[1].label(),), "equivalent", kept),
    )
    a = role_answer(DB, verdicts, cws)
    assert (a.status, a.cell, a.answered) == ("equivalent", cws[0].label(), True)
    assert a.headline() == f"For a database VM: keep {cws[0].label()} (equivalent: {kept})"
    assert "leading" not in a.headline() and a.as_dict()["answered"] is True
    verdicts["database:data"] = Verdict(
        "database:data",
        "read.clat_p99_us",
        False,
        "blocklayer",
        None,
        provisional=verdicts["database:log"],
    )
    leading = role_answer(DB, verdicts, cws)
    assert leading.status == "provisional" and not leading.answered
    # the pick for now (the tie-break's, among cells not yet separated) is not the best mean on the
    # deciding figure: one configuration to use, not told apart, and the cell ahead is named
    assert leading.headline().startswith(
        f"For a database VM: use {cws[1].label()} (not told apart from {cws[0].label()} at this "
        "resolution: "
    ), leading.headline()
    # "the best" by the ranking's figure, said in the one grammar (issue 70)
    assert (
        f"{cws[0].label()} has the best geo. mean, 1.03× lower latency than {cws[1].label()}"
        in leading.headline()
    )
    assert "leading" not in leading.headline() + leading.brief()
    assert leading.brief().startswith(
        f"For a database VM: use {cws[1].label()} (not told apart from {cws[0].label()}, "
    ), leading.brief()
    assert leading.as_dict()["resolution"] == "not told apart at this resolution"


def test_an_unsettled_role_says_how_many_minutes_would_settle_it() -> None:
    """The decision's estimate (40 more rounds of the pair) becomes minutes through the sweep's
    measured seconds per run of the deciding job (3 s: 40 × 2 × 3 s = 4 minutes) and the budget
    that buys them; a user cannot act on a round count, so none is printed (issue 71)."""
    cws, verdicts = _sweep(log_none=990)
    pick = Choice(
        cws[0].label(),
        (cws[1].label(),),
        "not separable yet",
        settle_rounds=40,
        equivalence_rounds=200,
    )
    lead = Verdict("database:data", "read.clat_p99_us", False, "blocklayer", pick)
    verdicts["database:data"] = Verdict(
        "database:data", "read.clat_p99_us", False, "blocklayer", None, provisional=lead
    )
    a = role_answer(DB, verdicts, cws, run_seconds={"database:data": 3.0}, budget="4m")
    assert a.status == "provisional" and not a.answered
    assert a.headline().endswith(
        'about 4 minutes more would settle it (time_budget = "8m" in the plan, now "4m"))'
    ), a.headline()
    assert a.brief().endswith("about 4 minutes more would settle it)"), a.brief()
    assert "round" not in a.headline() + a.brief() + str(a.as_dict())
    # without the sweep's timings no time is promised, and still no round count
    b = role_answer(DB, verdicts, cws)
    assert "would settle" not in b.headline() and "round" not in b.headline()


def test_a_veto_needs_the_interval_not_only_the_mean() -> None:
    """The log's commits of cache=none 14 % below writeback by their means, but over 3 noisy runs
    each: the ratio's interval reaches within 5 %, so the deciding figure's pick stands; the same
    gap over steady runs vetoes it, and the line gives the interval."""
    cws, verdicts = _sweep(log_none=990)
    noisy = {"write.iops": [600.0, 1000.0, 980.0]}  # mean 860: 14 % below 1000
    cws[2] = _cw(1, "none", "database:log", noisy)
    cws[3] = _cw(2, "writeback", "database:log", {"write.iops": [700.0, 1300.0, 1000.0]})
    a = role_answer(DB, verdicts, cws)
    assert a.cell == cws[0].label() and not a.vetoes  # not shown worse: the pick stands
    cws[2] = _cw(1, "none", "database:log", {"write.iops": [850.0, 860.0, 870.0]})
    cws[3] = _cw(2, "writeback", "database:log", {"write.iops": [990.0, 1000.0, 1010.0]})
    b = role_answer(DB, verdicts, cws)
    assert b.cell == cws[1].label() and len(b.vetoes) == 1
    assert "14% worse than" in b.vetoes[0] and "× the best, 95% CI; margin 5%)" in b.vetoes[0]
    means_only = combine(["A"], [FigureMeans(LOG_RATE, {"A": 800.0, "B": 1000.0})], 0.05)
    # no runs: the means
    assert means_only.cell is None and "by its mean" in means_only.vetoes[0].text(0.05)


def test_an_interval_that_excludes_1_never_reads_as_touching_it() -> None:
    assert interval_text(1.08, 1.351) == "1.08–1.35"
    assert interval_text(1.0049, 1.27) == "1.005–1.27"  # two decimals would say 1.00
    assert interval_text(0.9961, 1.0) == "0.996–1.00"


def test_a_third_cell_better_with_the_figures_weighed_is_the_answer() -> None:
    """Three cells, steady runs, the built-in database's weights 2:1:1. cache=none (the commits'
    pick, 1,250/s) is vetoed by directsync (the best data p99 read, 400 µs against 800); the two
    weighed against each other give directsync 0.8^½ · 2^¼ = 1.06×. writeback commits 1,150/s (8 %
    behind: no candidate of the commits' own) with a p99 read of 430 µs: with the figures weighed it
    is 1.12× cache=none and 1.05× directsync, shown over each at the Bonferroni confidence
    1 − 0.10/2 = 0.95, so it is the answer though neither figure alone picked it
    (report/recommend/roles.py weigh_cells); the weighed interval named is against the closest of
    the two."""
    spread = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0]

    def runs(v: float) -> list[float]:
        return [v * x for x in spread]

    def cell(cell_id: int, cache: str, commits: float, read_p99: float) -> list[CellWorkload]:
        return [
            _cw(cell_id, cache, "database:log", {"write.iops": runs(commits)}),
            _cw(
                cell_id,
                cache,
                "database:data",
                {"read.clat_p99_us": runs(read_p99), "write.clat_p99_us": runs(300)},
            ),
        ]

    cws = [
        *cell(1, "none", 1250, 800),
        *cell(2, "directsync", 1000, 400),
        *cell(3, "writeback", 1150, 430),
    ]
    none, directsync, writeback = cws[0].label(), cws[2].label(), cws[4].label()
    log = Verdict("database:log", "write.iops", True, "blocklayer", Choice(none, (), "x"))
    a = role_answer(BUILTIN_DB, {"database:log": log}, cws)
    assert (a.cell, a.status, a.instead_of) == (writeback, "answer", none), a.headline()
    w = a.as_dict()["weighed"]
    assert (w["cell"], w["outcome"], w["confidence"]) == (writeback, "separated", 0.95)
    assert w["against"] == directsync and w["low"] > 1
    assert w["ratio"] == pytest.approx((1150 / 1000) ** 0.5 * (400 / 430) ** 0.25, rel=1e-3)
    assert "95% CI): better" in a.headline()
    # Without the third cell it is the two-cell weighing at 0.90, as before: directsync by 1.06×.
    two = role_answer(BUILTIN_DB, {"database:log": log}, cws[:4])
    assert (two.cell, two.as_dict()["weighed"]["confidence"]) == (directsync, 0.9)
    # writeback within 5 % of directsync with the figures weighed (1,010/s and 404 µs: 1.0025×, not
    # shown better), both shown better than cache=none: a tie of theirs, the weighed leader named
    tie = [*cws[:4], *cell(3, "writeback", 1010, 404)]
    t = role_answer(BUILTIN_DB, {"database:log": log}, tie)
    assert (t.cell, t.status, t.instead_of) == (writeback, "tied", none), t.headline()
    assert t.as_dict()["weighed"]["against"] == directsync
    assert "both better than the deciding figure's pick" in t.headline()


def _by_round(values: list[float]) -> dict[int, float]:
    return dict(enumerate(values, start=1))


def test_a_veto_compares_the_two_cells_over_the_rounds_both_ran() -> None:
    """The host's level moves 4× over three rounds, and the pick's write p99 is 1.33× the best's in
    each of them: over the runs alone (Fieller) that is not shown beyond the 5 % margin; over the
    rounds both ran (paired, as the race compares them) it is, and the pick is passed over."""
    a, b = [400.0, 810.0, 1590.0], [300.0, 600.0, 1200.0]
    means = {"A": sum(a) / 3, "B": sum(b) / 3}
    runs = FigureMeans(DATA_WRITE_P99, means, {"A": a, "B": b})
    assert combine(["A"], [runs], 0.05).cell == "A"  # not shown worse by its runs alone
    paired = replace(runs, by_round={"A": _by_round(a), "B": _by_round(b)})
    got = combine(["A"], [paired], 0.05)
    assert got.cell is None and got.vetoes, got
    interval = got.vetoes[0].interval
    assert interval is not None and 1.25 < interval[0] < 1.33 < interval[1] < 1.45, interval


def test_a_trade_off_is_weighed_over_the_rounds_both_cells_ran() -> None:
    """A commits 1.11× B's rate and B's p99s are half A's, in every round of a host whose level
    moves 4×: weighed 2 : 1 : 1 over the runs alone the trade-off stays open; paired by round B is
    1.34× A, separated."""
    from iomatrix.report.recommend.roles import weigh

    shift = (1.0, 2.0, 4.0, 1.5)
    jitter = (1.0, 1.02, 0.99, 1.01)
    log_a = [1000 * s for s in shift]
    log_b = [900 * s * j for s, j in zip(shift, jitter, strict=True)]
    p99_a = [500 * s for s in shift]
    p99_b = [250 * s / j for s, j in zip(shift, jitter, strict=True)]

    def figure(f: roles.Figure, a: list[float], b: list[float], paired: bool) -> FigureMeans:
        by_round = {"A": _by_round(a), "B": _by_round(b)} if paired else {}
        return FigureMeans(f, {"A": sum(a) / 4, "B": sum(b) / 4}, {"A": a, "B": b}, by_round)

    def weighed(paired: bool) -> tuple[float, float, str]:
        figures = [
            figure(LOG_RATE, log_a, log_b, paired),
            figure(DATA_P99, p99_a, p99_b, paired),
            figure(DATA_WRITE_P99, p99_a, p99_b, paired),
        ]
        found = weigh(figures, "A", "B", 0.05)
        assert found is not None
        return found[0].low, found[0].high, found[1]

    low, high, says = weighed(paired=False)
    assert says == "open" and low < 1 < high
    low, high, says = weighed(paired=True)
    assert says == "separated" and 1.25 < low < 1.34 < high < 1.45, (low, high)
