"""Fleet answers: the group rule (stats/fleet.py), the group recorded with a sweep and carried by
merge, and the commands' per-host and per-group views of a merged database (report/fleet.py)."""

from __future__ import annotations

import csv
import html
import io
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.stats.fleet import HostResult, fleet_answer
from iomatrix.store import Store
from iomatrix.store.merge import merge
from tests.conftest import DATA, needs, root_only, run_cli
from tests.test_merge import make_sweep

AXES = {c: {"cache": c} for c in ("none", "writeback", "directsync")}


def host(
    name: str, means: dict[str, float], tied: tuple[str, ...] = (), spread: float = 0.01
) -> HostResult:
    """A host whose runs of each configuration are its mean ×(1 − spread, 1, 1 + spread); top: its
    best + tied."""
    values = {c: [m * (1 - spread), m, m * (1 + spread)] for c, m in means.items()}
    best = max(means, key=means.__getitem__)
    return HostResult(name, dict(means), values, (best, *tied), best)


def test_the_choice_is_best_or_tied_best_on_most_hosts_and_the_others_are_named() -> None:
    hosts = [
        host("h1", {"none": 100, "writeback": 90, "directsync": 50}),
        host("h2", {"none": 180, "writeback": 205, "directsync": 90}),
        host("h3", {"none": 100, "writeback": 130, "directsync": 60}),
    ]
    a = fleet_answer(hosts, True, AXES)
    assert a.wins == {"directsync": 0, "none": 1, "writeback": 2}
    assert a.choice == "writeback" and a.tied_choices == () and a.differing == ("h1",)
    # The worst host is the one whose own best is furthest ahead of the choice: h1, at 90/100.
    assert a.worst is not None and a.worst.host == "h1" and a.worst.best == "none"
    r = a.worst.ratio
    assert (
        r.ratio == pytest.approx(0.9)
        and r.low is not None
        and r.high is not None
        and r.low < 0.9 < r.high
    )
    assert {x.host: x.ratio.ratio for x in a.losses} == {
        "h1": pytest.approx(0.9),
        "h2": 1.0,
        "h3": 1.0,
    }
    assert a.heat["h2"] == {
        "none": pytest.approx(180 / 205),
        "writeback": 1.0,
        "directsync": pytest.approx(90 / 205),
    }


def test_hosts_are_blocks_so_a_fast_host_does_not_hide_a_small_consistent_effect() -> None:
    # Four hosts 10× apart; writeback is 6–8% ahead of none on each. As blocks, the hosts' speed
    # cancels out: t = 17.7 on 3 df, p = 0.0004 below the looks' level ℓ* = 0.0024 (stats/looks.py;
    # the first three hosts alone, on 2 df, give p = 0.0063: not yet).
    hosts = [
        host("slow", {"none": 100, "writeback": 107}),
        host("mid", {"none": 1000, "writeback": 1060}),
        host("fast", {"none": 10000, "writeback": 10800}),
        host("fastest", {"none": 100000, "writeback": 107000}),
    ]
    a = fleet_answer(hosts, True, AXES)
    assert a.ranking is not None and a.ranking.analysis is not None and a.ranking.analysis.blocked
    assert a.ranking.best == "writeback"
    pair = a.ranking.comparison("none", "writeback")
    # Welch on the host values (no blocks) could not see this: the hosts dominate
    assert pair.significant, pair
    assert a.choice == "writeback" and a.wins["writeback"] == 4 and a.differing == ()


def test_a_tie_in_wins_goes_to_the_tie_break_and_a_configuration_some_host_lacks_is_not_chosen() -> (  # noqa: E501
    None
):
    # Each of none / writeback is best on one host; directsync, best on the third, was not run on
    # the first.
    hosts = [
        host("h1", {"none": 100, "writeback": 80}),
        host("h2", {"none": 80, "writeback": 100, "directsync": 50}),
        host("h3", {"none": 50, "writeback": 60, "directsync": 200}),
    ]
    a = fleet_answer(hosts, True, AXES, tie_break=("name",))
    assert a.missing == {"h1": ("directsync",)} and "directsync" not in a.eligible
    assert a.wins["none"] == a.wins["writeback"] == 1
    assert (a.choice, a.tied_choices) == ("none", ("writeback",))  # by name, the only key asked for


