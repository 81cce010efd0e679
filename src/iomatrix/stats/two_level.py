"""Two-level repetition (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013):
how much of a cell's variation is between guest boots and how much between runs within a boot, how
many runs per boot minimise the cost of a given precision, and which unit the statistics should use.

Data: boots i = 1..k, boot i holds runs y_i1..y_in_i in the order they ran (position 0 is the cold
first run of the boot), N = Σ n_i. One-way random-effects model y_ij = μ + b_i + e_ij with
b_i ~ (0, σ_b²) between boots and e_ij ~ (0, σ_w²) within a boot. Method-of-moments (ANOVA)
estimates, valid for unequal n_i:

    ȳ_i = boot mean,   ȳ = Σ_ij y_ij / N
    SSB = Σ_i n_i (ȳ_i − ȳ)²,           MSB = SSB / (k − 1)
    SSW = Σ_i Σ_j (y_ij − ȳ_i)²,         MSW = SSW / (N − k)
    n₀  = (N − Σ_i n_i² / N) / (k − 1)   (= n for equal boot sizes)
    σ_w² = MSW,   σ_b² = max(0, (MSB − MSW) / n₀),   ICC = σ_b² / (σ_b² + σ_w²)

(σ_b² needs k ≥ 2 boots and σ_w² needs some boot with ≥ 2 runs; missing estimates are None.)

Cost and precision with b boots of r runs each, a boot costing c_boot seconds and a run c_run:

    Var(grand mean) = σ_b² / b + σ_w² / (b r),   cost = b (c_boot + r c_run)

Minimising cost × variance over r (K&J 2013, eq. for two levels) gives

    r* = √( (c_boot / c_run) · (σ_w² / σ_b²) ),

evaluated at ⌊r*⌋ and ⌈r*⌉ (the one with the smaller (c_boot + r c_run)(σ_b² + σ_w²/r) wins) and
clamped to [1, r_max]; σ_b² = 0 gives r_max (boots add nothing, so one boot should carry as many
runs as it can). The boots needed for a 95% CI half-width of `target` × mean (normal approximation):

    b = ⌈ 1.96² (σ_b² + σ_w² / r) / (target · ȳ)² ⌉,   at least 2.

Analysis unit: runs of one boot are not independent when σ_b² > 0. When between-boot variance
dominates (σ_b² ≥ σ_w²) the statistics use the boot means (k independent values); otherwise the runs
(the within-boot correlation is small against the run-to-run noise). Boots holding a single run
count in both.

The cold first run of each boot (position 0) is reported separately: the mean of the cold runs, the
mean of the later runs, and the mean over boots holding both of (cold run − mean of that boot's
later runs), the paired first-run effect (the KVM-on-ext4 timing article's first-run observation,
per boot)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class TwoLevel:
    boots: int
    runs: int
    grand_mean: float
    between_var: float | None  # σ_b²
    within_var: float | None  # σ_w²
    icc: float | None
    n0: float | None
    unit: str  # "boot-means" | "runs"
    values: tuple[float, ...]  # what the statistics should use: boot means or the runs
    cold_mean: float | None  # position-0 runs
    warm_mean: float | None  # later positions
    first_run_effect: float | None  # mean over boots of (cold − mean of the boot's later runs)
    first_run_boots: int  # boots that contributed to first_run_effect


@dataclass(frozen=True)
class BootAnova:
    """The method-of-moments (one-way ANOVA) estimates of the module docstring."""

    grand_mean: float  # ȳ
    boot_means: tuple[float, ...]  # ȳ_i
    within_var: float | None  # σ_w² = MSW (None without a boot of ≥ 2 runs)
    between_var: float | None  # σ_b² = max(0, (MSB − MSW) / n₀) (None with < 2 boots or no σ_w²)
    n0: float | None  # (N − Σ n_i² / N) / (k − 1) (None with < 2 boots)


def boot_anova(groups: Sequence[Sequence[float]]) -> BootAnova:
    """σ_b², σ_w² and n₀ of non-empty boots `groups` (at least one run in all):

    SSB = Σ_i n_i (ȳ_i − ȳ)²,  MSB = SSB / (k − 1),  SSW = Σ_i Σ_j (y_ij − ȳ_i)²,  MSW = SSW / (N −
    k) n₀ = (N − Σ_i n_i² / N) / (k − 1),  σ_w² = MSW,  σ_b² = max(0, (MSB − MSW) / n₀)"""
    k = len(groups)
    n_total = sum(len(g) for g in groups)
    grand = sum(sum(g) for g in groups) / n_total
    means = [sum(g) / len(g) for g in groups]
    ssw = sum((y - m) ** 2 for g, m in zip(groups, means, strict=True) for y in g)
    ssb = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means, strict=True))
    within = ssw / (n_total - k) if n_total > k else None
    between: float | None = None
    n0: float | None = None
    if k >= 2:
        n0 = (n_total - sum(len(g) ** 2 for g in groups) / n_total) / (k - 1)
        msb = ssb / (k - 1)
        if within is not None and n0 > 0:
            between = max(0.0, (msb - within) / n0)
    return BootAnova(grand, tuple(means), within, between, n0)


def intraclass_correlation(between: float | None, within: float | None) -> float | None:
    """ICC = σ_b² / (σ_b² + σ_w²); None when either is unknown or both are 0."""
    if between is not None and within is not None and between + within > 0:
        return between / (between + within)
    return None


def boot_means_are_the_unit(between: float | None, within: float | None) -> bool:
    """The between-boot variance dominates (σ_b² ≥ σ_w² and σ_b² > 0): the boot means are the
    unit."""
    return between is not None and within is not None and between >= within and between > 0


@dataclass(frozen=True)
class FirstRun:
    """The cold first run of each boot against the later runs (module docstring, last paragraph)."""

    cold_mean: float  # mean of the position-0 runs
    warm_mean: float | None  # mean of the later runs (None when no boot has a second run)
    effect: float | None  # mean over boots of ≥ 2 runs of (cold − mean of the boot's later runs)
    boots: int  # boots that contributed to `effect`


def first_run(groups: Sequence[Sequence[float]]) -> FirstRun:
    """The first-run figures of non-empty boots `groups` (each in boot order)."""
    cold = [g[0] for g in groups]
    warm = [y for g in groups for y in g[1:]]
    effects = [g[0] - sum(g[1:]) / (len(g) - 1) for g in groups if len(g) >= 2]
    return FirstRun(
        sum(cold) / len(cold),
        sum(warm) / len(warm) if warm else None,
        sum(effects) / len(effects) if effects else None,
        len(effects),
    )


def variance_components(
    boots: Mapping[str, Sequence[float]] | Sequence[Sequence[float]],
) -> TwoLevel:
    """Between-boot and within-boot variance of one cell × workload. `boots`: boot id → the values
    of its runs in boot order (or a list of such lists); empty boots are ignored."""
    groups = [
        list(map(float, v)) for v in (boots.values() if isinstance(boots, Mapping) else boots)
    ]
    groups = [g for g in groups if g]
    n_total = sum(len(g) for g in groups)
    if n_total == 0:
        raise ValueError("no runs")
    an = boot_anova(groups)
    use_boots = boot_means_are_the_unit(an.between_var, an.within_var)
    fr = first_run(groups)
    return TwoLevel(
        boots=len(groups),
        runs=n_total,
        grand_mean=an.grand_mean,
        between_var=an.between_var,
        within_var=an.within_var,
        icc=intraclass_correlation(an.between_var, an.within_var),
        n0=an.n0,
        unit="boot-means" if use_boots else "runs",
        values=an.boot_means if use_boots else tuple(y for g in groups for y in g),
        cold_mean=fr.cold_mean,
        warm_mean=fr.warm_mean,
        first_run_effect=fr.effect,
        first_run_boots=fr.boots,
    )


def boots_of(runs: Iterable[tuple[str | None, int | None, float]]) -> dict[str, list[float]]:
    """Stored runs (boot_id, boot_position, value) → boot id → values in boot order, for
    `variance_components`. A run without a boot id had a boot to itself and forms its own group."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for i, (boot, position, value) in enumerate(runs):
        key = boot if boot is not None else f"#run{i}"
        groups.setdefault(key, []).append((position if position is not None else 0, float(value)))
    return {k: [v for _, v in sorted(g, key=lambda pv: pv[0])] for k, g in groups.items()}


