"""Explicit max-margin programs on plain arrays.

Two layers.  The programs: each model builds a :class:`MaxMarginProblem`
(``_ntp``, ``_attention``, ``_joint``, ``_graph``: score maps and constraints,
no solver), in a norm of ``_norms``.  The solvers: :func:`solve_max_margin`
(``_solve``) hands a problem to a method of :mod:`skntp.svm.solvers` (one
module per algorithm, an explicit ordered registry) and certifies the answer
itself (``_certificate``).
"""

from ._att_svm import (
    att_svm,
    att_svm_prime,
    att_svm_problem,
    att_svm_w,
    att_svm_w_problem,
    is_locally_optimal,
    min_score_gap,
    svm_neighbors,
)
from ._graph import cyclic_correction, graph_svm, graph_svm_problem
from ._joint import (
    JointSVMResult,
    head_svm,
    head_svm_problem,
    joint_svm,
    relaxed_att_svm,
    relaxed_att_svm_problem,
    support_vectors,
)
from ._norms import NORMS, check_norm, dual_norm, norm_value
from ._ntp import (
    exchangeable_tokens,
    finite_component,
    log_odds_problem,
    log_odds_solvable,
    ntp_svm,
    ntp_svm_problem,
    orthonormal_contexts,
    solve_ntp_svm,
    spanning_proof,
)
from ._ntp_center import analytic_center_of_rows, analytic_center_separability
from ._ntp_cycles import CycleCertificate, check_cycle_certificate, cycle_certificate
from ._ntp_labels import LabelCertificate, check_label_certificate, label_certificate
from ._ntp_partial import (
    FiniteComponent,
    NTPSeparability,
    certify_split,
    complete_stationary_split,
    far_point_split,
    farkas_row_bounds,
    finite_side_problem,
    no_row_is_separable,
    ntp_separability,
    partial_finite_component,
    partial_ntp_svm_problem,
    separable_row_gaps,
    stationary_separability,
)
from ._problem import (
    BilinearScores,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    MaxMarginResult,
    NotSeparableError,
    ProgramTooLargeError,
    QueryKeyScores,
    UndecidedError,
)
from ._solve import solve_max_margin, solve_min_norm

__all__ = [
    "BilinearScores",
    "Constraints",
    "KeyScores",
    "MaxMarginProblem",
    "MaxMarginResult",
    "CycleCertificate",
    "LabelCertificate",
    "FiniteComponent",
    "NTPSeparability",
    "analytic_center_of_rows",
    "analytic_center_separability",
    "check_cycle_certificate",
    "check_label_certificate",
    "complete_stationary_split",
    "cycle_certificate",
    "certify_split",
    "far_point_split",
    "label_certificate",
    "farkas_row_bounds",
    "finite_side_problem",
    "no_row_is_separable",
    "orthonormal_contexts",
    "ntp_separability",
    "partial_finite_component",
    "partial_ntp_svm_problem",
    "separable_row_gaps",
    "stationary_separability",
    "spanning_proof",
    "NotSeparableError",
    "ProgramTooLargeError",
    "QueryKeyScores",
    "UndecidedError",
    "NORMS",
    "check_norm",
    "cyclic_correction",
    "dual_norm",
    "graph_svm",
    "graph_svm_problem",
    "norm_value",
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
    "log_odds_solvable",
    "ntp_svm",
    "ntp_svm_problem",
    "exchangeable_tokens",
    "solve_ntp_svm",
    "min_score_gap",
    "solve_max_margin",
    "solve_min_norm",
    "svm_neighbors",
]

from ._ntp_logits import (  # noqa: E402
    logit_finite_component,
    ntp_logit_svm,
    ntp_logit_svm_problem,
    support_proxy,
)

__all__ += [
    "logit_finite_component",
    "ntp_logit_svm",
    "ntp_logit_svm_problem",
    "support_proxy",
]
