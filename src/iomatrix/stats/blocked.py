"""Blocked analysis: cells measured in rounds, the round as a block.

The runner runs every active unit once per round, so runs of the same round
share whatever the host was doing then.  Data: per cell, a list of
(round, value).  Values are analysed on the log scale (y = ln value): effects
of a noisy host are multiplicative, and a difference of log means is a ratio
of geometric means.

**Model choice.**

1. *Complete rounds* are rounds in which every cell has a value.  Fewer than 2
   complete rounds (or any value ≤ 0, which has no logarithm) → the
   independent analysis: Welch's t-test on the raw values for every pair,
   Holm over the family, ratios by Fieller (``method="welch"``).
2. Otherwise the two-way additive model (randomised complete block design,
   RCBD) is fitted by least squares on every round that holds ≥ 2 of the
   cells (incomplete rounds still inform the model; with complete data it is
   the textbook RCBD):

       y_ij = μ + α_i + β_j + ε_ij,   ε ~ N(0, σ²)

   Balanced case (k cells × b rounds), with row/column/grand means:

       SS_cells  = b Σ_i (ȳ_i· − ȳ··)²          df k − 1
       SS_rounds = k Σ_j (ȳ·j − ȳ··)²           df b − 1
       SS_resid  = SS_total − SS_cells − SS_rounds   df (k−1)(b−1)
       MSE = SS_resid / df_resid,  F = (SS/df)/MSE

   (unbalanced: SS_cells = RSS(rounds only) − RSS(full), likewise SS_rounds;
   df_resid = N − rank(X)).  Share of variance between rounds =
   SS_rounds / (SS_rounds + SS_resid): how much of the run-to-run noise the
   blocks explain.
   Pairwise comparisons: d = α̂_a − α̂_b (balanced: ȳ_a· − ȳ_b·) with
   SE = √(MSE · cᵀ(XᵀX)⁻c) (balanced: √(2·MSE/b)), t = d/SE with df_resid,
   two-sided; ratio of geometric means exp(d) with CI exp(d ± t_q·SE).  For two
   cells this is exactly the paired t-test on log values.  MSE = 0 (a perfect
   additive fit) is decided exactly: d = 0 → p = 1, otherwise p = 0.
3. *Residual diagnostics.*  Shapiro–Wilk on the model residuals; p < 0.01 (clearly non-normal, e.g.
   heavy tails from one disturbed run) → Friedman's test on the complete rounds with Conover's
   post-hoc comparisons (``method="friedman-conover"``), which use ranks within rounds and are not
   moved by one wild value.  The pairwise comparisons use every round the model uses (≥ 2 cells),
   not only the complete ones: Conover's t is the additive model of step 2 fitted to within-round
   midranks instead of log values (the rank transform, Conover & Iman 1981), which on complete
   rounds is Conover's formula below exactly (no round effect: every round's ranks average (k+1)/2;
   SS_resid = A1 − Σ R_i²/b); on incomplete rounds the round effect absorbs each round's own mean
   rank.  After a race the complete rounds are only the first few, while the leaders run on
   together.  0.01 rather than 0.05 because the parametric model is much more powerful with few
   rounds and the residuals of an RCBD are not independent (they sum to 0 per row and column), so
   the test is approximate; only a clear departure should give that power away.

**Friedman / Conover** (Conover 1999, *Practical Nonparametric Statistics*,
§5.8), on complete rounds, R_ij = midrank of cell i within round j:

    R_i = Σ_j R_ij,   A1 = Σ R_ij²,   C1 = b·k·(k+1)²/4
    T1 = (k−1)·Σ_i (R_i − b(k+1)/2)² / (A1 − C1)        ≈ χ²(k−1)  (tie-corrected Friedman)
    pairs: t = |R_a − R_b| / √(2·(b·A1 − Σ_i R_i²) / ((b−1)(k−1))),  df (b−1)(k−1)

Every family of pairwise p-values is Holm-adjusted (``stats/holm_stepdown.py``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from iomatrix.stats import special
from iomatrix.stats.compare import ratio_ci, welch
from iomatrix.stats.holm_stepdown import holm
from iomatrix.stats.looks import DECISION_ALPHA, FIRST_LOOK, HORIZON, TAIL_SHARE, look_level
from iomatrix.stats.moderated import NO_PRIOR, Prior, race_moderation
from iomatrix.stats.paired import paired_comparison
from iomatrix.stats.shapiro import shapiro_p
from iomatrix.stats.summary import t_quantile, t_two_sided_p

NORMALITY_ALPHA = 0.01  # Shapiro–Wilk p below this → Friedman + Conover


@dataclass(frozen=True)
class BlockedPair:
    a: str
    b: str
    ratio: float  # centre(a)/centre(b): geometric means (blocked) or arithmetic means (welch)
    ratio_low: float | None  # CI of the ratio at `confidence`; None when undefined (e.g. Friedman)
    ratio_high: float | None
    statistic: float  # t of a − b (model, Conover or Welch)
    df: float | None
    p_value: float
    p_adjusted: float  # Holm over every pair
    significant: bool  # p_adjusted < alpha
    se_log: float | None = None  # SE of ln(ratio) on `df` (the pair's paired t; None otherwise)
    paired_rounds: int = 0  # the rounds both cells ran (0 in the Welch fallback: nothing paired)
    level: float = 0.0  # the level p_adjusted had to reach at this look (stats/looks.py)


@dataclass(frozen=True)
class BlockedAnalysis:
    method: str  # "rcbd-anova" | "friedman-conover" | "welch"
    description: str  # one sentence for reports: which test, why
    cells: tuple[str, ...]
    # geometric mean (blocked methods; model-adjusted when unbalanced) or mean (welch)
    centre: dict[str, float]
    pairs: tuple[BlockedPair, ...]
    alpha: float
    rounds_complete: tuple[int, ...]  # rounds in which every cell has a value
    rounds_used: tuple[int, ...]  # rounds the model used
    df_resid: int | None = None
    residual_sd: float | None = None  # √MSE on the log scale (≈ CV of a single run after blocking)
    f_cells: float | None = None
    p_cells: float | None = None
    f_rounds: float | None = None
    p_rounds: float | None = None
    round_share: float | None = None  # SS_rounds/(SS_rounds + SS_resid)
    normality_p: float | None = None  # Shapiro–Wilk on the residuals
    friedman_stat: float | None = None
    friedman_p: float | None = None
    notes: tuple[str, ...] = ()
    # what moderated the pairs' variances (stats/moderated.py); None in the Welch fallback
    prior: Prior | None = None

    def pair(self, a: str, b: str) -> BlockedPair:
        """The comparison of a and b, oriented as a versus b."""
        for p in self.pairs:
            if (p.a, p.b) == (a, b):
                return p
            if (p.a, p.b) == (b, a):
                return BlockedPair(
                    a=a,
                    b=b,
                    ratio=_inv(p.ratio),
                    ratio_low=_inv_opt(p.ratio_high),
                    ratio_high=_inv_opt(p.ratio_low),
                    statistic=-p.statistic,
                    df=p.df,
                    p_value=p.p_value,
                    p_adjusted=p.p_adjusted,
                    significant=p.significant,
                    se_log=p.se_log,
                    paired_rounds=p.paired_rounds,
                    level=p.level,
                )
        raise KeyError((a, b))

    @property
    def blocked(self) -> bool:
        return self.method != "welch"


def _inv(x: float) -> float:
    return math.inf if x == 0 else 1.0 / x


def _inv_opt(x: float | None) -> float | None:
    return None if x is None else _inv(x)


def _table(
    data: Mapping[str, Sequence[tuple[int, float]]],
) -> tuple[dict[str, dict[int, float]], list[str]]:
    """cell → {round: value}; a cell measured twice in one round keeps the geometric mean
    (noted)."""
    notes: list[str] = []
    out: dict[str, dict[int, float]] = {}
    for cell, pts in data.items():
        per: dict[int, list[float]] = {}
        for rnd, v in pts:
            if not math.isfinite(float(v)):
                raise ValueError(f"cell {cell!r}: non-finite value in round {rnd}")
            per.setdefault(int(rnd), []).append(float(v))
        if not per:
            raise ValueError(f"cell {cell!r} has no values")
        row = {}
        for rnd, vs in per.items():
            if len(vs) > 1:
                notes.append(
                    f"{cell}: {len(vs)} values in round {rnd}, their geometric mean is used"
                )
                row[rnd] = (
                    math.exp(sum(math.log(v) for v in vs) / len(vs))
                    if min(vs) > 0
                    else sum(vs) / len(vs)
                )
            else:
                row[rnd] = vs[0]
        out[cell] = row
    return out, notes


def _t_sf2(t: float, df: float) -> float:
    return t_two_sided_p(t, df)


def _tq(confidence: float, df: float) -> float:
    return t_quantile(confidence, df)


def _welch(
    cells: list[str],
    table: dict[str, dict[int, float]],
    alpha: float,
    confidence: float,
    complete: list[int],
    why: str,
    notes: list[str],
    looked: bool = True,
) -> BlockedAnalysis:
    vals = {c: list(table[c].values()) for c in cells}
    pairs = [(cells[i], cells[j]) for i in range(len(cells)) for j in range(i + 1, len(cells))]
    tests = [welch(vals[a], vals[b], confidence) for a, b in pairs]
    adj = holm([w.p_value for w in tests])
    out = []
    for (a, b), w, p in zip(pairs, tests, adj, strict=True):
        rc = ratio_ci(vals[a], vals[b], confidence)
        # Runs in rounds a race looked at: each cell's run count stands for the looks it could have
        # taken (stats/looks.py); plain samples (no rounds: no race looked at them) are judged at α.
        level = look_level(alpha, min(len(vals[a]), len(vals[b]))) if looked else alpha
        out.append(
            BlockedPair(
                a=a,
                b=b,
                ratio=rc.ratio if rc.ratio is not None else math.nan,
                ratio_low=rc.low,
                ratio_high=rc.high,
                statistic=w.t,
                df=w.df,
                p_value=w.p_value,
                p_adjusted=p,
                significant=p < level,
                level=level,
            )
        )
    desc = (
        f"independent analysis (Welch's t-test on the values, Holm over {len(pairs)} "
        f"pair(s), α={alpha:g}): "
        f"{why}"
    )
    return BlockedAnalysis(
        method="welch",
        description=desc,
        cells=tuple(cells),
        centre={c: float(np.mean(vals[c])) for c in cells},
        pairs=tuple(out),
        alpha=alpha,
        rounds_complete=tuple(complete),
        rounds_used=(),
        notes=tuple(notes),
    )


def _design(
    cells: list[str],
    rounds: list[int],
    obs: list[tuple[int, int, float]],
    with_cells: bool = True,
    with_rounds: bool = True,
) -> np.ndarray:
    k, b = len(cells), len(rounds)
    cols = 1 + (k - 1 if with_cells else 0) + (b - 1 if with_rounds else 0)
    x = np.zeros((len(obs), cols))
    for r, (i, j, _y) in enumerate(obs):
        x[r, 0] = 1.0
        col = 1
        if with_cells:
            if i > 0:
                x[r, col + i - 1] = 1.0
            col += k - 1
        if with_rounds and j > 0:
            x[r, col + j - 1] = 1.0
    return x


def _rss(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, int]:
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    return float(resid @ resid), beta, int(np.linalg.matrix_rank(x))


def _f_p(f: float, df1: int, df2: int) -> float:
    # scipy.stats.f.sf's own function (f._sf), without importing scipy.stats: ~1 s of CPU per
    # process (issue 52); stats/special.py.
    return float(special.fdtrc(df1, df2, f))


@dataclass(frozen=True)
class _AdditiveFit:
    """The additive model y = μ + α_i + β_j fitted by least squares (step 2 of the module
    docstring)."""

    x: np.ndarray  # design matrix
    y: np.ndarray
    beta: np.ndarray
    rss: float  # 0 for an exact fit (floating-point residue counted as 0)
    df_resid: int
    mse: float  # nan without residual degrees of freedom
    xtx_inv: np.ndarray

    def effect(self, i: int) -> float:
        """α̂_i (cell 0 is the reference, α_0 = 0)."""
        return 0.0 if i == 0 else float(self.beta[i])

    def contrast(self, i: int, j: int) -> tuple[float, float, float, float]:
        """(d, SE, t, two-sided p) of α̂_i − α̂_j, SE = √(MSE·cᵀ(XᵀX)⁻c); MSE = 0 decides exactly (d
        = 0 → p = 1, else p = 0)."""
        cvec = np.zeros(self.x.shape[1])
        if i > 0:
            cvec[i] += 1.0
        if j > 0:
            cvec[j] -= 1.0
        d = self.effect(i) - self.effect(j)
        se = math.sqrt(self.mse * float(cvec @ self.xtx_inv @ cvec)) if self.mse > 0 else 0.0
        if se == 0.0:
            t, p = (0.0, 1.0) if abs(d) < 1e-12 else (math.copysign(math.inf, d), 0.0)
        else:
            t = d / se
            p = _t_sf2(t, self.df_resid)
        return d, se, t, p


def _fit_additive(
    cells: list[str], rounds: list[int], obs: list[tuple[int, int, float]]
) -> _AdditiveFit:
    y = np.array([o[2] for o in obs])
    x = _design(cells, rounds, obs)
    rss, beta, rank_x = _rss(x, y)
    df_resid = len(obs) - rank_x
    # Tiny negative/positive residue from floating point on an exact additive fit counts as 0.
    if rss <= 1e-24 * max(float(np.sum((y - y.mean()) ** 2)), 1.0):
        rss = 0.0
    mse = rss / df_resid if df_resid > 0 else math.nan
    return _AdditiveFit(
        x=x, y=y, beta=beta, rss=rss, df_resid=df_resid, mse=mse, xtx_inv=np.linalg.pinv(x.T @ x)
    )


def _anova(
    cells: list[str],
    table: dict[str, dict[int, float]],
    alpha: float,
    confidence: float,
    complete: list[int],
    notes: list[str],
) -> tuple[BlockedAnalysis, np.ndarray]:
    rounds = sorted({r for c in cells for r in table[c] if sum(r in table[d] for d in cells) >= 2})
    k, b = len(cells), len(rounds)
    obs = [
        (i, j, math.log(table[c][r]))
        for i, c in enumerate(cells)
        for j, r in enumerate(rounds)
        if r in table[c]
    ]
    fit = _fit_additive(cells, rounds, obs)
    x, y, beta, rss, df_resid, mse = fit.x, fit.y, fit.beta, fit.rss, fit.df_resid, fit.mse
    rss_rounds_only, _, _ = _rss(_design(cells, rounds, obs, with_cells=False), y)
    rss_cells_only, _, _ = _rss(_design(cells, rounds, obs, with_rounds=False), y)
    ss_cells = max(0.0, rss_rounds_only - rss)
    ss_rounds = max(0.0, rss_cells_only - rss)
    f_c = p_c = f_r = p_r = None
    if mse > 0:
        f_c = (ss_cells / (k - 1)) / mse
        p_c = _f_p(f_c, k - 1, df_resid)
        f_r = (ss_rounds / (b - 1)) / mse
        p_r = _f_p(f_r, b - 1, df_resid)
    share = ss_rounds / (ss_rounds + rss) if ss_rounds + rss > 0 else None
    # Cell effects: α_0 = 0, α_i = beta[i]; LS means = μ + α_i + mean(β) (same offset for all: the
    # ratio is exact).
    offset = float(beta[0]) + float(np.mean(np.concatenate([[0.0], beta[k:]])))
    centre = {c: math.exp(offset + fit.effect(i)) for i, c in enumerate(cells)}
    pairs, prior = _paired_pairs(cells, table, alpha, confidence, df_resid)
    resid = y - x @ beta
    shape = "balanced" if len(obs) == k * b else f"unbalanced: {len(obs)} of {k}×{b} values"
    desc = (
        f"two-way additive model on log values with the round as block (RCBD, {k} cells "
        f"× {b} rounds, "
        f"{shape}) for the order; {PAIRWISE} paired t on the log ratios of the rounds "
        f"both ran ({variances(prior)}), Holm over {len(pairs)} pair(s), {spent(alpha)}"
    )
    ba = BlockedAnalysis(
        method="rcbd-anova",
        description=desc,
        cells=tuple(cells),
        centre=centre,
        pairs=pairs,
        alpha=alpha,
        rounds_complete=tuple(complete),
        rounds_used=tuple(rounds),
        df_resid=df_resid,
        residual_sd=math.sqrt(mse) if mse == mse else None,
        f_cells=f_c,
        p_cells=p_c,
        f_rounds=f_r,
        p_rounds=p_r,
        round_share=share,
        notes=tuple(notes),
        prior=prior,
    )
    return ba, resid


PAIRWISE = "pairwise: each pair compared like with like, the"


def variances(prior: Prior) -> str:
    """Which variance judged each pair, for a description (stats/moderated.py)."""
    if prior.d0 == 0.0:
        return "each pair's own variance"
    if math.isinf(prior.d0):
        return (
            f"the variance pooled over the {prior.pairs} pairs, whose own variances scatter no "
            "more than sampling makes them"
        )
    return (
        f"each pair's own variance moderated toward the {prior.pairs} pairs' (empirical Bayes, "
        f"prior df {prior.d0:.3g})"
    )


def spent(alpha: float) -> str:
    """How the pairs' significance is judged, for a description (stats/looks.py)."""
    return (
        f"α={alpha:g} spent over the looks (one level, {look_level(alpha, FIRST_LOOK):.2g}, at "
        f"every look from {FIRST_LOOK} to {HORIZON} shared rounds: Pocock's constant boundary; "
        f"{TAIL_SHARE:g}·α kept for later looks)"
    )


