"""Each host's history, sweep by sweep (`iomatrix history`): its answer per workload, and what
changed from the sweep before of the same plan — the versions recorded (kernel, QEMU, fio, OS) and
the figures, a change flagged only when the existing compare statistics say it is real.

A host across updates is one host by its inventory name (`host_label`), else its hostname: its
identifying facts (the hosts table's fingerprint) include the kernel and tool versions, so each
update starts a new hosts row. Cloned machines that share that name are told apart by their machine
id, as the fleet answers tell them (Store.fleet_sweeps), so two machines never make one history.

Along the time axis, each sweep is compared with the host's previous sweep of the same plan
fingerprint as `compare --fail-above θ` compares two sweeps (report.rank.compare_series: Welch per
figure, Holm over the figures; stats.gate.regression_gate): **slower** when significant and worse by
more than θ, **faster** when significant and better by more than θ. Over the whole series too, as
asv looks at it: per host and plan, each figure's sweeps in time order go through stats/steps.py
(binary segmentation, a permutation test per split, Holm across the host's figures), and a level
that moved by more than θ and held for at least two sweeps on each side is a **lasting step**, shown
at the sweep it starts from. It catches a drift that no consecutive pair shows, and it is blind to a
lone sweep off the line (the consecutive comparison flags that one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from iomatrix.errors import UserError
from iomatrix.metrics import metric_info
from iomatrix.report.naming import CellNames, cell_names
from iomatrix.report.rank import compare_series, figure_series
from iomatrix.stats.gate import regression_gate, worse_by
from iomatrix.stats.steps import Step, detect_steps, real_steps
from iomatrix.stats.sweeps import Change
from iomatrix.store import Store

VERSION_FACTS = ("kernel", "qemu_version", "fio_version", "os")
DEFAULT_THRESHOLD = 0.05


@dataclass
class HistoryStep:
    host: str
    sweep_id: int
    plan: str
    started_at: float
    # workload → (the cell with the best mean of its metric, that mean, the metric)
    answers: dict[str, tuple[str, float, str]]
    versions_changed: list[str] = field(default_factory=list)
    # figures compared with the host's previous sweep of the plan (0: first, or none shared)
    compared: int = 0
    slower: list[Change] = field(default_factory=list)
    faster: list[Change] = field(default_factory=list)
    # lasting steps over the host's series of this plan that start at this sweep: (figure, step,
    # Holm p)
    lasting: list[tuple[str, Step, float]] = field(default_factory=list)
    # every cell the sweep measured (its full labels): the text names a cell by what differs among
    # them (report/naming.py), JSON by its full label
    cells: tuple[str, ...] = ()

    def short_names(self) -> CellNames:
        return cell_names(self.cells)


def _higher(key: str) -> bool:
    return metric_info(key.rsplit(" · ", 1)[-1]).higher_is_better


def _answers(series: dict[str, list[float]]) -> dict[str, tuple[str, float, str]]:
    best: dict[str, tuple[str, float, str]] = {}
    for key, values in series.items():
        cell, workload, metric = key.rsplit(" · ", 2)
        mean = sum(values) / len(values)
        have = best.get(workload)
        if have is None or (mean > have[1] if _higher(key) else mean < have[1]):
            best[workload] = (cell, mean, metric)
    return best


def workload_of(key: str) -> str:
    """The workload of a figure key 'cell · workload · metric' (figure_series)."""
    return key.rsplit(" · ", 2)[1]


def _only(series: dict[str, list[float]], workload: str | None) -> dict[str, list[float]]:
    return {k: v for k, v in series.items() if workload is None or workload_of(k) == workload}


def history(
    store: Store,
    host: str | None = None,
    workload: str | None = None,
    metric: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> list[HistoryStep]:
    """Every host's finished or interrupted sweeps in start order, each compared with the one before
    of its plan."""
    rows = store.finished_sweeps_with_versions(VERSION_FACTS)
    if not rows:
        _nothing_to_show(store)
    steps: list[HistoryStep] = []
    previous: dict[tuple[str, str], tuple[Any, dict[str, list[float]]]] = {}
    series_of: dict[tuple[str, str], list[tuple[HistoryStep, dict[str, list[float]]]]] = {}
    # A host is named as the fleet answers name it (its inventory name, else its hostname; cloned
    # hosts that share a name told apart by their machine id), so two machines never make one
    # history.
    name_of = {f.id: f.hostname for f in store.fleet_sweeps()}
    names = sorted({name_of[r["id"]] for r in rows})
    if host is not None and host not in names:
        raise UserError(
            f"no host '{host}' in {store.path}",
            hint=f"hosts: {', '.join(names[:10]) or 'none yet'}",
        )
    for r in rows:
        name = name_of[r["id"]]
        if host is not None and name != host:
            continue
        series = _only(figure_series(store, r["id"], metric), workload)
        step = HistoryStep(name, r["id"], r["plan_name"], r["started_at"], _answers(series))
        step.cells = tuple(dict.fromkeys(k.rsplit(" · ", 2)[0] for k in series))
        before = previous.get((name, r["plan_fingerprint"]))
        if before is not None:
            _compare(step, before[0], before[1], r, series, threshold)
        previous[(name, r["plan_fingerprint"])] = (r, series)
        series_of.setdefault((name, r["plan_fingerprint"]), []).append((step, series))
        steps.append(step)
    _lasting_steps(series_of, threshold)
    if workload is not None and not any(s.answers for s in steps):
        raise UserError(
            f"no figure of workload '{workload}' in {store.path}",
            hint="name a workload the plans ran",
        )
    return sorted(steps, key=lambda s: (s.host, s.started_at))


def _nothing_to_show(store: Store) -> None:
    """Why a database yields no history, as a UserError: its sweeps name hosts it does not hold (a
    damaged sweeps.host_id), or it holds no finished sweep yet. An empty answer with exit 0 would
    read as "nothing changed"."""
    orphans = store.sweeps_naming_no_host()
    if orphans:
        raise UserError(
            f"{store.path} is damaged: {orphans} sweep(s) name a host it does not hold "
            "(sweeps.host_id)",
            hint="restore the database from a copy, or publish the host's own file again",
        )
    raise UserError(
        f"{store.path} holds no finished sweep it can read: no history to show",
        hint="let a sweep finish first ('iomatrix run PLAN --db …')",
    )


STEP_ALPHA = 0.05


def _lasting_steps(
    series_of: dict[tuple[str, str], list[tuple[HistoryStep, dict[str, list[float]]]]],
    threshold: float,
) -> None:
    """Each host's lasting steps per figure (stats/steps.py), Holm across all of one host's figures,
    attached to the sweep each starts from."""
    by_host: dict[str, dict[tuple[str, str], list[Step]]] = {}
    where: dict[tuple[str, str, str], list[HistoryStep]] = {}
    for (host, plan), sweeps in series_of.items():
        for key in sorted({k for _, series in sweeps for k in series}):
            with_figure = [(st, series[key]) for st, series in sweeps if key in series]
            found = detect_steps([values for _, values in with_figure], STEP_ALPHA)
            if found:
                by_host.setdefault(host, {})[(plan, key)] = found
                where[(host, plan, key)] = [st for st, _ in with_figure]
    for host, found in by_host.items():
        for (plan, key), kept in real_steps(found, STEP_ALPHA, threshold).items():
            for step, p in kept:
                where[(host, plan, key)][step.at].lasting.append((key, step, p))


def _compare(
    step: HistoryStep,
    prev_row: Any,
    prev: dict[str, list[float]],
    row: Any,
    series: dict[str, list[float]],
    threshold: float,
) -> None:
    step.versions_changed = [
        f"{c.removesuffix('_version')} {prev_row[c]} → {row[c]}"
        for c in VERSION_FACTS
        if prev_row[c] != row[c]
    ]
    try:
        changes = compare_series(prev, series)
    except UserError:
        return  # no figure with ≥ 2 runs on both sides: nothing to judge
    step.compared = len(changes)
    step.slower = regression_gate(changes, threshold, _higher).regressions
    step.faster = [
        c for c in changes if c.significant and (worse_by(c, _higher(c.key)) or 0.0) < -threshold
    ]


def as_json(steps: Sequence[HistoryStep]) -> list[dict[str, Any]]:
    def change(c: Change) -> dict[str, Any]:
        return {
            "figure": c.key,
            "before": c.a.mean,
            "after": c.b.mean,
            "ratio": c.ratio.ratio,
            "p_adjusted": c.p_adjusted,
        }

    return [
        {
            "host": s.host,
            "sweep": s.sweep_id,
            "plan": s.plan,
            "started_at": s.started_at,
            "answers": {
                w: {"cell": a[0], "mean": a[1], "metric": a[2]} for w, a in s.answers.items()
            },
            "versions_changed": s.versions_changed,
            "figures_compared": s.compared,
            "slower": [change(c) for c in s.slower],
            "faster": [change(c) for c in s.faster],
            "lasting_steps_from_here": [
                {
                    "figure": key,
                    "before": st.before,
                    "after": st.after,
                    "ratio": st.ratio,
                    "sweeps_before": st.sweeps_before,
                    "sweeps_after": st.sweeps_after,
                    "p_adjusted": p,
                }
                for key, st, p in s.lasting
            ],
        }
        for s in steps
    ]
