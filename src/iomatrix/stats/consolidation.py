"""The consolidation article's answer: how many tiles can run at once before a role slows down too
much.

For one group of cells (one cache mode with the other disk axes fixed), with each tile count N's
repeated points giving, per role r, the role's time in its slowest tile t_r(N)
(``role.<r>.seconds_max``):

    slowdown_r(N) = mean t_r(N) / mean t_r(1)            with a Fieller CI (stats.compare.ratio_ci)

A role at N tiles is
    * ``within``  the bound B when the CI's upper end ≤ B,
    * ``beyond``  it when the CI's lower end > B (or N has no successful point: a failed point is no
      evidence of staying within),
    * ``unsure``  otherwise (the CI straddles B, or it is undefined: fewer than 2 points on a side).

    answer      = the largest N such that every role at every tested count ≤ N is ``within``
                  (1 when even the smallest step up is not; the baseline itself is always carried)
    estimate    = the same with point estimates only (slowdown ≤ B), for sweeps too short for a CI

Counts are taken in order: a count above one that failed the bound is not an answer even if it
passes by chance. Pure: inputs are lists of floats, nothing is read or printed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from iomatrix.stats.compare import ratio_ci

Verdict = str  # "within" | "beyond" | "unsure"


@dataclass(frozen=True)
class RoleSlowdown:
    role: str
    tiles: int
    ratio: float | None  # mean time at `tiles` / mean time at one tile
    low: float | None
    high: float | None
    n: int  # points at `tiles`
    n_baseline: int
    verdict: Verdict


@dataclass(frozen=True)
class ConsolidationAnswer:
    bound: float
    confidence: float
    tested: list[int]  # tile counts with data, ascending
    answer: int | None  # largest count within the bound with confidence; None without a baseline
    estimate: int | None  # largest count within the bound by point estimates
    slowdowns: list[RoleSlowdown] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def worst(self, tiles: int) -> RoleSlowdown | None:
        """The role slowed down most at `tiles` (by point estimate)."""
        rows = [s for s in self.slowdowns if s.tiles == tiles and s.ratio is not None]
        return max(rows, key=lambda s: s.ratio or 0.0) if rows else None


def _verdict(low: float | None, high: float | None, ratio: float | None, bound: float) -> Verdict:
    if high is not None and high <= bound:
        return "within"
    if low is not None and low > bound:
        return "beyond"
    return "unsure"


def consolidation_answer(
    times: Mapping[int, Mapping[str, Sequence[float]]], bound: float, confidence: float = 0.95
) -> ConsolidationAnswer:
    """`times[N][role]` = the role's time per successful point at N tiles. `bound` > 1."""
    if not bound > 1.0:
        raise ValueError(f"slowdown bound must be > 1, got {bound}")
    tested = sorted(times)
    base = times.get(1, {})
    notes: list[str] = []
    if not any(base.get(r) for r in base):
        return ConsolidationAnswer(
            bound,
            confidence,
            tested,
            None,
            None,
            notes=["no successful one-tile point: nothing to compare against"],
        )
    roles = sorted(r for r, v in base.items() if v)
    slowdowns: list[RoleSlowdown] = []
    answer = estimate = 1
    confident_run = estimate_run = True
    for n in (t for t in tested if t > 1):
        at_n = times.get(n, {})
        all_within = all_estimate = True
        for role in roles:
            xs, bs = list(at_n.get(role, [])), list(base[role])
            if not xs:
                slowdowns.append(
                    RoleSlowdown(
                        role=role,
                        tiles=n,
                        ratio=None,
                        low=None,
                        high=None,
                        n=0,
                        n_baseline=len(bs),
                        verdict="beyond",
                    )
                )
                notes.append(f"{n} tiles: no successful point for role {role}")
                all_within = all_estimate = False
                continue
            r = ratio_ci(xs, bs, confidence)
            verdict = _verdict(r.low, r.high, r.ratio, bound)
            slowdowns.append(
                RoleSlowdown(
                    role=role,
                    tiles=n,
                    ratio=r.ratio,
                    low=r.low,
                    high=r.high,
                    n=len(xs),
                    n_baseline=len(bs),
                    verdict=verdict,
                )
            )
            all_within = all_within and verdict == "within"
            all_estimate = all_estimate and r.ratio is not None and r.ratio <= bound
        confident_run = confident_run and all_within
        estimate_run = estimate_run and all_estimate
        if confident_run:
            answer = n
        if estimate_run:
            estimate = n
    return ConsolidationAnswer(
        bound=bound,
        confidence=confidence,
        tested=tested,
        answer=answer,
        estimate=estimate,
        slowdowns=slowdowns,
        notes=notes,
    )
