"""The method ``"highs"``: the max-norm and l1-norm programs as linear programs (HiGHS).

Library code (``scipy.optimize.linprog``); the answer's certificate is the
duality gap of :func:`skntp.svm._norms.norm_gap`, with multipliers cleaned by
complementary slackness for the max norm (:func:`certified_lp`, shared with
the structured interior-point method of :mod:`.lp_interior_point`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog
from scipy.sparse.linalg import lsqr

from .._norms import norm_gap
from .._problem import MaxMarginResult, NotSeparableError

__all__ = ["certified_lp", "solve"]



def _solve_max_homogeneous(problem, A, verbose):
    """``min ||w||_max`` as ``max gamma`` s.t. ``A_I w >= gamma r_I``, ``A_E w = 0``,
    ``-1 <= w_i <= 1``; ``w / gamma`` is the solution.

    Valid when ``r_I >= 0`` and ``r_E = 0`` (the program is then homogeneous:
    ``w`` is feasible for margin ``gamma`` iff ``w / gamma`` is for margin 1).  The
    box is a set of variable bounds, not ``2 n`` rows ``-t <= w_i <= t``, and
    ``w = 0, gamma = 0`` is feasible, so the solver needs no phase one.  Returns
    ``(x, dual, n_iter)``, or ``None`` when ``gamma`` is 0 to working precision
    (then the general formulation decides).
    """
    c = problem.constraints
    n = A.shape[1]
    ineq, eq = ~c.equality, c.equality
    A_ub = sp.hstack([-A[ineq], sp.csr_matrix(c.rhs[ineq][:, None])]).tocsr()
    A_eq = sp.hstack([A[eq], sp.csr_matrix((int(eq.sum()), 1))]).tocsr()
    bounds = np.zeros((n + 1, 2))
    bounds[:n, 0], bounds[:n, 1], bounds[n, 1] = -1.0, 1.0, np.inf
    # the interior-point method (with crossover): an order of magnitude faster than
    # the simplex methods on these dense rows (h_j has d nonzeros per token)
    res = linprog(np.r_[np.zeros(n), -1.0], A_ub=A_ub, b_ub=np.zeros(A_ub.shape[0]),
                  A_eq=A_eq if eq.any() else None, b_eq=np.zeros(int(eq.sum())) if eq.any()
                  else None, bounds=bounds, method="highs-ipm",
                  options={"primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10, "disp": bool(verbose)})
    if res.status != 0 or not res.x[n] > 1e-9:
        return None
    dual = np.zeros(len(c))
    dual[ineq] = -res.ineqlin.marginals
    if eq.any():
        dual[eq] = res.eqlin.marginals
    x = res.x[:n] / res.x[n]
    # the smallest scaling that meets every margin-1 row exactly (HiGHS meets them to
    # its feasibility tolerance, divided here by gamma)
    vals, pos = A[ineq] @ x, c.rhs[ineq] > 0
    if pos.any() and np.all(vals[pos] > 0):
        x = x * max(1.0, float(np.max(c.rhs[ineq][pos] / vals[pos])))
    return x, dual, int(getattr(res, "nit", 0) or 0)


def solve(problem, tol, max_iter, be, verbose, callback=None):
    """``min ||w||_max`` or ``min ||w||_1`` under the constraints: a linear program (HiGHS).

    ``max``: when the program is homogeneous (right-hand sides ``>= 0`` on
    inequalities, 0 on equalities: every program of skntp), ``max gamma`` over
    the box ``|w_i| <= 1`` (:func:`_solve_max_homogeneous`); else
    variables ``(w, t)``, ``min t`` s.t. ``-t <= w_i <= t``.  ``l1``: ``w = u - v``
    with ``u, v >= 0``, ``min sum(u + v)``.  The multipliers of the score
    constraints give the certificate of :func:`norm_gap`.
    """
    if problem.norm not in ("max", "l1"):
        return None
    c = problem.constraints
    A = problem.constraint_matrix().tocsr()
    n = A.shape[1]
    ineq, eq = ~c.equality, c.equality
    homogeneous = (problem.norm == "max" and np.all(c.rhs[ineq] >= 0)
                   and not np.any(c.rhs[eq]))
    found = _solve_max_homogeneous(problem, A, verbose) if homogeneous else None
    if found is not None:
        return certified_lp(problem, A, *found, tol)
    if problem.norm == "max":
        cost = np.r_[np.zeros(n), 1.0]
        bound = sp.hstack([sp.vstack([sp.eye(n), -sp.eye(n)]),
                           -sp.csr_matrix(np.ones((2 * n, 1)))])
        rows = sp.hstack([-A[ineq], sp.csr_matrix((int(ineq.sum()), 1))])
        A_ub = sp.vstack([rows, bound]).tocsr()
        b_ub = np.r_[-c.rhs[ineq], np.zeros(2 * n)]
        A_eq = sp.hstack([A[eq], sp.csr_matrix((int(eq.sum()), 1))]).tocsr()
        bounds = [(None, None)] * n + [(0, None)]
    else:
        cost = np.ones(2 * n)
        A_ub = sp.hstack([-A[ineq], A[ineq]]).tocsr()
        b_ub = -c.rhs[ineq]
        A_eq = sp.hstack([A[eq], -A[eq]]).tocsr()
        bounds = [(0, None)] * (2 * n)
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq if eq.any() else None,
                  b_eq=c.rhs[eq] if eq.any() else None, bounds=bounds, method="highs",
                  options={"primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10, "disp": bool(verbose)})
    if res.status == 2:
        raise NotSeparableError(f"{problem.name} is infeasible (HiGHS): "
                                f"{problem.infeasible_message}.")
    if res.status != 0:
        raise RuntimeError(f"{problem.name}: HiGHS stopped with status {res.status} "
                           f"({res.message}).")
    x = res.x[:n] if problem.norm == "max" else res.x[:n] - res.x[n:]
    dual = np.zeros(len(c))
    dual[ineq] = -res.ineqlin.marginals[: int(ineq.sum())]
    if eq.any():
        dual[eq] = res.eqlin.marginals
    return certified_lp(problem, A, x, dual, int(getattr(res, "nit", 0) or 0), tol)


def _complementary_max_dual(problem, A, x, dual):
    """Multipliers of ``min ||w||_max`` cleaned by complementary slackness, or ``None``.

    At the optimum ``(A^T lam)_i = 0`` wherever ``|w_i| < ||w||_max``.  An LP
    solver's multipliers meet this to its dual feasibility tolerance only, and
    each such residual adds to ``||A^T lam||_1``, the denominator of the dual
    bound (:func:`norm_gap`): 1e-12 on each of 2 000 entries is a relative gap of
    1e-8.  The correction ``delta`` of least norm on the rows with a multiplier
    (LSQR) that cancels those entries gives another valid bound; the caller
    keeps the better one.
    """
    c = problem.constraints
    if not hasattr(A, "tocsr"):
        return None
    A = A.tocsr()
    top = float(np.max(np.abs(x), initial=0.0))
    inside = np.abs(x) < top * (1.0 - 1e-9)
    rows = c.equality | (dual > 0)
    if top == 0.0 or not inside.any() or not rows.any():
        return None
    lam = np.where(c.equality, dual, np.maximum(dual, 0.0))
    M = A[rows][:, inside].T.tocsr()
    delta = lsqr(M, -(A.T @ lam)[inside], atol=1e-15, btol=1e-15,
                 iter_lim=20 * M.shape[1])[0]
    lam = lam.copy()
    lam[rows] += delta
    return np.where(c.equality, lam, np.maximum(lam, 0.0))


def certified_lp(problem, A, x, dual, n_iter, tol, method="highs"):
    """The result of a linear program with its certificate (:func:`norm_gap`, the
    violation); ``"optimal"`` when ``|gap| <= tol`` (HiGHS's own tolerances are on
    feasibility, not the gap; :func:`solve_max_margin` certifies the answer again
    from the program).  ``A``: the constraint matrix or its operator."""
    c = problem.constraints
    gap, scaled = norm_gap(problem, x.reshape(problem.shape), dual, A)
    if problem.norm == "max" and gap > tol:
        cleaned = _complementary_max_dual(problem, A, x, dual)
        if cleaned is not None:
            gap2, scaled2 = norm_gap(problem, x.reshape(problem.shape), cleaned, A)
            if gap2 < gap:
                gap, scaled = gap2, scaled2
    dual = scaled
    vals = A @ x - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    return MaxMarginResult(primal=x.reshape(problem.shape), dual=dual, method=method,
                           status="optimal" if abs(gap) <= tol else "optimal_inaccurate",
                           n_iter=n_iter, gap=float(gap),
                           max_violation=float(viol.max(initial=0.0)))

