"""The pure parts `rank_workload` is built from: which cells are ranked, what each contributes, and
the notes."""

from __future__ import annotations

import math

import pytest

from iomatrix.report.per_backing import answer_groups, answered_on, at_each_condition
from iomatrix.report.quality import ranked_samples
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import (
    NOTED_STOPS,
    blocked_cell_samples,
    cell_stops,
    disturbed_runs,
    independent_cell_samples,
    null_ceiling,
    rank_workload,
    ratios_to_baremetal,
    tier_cells,
)
from iomatrix.stats.interference import RunInterference
from iomatrix.stop_kinds import StopKind

BASE = {
    "format": "raw",
    "preallocation": "off",
    "cache": "none",
    "aio": "threads",
    "bus": "virtio-blk",
    "backing": "dir",
    "modifier": "none",
}
COLD = [50.0, 100.0, 101.0, 99.0, 100.0, 100.5]  # the first run far below the rest


def cell(
    cid: int,
    tier: str,
    values: list[float],
    *,
    workload: str = "rand-read-4k",
    runs: list[int] | None = None,
    **axes: str,
) -> CellWorkload:
    c = CellWorkload(
        cid,
        f"k{cid}",
        {**BASE, "tier": tier, **axes},
        {},
        workload,
        ["kvm"],
        runs=runs if runs is not None else [cid * 100 + i for i in range(len(values))],
    )
    c.samples["read.iops"] = list(values)
    return c


def test_the_cold_first_run_is_a_real_difference_here() -> None:
    assert ranked_samples(COLD) == (COLD[1:], True)


def test_tier_cells_picks_the_tier_closest_to_a_vm_and_leaves_the_ceiling_out() -> None:
    bm, bl, null = (
        cell(1, "baremetal", [1.0, 2.0]),
        cell(2, "blocklayer", [1.0, 2.0]),
        cell(3, "blocklayer", [9.0, 9.0], backing="null"),
    )
    other = cell(4, "blocklayer", [1.0], workload="seq-read-1m")
    assert tier_cells([bm, bl, null, other], "rand-read-4k", "read.iops", None) == (
        [bm, bl, null],
        "blocklayer",
        [bl],
    )
    assert tier_cells([bm, bl, null], "rand-read-4k", "read.iops", "baremetal") == (
        [bm, bl, null],
        "baremetal",
        [bm],
    )
    # only the ceiling
    assert tier_cells([bm, null], "rand-read-4k", "read.iops", "blocklayer") is None
    assert tier_cells([bm], "rand-read-4k", "write.iops", None) is None  # no cell has the metric


def test_blocked_samples_in_round_order_without_the_cold_first_run() -> None:
    c = cell(1, "blocklayer", COLD)
    # Rounds given out of run order: the values are taken in round order, the earliest round is the
    # cold one.
    per_run = {rid: (rnd, v) for rid, rnd, v in zip(c.runs, [1, 3, 2, 4, 6, 5], COLD, strict=True)}
    cs = blocked_cell_samples(c, per_run, None)
    assert cs.cold_apart and cs.unit is None
    assert cs.rounds == [2, 3, 4, 5, 6] and cs.values == [101.0, 100.0, 99.0, 100.5, 100.0]
    warm = blocked_cell_samples(c, {rid: rv for rid, rv in per_run.items() if rv[0] > 1}, None)
    assert not warm.cold_apart and warm.rounds == [2, 3, 4, 5, 6]


def test_independent_samples_and_boot_means() -> None:
    values = [10.0, 12.0, 14.0, 16.0, 20.0, 22.0]
    c = cell(1, "guest", values, runs=[1, 2, 3, 4, 5, 6])
    plain = independent_cell_samples(c, "read.iops", None)
    assert (plain.values, plain.rounds, plain.cold_apart, plain.unit) == (values, None, False, None)
    # Three boots of two runs whose between-boot variance dominates: the boot means are the unit.
    boots = {rid: (f"b{(rid - 1) // 2}", (rid - 1) % 2) for rid in c.runs}
    shared = independent_cell_samples(c, "read.iops", boots)
    assert shared.unit is not None and shared.values == pytest.approx([11.0, 15.0, 21.0])
    # Run ids that do not line up with the values (a run without the metric): boots cannot be told.
    assert (
        independent_cell_samples(cell(2, "guest", values, runs=[1, 2, 3]), "read.iops", boots).unit
        is None
    )


