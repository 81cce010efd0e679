"""Consolidation tiles: plan validation, memory refusal, roles, the answer, the report section (no
guests).

The real-guest tests are in test_consolidation_guests.py (slow)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iomatrix.backing.leftover_kinds import KSM_RUN, KsmSettingLeftover, LeftoverError
from iomatrix.backing.leftovers import identity_problem, pending, record
from iomatrix.consolidation.memory import QEMU_OVERHEAD_MB, RESERVE_MB, available_mb, check_memory
from iomatrix.consolidation.roles import guests_per_tile, point_guests, tile_guests
from iomatrix.consolidation.spec import tiles_of
from iomatrix.errors import UserError
from iomatrix.matrix import estimate_seconds
from iomatrix.metrics import metric_info
from iomatrix.monitor import procfs
from iomatrix.plan.load import load_plan, plan_from_dict
from iomatrix.report.consolidation import consolidation_lines, groups_from
from iomatrix.report.query import CellWorkload
from iomatrix.runner import plan_expansion
from iomatrix.stats.consolidation import consolidation_answer
from iomatrix.tiers.base import RunOptions
from iomatrix.tiers.consolidation import ConsolidationTier
from iomatrix.workloads import resolve


def _plan(**consolidation: object) -> object:
    return plan_from_dict(
        {"name": "c", "tier": ["consolidation"], "consolidation": consolidation}, "test plan"
    )


# --------------------------------------------------------------------------- plan


def test_tiles_become_the_workloads_and_axes_multiply():
    p = plan_from_dict(
        {
            "name": "c",
            "tier": ["consolidation"],
            "cache": ["none", "writeback"],
            "consolidation": {"tiles": [3, 1, 2]},
        },
        "test plan",
    )
    assert p.workloads == ["tiles-1", "tiles-2", "tiles-3"]
    assert (
        p.setting("consolidation").tiles == [1, 2, 3]
        and p.setting("consolidation").slowdown_bound == 2.0
    )
    exp = plan_expansion(p, None, set())
    assert len(exp.units) == 6 and not exp.pruned
    assert {tiles_of(u.workload.name) for u in exp.units} == {1, 2, 3}


def test_consolidation_tier_alone_gets_the_default_table():
    p = plan_from_dict({"name": "c", "tier": ["consolidation"]}, "test plan")
    assert p.setting("consolidation") is not None and p.workloads == [
        "tiles-1",
        "tiles-2",
        "tiles-3",
    ]
    assert (
        p.setting("consolidation").roles == ["filecopy-pair"]
        and p.setting("consolidation").ksm is False
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"tiles": [2, 3]}, "lacks 1: one tile is the baseline"),
        ({"tiles": []}, "needs at least one tile count"),
        ({"tiles": [1, 1]}, "twice"),
        ({"tiles": [1, 40]}, "≤ 32"),
        (
            {"roles": ["mail"]},
            "'mail' is not valid; valid values: 'filecopy-pair', 'db', 'web', 'burst'",
        ),
        ({"roles": []}, "a tile needs at least one role"),
        ({"slowdown_bound": 1.0}, "must be > 1"),
        ({"ksm": "yes"}, "must be true or false"),
        ({"tile": [1]}, "unknown key 'tile'"),
    ],
)
def test_bad_consolidation_tables_are_one_line_errors(table: dict, message: str):
    with pytest.raises(UserError) as err:
        _plan(**table)
    assert message in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_consolidation_table_needs_the_tier():
    with pytest.raises(UserError, match=r'needs tier = \["consolidation"\]'):
        plan_from_dict({"name": "c", "tier": ["guest"], "consolidation": {}}, "test plan")


def test_tile_workloads_run_on_the_consolidation_tier_only():
    p = plan_from_dict(
        {
            "name": "c",
            "tier": ["guest", "consolidation"],
            "workloads": ["rand-read-4k", "tiles-1"],
            "null_ceiling": False,
        },
        "test plan",
    )
    exp = plan_expansion(p, None, set())
    assert sorted((u.cell.tier, u.workload.name) for u in exp.units) == [
        ("consolidation", "tiles-1"),
        ("guest", "rand-read-4k"),
    ]
    reasons = " ".join(x.reason for x in exp.pruned)
    assert "consolidation tier only" in reasons and "runs tile counts" in reasons


def test_builtin_plan_estimate_fits_twenty_minutes():
    p, _ = load_plan("consolidation")
    exp = plan_expansion(p, None, set())
    assert len(exp.units) == 6  # tiles 1, 2, 3 × cache none, writeback
    low, high = estimate_seconds(p, exp)
    assert low == high and high <= 20 * 60
    assert (
        p.setting("consolidation").tiles == [1, 2, 3]
        and guests_per_tile(p.setting("consolidation").roles) == 2
    )


def test_tile_workload_names():
    w = resolve("tiles-3")
    assert (
        w.kind == "consolidation" and tiles_of(w.name) == 3 and w.primary_metric == "point.wall_s"
    )
    assert not w.higher_is_better
    with pytest.raises(UserError):
        resolve("tiles-0")


# --------------------------------------------------------------------------- memory


def test_memory_refusal_shows_the_arithmetic():
    with pytest.raises(UserError) as err:
        check_memory(tiles=3, guests_per_tile=2, guest_memory_mb=512, available_mb=3000)
    line = err.value.one_line()
    need = 3 * 2 * (512 + QEMU_OVERHEAD_MB)
    assert (
        f"3 tiles × 2 guests × (512 MiB guest + {QEMU_OVERHEAD_MB} MiB QEMU) = {need} "
        "MiB for 6 guests" in line
    )
    assert (
        f"{3000 - RESERVE_MB} MiB to give (3000 MiB available − {RESERVE_MB} MiB kept free)" in line
    )
    assert "lower the largest tile count" in line and "\n" not in line
    # fits: no error
    check_memory(tiles=1, guests_per_tile=2, guest_memory_mb=256, available_mb=3000)


def test_tier_refuses_a_plan_before_any_guest_starts(tmp_path: Path):
    p = plan_from_dict(
        {
            "name": "c",
            "tier": ["consolidation"],
            "guest_memory_mb": 4096,
            "consolidation": {"tiles": [1, 8], "roles": ["filecopy-pair", "db"]},
        },
        "test plan",
    )
    tier = ConsolidationTier(p, RunOptions(workdir=tmp_path))
    with pytest.raises(UserError, match=r"8 tiles × 3 guests × \(4096 MiB guest"):
        tier.check_memory("MemTotal: 16000000 kB\nMemAvailable:    8000000 kB\n")
    assert available_mb("MemAvailable:    8000000 kB\n") == 7812


def test_sweep_is_refused_before_anything_is_created(tmp_path: Path):
    from iomatrix.runner import SweepRunner
    from iomatrix.store import Store

    p = plan_from_dict(
        {
            "name": "c",
            "tier": ["consolidation"],
            "guest_memory_mb": 16384,
            "consolidation": {"tiles": [1, 32], "roles": ["filecopy-pair", "db", "web", "burst"]},
        },
        "test plan",
    )
    store = Store(tmp_path / "r.sqlite")
    with pytest.raises(UserError, match=r"32 tiles × 5 guests × \(16384 MiB guest"):
        SweepRunner(p, None, store, RunOptions(workdir=tmp_path / "wd"))
    assert not (tmp_path / "wd").exists() and store.sweep_ids() == []


# --------------------------------------------------------------------------- roles


def test_roles_make_guests_with_private_links():
    guests = point_guests(2, ["filecopy-pair", "db", "web", "burst"], scale=0.5)
    assert len(guests) == 2 * guests_per_tile(["filecopy-pair", "db", "web", "burst"]) == 10
    labels = [g.label for g in guests]
    assert len(set(labels)) == len(labels)
    pair = [g for g in guests if g.kind == "role-filecopy"]
    assert {g.link for g in pair} == {"t1-copy", "t2-copy"}
    assert len({g.mac for g in pair}) == 4
    src, peer = tile_guests(1, ["filecopy-pair"])
    assert src.env["IOMX_PEER_ADDR"] == peer.env["IOMX_NET_ADDR"] and src.timed and not peer.timed
    db = next(g for g in guests if g.role == "db")
    job = db.files["role-job"]
    # fixed work, not time
    assert "filename=@DISK@" in job and "fsync=1" in job and "time_based" not in job
    web = next(g for g in guests if g.role == "web")
    assert set(web.files) == {"role-prep", "role-job"}


# --------------------------------------------------------------------------- the answer


def test_answer_takes_the_largest_count_within_the_bound():
    times = {
        1: {"filecopy": [10.0, 10.5, 9.8]},
        2: {"filecopy": [14.0, 14.6, 14.2]},  # ×1.4: within 2
        3: {"filecopy": [25.0, 26.0, 24.5]},
    }  # ×2.5: beyond 2
    a = consolidation_answer(times, bound=2.0)
    assert a.answer == 2 and a.estimate == 2 and a.tested == [1, 2, 3]
    verdicts = {(s.tiles, s.verdict) for s in a.slowdowns}
    assert verdicts == {(2, "within"), (3, "beyond")}
    w = a.worst(2)
    assert w is not None and w.low is not None and w.low < 1.4 < w.high


def test_answer_counts_only_in_order_and_every_role():
    times = {
        1: {"filecopy": [10.0, 10.2, 9.9], "db": [2.0, 2.1, 2.0]},
        2: {"filecopy": [12.0, 12.1, 11.9], "db": [5.0, 5.2, 5.1]},  # db ×2.5 at 2 tiles
        3: {"filecopy": [13.0, 13.1, 12.9], "db": [2.2, 2.3, 2.2]},
    }  # passes by chance at 3
    a = consolidation_answer(times, bound=2.0)
    assert a.answer == 1 and a.estimate == 1
    assert a.worst(2).role == "db"


def test_a_noisy_point_is_unsure_but_has_an_estimate():
    # mean ×1.8, wide CI
    times = {1: {"filecopy": [10.0, 10.0, 10.0]}, 2: {"filecopy": [12.0, 26.0, 16.0]}}
    a = consolidation_answer(times, bound=2.0)
    assert a.answer == 1 and a.estimate == 2
    assert a.slowdowns[0].verdict == "unsure"


def test_failed_counts_and_missing_baseline():
    a = consolidation_answer({1: {"filecopy": [10.0, 11.0]}, 2: {}}, bound=2.0)
    assert a.answer == 1 and a.estimate == 1 and "no successful point" in a.notes[0]
    b = consolidation_answer({2: {"filecopy": [10.0, 11.0]}}, bound=2.0)
    assert b.answer is None and "no successful one-tile point" in b.notes[0]
    with pytest.raises(ValueError):
        consolidation_answer({1: {"filecopy": [1.0]}}, bound=1.0)


def _cw(
    cache: str, workload: str, seconds: list[float], wall: list[float], cell_id: int
) -> CellWorkload:
    key = f"consolidation/qcow2/off/{cache}/threads/virtio-blk/dir/-"
    axes = dict(
        zip(
            ["tier", "format", "preallocation", "cache", "aio", "bus", "backing", "modifier"],
            key.split("/"),
            strict=True,
        )
    )
    cw = CellWorkload(cell_id, key, axes, {}, workload, ["tcg"], runs=list(range(len(seconds))))
    cw.samples["role.filecopy.seconds_max"] = seconds
    cw.samples["point.wall_s"] = wall
    cw.samples["host.mem_used_peak_mb"] = [1000.0] * len(seconds)
    return cw


def test_report_section_per_cache_mode_with_tcg_note():
    cws = [
        _cw("none", "tiles-1", [10.0, 10.3, 9.9], [15.0, 15.2, 15.1], 1),
        _cw("none", "tiles-2", [30.0, 31.0, 29.5], [35.0, 36.0, 34.0], 1),
        _cw("writeback", "tiles-1", [8.0, 8.1, 8.2], [12.0, 12.0, 12.0], 2),
        _cw("writeback", "tiles-2", [10.0, 10.4, 10.1], [16.0, 16.5, 16.1], 2),
    ]
    groups = groups_from(cws, bound=2.0)
    answers = {g.label: g.answer.answer for g in groups}
    assert answers == {
        "format=qcow2 preallocation=off cache=none aio=threads bus=virtio-blk backing=dir": 1,
        "format=qcow2 preallocation=off cache=writeback aio=threads bus=virtio-blk backing=dir": 2,
    }
    text = "\n".join(consolidation_lines(groups))
    assert (
        "cache=writeback aio=threads bus=virtio-blk backing=dir: 2 tiles (all tested; "
        "the limit is higher)" in text
    )
    assert "slowest role filecopy ×3.00" in text and "(beyond, n=3)" in text
    assert "bound by emulation CPU" in text
    assert consolidation_lines([]) == []


# --------------------------------------------------------------------------- host view, metrics,
# KSM ledger


def test_pid_stat_parser_survives_odd_command_names():
    text = "4242 (qemu) (x) S 1 2 3 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 12345 1000 10 0\n"
    st = procfs.parse_pid_stat(text)
    assert (st.state, st.utime, st.stime) == ("S", 250, 75)
    own = procfs.parse_pid_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert own.state in "RS" and own.utime >= 0
    assert procfs.parse_status_kb("Name:\tx\nVmHWM:\t  12345 kB\n", "VmHWM") == 12345
    assert procfs.parse_status_kb("Name:\tx\n", "VmHWM") is None


def test_consolidation_metrics_have_directions():
    assert not metric_info("point.wall_s").higher_is_better
    assert not metric_info("role.db.seconds_max").higher_is_better
    assert (
        metric_info("role.db.write.iops").higher_is_better
        and metric_info("role.db.write.iops").known
    )
    assert not metric_info("guest.t2-filecopy.rss_peak_mb").higher_is_better
    assert not metric_info("host.mem_used_peak_mb").higher_is_better


def test_ksm_ledger_entry_is_checked_before_it_is_undone(tmp_path: Path):
    record(tmp_path, "ksm", KSM_RUN, previous="0")
    entry = pending(tmp_path)[0]
    assert identity_problem(entry, tmp_path) is None
    assert "KSM setting changed at" in entry.describe()
    forged = type(entry)(**{**entry.__dict__, "info": {"previous": "7; rm -rf /"}})
    assert "not a KSM setting" in (identity_problem(forged, tmp_path) or "")
    other = type(entry)(
        **{**entry.__dict__, "target": "/sys/kernel/mm/transparent_hugepage/enabled"}
    )
    assert identity_problem(other, tmp_path) is not None
    with pytest.raises(LeftoverError):
        KsmSettingLeftover(KSM_RUN, {"previous": "7"}).undo()
    if os.path.exists(KSM_RUN):  # restoring the value it already has writes nothing
        assert (
            KsmSettingLeftover(KSM_RUN, {"previous": Path(KSM_RUN).read_text().strip()}).undo()
            == []
        )


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(KSM_RUN, os.W_OK), reason="needs root and KSM"
)
def test_ksm_is_restored_on_close_and_by_clean_after_a_crash(tmp_path: Path):
    import subprocess
    import sys

    from iomatrix.backing.leftovers import clean

    before = Path(KSM_RUN).read_text().strip()
    if before == "1":
        pytest.skip("KSM is already on here: nothing would be changed or restored")
    p = plan_from_dict(
        {"name": "c", "tier": ["consolidation"], "consolidation": {"ksm": True}}, "test plan"
    )
    tier = ConsolidationTier(p, RunOptions(workdir=tmp_path))
    try:
        tier._enable_ksm()
        assert Path(KSM_RUN).read_text().strip() == "1"
        assert [e.kind for e in pending(tmp_path)] == ["ksm"]
    finally:
        tier.close()
    assert Path(KSM_RUN).read_text().strip() == before and pending(tmp_path) == []
    # A process that dies without its finally: the ledger entry lets `clean` put the setting back.
    code = (
        "import os, sys; from pathlib import Path; from iomatrix.plan.load import plan_from_dict; "
        "from iomatrix.tiers.base import RunOptions; from iomatrix.tiers.consolidation "
        "import ConsolidationTier; "
        "p = plan_from_dict({'name': 'c', 'tier': ['consolidation'], 'consolidation': "
        "{'ksm': True}}, 't'); "
        "ConsolidationTier(p, RunOptions(workdir=Path(sys.argv[1])))._enable_ksm(); os._exit(9)"
    )
    try:
        res = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert res.returncode == 9, res.stderr
        assert Path(KSM_RUN).read_text().strip() == "1"
        lines = clean(tmp_path)
        assert f"restored {KSM_RUN} to {before}" in lines
    finally:
        Path(KSM_RUN).write_text(before)
    assert Path(KSM_RUN).read_text().strip() == before and pending(tmp_path) == []


def test_report_chart_draws_seed_002_panels_per_configuration():
    # The HTML report's consolidation chart: one line per configuration against tiles, panels named.
    from iomatrix.report import charts

    cws = [
        _cw("none", "tiles-1", [10.0, 10.3, 9.9], [15.0, 15.2, 15.1], 1),
        _cw("none", "tiles-2", [30.0, 31.0, 29.5], [35.0, 36.0, 34.0], 1),
        _cw("writeback", "tiles-1", [8.0, 8.1, 8.2], [12.0, 12.0, 12.0], 2),
    ]
    groups = groups_from(cws, bound=2.0)
    svg = charts.consolidation_chart(
        [("cache=none", groups[0].host), ("cache=writeback", groups[1].host)]
    )
    assert svg.startswith("<svg")
    for text in (
        "wall time per point",
        "disk utilisation",
        "tiles",
        "cache=none",
        "cache=writeback",
    ):
        assert text in svg, text
    # no disk or QEMU CPU samples in these points: said, not drawn as zero
    assert "not measured" in svg
    assert charts.consolidation_chart(
        [("cache=none", groups[0].host)]
    ) == charts.consolidation_chart([("cache=none", groups[0].host)])  # same data, same file
