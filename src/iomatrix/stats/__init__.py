"""Pure statistics over stored samples (lists of floats): no I/O, no database, no printing.

See docs/statistics.md for every definition and convention.  Names are loaded
lazily (PEP 562) so that importing ``iomatrix.stats`` — which the runner and
the CLI do — does not import scipy until a statistic is actually computed.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name → the module (one procedure per file) that defines it
_WHERE: dict[str, str] = {
    "needs_more_runs": "adaptive",
    "runs_needed_estimate": "adaptive",
    "ColdWarm": "coldwarm",
    "cold_vs_warm": "coldwarm",
    "RatioCI": "compare",
    "WelchResult": "compare",
    "ratio_ci": "compare",
    "welch": "compare",
    "holm": "holm_stepdown",
    "mad_outliers": "outliers",
    "modified_z_scores": "outliers",
    "PairComparison": "ranking",
    "RankedRow": "ranking",
    "Ranking": "ranking",
    "group_letter": "ranking",
    "rank": "ranking",
    "ScoreCI": "scores",
    "weighted_mixed": "scores",
    "weighted_score": "scores",
    "weighted_score_ci": "scores",
    "weighted_mixed_ci": "scores",
    "knee_index": "knee",
    "SteadyState": "steady",
    "fio_steady_state": "steady",
    "snia_steady_state": "steady",
    "Summary": "summary",
    "summarize": "summary",
    "t_quantile": "summary",
    "Change": "sweeps",
    "compare_sweeps": "sweeps",
    "BlockedAnalysis": "blocked",
    "BlockedPair": "blocked",
    "blocked_analysis": "blocked",
    "independent_analysis": "blocked",
    "Decision": "decision",
    "decide": "decision",
    "TIE_BREAKS": "decision",
    "non_superiority": "ruling_out",
    "Elimination": "racing",
    "RaceStep": "racing",
    "race_step": "racing",
    "stop_reason": "racing",
    "Replay": "racing",
    "replay_race": "racing",
    "Prior": "moderated",
    "fit_prior": "moderated",
    "race_moderation": "moderated",
    "AxisEffect": "main_effects",
    "axis_effect": "main_effects",
    "RunInterference": "interference",
    "InterferenceEffect": "interference",
    "interference_flags": "interference",
    "interference_effect": "interference",
    "interference_scores": "interference",
    "baseline_limit": "interference",
    "equivalence_margin": "racing",
    "ConsolidationAnswer": "consolidation",
    "RoleSlowdown": "consolidation",
    "consolidation_answer": "consolidation",
    "TwoLevel": "two_level",
    "variance_components": "two_level",
    "optimal_runs_per_boot": "two_level",
    "boots_needed": "two_level",
    "boots_of": "two_level",
    "RoundsPerBoot": "runs_per_boot",
    "choose_rounds_per_boot": "runs_per_boot",
    "CellUnit": "analysis_unit",
    "cell_unit": "analysis_unit",
    "Power": "power",
    "welch_power": "power",
    "GateVerdict": "gate",
    "Undetectable": "gate",
    "regression_gate": "gate",
    "FleetAnswer": "fleet",
    "HostLoss": "fleet",
    "HostResult": "fleet",
    "fleet_answer": "fleet",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'iomatrix.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"iomatrix.stats.{mod}"), name)
    globals()[name] = value  # cache: the next access skips __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
