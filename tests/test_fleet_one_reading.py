"""Issue 52: the fleet answer reads each host's sweep once and ranks it once where its requirements
exclude nothing (report/fleet.py `_rank_hosts`), and answers exactly as when every host was ranked
alone by `rank_sweep`, twice (among the configurations meeting the requirements, and among all of
them), as it did before."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iomatrix.domain import NULL_BACKING
from iomatrix.report.fleet import fleet_answers, group_answers, select_fleet
from iomatrix.report.fleet_render import render_fleet
from iomatrix.report.formats import OutputFormat
from iomatrix.report.rank import rank_sweep
from iomatrix.report.recommend import parse_requirements
from iomatrix.stats.decision import DEFAULT_TIE_BREAK
from iomatrix.stats.looks import DECISION_ALPHA
from iomatrix.store import RunRecord, Store
from tests.test_merge import host_facts

AXES = dict(
    tier="baremetal",
    format="-",
    preallocation="-",
    aio="threads",
    bus="-",
    backing="dir",
    modifier="none",
)
# unsafe: fastest, and excluded by power-loss-safe
SPEED = {"none": 1.0, "writeback": 1.08, "unsafe": 1.3}


def record(cell: int, workload: str, value: float, rnd: int, *, judged: bool) -> RunRecord:
    """One ok run; `judged`: its interference verdict stored (else judged at report time from its
    samples)."""
    return RunRecord(
        cell_id=cell,
        workload=workload,
        status="ok",
        started_at=100.0 * rnd,
        finished_at=100.0 * rnd + 2,
        accel="none (bare metal)",
        cache_state="dropped",
        page_cache_method="direct",
        metrics={"read.iops": value, "read.bw_mbps": value / 256, "read.lat_mean_us": 1e6 / value},
        phases={"wall_s": 2.0},
        meta={"round": rnd},
        round=rnd,
        round_position=cell % 3,
        monitor=[
            (100.0 * rnd + i, {"cpu.usr_pct": 5.0 + i, "disk.r_iops": value}) for i in range(3)
        ],
        disturbed=False if judged else None,
    )


def synthetic_fleet(path: Path) -> Store:
    """Five hosts' sweeps of one plan in one file: hosts 0–2 (group rack-a) swept cache=unsafe too,
    which the default requirement excludes (so their free ranking differs from the kept one); hosts
    3–4 (rack-b) did not (one ranking serves both). Figures differ by host, cache mode and round."""
    store = Store(path)
    for h in range(5):
        sweep = store.create_sweep(
            store.host_id(host_facts(f"host-{h}")),
            "fleet",
            "fp-fleet",
            '{"name": "fleet"}',
            [],
            [],
            metric_registry={"read.iops": {"unit": "IOPS", "direction": "higher"}},
        )
        caches = ("none", "writeback", "unsafe") if h < 3 else ("none", "writeback")
        for i, cache in enumerate(caches):
            cell = store.cell_id(sweep, f"c-{cache}", {**AXES, "cache": cache}, {"fs": "ext4"})
            for workload in ("rand-read-4k", "seq-read-1m"):
                for rnd in (1, 2, 3):
                    noise = 1 + 0.01 * ((rnd * 7 + h * 3 + i) % 5 - 2)
                    store.record_run(
                        record(
                            cell,
                            workload,
                            1000 * (1 + h / 10) * SPEED[cache] * noise,
                            rnd,
                            judged=rnd != 1,
                        )
                    )
        store.set_sweep_group(sweep, "rack-a" if h < 3 else "rack-b")
        store.set_sweep_status(sweep, "finished")
    return store


def test_the_fleet_answer_is_the_one_of_every_host_ranked_alone(tmp_path: Path) -> None:
    store = synthetic_fleet(tmp_path / "fleet.sqlite")
    fleet = select_fleet(store)
    assert len(fleet.sweeps) == 5
    requirements = parse_requirements([])  # power-loss-safe, as recommend's default
    answers = fleet_answers(store, fleet, min_n=2, requirements=requirements)

    # Before: each host's sweep read and ranked on its own, among the cells meeting the requirements
    # and among all.
    def meets(axes: dict[str, str]) -> bool:
        return axes.get("backing") == NULL_BACKING or all(q.met_by(axes) for q in requirements)

    kept = {s.id: rank_sweep(store, s.id, None, None, min_n=2, keep=meets) for s in fleet.sweeps}
    free = {s.id: rank_sweep(store, s.id, None, None, min_n=2) for s in fleet.sweeps}
    alone = group_answers(store, fleet, kept, free, requirements, DEFAULT_TIE_BREAK, DECISION_ALPHA)

    for fmt in (OutputFormat.json, OutputFormat.table, OutputFormat.markdown):
        for first in (True, False):
            assert render_fleet(
                fleet, answers, fmt, 200, answer_first=first, target="qemu"
            ) == render_fleet(fleet, alone, fmt, 200, answer_first=first, target="qemu"), (
                fmt,
                first,
            )
    # The case that tells the two rankings apart is there: rack-a's faster unsafe choice is
    # declined, named.
    groups = {
        row["group"]: row
        for row in json.loads(render_fleet(fleet, answers, OutputFormat.json, 200))[0]["rows"]
        if row["workload"] == "rand-read-4k"
    }
    assert set(groups) == {"rack-a", "rack-b", "all hosts"}
    assert (
        groups["rack-a"]["declined"] is not None
        and "cache=unsafe" in groups["rack-a"]["declined"]["cell"]
    )
    assert groups["rack-b"]["declined"] is None and "unsafe" not in str(groups["rack-b"]["axes"])
    assert all(row["status"] in ("answer", "tied") for row in groups.values()), groups
    store.close()


def test_a_fleet_answer_for_one_workload_and_metric_is_the_same_both_ways(tmp_path: Path) -> None:
    """--workload and --metric take the same path: one host's refusal (no such workload) leaves it
    out alike."""
    store = synthetic_fleet(tmp_path / "fleet.sqlite")
    fleet = select_fleet(store)
    answers = fleet_answers(store, fleet, "seq-read-1m", "read.iops", min_n=2)
    kept = {
        s.id: rank_sweep(store, s.id, "seq-read-1m", "read.iops", min_n=2) for s in fleet.sweeps
    }
    alone = group_answers(store, fleet, kept, None, (), DEFAULT_TIE_BREAK, DECISION_ALPHA)
    assert render_fleet(fleet, answers, OutputFormat.json, 200) == render_fleet(
        fleet, alone, OutputFormat.json, 200
    )
    assert {wf.workload for wf in answers} == {"seq-read-1m"} and all(
        wf.metric == "read.iops" for wf in answers
    )
    store.close()


def test_measured_durability_verdicts_are_found_among_sweeps_that_are_skipped(
    tmp_path: Path,
) -> None:
    """MeasuredIndex.from_store reads the cells of a sweep only when one of its runs ran a trial
    workload; the durability sweep among the performance sweeps is read, and gives what it gives
    read alone."""
    from iomatrix.report.durability import MeasuredIndex

    store = synthetic_fleet(tmp_path / "fleet.sqlite")
    trials = store.create_sweep(
        store.host_id(host_facts("host-0")), "durability", "fp-d", '{"name": "durability"}', [], []
    )
    for cache, lost in (("none", 0.0), ("unsafe", 3.0)):
        cell = store.cell_id(
            trials,
            f"d-{cache}",
            {**AXES, "tier": "durability", "format": "raw", "cache": cache},
            {},
        )
        for rnd in (1, 2):
            store.record_run(
                RunRecord(
                    cell_id=cell,
                    workload="durability",
                    status="ok",
                    started_at=float(rnd),
                    finished_at=rnd + 1.0,
                    accel="tcg",
                    cache_state="dropped",
                    page_cache_method="direct",
                    phases={"wall_s": 1.0},
                    metrics={
                        "power_loss.acked_lost": lost,
                        "qemu_crash.acked_lost": 0.0,
                        "fs.clean": 1.0,
                    },
                    round=rnd,
                )
            )
    store.set_sweep_status(trials, "finished")
    every = MeasuredIndex.from_store(store)
    assert every.configs == MeasuredIndex.from_store(store, [trials]).configs
    assert {
        mc.axes["cache"]: mc.samples["power_loss.acked_lost"] for mc in every.configs.values()
    } == {"none": [0.0, 0.0], "unsafe": [3.0, 3.0]}
    assert (
        MeasuredIndex.from_store(store, [sid for sid in store.sweep_ids() if sid != trials]).configs
        == {}
    )
    store.close()


def test_the_fleet_answer_is_the_one_scipy_stats_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52: the decision's statistics no longer import scipy.stats (stats/shapiro.py,
    scipy.special's tails); the fleet answer over every host is the same, byte for byte, as with
    scipy.stats's functions put back in each place (the code before: its Shapiro–Wilk, F and t
    tails, TOST and the ruling-out test)."""
    import math

    from scipy import stats

    from iomatrix.stats import blocked, decision, equivalence, paired, ruling_out

    store = synthetic_fleet(tmp_path / "fleet.sqlite")
    fleet = select_fleet(store)
    requirements = parse_requirements([])
    fast = render_fleet(
        fleet,
        fleet_answers(store, fleet, min_n=2, requirements=requirements),
        OutputFormat.json,
        200,
    )

    def scipy_tost(
        ratio: float | None,
        se_log: float | None,
        df: float | None,
        level: float,
        margin: float,
        # the function before, with scipy.stats
        higher_is_better: bool,
    ) -> equivalence.Tost:
        lo_b, hi_b = equivalence.log_bounds(equivalence.check_margin(margin), higher_is_better)
        if (
            ratio is None
            or not ratio > 0
            or not math.isfinite(ratio)
            or se_log is None
            or not df
            or level <= 0
        ):
            return equivalence.Tost(1.0, level, None, None)
        d = math.log(ratio)
        if se_log == 0.0:
            return equivalence.Tost(0.0 if lo_b < d < hi_b else 1.0, level, ratio, ratio)
        q = float(stats.t.ppf(1.0 - min(level, 0.5), df))
        return equivalence.Tost(
            max(
                float(stats.t.sf((d - lo_b) / se_log, df)),
                float(stats.t.cdf((d - hi_b) / se_log, df)),
            ),
            level,
            math.exp(d - q * se_log),
            math.exp(d + q * se_log),
        )

    def scipy_one_sided(
        d: float, se: float, df: float, delta: float, higher_is_better: bool
    ) -> float:
        if se == 0.0:
            return 0.0 if (d < delta if higher_is_better else d > delta) else 1.0
        t = (d - delta) / se
        return float(stats.t.cdf(t, df) if higher_is_better else stats.t.sf(t, df))

    used: list[str] = []

    # records each replaced call
    def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            used.append(name)
            return fn(*args, **kw)

        return call

    monkeypatch.setattr(
        blocked, "shapiro_p", counted("shapiro", lambda r: float(stats.shapiro(r).pvalue))
    )
    monkeypatch.setattr(blocked, "_f_p", counted("f", lambda f, a, b: float(stats.f.sf(f, a, b))))
    monkeypatch.setattr(
        blocked, "_t_sf2", counted("t", lambda t, df: float(2.0 * stats.t.sf(abs(t), df)))
    )
    monkeypatch.setattr(
        paired, "t_two_sided_p", counted("t", lambda t, df: float(2.0 * stats.t.sf(abs(t), df)))
    )
    monkeypatch.setattr(
        paired, "t_quantile", counted("tq", lambda c, df: float(stats.t.ppf(0.5 + c / 2.0, df)))
    )
    monkeypatch.setattr(decision, "tost", counted("tost", scipy_tost))
    monkeypatch.setattr(ruling_out, "_p_one_sided", counted("ruling", scipy_one_sided))
    slow = render_fleet(
        fleet,
        fleet_answers(store, fleet, min_n=2, requirements=requirements),
        OutputFormat.json,
        200,
    )
    assert {"shapiro", "f", "t", "tq"} <= set(used), set(used)  # scipy.stats was what answered
    assert fast == slow
    store.close()
