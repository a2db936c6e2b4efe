"""The method ``"graph-ldp"`` and the least-distance program shared by the exact methods.

:func:`solve_ldp` solves ``min ||x|| s.t. G x >= h`` exactly by one
non-negative least squares (Lawson & Hanson, *Solving Least Squares
Problems*, ch. 23; ``scipy.optimize.nnls``).  :class:`KeyRows` gives the dense
rows of a key-score program on demand, for the two exact methods of those
programs (:mod:`.nnls_working_set`, :mod:`.dual_active_set`).

Why not a library: no library solves a least-distance program directly; the
graph-ldp method eliminates Graph-SVM's ties by a null-space basis and hands
the rest to SciPy's NNLS, which is exact where the conic path stops at its
tolerance.  On Graph-SVM with K = 30, d = 40, n = 200 it takes 0.68 s against 20.4 s for
Clarabel, with a gap of 5e-13 against Clarabel's 6e-11 (``benchmarks/README.md``,
table "Exact methods against Clarabel").
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
from scipy.optimize import nnls

from .._problem import MaxMarginResult, NotSeparableError

__all__ = ["KeyRows", "solve", "solve_ldp", "solve_ldp_checked"]



def solve_ldp(G, h):
    """``min ||x||`` s.t. ``G x >= h`` exactly, by NNLS (Lawson & Hanson).

    With ``E = [G^T; h^T]`` and ``f = e_{d+1}``, let ``u = argmin_{u >= 0}
    ||E u - f||`` and ``r = E u - f``.  If ``r = 0`` the program is
    infeasible and ``u`` is a Farkas certificate (``G^T u = 0``, ``h^T u = 1``);
    otherwise ``x = -r_{1:d} / r_{d+1}`` and the multipliers are
    ``lam = u / (1 - h^T u)`` (``x = G^T lam``).  As ``-r_{d+1} = 1 / (1 +
    ||x||^2)``, the answer's relative accuracy is about ``eps (1 + ||x||^2)``: the
    program is solved with the rows divided by their largest entry and the
    right-hand side scaled so that ``||x||`` comes out near 1 (the solution scales
    with the right-hand side).  A first solve at unit scale that leaves
    ``-r_{d+1}`` at ``1e-12`` or below (a solution beyond ``1e6``, or none) is
    repeated at ``1e-6`` and ``1e-12`` of it, so solutions of norm up to ``1e18``
    are found (a rescaled answer that violates a row by more than ``1e-6 max|h|``
    is the NNLS stopping short of an infeasible program's zero residual: the
    program is then infeasible); one that comes out of norm outside ``[0.1, 10]`` is solved once
    more at the scale that brings it to 1.  The certificate returned is that of
    the first solve.  NNLS may take ``50 (m + d + 1)`` iterations; scipy raises
    ``RuntimeError`` beyond (on the first solve).  Without constraints, or with no
    positive right-hand side, ``x = 0``.

    Returns
    -------
    x : ndarray of shape (d,) or None
        ``None`` when infeasible.
    lam : ndarray of shape (m,)
        The multipliers, or (``x`` None) the Farkas certificate ``u``.
    """
    G = np.asarray(G, dtype=float)
    h = np.asarray(h, dtype=float)
    m, d = G.shape
    if m == 0:  # no constraint (scipy's nnls does not take a matrix without columns)
        return np.zeros(d), np.zeros(0)
    if not np.any(h > 0):  # x = 0 meets every row
        return np.zeros(d), np.zeros(m)
    row = max(float(np.max(np.abs(G))), np.finfo(float).tiny)
    unit = 1.0 / float(np.max(np.abs(h)))
    f = np.zeros(d + 1)
    f[d] = 1.0
    ray, found, refined = None, None, False
    scales = [unit, 1e-6 * unit, 1e-12 * unit]
    while scales:
        scale = scales.pop(0)
        E = np.vstack([G.T / row, scale * h[None, :]])
        try:
            u, _ = nnls(E, f, maxiter=50 * (m + d + 1))
        except RuntimeError:  # the iteration limit: on the first solve the caller's
            if ray is None and found is None:
                raise
            break
        r = E @ u - f
        denom = -r[d]  # = 1 - h^T u scale = 1 / (1 + ||x'||^2)
        if not (np.isfinite(denom) and denom > 1e-12):
            if ray is None and found is None:
                ray = u * scale
            continue
        x = -r[:d] / r[d] / scale / row
        if ray is not None and np.min(G @ x - h) < -1e-6 * np.max(np.abs(h)):
            # a rescaled solve of a program that is infeasible: the NNLS stops short
            # of its zero residual, and its "solution" does not meet the rows
            break
        found = (x, u / denom / scale / row / row)
        size = math.sqrt(max(1.0 / denom - 1.0, 0.0))
        if refined or 0.1 <= size <= 10.0 or size == 0.0:
            break
        scales, refined = [scale / size], True  # once more, at a unit solution's scale
    return found if found is not None else (None, ray)


def solve_ldp_checked(G, h, problem):
    """:func:`solve_ldp`, raising :class:`NotSeparableError` (its certificate as the
    claim's ``ray``) when infeasible.

    Returns ``(x, lam)``, or ``None`` on the NNLS iteration limit.
    """
    try:
        x, lam = solve_ldp(G, h)
    except RuntimeError:  # NNLS iteration limit: let another method try
        return None
    if x is None:
        exc = NotSeparableError(
            f"{problem.name} is infeasible (the least-distance NNLS has zero residual): "
            f"{problem.infeasible_message}."
        )
        exc.ray = lam
        raise exc
    return x, lam


class KeyRows:
    """Dense constraint rows of a key-score program, built on demand.

    Row ``i`` is ``keys[block_i, pos_i] - keys[block_i, ref_i]`` (``ref_i = -1``:
    ``keys[block_i, pos_i]``), the row ``i`` of ``problem.constraint_matrix()``.
    ``values(x)`` gives every ``row_i . x`` from the scores ``keys @ x``
    without forming the rows.
    """

    def __init__(self, problem):
        c = problem.constraints
        keys = problem.scores.keys
        B, T, d = keys.shape
        self.flat = keys.reshape(B * T, d)
        self.pos = c.block * T + c.pos
        self.has_ref = c.ref >= 0
        self.all_ref = bool(self.has_ref.all())
        self.ref = np.where(self.has_ref, c.block * T + c.ref, 0)

    def rows(self, idx=None):
        pos = self.pos if idx is None else self.pos[idx]
        ref = self.ref if idx is None else self.ref[idx]
        has_ref = self.has_ref if idx is None else self.has_ref[idx]
        G = self.flat[pos]
        if has_ref.all():
            G -= self.flat[ref]
        elif has_ref.any():
            G[has_ref] -= self.flat[ref[has_ref]]
        return G

    def values(self, x):
        s = self.flat @ x
        v = s[self.pos]
        if self.all_ref:
            v -= s[self.ref]
        elif self.has_ref.any():
            v[self.has_ref] -= s[self.ref[self.has_ref]]
        return v

    def row_sum(self):
        """``sum_i row_i`` (a cheap ascent direction)."""
        n = self.flat.shape[0]
        weight = np.bincount(self.pos, minlength=n).astype(float)
        weight -= np.bincount(self.ref[self.has_ref], minlength=n)
        return weight @ self.flat



#: The largest constraint matrix (rows times variables) of the method ``"graph-ldp"``.
LDP_MAX_ENTRIES = 4_000_000


def solve(problem, tol, max_iter, be, verbose, callback=None):
    """Exact method for small Frobenius programs: eliminate the equalities, then one
    least-distance NNLS.

    The equalities (the ties of Graph-SVM, the in-support rows of the NTP-SVM) are
    homogeneous, so ``W = N z`` with ``N`` an orthonormal basis of their null space,
    and the program becomes ``min ||z||`` s.t. ``(A_in N) z >= r``: a
    least-distance program solved exactly by NNLS (:func:`solve_ldp`), whose
    residual is the Farkas certificate when the program is infeasible.  Declines
    programs with more than :data:`LDP_MAX_ENTRIES` constraint-matrix entries,
    equalities with a right-hand side, and any solution that fails the
    feasibility check (the core then tries the next method).
    """
    c = problem.constraints
    n_var = int(np.prod(problem.shape))
    if len(c) * n_var > LDP_MAX_ENTRIES or np.any(c.rhs[c.equality] != 0):
        return None
    A = problem.constraint_matrix().toarray()
    eq, ineq = c.equality, ~c.equality
    N = scipy.linalg.null_space(A[eq]) if eq.any() else np.eye(n_var)
    dual = np.zeros(len(c))
    # rows >= 1 are there: solve_max_margin answers a program of ties alone (w = 0)
    if N.shape[1] == 0:
        z, lam, why = None, None, "the equalities (ties) leave W = 0 only"
    else:
        try:
            z, lam = solve_ldp(A[ineq] @ N, c.rhs[ineq])
        except RuntimeError:  # NNLS iteration limit
            return None
        why = "least-distance NNLS has zero residual"
    if z is None:
        exc = NotSeparableError(
            f"{problem.name} is infeasible ({why}): {problem.infeasible_message}.")
        if lam is not None:  # the ray on the inequalities, completed on the equalities
            exc.ray = dual
            dual[ineq] = lam
            if eq.any():
                dual[eq] = -np.linalg.lstsq(A[eq].T, A[ineq].T @ lam, rcond=None)[0]
        raise exc
    w = N @ z
    dual[ineq] = lam
    if eq.any():
        dual[eq] = np.linalg.lstsq(A[eq].T, w - A[ineq].T @ lam, rcond=None)[0]
    vals = A @ w - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    viol = float(viol.max()) if viol.size else 0.0
    if viol > 1e-7 * max(1.0, float(np.abs(c.rhs).max())):
        return None
    sq = float(w @ w)
    gap = (sq - float(c.rhs @ dual)) / sq if sq > 0 else 0.0
    return MaxMarginResult(primal=w.reshape(problem.shape), dual=dual, method="graph-ldp",
                           status="optimal", n_iter=0, gap=float(gap), max_violation=viol)