def _paired_pairs(
    cells: list[str],
    table: dict[str, dict[int, float]],
    alpha: float,
    confidence: float,
    df_resid: float,
) -> tuple[tuple[BlockedPair, ...], Prior]:
    """Every pair of cells by its own paired comparison over the rounds both ran (stats/paired.py),
    Holm over the family, each judged at its look's level (stats/looks.py)."""
    k = len(cells)
    ix = [(i, j) for i in range(k) for j in range(i + 1, k)]
    own = [paired_comparison(table[cells[i]], table[cells[j]], confidence) for i, j in ix]
    # Each pair's variance moderated toward what all the pairs of this race show
    # (stats/moderated.py): 3 shared rounds carry d₀ + 2 df, not 2.
    tests, prior = race_moderation(own, ix, k, df_resid, confidence)
    adj = holm([t.p_value for t in tests])
    out = []
    for (i, j), t, pa in zip(ix, tests, adj, strict=True):
        level = look_level(alpha, t.rounds)
        ratio = t.ratio if t.ratio is not None else math.nan
        out.append(
            BlockedPair(
                a=cells[i],
                b=cells[j],
                ratio=ratio,
                ratio_low=t.ratio_low,
                ratio_high=t.ratio_high,
                statistic=t.statistic,
                df=float(t.df) if t.df else None,
                p_value=t.p_value,
                p_adjusted=pa,
                significant=pa < level,
                se_log=t.se_log,
                paired_rounds=t.rounds,
                level=level,
            )
        )
    return tuple(out), prior


