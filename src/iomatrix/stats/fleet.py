"""One configuration for a group of hosts: the fleet answer (docs/statistics.md, "Fleet answers").

Input: per host h, what its own ranking of one workload (one tier, one metric) found — the centre
    m_h(c) of
every ranked configuration c (the geometric mean of its runs, or the model's, as
``stats/ranking.py`` gives it), its analysed values x_h(c) (the runs), its best b_h (by centre) and
its *top group* T_h: b_h and the configurations within the practical threshold θ of it
(``stats/decision.py``: gap = 1 − m_h(c)/m_h(b_h) when higher is better, m_h(c)/m_h(b_h) − 1
otherwise, gap ≤ θ).

1. **Hosts as blocks.**  The configurations are ranked across the hosts by the blocked analysis of
   ``stats/blocked.py`` with the host in the place of the round: one value per host and
   configuration, m_h(c),

       ln m_h(c) = μ + α_c + β_h + ε_hc

   (β_h absorbs that one host is faster than another at everything; α_c is the configuration's effect on every
   host; Friedman + Conover when the residuals are clearly not normal; Welch across host values with fewer than
   2 hosts holding every configuration).  ``stats/ranking.rank`` orders and groups them (min_n = 2 hosts),
   Holm over every pair.
2. **The group's choice.**  Only configurations every host ranked can be chosen (a host that lacks
   one gives no loss for it).  A host is *settled* when its own decision gives an answer
   (``Decision.answer``: its best is separated from the runner-up, or tied with it within θ) — what
   the single-host answer calls "Use:" —, and *not separated* when it only has a leader (the
   single-host "No answer yet, the tie-break's pick:"). wins(c) = #{settled h : c ∈ T_h}, the hosts
   where c is best or tied-best; leads(c) = #{unsettled h : c ∈ T_h}. The choice is the
   configuration with the most wins, then the most leads; among equals, the tie-break keys of
   ``stats/decision.py`` (default safety, then simplicity), then ``performance`` — the blocked
   analysis's centre across the hosts —, then the name.  The group's answer is *settled* when the
   choice wins on at least one host; otherwise it is only leading (no host's ranking separates
   anything yet).
3. **The worst-host loss.**  For the choice c* on each host h, the ratio of means of its runs to
   those of the host's own best, r_h = x̄_h(c*)/x̄_h(b_h), with Fieller's CI
   (``stats/compare.ratio_ci``; (1, 1, 1) where c* is the host's best).  The worst host is the
   settled host with the largest loss: the smallest r_h when higher is better, the largest when
   lower is better (an unsettled host's "best" is only its leader: no loss is stated against it).
4. **Hosts whose answer differs**: the settled hosts with c* ∉ T_h, named with their own best.

The heat map of a report shows x̄_h(c)/x̄_h(b_h) for every host and configuration (1 = the host's
best): the same ratio of means as step 3, so a host's loss is one figure wherever it is printed."""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.stats.compare import RatioCI, ratio_ci
from iomatrix.stats.decision import DEFAULT_TIE_BREAK, full_tie_break, tie_break_key
from iomatrix.stats.looks import DECISION_ALPHA
from iomatrix.stats.ranking import Ranking, rank


@dataclass(frozen=True)
class HostResult:
    """One host's own ranking of one workload, as the fleet answer needs it."""

    host: str
    centre: Mapping[str, float]  # ranked configuration → its centre on this host
    # ranked configuration → the runs' values (for the ratio CI)
    values: Mapping[str, Sequence[float]]
    top: Sequence[str]  # the host's best first, then the configurations within θ of it
    # the host's own answer (its decision's, tie-break applied); None when unresolved
    answer: str | None = None

    @property
    def best(self) -> str | None:
        return self.top[0] if self.top else None

    @property
    def settled(self) -> bool:
        """Whether the host's own ranking gives an answer (its best is separated, or tied within
        θ)."""
        return self.answer is not None


@dataclass(frozen=True)
class HostLoss:
    """The group's choice on one host, against that host's own best."""

    host: str
    best: str
    ratio: RatioCI  # mean(choice)/mean(host's best) over the host's runs, Fieller CI

    def loss(self, higher_is_better: bool) -> float:
        """The fraction given away against the host's best (0 on the host where the choice is
        best)."""
        r = self.ratio.ratio
        if r is None or r <= 0:
            return math.inf
        return 1.0 - r if higher_is_better else r - 1.0


