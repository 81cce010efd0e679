"""How far two tiers order the same cells alike: Kendall's τ-b between their means, and each cell's
ratio of the two tiers' figures (issue 51: does the guest agree with the block layer?).

For n cells measured in tier A (the block layer) and tier B (a guest), with means aᵢ and bᵢ, a pair
of cells (i, j) is concordant when both tiers order it alike, discordant when they order it
oppositely:

    τ_b = (C − D) / √((C + D + T_a)(C + D + T_b))

C concordant pairs, D discordant, T_a pairs tied in A only, T_b pairs tied in B only. τ = 1: the
same order; −1: reversed; about 0: unrelated. Its two-sided p-value (scipy.stats.kendalltau: exact
for small n without ties) says whether an agreement this strong arises by chance among unrelated
orders; with fewer than 5 cells even a perfect agreement is not significant at 5 % (exact p of n!
orders: 0.33 for 3 cells, 0.083 for 4), so τ then describes and does not test. Each cell's ratio B/A
with its Fieller 95 % CI (stats/compare.py ratio_ci) says how much of the block layer's figure the
guest keeps.

Worked example: caches none, writeback, unsafe; block layer 900, 2100, 2300 IOPS; guest 400, 700,
650. (none, writeback) and (none, unsafe) are concordant, (writeback, unsafe) discordant: C = 2, D =
1, τ = (2 − 1)/3 = 0.33 (p = 1.0); the guest keeps 0.44, 0.33 and 0.28 of the block layer's IOPS;
ranks (best = 1) block 3, 2, 1, guest 3, 1, 2."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.compare import RatioCI, ratio_ci

# Below this many cells no order agreement is significant at 5 % (module docstring).
CELLS_TO_TEST = 5


@dataclass(frozen=True)
class CellInBoth:
    cell: str
    a_mean: float
    b_mean: float
    a_rank: int  # 1 = best in tier A
    b_rank: int
    ratio: RatioCI  # mean(B) / mean(A)


@dataclass(frozen=True)
class TierAgreement:
    cells: tuple[CellInBoth, ...]
    tau: float | None  # None: fewer than 2 cells, or one tier's means all equal
    p_value: float | None

    @property
    def tested(self) -> bool:
        """Whether τ can be significant at all: enough cells (CELLS_TO_TEST)."""
        return len(self.cells) >= CELLS_TO_TEST


def _ranks(means: Sequence[float], higher_is_better: bool) -> list[int]:
    """Competition ranks, 1 = best (equal means share the better rank)."""
    ordered = sorted(means, reverse=higher_is_better)
    return [ordered.index(m) + 1 for m in means]


def tier_agreement(
    a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], higher_is_better: bool
) -> TierAgreement:
    """The cells both tiers measured (ok runs' values of one metric, by cell name), in tier A's
    order."""
    from scipy.stats import kendalltau  # τ-b with its exact or asymptotic p-value

    names = [c for c in a if c in b and a[c] and b[c]]
    am = [statistics.fmean(a[c]) for c in names]
    bm = [statistics.fmean(b[c]) for c in names]
    ar, br = _ranks(am, higher_is_better), _ranks(bm, higher_is_better)
    cells = sorted(
        (
            CellInBoth(c, x, y, i, j, ratio_ci(list(b[c]), list(a[c])))
            for c, x, y, i, j in zip(names, am, bm, ar, br, strict=True)
        ),
        key=lambda cell: (cell.a_rank, cell.cell),
    )
    tau = p = None
    if len(names) >= 2 and len(set(am)) > 1 and len(set(bm)) > 1:
        res = kendalltau(am, bm)
        tau = float(res.statistic)
        p = None if math.isnan(res.pvalue) else float(res.pvalue)
    return TierAgreement(tuple(cells), tau, p)
