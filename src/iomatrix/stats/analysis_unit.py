"""Which unit a cell's statistics use when its runs shared guest boots: the runs, or the boot means
(Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013).

Runs of one boot are correlated when boots differ (σ_b² > 0): treating them as independent makes the
CI too narrow (pseudo-replication). The variance components come from
``two_level.variance_components`` (one-way random effects, ANOVA estimates):

    share = σ_b² / (σ_b² + σ_w²)      (the intra-class correlation)

Rule: when the runs came from ≥ 2 boots, some boot held ≥ 2 runs and the between-boot variance
dominates (σ_b² ≥ σ_w², share ≥ 50%), the unit is the boot: one value per boot, its mean ȳ_i, and
the cell's mean and CI are those of the k boot means (Student t, k − 1 df). Otherwise the unit is
the run (every run one value); with share < 50% the within-boot correlation is small against the
run-to-run noise. Runs without a boot id had a boot each.

Blocks: a boot mean's block (for the round-blocked analysis) is the first round of its boot, the
    round
it started in; the scheduler gives every cell's boots the same rounds, so the blocks stay aligned
across cells.

The cold first run of each boot (position 0) is reported apart: the mean over boots holding ≥ 2 runs
of (cold run − mean of the boot's later runs), relative to the mean of the later runs:

    first-run effect = mean_i(y_i0 − ȳ_i,later) / mean(later runs)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iomatrix.stats.two_level import variance_components

DOMINANT_SHARE = 0.5


@dataclass(frozen=True)
class CellUnit:
    unit: str  # "runs" | "boot-means"
    values: tuple[float, ...]  # what the cell's mean, CI and comparisons use
    rounds: tuple[int, ...]  # the block (round) of each value
    boots: int
    runs: int
    shared: bool  # some boot held ≥ 2 runs: the two levels can be told apart
    between_share: float | None  # σ_b² / (σ_b² + σ_w²); None when it cannot be estimated
    first_run_effect: float | None  # relative: (cold − later runs) / later runs, per boot, averaged
    first_run_boots: int

    def describe(self) -> str:
        """One line for a report: which unit and why ('' when no runs shared a boot)."""
        if not self.shared:
            return ""
        share = (
            "not estimable" if self.between_share is None else f"{self.between_share:.0%} of total"
        )
        if self.unit == "boot-means":
            return (
                f"boot means ({self.boots} boots of {self.runs} runs): between-boot variance "
                f"{share}"
            )
        return f"runs ({self.runs} runs in {self.boots} boots): between-boot variance {share}"

    def describe_first_run(self) -> str:
        if self.first_run_effect is None:
            return ""
        return (
            f"cold first run of a boot vs its later runs: {self.first_run_effect:+.1%} "
            f"(mean over {self.first_run_boots} boots)"
        )


def cell_unit(runs: Sequence[tuple[str | None, int | None, int, float]]) -> CellUnit:
    """`runs`: (boot id, position in the boot, round, value) of one cell × workload's analysed runs,
    in run order. Returns the unit and the values (with their blocks) the statistics should use."""
    if not runs:
        raise ValueError("no runs")
    ordered = _boots_in_order(runs)
    groups = [[v for _, _, v in sorted(g, key=lambda x: x[0])] for g in ordered]
    tl = variance_components(groups)
    shared = any(len(g) >= 2 for g in groups) and len(groups) >= 2
    use_boots = (
        shared
        and tl.icc is not None
        and tl.icc >= DOMINANT_SHARE
        and tl.between_var not in (None, 0.0)
    )
    if use_boots:
        values = tuple(sum(g) / len(g) for g in groups)
        rounds = tuple(min(r for _, r, _ in g) for g in ordered)
    else:
        values = tuple(float(v) for _, _, _, v in runs)
        rounds = tuple(r for _, _, r, _ in runs)
    effect = _relative_first_run_effect(tl.first_run_effect, groups)
    return CellUnit(
        unit="boot-means" if use_boots else "runs",
        values=values,
        rounds=rounds,
        boots=len(groups),
        runs=len(runs),
        shared=shared,
        between_share=tl.icc if shared else None,
        first_run_effect=effect if shared else None,
        first_run_boots=tl.first_run_boots if shared else 0,
    )


def _boots_in_order(
    runs: Sequence[tuple[str | None, int | None, int, float]],
) -> list[list[tuple[int, int, float]]]:
    """Each boot's runs as (position in the boot, round, value), the boots in the order they ran
    (their first round, then their first position); a run without a boot id is a boot of its
    own."""
    boots: dict[str, list[tuple[int, int, float]]] = {}
    for i, (boot, position, rnd, value) in enumerate(runs):
        key = boot if boot is not None else f"#run{i}"
        boots.setdefault(key, []).append(
            (position if position is not None else 0, rnd, float(value))
        )
    return sorted(boots.values(), key=lambda g: (min(r for _, r, _ in g), min(p for p, _, _ in g)))


def _relative_first_run_effect(
    first_run_effect: float | None, groups: Sequence[Sequence[float]]
) -> float | None:
    """The cold first run's effect as a share of the mean of the boots' later runs; None without
    an effect or later runs (or with a later mean of 0)."""
    later = [y for g in groups for y in g[1:]]
    later_mean = sum(later) / len(later) if later else None
    if first_run_effect is None or not later_mean:
        return None
    return first_run_effect / later_mean