def friedman_conover(blocks: np.ndarray) -> tuple[float, float, np.ndarray, float, int]:
    """Friedman T1 (tie-corrected), its χ²(k−1) p, the rank sums R_i, and Conover's pairwise SE and
    df.

    ``blocks`` is b × k (rounds × cells).  See the module docstring for the formulas.
    """
    from scipy import stats as _st

    b, k = blocks.shape
    ranks = np.vstack([_st.rankdata(row) for row in blocks])
    r_sum = ranks.sum(axis=0)
    a1 = float(np.sum(ranks**2))
    c1 = b * k * (k + 1) ** 2 / 4.0
    if a1 - c1 <= 0:  # every round all tied
        return 0.0, 1.0, r_sum, 0.0, (b - 1) * (k - 1)
    t1 = (k - 1) * float(np.sum((r_sum - b * (k + 1) / 2.0) ** 2)) / (a1 - c1)
    p = float(_st.chi2.sf(t1, k - 1))
    df = (b - 1) * (k - 1)
    se = math.sqrt(max(0.0, 2.0 * (b * a1 - float(np.sum(r_sum**2))) / df))
    return t1, p, r_sum, se, df


def _friedman(
    cells: list[str],
    table: dict[str, dict[int, float]],
    alpha: float,
    complete: list[int],
    base: BlockedAnalysis,
    normality_p: float,
) -> BlockedAnalysis:
    blocks = np.array([[table[c][r] for c in cells] for r in complete])
    t1, p1, _r_sum, _se, _df = friedman_conover(blocks)
    k = len(cells)
    # The pairs as in the parametric model: each pair's paired t over its shared rounds
    # (stats/paired.py). A wild round widens that pair's own variance (the test grows cautious)
    # instead of moving a variance pooled over every cell, which is what Conover's comparisons
    # guarded against; the omnibus test stays Friedman's.
    centre = dict(base.centre)
    pairs = base.pairs
    rounds = list(base.rounds_used)
    desc = (
        f"Friedman test with the round as block ({k} cells × {len(complete)} complete rounds, "
        f"χ²={t1:.3g}, p={p1:.2g}), chosen because the model residuals are not normal "
        "(Shapiro–Wilk "
        f"p={normality_p:.2g} < {NORMALITY_ALPHA:g}); {PAIRWISE} paired t on the log "
        "ratios of the rounds "
        f"both ran ({variances(base.prior or NO_PRIOR)}; a wild round widens it), Holm over "
        f"{len(pairs)} pair(s), "
        f"{spent(alpha)}"
    )
    return BlockedAnalysis(
        method="friedman-conover",
        description=desc,
        cells=tuple(cells),
        centre=centre,
        pairs=pairs,
        alpha=alpha,
        rounds_complete=tuple(complete),
        rounds_used=tuple(rounds),
        df_resid=base.df_resid,
        residual_sd=base.residual_sd,
        f_cells=base.f_cells,
        p_cells=base.p_cells,
        f_rounds=base.f_rounds,
        p_rounds=base.p_rounds,
        round_share=base.round_share,
        normality_p=normality_p,
        friedman_stat=t1,
        friedman_p=p1,
        notes=base.notes,
        prior=base.prior,
    )


