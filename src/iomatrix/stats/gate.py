"""The regression gate of `compare --fail-above θ`: regression, no regression, or cannot tell — per
figure.

For each figure (cell × workload × metric) compared between sweep A (before) and B (after), with r =
mean(B)/mean(A) and "worse" in the metric's direction (1 − r when higher is better, r − 1
otherwise):

* **regression**: the change is significant (Welch, Holm-adjusted p < α) and worse by more than θ.
* **can tell, no regression**: not a regression, and either the ratio's CI already rules out a
  worsening by θ (its worse end is within θ: r_low ≥ 1 − θ, or r_high ≤ 1 + θ), or Welch's test had
  power ≥ 0.8 to see a change of δ = θ·mean(A) at the observed noise (stats/power.py, at α/m — the
  level of Holm's first step for m tested figures).
* **cannot tell**: neither — the data could have missed a worsening by θ; the verdict carries the
  power and the runs per side that would reach 0.8.

θ = 0 asks for any significant worsening; a change of 0 cannot be powered for, so no figure is
"cannot tell" then. Figures with n < 2 on a side have no test: they are "cannot tell" (power 0).
The command's exit status follows: any regression → regression; else any cannot tell → cannot tell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from iomatrix.stats.power import Power, welch_power
from iomatrix.stats.sweeps import Change

POWER_TARGET = 0.8


@dataclass(frozen=True)
class Undetectable:
    change: Change
    power: Power  # at the observed noise and n, for a worsening of θ; n_needed per side


@dataclass(frozen=True)
class GateVerdict:
    threshold: float
    regressions: list[Change]
    undetectable: list[Undetectable]
    tested: int  # figures in the Holm family

    @property
    def outcome(self) -> str:
        """'regression', 'cannot tell' or 'ok'."""
        if self.regressions:
            return "regression"
        return "cannot tell" if self.undetectable else "ok"


def worse_by(c: Change, higher_is_better: bool) -> float | None:
    """How much worse B is than A as a fraction (negative: better); None without a ratio."""
    if c.ratio.ratio is None:
        return None
    return (1 - c.ratio.ratio) if higher_is_better else (c.ratio.ratio - 1)


def regression_gate(
    changes: Sequence[Change],
    threshold: float,
    higher_is_better: Callable[[str], bool],
    alpha: float = 0.05,
) -> GateVerdict:
    """Judge every change against the threshold θ (a fraction); see the module docstring."""
    if not threshold >= 0:
        raise ValueError(f"threshold must be ≥ 0, got {threshold}")
    tested = sum(1 for c in changes if c.p_adjusted is not None)
    level = alpha / max(tested, 1)
    regressions: list[Change] = []
    undetectable: list[Undetectable] = []
    for c in changes:
        higher = higher_is_better(c.key)
        worse = worse_by(c, higher)
        if c.significant and worse is not None and worse > threshold:
            regressions.append(c)
            continue
        if threshold == 0:
            continue
        bound = c.ratio.low if higher else c.ratio.high
        if bound is not None and (bound >= 1 - threshold if higher else bound <= 1 + threshold):
            continue
        if c.a.sd is None or c.b.sd is None:
            undetectable.append(Undetectable(c, Power(0.0, None)))
            continue
        p = welch_power(
            delta=threshold * abs(c.a.mean),
            sd_a=c.a.sd,
            sd_b=c.b.sd,
            n_a=c.a.n,
            n_b=c.b.n,
            alpha=level,
            target=POWER_TARGET,
        )
        if p.power < POWER_TARGET:
            undetectable.append(Undetectable(c, p))
    return GateVerdict(threshold, regressions, undetectable, tested)
