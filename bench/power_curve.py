"""A/B calibration of the decision rule: how often quickstart-length races decide a known
difference (the power curve, issue 71), with the A/A check in the same runs (not a test).

    python bench/power_curve.py [--sweeps 4] [--budget 4.5m] [--keep DIR] [--json]
    python bench/power_curve.py --rejudge DIR [--json]    (--analyse DIR: as raced)
    python bench/power_curve.py --fixed 9 --sweeps 5 --keep DIR; then --rejudge DIR

With `--fixed N` every unit runs N rounds (no race, no budget), and `--rejudge` replays each effect
size as its own quick-shaped race (twin-a, twin-b, that throttled twin) for at most 9 rounds, the
quickstart's length, by the rule in the code: the power curve docs/benchmarks.md records. The raced
sweeps below stop the throttled twins early, so their replays have only those rounds.

Each sweep is one plan run as a user runs it (`iomatrix run PLAN --db …`), the size of the
quickstart's: 18 units, quick's budget (4.5 minutes), repetitions and precision phase. Its cells
are one configuration (raw, cache=none, aio=threads) on six `dir` backings that differ only in
their name:

* QEMU's block layer (fio over NBD against qemu-storage-daemon), rand-write-4k and rand-read-4k:
  twin-a and twin-b as they are, and slow-5, slow-10, slow-20 and slow-40 under a QEMU throttle
  group (iomatrix/calibration_throttle.py) whose I/O limit makes them 5, 10, 20 and 40 % slower
  on average than the twins' runs measured just before the sweep (3 rounds of the sweep's own mix:
  twin-a and twin-b on both tiers; the ceiling solved on those runs, `capped_rate`).
  Each workload in the tier is one workload group: one race holding all four effect sizes.
* bare metal, rand-write-4k: the same six backings, none throttled: six identical cells.

Per sweep and workload, each throttled twin against twin-a is one race of that effect size: decided
correctly (twin-a called significantly better, by the final ranking or the race's elimination),
wrongly (the throttled twin called better), or not decided; with the rounds the two shared when
it ended and the effect the runs measured (1 − the ratio throttled/twin-a). Every pair of
unthrottled identical cells is an A/A pair (twin-a/twin-b on the block layer, the 15 pairs of six on
bare metal; the pairs of one race share cells, so they are not independent): called different, and
whether a twin was named the answer over the other.

Printed per effect size: races, decided correctly with its 95 % Clopper–Pearson interval, wrong
direction, rounds at the decision (median, range), the measured effect; then the A/A count; the
load average and CPU steal around each sweep. `--json` prints the same as JSON. Every race's runs
stay in DIR (`--keep`, else a temporary directory that is kept too: the point is to re-judge): one
SQLite database per sweep and `power.json` (limits, rates, load). `--rejudge DIR` judges those
races again, each replayed round by round on its kept runs (bench/rejudge.py, stats/racing.py
`replay_race`: eliminations, deciding pairs run on, final ranking and decision) by the rule now in
the code, then by the same rule with each pair's own variance (the rule before stats/moderated.py),
printed beside the races as they were raced: both rules' curves from the same runs. A replay has
only the kept rounds: a unit the race stopped early has no later rounds for a rule that would have
run it on. Exit 0 when the power target is met (20 % decided in ≥ 90 % of races, 10 % in ≥ 50 %)
and the A/A check passes (at most 1 in 40 called different over ≥ 80 pairs, no twin named the
answer), else 1. Run as root (the sweeps drop caches), inside the heavy lock on a shared host."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from scipy.stats import binomtest

from decided_pairs import _names_worse, rankings, run_plan
from iomatrix.calibration_throttle import BURST_S, ENV, capped_rate
from iomatrix.report.rank import WorkloadRanking
from iomatrix.stats.ranking import Ranking

SLOWER = {"slow-5": 0.05, "slow-10": 0.10, "slow-20": 0.20, "slow-40": 0.40}
TWINS = ("twin-a", "twin-b")
BASE = "twin-a"  # the twin the limits are set from, and each throttled twin is raced against
BLOCK_WORKLOADS = ("rand-write-4k", "rand-read-4k")
BARE_WORKLOADS = ("rand-write-4k",)
RUNTIME_S = 1.0
# issue 71's done-when: (effect, share of races that must decide it)
TARGETS = ((0.20, 0.90), (0.10, 0.50))
QUICK_ROUNDS = 9  # a quickstart's deciding pairs reach 6–9 rounds

CELL = """\
format = ["raw"]
preallocation = ["off"]
cache = ["none"]
aio = ["threads"]
bus = ["virtio-blk"]
size = "128M"
image_size = "512M"
runtime = {runtime}
null_ceiling = false
"""

# quick's repetitions and precision phase (src/iomatrix/plans/quick.toml), its budget by default
PLAN = (
    """\
