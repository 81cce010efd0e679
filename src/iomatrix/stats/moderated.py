"""Moderated variances: every pair's variance shrunk toward what the race's other pairs show of it
(empirical Bayes; Smyth 2004, limma's ``squeezeVar``/``fitFDist`` with a covariate).

A race compares its cells pair by pair over the rounds both ran (stats/paired.py): pair g has a
sample variance s_g² of its log ratios on d_g = n_g − 1 degrees of freedom. With 3 rounds that is 2
df, and a t on 2 df needs |t| ≥ 20.4 at the looks' level (ℓ* = 0.0024, two-sided): a 26 % gap whose
interval is 0.69–0.80× stays "not separated". The race's other pairs were measured on the same
host, in the same rounds, by the same tool; they say what size this pair's variance should have.
Smyth's model takes each pair's true variance σ_g² as drawn from a scaled inverse χ² prior, d₀
s₀²·h_g/σ_g² ~ χ²_{d₀}, estimates s₀² and d₀ from all the pairs, and judges each pair with its
posterior variance

    s̃_g² = (d₀ s₀² h_g + d_g s_g²) / (d₀ + d_g)
    t̃_g = d̄_g / (s̃_g / √n_g)  on d₀ + d_g df          (the moderated paired t)

which follows a t distribution when the prior holds (Smyth 2004, §3): the test keeps its level
while 3 rounds carry more than 2 df.

**The shape h_g: a cell-variance model, not one pooled variance.** The pairs of one race are not
exchangeable: in quick's race (raw and qcow2 × cache none and writeback) the writeback cells swing
±20 % per run and the cache=none cells ±3 %, so the pair of the two writeback cells, the one that
decides the answer, is the noisiest of the six. A prior pooled over all six (h_g = 1) shrinks that
pair's variance toward the steady pairs', and on the captured quick sweeps
(tests/data/quick-reversals) it called raw and qcow2 under writeback different in opposite
directions again (sweep b 1.12×, sweep d 0.76×, each on 3 rounds): the reversals of
docs/statistics.md §10b. So each pair's prior scale is what a model of the cells predicts for it,
h_g = v_a + v_b (the variance of a difference of two cells whose run-to-run noise is independent
after the round), the v_i ≥ 0 fitted to all the race's s_g² by least squares weighted by d_g
(``cell_variances``). The writeback pair's prior is then the writeback cells' own noise, seen again
in their pairs with the cache=none cells. Cells that move together within a round (two writeback
cells under the same page-cache pressure) make v_a + v_b larger than their pair's true variance:
the test errs toward caution there, never the other way unless cells move against each other.

**Estimating s₀² and d₀** (fitFDist with the log shape as covariate; ψ digamma, ψ' trigamma), over
the G pairs with d_g ≥ 1 and h_g > 0, the model having used k parameters (the cells):

    e_g = ln(s_g²/h_g) − ψ(d_g/2) + ln(d_g/2)
    ē = Σ e_g / G,   v = Σ (e_g − ē)² / (G − k) − Σ ψ'(d_g/2) / G
    v > 0:  d₀ = 2 ψ'⁻¹(v),   s₀² = exp(ē + ψ(d₀/2) − ln(d₀/2))
    v ≤ 0:  d₀ = ∞ (the variances scatter about the model no more than sampling makes them),
            s₀² = Σ d_g s_g²/h_g / Σ d_g

ψ'⁻¹ by limma's Newton iteration (trigammaInverse). A variance of exactly 0 (every round the same
ratio) is set to 10⁻⁵ × the median variance first, as limma does, so its logarithm exists.

**Capped at the race's residual df.** No pair's variance can rest on more information than the race
holds: the two-way model's residual df (stats/blocked.py: (k − 1)(b − 1) for k cells × b complete
rounds, 6 for quick's 4 cells × 3 rounds). A pair on d_g df gets d₀ ≤ df_resid − d_g (d₀ = ∞
included: its own variance then weighs d_g of the df_resid). Quick's first look then has 6 df, not 2: the critical |t| at
level 0.0024 falls from 20.4 to 5.02.

**Edge cases.** Fewer than ``MIN_PAIRS`` = 3 pairs with a variance, or fewer than 2 beyond the k
the model fits (two or three cells: 1 or 3 pairs), or the cell model undetermined (a cell in no
pair with a variance): no prior, d₀ = 0, each pair its own paired t unchanged. More than half the
variances 0: d₀ = 0 (limma warns "eBayes unreliable" there). A pair whose shape is 0 (both cells
fitted with no variance) keeps its own variance. A pair with fewer than 2 shared rounds has no
variance of its own: it neither informs the prior nor gets one (p = 1, as before).

Not limma's ``robust=TRUE`` (Phipson et al. 2016): an outlying variance, in either tail, widens the
scatter v and so lowers d₀ for every pair; the moment estimate errs toward each pair's own
variance, the safe side here. The robust fit wins back power in that case, at the cost of a
per-pair prior df, which 6 pairs cannot support.

Worked example (quick's shape: cells a, b steady, c, d noisy; 3 shared rounds, d_g = 2, residual
df 6). Pair variances s²: (a,b) 0.0004, (a,c) 0.0050, (a,d) 0.0060, (b,c) 0.0045, (b,d) 0.0070,
(c,d) 0.0030. The cell model: v = 0.0013833, 0.0016333, 0.0019333, 0.0036833, so h = 0.0030167,
0.0033167, 0.0050667, 0.0035667, 0.0053167, 0.0056167; e_g = ln(s²/h) + 0.577216 = −1.44323,
0.98769, 0.74629, 0.80966, 0.85228, −0.04991; ē = 0.31713; their scatter Σ(e − ē)²/(6 − 4) =
2.19819, minus ψ'(1) = 1.64493: v = 0.55326, d₀ = 2 ψ'⁻¹(0.55326) = 4.5270, s₀² = 1.08357. The cap
is 6 − 2 = 4, so d₀ = 4: the pair (c,d) gets s̃² = (4·1.08357·0.0056167 + 2·0.0030)/6 = 0.0050574
on 6 df, its own 0.0030 moved up toward what its noisy cells show; (a,b) gets 0.0023125 (its own
0.0004: the model cannot make a steady pair out of cells each seen beside a noisy one, and errs
toward caution). Plain pooling (h = 1) would have given (c,d) less than its own."""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from iomatrix.stats import special
from iomatrix.stats.paired import PairedComparison
from iomatrix.stats.summary import t_quantile, t_two_sided_p

