"""Re-judge stored sweeps with today's decision rule: the A/A false-decision rate and the A/B power
curve from captured data (no timing; not a test).

    python bench/rejudge.py DB [DB ...] [--rounds 9] [--factor 0.95 --factor 0.90 ...]

Each DB is a sweep whose cells include *twins*: cells equal in every axis but the backing's name
(bench/aa_calibration.py's `dir` backings twin-a, twin-b, …; with `--rounds N` it runs every unit N
rounds, so each race can be replayed at any length up to N). Per tier × workload and per two twin
backings x, y, the cells on x or y make one race of quick's shape (2 twins × cache none/writeback:
4 cells, 6 pairs, 2 of them twin pairs). Each race is replayed round by round by the rule
(stats/racing.py ``replay_race``: what the scheduler's race would have stopped, on these values),
then ranked and decided (stats/ranking.py, stats/decision.py) on the rounds it ran:

* **A/A**: the twins as stored. A twin pair is *called different* when the final ranking's paired
  comparison is significant at its look's level, or the race eliminated one twin as significantly
  worse than the other; *named the answer* when the decision is `single` and names a twin.
* **A/B** (`--factor F`, repeatable): the same races with one twin's stored values multiplied by F
  (its figure made 1 − F slower: a known effect injected into real noise; divided by F where lower
  is better). *Decided* when the pair is called different with the scaled twin the worse.

Printed: counts, rates with 95 % Wilson and Clopper–Pearson intervals, per factor and per twin
pair's cache mode (under writeback the twins are the race's leaders: the deciding pair; under
cache=none both twins are usually eliminated against writeback at the first look, and the pair is
judged on those rounds), and the rounds the races ran. The functions are also what a live bench
calls to re-judge its own sweeps (``stored_races``, ``rejudge``, ``twin_verdict``). Exit 0 when
the A/A rate is at most 1 in 40 and no twin was named the answer."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sqlite3
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "src"))

from iomatrix.report.rank import primary_metric  # noqa: E402
from iomatrix.stats.decision import Decision, decide  # noqa: E402
from iomatrix.stats.looks import DECISION_ALPHA  # noqa: E402
from iomatrix.stats.racing import Replay, replay_race  # noqa: E402
from iomatrix.stats.ranking import Ranking, rank  # noqa: E402

AXES = ("tier", "format", "preallocation", "cache", "aio", "bus", "backing", "modifier")


@dataclass(frozen=True)
class StoredRace:
    """One tier × workload of a stored sweep: its cells' axes and (round, value) of the primary
    metric."""

    sweep: str
    tier: str
    workload: str
    metric: str
    higher_is_better: bool
    axes: dict[str, dict[str, str]]  # cell key → axis → value
    data: dict[str, list[tuple[int, float]]]  # cell key → (round, value), successful runs only


@dataclass(frozen=True)
class Judged:
    replay: Replay
    ranking: Ranking
    decision: Decision


def stored_races(db: Path) -> list[StoredRace]:
    """Every tier × workload of the newest sweep in ``db`` (read-only), its primary metric's values
    per cell and round."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sid = con.execute("SELECT max(id) FROM sweeps").fetchone()[0]
        cells = {
            row[0]: dict(zip(("key", *AXES), row[1:], strict=True))
            for row in con.execute(
                f"SELECT id, key, {', '.join(AXES)} FROM cells WHERE sweep_id = ?", (sid,)
            )
        }
        groups: dict[tuple[str, str], dict[str, list[tuple[int, float]]]] = defaultdict(dict)
        for workload in sorted({w for (w,) in con.execute("SELECT DISTINCT workload FROM runs")}):
            metric, _ = primary_metric(workload)
            rows = con.execute(
                "SELECT r.cell_id, r.round, s.value FROM runs r JOIN samples s ON s.run_id = r.id "
                "WHERE r.workload = ? AND r.status = 'ok' AND s.metric = ? AND r.round IS NOT NULL",
                (workload, metric),
            )
            for cid, rnd, value in rows:
                if cid in cells and value > 0:
                    c = cells[cid]
                    groups[(c["tier"], workload)].setdefault(c["key"], []).append((rnd, value))
    finally:
        con.close()
    out = []
    for (tier, workload), data in sorted(groups.items()):
        metric, higher = primary_metric(workload)
        axes = {c["key"]: {a: c[a] for a in AXES} for c in cells.values() if c["key"] in data}
        out.append(
            StoredRace(
                db.name,
                tier,
                workload,
                metric,
                higher,
                axes,
                {k: sorted(v) for k, v in data.items()},
            )
        )
    return out