description = "A/B calibration: one configuration on six backings, four of them throttled"
tier = ["baremetal", "blocklayer"]
workloads = {block_workloads}
"""
    + CELL
    + """\
{budget_line}
[baremetal]
workloads = {bare_workloads}

[repetitions]
{repetitions}
{backings}"""
)

RATE_PLAN = (
    """\
description = "A/B calibration: the twins' rates, to set the throttled twins' limits from"
tier = ["baremetal", "blocklayer"]
workloads = {block_workloads}
"""
    + CELL
    + """\
[baremetal]
workloads = {bare_workloads}

[repetitions]
min = 3
max = 3
{backings}"""
)


def backings_toml(names: list[str], root: Path) -> str:
    out = []
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)
        out.append(f'\n[[backing]]\ntype = "dir"\nname = "{name}"\npath = "{root / name}"\n')
    return "".join(out)


# ------------------------------------------------------------------ measurement


def host_state() -> dict[str, float]:
    """The load averages and the CPU counters of /proc/stat (total and steal jiffies)."""
    one, five, fifteen = os.getloadavg()
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    steal = ticks[7] if len(ticks) > 7 else 0
    return {"load1": one, "load5": five, "load15": fifteen, "ticks": sum(ticks), "steal": steal}


def steal_share(before: dict[str, float], after: dict[str, float]) -> float:
    total = after["ticks"] - before["ticks"]
    return (after["steal"] - before["steal"]) / total if total > 0 else 0.0


def measured_rates(work: Path, i: int, env: dict[str, str]) -> dict[str, list[float]]:
    """The unthrottled twins' rates per block-layer workload: every run of twin-a and twin-b in a
    plan of the sweep's own mix (bare metal beside the block layer, 3 rounds), so the limits are
    set from rates measured as the sweep will run them (twin-a alone ran 4k reads 16 % faster than
    it did inside the sweep, quiet host, 2026-11-28)."""
    plan, db, log = work / f"rate-{i}.toml", work / f"rate-{i}.sqlite", work / f"rate-{i}.log"
    plan.write_text(
        RATE_PLAN.format(
            block_workloads=json.dumps(list(BLOCK_WORKLOADS)),
            bare_workloads=json.dumps(list(BARE_WORKLOADS)),
            runtime=RUNTIME_S,
            backings=backings_toml(list(TWINS), work / "backings"),
        )
    )
    if run_plan(plan, db, log, env) != 0:
        raise SystemExit(f"power curve: the twins' rate run failed; see {log}")
    import rejudge as rj  # bench/rejudge.py: a stored sweep's runs per cell and round

    rates = {
        race.workload: [v for pts in race.data.values() for _, v in pts]
        for race in rj.stored_races(db)
        if race.tier == "blocklayer" and race.higher_is_better
    }
    missing = [w for w in BLOCK_WORKLOADS if not rates.get(w)]
    if missing:
        raise SystemExit(f"power curve: no rate measured for {', '.join(missing)}; see {log}")
    return rates


def limit_for(rates: list[float], slower: float) -> int:
    """x-iops-total for a twin `slower` slower than runs like `rates`: the ceiling solved on them
    (calibration_throttle.capped_rate), less QEMU's tenth of a second of burst."""
    ceiling = capped_rate(rates, slower)
    return max(1, round(ceiling * RUNTIME_S / (RUNTIME_S + BURST_S)))


# quick's (src/iomatrix/plans/quick.toml): raced, with its precision phase and the budget given
RACED = 'min = 3\nmax = 10\nprecision_max = { blocklayer = 30 }\nprecision_for = "contenders"'