def test_stops_disturbed_runs_ceiling_and_ratios() -> None:
    a, b = (
        cell(1, "blocklayer", [10.0, 12.0, 11.0], cache="none"),
        cell(2, "blocklayer", [20.0, 22.0], cache="unsafe"),
    )
    stop = {"kind": StopKind.UNRESOLVED, "reason": "r", "round": 3, "ok_runs": 3}
    assert cell_stops([a, b], {(1, "rand-read-4k"): stop, (9, "rand-read-4k"): stop}) == {
        a.label(): stop
    }
    assert cell_stops([a, b], None) == {}
    # an elimination names the cell it lost to by its label, not by the unit key the scheduler
    # stored (a stop written before schema 8 has no `against`: its reason names the cell all the
    # same); `against` keeps the key
    for against in ({"against": "k2"}, {}):
        out = {
            "kind": StopKind.ELIMINATED,
            "reason": "significantly worse than k2::rand-read-4k by 45% (Holm p=0.01)",
            "round": 3,
            "ok_runs": 3,
            **against,
        }
        shown = cell_stops([a, b], {(1, "rand-read-4k"): out})[a.label()]
        assert shown["reason"] == f"significantly worse than {b.label()} by 45% (Holm p=0.01)"
        assert shown.get("against") == against.get("against") and "k2" in out["reason"]
    hit = RunInterference(True, ("cpu pressure",), None)
    flags = {100: hit, 101: RunInterference(False, (), None), 200: hit}
    assert disturbed_runs([a, b], flags) == {a.label(): [(100, hit)], b.label(): [(200, hit)]}
    assert disturbed_runs([a, b], None) == {}
    null = cell(3, "blocklayer", [100.0, 300.0], backing="null")
    assert null_ceiling(
        [a, null, cell(4, "guest", [1.0], backing="null")], "blocklayer", "read.iops"
    ) == [(null, 200.0)]
    bm = cell(5, "baremetal", [20.0, 24.0, 22.0])
    ratios = ratios_to_baremetal([a, b], [a, b, bm], "read.iops")
    assert ratios[a.label()] is not None and ratios[a.label()].ratio == pytest.approx(0.5)
    assert ratios_to_baremetal([a], [a], "read.iops") == {a.label(): None}  # no bare-metal cell


def test_notes_name_the_stops_that_explain_a_smaller_n() -> None:
    cells = [
        cell(i, "blocklayer", [v, v * 1.01, v * 0.99], cache=cache)
        for i, (cache, v) in enumerate(
            (("none", 100.0), ("unsafe", 200.0), ("writeback", 150.0)), start=1
        )
    ]
    kinds = {1: StopKind.MAX_RUNS, 2: StopKind.SETTLED, 3: StopKind.ELIMINATED}
    stops = {
        (i, "rand-read-4k"): {"kind": k, "reason": f"why {k}", "round": 3, "ok_runs": 3}
        for i, k in kinds.items()
    }
    wr = rank_workload(cells, "rand-read-4k", None, stops=stops)
    assert wr is not None
    noted = [n for n in wr.notes() if n.startswith("stopped after")]
    assert noted == [
        f"stopped after round 3 with 3 runs ({cells[0].label()}): why max-runs",
        f"stopped after round 3 with 3 runs ({cells[2].label()}): why eliminated",
    ]
    # plain strings from a document match too
    assert all(k in NOTED_STOPS for k in ("max-runs", "eliminated"))