def races_to_json(races: Sequence[StoredRace]) -> str:
    """The races as compact JSON (``races_from_json`` reads it back): what a test keeps of a
    captured sweep, its figures only (tests/data/aa-twins)."""
    return json.dumps(
        [
            {
                "sweep": r.sweep,
                "tier": r.tier,
                "workload": r.workload,
                "metric": r.metric,
                "higher_is_better": r.higher_is_better,
                "axes": r.axes,
                "data": {u: [[rnd, v] for rnd, v in pts] for u, pts in r.data.items()},
            }
            for r in races
        ],
        indent=1,
    )


def races_from_json(text: str) -> list[StoredRace]:
    return [
        StoredRace(
            r["sweep"],
            r["tier"],
            r["workload"],
            r["metric"],
            r["higher_is_better"],
            r["axes"],
            {u: [(int(rnd), float(v)) for rnd, v in pts] for u, pts in r["data"].items()},
        )
        for r in json.loads(text)
    ]


def rejudge(
    race: StoredRace,
    max_rounds: int,
    scale: Mapping[str, float] | None = None,
    threshold: float = 0.05,
    alpha: float = DECISION_ALPHA,
) -> Judged:
    """The race replayed by today's rule for at most ``max_rounds`` rounds (``replay_race``), then
    ranked and decided on what it ran; ``scale``: cell → factor its values are multiplied by (a
    known effect injected; lower-is-better metrics are divided, so F < 1 is always slower)."""
    data = {
        u: [(r, v * _factor(scale, u, race.higher_is_better)) for r, v in pts]
        for u, pts in race.data.items()
    }
    rp = replay_race(
        data, race.higher_is_better, max_rounds, threshold, alpha, deciding_run_on=True
    )
    groups = {u: [v for _, v in pts] for u, pts in rp.data.items()}
    rounds = {u: [r for r, _ in pts] for u, pts in rp.data.items()}
    ranking = rank(groups, race.higher_is_better, alpha=alpha, rounds=rounds)
    decision = decide(ranking, race.axes, groups, threshold=threshold)
    return Judged(rp, ranking, decision)


def _factor(scale: Mapping[str, float] | None, unit: str, higher_is_better: bool) -> float:
    f = (scale or {}).get(unit, 1.0)
    return f if higher_is_better else 1.0 / f


def twin_verdict(judged: Judged, a: str, b: str) -> int:
    """+1 when a is called better than b (the final ranking's paired comparison significant, or the
    race eliminated b as significantly worse than a), −1 when b is, 0 when neither."""
    for loser, winner, sign in ((b, a, 1), (a, b, -1)):
        stop = judged.replay.stopped.get(loser)
        if stop and stop[1].reason.startswith(f"significantly worse than {winner} "):
            return sign
    try:
        cmp = judged.ranking.comparison(a, b)
    except KeyError:
        return 0
    if not cmp.significant:
        return 0
    ratio = cmp.test.ratio if cmp.a == a else 1.0 / cmp.test.ratio
    if not math.isfinite(ratio) or ratio == 1.0:
        return 0
    better = ratio > 1.0 if judged.ranking.higher_is_better else ratio < 1.0
    return 1 if better else -1


def named_over_twin(decision: Decision, a: str, b: str) -> bool:
    """The decision names one twin "the answer" over the other (``single``, the other separated)."""
    return decision.kind == "single" and (
        (decision.answer == a and b in decision.separated)
        or (decision.answer == b and a in decision.separated)
    )


