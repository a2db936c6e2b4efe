"""Explicit max-margin programs on plain arrays.

All programs go through one core, :func:`solve_max_margin`, which solves
``min 1/2 ||w||^2`` under linear score-difference constraints.
"""

from . import _barrier, _dcd, _fast, _lpipm, _nuclear  # noqa: F401  (register their methods)
from ._attention import (
    att_svm,
    att_svm_prime,
    att_svm_problem,
    att_svm_w,
    att_svm_w_problem,
    is_locally_optimal,
    min_score_gap,
    svm_neighbors,
)
from ._core import (
    BilinearScores,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    MaxMarginResult,
    NotSeparableError,
    ProgramTooLargeError,
    QueryKeyScores,
    check_norm,
    dual_norm,
    solve_max_margin,
    solve_min_norm,
)
from ._joint import (
    JointSVMResult,
    head_svm,
    head_svm_problem,
    joint_svm,
    relaxed_att_svm,
    relaxed_att_svm_problem,
    support_vectors,
)
from ._ntp import (
    exchangeable_tokens,
    finite_component,
    log_odds_problem,
    ntp_svm,
    ntp_svm_problem,
    solve_ntp_svm,
)

__all__ = [
    "BilinearScores",
    "Constraints",
    "KeyScores",
    "MaxMarginProblem",
    "MaxMarginResult",
    "NotSeparableError",
    "ProgramTooLargeError",
    "QueryKeyScores",
    "check_norm",
    "dual_norm",
    "att_svm",
    "att_svm_prime",
    "att_svm_problem",
    "att_svm_w",
    "att_svm_w_problem",
    "JointSVMResult",
    "finite_component",
    "head_svm",
    "head_svm_problem",
    "joint_svm",
    "relaxed_att_svm",
    "relaxed_att_svm_problem",
    "support_vectors",
    "is_locally_optimal",
    "log_odds_problem",
    "ntp_svm",
    "ntp_svm_problem",
    "exchangeable_tokens",
    "solve_ntp_svm",
    "min_score_gap",
    "solve_max_margin",
    "solve_min_norm",
    "svm_neighbors",
]

from ._graph import (  # noqa: E402
    cyclic_correction,
    graph_svm,
    graph_svm_problem,
)

__all__ += ["cyclic_correction", "graph_svm", "graph_svm_problem"]


def __getattr__(name):
    # the risk is a model, not a program
    from .._base import moved_attribute

    return moved_attribute(__name__, name, {"SelfAttentionRisk": (
        "skntp.models.self_attention", "SelfAttentionRisk")})