def test_lower_is_better_takes_the_largest_ratio_as_the_worst_loss() -> None:
    lat = {"h1": {"none": 100.0, "writeback": 120.0}, "h2": {"none": 100.0, "writeback": 90.0}}
    hosts = [
        HostResult(
            h,
            m,
            {c: [v * 0.99, v, v * 1.01] for c, v in m.items()},
            (min(m, key=m.__getitem__),),
            min(m, key=m.__getitem__),
        )
        for h, m in lat.items()
    ]
    a = fleet_answer(hosts, False, AXES, tie_break=("name",))
    assert a.choice == "none"  # 1 win each; by name
    assert (
        a.worst is not None
        and a.worst.host == "h2"
        and a.worst.ratio.ratio == pytest.approx(100 / 90)
    )
    assert a.worst.loss(False) == pytest.approx(100 / 90 - 1)


def test_a_host_whose_best_is_not_separated_is_not_counted_as_best() -> None:
    """Issue 37: "it is the best on every host" was printed while the hosts' own answers were
    unresolved. A host whose own decision gives no answer (its best not separated from the
    runner-up) leads, it does not win."""
    settled = host("h1", {"none": 100, "writeback": 90})
    unsettled = HostResult(
        "h2",
        {"none": 100, "writeback": 99},
        {"none": [50, 100, 150], "writeback": [60, 99, 140]},
        ("none", "writeback"),
        None,
    )
    a = fleet_answer([settled, unsettled], True, AXES)
    assert a.choice == "none" and a.settled and not a.best_everywhere
    assert (
        a.wins["none"] == 1
        and a.leads["none"] == 1
        and a.unsettled == ("h2",)
        and a.differing == ()
    )
    # no loss is stated against an unsettled host's leader
    assert a.worst is not None and a.worst.host == "h1"
    # No settled host at all: the choice only leads (the single-host "No answer yet, the tie-break's
    # pick:").
    none_settled = fleet_answer([unsettled], True, AXES)
    assert none_settled.choice == "none" and not none_settled.settled and none_settled.worst is None
    # Settled everywhere and best everywhere: the one case where "best on every host" is said.
    both = fleet_answer([settled, host("h3", {"none": 300, "writeback": 200})], True, AXES)
    assert both.best_everywhere


def test_the_heat_map_and_the_loss_are_one_figure() -> None:
    """Issue 37: one host's loss was 0.874 in one place (centres) and 0.93× in another (means). Both
    are now the ratio of the means of the host's runs."""
    # centres (geometric means) differ from means
    skewed = HostResult(
        "h1",
        {"none": 100.0, "writeback": 80.0},
        {"none": [60.0, 100.0, 160.0], "writeback": [40.0, 80.0, 150.0]},
        ("none",),
        "none",
    )
    other = host("h2", {"none": 90, "writeback": 200})
    a = fleet_answer([skewed, other, host("h3", {"none": 80, "writeback": 190})], True, AXES)
    assert a.choice == "writeback"
    loss = next(x for x in a.losses if x.host == "h1")
    assert a.heat["h1"]["writeback"] == loss.ratio.ratio == pytest.approx(90 / (320 / 3))


def test_bad_fleets_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one host"):
        fleet_answer([], True, AXES)
    with pytest.raises(ValueError, match="twice: h1"):
        fleet_answer([host("h1", {"none": 1.0}), host("h1", {"none": 2.0})], True, AXES)


# -- the group with the sweep, through merge -------------------------------------------------------


def _host_db(tmp_path: Path, name: str, group: str | None, base: float) -> Path:
    path = tmp_path / f"{name}.sqlite"
    store = Store(path)
    sid = make_sweep(store, name, "quick", base=base)
    if group is not None:
        store.set_sweep_group(sid, group)
    store.close()
    return path


def merged_fleet(tmp_path: Path) -> Path:
    out = tmp_path / "fleet.sqlite"
    merge(
        out,
        [
            _host_db(tmp_path, "host-a", "gen10", 100.0),
            _host_db(tmp_path, "host-b", "gen10", 300.0),
            _host_db(tmp_path, "host-c", "gen12", 500.0),
        ],
    )
    return out


