"""Was a run disturbed by the rest of the host?  Flags from its monitor summary, and their effect.

Input: one run's monitor summary, {field: time-weighted mean over the run}
(``monitor.summary.summarize_samples(...)[field].mean``), with the sampler's
field names, and the host's CPU count.  A run is flagged *disturbed* when any
of these holds (thresholds in ``THRESHOLDS``, all inclusive of the limit = not
flagged):

* ``psi.cpu_some_pct`` > 10 — some runnable task waited for a CPU more than
  10% of the time (PSI cpu "some"): the measured process probably waited too.
  (On the issue's sweep, runs with PSI < 5% ran 11.4 s on average, the rest
  15.1 s.)
* ``cpu.steal_pct`` > 2 — the hypervisor gave our CPUs to someone else.
* CPU used by other processes > 50% of one CPU: (usr + sys)·ncpu −
  ``proc.cpu_pct``, in percent of one CPU.  ``cpu.*_pct`` are shares of all
  CPUs, ``proc.cpu_pct`` (the measured process: fio or QEMU) of one.  Only
  computed when ``proc.cpu_pct`` was sampled.
* ``mem.writeback_mb`` > 64 — page-cache writeback in flight on average:
  someone's dirty data was being written back during the run, competing for
  the disk (our own writes through a cache mode can cause it as well, so this
  is a flag to look at, not proof of an outside cause).

``interference_effect`` relates a per-run interference score (PSI cpu some,
or any field) to the measured values with Spearman's rank correlation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

THRESHOLDS: dict[str, float] = {
    "psi.cpu_some_pct": 10.0,
    "cpu.steal_pct": 2.0,
    "other_cpu_pct": 50.0,
    "mem.writeback_mb": 64.0,
}


# Causes outside the measured process: retrying the run at a quieter moment can avoid them. Writeback is
# not one of them: the run's own writes through a host cache mode cause it too.
OUTSIDE_CAUSES = frozenset({"psi.cpu_some_pct", "cpu.steal_pct", "other_cpu_pct"})


@dataclass(frozen=True)
class RunInterference:
    disturbed: bool
    reasons: tuple[str, ...]
    other_cpu_pct: float | None  # CPU used by other processes, % of one CPU (None when not computable)
    causes: tuple[str, ...] = ()  # the THRESHOLDS keys that were exceeded, in the order of `reasons`

    @property
    def retry_worthy(self) -> bool:
        """Disturbed by something outside the measured process (see OUTSIDE_CAUSES)."""
        return any(c in OUTSIDE_CAUSES for c in self.causes)


def interference_flags(summary: Mapping[str, float], cpu_count: int,
                       thresholds: Mapping[str, float] | None = None) -> RunInterference:
    """Flag one run from its monitor field means (see the module docstring)."""
    if cpu_count < 1:
        raise ValueError(f"cpu_count must be ≥ 1, got {cpu_count}")
    th = {**THRESHOLDS, **(thresholds or {})}
    reasons: list[str] = []
    causes: list[str] = []
    psi = summary.get("psi.cpu_some_pct")
    if psi is not None and psi > th["psi.cpu_some_pct"]:
        reasons.append(f"CPU pressure: PSI cpu some {psi:.0f}% > {th['psi.cpu_some_pct']:g}%")
        causes.append("psi.cpu_some_pct")
    steal = summary.get("cpu.steal_pct")
    if steal is not None and steal > th["cpu.steal_pct"]:
        reasons.append(f"CPU steal {steal:.1f}% > {th['cpu.steal_pct']:g}%")
        causes.append("cpu.steal_pct")
    other: float | None = None
    usr, sys_, proc = summary.get("cpu.usr_pct"), summary.get("cpu.sys_pct"), summary.get("proc.cpu_pct")
    if usr is not None and sys_ is not None and proc is not None:
        other = max(0.0, (usr + sys_) * cpu_count - proc)
        if other > th["other_cpu_pct"]:
            reasons.append(f"other processes used {other:.0f}% of a CPU > {th['other_cpu_pct']:g}%")
            causes.append("other_cpu_pct")
    wb = summary.get("mem.writeback_mb")
    if wb is not None and wb > th["mem.writeback_mb"]:
        reasons.append(f"page-cache writeback {wb:.0f} MiB in flight > {th['mem.writeback_mb']:g} MiB")
        causes.append("mem.writeback_mb")
    return RunInterference(bool(reasons), tuple(reasons), other, tuple(causes))


@dataclass(frozen=True)
class InterferenceEffect:
    rho: float | None  # Spearman's rank correlation between score and value; None when undefined
    p_value: float | None
    n: int
    disturbed_mean: float | None  # mean value of the disturbed runs
    undisturbed_mean: float | None


def interference_effect(scores: Sequence[float], values: Sequence[float],
                        disturbed: Sequence[bool] | None = None) -> InterferenceEffect:
    """Spearman ρ between an interference score per run (e.g. PSI cpu some) and the measured value.

    With fewer than 3 runs, or a constant score or value, ρ is undefined (None).
    ``disturbed`` (per run) adds the means of the flagged and unflagged runs.
    """
    if len(scores) != len(values) or (disturbed is not None and len(disturbed) != len(values)):
        raise ValueError("scores, values and disturbed must have one entry per run")
    n = len(values)

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    dm = um = None
    if disturbed is not None:
        dm = mean([v for v, d in zip(values, disturbed, strict=True) if d])
        um = mean([v for v, d in zip(values, disturbed, strict=True) if not d])
    if n < 3 or len(set(scores)) < 2 or len(set(values)) < 2:
        return InterferenceEffect(None, None, n, dm, um)
    from scipy import stats as _st

    res = _st.spearmanr(scores, values)
    return InterferenceEffect(float(res.statistic), float(res.pvalue), n, dm, um)
