"""The HTML report's history section (issue 52): per host with two or more sweeps of a plan in the
database, a chart of each workload's answer figure over its sweeps, relative to the first, with the
sweeps `iomatrix history` flags slower and the lasting steps it finds (report/history.py), and those
findings as lines."""

from __future__ import annotations

from typing import Any

from iomatrix.report import charts
from iomatrix.report.history import HistoryStep, history, workload_of
from iomatrix.store import Store
from iomatrix.ui import fmt

MAX_HOSTS = 12  # a fleet file's report stays readable; `iomatrix history` lists every host


def _lines(steps: list[HistoryStep]) -> list[charts.HistoryLine]:
    firsts: dict[str, float] = {}
    out: dict[str, charts.HistoryLine] = {}
    for s in steps:
        for workload, (_cell, mean, metric) in sorted(s.answers.items()):
            label = f"{workload} ({metric})"
            first = firsts.setdefault(label, mean)
            line = out.setdefault(label, charts.HistoryLine(label, [], [], []))
            if first > 0:
                line.points.append((s.sweep_id, mean / first))
            if any(workload_of(c.key) == workload for c in s.slower):
                line.slower.append(s.sweep_id)
            if any(workload_of(key) == workload for key, _st, _p in s.lasting):
                line.steps.append(s.sweep_id)
    return [line for line in out.values() if len(line.points) >= 2]


def _findings(steps: list[HistoryStep]) -> list[str]:
    found = []
    for s in steps:
        if s.versions_changed:
            found.append(f"sweep {s.sweep_id}: changed {', '.join(s.versions_changed)}")
        found += [
            f"sweep {s.sweep_id}: slower {c.key} {fmt(c.a.mean)} → {fmt(c.b.mean)} (Holm "
            f"p={c.p_adjusted:.2g})"
            for c in s.slower[:3]
        ]
        found += [
            f"sweep {s.sweep_id}: lasting step {key} ×{st.ratio:.3g} ({st.sweeps_before} "
            "sweeps before, "
            f"{st.sweeps_after} from here; Holm p={p:.2g})"
            for key, st, p in s.lasting[:3]
        ]
    return found or ["no real change between sweeps, and no lasting step"]


def history_sections(store: Store) -> list[dict[str, Any]]:
    """One section per host with ≥ 2 sweeps (at most MAX_HOSTS, the rest named), for the report's
    extras."""
    # Counted first, read host by host after: a fleet file's report reads the figures of MAX_HOSTS
    # hosts, not of every sweep in the file.
    counts: dict[str, int] = {}
    for f in store.fleet_sweeps():
        counts[f.hostname] = counts.get(f.hostname, 0) + 1
    hosts = sorted(h for h, n in counts.items() if n >= 2)
    by_host: dict[str, list[HistoryStep]] = {}
    out = []
    for host in hosts[:MAX_HOSTS]:
        by_host[host] = history(store, host=host)
        lines = _lines(by_host[host])
        if not lines:
            continue
        out.append(
            {
                "id": f"history-{len(out) + 1}",
                "title": f"History: {host}",
                "svg": charts.history_chart(lines),
                "svg_caption": "each workload's answer (its best configuration's figure) per "
                "sweep, relative to "
                "the host's first sweep; × the sweeps significantly slower than the one before, "
                "dashed where a lasting step starts (iomatrix history)",
                "lines": _findings(by_host[host]),
            }
        )
    if len(hosts) > MAX_HOSTS:
        out.append(
            {
                "id": "history-more",
                "title": "History: more hosts",
                "lines": [
                    f"{len(hosts) - MAX_HOSTS} more host(s): iomatrix history --db … --host HOST"
                ],
            }
        )
    return out