MIN_PAIRS = 3  # fewer variances give no prior: each pair keeps its own (d₀ = 0)


@dataclass(frozen=True)
class Prior:
    """What the race's pairs say of a pair's variance: scale s₀² and degrees of freedom d₀ (0: no
    prior, each pair its own variance; ∞: every pair the pooled variance)."""

    s0_sq: float  # 0.0 when d0 == 0 (unused then)
    d0: float
    pairs: int  # how many variances it was estimated from

    def moderate(
        self, s_sq: float, df: float, shape: float = 1.0, df_cap: float = math.inf
    ) -> tuple[float, float]:
        """(s̃², its df) for one pair's s² on ``df``: (d₀ s₀²·shape + df·s²)/(d₀ + df) on d₀ + df,
        d₀ no more than ``df_cap`` − df (the race's residual df: no pair's variance rests on
        more)."""
        d0 = min(self.d0, max(0.0, df_cap - df))
        if d0 == 0.0 or df <= 0 or shape <= 0:
            return s_sq, df
        if math.isinf(d0):
            return self.s0_sq * shape, math.inf
        return (d0 * self.s0_sq * shape + df * s_sq) / (d0 + df), d0 + df


NO_PRIOR = Prior(0.0, 0.0, 0)


def trigamma_inverse(x: float) -> float:
    """y with ψ'(y) = x (x > 0), by limma's Newton iteration on 1/ψ'(y), which is nearly linear in
    y: start at 0.5 + 1/x, step ψ'(y)(1 − ψ'(y)/x)/ψ''(y)."""
    if not x > 0:
        raise ValueError(f"trigamma_inverse needs x > 0, got {x}")
    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = special.trigamma(y)
        dif = tri * (1.0 - tri / x) / special.tetragamma(y)
        y += dif
        if -dif / y < 1e-8:
            break
    return y