def test_an_elimination_is_kept_while_the_cell_it_was_made_against_is_ranked() -> None:
    """b trails a by 16%, 8% and 0% over three rounds: at the end, alone, not significant and not
    ruled out (unresolved). The race eliminated it against a (its stop's `against`: a's key), so
    while a is ranked b is ruled out; against a cell not ranked here (requirements dropped it), or
    with no reference (a stop from before schema 8), b is judged alone again."""
    a_vals = [100.0, 120.0, 90.0]
    b_vals = [v * math.exp(d) for v, d in zip(a_vals, [-0.16, -0.08, 0.0], strict=True)]
    a = cell(1, "blocklayer", a_vals, cache="none")
    b = cell(2, "blocklayer", b_vals, cache="writeback")
    per_run = {
        rid: (i, v)
        for c in (a, b)
        for i, (rid, v) in enumerate(zip(c.runs, c.samples["read.iops"], strict=True))
    }

    def decided(against: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        stop = {"kind": StopKind.ELIMINATED, "reason": "eliminated", "round": 2, "ok_runs": 3}
        stops = {(2, "rand-read-4k"): {**stop, "against": against}}
        wr = rank_workload([a, b], "rand-read-4k", None, per_run=per_run, stops=stops)
        assert wr is not None and wr.ranking.best == a.label()
        return wr.decision.ruled_out, wr.decision.unresolved

    assert decided("k1") == ((b.label(),), ())
    assert decided("k99") == decided(None) == ((), (b.label(),))


def test_a_null_lun_is_a_ceiling_beside_the_ranking_never_in_it() -> None:
    # tgt's null LUN stores nothing (issue 34): the iSCSI protocol's own ceiling, listed before
    # QEMU's null-co.
    fileio = cell(1, "blocklayer", [10.0, 11.0], backing="iscsi", lun_type="fileio")
    null_lun = cell(2, "blocklayer", [40.0, 42.0], backing="iscsi", lun_type="null")
    null_co = cell(3, "blocklayer", [90.0, 92.0], backing="null")
    assert tier_cells([fileio, null_lun, null_co], "rand-read-4k", "read.iops", None) == (
        [fileio, null_lun, null_co],
        "blocklayer",
        [fileio],
    )
    assert [c for c, _ in null_ceiling([null_co, fileio, null_lun], "blocklayer", "read.iops")] == [
        null_lun,
        null_co,
    ]
    wr = rank_workload([fileio, null_lun, null_co], "rand-read-4k", None)
    assert wr is not None and [r.name for r in wr.ranking.rows] == [fileio.label()]


def test_cells_at_different_emulated_rtts_are_answered_apart() -> None:
    near = cell(1, "blocklayer", [10.0], backing="iscsi", rtt="0")
    far = cell(2, "blocklayer", [5.0], backing="iscsi", rtt="2ms")
    bm = cell(3, "baremetal", [20.0], backing="iscsi", rtt="-")
    groups = at_each_condition([near, far, bm], "rand-read-4k", "rtt")
    assert groups == [("0", [near, bm]), ("2ms", [far, bm])]
    # one RTT: one answer, named as before
    assert at_each_condition([near, bm], "rand-read-4k", "rtt") == [(None, [near, bm])]
    assert answered_on("rand-read-4k", "iscsi", "2ms") == "rand-read-4k on iscsi at rtt=2ms"


def test_answer_groups_split_backings_then_conditions_in_numeric_order() -> None:
    """The groups recommend answers and rank ranks: per backing, then RTT (by milliseconds) and
    client count (by number: 10 after 2); a backing with no cell of the workload gets no group."""
    a1 = cell(1, "blocklayer", [10.0], backing="iscsi", rtt="0", clients="2")
    a2 = cell(2, "blocklayer", [9.0], backing="iscsi", rtt="0", clients="10")
    b = cell(3, "blocklayer", [5.0], backing="nfs", rtt="0", clients="2")
    null = cell(4, "blocklayer", [50.0], backing="null", rtt="-", clients="-")
    groups = answer_groups([a1, a2, b, null], "rand-read-4k", ["iscsi", "nfs", "other"])
    assert [name for name, _ in groups] == [
        "rand-read-4k on iscsi with 2 clients",
        "rand-read-4k on iscsi with 10 clients",
        "rand-read-4k on nfs",
    ]
    assert [mine for _, mine in groups] == [[a1, null], [a2, null], [b, null]]
    # no network backing: one answer
    assert answer_groups([a1, b], "rand-read-4k", None) == [(None, [a1, b])]


def test_rank_gives_the_baseline_without_an_rtt_one_table_per_backing_and_each_rtt_its_own() -> (
    None
):
    """The server-side baseline has no RTT, so it is in every RTT group: ranked once, named by its
    backing."""
    from iomatrix.report.rank import _rank_in_groups

    near = cell(1, "blocklayer", [10.0, 11.0, 10.5], backing="iscsi", rtt="0")
    far = cell(2, "blocklayer", [5.0, 5.5, 5.2], backing="iscsi", rtt="2ms")
    bm = cell(3, "baremetal", [20.0, 21.0, 20.5], backing="iscsi", rtt="-")
    ranked = _rank_in_groups([near, far, bm], "rand-read-4k", None, ["iscsi"], min_n=3)
    assert [(wr.tier, wr.title) for wr in ranked] == [
        ("baremetal", "rand-read-4k on iscsi"),
        ("blocklayer", "rand-read-4k on iscsi at rtt=0"),
        ("blocklayer", "rand-read-4k on iscsi at rtt=2ms"),
    ]
    # the workload's own name stays for lookups
    assert [wr.workload for wr in ranked] == ["rand-read-4k"] * 3
