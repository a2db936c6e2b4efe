"""The NTP programs of Thrampoulidis (2024): NTP-SVM and the finite component."""

from __future__ import annotations

import numpy as np

from ._core import (
    BilinearScores,
    Constraints,
    MaxMarginProblem,
    solve_max_margin,
    solve_min_norm,
)

__all__ = ["finite_component", "ntp_svm", "ntp_svm_problem", "log_odds_problem"]


def _check_contexts(contexts, support, name="support"):
    contexts = np.asarray(contexts, dtype=float)
    support = np.asarray(support)
    if contexts.ndim != 2:
        raise ValueError(f"contexts must be 2-D (m, d), got shape {contexts.shape}.")
    if support.ndim != 2 or support.shape[0] != contexts.shape[0]:
        raise ValueError(
            f"{name} must be 2-D (m, V) with m={contexts.shape[0]} rows, got shape "
            f"{support.shape}."
        )
    if not np.all(np.isfinite(contexts)):
        raise ValueError("contexts contain NaN or infinity.")
    return contexts, support


def _anchors(weights):
    """Anchor ``z_j``: the in-support token of largest weight (first on ties)."""
    return np.argmax(weights, axis=1)


def ntp_svm_problem(contexts, support):
    """Build the NTP-SVM (Thrampoulidis 2024, Sec. 4, constraints (4a)-(4b)).

    With one anchor ``z_j in S_j`` per context: equalities
    ``(e_z - e_{z_j})^T W h_j = 0`` for ``z in S_j`` and inequalities
    ``(e_{z_j} - e_v)^T W h_j >= 1`` for ``v not in S_j``.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
        Distinct context embeddings ``h_j``.
    support : array-like of shape (m, V), bool
        ``support[j, z]`` is True when ``z`` is in ``S_j``.

    Returns
    -------
    MaxMarginProblem
    """
    contexts, support = _check_contexts(contexts, support)
    support = support.astype(bool)
    if not support.any(axis=1).all():
        raise ValueError("every context needs at least one in-support token.")
    m, V = support.shape
    anchor = _anchors(support)
    j_eq, z_eq = np.nonzero(support)
    keep = z_eq != anchor[j_eq]
    j_eq, z_eq = j_eq[keep], z_eq[keep]
    j_in, v_in = np.nonzero(~support)
    cons = Constraints.concatenate(
        [
            Constraints(j_eq, z_eq, anchor[j_eq], np.zeros(j_eq.size), np.ones(j_eq.size, bool)),
            Constraints(j_in, anchor[j_in], v_in, np.ones(j_in.size), np.zeros(j_in.size, bool)),
        ]
    )
    return MaxMarginProblem(
        BilinearScores(contexts, None, n_outputs=V),
        cons,
        name="NTP-SVM",
        infeasible_message="data are not NTP-separable (no W in F-perp separates "
        "in-support from out-of-support tokens with a positive margin, "
        "Def. 3.2)",
    )


def ntp_svm(contexts, support, *, method="auto", tol=1e-8, max_iter=100_000,
            return_result=False, **backend):
    """Solve the NTP-SVM: ``W^mm = argmin ||W||_F`` s.t. (4a) and (4b).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : array-like of shape (m, V), bool
    method : {"auto", "cvxpy", ...}, default="auto"
        Max-margin core method (see :func:`skntp.svm.solve_max_margin`).
    tol, max_iter :
        Tolerance and iteration cap of iterative methods.
    return_result : bool, default=False
        Also return the :class:`MaxMarginResult` (duals, gap, iterations).
    **backend :
        ``backend``, ``device``, ``dtype`` for iterative methods.

    Returns
    -------
    W_mm : ndarray of shape (V, d)
        The solution with margin 1 (not normalized); ``1 / ||W_mm||`` is the
        NTP-margin.

    Raises
    ------
    NotSeparableError
        If the data are not NTP-separable.
    """
    problem = ntp_svm_problem(contexts, support)
    result = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter, **backend)
    return (result.primal, result) if return_result else result.primal


def log_odds_problem(contexts, next_token_probs):
    """Equalities (3): ``(e_z - e_{z_j})^T W h_j = log(p_{j,z} / p_{j,z_j})``."""
    import scipy.sparse as sp

    if sp.issparse(next_token_probs):
        next_token_probs = next_token_probs.toarray()
    probs = np.asarray(next_token_probs, dtype=float)
    contexts, probs = _check_contexts(contexts, probs, "next_token_probs")
    if np.any(probs < 0) or not np.all(np.isfinite(probs)):
        raise ValueError("next_token_probs must be finite and non-negative.")
    sums = probs.sum(axis=1, keepdims=True)
    if np.any(sums <= 0):
        raise ValueError("every row of next_token_probs needs a positive entry.")
    probs = probs / sums
    m, V = probs.shape
    anchor = _anchors(probs)
    j, z = np.nonzero(probs > 0)
    keep = z != anchor[j]
    j, z = j[keep], z[keep]
    rhs = np.log(probs[j, z]) - np.log(probs[j, anchor[j]])
    return MaxMarginProblem(
        BilinearScores(contexts, None, n_outputs=V),
        Constraints(j, z, anchor[j], rhs, np.ones(j.size, bool)),
        name="NTP log-odds equations",
        infeasible_message="data are not NTP_H-compatible (Def. 3.1)",
    )


def finite_component(contexts, next_token_probs, *, return_residual=False):
    """The finite component ``W*``: the solution in ``F`` of eq. (3).

    ``W*`` is the minimum-norm solution of the log-odds equations
    ``(e_z - e_z')^T W h_j = log(p_{j,z} / p_{j,z'})`` (Thrampoulidis 2024,
    Def. 3.1 and Sec. 4 (i)); GD iterates projected onto ``F`` converge to it
    (Thm. 4.1).  If the equations have no solution (not NTP_H-compatible)
    the minimum-norm least-squares solution is returned.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    next_token_probs : array-like or sparse matrix of shape (m, V)
        Rows are normalized to sum to one.
    return_residual : bool, default=False
        Also return the relative residual of the equations (~0 when compatible).

    Returns
    -------
    W_star : ndarray of shape (V, d)
    """
    w, res = solve_min_norm(log_odds_problem(contexts, next_token_probs))
    return (w, res) if return_residual else w