def test_the_group_is_recorded_carried_by_merge_and_absent_from_old_databases(
    tmp_path: Path,
) -> None:
    out = merged_fleet(tmp_path)
    store = Store.open_existing(out)
    assert {(s.hostname, s.group) for s in store.fleet_sweeps()} == {
        ("host-a", "gen10"),
        ("host-b", "gen10"),
        ("host-c", "gen12"),
    }
    old = tmp_path / "old.sqlite"
    shutil.copy(DATA / "schema1" / "iomatrix-schema1.sqlite", old)
    legacy = Store.open_existing(old)
    assert legacy.sweep(1).group is None and {s.group for s in legacy.fleet_sweeps()} == {None}  # type: ignore[union-attr]


def test_bad_fleet_options_are_one_line_errors(tmp_path: Path) -> None:
    out = merged_fleet(tmp_path)
    for args, words in (
        (("rank", "--sweep", "1", "--by-host"), "--sweep selects one host's sweep"),
        (("rank", "--group", "gen11"), "no sweep recorded with group 'gen11'"),
        (("recommend", "--by-host", "--current", "cache=none"), "--current compares"),
        (("recommend", "--by-host", "--margin", "0.1"), "--margin decides one host's sweep"),
        (("results", "--group", "gen11", "--format", "json"), "groups: gen10, gen12"),
    ):
        done = run_cli(*args, "--db", str(out))
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (
            args,
            done.stderr,
        )
        assert words in done.stderr, (args, done.stderr)
    bad = run_cli("run", "quick", "--group", "two words", "--db", str(tmp_path / "x.sqlite"))
    assert bad.returncode == 2 and "--group 'two words' is not a group name" in bad.stderr
    assert not (tmp_path / "x.sqlite").exists()