def optimal_runs_per_boot(
    between_var: float, within_var: float, boot_cost_s: float, run_cost_s: float, max_runs: int
) -> int:
    """r* = √((c_boot/c_run)(σ_w²/σ_b²)), the better of ⌊r*⌋ and ⌈r*⌉, within [1, max_runs]."""
    if max_runs < 1 or run_cost_s <= 0 or boot_cost_s < 0 or between_var < 0 or within_var < 0:
        raise ValueError("need max_runs ≥ 1, run cost > 0 and non-negative boot cost and variances")
    if between_var == 0:
        return max_runs
    r_star = math.sqrt((boot_cost_s / run_cost_s) * (within_var / between_var))

    def product(r: int) -> float:
        return (boot_cost_s + r * run_cost_s) * (between_var + within_var / r)

    candidates = {
        min(max_runs, max(1, math.floor(r_star))),
        min(max_runs, max(1, math.ceil(r_star))),
    }
    return min(sorted(candidates), key=product)


def boots_needed(
    between_var: float, within_var: float, runs_per_boot: int, mean: float, target: float
) -> int:
    """Boots of `runs_per_boot` runs for a 95% CI half-width of `target` × |mean| (normal
    approximation)."""
    if runs_per_boot < 1 or target <= 0 or mean == 0:
        raise ValueError("need runs_per_boot ≥ 1, target > 0 and a non-zero mean")
    var_boot_mean = between_var + within_var / runs_per_boot
    return max(2, math.ceil(Z95**2 * var_boot_mean / (target * abs(mean)) ** 2))
