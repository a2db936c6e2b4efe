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
losses) is :class:`skntp.losses.self_attention.SelfAttentionRisk`.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
from scipy.optimize import minimize as sp_minimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import Bunch

from .._backend import get_backend, to_numpy
from .._warnings import user_stacklevel
from ..graphs import (
    cyclic_subdataset,
    cyclic_subspace_basis,
    graph_relations,
    is_acyclic,
    pseudo_token_priority_graphs,
    strongly_connected_components,
)
from ..losses.self_attention import SelfAttentionRisk
from ..metrics import SubspaceProjector
from ._newton import newton_polish
from ._problem import BilinearScores, Constraints, MaxMarginProblem
from ._solve import solve_max_margin

__all__ = [
    "cyclic_correction",
    "pseudo_limits",
    "graph_svm",
    "graph_svm_problem",
]

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
def graph_svm_problem(embeddings, graphs, sccs=None, *, norm="fro"):
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
    norm : {"fro", "nuclear", "spectral", "max", "l1"} or ("lp", p), default="fro"
        The norm of ``W`` minimized (:class:`~skntp.svm.MaxMarginProblem`).

    Returns
    -------
    MaxMarginProblem
        With ``problem.info["query_tokens"]`` the last token of each block.
    """
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
        norm=norm,
    )
    problem.info["query_tokens"] = query
    problem.info["graph_svm"] = True
    return problem




def graph_svm(embeddings, graphs, sccs=None, *, method="auto", tol=None,
              max_iter=100_000, return_result=False, norm="fro", **backend):
    """Solve (Graph-SVM): the max-margin attention weight ``W^mm``.

    Parameters
    ----------
    embeddings : array-like of shape (K, d)
    graphs : dict of int to networkx.DiGraph
    sccs : dict of int to list of set, optional
    method : str, default="auto"
        Method of :func:`skntp.svm.solve_max_margin` (``"cvxpy"`` is the reference).
    tol, max_iter :
        The certificate's tolerance (``None``: the norm's default, see
        :func:`~skntp.svm.solve_max_margin`) and the iteration cap.
    return_result : bool, default=False
        Also return the :class:`MaxMarginResult`.
    norm : {"fro", "nuclear", "spectral", "max", "l1"} or ("lp", p), default="fro"
        The norm of ``W`` minimized under the same constraints.
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
    problem = graph_svm_problem(embeddings, graphs, sccs, norm=norm)
    result = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter, **backend)
    return (result.primal, result) if return_result else result.primal