def fleet_json(db: Path, *args: str) -> list[dict]:
    done = run_cli("rank", "--db", str(db), "--format", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_consistent(tables: list[dict], hosts_of: dict[str, set[str]]) -> None:
    """Every group answer agrees with its per-host rows: the choice has the most wins, a host agrees
    exactly when its row says so, the choice's ratio on a host is 1 where it is that host's best,
    and the hosts are the group's."""
    answers = [t for t in tables if t["title"].endswith("configurations across hosts")]
    per_host = next(t for t in tables if t["title"].startswith("per-host answers"))["rows"]
    assert answers
    for t in answers:
        group = t["title"].split(" · ")[0]
        chosen = [r for r in t["rows"] if r["chosen"]]
        assert len(chosen) == 1
        wins = {r["axes"]: int(r["wins"].split("/")[0]) for r in t["rows"]}
        assert wins[chosen[0]["axes"]] == max(wins.values())
        rows = [r for r in per_host if r["group"] == group and r["workload"] in t["title"]]
        assert {r["host"] for r in rows} == hosts_of[group]
        for r in rows:
            heat = chosen[0][f"{r['host']}.ratio"]
            # the figure people read is the number machines read
            assert chosen[0][r["host"]] == f"{heat:.2f}×"
            assert heat is not None and heat > 0
            # the choice is that host's best in both views or neither
            assert (r["ratio"] == 1.0) == (heat == 1.0)
        assert sum(r["agrees"] == "yes" for r in rows) >= 1 or wins[chosen[0]["axes"]] == 0
        assert all(r["agrees"] == "not separated" for r in rows if not r["settled"])


def test_rank_and_recommend_answer_per_host_and_per_group_on_a_merged_database(
    tmp_path: Path,
) -> None:
    out = merged_fleet(tmp_path)
    tables = fleet_json(out, "--min-runs", "2")
    check_consistent(
        tables,
        {
            "gen10": {"host-a", "host-b"},
            "gen12": {"host-c"},
            "all hosts": {"host-a", "host-b", "host-c"},
        },
    )
    only = fleet_json(out, "--min-runs", "2", "--group", "gen10")
    assert {t["title"].split(" · ")[0] for t in only if "across hosts" in t["title"]} == {"gen10"}
    # --sweep N is one host's sweep, as before.
    single = run_cli("rank", "--db", str(out), "--sweep", "1", "--min-runs", "2")
    assert single.returncode == 0 and "across hosts" not in single.stdout, single.stderr
    rec = run_cli("recommend", "--db", str(out), "--min-runs", "2")
    assert rec.returncode == 0, rec.stderr
    assert "all hosts, 3 hosts: use " in rec.stdout and "gen12, 1 host: use " in rec.stdout
    assert max(map(len, rec.stdout.splitlines())) <= 200  # run_cli's COLUMNS
    side = run_cli("results", "--db", str(out))
    assert side.returncode == 0 and all(h in side.stdout for h in ("host-a", "host-b", "host-c")), (
        side.stderr
    )
    cmp = run_cli("compare", str(out), str(out), "--all", "--format", "json")
    assert cmp.returncode == 0, cmp.stderr
    cells = [r["cell"] for r in json.loads(cmp.stdout)[0]["rows"]]
    assert {c.split(":")[0] for c in cells} == {"host-a", "host-b", "host-c"}  # host by host


def test_a_heat_map_without_a_ranked_configuration_is_drawn_without_a_warning() -> None:
    """A group whose hosts ranked no configuration yet draws an empty map with one row's span;
    before, its y axis was (0, 0) and matplotlib warned "identical low and high ylims" in CI."""
    import warnings

    from iomatrix.report.fleet_chart import fleet_heat_map

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svg = fleet_heat_map(["host-a", "host-b"], [], {}, True, None)
        also = fleet_heat_map([], [], {}, True, None)
    assert svg.lstrip().startswith("<svg") or "<svg" in svg[:400], svg[:200]
    assert "host-a" in svg and "<svg" in also[:400]


@needs("chromium")
def test_the_html_report_shows_the_host_by_configuration_heat_map(tmp_path: Path) -> None:
    from tests.browser import load

    out = merged_fleet(tmp_path)
    html = tmp_path / "fleet.html"
    done = run_cli("report", "--html", str(html), "--db", str(out), "--min-runs", "2")
    assert done.returncode == 0, done.stderr
    text = html.read_text()
    assert text.count('<h2 id="fleet-') >= 3 and "as a ratio to that host&#39;s own best" in text
    assert all(h in text for h in ("host-a", "host-b", "host-c"))
    page = load(html, width=1400)
    assert page.console_errors == [] and len(page.screenshot_png) > 1000


# -- real sweeps of three hosts --------------------------------------------------------------------

PLAN = """
tier = ["blocklayer"]
cache = ["none", "unsafe"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "32M"
runtime = 0.5  # the answers are checked against each host's own ranking, not against figures
retry_disturbed = false  # (nor are retries: a run the loaded host disturbed is kept, flagged)
[repetitions]
min = 3
max = 3
"""


@pytest.mark.slow
@root_only
@needs("fio")
@needs("qemu-storage-daemon")
@needs("unshare")
def test_three_real_hosts_swept_merged_and_answered(tmp_path: Path) -> None:
    """Three sweeps of one plan, each under its own hostname (a UTS namespace, as scripts/fleet-demo
    gives its hosts: the host facts iomatrix records differ), merged; the fleet answer is checked
    against each host's own database, ranked alone."""
    from iomatrix.report.fleet import fleet_answers, select_fleet
    from iomatrix.report.rank import rank_sweep

    (tmp_path / "p.toml").write_text(PLAN)
    exe = shutil.which("iomatrix") or str(Path(sys.executable).parent / "iomatrix")
    dbs = []
    for n, group in ((1, "rack-a"), (2, "rack-a"), (3, "rack-b")):
        script = (
            f"hostname fleet-test-{n} && exec {exe} run p.toml --db h{n}.sqlite --workdir w{n} "
            f"--group {group} --monitor-interval 0.5"
        )
        done = subprocess.run(
            ["unshare", "--uts", "sh", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        dbs.append(tmp_path / f"h{n}.sqlite")
    merged = tmp_path / "fleet.sqlite"
    assert run_cli("merge", str(merged), *map(str, dbs)).returncode == 0
    store = Store.open_existing(merged)
    fleet = select_fleet(store)
    assert [(s.hostname, s.group) for s in fleet.sweeps] == [
        ("fleet-test-1", "rack-a"),
        ("fleet-test-2", "rack-a"),
        ("fleet-test-3", "rack-b"),
    ]
    answers = fleet_answers(store, fleet, min_n=3)
    assert {wf.group for wf in answers} == {"rack-a", "rack-b", "all hosts"}
    for wf in answers:
        a = wf.answer
        for h in a.hosts:  # each host's view in the merged file is what its own database says
            own = rank_sweep(
                Store.open_existing(tmp_path / f"h{h[-1]}.sqlite"), 1, None, None, min_n=3
            )
            mine = next(wr for wr in own if (wr.workload, wr.tier) == (wf.workload, wf.tier))
            assert mine.decision is not None and wf.per_host[h].decision is not None
            assert mine.decision.leader == wf.per_host[h].decision.leader
            means = {
                r.name: sum(mine.cells[r.name].samples[wf.metric])
                / len(mine.cells[r.name].samples[wf.metric])
                for r in mine.ranking.rows
                if r.centre is not None
            }
            best = means[mine.decision.leader]
            assert a.heat[h] == pytest.approx({c: m / best for c, m in means.items()})
        assert a.choice is not None and a.wins[a.choice] == max(a.wins[c] for c in a.eligible)
        assert set(a.differing) == {
            h.host for h in (_tops(wf)) if h.settled and a.choice not in h.top
        }
        assert all(math.isfinite(x.loss(a.higher_is_better)) for x in a.losses)
        # The worst host is the settled host that loses most; no loss is stated against an unsettled
        # host's leader.
        losses = [x.loss(a.higher_is_better) for x in a.losses if x.host not in a.unsettled]
        assert (
            (a.worst is None)
            if not losses
            else a.worst is not None and a.worst.loss(a.higher_is_better) == max(losses)
        )
        assert set(a.unsettled) == {h for h in a.hosts if wf.per_host[h].decision.answer is None}
    blocked = next(wf for wf in answers if wf.group == "all hosts").answer.ranking
    assert blocked is not None and blocked.analysis is not None and len(blocked.rows) == 2
    rec = run_cli("recommend", "--db", str(merged))
    assert rec.returncode == 0 and "all hosts, 3 hosts: use " in rec.stdout, rec.stderr
    con = sqlite3.connect(f"file:{merged}?mode=ro", uri=True)
    assert con.execute("SELECT COUNT(DISTINCT host_group) FROM sweeps").fetchone()[0] == 2


def _tops(wf: object) -> list[HostResult]:
    from iomatrix.report.fleet import WorkloadFleet, host_result

    assert isinstance(wf, WorkloadFleet)
    return [host_result(h, wr) for h, wr in wf.per_host.items()]


def test_the_fleet_answer_honours_requirements_as_one_host_does(tmp_path: Path) -> None:
    """Issue 37: `recommend --require migratable` on a merged database changes the group's answer
    (each host's writeback cell is its fastest; writeback is not migratable), as it changes one
    host's."""
    from iomatrix.report.fleet import fleet_answers, select_fleet
    from iomatrix.report.recommend import parse_requirements

    store = Store.open_existing(merged_fleet(tmp_path))
    fleet = select_fleet(store)

    def choices(*require: str) -> set[str]:
        answers = fleet_answers(
            store, fleet, "rand-read-4k", min_n=2, requirements=parse_requirements(require)
        )
        return {wf.answer.choice or "" for wf in answers}

    free, migratable = choices(), choices("migratable")
    assert free and all("cache=writeback" in c for c in free), free
    assert migratable and all("cache=none" in c for c in migratable), migratable
    cli = run_cli(
        "recommend",
        "--db",
        str(store.path),
        "--require",
        "migratable",
        "--min-runs",
        "2",
        "--workload",
        "rand-read-4k",
    )
    flat = " ".join(cli.stdout.split())
    assert cli.returncode == 0 and "use cache=none" in flat and "use cache=writeback" not in flat, (
        cli.stdout
    )


# -- parity with one host's answer: settled hosts, risks, the group answer as data, the report's opening ---  # noqa: E501


def sweep_of_runs(path: Path, facts: dict, runs: dict[str, list[float]]) -> None:
    """A database holding one finished bare-metal sweep of `facts`' host: per cache mode,
    rand-read-4k runs with these read.iops (one per round), recorded through the store as `iomatrix
    run` records them."""
    from tests.test_merge import AXES as CELL_AXES
    from tests.test_merge import run

    store = Store(path)
    sweep = store.create_sweep(
        store.host_id(facts),
        "quick",
        "fp-quick",
        '{"name": "quick"}',
        [],
        [],
        metric_registry={"read.iops": {"unit": "IOPS", "direction": "higher"}},
    )
    for c, (cache, values) in enumerate(runs.items()):
        cell = store.cell_id(sweep, f"quick-cell{c}", {**CELL_AXES, "cache": cache}, {"fs": "ext4"})
        for i, v in enumerate(values):
            store.record_run(
                run(cell, "rand-read-4k", v, t0=10.0 * i + c, round=i + 1, round_position=c)
            )
    store.set_sweep_status(sweep, "finished")
    store.close()


CLEAR = {"none": [200.0, 202.0, 198.0, 201.0], "writeback": [100.0, 101.0, 99.0, 100.5]}
NOISY = {"none": [100.0, 300.0, 50.0, 250.0], "writeback": [120.0, 280.0, 60.0, 230.0]}


def settled_and_unsettled_fleet(tmp_path: Path) -> Path:
    """Hosts 1 and 2 separate cache=none clearly; host 3's runs cannot tell the two apart."""
    from tests.test_merge import host_facts

    dbs = []
    for name, runs in (("host-1", CLEAR), ("host-2", CLEAR), ("host-3", NOISY)):
        sweep_of_runs(tmp_path / f"{name}.sqlite", host_facts(name), runs)
        dbs.append(tmp_path / f"{name}.sqlite")
    merge(tmp_path / "fleet.sqlite", dbs)
    return tmp_path / "fleet.sqlite"


def test_best_on_every_host_is_said_only_of_settled_hosts(tmp_path: Path) -> None:
    """Issue 37: "it is the best on every host" was printed while the hosts' own answers were
    unresolved."""
    from iomatrix.report.fleet import fleet_answers, select_fleet

    db = settled_and_unsettled_fleet(tmp_path)
    store = Store.open_existing(db)
    [wf] = fleet_answers(store, select_fleet(store), min_n=3)
    own = {h: wr.decision.answer for h, wr in wf.per_host.items() if wr.decision is not None}
    # as 'rank --sweep N' decides each
    assert own["host-1"] and own["host-2"] and own["host-3"] is None
    assert wf.answer.unsettled == ("host-3",) and wf.answer.wins[wf.answer.choice] == 2
    said = " ".join(wf.statement().split())
    assert "use cache=none" in said and "best or tied-best on 2 of 3 hosts" in said
    assert "best on every host" not in said and "Not separated on host-3 (leading cache=" in said
    rows = fleet_json(db)[-1]["rows"]
    assert {r["host"]: r["agrees"] for r in rows} == {
        "host-1": "yes",
        "host-2": "yes",
        "host-3": "not separated",
    }
    # Without the unsettled host, the two settled ones do make it the best on every host.
    for name in ("host-1", "host-2"):
        (tmp_path / "two").mkdir(exist_ok=True)
        shutil.copy(tmp_path / f"{name}.sqlite", tmp_path / "two" / f"{name}.sqlite")
    merge(tmp_path / "two.sqlite", sorted((tmp_path / "two").glob("*.sqlite")))
    two = Store.open_existing(tmp_path / "two.sqlite")
    [both] = fleet_answers(two, select_fleet(two), min_n=3)
    assert "it is the best on every host" in both.statement()


def test_the_group_answer_states_the_risks_one_host_states_and_is_in_json_and_the_report(
    tmp_path: Path,
) -> None:
    """Issue 37: the fleet answer had no risk lines, no group answer in --format json, and the HTML
    report opened with one host's answer. The risks are the single-host answer's own (risks.py), for
    the same configuration."""
    from iomatrix.report.recommend import risk_statements

    db = settled_and_unsettled_fleet(tmp_path)
    data = json.loads(run_cli("recommend", "--db", str(db), "--format", "json").stdout)
    groups = data[0]
    assert groups["title"].startswith("group answers")
    [row] = groups["rows"]
    assert (row["status"], row["answer"], row["hosts"]) == (
        "answer",
        "cache=none",
        ["host-1", "host-2", "host-3"],
    )
    assert (
        row["not_separated"] == ["host-3"]
        and row["best_on_every_host"] is False
        and row["wins"] == 2
    )
    expected = [
        {"situation": r.situation, "text": r.text, "basis": r.basis}
        for r in risk_statements("none")
    ]
    assert row["risks"] == expected and len(expected) == 4
    # One host's answer for the same configuration states the same risks (its headline: three
    # situations).
    single = json.loads(
        run_cli("recommend", "--db", str(db), "--sweep", "1", "--format", "json").stdout
    )
    [pick] = single["headline"]["picks"]
    assert pick["cell"] == row["axes"]
    assert {r["text"] for r in pick["risks"]} <= {r["text"] for r in row["risks"]}
    text = " ".join(run_cli("recommend", "--db", str(db)).stdout.split())
    assert (
        all(r["text"] in text for r in pick["risks"])
        and "risks (documented, not measured):" in text
    )
    # The same snippet as one host's answer for the same configuration (libvirt, the default
    # --target).
    fleet_libvirt = next(x for x in row["snippets"]["snippets"] if x["tool"] == "libvirt")
    assert pick["snippet"]["tool"] == "libvirt" and fleet_libvirt["text"] == pick["snippet"]["text"]
    assert " ".join(pick["snippet"]["text"].split()) in text
    csv_rows = list(
        csv.DictReader(io.StringIO(run_cli("recommend", "--db", str(db), "--format", "csv").stdout))
    )
    [csv_row] = [r for r in csv_rows if r["table"].startswith("group answers")]
    assert (
        json.loads(csv_row["hosts"]) == row["hosts"]
        and json.loads(csv_row["risks"]) == row["risks"]
    )
    page = tmp_path / "fleet.html"
    assert run_cli("report", "--html", str(page), "--db", str(db)).returncode == 0
    body = page.read_text()
    # The report opens with the group answer (risks included); one host's answer comes after it.
    assert body.index('id="fleet-answer"') < body.index('id="answer"')
    opening = html.unescape(body[body.index('id="fleet-answer"') : body.index('id="answer"')])
    assert "Answer for the fleet: plan quick, 3 host(s)" in opening and "use cache=none" in opening
    assert all(r["text"] in opening for r in pick["risks"])


def test_a_faster_configuration_the_requirements_exclude_is_named_as_one_host_names_it(
    tmp_path: Path,
) -> None:
    """One host's answer says "not chosen: cache=unsafe would gain …; chosen only with
    --allow-data-loss"; the group's answer names the group's unrestricted choice the same way, with
    the same risk and opt-in."""
    from tests.test_merge import host_facts

    unsafe_fastest = {**CLEAR, "unsafe": [1000.0, 1010.0, 990.0, 1005.0]}
    for name in ("host-1", "host-2"):
        sweep_of_runs(tmp_path / f"{name}.sqlite", host_facts(name), unsafe_fastest)
    db = tmp_path / "fleet.sqlite"
    merge(db, [tmp_path / "host-1.sqlite", tmp_path / "host-2.sqlite"])
    [row] = json.loads(run_cli("recommend", "--db", str(db), "--format", "json").stdout)[0]["rows"]
    single = json.loads(
        run_cli("recommend", "--db", str(db), "--sweep", "1", "--format", "json").stdout
    )
    [verdict] = [v for v in single["verdicts"] if v["declined"]]
    assert row["answer"] == "cache=none" and verdict["choice"]["cell"] == row["axes"]
    d = row["declined"]
    assert (
        d["cell"] == verdict["declined"]["cell"] and "cache=unsafe" in d["cell"] and d["wins"] == 2
    )
    assert (d["risk"], d["opt_in"], d["fails"]) == (
        verdict["declined"]["risk"],
        verdict["declined"]["opt_in"],
        verdict["declined"]["fails"],
    )
    text = " ".join(run_cli("recommend", "--db", str(db)).stdout.split())
    assert (
        "not chosen: cache=unsafe, the group's choice without the requirements (best or "
        "tied-best on 2 of 2"
        in text
        and "chosen only with --allow-data-loss" in text
    )
    # With the flag, the excluded configuration is the answer and nothing is declined.
    allowed = run_cli("recommend", "--db", str(db), "--format", "json", "--allow-data-loss")
    [free] = json.loads(allowed.stdout)[0]["rows"]
    assert free["answer"] == "cache=unsafe" and free["declined"] is None


def test_hosts_whose_backings_are_named_differently_are_told_why_nothing_matches() -> None:
    from iomatrix.report.fleet import backing_names_hint

    hint = backing_names_hint({"h1": {"lun-h1"}, "h2": {"lun-h2"}, "h3": {"lun-h3", "dir"}})
    assert hint is not None and "h1: lun-h1; h2: lun-h2; h3: dir, lun-h3" in hint
    assert "same `name` on every host" in hint
    assert backing_names_hint({"h1": {"san"}, "h2": {"san"}}) is None  # matched by name: no hint
    assert backing_names_hint({"h1": {"san", "dir"}, "h2": {"dir"}}) is None  # one name in common
    assert backing_names_hint({"h1": {"lun-h1"}}) is None  # one host
    # a host without ranked cells: "lacks" says it
    assert backing_names_hint({"h1": {"lun-h1"}, "h2": set()}) is None
