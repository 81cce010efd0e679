"""The weighted scores' verdicts (seed 000's weighted-read/-write/-mixed: the top-scoring allowed
guest cell), and which workloads are not a speed ranking (the durability tier's verdicts)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.domain import Modifier
from iomatrix.errors import UserError
from iomatrix.report.durability import MeasuredIndex
from iomatrix.report.query import cell_workloads
from iomatrix.report.rank import (
    weighted_scores,
)
from iomatrix.report.recommend.requirements import (
    Requirement,
)
from iomatrix.report.recommend.risks import (
    risk_statements,
)
from iomatrix.report.recommend.verdict import (
    Choice,
    Gain,
    Verdict,
)
from iomatrix.snippets import DiskConfig, snippet_backing, snippets_for
from iomatrix.stats import RatioCI
from iomatrix.store import Store
from iomatrix.tiers import known_tier, tier_classes, workload_owner
from iomatrix.tiers.declaration import TierDeclaration
from iomatrix.workloads import listed


def verdict_tier(workload: str) -> type[TierDeclaration] | None:
    """The tier whose trials of `workload` are verdicts, not a speed ranking (the durability tier's
    own workloads), or None for a workload that is ranked."""
    w = listed(workload)
    owner = workload_owner(w) if w is not None else None
    return owner if owner is not None and owner.verdicts else None


def is_vm_view(tier: str) -> bool:
    known = known_tier(tier)
    return known is not None and known.vm_view


SCORES = ("weighted-read", "weighted-write", "weighted-mixed")


def score_verdicts(
    store: Store,
    sweep_id: int,
    scores: Sequence[str],
    requirements: list[Requirement],
    measured: MeasuredIndex | None = None,
) -> list[Verdict]:
    """Seed 000's weighted scores: the top-scoring allowed guest cell. A score has no significance
    test, so cells whose score interval overlaps the top one's are named as tied."""
    cells = {c.label(): c for c in cell_workloads(store, sweep_id)}
    out = []
    for score in scores:
        v = Verdict(score, "score", True, next(t.name for t in tier_classes() if t.vm_view), None)
        try:
            rows, _ = weighted_scores(store, sweep_id, score)
        except UserError as e:
            v.missing = e.one_line()
            out.append(v)
            continue
        allowed = [
            r
            for r in rows
            if r.label in cells and all(q.met_by(cells[r.label].axes) for q in requirements)
        ]
        if not allowed:
            v.missing = (
                "no guest cell has both inputs of the score"
                if not rows
                else "the requirements excluded every scored cell"
            )
            out.append(v)
            continue
        top = allowed[0]
        tied = tuple(
            r.label
            for r in allowed[1:]
            if top.score.low is not None
            and r.score.high is not None
            and r.score.high >= top.score.low
        )
        v.choice = Choice(
            top.label,
            tied,
            "highest score; cells whose score interval overlaps it are named as tied",
        )
        v.mean, v.ci = top.score.score, (top.score.low, top.score.high)
        if requirements and rows[0].label != top.label:
            v.requirement_cost = Gain(
                f"{rows[0].label} (best without requirements)",
                rows[0].label,
                RatioCI(rows[0].score.score / top.score.score, None, None),
                "point ratio of scores, no interval",
            )
        cell = cells[top.label]
        v.risks = risk_statements(
            cell.axes["cache"], cell.axes.get("modifier", Modifier.NONE), cell, measured
        )
        v.snippets = snippets_for(DiskConfig.from_axes(cell.axes, snippet_backing(cell.backing)))
        out.append(v)
    return out
