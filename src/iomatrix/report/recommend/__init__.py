"""`iomatrix recommend`: which disk configuration to use, how much it gains, and what it risks.

This module only re-exports what other packages use. build.py: `recommend`, every verdict and
role answer of a sweep; verdict.py: the data model and one workload's verdict (`answer_of`);
roles.py: one answer per role (docs/roles.md); requirements.py, risks.py, current_match.py,
other_tier.py, page_cache.py, scores.py. Imports point one way: build → roles → verdict."""

from iomatrix.report.recommend.build import recommend
from iomatrix.report.recommend.requirements import parse_requirements
from iomatrix.report.recommend.risks import (
    DOCUMENTED,
    SITUATIONS,
    RiskStatement,
    risk_statements,
)
from iomatrix.report.recommend.scores import verdict_tier
from iomatrix.report.recommend.verdict import (
    Gain,
    Recommendation,
    Verdict,
    answer_of,
    workload_verdict,
)

__all__ = [
    "DOCUMENTED",
    "SITUATIONS",
    "Gain",
    "Recommendation",
    "RiskStatement",
    "Verdict",
    "answer_of",
    "parse_requirements",
    "recommend",
    "risk_statements",
    "verdict_tier",
    "workload_verdict",
]
