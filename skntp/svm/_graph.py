"""Graph-SVM and the cyclic correction of 1-layer self-attention for NTP.

Li, Huang, Ildiz, Rawat & Oymak, "Mechanics of next token prediction with
self-attention" (``ntp-self-attention-mechanics.md``):

* (Graph-SVM) ``W^mm = argmin ||W||_F`` s.t. ``(e_i - e_j)^T W e_k = 0`` for
  ``(i ~ j)`` and ``>= 1`` for ``(i => j)`` in every token-priority graph
  ``G^(k)``.  It is built on the shared max-margin core with the score map
  ``S[k, i] = e_i^T W e_k`` (:class:`BilinearScores` with queries ``E[k]`` and
  outputs ``E``).
* (Def. 3) the cyclic correction ``W^cyc``: the minimum-norm minimizer of the
  empirical risk on the cyclic sub-dataset.  The risk is invariant to moves
  orthogonal to ``S_cyc`` (proof of Lemma 2) and strictly convex on ``S_cyc``
  for the log-loss (Lemma 3), so ``W^cyc`` is *the* minimizer inside
  ``S_cyc``: we minimize in an orthonormal basis of ``S_cyc`` with L-BFGS to
  a tight gradient tolerance.

The empirical risk itself (ERM, with the log, cross-entropy and squared
losses) is :class:`SelfAttentionRisk`, written once over an array namespace.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
from sklearn.exceptions import ConvergenceWarning

from .._backend import get_backend, logsumexp, scatter_add, softmax, to_numpy
from ._core import (
    BilinearScores,
    Constraints,
    MaxMarginProblem,
    MaxMarginResult,
    register_method,
    solve_max_margin,
)

__all__ = [
    "LOSSES",
    "SelfAttentionRisk",
    "cyclic_correction",
    "graph_svm",
    "graph_svm_problem",
]

LOSSES = ("log", "ce", "squared")


def _check_embeddings(embeddings):
    E = np.asarray(embeddings, dtype=float)
    if E.ndim != 2 or E.shape[0] < 1 or E.shape[1] < 1:
        raise ValueError(f"embeddings must be a 2-D (K, d) array, got shape {E.shape}.")
    if not np.all(np.isfinite(E)):
        raise ValueError("embeddings contain NaN or infinity.")
    return E


# --------------------------------------------------------------------------
# Graph-SVM
# --------------------------------------------------------------------------
def graph_svm_problem(embeddings, graphs, sccs=None):
    """Build (Graph-SVM) on the shared max-margin core.

    Blocks are the last tokens ``k`` that have a graph, positions the ``K``
    vocabulary tokens; the score is ``S[k, i] = e_i^T W e_k``.  Constraints:
    ``S[k, i] - S[k, j] >= 1`` for every ``(i => j)`` in ``G^(k)`` and
    ``S[k, j] - S[k, a] = 0`` for every token ``j`` of a non-singleton SCC
    with anchor ``a`` (its smallest token), which spans all ``(i ~ j)``
    equalities.  For an acyclic dataset this is (Acyc-SVM).

    Parameters
    ----------
    embeddings : array-like of shape (K, d)
        Token embeddings ``E`` (rows ``e_k``).
    graphs : dict of int to networkx.DiGraph
        Token-priority graphs (:func:`skntp.graphs.token_priority_graphs`).
    sccs : dict of int to list of set, optional
        Their SCCs (computed when omitted).

    Returns
    -------
    MaxMarginProblem
        With ``problem.info["query_tokens"]`` the last token of each block.
    """
    from ..graphs import graph_relations, strongly_connected_components

    E = _check_embeddings(embeddings)
    K = E.shape[0]
    sccs = strongly_connected_components(graphs) if sccs is None else sccs
    strict, tied = graph_relations(graphs, sccs)
    tokens = np.concatenate([strict.ravel(), tied.ravel(), np.asarray(list(graphs), int)])
    if tokens.size and (tokens.min() < 0 or tokens.max() >= K):
        raise ValueError(
            f"the graphs name token {int(tokens.max())} but embeddings has {K} rows."
        )
    query = np.asarray(sorted(graphs), dtype=np.int64)
    block_of = np.full(K, -1, dtype=np.int64)
    block_of[query] = np.arange(query.size)
    cons = Constraints.concatenate(
        [
            Constraints(block_of[strict[:, 0]], strict[:, 1], strict[:, 2],
                        np.ones(len(strict)), np.zeros(len(strict), bool)),
            Constraints(block_of[tied[:, 0]], tied[:, 1], tied[:, 2],
                        np.zeros(len(tied)), np.ones(len(tied), bool)),
        ]
    )
    problem = MaxMarginProblem(
        BilinearScores(E[query], E),
        cons,
        name="Graph-SVM",
        infeasible_message=(
            "no attention weight W separates every higher-priority token from the "
            "lower-priority tokens of its token-priority graph while keeping the "
            "tokens of each strongly connected component tied (the embeddings are "
            "too dependent, e.g. K > d)"
        ),
    )
    problem.info["query_tokens"] = query
    problem.info["graph_svm"] = True
    return problem


_LDP_MAX_ENTRIES = 4_000_000


def _solve_graph_ldp(problem, tol, max_iter, be, verbose, callback=None):
    """Exact method for (Graph-SVM): eliminate the ties, then one least-distance NNLS.

    The equalities of (Graph-SVM) are homogeneous, so ``W = N z`` with ``N``
    an orthonormal basis of their null space, and the program becomes
    ``min ||z||`` s.t. ``(A_in N) z >= 1``: a least-distance program solved
    exactly by NNLS (:func:`skntp.svm._attention.solve_ldp`).  Declines other
    problems, large ones, and any solution that fails the feasibility check
    (the core then tries the next method).
    """
    from ._attention import solve_ldp
    from ._core import NotSeparableError

    c = problem.constraints
    n_var = int(np.prod(problem.shape))
    if not problem.info.get("graph_svm") or len(c) * n_var > _LDP_MAX_ENTRIES:
        return None
    if np.any(c.rhs[c.equality] != 0):
        return None
    A = problem.constraint_matrix().toarray()
    eq, ineq = c.equality, ~c.equality
    N = scipy.linalg.null_space(A[eq]) if eq.any() else np.eye(n_var)
    dual = np.zeros(len(c))
    if not ineq.any() or N.shape[1] == 0:
        if ineq.any():
            raise NotSeparableError(
                f"{problem.name} is infeasible (the ties leave W = 0 only): "
                f"{problem.infeasible_message}."
            )
        w = np.zeros(n_var)
    else:
        z, lam = solve_ldp(A[ineq] @ N, c.rhs[ineq])
        if z is None:
            raise NotSeparableError(
                f"{problem.name} is infeasible (least-distance NNLS has zero residual): "
                f"{problem.infeasible_message}."
            )
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


register_method("graph-ldp", _solve_graph_ldp, auto_priority=4)


def graph_svm(embeddings, graphs, sccs=None, *, method="auto", tol=1e-8,
              max_iter=100_000, return_result=False, **backend):
    """Solve (Graph-SVM): the max-margin attention weight ``W^mm``.

    Parameters
    ----------
    embeddings : array-like of shape (K, d)
    graphs : dict of int to networkx.DiGraph
    sccs : dict of int to list of set, optional
    method : str, default="auto"
        Method of :func:`skntp.svm.solve_max_margin` (``"cvxpy"`` is the reference).
    tol, max_iter :
        Tolerance and iteration cap of iterative methods.
    return_result : bool, default=False
        Also return the :class:`MaxMarginResult`.
    **backend :
        ``backend``, ``device``, ``dtype``.

    Returns
    -------
    W_mm : ndarray of shape (d, d)
        Margin-1 solution (not normalized); zero when no graph has an
        ``(i => j)`` pair (every graph a single SCC).

    Raises
    ------
    NotSeparableError
        If the program is infeasible.
    """
    problem = graph_svm_problem(embeddings, graphs, sccs)
    result = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter, **backend)
    return (result.primal, result) if return_result else result.primal


# --------------------------------------------------------------------------
# The empirical risk (ERM) of eq. (1)
# --------------------------------------------------------------------------
def _at_top(xp, s, p, mask):
    """``p`` at the most-attended position of each row (mean over exact ties), (n, 1)."""
    top = (s == xp.max(s, axis=1, keepdims=True)) & mask
    topf = xp.astype(top, s.dtype)
    return xp.sum(topf * xp.where(top, p, 0.0 * p), axis=1, keepdims=True) / xp.sum(
        topf, axis=1, keepdims=True)


def _centered(xp, s, p, mask):
    """``p_t - sum_t' s_t' p_t'`` computed as ``(p_t - p_r) - sum_t' s_t' (p_t' - p_r)``.

    ``r`` is the most-attended position: when the softmax saturates on ``r``
    both terms are exact small numbers instead of the difference of two
    nearly equal ones, so the gradient keeps its direction at any norm.
    """
    dp = xp.where(mask, p - _at_top(xp, s, p, mask), 0.0 * p)
    return dp - xp.sum(s * dp, axis=1, keepdims=True)


class SelfAttentionRisk:
    """Empirical risk of ``y_hat = C X^T softmax(X W x_bar)`` (eq. (1), ERM) and its gradient.

    With ``a_t = e_{x_t}^T W e_k`` (``k`` the query token), ``s = softmax(a)``
    over the real tokens, ``Gamma = C E^T`` and ``gamma_t = Gamma[y, x_t]``:

    * ``"log"``: ``-log u`` with ``u = sum_t s_t gamma_t`` (Sec. 5; needs
      ``gamma >= 0``); for ``C E^T = I`` (Assumption 4) ``u`` is the attention
      mass on the label and the loss is computed as ``-log1p(-r)`` with ``r``
      the mass on the other tokens, accurate at any norm;
    * ``"squared"``: ``(1 - u)^2`` (Sec. 6, Fig. 5);
    * ``"ce"``: ``-log softmax(y_hat)_y`` with ``y_hat = Gamma[:, x] s`` (Fig. 6).

    The gradient is ``E^T D E`` with ``D[x, k] = sum dloss/da_t`` over the
    positions holding token ``x`` in sequences with query ``k``: one gather,
    one scatter-add and two matrix products per call.

    Parameters
    ----------
    be : Backend
    embeddings : ndarray of shape (K, d)
    gamma : ndarray of shape (K, K)
        ``C E^T``.
    ids, mask : ndarrays of shape (n, T)
        Token ids and real-token mask.
    query : ndarray of shape (n,)
        Query (last) token of each sequence.
    labels : ndarray of shape (n,)
    loss : {"log", "ce", "squared"}
    sample_weight : ndarray of shape (n,), optional
        Defaults to ``1/n`` each (the ``1/n`` of ERM).
    """

    def __init__(self, be, embeddings, gamma, ids, mask, query, labels, loss="log",
                 sample_weight=None):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")
        self.xp = be.xp
        self.be, self.loss = be, loss
        ids, mask = np.asarray(ids, np.int64), np.asarray(mask, bool)
        query, labels = np.asarray(query, np.int64), np.asarray(labels, np.int64)
        n = ids.shape[0]
        K = gamma.shape[0]
        self.K = K
        w = np.full(n, 1.0 / max(n, 1)) if sample_weight is None else np.asarray(
            sample_weight, float)
        self.E = be.asarray(embeddings)
        K_, d_ = np.shape(embeddings)
        self.work_size = K_ * K_ * d_ + int(np.size(ids))  # threads: blas_threads
        self.Et = be.asarray(np.ascontiguousarray(np.asarray(embeddings).T))
        self.flat = be.asindex(np.where(mask, ids * K + query[:, None], 0))
        self.shape = ids.shape
        self.mask = be.asbool(mask)
        self.neg_inf = be.asarray(np.where(mask, 0.0, -np.inf))
        self.w = be.asarray(w[:, None])
        g = np.where(mask, gamma[labels[:, None], ids], 0.0)
        self.binary = bool(np.all((g == 0) | (g == 1)))
        self.gamma = be.asarray(g)
        if loss == "log":
            if np.any(g[mask] < 0):
                raise ValueError(
                    "loss='log' needs c_y^T e_x >= 0 for every token of every sequence "
                    "(u = c_y^T f(X) must stay positive); use loss='ce' or 'squared' "
                    "with this head."
                )
            if not (g > 0).any(axis=1).all():
                raise ValueError(
                    "loss='log' is infinite on a sample whose sequence has no token x "
                    "with c_y^T e_x > 0 (the label is not in the sequence)."
                )
            self.log_gamma = be.asarray(
                np.where(mask & (g > 0), np.log(np.where(g > 0, g, 1.0)), -np.inf))
            self.pos = be.asarray((g > 0).astype(float))
        if loss == "ce":
            self.gamma_cols = be.asarray(np.asarray(gamma).T[ids])  # (n, T, K)
            self.onehot = be.asarray(np.eye(K)[labels])

    def scores(self, W):
        """Attention logits ``a`` of shape (n, T) (``-inf`` at padding)."""
        xp = self.xp
        G = self.E @ W @ self.Et  # G[x, k] = e_x^T W e_k
        a = xp.reshape(xp.take(xp.reshape(G, (-1,)), xp.reshape(self.flat, (-1,))),
                       self.shape)
        return a + self.neg_inf

    def __call__(self, params):
        xp = self.xp
        W = params[0]
        a = self.scores(W)
        s = softmax(xp, a, axis=1)
        if self.loss == "log":
            if self.binary:
                r = xp.sum(s * (1.0 - self.pos), axis=1, keepdims=True)
                lse_all = logsumexp(xp, a, axis=1)
                lse_y = logsumexp(xp, a + self.log_gamma, axis=1)
                q = xp.exp(a + self.log_gamma - lse_y)
                small = r < 0.5
                per = xp.where(small, -xp.log1p(-xp.where(small, r, 0.0 * r)),
                               lse_all - lse_y)
                delta = s * (1.0 - self.pos) - q * r
            else:
                lse_all = logsumexp(xp, a, axis=1)
                lse_y = logsumexp(xp, a + self.log_gamma, axis=1)
                per = lse_all - lse_y
                # s_t - q_t = s_t (u - gamma_t) / u, with u - gamma_t centred precisely
                u = xp.exp(lse_y - lse_all)
                delta = -s * _centered(xp, s, self.gamma, self.mask) / u
        elif self.loss == "squared":
            # gamma_t - u and 1 - u measured from the most-attended position r, so
            # that a saturated softmax does not lose them to cancellation.
            c = _centered(xp, s, self.gamma, self.mask)  # gamma_t - u
            g_r = _at_top(xp, s, self.gamma, self.mask)
            one_minus_u = (1.0 - g_r) - xp.sum(s * (self.gamma - g_r), axis=1,
                                               keepdims=True)
            per = one_minus_u**2
            delta = -2.0 * one_minus_u * s * c
        else:
            yhat = xp.sum(s[:, :, None] * self.gamma_cols, axis=1)  # (n, K)
            lse = logsumexp(xp, yhat, axis=1)
            per = lse - xp.sum(yhat * self.onehot, axis=1, keepdims=True)
            g = softmax(xp, yhat, axis=1) - self.onehot
            proj = xp.sum(self.gamma_cols * g[:, None, :], axis=2)  # (n, T)
            delta = s * _centered(xp, s, proj, self.mask)
        loss = xp.sum(self.w * per)
        delta = xp.where(self.mask, delta * self.w, 0.0 * delta)
        D = xp.reshape(scatter_add(xp, xp.reshape(self.flat, (-1,)),
                                   xp.reshape(delta, (-1,)), self.K * self.K),
                       (self.K, self.K))
        return loss, (self.Et @ D @ self.E,)

    def attention(self, W):
        """Softmax attention ``s`` of shape (n, T) at ``W``."""
        return softmax(self.xp, self.scores(W), axis=1)


# --------------------------------------------------------------------------
# Cyclic correction (Def. 3)
# --------------------------------------------------------------------------
def cyclic_correction(embeddings, X, y, sccs, *, gamma=None, loss="log", keep=None,
                      tol=1e-11, max_iter=20_000, return_info=False):
    """The cyclic correction ``W^cyc`` (Def. 3): min-norm ERM minimizer on the cyclic sub-dataset.

    ``W^cyc`` lies in ``S_cyc`` (Lemma 2), where the risk of the cyclic
    sub-dataset is strictly convex for the log-loss (Lemma 3); it is computed
    in an orthonormal basis of ``S_cyc`` by L-BFGS (exact gradients) to the
    gradient tolerance ``tol``.

    Parameters
    ----------
    embeddings : array-like of shape (K, d)
    X : array-like of shape (n, T) or list of sequences
        Token ids.
    y : array-like of shape (n,)
        Next-token ids.
    sccs : dict of int to list of set
        SCCs of the token-priority graphs (or of pseudo graphs, with ``keep``).
    gamma : ndarray of shape (K, K), optional
        ``C E^T`` of the head (identity by default: Assumption 4).
    loss : {"log", "ce", "squared"}, default="log"
    keep : ndarray of shape (n, T_max), bool, optional
        Selected positions, for the pseudo cyclic sub-dataset of Sec. 6.
    tol : float, default=1e-11
        Gradient-norm tolerance (in the basis of ``S_cyc``).
    max_iter : int, default=20000
    return_info : bool, default=False
        Also return a dict with ``basis`` (orthonormal, ``(d*d, r)``),
        ``grad_norm``, ``n_iter``, ``loss`` and ``n_samples`` (size of the
        cyclic sub-dataset).

    Returns
    -------
    W_cyc : ndarray of shape (d, d)
        Zero when the cyclic sub-dataset is empty (e.g. acyclic data).
    """
    from scipy.optimize import minimize as sp_minimize

    from ..graphs import cyclic_subdataset, cyclic_subspace_basis

    E = _check_embeddings(embeddings)
    K, d = E.shape
    gamma = np.eye(K) if gamma is None else np.asarray(gamma, dtype=float)
    ids, mask, query, labels, index = cyclic_subdataset(X, y, sccs, keep=keep)
    rows = cyclic_subspace_basis(E, sccs)
    basis = scipy.linalg.orth(rows.T) if rows.shape[0] else np.zeros((d * d, 0))
    info = {"basis": basis, "grad_norm": 0.0, "n_iter": 0, "loss": 0.0,
            "n_samples": int(index.size)}
    if index.size == 0 or basis.shape[1] == 0:
        W = np.zeros((d, d))
        return (W, info) if return_info else W
    if loss == "log":
        g = np.where(mask, gamma[labels[:, None], ids], 0.0)
        ok = (g > 0).any(axis=1)  # samples whose label left the kept set carry no gradient
        ids, mask, query, labels = ids[ok], mask[ok], query[ok], labels[ok]
        if not ok.any():
            W = np.zeros((d, d))
            return (W, info) if return_info else W
    risk = SelfAttentionRisk(get_backend("numpy"), E, gamma, ids, mask, query, labels,
                             loss=loss)

    def fun(theta):
        W = (basis @ theta).reshape(d, d)
        val, (grad,) = risk((W,))
        return float(val), basis.T @ grad.ravel()

    res = sp_minimize(fun, np.zeros(basis.shape[1]), jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iter, "gtol": tol, "ftol": 0.0,
                               "maxcor": 50})
    theta = res.x
    # A few Newton steps polish the solution (exact gradient, finite-difference
    # Hessian in the r-dimensional basis) when L-BFGS stopped on precision.
    for _ in range(3):
        f0, g0 = fun(theta)
        if np.linalg.norm(g0) <= tol:
            break
        r = theta.size
        h = 1e-6
        H = np.empty((r, r))
        for j in range(r):
            e = np.zeros(r)
            e[j] = h
            H[:, j] = (fun(theta + e)[1] - fun(theta - e)[1]) / (2 * h)
        H = 0.5 * (H + H.T)
        try:
            step = np.linalg.lstsq(H, g0, rcond=1e-12)[0]
        except np.linalg.LinAlgError:  # pragma: no cover
            break
        t = 1.0
        while t > 1e-4 and fun(theta - t * step)[0] > f0 + 1e-14 * abs(f0):
            t *= 0.5
        cand = theta - t * step
        if np.linalg.norm(fun(cand)[1]) >= np.linalg.norm(g0):
            break
        theta = cand
    val, grad = fun(theta)
    gn = float(np.linalg.norm(grad))
    info.update(grad_norm=gn, n_iter=int(res.nit), loss=val)
    if gn > max(1e3 * tol, 1e-7):
        warnings.warn(
            f"cyclic correction: the risk of the cyclic sub-dataset was minimized to a "
            f"gradient norm of {gn:.2e} only (tol={tol:g}); with loss={loss!r} and this "
            "head the minimizer may not be finite.",
            ConvergenceWarning,
            stacklevel=2,
        )
    W = to_numpy(basis @ theta).reshape(d, d)
    return (W, info) if return_info else W