def one_sweep(
    work: Path, i: int, budget: str, base_env: dict[str, str], fixed: int | None = None
) -> dict[str, object]:
    """Twin-a's rate, then the sweep with the throttled twins' limits set from it; what was run."""
    before = host_state()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    samples = measured_rates(work, i, base_env)
    rates = {w: statistics.mean(v) for w, v in samples.items()}
    limits = {
        name: {w: limit_for(samples[w], slower) for w in BLOCK_WORKLOADS}
        for name, slower in SLOWER.items()
    }
    env = {**base_env, ENV: json.dumps(limits)}
    plan, db, log = work / f"sweep-{i}.toml", work / f"sweep-{i}.sqlite", work / f"sweep-{i}.log"
    plan.write_text(
        PLAN.format(
            block_workloads=json.dumps(list(BLOCK_WORKLOADS)),
            bare_workloads=json.dumps(list(BARE_WORKLOADS)),
            runtime=RUNTIME_S,
            budget_line=("" if fixed else f'ci_target = 0.05\ntime_budget = "{budget}"\n'),
            repetitions=f"min = {fixed}\nmax = {fixed}" if fixed else RACED,
            backings=backings_toml([*TWINS, *SLOWER], work / "backings"),
        )
    )
    t0 = time.monotonic()
    rc = run_plan(plan, db, log, env)
    after = host_state()
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {
        "sweep": i,
        "db": db.name,
        "exit": rc,
        "seconds": round(time.monotonic() - t0),
        "rates": rates,
        "rate_runs": samples,
        "fixed_rounds": fixed,
        "limits": limits,
        "uptime_before": uptime_before,
        "uptime_after": uptime_after,
        "load1_before": before["load1"],
        "load1_after": after["load1"],
        "steal": steal_share(before, after),
        "ended": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


# ------------------------------------------------------------------ judging the kept races


@dataclass(frozen=True)
class Race:
    """One throttled twin against twin-a in one sweep and workload."""

    sweep: str
    workload: str
    slower: float  # nominal
    verdict: int  # +1 twin-a called better (correct), −1 the throttled twin called better, 0 not
    rounds: int  # the rounds the two shared when the sweep ended
    measured: float  # 1 − ratio throttled/twin-a of the runs (nan when not comparable)


@dataclass(frozen=True)
class Twins:
    """One pair of identical cells (A/A)."""

    sweep: str
    tier: str
    workload: str
    a: str  # backing names
    b: str
    called_different: bool
    named_over: bool


def verdict(
    wr: WorkloadRanking, stops: dict[tuple[int, str], str], with_race_stops: bool, a: str, b: str
) -> tuple[int, float, int]:
    """+1 when `a` was called better than `b`, −1 worse, 0 neither; the ratio b/a of their runs;
    the rounds they shared."""
    sign = 1 if wr.ranking.higher_is_better else -1
    cmp = wr.ranking.comparison(a, b)
    ratio_ab = cmp.test.ratio if cmp.a == a else 1.0 / cmp.test.ratio
    v = 0
    if cmp.significant and math.isfinite(ratio_ab) and ratio_ab != 1.0:
        v = sign if ratio_ab > 1.0 else -sign
    if with_race_stops and v == 0:
        ca, cb = wr.cells[a], wr.cells[b]
        if _names_worse(stops.get((cb.cell_id, wr.workload), ""), ca.cell_key):
            v = 1
        elif _names_worse(stops.get((ca.cell_id, wr.workload), ""), cb.cell_key):
            v = -1
    b_over_a = 1.0 / ratio_ab if ratio_ab and math.isfinite(ratio_ab) else math.nan
    return v, b_over_a, cmp.test.paired_rounds


def judge(db: Path, with_race_stops: bool) -> tuple[list[Race], list[Twins]]:
    """The A/B races and the A/A pairs of one sweep, judged by the rule now in the code: the final
    ranking's comparison, and (`with_race_stops`) the race's own eliminations as they were
    recorded."""
    wrs, stops = rankings(db)
    races, aa = [], []
    for wr in wrs:
        by_backing = {cw.axes["backing"]: label for label, cw in wr.cells.items()}
        sign = 1 if wr.ranking.higher_is_better else -1
        ranked = {r.name for r in wr.ranking.rows if r.rank is not None}
        d = wr.decision
        if wr.tier == "blocklayer" and BASE in by_backing:
            for name, slower in SLOWER.items():
                if name in by_backing and {by_backing[BASE], by_backing[name]} <= ranked:
                    v, ratio, rounds = verdict(
                        wr, stops, with_race_stops, by_backing[BASE], by_backing[name]
                    )
                    # the metric's direction: a slower twin has a lower rate (IOPS)
                    measured = 1.0 - ratio if sign > 0 else 1.0 - 1.0 / ratio
                    races.append(Race(db.name, wr.workload, slower, v, rounds, measured))
        same = TWINS if wr.tier == "blocklayer" else (*TWINS, *SLOWER)
        names = [n for n in same if n in by_backing and by_backing[n] in ranked]
        for i, x in enumerate(names):
            for y in names[i + 1 :]:
                a, b = by_backing[x], by_backing[y]
                v, _, _ = verdict(wr, stops, with_race_stops, a, b)
                over = d is not None and d.kind == "single" and d.answer in (a, b)
                aa.append(Twins(db.name, wr.tier, wr.workload, x, y, v != 0, over))
    return races, aa


# ------------------------------------------------------------------ statistics of the batch


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper–Pearson) 95 % interval of k successes in n (scipy's binomtest)."""
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return ci.low, ci.high


@dataclass
class SizeSummary:
    slower: float
    races: int
    decided: int
    wrong: int
    share_low: float
    share_high: float
    rounds_decided: list[int] = field(default_factory=list)
    rounds_all: list[int] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)


