"""Explicit max-margin programs on plain arrays.

All programs go through one core, :func:`solve_max_margin`, which solves
``min 1/2 ||w||^2`` under linear score-difference constraints.
"""

from ._core import (
    BilinearScores,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    MaxMarginResult,
    NotSeparableError,
    solve_max_margin,
    solve_min_norm,
)
from ._ntp import finite_component, log_odds_problem, ntp_svm, ntp_svm_problem

__all__ = [
    "BilinearScores",
    "Constraints",
    "KeyScores",
    "MaxMarginProblem",
    "MaxMarginResult",
    "NotSeparableError",
    "finite_component",
    "log_odds_problem",
    "ntp_svm",
    "ntp_svm_problem",
    "solve_max_margin",
    "solve_min_norm",
]