@dataclass(frozen=True)
class FleetAnswer:
    hosts: tuple[str, ...]
    higher_is_better: bool
    # the configurations across hosts, hosts as blocks; None with fewer than 2 hosts
    ranking: Ranking | None
    wins: dict[str, int]  # configuration → settled hosts where it is best or tied-best
    leads: dict[str, int]  # configuration → unsettled hosts where it leads or ties the leader
    eligible: tuple[str, ...]  # configurations every host ranked, most wins first
    choice: str | None  # None when no configuration was ranked on every host
    # the other configurations with as many wins (the tie-break passed them over)
    tied_choices: tuple[str, ...]
    losses: tuple[HostLoss, ...]  # the choice on every host
    worst: HostLoss | None  # the host that loses most with the choice
    differing: tuple[str, ...]  # settled hosts whose top group lacks the choice
    unsettled: tuple[str, ...]  # hosts whose own ranking does not separate its best yet
    missing: dict[str, tuple[str, ...]]  # host → configurations other hosts ranked that it did not
    heat: dict[str, dict[str, float]]  # host → configuration → centre / centre of the host's best
    tie_break: tuple[str, ...]

    @property
    def settled(self) -> bool:
        """Whether the choice is the answer (best or tied-best on a settled host), not only the
        leader."""
        return self.choice is not None and self.wins.get(self.choice, 0) > 0

    @property
    def best_everywhere(self) -> bool:
        """Every host is settled and the choice is best or tied-best on each."""
        return (
            self.choice is not None
            and not self.unsettled
            and self.wins.get(self.choice, 0) == len(self.hosts)
        )


def host_blocked_ranking(
    hosts: Sequence[HostResult],
    higher_is_better: bool,
    alpha: float = DECISION_ALPHA,
    confidence: float = 0.95,
) -> Ranking | None:
    """Step 1: every configuration ranked on ≥ 2 hosts, with the host as block (None with fewer than
    2 hosts)."""
    if len(hosts) < 2:
        return None
    groups: dict[str, list[float]] = {}
    blocks: dict[str, list[int]] = {}
    for i, h in enumerate(hosts):
        for c, m in h.centre.items():
            groups.setdefault(c, []).append(float(m))
            blocks.setdefault(c, []).append(i)
    return rank(
        groups,
        higher_is_better,
        alpha=alpha,
        min_n=2,
        max_rel_half_width=None,
        confidence=confidence,
        rounds=blocks,
    )


def heat_map(hosts: Sequence[HostResult]) -> dict[str, dict[str, float]]:
    """host → configuration → x̄_h(c)/x̄_h(b_h), the ratio of the means of the runs (1 for the
    host's best): the point estimate `ratio_ci` gives the loss, so the heat map and the loss are one
    figure."""
    out: dict[str, dict[str, float]] = {}
    for h in hosts:
        best = h.best
        means = {c: math.fsum(v) / len(v) for c, v in h.values.items() if len(v)}
        if best is None or not means.get(best):
            out[h.host] = {}
            continue
        out[h.host] = {c: means[c] / means[best] for c in h.centre if c in means}
    return out


