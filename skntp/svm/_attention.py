"""The attention programs of Tarzanagh et al. (max-margin token selection).

* (ATT-SVM), Sec. 2: ``p^mm(alpha) = argmin ||p||`` s.t.
  ``p^T (k_{i alpha_i} - k_{it}) >= 1`` for every real token ``t != alpha_i``;
* the relaxed program (10) of Sec. 3: the same with ``>= 0`` for the inputs
  whose attention features are not support vectors of the head SVM;
* (ATT-SVM'), App. D: several optimal tokens per input (non-convex, solved
  exactly by enumerating one optimal token per input);
* SVM-neighbors and local optimality (Def. 2).

All programs go through the shared max-margin core with the score map
:class:`~skntp.svm.KeyScores`.  This module also registers two exact methods
of the core for key-score programs without equalities (ATT-SVM, relaxed
ATT-SVM, head SVM) in a parameter dimension up to 2000, both solving the
least-distance program ``min ||p|| s.t. G p >= h``:

* ``"dual-active-set"`` (tried first by ``auto``): the dual active-set
  method of Goldfarb & Idnani (1983) for the identity Hessian, which starts
  at ``p = 0`` and adds the most violated constraint one at a time, dropping
  active constraints whose multipliers would turn negative;
* ``"nnls"``: non-negative least squares (Lawson & Hanson, *Solving Least
  Squares Problems*, ch. 23) on a working set of constraints that grows by
  the most violated ones (cutting planes) until none is violated.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.blas import daxpy, dger

from ._core import (
    MATRIX_NORMS,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    MaxMarginResult,
    NotSeparableError,
    QueryKeyScores,
    check_norm,
    norm_label,
    real_array,
    register_method,
    solve_max_margin,
)

__all__ = [
    "att_svm",
    "att_svm_prime",
    "att_svm_problem",
    "att_svm_w",
    "att_svm_w_problem",
    "is_locally_optimal",
    "min_score_gap",
    "solve_ldp",
    "svm_neighbors",
]

_NORM_NAMES = {"fro": "Frobenius", "nuclear": "nuclear", "max": "entrywise max",
               "l1": "l1"}

#: Largest parameter dimension for the "nnls" method: its least-distance
#: solves work on dense (d + 1) x (working set) matrices.
_NNLS_MAX_DIM = 2_000


def _check_keys(keys, mask):
    keys = real_array(keys, "keys")
    if keys.ndim == 2:
        keys = keys[None]
    if keys.ndim != 3:
        raise ValueError(f"keys must be 3-D (n, T, k), got shape {keys.shape}.")
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


def att_svm_problem(keys, selected, relaxed=None, *, mask=None, against=None, norm="fro"):
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
    norm : {"fro", "max", "l1"} or ("lp", p), default="fro"
        The norm of the program (:class:`~skntp.svm.MaxMarginProblem`):
        Frobenius, entrywise max, l1 or lp.

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
    cons = _selection_constraints(keys, selected, mask, relaxed, against, "key",
                                  "attention weight p")
    relaxed_any = relaxed is not None and np.asarray(relaxed, dtype=bool).any()
    name = "relaxed ATT-SVM (10)" if relaxed_any else "ATT-SVM"
    return MaxMarginProblem(
        KeyScores(keys),
        cons,
        name=name,
        infeasible_message=(
            "the selected tokens are not separable from the other tokens of their "
            "inputs by a common attention weight p (no p^mm(alpha) exists)"
        ),
        info={"selected": selected, "mask": mask},
        norm=norm,
    )


def _selection_constraints(keys, selected, mask, relaxed, against, what, parameter):
    """The constraints ``S_{i alpha_i} - S_{it} >= 1`` (0 where relaxed) of a selection.

    ``keys`` only serve the check that a selected token differs from the
    tokens it must be separated from (else the constraint reads ``0 >= 1``).
    """
    n, T = mask.shape
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
            f"{int(selected[i[j]])} has the same {what} as token {int(t[j])}, so no "
            f"{parameter} can separate it (the constraint reads 0 >= 1); "
            "the selected tokens are not separable."
        )
    return Constraints(i, selected[i], t, rhs_i[i], np.zeros(i.size, dtype=bool))


def att_svm_w_problem(tokens, queries, selected, *, mask=None, norm="fro"):
    """Build the key-query ATT-SVM of attention with one query per input.

    ``W^mm = argmin ||W||`` s.t. ``z_i^T W (x_{i alpha_i} - x_{it}) >= 1`` for
    every real token ``t != alpha_i`` ("Transformers as Support Vector
    Machines", Tarzanagh, Li, Thrampoulidis, Oymak, 2023: (W-SVM) with the
    Frobenius norm, the limit of gradient descent on ``W``, Thm. 1; (KQ-SVM)
    with the nuclear norm, the limit of gradient descent on the factors of
    ``W = Q K^T``, Thm. 2).  Their ``W`` is the transpose of this one: here the
    logits are ``z_i^T W x_it`` with ``W`` of shape ``(k, d)``, as the keys
    ``X W^T`` of :class:`~skntp.AttentionSelector`.  Both norms share these
    constraints; the Frobenius program is the ATT-SVM of
    :func:`att_svm_problem` on the lifted keys ``vec(z_i x_it^T)``.

    Parameters
    ----------
    tokens : array-like of shape (n, T, d)
        The tokens ``x_it``.
    queries : array-like of shape (n, k)
        The query ``z_i`` of every input (self-attention: one of its tokens).
    selected : array-like of int, shape (n,)
        ``alpha_i``.
    mask : array-like of bool, shape (n, T), or None
    norm : {"fro", "nuclear", "spectral", "max", "l1"} or ("lp", p), default="fro"

    Returns
    -------
    MaxMarginProblem
        With parameter shape ``(k, d)`` for ``"nuclear"`` and ``(k * d,)``
        (``W`` flattened row-major) for the others.

    Raises
    ------
    NotSeparableError
        When a query is zero or a selected token equals a token it must be
        separated from.
    """
    norm = check_norm(norm)
    tokens, mask = _check_keys(tokens, mask)
    queries = real_array(queries, "queries")
    n = tokens.shape[0]
    if queries.ndim != 2 or queries.shape[0] != n:
        raise ValueError(f"queries must have shape ({n}, k), got {queries.shape}.")
    selected = _check_selected(selected, mask)
    zero = np.flatnonzero(~queries.any(axis=1))
    if zero.size:
        raise NotSeparableError(
            f"ATT-SVM is infeasible: the queries of inputs {zero[:10].tolist()} are zero, "
            "so every token gets the same logit z^T W x = 0 whatever W; the selected "
            "tokens are not separable.")
    cons = _selection_constraints(tokens, selected, mask, None, None, "token",
                                  "key-query matrix W")
    scores = QueryKeyScores(tokens, queries)
    if norm not in MATRIX_NORMS:
        scores = KeyScores(scores.lifted())
    label = {"fro": "Frobenius"}.get(norm, norm_label(norm))
    return MaxMarginProblem(
        scores, cons, name=f"ATT-SVM ({label} norm, key-query W)",
        infeasible_message=(
            "the selected tokens are not separable from the other tokens of their "
            "inputs by a common key-query matrix W (no W^mm exists)"),
        info={"selected": selected, "mask": mask, "shape": (queries.shape[1],
                                                            tokens.shape[2])},
        norm=norm)


def att_svm_w(tokens, queries, selected, *, mask=None, norm="fro", method="auto",
              tol=None, max_iter=100_000, return_result=False, callback=None):
    """Solve the key-query ATT-SVM of :func:`att_svm_w_problem`.

    Parameters
    ----------
    tokens : array-like of shape (n, T, d)
    queries : array-like of shape (n, k)
    selected : array-like of int, shape (n,)
    mask : array-like of bool, shape (n, T), or None
    norm : {"fro", "nuclear", "spectral", "max", "l1"} or ("lp", p), default="fro"
        ``"fro"``: the limit of gradient descent on ``W``; ``"nuclear"``: on the
        factors of ``W = Q K^T`` (low rank); ``"spectral"``: the operator
        2-norm; ``"max"``, ``"l1"``, ``("lp", p)``: entrywise.
    method : str, default="auto"
        Method of the max-margin core: for ``"nuclear"``, ``"nuclear-ipm"`` (the
        default, :mod:`skntp.svm._nuclear`) or ``"cvxpy"`` (the reference).
    tol, max_iter, callback :
        Passed to :func:`~skntp.svm.solve_max_margin`.
    return_result : bool, default=False
        Also return the :class:`~skntp.svm.MaxMarginResult`.

    Returns
    -------
    W_mm : ndarray of shape (k, d)
        With margin 1 (not normalized).  Its rank is
        :func:`skntp.metrics.numerical_rank` (a relative tolerance).
    result : MaxMarginResult
        Only with ``return_result=True``.

    Raises
    ------
    NotSeparableError
        If the program is infeasible (for both norms alike: feasibility does not
        depend on the norm).
    """
    problem = att_svm_w_problem(tokens, queries, selected, mask=mask, norm=norm)
    res = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter,
                           callback=callback)
    res.primal = np.reshape(res.primal, problem.info["shape"])
    return (res.primal, res) if return_result else res.primal


def att_svm(keys, selected, relaxed=None, *, mask=None, method="auto", tol=None,
            max_iter=100_000, return_result=False, callback=None, norm="fro"):
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
    callback : callable, optional
        ``callback(n_iter, gap, violation)``, passed to
        :func:`~skntp.svm.solve_max_margin` (progress of the solve).
    norm : {"fro", "max", "l1"} or ("lp", p), default="fro"
        The norm of the program (:class:`~skntp.svm.MaxMarginProblem`):
        Frobenius, entrywise max, l1 or lp.

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
    problem = att_svm_problem(keys, selected, relaxed, mask=mask, norm=norm)
    res = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter,
                           callback=callback)
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
    infeasible (numerically ``-r_{d+1} = 1 - h^T u <= 1e-12``: a margin ``1 / ||x||``
    below about 1e-6); otherwise ``x = -r_{1:d} / r_{d+1}`` and the multipliers are
    ``lam = u / (1 - h^T u)`` (``x = G^T lam``).  NNLS may take ``50 (m + d + 1)``
    iterations; scipy raises ``RuntimeError`` beyond.  Without constraints ``x = 0``.

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
    if m == 0:  # no constraint (scipy's nnls does not take a matrix without columns)
        return np.zeros(d), np.zeros(0)
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
    satisfies every constraint with ``row . u > 1e-12 max(1, max_i |row_i . u|)``
    (``c = 1`` when that scale is not positive); the ``k`` smallest slacks
    ``c row . u - h``.  When the rows sum to zero, the ``k`` largest ``h``.
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


def _solve_nnls(problem, tol, max_iter, be, verbose, callback=None):
    """The "nnls" method: key-score programs without equalities, by least distance.

    Declines (None) other programs and those of more than ``_NNLS_MAX_DIM`` (2000)
    parameters.  At most ``max(_WS_INITIAL, 2 (d + 1))`` constraints (``_WS_INITIAL =
    300``): one :func:`solve_ldp` of the whole program.  More: a working set ``W``,
    first the ``_WS_INITIAL`` rows of :func:`_initial_working_set`; each round solves
    the LDP on ``W``, stops when no row outside ``W`` is violated beyond ``max(1e-9
    scale, the violation on W)`` (``scale = max(1, max |h|)``), else keeps the rows of
    ``W`` with positive multipliers and adds the ``min(2 (d + 1), m - |keep|)`` other
    rows of smallest ``g_i x - h_i``; at most ``_WS_MAX_ROUNDS`` (500) rounds.
    ``n_iter`` is the number of LDP solves.  An answer that violates a constraint by
    more than ``1e-6 scale`` is declined.
    """
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


register_method("nnls", _solve_nnls)


# --------------------------------------------------------------------------
# The "dual-active-set" method: Goldfarb & Idnani for the identity Hessian
# --------------------------------------------------------------------------
class _Infeasible(Exception):
    """Raised by :func:`_dual_active_set` on a proof of infeasibility."""


# selection of the violated constraint: programs with at most 2 * _DAS_POOL
# constraints look at every row at every step; larger ones at a pool of the
# rows of smallest normalized slack of the last scan of all rows (pool size
# m / 50 clipped to [_DAS_POOL, 2000], a rescan every pool / 16 additions, at
# least 8, or when no pool row is violated)
_DAS_POOL = 100
_DAS_POOL_MAX = 2_000
_DAS_NORM_CHUNK = 8_192
_DAS_DENSE_MAX = 4_000_000  # normalized rows kept densely up to this many entries
_DAS_MAX_ADD = 50  # additions allowed per parameter dimension (+ 1)


def _row_norms(rows, m):
    out = np.empty(m)
    for start in range(0, m, _DAS_NORM_CHUNK):
        block = rows.rows(slice(start, min(m, start + _DAS_NORM_CHUNK)))
        out[start:start + block.shape[0]] = np.sqrt(np.einsum("ij,ij->i", block, block))
    return out


def _smallest(values, k):
    """Indices of about the ``k`` smallest values (exactly ``k`` for short arrays).

    ``k >= m``: every index, in order.  ``m <= 16 k``: exactly the ``k`` smallest.
    Longer arrays are cut at the matching quantile (``k / m``) of a strided sample
    of about ``4 k`` values, cheaper than a full partition; the pool needs no exact
    size: every value at most the cut, or the ``k`` smallest of those when there
    are more than ``4 k`` (many ties at the cut).
    """
    m = values.size
    if k >= m:
        return np.arange(m)
    if m <= 16 * k:
        return np.argpartition(values, k - 1)[:k]
    sample = values[:: m // (4 * k)]
    cut = np.partition(sample, k * sample.size // m)[k * sample.size // m]
    idx = np.flatnonzero(values <= cut)
    if idx.size > 4 * k:  # many ties at the cut
        idx = idx[np.argpartition(values[idx], k - 1)[:k]]
    return idx


def _blocking_step(u, r):
    """``(k, t)``: the largest step ``t`` keeping ``u - t r >= 0``, and the ``k`` it blocks.

    ``t = min u_k / r_k`` over ``r_k > 0`` (``inf`` when no ``r_k > 0``), found as the
    largest ``r_k / u_k``; where some ``u_k = r_k = 0`` (``0 / 0``) over the ``r_k > 0``
    directly.  ``k`` is meaningful only for a finite ``t``.  Called under
    ``np.errstate(divide="ignore", invalid="ignore")``.
    """
    w = r / u
    k = int(w.argmax())
    wk = w[k]
    if wk > 0:
        return k, float(u[k] / r[k])
    if wk != wk:  # argmax stops at a NaN: some u_k = r_k = 0
        ratios = np.divide(u, r, out=np.full(u.size, np.inf), where=r > 0)
        k = int(ratios.argmin())
        return k, float(ratios[k])
    return k, math.inf


def _dual_active_set(rows, h, d, *, max_add=None, pool=None, scan_every=None):
    """``min 1/2 ||x||^2`` s.t. ``G x >= h`` exactly, by the dual active-set method.

    Goldfarb & Idnani, "A numerically stable dual method for solving strictly
    convex quadratic programs", *Math. Programming* 27 (1983), with the
    identity Hessian.  From ``x = 0`` (the unconstrained minimum, active set
    ``A`` empty) each step picks the most violated constraint ``p`` (largest
    violation over row norm, among the rows violated by more than ``1e-10 max(1,
    max_i |h_i|)``, with ``1e-14 ||x|| ||g_i||`` more for the roundoff of the slack)
    and moves along the dual direction: the primal
    step is ``z = Z g_p``, the part of ``g_p`` orthogonal to the active rows,
    and the active multipliers change by ``-t r`` with ``r = N g_p``
    (``g_p = G_A^T r + z``).  A full step makes ``p`` active; a partial step
    stops where an active multiplier reaches zero and drops that constraint
    first.  Every iterate is optimal for the constraints in ``A``
    (``x = G_A^T u``, ``u >= 0``, ``G_A x = h_A``) and the objective grows at
    each step, so the method ends when no constraint is violated by more than
    that tolerance.

    The operators of the paper are kept explicitly and updated by rank-one
    terms (cheaper in numpy than the updates of a QR factorization):
    ``Z = I - G_A^T (G_A G_A^T)^{-1} G_A`` and the pseudo-inverse
    ``N = (G_A G_A^T)^{-1} G_A`` (``N G_A^T = I``).  Adding ``p``:
    ``N <- [N - r z^T / (z.g_p); z^T / (z.g_p)]`` and
    ``Z <- Z - z z^T / (z.g_p)``; dropping ``k`` with ``w = N_k``:
    ``Z <- Z + w w^T / ||w||^2`` and ``N <- N - (N w) w^T / ||w||^2`` less
    row ``k``.  Rows are normalized (``||g_i|| = 1``) inside.

    Parameters
    ----------
    rows : _KeyRows
        The constraint rows ``G`` (``m x d``): ``rows.values(x) = G x`` and
        ``rows.rows(idx) = G[idx]`` (a new array).
    h : ndarray of shape (m,)
    d : int
    max_add : int, optional
        Largest number of constraint additions, ``_DAS_MAX_ADD (d + 1)`` (50
        (d + 1)) by default.
    pool, scan_every : int, optional
        Pool size and rescan period of the selection (defaults above).

    Returns
    -------
    (x, lam, n_add) or None
        The minimizer, the multipliers (``x = G^T lam``) and the number of
        additions; ``None`` when ``max_add`` additions did not end.

    Raises
    ------
    _Infeasible
        When a violated constraint is a non-positive combination of the
        active ones (no multiplier can drop: the dual is unbounded), or is a
        zero row with ``h > 0``.
    """
    m = h.size
    if m == 0:
        return np.zeros(d), np.zeros(0), 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return _dual_active_set_loop(rows, h, d, max_add, pool, scan_every)


def _dual_active_set_loop(rows, h, d, max_add, pool, scan_every):
    m = h.size
    max_add = _DAS_MAX_ADD * (d + 1) if max_add is None else max_add
    if pool is None:
        pool = min(max(_DAS_POOL, m // 50), _DAS_POOL_MAX)
    if scan_every is None:
        scan_every = max(8, pool // 16)
    scale = max(1.0, float(np.abs(h).max()))
    G = rows.rows() if m * (d + 1) <= _DAS_DENSE_MAX else None
    if G is not None:
        norms = np.sqrt(np.einsum("ij,ij->i", G, G))
    else:
        norms = _row_norms(rows, m)
    zero = norms == 0.0
    if zero.any():
        if (h[zero] > 0).any():
            raise _Infeasible
        norms[zero] = np.inf  # never violated: inverse norm 0
    inv = 1.0 / norms
    thr = (1e-10 * scale) * inv  # tolerance on the normalized slacks

    hn = h * inv  # normalized rows P = G / ||g||: slacks P x - hn

    def build(idx):
        P = rows.rows(idx)
        P *= inv[idx, None]
        return P

    dense = None
    if G is not None:
        dense = G
        dense *= inv[:, None]
    whole = m <= 2 * pool and dense is not None
    pidx = np.arange(m)
    Pa, hp = dense, hn
    x = np.zeros(d)
    Z = np.eye(d, order="F")
    NT = np.zeros((d, d), order="F")  # column j: row j of N
    u = np.zeros(d)
    zeros = np.zeros(d)
    act = np.zeros(d, dtype=np.intp)
    isact = np.zeros(m, dtype=bool)
    q = n_add = 0
    since = scan_every
    while True:
        # -- the violated constraint p, normalized slack sp < 0, row n_p
        p = -1
        xtol = 1e-14 * math.sqrt(x.dot(x))  # roundoff of the slacks
        if whole or since < scan_every:
            sn = Pa.dot(x)
            sn -= hp
            j = int(sn.argmin())
            sp, p = float(sn[j]), int(pidx[j])
            if sp >= -(thr[p] + xtol) or isact[p]:
                bad = sn < -(thr[pidx] + xtol)
                bad &= ~isact[pidx]
                if bad.any():
                    sn[~bad] = np.inf
                    j = int(sn.argmin())
                    sp, p = float(sn[j]), int(pidx[j])
                elif whole:
                    break
                else:
                    p = -1
            n_p = Pa[j]
        if p < 0:  # scan all rows, refill the pool
            if dense is not None:
                sn = dense.dot(x)
                sn -= hn
            else:
                sn = rows.values(x)
                sn -= h
                sn *= inv
            sn[isact] = np.inf
            bad = sn < -(thr + xtol)
            if not bad.any():
                break
            p = int(np.flatnonzero(bad)[sn[bad].argmin()])
            sp = float(sn[p])
            pidx = _smallest(sn, pool)
            Pa = dense[pidx] if dense is not None else build(pidx)
            hp = hn[pidx]
            n_p = dense[p] if dense is not None else build(np.array([p]))[0]
            since = 0
        since += 1
        n_add += 1
        if n_add > max_add:
            return None
        u_p = 0.0
        # -- steps for p: partial ones (dropping a constraint) until a full one
        while True:
            z = Z.dot(n_p)
            zn = float(z.dot(n_p))  # = ||z||^2 in exact arithmetic
            t1 = math.inf  # largest dual step keeping u >= 0, blocked by k
            if q:
                r = n_p.dot(NT[:, :q])
                k, t1 = _blocking_step(u[:q], r)
            # g_p in span(G_A^T) (||g_p|| = 1: zn >= 1e-8 implies ||z|| >= 1e-8)
            if q == d or zn <= 1e-20 or (zn < 1e-8 and z.dot(z) <= 1e-20):
                if t1 == math.inf:
                    raise _Infeasible
                t, full = t1, False
            else:
                t2 = -sp / zn  # full step: g_p x = h_p
                full = t2 <= t1
                t = t2 if full else t1
                daxpy(z, x, a=t)
                sp += t * zn
            if q:
                daxpy(r, u, a=-t, n=q)
                if not full or t >= 0.999 * t1:  # near ties: no roundoff below 0
                    np.maximum(u[:q], zeros[:q], out=u[:q])
            u_p += t
            if full:
                iz = 1.0 / zn
                if q:
                    dger(-iz, z, r, a=NT[:, :q], overwrite_a=1)
                np.multiply(z, iz, out=NT[:, q])
                dger(-iz, z, z, a=Z, overwrite_a=1)
                u[q] = u_p
                act[q] = p
                isact[p] = True
                q += 1
                break
            isact[act[k]] = False
            w = NT[:, k].copy()
            iw = 1.0 / float(w.dot(w))
            dger(iw, w, w, a=Z, overwrite_a=1)
            dger(-iw, w, w.dot(NT[:, :q]), a=NT[:, :q], overwrite_a=1)
            q -= 1
            if k < q:  # the order of the active set is free: move the last to k
                NT[:, k] = NT[:, q]
                u[k] = u[q]
                act[k] = act[q]
            NT[:, q] = 0.0
    lam = np.zeros(m)
    if q == 0:
        return np.zeros(d), lam, n_add
    a = act[:q]
    x, lam[a] = _resolved_active_set(rows.rows(a) * inv[a, None], h[a] * inv[a], x, u[:q])
    lam[a] *= inv[a]
    return x, lam, n_add


def _resolved_active_set(ga, ha, x, u):
    """The final active equations ``G_A x = h_A``, ``x = G_A^T u`` solved afresh by QR.

    The rank-one updates of the dual active-set loop drift (relative 1e-10 on large
    multipliers), so its last iterate ``(x, u)`` (rows ``ga`` and right-hand sides ``ha``
    normalized) is replaced by the QR solution ``G_A^T = Q R``, ``R^T y = h_A``,
    ``R u = y``, ``x = Q y``, with ``u`` clipped at 0, when ``u`` is finite and
    ``min u >= -1e-9 max(1, max u)``.  Otherwise (dependent or near-dependent active
    rows) the iterate is returned as it is.
    """
    Q, R = np.linalg.qr(ga.T)
    try:
        y = solve_triangular(R, ha, trans="T", check_finite=False)
        un = solve_triangular(R, y, check_finite=False)
    except np.linalg.LinAlgError:  # a zero on the diagonal of R: dependent rows
        return x, u
    if np.all(np.isfinite(un)) and un.min() >= -1e-9 * max(1.0, float(un.max())):
        return Q.dot(y), np.maximum(un, 0.0)
    return x, u


def _solve_dual_active_set(problem, tol, max_iter, be, verbose, callback=None):
    c = problem.constraints
    if not isinstance(problem.scores, KeyScores) or c.equality.any():
        return None
    d = int(np.prod(problem.shape))
    if d > _NNLS_MAX_DIM:
        return None
    m, h = len(c), c.rhs
    rows = _KeyRows(problem)
    try:
        out = _dual_active_set(rows, h, d)
    except _Infeasible:
        raise NotSeparableError(
            f"{problem.name} is infeasible (dual active set: a violated constraint is a "
            f"non-positive combination of active ones, the dual is unbounded): "
            f"{problem.infeasible_message}."
        ) from None
    if out is None:  # addition limit: let another method try
        return None
    x, lam, n_add = out
    scale = max(1.0, float(np.abs(h).max())) if m else 1.0
    viol = float(np.maximum(h - rows.values(x), 0.0).max()) if m else 0.0
    if viol > 1e-9 * scale:  # not exact to roundoff (a drifted update): let nnls try
        return None
    sq = float(x @ x)
    gap = (sq - float(h @ lam)) / sq if sq > 0 else 0.0
    return MaxMarginResult(
        primal=x.reshape(problem.shape), dual=lam, method="dual-active-set",
        status="optimal", n_iter=n_add, gap=float(gap), max_violation=viol,
    )


register_method("dual-active-set", _solve_dual_active_set)
