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

from ._norms import MATRIX_NORMS, check_norm, norm_label
from ._problem import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    QueryKeyScores,
    real_array,
)
from ._solve import solve_max_margin

__all__ = [
    "att_svm",
    "att_svm_prime",
    "att_svm_problem",
    "att_svm_w",
    "att_svm_w_problem",
    "is_locally_optimal",
    "min_score_gap",
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
        default, :mod:`skntp.svm.solvers.sdp_interior_point`) or ``"cvxpy"`` (the reference).
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