def fleet_answer(
    hosts: Sequence[HostResult],
    higher_is_better: bool,
    axes: Mapping[str, Mapping[str, str]],
    tie_break: Sequence[str] = DEFAULT_TIE_BREAK,
    alpha: float = DECISION_ALPHA,
    confidence: float = 0.95,
) -> FleetAnswer:
    """The group's answer for one workload (see the module docstring).  ``axes``: configuration →
    its axes, for the tie-break.  Raises ValueError for no host or a host named twice."""
    # A fleet answer keeps no one's configuration (no --current across hosts): the tie-break's
    # "keeper" key orders nothing here, so it is left out of the keys it uses and names.
    tie_break = tuple(k for k in tie_break if k != "keeper")
    names = _host_names(hosts)
    ranking = host_blocked_ranking(hosts, higher_is_better, alpha, confidence)
    union = set().union(*(set(h.centre) for h in hosts))
    wins, leads = _wins_and_leads(hosts, union)
    eligible = _eligible(
        hosts=hosts,
        ranking=ranking,
        wins=wins,
        leads=leads,
        axes=axes,
        tie_break=tie_break,
        higher_is_better=higher_is_better,
    )
    choice = eligible[0] if eligible else None
    tied = (
        tuple(c for c in eligible[1:] if (wins[c], leads[c]) == (wins[choice], leads[choice]))
        if choice
        else ()
    )
    losses = _losses(hosts, choice, confidence)
    worst = _worst(hosts, losses, higher_is_better)
    differing = (
        tuple(h.host for h in hosts if h.settled and choice not in h.top)
        if choice is not None
        else ()
    )
    missing = {h.host: tuple(sorted(union - set(h.centre))) for h in hosts if union - set(h.centre)}
    return FleetAnswer(
        hosts=tuple(names),
        higher_is_better=higher_is_better,
        ranking=ranking,
        wins=wins,
        leads=leads,
        eligible=eligible,
        choice=choice,
        tied_choices=tied,
        losses=tuple(losses),
        worst=worst,
        differing=differing,
        unsettled=tuple(h.host for h in hosts if not h.settled),
        missing=missing,
        heat=heat_map(hosts),
        tie_break=tuple(tie_break),
    )


def _wins_and_leads(
    hosts: Sequence[HostResult], configurations: set[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Step 2's counts: per configuration, the settled hosts where it is in the top group (wins) and
    the unsettled ones (leads)."""
    wins = {c: sum(c in h.top for h in hosts if h.settled) for c in sorted(configurations)}
    leads = {c: sum(c in h.top for h in hosts if not h.settled) for c in sorted(configurations)}
    return wins, leads


def _worst(
    hosts: Sequence[HostResult], losses: Sequence[HostLoss], higher_is_better: bool
) -> HostLoss | None:
    """Step 3's worst host: the settled host that loses most with the choice (None without one)."""
    settled = {h.host for h in hosts if h.settled}
    stated = [x for x in losses if x.host in settled]
    return max(stated, key=lambda x: x.loss(higher_is_better)) if stated else None


def _host_names(hosts: Sequence[HostResult]) -> list[str]:
    """The hosts' names; ValueError for no host or a host named twice."""
    if not hosts:
        raise ValueError("a fleet answer needs at least one host")
    names = [h.host for h in hosts]
    if len(set(names)) != len(names):
        raise ValueError(
            f"a host appears twice: {sorted(n for n in names if names.count(n) > 1)[0]}"
        )
    return names


def _eligible(
    hosts: Sequence[HostResult],
    ranking: Ranking | None,
    wins: Mapping[str, int],
    leads: Mapping[str, int],
    axes: Mapping[str, Mapping[str, str]],
    tie_break: Sequence[str],
    higher_is_better: bool,
) -> tuple[str, ...]:
    """Step 2: the configurations every host ranked, in the order the choice is made (most wins,
    most leads, the tie-break keys, the blocked centre across the hosts, the name)."""
    every = set.intersection(*(set(h.centre) for h in hosts))
    fleet_centre = (
        {r.name: r.centre for r in ranking.rows if r.centre is not None} if ranking else {}
    )
    if not fleet_centre:  # one host: its own centres
        fleet_centre = {c: float(m) for c, m in hosts[0].centre.items()}
    keys = full_tie_break(tie_break)

    def order(c: str) -> tuple[object, ...]:
        centre = fleet_centre.get(c, math.nan)
        return (
            -wins[c],
            -leads[c],
            *tie_break_key(c, keys, axes.get(c, {}), centre, higher_is_better),
        )

    return tuple(sorted(every, key=order))


def _losses(hosts: Sequence[HostResult], choice: str | None, confidence: float) -> list[HostLoss]:
    """Step 3: the choice on every host against the host's best (its leader where it is not
    settled), in host order; none without a choice."""
    if choice is None:
        return []
    out = []
    for h in hosts:
        best = h.best or choice
        ratio = (
            RatioCI(1.0, 1.0, 1.0)
            if best == choice
            else ratio_ci(h.values[choice], h.values[best], confidence)
        )
        out.append(HostLoss(h.host, best, ratio))
    return out