def summarise(races: list[Race]) -> list[SizeSummary]:
    out = []
    for slower in sorted(set(SLOWER.values())):
        mine = [r for r in races if r.slower == slower]
        decided = [r for r in mine if r.verdict > 0]
        low, high = clopper_pearson(len(decided), len(mine))
        out.append(
            SizeSummary(
                slower,
                len(mine),
                len(decided),
                sum(r.verdict < 0 for r in mine),
                low,
                high,
                sorted(r.rounds for r in decided),
                sorted(r.rounds for r in mine),
                sorted(r.measured for r in mine if math.isfinite(r.measured)),
            )
        )
    return out


def targets_met(sizes: list[SizeSummary]) -> dict[str, bool]:
    by = {s.slower: s for s in sizes}
    return {
        f"{effect:.0%} decided in ≥ {need:.0%}": bool(by[effect].races)
        and by[effect].decided / by[effect].races >= need
        for effect, need in TARGETS
    }


# ------------------------------------------------------------------ reporting


def _spread(values: list[float] | list[int], fmt: str) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def print_table(sizes: list[SizeSummary], aa: list[Twins], rule: str) -> None:
    print(f"decision rule: {rule}")
    print(
        f"{'slower':>6}  {'races':>5}  {'decided':>7}  {'share (95% CI)':<17}  {'wrong':>5}  "
        f"{'rounds, decided':<15}  {'rounds, all':<13}  measured effect"
    )
    for s in sizes:
        share = (
            f"{s.decided / s.races:.0%} ({s.share_low:.0%}–{s.share_high:.0%})" if s.races else "-"
        )
        print(
            f"{s.slower:>6.0%}  {s.races:>5}  {s.decided:>7}  {share:<17}  {s.wrong:>5}  "
            f"{_spread(s.rounds_decided, '.0f'):<15}  {_spread(s.rounds_all, '.0f'):<13}  "
            f"{_spread(s.measured, '.0%')}"
        )
    for tier in ("blocklayer", "baremetal"):
        mine = [t for t in aa if t.tier == tier]
        print(
            f"A/A {tier}: {len(mine)} identical pairs, called different "
            f"{sum(t.called_different for t in mine)}, a twin named the answer "
            f"{sum(t.named_over for t in mine)}"
        )
    n, diff = len(aa), sum(t.called_different for t in aa)
    lo, hi = clopper_pearson(diff, n)
    print(
        f"A/A all: {n} pairs, called different {diff} ({diff / max(n, 1):.1%}, 95% CI "
        f"{lo:.1%}–{hi:.1%}; bar: ≤ 2 of 80), named the answer {sum(t.named_over for t in aa)}"
    )
    for t in aa:
        if t.called_different or t.named_over:
            print(f"  called different: {t.sweep} {t.tier} {t.workload}: {t.a} vs {t.b}")
    for key, ok in targets_met(sizes).items():
        print(f"target {key}: {'met' if ok else 'MISSED'}")