def independent_analysis(
    data: Mapping[str, Sequence[float]],
    alpha: float = 0.05,
    confidence: float = 0.95,
    why: str = "runs carry no round",
) -> BlockedAnalysis:
    """The Welch fallback for plain samples (no rounds): every pair by Welch's t-test, Holm, Fieller
    ratios."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    table = {c: {i: float(v) for i, v in enumerate(vs)} for c, vs in data.items()}
    return _welch(
        cells=list(table),
        table=table,
        alpha=alpha,
        confidence=confidence,
        complete=[],
        why=why,
        notes=[],
        looked=False,
    )


def _no_block_analysis(
    table: Mapping[str, Mapping[int, float]], complete: Sequence[int]
) -> str | None:
    """Why the cells cannot be compared with the round as a block, before any ANOVA (the Welch
    fallback's reason); None when they can: every value has a logarithm and ≥ 2 rounds hold every
    cell."""
    if any(v <= 0 for row in table.values() for v in row.values()):
        return "a value ≤ 0 has no logarithm"
    if len(complete) < 2:
        return f"only {len(complete)} round(s) hold every cell (a block analysis needs 2)"
    return None


def _residual_normality_p(resid: np.ndarray) -> float | None:
    """Shapiro–Wilk's p of the block ANOVA's residuals; None with fewer than 3 of them or no
    spread (the test is undefined there)."""
    if not (resid.size >= 3 and float(np.ptp(resid)) > 1e-12):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shapiro_p(resid)


def blocked_analysis(
    data: Mapping[str, Sequence[tuple[int, float]]],
    alpha: float = DECISION_ALPHA,
    confidence: float = 0.95,
    allow_nonparametric: bool = True,
) -> BlockedAnalysis:
    """Compare every pair of cells with the round as a block (see the module docstring for the
    choice).

    Needs ≥ 2 cells; in the Welch fallback every cell needs ≥ 2 values.  Raises ValueError
    otherwise."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if len(data) < 2:
        raise ValueError("a comparison needs at least 2 cells")
    table, notes = _table(data)
    cells = list(table)
    all_rounds = sorted({r for row in table.values() for r in row})
    complete = [r for r in all_rounds if all(r in table[c] for c in cells)]
    if (why := _no_block_analysis(table, complete)) is not None:
        return _welch(
            cells=cells,
            table=table,
            alpha=alpha,
            confidence=confidence,
            complete=complete,
            why=why,
            notes=notes,
        )
    dropped = [r for r in all_rounds if r not in complete]
    if dropped:
        notes.append(
            f"round(s) {', '.join(map(str, dropped))} miss some cells: used where ≥ 2 cells ran"
        )
    base, resid = _anova(cells, table, alpha, confidence, complete, notes)
    if base.df_resid is None or base.df_resid < 1:
        return _welch(
            cells=cells,
            table=table,
            alpha=alpha,
            confidence=confidence,
            complete=complete,
            why="no residual degrees of freedom",
            notes=notes,
        )
    normality_p = _residual_normality_p(resid)
    if allow_nonparametric and normality_p is not None and normality_p < NORMALITY_ALPHA:
        return _friedman(cells, table, alpha, complete, base, normality_p)
    diag = (
        ""
        if normality_p is None
        else f"; residuals consistent with normal (Shapiro–Wilk p={normality_p:.2g} ≥ "
        f"{NORMALITY_ALPHA:g})"
    )
    return BlockedAnalysis(
        method=base.method,
        description=base.description + diag,
        cells=base.cells,
        centre=base.centre,
        pairs=base.pairs,
        alpha=alpha,
        rounds_complete=base.rounds_complete,
        rounds_used=base.rounds_used,
        df_resid=base.df_resid,
        residual_sd=base.residual_sd,
        f_cells=base.f_cells,
        p_cells=base.p_cells,
        f_rounds=base.f_rounds,
        p_rounds=base.p_rounds,
        round_share=base.round_share,
        normality_p=normality_p,
        notes=base.notes,
        prior=base.prior,
    )