def twin_races(race: StoredRace) -> list[tuple[StoredRace, list[tuple[str, str]]]]:
    """quick-shaped races from a sweep with several twin backings: for every two backings, the
    cells on either, with their twin pairs (cells equal in every axis but the backing)."""
    backings = sorted({ax["backing"] for ax in race.axes.values()})
    out = []
    for x, y in itertools.combinations(backings, 2):
        keep = [u for u, ax in race.axes.items() if ax["backing"] in (x, y)]
        pairs = [
            (u, v)
            for u, v in itertools.combinations(sorted(keep), 2)
            if race.axes[u]["backing"] != race.axes[v]["backing"]
            and all(race.axes[u][k] == race.axes[v][k] for k in AXES if k != "backing")
        ]
        sub = StoredRace(
            race.sweep,
            race.tier,
            race.workload,
            race.metric,
            race.higher_is_better,
            {u: race.axes[u] for u in keep},
            {u: race.data[u] for u in keep},
        )
        out.append((sub, pairs))
    return out


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval of k/n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of k/n, from the beta quantiles."""
    from scipy.stats import beta

    a = (1.0 - confidence) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return lo, hi


def rate(k: int, n: int) -> str:
    wl, wh = wilson(k, n)
    cl, ch = clopper_pearson(k, n)
    return (
        f"{k}/{n} = {k / max(n, 1):.1%} (Wilson {wl:.1%}–{wh:.1%}, "
        f"Clopper–Pearson {cl:.1%}–{ch:.1%})"
    )


@dataclass(frozen=True)
class PairResult:
    sweep: str
    tier: str
    workload: str
    cache: str
    factor: float  # 1.0: A/A
    verdict: int  # +1 the unscaled twin called better, −1 the scaled one, 0 neither
    answer_twin: bool  # the decision named a twin "the answer" (single)
    rounds: int  # the rounds the race ran


def calibrate(
    races: Sequence[StoredRace], max_rounds: int, factors: Sequence[float]
) -> list[PairResult]:
    """Every twin pair of every quick-shaped race of ``races``, as stored (factor 1) and with the
    second twin scaled by each of ``factors``."""
    out = []
    for race in races:
        for sub, pairs in twin_races(race):
            plain = rejudge(sub, max_rounds)
            for a, b in pairs:
                cache = sub.axes[a]["cache"]
                where = (race.sweep, sub.tier, sub.workload, cache)
                named = named_over_twin(plain.decision, a, b)
                verdict = twin_verdict(plain, a, b)
                out.append(PairResult(*where, 1.0, verdict, named, plain.replay.rounds))
                for f in factors:
                    j = rejudge(sub, max_rounds, {b: f})
                    out.append(PairResult(*where, f, twin_verdict(j, a, b), False, j.replay.rounds))
    return out


def summary(results: Sequence[PairResult]) -> tuple[int, int, int]:
    """Print the A/A and A/B figures; (A/A pairs, called different, named the answer)."""
    aa = [r for r in results if r.factor == 1.0]
    diff = sum(r.verdict != 0 for r in aa)
    named = sum(r.answer_twin for r in aa)
    print(f"A/A: identical twin pairs called different: {rate(diff, len(aa))}")
    print(f"     a twin named the answer: {named}")
    for key in ("tier", "workload", "cache"):
        by = Counter(getattr(r, key) for r in aa)
        bad = Counter(getattr(r, key) for r in aa if r.verdict != 0)
        print(f"     by {key}: " + ", ".join(f"{k} {bad[k]}/{by[k]}" for k in sorted(by)))
    print("     rounds the races ran: " + _counts(r.rounds for r in aa))
    for f in sorted({r.factor for r in results if r.factor != 1.0}, reverse=True):
        ab = [r for r in results if r.factor == f]
        right = sum(r.verdict == 1 for r in ab)
        wrong = sum(r.verdict == -1 for r in ab)
        print(
            f"A/B {1 - f:.0%} slower: decided the right way {rate(right, len(ab))}; "
            f"the wrong way {wrong}"
        )
        for cache in sorted({r.cache for r in ab}):
            sub = [r for r in ab if r.cache == cache]
            right_here = sum(r.verdict == 1 for r in sub)
            print(f"     twins under cache={cache}: {rate(right_here, len(sub))}")
        print("     rounds the races ran: " + _counts(r.rounds for r in ab))
    return len(aa), diff, named


def _counts(values: object) -> str:
    c = Counter(values)  # type: ignore[arg-type]
    return ", ".join(f"{k}: {c[k]}" for k in sorted(c))


def own_variances() -> None:
    """Judge every pair by its own variance from now on (the rule before moderation): the race's
    moderation step made a no-op in stats/blocked.py, for a like-for-like comparison."""
    from iomatrix.stats import blocked
    from iomatrix.stats.moderated import NO_PRIOR

    def unmoderated(tests, index, cells, df_cap, confidence=0.95):  # type: ignore[no-untyped-def]
        return list(tests), NO_PRIOR

    blocked.race_moderation = unmoderated  # type: ignore[assignment]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", type=Path, nargs="+", help="stored sweeps with twin backings")
    ap.add_argument("--rounds", type=int, default=9, help="race length (quickstart: 6-9)")
    ap.add_argument("--factor", type=float, action="append", help="A/B: the slower twin's factor")
    ap.add_argument("--export", type=Path, help="write the races' figures as JSON here and stop")
    ap.add_argument(
        "--own-variance",
        action="store_true",
        help="the rule before stats/moderated.py (each pair its own variance), for comparison",
    )
    args = ap.parse_args()
    if args.own_variance:
        own_variances()
    for db in args.db:
        if not db.is_file():
            print(f"error: {db} is not a file; give stored sweeps (.sqlite)", file=sys.stderr)
            return 2
    if args.export:
        args.export.write_text(races_to_json([r for db in args.db for r in stored_races(db)]))
        return 0
    factors = args.factor if args.factor is not None else [0.95, 0.90, 0.80, 0.60]
    results = calibrate([r for db in args.db for r in stored_races(db)], args.rounds, factors)
    n, diff, named = summary(results)
    return 0 if n and diff <= n / 40 and named == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