def print_sweeps(sweeps: list[dict]) -> None:
    for s in sweeps:
        ended = s.get("ended", s.get("started", ""))  # "started": this bench's first runs' name
        print(
            f"{s['db']}: ended {ended}, {s['seconds']} s, exit {s['exit']}, load "
            f"{s['load1_before']:.2f} → {s['load1_after']:.2f}, steal {s['steal']:.1%}"
        )
        print(
            "  the twins just before it (mean): "
            + ", ".join(f"{w} {r:,.0f} IOPS" for w, r in s["rates"].items())
        )


def as_raced(dbs: list[Path]) -> tuple[list[Race], list[Twins]]:
    """Every sweep judged as it was raced: the final ranking, or the race's own elimination."""
    races: list[Race] = []
    aa: list[Twins] = []
    for db in dbs:
        r, t = judge(db, with_race_stops=True)
        races += r
        aa += t
    return races, aa


def _shared_rounds(kept: dict[str, list[tuple[int, float]]], a: str, b: str) -> int:
    """The rounds both units ran in a replayed race."""
    return len({r for r, _ in kept.get(a, [])} & {r for r, _ in kept.get(b, [])})


def _measured(ranking: Ranking, a: str, b: str) -> float:
    """How much slower b is than a in the ranking's paired comparison: 1 − b/a on a rate (higher
    is better), 1 − a/b on a time; nan where they were not compared."""
    try:
        cmp = ranking.comparison(a, b)
    except KeyError:
        return math.nan
    ratio_ab = cmp.test.ratio if cmp.a == a else 1.0 / cmp.test.ratio
    if not (ratio_ab and math.isfinite(ratio_ab)):
        return math.nan
    return 1.0 - (1.0 / ratio_ab if ranking.higher_is_better else ratio_ab)


def _replayed_twins(
    rj: ModuleType, db: Path, race: Any, judged: Any, names: list[str]
) -> list[Twins]:
    """The A/A pairs among `names` (backings of identical cells, each in `race`) in a race replayed
    by bench/rejudge.py (`rj`): each pair, whether the replay called it different, and whether its
    decision named one twin over the other."""
    by_backing = {ax["backing"]: key for key, ax in race.axes.items()}
    pairs = []
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            a, b = by_backing[x], by_backing[y]
            called = rj.twin_verdict(judged, a, b) != 0
            named_over = rj.named_over_twin(judged.decision, a, b)
            pairs.append(Twins(db.name, race.tier, race.workload, x, y, called, named_over))
    return pairs


def replayed(dbs: list[Path]) -> tuple[list[Race], list[Twins]]:
    """Every sweep's races replayed round by round on their kept runs by the rule now in the code
    (bench/rejudge.py: the race's eliminations, the deciding pairs run on, the final ranking and
    decision), as far as each race's kept rounds go."""
    import rejudge as rj  # bench/rejudge.py: stats/racing.py's replay of a stored race

    races: list[Race] = []
    aa: list[Twins] = []
    for db in dbs:
        for race in rj.stored_races(db):
            rounds = len({r for pts in race.data.values() for r, _ in pts})
            judged = rj.rejudge(race, rounds)
            by_backing = {ax["backing"]: key for key, ax in race.axes.items()}
            kept = judged.replay.data

            if race.tier == "blocklayer" and BASE in by_backing:
                base = by_backing[BASE]
                # judged as the per-size replays are (_race_verdict): against twin-a, or separated
                # from the best while either unthrottled twin leads (twin-b leads about half the
                # time, and "significantly worse than twin-b" decides the A/B race as much)
                twins = tuple(by_backing[t] for t in TWINS if t in by_backing)
                pair = (base, twins[-1])
                for name, slower in SLOWER.items():
                    if name in by_backing:
                        slow = by_backing[name]
                        v = _race_verdict(rj, judged, pair, slow)
                        races.append(
                            Race(
                                db.name,
                                race.workload,
                                slower,
                                v,
                                _shared_rounds(kept, base, slow),
                                _measured(judged.ranking, base, slow),
                            )
                        )
            same = TWINS if race.tier == "blocklayer" else (*TWINS, *SLOWER)
            aa += _replayed_twins(rj, db, race, judged, [n for n in same if n in by_backing])
    return races, aa


