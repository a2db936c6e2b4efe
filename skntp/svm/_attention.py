"""The attention programs of Tarzanagh et al. (max-margin token selection).

* (ATT-SVM), Sec. 2: ``p^mm(alpha) = argmin ||p||`` s.t.
  ``p^T (k_{i alpha_i} - k_{it}) >= 1`` for every real token ``t != alpha_i``;
* the relaxed program (10) of Sec. 3: the same with ``>= 0`` for the inputs
  whose attention features are not support vectors of the head SVM;
* (ATT-SVM'), App. D: several optimal tokens per input (non-convex, solved
  exactly by enumerating one optimal token per input);
* SVM-neighbors and local optimality (Def. 2).

All programs go through the shared max-margin core with the score map
:class:`~skntp.svm.KeyScores`.  This module also registers the ``"nnls"``
method of the core: the least-distance program ``min ||p|| s.t. G p >= h``
solved exactly by non-negative least squares (Lawson & Hanson, *Solving
Least Squares Problems*, ch. 23) on a working set of constraints that grows
by the most violated ones (cutting planes) until none is violated; used for
key-score programs without equalities (ATT-SVM, relaxed ATT-SVM, head SVM)
whose dense rows fit in memory.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ._core import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    MaxMarginResult,
    NotSeparableError,
    register_method,
    solve_max_margin,
)

__all__ = [
    "att_svm",
    "att_svm_prime",
    "att_svm_problem",
    "is_locally_optimal",
    "min_score_gap",
    "solve_ldp",
    "svm_neighbors",
]

#: Largest parameter dimension for the "nnls" method: its least-distance
#: solves work on dense (d + 1) x (working set) matrices.
_NNLS_MAX_DIM = 2_000


def _check_keys(keys, mask):
    keys = np.asarray(keys, dtype=float)
    if keys.ndim == 2:
        keys = keys[None]
    if keys.ndim != 3:
        raise ValueError(f"keys must be 3-D (n, T, k), got shape {keys.shape}.")
    if not np.all(np.isfinite(keys)):
        raise ValueError("keys contain NaN or infinity.")
    n, T, _ = keys.shape
    if mask is None:
        mask = np.ones((n, T), dtype=bool)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (n, T):
        raise ValueError(f"mask must have shape {(n, T)}, got {mask.shape}.")
    return keys, mask


def _check_selected(selected, mask):
    n, T = mask.shape
    selected = np.asarray(selected)
    if selected.shape != (n,) or selected.dtype.kind not in "iu":
        raise ValueError(f"selected must be an integer array of shape ({n},).")
    if np.any(selected < 0) or np.any(selected >= T):
        raise ValueError(f"selected token indices must lie in [0, {T}).")
    if not mask[np.arange(n), selected].all():
        bad = np.flatnonzero(~mask[np.arange(n), selected])
        raise ValueError(f"selected tokens of inputs {bad[:10].tolist()} are padding.")
    return selected.astype(np.int64)


def att_svm_problem(keys, selected, relaxed=None, *, mask=None, against=None):
    """Build (ATT-SVM) for selected token indices (Sec. 2), or its relaxation (10).

    Parameters
    ----------
    keys : array-like of shape (n, T, k)
        Key embeddings ``k_it`` (rows of ``K_i = X_i W^T``).
    selected : array-like of int, shape (n,)
        ``alpha_i``, the token to separate in every input.
    relaxed : array-like of bool, shape (n,), or None
        Inputs whose constraints are relaxed to ``>= 0`` (eq. (10): the
        inputs whose attention features are not support vectors of the head
        SVM); ``None`` relaxes none.
    mask : array-like of bool, shape (n, T), or None
        Real (True) versus padded tokens; padded tokens get no constraint.
    against : array-like of bool, shape (n, T), or None
        Tokens to separate ``alpha_i`` from (default: every other real
        token).  ATT-SVM' (App. D) separates from the non-optimal tokens only.

    Returns
    -------
    MaxMarginProblem
        ``info`` holds ``selected`` and ``mask``.

    Raises
    ------
    NotSeparableError
        When a selected token has the same key as a token it must be
        separated from (the constraint ``0 >= 1`` can never hold).
    """
    keys, mask = _check_keys(keys, mask)
    selected = _check_selected(selected, mask)
    n, T, _ = keys.shape
    other = mask.copy()
    other[np.arange(n), selected] = False
    if against is not None:
        other &= np.asarray(against, dtype=bool)
    rhs_i = np.ones(n)
    if relaxed is not None:
        relaxed = np.asarray(relaxed, dtype=bool)
        if relaxed.shape != (n,):
            raise ValueError(f"relaxed must be a boolean array of shape ({n},).")
        rhs_i = np.where(relaxed, 0.0, 1.0)
    i, t = np.nonzero(other)
    diff = keys[i, selected[i]] - keys[i, t]
    same = (np.abs(diff).max(axis=1) == 0) & (rhs_i[i] > 0)
    if same.any():
        j = int(np.flatnonzero(same)[0])
        raise NotSeparableError(
            f"ATT-SVM is infeasible: in input {int(i[j])} the selected token "
            f"{int(selected[i[j]])} has the same key as token {int(t[j])}, so no "
            "attention weight p can separate it (the constraint reads 0 >= 1); "
            "the selected tokens are not separable."
        )
    cons = Constraints(i, selected[i], t, rhs_i[i], np.zeros(i.size, dtype=bool))
    name = "ATT-SVM" if relaxed is None or not relaxed.any() else "relaxed ATT-SVM (10)"
    return MaxMarginProblem(
        KeyScores(keys),
        cons,
        name=name,
        infeasible_message=(
            "the selected tokens are not separable from the other tokens of their "
            "inputs by a common attention weight p (no p^mm(alpha) exists)"
        ),
        info={"selected": selected, "mask": mask},
    )


def att_svm(keys, selected, relaxed=None, *, mask=None, method="auto", tol=1e-8,
            max_iter=100_000, return_result=False):
    """Solve (ATT-SVM) (Sec. 2) or the relaxed program (10) (Sec. 3).

    Parameters
    ----------
    keys : array-like of shape (n, T, k)
    selected : array-like of int, shape (n,)
    relaxed : array-like of bool, shape (n,), or None
        See :func:`att_svm_problem`.
    mask : array-like of bool, shape (n, T), or None
    method : str, default="auto"
        Method of the max-margin core (``"nnls"``, ``"cvxpy"``, ...).
    tol, max_iter :
        Passed to :func:`~skntp.svm.solve_max_margin`.
    return_result : bool, default=False
        Also return the :class:`~skntp.svm.MaxMarginResult`.

    Returns
    -------
    p_mm : ndarray of shape (k,)
        ``p^mm(alpha)`` with margin 1 (not normalized).
    result : MaxMarginResult
        Only with ``return_result=True``.

    Raises
    ------
    NotSeparableError
        If the program is infeasible.
    """
    problem = att_svm_problem(keys, selected, relaxed, mask=mask)
    res = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter)
    return (res.primal, res) if return_result else res.primal


def att_svm_prime(keys, optimal, *, mask=None, method="auto", max_combinations=4096):
    """Solve (ATT-SVM') of App. D exactly, by enumeration.

    ``min ||p||`` s.t. ``max_{a in O_i} min_{b not in O_i} p^T (k_ia - k_ib) >= 1``.
    The feasible set is the union over choices ``alpha in prod_i O_i`` of the
    convex feasible sets of (ATT-SVM) against the non-optimal tokens only,
    so its global minimizer is the smallest of those convex solutions.

    Parameters
    ----------
    keys : array-like of shape (n, T, k)
    optimal : array-like of bool, shape (n, T)
        The optimal sets ``O_i``.
    mask : array-like of bool, shape (n, T), or None
    method : str, default="auto"
    max_combinations : int, default=4096
        Largest number of choices ``prod_i |O_i|`` to enumerate.

    Returns
    -------
    p_mm : ndarray of shape (k,)
        A global minimizer (margin 1).
    alpha : ndarray of int, shape (n,)
        The optimal token each input separates at ``p_mm``.
    n_solutions : int
        How many choices reach the minimal norm (up to 1e-7 relative): more
        than one means the minimizer is not unique (the program is non-convex).

    Raises
    ------
    NotSeparableError
        If no choice is feasible.
    ValueError
        If there are more than ``max_combinations`` choices.
    """
    keys, mask = _check_keys(keys, mask)
    optimal = np.asarray(optimal, dtype=bool) & mask
    if optimal.shape != mask.shape or not optimal.any(axis=1).all():
        raise ValueError("optimal must be (n, T) with at least one real token per input.")
    sets = [np.flatnonzero(row) for row in optimal]
    count = math.prod(len(s) for s in sets)
    if count > max_combinations:
        raise ValueError(
            f"ATT-SVM' (App. D) is non-convex; solving it exactly enumerates one optimal "
            f"token per input, here {count} > max_combinations={max_combinations} "
            "choices. Break the ties in the token scores or raise max_combinations."
        )
    against = mask & ~optimal
    best, norms = None, []
    for alpha in itertools.product(*sets):
        alpha = np.asarray(alpha, dtype=np.int64)
        try:
            problem = att_svm_problem(keys, alpha, mask=mask, against=against)
            p = solve_max_margin(problem, method=method).primal
        except NotSeparableError:
            continue
        nrm = float(np.linalg.norm(p))
        norms.append(nrm)
        if best is None or nrm < best[0]:
            best = (nrm, p, alpha)
    if best is None:
        raise NotSeparableError(
            "ATT-SVM' (App. D) is infeasible: for no choice of one optimal token per "
            "input can a common attention weight p separate it from the non-optimal "
            "tokens."
        )
    tied = int(sum(nv <= best[0] * (1 + 1e-7) for nv in norms))
    return best[1], best[2], tied


def svm_neighbors(keys, selected, p_mm, *, mask=None, rhs=1.0, tol=1e-6):
    """SVM-neighbors ``T_i`` of Def. 2: tokens whose constraint is active at ``p^mm``.

    Parameters
    ----------
    keys : array-like of shape (n, T, k)
    selected : array-like of int, shape (n,)
    p_mm : array-like of shape (k,)
        The (un-normalized, margin-1) solution of (ATT-SVM).
    mask : array-like of bool, shape (n, T), or None
    rhs : float or array-like of shape (n,), default=1.0
        Right-hand side of each input's constraints (0 for relaxed inputs).
    tol : float, default=1e-6
        A constraint is active when ``p^T (k_ia - k_it) <= rhs + tol``.

    Returns
    -------
    neighbors : ndarray of bool, shape (n, T)
        ``neighbors[i, t]`` is True when ``t`` is in ``T_i``.
    """
    keys, mask = _check_keys(keys, mask)
    selected = _check_selected(selected, mask)
    n = keys.shape[0]
    logits = keys @ np.asarray(p_mm, dtype=float)
    gap = logits[np.arange(n), selected][:, None] - logits
    rhs = np.broadcast_to(np.asarray(rhs, dtype=float), (n,))[:, None]
    out = mask & (gap <= rhs + tol)
    out[np.arange(n), selected] = False
    return out


def min_score_gap(scores, selected, neighbors):
    """``min_{i, t in T_i} gamma_{i alpha_i} - gamma_it`` (Fig. 9(b)); ``inf`` if none."""
    scores = np.asarray(scores, dtype=float)
    n = scores.shape[0]
    gap = scores[np.arange(n), np.asarray(selected)][:, None] - scores
    gap = np.where(np.asarray(neighbors, dtype=bool), gap, np.inf)
    return float(gap.min()) if gap.size else float("inf")


def is_locally_optimal(scores, selected, neighbors):
    """Def. 2: every SVM-neighbor has a strictly lower score than the selected token."""
    return min_score_gap(scores, selected, neighbors) > 0


# --------------------------------------------------------------------------
# The "nnls" method of the core: least-distance programming by NNLS
# --------------------------------------------------------------------------
def solve_ldp(G, h):
    """``min ||x||`` s.t. ``G x >= h`` exactly, by one NNLS (Lawson & Hanson).

    With ``E = [G^T; h^T]`` and ``f = e_{d+1}``, let ``u = argmin_{u >= 0}
    ||E u - f||`` and ``r = E u - f``.  If ``r = 0`` the program is
    infeasible; otherwise ``x = -r_{1:d} / r_{d+1}`` and the multipliers are
    ``lam = u / (1 - h^T u)`` (``x = G^T lam``).

    Returns
    -------
    x : ndarray of shape (d,) or None
        ``None`` when infeasible.
    lam : ndarray of shape (m,) or None
    """
    from scipy.optimize import nnls

    G = np.asarray(G, dtype=float)
    h = np.asarray(h, dtype=float)
    m, d = G.shape
    E = np.vstack([G.T, h[None, :]])
    f = np.zeros(d + 1)
    f[d] = 1.0
    u, _ = nnls(E, f, maxiter=50 * (m + d + 1))
    r = E @ u - f
    # at the optimum -r_{d+1} = ||r||^2 = 1 / (1 + ||x||^2): a zero residual
    # (below 1e-12, i.e. a margin 1/||x|| below 1e-6) means infeasible
    denom = -r[d]  # = 1 - h^T u
    if not np.isfinite(denom) or denom <= 1e-12:
        return None, None
    return -r[:d] / r[d], u / denom


def _solve_ldp_checked(G, h, problem):
    """:func:`solve_ldp`, raising :class:`NotSeparableError` when infeasible.

    Returns ``(x, lam)``, or ``None`` on the NNLS iteration limit.
    """
    try:
        x, lam = solve_ldp(G, h)
    except RuntimeError:  # NNLS iteration limit: let another method try
        return None
    if x is None:
        raise NotSeparableError(
            f"{problem.name} is infeasible (the least-distance NNLS has zero residual: "
            f"no solution with a margin above 1e-6): {problem.infeasible_message}."
        )
    return x, lam


class _KeyRows:
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


# working set: programs with at most this many constraints (or 2 (d + 1)) are
# solved whole; larger ones start from this many constraints
_WS_INITIAL = 300
_WS_MAX_ROUNDS = 500


def _initial_working_set(rows, h, k):
    """The ``k`` constraints tightest at a cheap point ``x0 = c u``.

    ``u`` is the normalized sum of the rows and ``c`` the smallest scale that
    satisfies every constraint with ``row . u > 0``.
    """
    u = rows.row_sum()
    nu = float(np.linalg.norm(u))
    if not np.isfinite(nu) or nu == 0.0:
        return np.argpartition(-h, k - 1)[:k]
    au = rows.values(u / nu)
    pos = au > 1e-12 * max(1.0, float(np.abs(au).max()))
    ratio = h[pos] / au[pos]
    scale = float(ratio.max()) if ratio.size and ratio.max() > 0 else 1.0
    slack = scale * au - h
    return np.argpartition(slack, k - 1)[:k]


def _solve_nnls(problem, tol, max_iter, be, verbose):
    c = problem.constraints
    if not isinstance(problem.scores, KeyScores) or c.equality.any():
        return None
    if int(np.prod(problem.shape)) > _NNLS_MAX_DIM:
        return None
    m, d = len(c), int(np.prod(problem.shape))
    h = c.rhs
    scale = max(1.0, float(np.abs(h).max())) if m else 1.0
    rows = _KeyRows(problem)
    n_rounds = 1
    if m <= max(_WS_INITIAL, 2 * (d + 1)):
        solved = _solve_ldp_checked(rows.rows(), h, problem)
        if solved is None:
            return None
        x, lam = solved
        vals = rows.values(x) - h
    else:
        # working-set (cutting-plane) LDP: solve on W, keep the constraints
        # with positive multipliers, add the most violated ones.  The optimal
        # value grows strictly each round (the kept constraints fix the old
        # optimum, a violated one cuts it off), so no working set repeats; at
        # a point feasible for all constraints the working-set multipliers
        # (zero elsewhere) are dual feasible with the same value: optimal.
        work = np.sort(_initial_working_set(rows, h, _WS_INITIAL))
        for rnd in range(1, _WS_MAX_ROUNDS + 1):
            n_rounds = rnd
            solved = _solve_ldp_checked(rows.rows(work), h[work], problem)
            if solved is None:
                return None
            x, lam_w = solved
            solved_set = work
            vals = rows.values(x) - h
            # stop when no constraint outside W is violated beyond 1e-9 * scale
            # or beyond the NNLS's own accuracy on W (a large ||x||)
            slack = vals.copy()
            slack[work] = np.inf
            if -slack.min() <= max(1e-9 * scale, -vals[work].min()):
                break
            # next working set: the constraints with positive multipliers and
            # the 2 (d + 1) others of smallest value (the most violated first)
            keep = work[lam_w > 0]
            slack[work] = vals[work]
            slack[keep] = np.inf
            n_add = min(2 * (d + 1), m - keep.size)
            if n_add <= 0:
                break
            work = np.union1d(keep, np.argpartition(slack, n_add - 1)[:n_add])
        lam = np.zeros(m)
        lam[solved_set] = lam_w
    viol = float(np.maximum(-vals, 0.0).max()) if m else 0.0
    if viol > 1e-6 * scale:  # NNLS failed to reach its optimality conditions
        return None
    sq = float(x @ x)
    gap = (sq - float(h @ lam)) / sq if sq > 0 else 0.0
    return MaxMarginResult(
        primal=x.reshape(problem.shape), dual=lam, method="nnls", status="optimal",
        n_iter=n_rounds, gap=float(gap), max_violation=viol,
    )


register_method("nnls", _solve_nnls, auto_priority=5)
