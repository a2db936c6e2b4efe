"""Which limit does an optimizer reach?  Optimizers against the max-margin limit of each norm.

Steepest descent in a norm converges in direction to the max-margin solution in
that norm (normalized GD: Frobenius; sign descent and Adam without
epsilon-dominance: the entrywise max norm; Fan, Schmidt, Thrampoulidis 2025,
for separable multiclass data), and the NTP paper names the implicit bias of
Adam as open (its App. B.2).  :func:`compare_optimizers` answers the question
on a user's own data: it fits :class:`~skntp.NTPDecoderClassifier` with each
optimizer and compares the part of ``W`` outside the finite subspace,
``W - W*``, with the NTP-SVM solution of each norm, by cosine and by
normalized margin.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from ._optim import limit_norm, steepest_direction
from .svm import finite_component, ntp_svm_problem, solve_max_margin
from .svm._norms import norm_value
from .svm._problem import constraint_operator

__all__ = ["compare_optimizers", "limit_norm", "normalized_margin", "steepest_direction"]


def normalized_margin(problem, w, norm="fro"):
    """The margin of ``w`` on a program's inequalities, per unit of ``norm``.

    ``min_k (S_{b_k a_k}(w) - S_{b_k t_k}(w)) / ||w||`` over the inequality
    constraints of ``problem``; the solution of the program in ``norm`` (margin 1)
    attains the largest value, ``1 / ||w^mm||``, among the ``w`` that meet the
    program's equalities.

    Parameters
    ----------
    problem : MaxMarginProblem
    w : ndarray with the problem's shape
    norm : {"fro", "nuclear", "max", "l1"}, default="fro"

    Returns
    -------
    float
        ``nan`` for ``w = 0`` or a program without inequalities.
    """
    c = problem.constraints
    ineq = ~c.equality  # (for a w that meets the equalities, the program's margin)
    size = norm_value(np.reshape(w, problem.shape), norm)
    if size == 0 or not ineq.any():
        return float("nan")
    values = constraint_operator(problem).matvec(np.ravel(w))
    return float(values[ineq].min() / size)


def _ntp_margin(contexts, support, W):
    """The NTP margin ``min_j min_{z in S_j, v not in S_j} (e_z - e_v)^T W h_j`` (every
    pair, so that it does not depend on an anchor when ``W`` misses the equalities)."""
    logits = contexts @ W.T
    low = np.where(support, logits, np.inf).min(axis=1)
    high = np.where(support, -np.inf, logits).max(axis=1)
    has_out = ~support.all(axis=1)
    return float((low - high)[has_out].min()) if has_out.any() else float("nan")


def compare_optimizers(estimator, X, y, *, solvers=None, norms=("fro", "max", "l1"),
                       sample_weight=None):
    """Fit ``estimator`` with each optimizer and compare with the limit of each norm.

    Parameters
    ----------
    estimator : NTPDecoderClassifier
        The configuration to fit (``lr``, ``max_iter``, ...); ``solvers`` replaces
        its ``solver`` and ``lr``.  It is cloned, never fitted in place.  With
        ``compute_limits=False`` the fits skip their own limits (faster); the
        limits of ``norms`` are solved here once either way.
    X, y, sample_weight :
        As for ``estimator.fit``.
    solvers : dict, default=None
        ``{name: params}``, the parameters set on each clone, e.g.
        ``{"GD": {"solver": "gd", "lr": 0.5}, "Adam": {"solver": "adam", "lr": 0.01},
        "Muon": {"solver": "nsd", "descent_norm": "spectral", "power_t": 1/3}}``.
        ``None``: GD (0.5), normalized GD (0.01) and Adam (0.01), the NTP
        paper's App. B.2 settings.
    norms : tuple, default=("fro", "max", "l1")
        The norms of the NTP-SVM solutions to compare with: any of
        :class:`~skntp.svm.MaxMarginProblem`'s (``"fro"``, ``"max"``,
        ``"l1"``, ``"spectral"``, ``"nuclear"``, ``("lp", p)``), each solved to a
        certified relative duality gap of 1e-8 (1e-6 for the spectral norm, whose
        barrier method certifies about 1e-7 in float64).

    Returns
    -------
    dict
        ``solvers`` and ``norms`` (the row and column names); ``alignment``,
        shape ``(n_solvers, n_norms)``: the cosine of ``W - W*`` with each
        norm's ``W^mm`` (the max and l1 solutions, vertices of linear programs,
        need not be unique: read the cosines with them with care);
        ``margin_fraction``: the NTP margin of ``W - W*`` (every in-support
        against every out-of-support token) per unit of each norm, as a
        fraction of that norm's optimum ``1 / ||W^mm||`` (at most 1 for any
        ``W`` that meets the equalities, 1 at the limit); ``limits``: the
        NTP-SVM solution (margin 1) of each norm; ``estimators``: the fitted
        clones.

    Raises
    ------
    NotSeparableError
        When the data are not NTP-separable (no limit in any norm).
    """
    if solvers is None:
        solvers = {"GD": {"solver": "gd", "lr": 0.5}, "NGD": {"solver": "ngd", "lr": 0.01},
                   "Adam": {"solver": "adam", "lr": 0.01}}
    if not isinstance(solvers, dict) or not solvers:
        raise ValueError("solvers must be a non-empty dict {name: parameters}, got "
                         f"{solvers!r}.")
    if not norms:
        raise ValueError("norms must name at least one norm.")
    fitted = {name: clone(estimator).set_params(**params).fit(X, y, sample_weight=sample_weight)
              for name, params in solvers.items()}
    # the distinct contexts and next-token distributions, as the estimator sees them
    data = next(iter(fitted.values()))._prepare(X, y, sample_weight)
    contexts, probs = data["contexts"], data["probs"]
    support = probs > 0 if not sp.issparse(probs) else (probs > 0).tocsr()
    problems = {norm: ntp_svm_problem(contexts, support, norm=norm) for norm in norms}
    # (the core's default tolerance of each norm: 1e-6 for the spectral one)
    limits = {norm: solve_max_margin(problems[norm]).primal for norm in norms}
    alignment = np.zeros((len(fitted), len(norms)))
    fraction = np.zeros_like(alignment)
    dense = support.toarray() if sp.issparse(support) else np.asarray(support)
    finite = None
    for i, est in enumerate(fitted.values()):
        if est.finite_component_ is None and finite is None:  # compute_limits=False
            finite = finite_component(contexts, probs)
        W = est.coef_ - (finite if est.finite_component_ is None else est.finite_component_)
        margin = _ntp_margin(contexts, dense, W)
        for j, norm in enumerate(norms):
            L = limits[norm]
            alignment[i, j] = float(np.sum(W * L) / (np.linalg.norm(W) * np.linalg.norm(L)))
            fraction[i, j] = margin / norm_value(W, norm) * norm_value(L, norm)
    return {"solvers": list(fitted), "norms": list(norms), "alignment": alignment,
            "margin_fraction": fraction, "limits": limits, "estimators": fitted}