# --------------------------------------------------------------------------
# Cyclic correction (Def. 3)
# --------------------------------------------------------------------------
def cyclic_correction(embeddings, X, y, sccs, *, gamma=None, loss="log", keep=None,
                      sample_weight=None, tol=1e-11, max_iter=20_000, return_info=False):
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
    sample_weight : array-like of shape (n,), optional
        Weights of the samples in the risk (uniform by default).
    tol : float, default=1e-11
        Gradient-norm tolerance (in the basis of ``S_cyc``).
    max_iter : int, default=20000
    return_info : bool, default=False
        Also return a dict with ``basis`` (orthonormal, ``(d*d, r)``),
        ``grad_norm``, ``n_iter``, ``loss`` (the risk at ``W_cyc``) and
        ``n_samples`` (size of the cyclic sub-dataset in the risk: with
        ``loss="log"``, samples whose label has no mass on the kept tokens
        have a constant, infinite loss and are left out).

    Returns
    -------
    W_cyc : ndarray of shape (d, d)
        Zero when the cyclic sub-dataset is empty (e.g. acyclic data) or
        ``S_cyc = {0}`` (e.g. the tokens of each SCC share one embedding).
    """
    E = _check_embeddings(embeddings)
    K, d = E.shape
    gamma = np.eye(K) if gamma is None else np.asarray(gamma, dtype=float)
    ids, mask, query, labels, index = cyclic_subdataset(X, y, sccs, keep=keep)
    weights = None if sample_weight is None else np.asarray(sample_weight, float)[index]
    rows = cyclic_subspace_basis(E, sccs)
    basis = scipy.linalg.orth(rows.T)  # (d*d, 0) when no SCC has two tokens
    if loss == "log":
        g = np.where(mask, gamma[labels[:, None], ids], 0.0)
        ok = (g > 0).any(axis=1)  # samples whose label left the kept set carry no gradient
        ids, mask, query, labels = ids[ok], mask[ok], query[ok], labels[ok]
        weights = None if weights is None else weights[ok]
    info = {"basis": basis, "grad_norm": 0.0, "n_iter": 0, "loss": 0.0,
            "n_samples": int(ids.shape[0])}
    if ids.shape[0] == 0:
        W = np.zeros((d, d))
        return (W, info) if return_info else W
    risk = SelfAttentionRisk(get_backend("numpy"), E, gamma, ids, mask, query, labels,
                             loss=loss, sample_weight=None if weights is None else
                             weights / max(weights.sum(), np.finfo(float).tiny))

    def fun(theta):
        W = (basis @ theta).reshape(d, d)
        val, (grad,) = risk((W,))
        return float(val), basis.T @ grad.ravel()

    res = sp_minimize(fun, np.zeros(basis.shape[1]), jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iter, "gtol": tol, "ftol": 0.0,
                               "maxcor": 50})
    theta = newton_polish(fun, res.x, tol)  # when L-BFGS stopped on precision
    val, grad = fun(theta)
    gn = float(np.linalg.norm(grad))
    info.update(grad_norm=gn, n_iter=int(res.nit), loss=val)
    if gn > max(1e3 * tol, 1e-7):
        warnings.warn(
            f"cyclic correction: the risk of the cyclic sub-dataset was minimized to a "
            f"gradient norm of {gn:.2e} only (tol={tol:g}); with loss={loss!r} and this "
            "head the minimizer may not be finite.",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    W = to_numpy(basis @ theta).reshape(d, d)
    return (W, info) if return_info else W


def pseudo_limits(embeddings, X, y, selected, *, gamma=None, loss="log", method="auto",
                  **backend):
    """The local limits of a fitted attention (Sec. 6, App. D): pseudo graphs and programs.

    In ``G^(k)`` every *selected* position's token points to every token of its
    sequence (:func:`skntp.graphs.pseudo_token_priority_graphs`); the pseudo
    (Graph-SVM) direction and the pseudo cyclic correction (the risk of the
    true labels minimized on the tokens in the selected tokens' SCC, inside the
    pseudo ``S_cyc``, from zero) are the limits that GD with a general head or
    the squared loss follows (Figs. 5-6).

    Parameters
    ----------
    embeddings : ndarray of shape (K, d)
    X : PaddedSequences or token-id sequences
    y : ndarray of shape (n,)
    selected : ndarray of shape (n, T_max), bool
    gamma, loss : as in :func:`cyclic_correction`
    method, **backend : as in :func:`graph_svm`

    Returns
    -------
    Bunch
        ``graphs``, ``sccs``, ``is_acyclic``, ``mm_direction`` (unit, or zero),
        ``finite_component`` (pseudo ``W^cyc``) and ``projector`` (onto the
        pseudo ``S_cyc``).
    """
    E = _check_embeddings(embeddings)
    d = E.shape[1]
    graphs = pseudo_token_priority_graphs(X, selected)
    sccs = strongly_connected_components(graphs)
    W_mm = solve_max_margin(graph_svm_problem(E, graphs, sccs), method=method,
                            **backend).primal
    norm = float(np.linalg.norm(W_mm))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        W_cyc = cyclic_correction(E, X, y, sccs, gamma=gamma, loss=loss, keep=selected)
    rows = cyclic_subspace_basis(E, sccs)
    return Bunch(graphs=graphs, sccs=sccs, is_acyclic=is_acyclic(graphs, sccs),
                 mm_direction=W_mm / norm if norm > 0 else np.zeros((d, d)),
                 finite_component=W_cyc,
                 projector=SubspaceProjector(rows if rows.shape[0] else None, (d, d)))