def _race_verdict(rj: object, judged: object, twins: tuple[str, str], slow: str) -> int:
    """+1 when the race decided the throttled twin worse: against twin-a itself, or separated from
    the best (eliminated as significantly worse than it, or in the decision's separated cells)
    while the best is an unthrottled twin; −1 when an unthrottled twin was decided worse than the
    throttled one; 0 when neither. In a race of twin-a, twin-b and one throttled twin the leader
    is either twin about half the time: "significantly worse than twin-b" decides the A/B race as
    much as "than twin-a" does (the two are tied within the threshold there)."""
    base = twins[0]
    v = rj.twin_verdict(judged, base, slow)  # type: ignore[attr-defined]
    if v != 0:
        return v
    stop = judged.replay.stopped.get(slow)  # type: ignore[attr-defined]
    separated = set(judged.decision.separated)  # type: ignore[attr-defined]
    worse = stop is not None and any(
        stop[1].reason.startswith(f"significantly worse than {t} ") for t in twins
    )
    best = judged.ranking.rows[0].name if judged.ranking.rows else None  # type: ignore[attr-defined]
    if worse or (slow in separated and best in twins):
        return 1
    if best == slow and any(t in separated for t in twins):
        return -1
    return 0


def replayed_per_size(dbs: list[Path], max_rounds: int) -> tuple[list[Race], list[Twins]]:
    """Each effect size its own quick-shaped race, replayed on the kept runs by the rule now in the
    code for at most `max_rounds` rounds (the quickstart's races reach 6–9): on the block layer,
    per workload and size, the race of twin-a, twin-b and that throttled twin (3 cells, like
    quick's 4), judged twin-a against the throttled twin; the A/A pairs are twin-a/twin-b in the
    first of those races and the 15 pairs of the six identical bare-metal cells in their race.

    Why beside the six-cell race: there the throttled twins are eliminated against whichever cell
    leads (often slow-5, whose ceiling makes it steadier than twin-a), so a decision against
    twin-a itself is rarely made, and the six-cell race pays for 15 pairs. With a fixed-rounds
    sweep (`--fixed N`) every unit has all N rounds, so each replay runs as its race asks."""
    import rejudge as rj

    races: list[Race] = []
    aa: list[Twins] = []
    for db in dbs:
        for race in rj.stored_races(db):
            by_backing = {ax["backing"]: key for key, ax in race.axes.items()}
            if race.tier != "blocklayer":
                judged = rj.rejudge(race, max_rounds)
                names = [n for n in (*TWINS, *SLOWER) if n in by_backing]
                aa += _replayed_twins(rj, db, race, judged, names)
                continue
            if not all(n in by_backing for n in TWINS):
                continue
            base, other = (by_backing[n] for n in TWINS)
            first = True
            for name, slower in SLOWER.items():
                if name not in by_backing:
                    continue
                slow = by_backing[name]
                keep = (base, other, slow)
                sub = rj.StoredRace(
                    race.sweep,
                    race.tier,
                    race.workload,
                    race.metric,
                    race.higher_is_better,
                    {u: race.axes[u] for u in keep},
                    {u: race.data[u] for u in keep},
                )
                judged = rj.rejudge(sub, max_rounds)
                kept = judged.replay.data
                races.append(
                    Race(
                        db.name,
                        race.workload,
                        slower,
                        _race_verdict(rj, judged, (base, other), slow),
                        _shared_rounds(kept, base, slow),
                        _measured(judged.ranking, base, slow),
                    )
                )
                if first:  # twin-a against twin-b, judged in the first of these races only
                    aa += _replayed_twins(rj, db, sub, judged, list(TWINS))
                    first = False
    return races, aa


def judgements(dbs: list[Path], rejudge: bool) -> list[tuple[str, list[Race], list[Twins]]]:
    """(the rule, its A/B races, its A/A pairs): as raced; with `rejudge`, first the races replayed
    by the rule now in the code, then by that rule with each pair's own variance (the rule before
    stats/moderated.py: bench/rejudge.py's own_variances), all from the same kept runs."""
    raced = ("as raced (final ranking, or the race's elimination)", *as_raced(dbs))
    if not rejudge:
        return [raced]
    import rejudge as rj

    per_size = (
        f"each size its own race (twin-a, twin-b, the throttled twin), replayed by the rule now "
        f"in the code, at most {QUICK_ROUNDS} rounds",
        *replayed_per_size(dbs, QUICK_ROUNDS),
    )
    now = ("the six-cell race replayed by the rule now in the code", *replayed(dbs))
    rj.own_variances()  # from here on: each pair's own variance, as before the moderation
    before = ("replayed by that rule with each pair's own variance (no moderation)", *replayed(dbs))
    return [per_size, now, before, raced]