def fit_prior(
    variances: Sequence[float],
    dfs: Sequence[float],
    shape: Sequence[float] | None = None,
    fitted: int = 0,
) -> Prior:
    """s₀² and d₀ from the pairs' sample variances and their df (module docstring); pairs with df
    < 1 or a non-finite variance are left out. ``shape``: each variance's expected size relative
    to the others (the race's cell-variance model, ``race_moderation``), estimated with ``fitted``
    parameters: the log variances are taken about ln shape_g, their scatter over G − fitted, and
    the prior scale of pair g is s₀²·shape_g (limma's fitFDist with a covariate)."""
    ok = _usable(variances, dfs, shape)
    g = len(ok)
    if g - fitted < MIN_PAIRS - 1 or g < MIN_PAIRS:
        return NO_PRIOR
    xs = sorted(s for s, _, _ in ok)
    median = xs[g // 2] if g % 2 else (xs[g // 2 - 1] + xs[g // 2]) / 2.0
    if median <= 0:
        return NO_PRIOR  # more than half the pairs without any spread: no scale to learn
    floor = 1e-5 * median
    e = [
        math.log(max(s, floor) / h) - float(special.psi(d / 2.0)) + math.log(d / 2.0)
        for s, d, h in ok
    ]
    mean = sum(e) / g
    spread = sum((x - mean) ** 2 for x in e) / (g - max(fitted, 1))
    v = spread - sum(special.trigamma(d / 2.0) for _, d, _ in ok) / g
    if v <= 0:
        pooled = sum(d * s / h for s, d, h in ok) / sum(d for _, d, _ in ok)
        return Prior(pooled, math.inf, g)
    d0 = 2.0 * trigamma_inverse(v)
    return Prior(math.exp(mean + float(special.psi(d0 / 2.0)) - math.log(d0 / 2.0)), d0, g)


def _usable(
    variances: Sequence[float], dfs: Sequence[float], shape: Sequence[float] | None
) -> list[tuple[float, float, float]]:
    """(s², df, shape) of the pairs fit_prior can use: df ≥ 1, a finite variance, a shape > 0."""
    if len(variances) != len(dfs) or (shape is not None and len(shape) != len(dfs)):
        raise ValueError(f"{len(variances)} variances but {len(dfs)} degrees of freedom")
    sizes = list(shape) if shape is not None else [1.0] * len(dfs)
    return [
        (max(0.0, float(s)), float(d), float(h))
        for s, d, h in zip(variances, dfs, sizes, strict=True)
        if math.isfinite(s) and s > -1e-15 and math.isfinite(d) and d >= 1 and h > 0
    ]


def pair_variance(pc: PairedComparison) -> float | None:
    """s², the sample variance of a pair's log ratios (SE² · n); None with fewer than 2 rounds."""
    if pc.se_log is None or pc.rounds < 2:
        return None
    return pc.se_log**2 * pc.rounds


def moderated_comparison(
    pc: PairedComparison, s_sq: float, df: float, confidence: float = 0.95
) -> PairedComparison:
    """The pair's paired t with the moderated variance ``s_sq`` on ``df`` (module docstring): SE =
    s̃/√n, t on df (∞: normal), its two-sided p and the ratio's interval at ``confidence``."""
    if pc.ratio is None or pc.rounds < 2 or not s_sq > 0:
        return pc
    mean = math.log(pc.ratio)
    se = math.sqrt(s_sq / pc.rounds)
    t = mean / se
    q = t_quantile(confidence, df)
    return PairedComparison(
        rounds=pc.rounds,
        ratio=pc.ratio,
        ratio_low=math.exp(mean - q * se),
        ratio_high=math.exp(mean + q * se),
        se_log=se,
        df=df,
        statistic=t,
        p_value=t_two_sided_p(t, df),
    )


def race_moderation(
    tests: Sequence[PairedComparison],
    index: Sequence[tuple[int, int]],
    cells: int,
    df_cap: float,
    confidence: float = 0.95,
) -> tuple[list[PairedComparison], Prior]:
    """Every pair of one race (``tests[g]`` compares cells ``index[g]`` of ``cells``) with its
    variance moderated (module docstring): the cell-variance model v_a + v_b as each pair's shape,
    s₀² and d₀ fitted about it, d₀ capped at ``df_cap`` − d_g. Unchanged where nothing can be
    fitted (NO_PRIOR)."""
    have = [
        (g, a, b, v, float(t.df))
        for g, (t, (a, b)) in enumerate(zip(tests, index, strict=True))
        if (v := pair_variance(t)) is not None
    ]
    cv = cell_variances([(a, b, v, d) for _, a, b, v, d in have], cells)
    if cv is None:
        return list(tests), NO_PRIOR
    shape = {g: cv[a] + cv[b] for g, a, b, _, _ in have}
    fit = [(v, d, shape[g]) for g, _, _, v, d in have if shape[g] > 0]
    prior = fit_prior([f[0] for f in fit], [f[1] for f in fit], [f[2] for f in fit], cells)
    out = list(tests)
    if prior.d0 == 0.0:
        return out, prior
    for g, _, _, v, d in have:
        s_sq, df = prior.moderate(v, d, shape[g], df_cap)
        if df != d:
            out[g] = moderated_comparison(tests[g], s_sq, df, confidence)
    return out, prior


def cell_variances(
    pairs: Sequence[tuple[int, int, float, float]], cells: int
) -> list[float] | None:
    """v_i per cell with s²_ab ≈ v_a + v_b over the ``pairs`` (a, b, s², df), by least squares
    weighted by df, every v_i ≥ 0 (cells whose v would be negative are set to 0 and the rest fitted
    again); None when the pairs do not determine the cells (fewer pairs than cells, a cell in no
    pair) or every v is 0."""
    if len(pairs) < cells or {c for a, b, _, _ in pairs for c in (a, b)} != set(range(cells)):
        return None
    x = np.zeros((len(pairs), cells))
    for r, (a, b, _, _) in enumerate(pairs):
        x[r, a] = x[r, b] = 1.0
    w = np.sqrt(np.array([d for _, _, _, d in pairs], dtype=float))
    y = np.array([s for _, _, s, _ in pairs], dtype=float)
    free = list(range(cells))
    while free:
        sol, *_ = np.linalg.lstsq(x[:, free] * w[:, None], y * w, rcond=None)
        if (sol >= 0).all():
            v = np.zeros(cells)
            v[free] = sol
            return [float(t) for t in v] if v.sum() > 0 else None
        free = [f for f, t in zip(free, sol, strict=True) if t > 0]
    return None
