"""Pure statistics over stored samples (lists of floats): no I/O, no database, no printing.

See docs/statistics.md for every definition and convention.
"""

from iomatrix.stats.adaptive import needs_more_runs, runs_needed_estimate
from iomatrix.stats.coldwarm import ColdWarm, cold_vs_warm
from iomatrix.stats.compare import RatioCI, WelchResult, holm, ratio_ci, welch
from iomatrix.stats.outliers import mad_outliers, modified_z_scores
from iomatrix.stats.ranking import PairComparison, RankedRow, Ranking, group_letter, rank
from iomatrix.stats.scores import ScoreCI, weighted_mixed, weighted_score, weighted_score_ci
from iomatrix.stats.steady import SteadyState, fio_steady_state, snia_steady_state
from iomatrix.stats.summary import Summary, summarize, t_quantile
from iomatrix.stats.sweeps import Change, compare_sweeps

__all__ = [
    "Change",
    "ColdWarm",
    "PairComparison",
    "RankedRow",
    "Ranking",
    "RatioCI",
    "ScoreCI",
    "SteadyState",
    "Summary",
    "WelchResult",
    "cold_vs_warm",
    "compare_sweeps",
    "fio_steady_state",
    "group_letter",
    "holm",
    "mad_outliers",
    "modified_z_scores",
    "needs_more_runs",
    "rank",
    "ratio_ci",
    "runs_needed_estimate",
    "snia_steady_state",
    "summarize",
    "t_quantile",
    "weighted_mixed",
    "weighted_score",
    "weighted_score_ci",
    "welch",
]