def aa_passed(aa: list[Twins]) -> bool:
    n, diff = len(aa), sum(t.called_different for t in aa)
    return n >= 80 and diff <= n / 40 and not any(t.named_over for t in aa)


def report(work: Path, manifest: dict, rejudge: bool, as_json: bool) -> int:
    """Print every rule's power curve and A/A check (a table, or JSON); exit status by the first
    rule's (the one in the code when re-judging, else as raced)."""
    dbs = [work / s["db"] for s in manifest["sweeps"] if s["exit"] == 0]
    rules = judgements(dbs, rejudge)
    if as_json:
        doc = {"rules": [], "sweeps": manifest["sweeps"]}
        for rule, races, aa in rules:
            sizes = summarise(races)
            doc["rules"].append(
                {
                    "rule": rule,
                    "sizes": [asdict(s) for s in sizes],
                    "races": [asdict(r) for r in races],
                    "aa": {
                        "pairs": len(aa),
                        "called_different": sum(t.called_different for t in aa),
                        "named_the_answer": sum(t.named_over for t in aa),
                        "by_tier": {
                            tier: {
                                "pairs": sum(t.tier == tier for t in aa),
                                "called_different": sum(
                                    t.called_different for t in aa if t.tier == tier
                                ),
                            }
                            for tier in ("blocklayer", "baremetal")
                        },
                        "flagged": [asdict(t) for t in aa if t.called_different or t.named_over],
                    },
                    "targets": targets_met(sizes),
                    "aa_passed": aa_passed(aa),
                }
            )
        print(json.dumps(doc, indent=1))
    else:
        for rule, races, aa in rules:
            print_table(summarise(races), aa, rule)
            print()
        print_sweeps(manifest["sweeps"])
        print(f"kept: {work}")
    _, races, aa = rules[0]
    return 0 if all(targets_met(summarise(races)).values()) and aa_passed(aa) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=4)
    ap.add_argument("--budget", default="4.5m", help="each sweep's time budget (quick's: 4.5m)")
    ap.add_argument("--keep", type=Path, help="the directory the races are kept in")
    ap.add_argument(
        "--fixed",
        type=int,
        metavar="N",
        help="run every unit N rounds (no race, no budget): each size then replays as its own race",
    )
    ap.add_argument("--rejudge", type=Path, help="re-judge the races kept in this directory")
    ap.add_argument(
        "--analyse", type=Path, help="report the races kept in this directory as they were raced"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args()
    kept = args.rejudge or args.analyse
    if kept:
        manifest_file = kept / "power.json"
        if not manifest_file.exists():
            print(
                f"power curve: {manifest_file} not found: give a directory a run kept (--keep)",
                file=sys.stderr,
            )
            return 2
        return report(kept, json.loads(manifest_file.read_text()), bool(args.rejudge), args.json)
    if os.geteuid() != 0:
        print("power curve: run as root (the sweeps drop caches)", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="iomatrix-bench-power-"))
    work.mkdir(parents=True, exist_ok=True)
    manifest_file = work / "power.json"
    manifest = json.loads(manifest_file.read_text()) if manifest_file.exists() else {"sweeps": []}
    base_env = dict(os.environ)
    base_env.pop(ENV, None)
    first = len(manifest["sweeps"]) + 1  # a kept directory grows: more races, same report
    for i in range(first, first + args.sweeps):
        done = one_sweep(work, i, args.budget, base_env, args.fixed)
        manifest["sweeps"].append(done)
        manifest_file.write_text(json.dumps(manifest, indent=1))
        print(
            f"sweep {i}: exit {done['exit']}, {done['seconds']} s, load {done['uptime_after']}",
            file=sys.stderr,
            flush=True,
        )
    return report(work, manifest, False, args.json)


if __name__ == "__main__":
    sys.exit(main())
