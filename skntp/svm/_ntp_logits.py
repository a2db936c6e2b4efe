"""The NTP-SVM in logit space of NTP with unconstrained features (NTP-UFM).

Zhao, Behnia, Vakilian, Thrampoulidis, "Implicit Geometry of Next-token
Prediction: From Language Sparsity Patterns to Model Representations" (2024).
With trained word embeddings ``W`` (``V x d``) and one free embedding per
distinct context ``H`` (``d x m``), the logits are ``L = W H`` (``V x m``:
**one row per vocabulary token, one column per distinct context**, the
orientation of ``L = W H``; the authors' code stores the transpose).  For ``d``
large enough the weight-decayed cross-entropy is a nuclear-norm-regularized program in ``L``
(``min_{WH = L} (||W||_F^2 + ||H||_F^2) / 2 = ||L||_*``), and as the weight
decay vanishes its solution splits into

* a finite in-support part ``L_in``, the minimum-norm logits whose
  in-support log-ratios are those of ``p_hat`` (:func:`logit_finite_component`);
* a part growing along ``L_mm``, the solution of the logit-space NTP-SVM

  .. math::

      L^{mm} = \\arg\\min_L \\|L\\|_* \\quad\\text{s.t.}\\quad
      (e_z - e_{z'})^T L e_j = 0 \\;(z, z' \\in S_j),\\qquad
      (e_z - e_v)^T L e_j \\ge 1 \\;(z \\in S_j,\\ v \\notin S_j),

  which depends on the supports ``S_j`` only (:func:`ntp_logit_svm`).

The program is the NTP-SVM of :func:`~skntp.svm.ntp_svm_problem` with the
identity as context embeddings (``h_j = e_j``, so ``W = L``) in the nuclear
norm; its answer is certified on those rows by the dispatcher's certificate
(:func:`~skntp.svm._certificate.certify`) like every other program's, whether it
comes from ADMM with singular value thresholding over the classes of equal
contexts and tokens (:mod:`skntp.svm.solvers.svt_admm`), from the compact form
solved by SCS (cvxpy), or from :func:`~skntp.svm.solve_max_margin` on the rows.  Its dual (the
certificate's lower bound) reads ``max <S, Lambda>`` over ``||Lambda||_2 <= 1``,
``1^T Lambda = 0`` and ``Lambda_vj <= 0`` for ``v not in S_j`` (``S`` the
``V x m`` support matrix).

The closed-form proxy of the authors' code (``SVM_thm_sol`` in
``YizeZhao/Next_Token_yz``, ``utils.py``) is the centered support matrix
``(I - 1 1^T / V) S`` (:func:`support_proxy`): it is feasible (margin exactly
1, ties within each support), so its nuclear norm bounds ``||L_mm||_*`` from
above; it is a solution when its polar factor ``U V^T`` is non-positive off
the supports (then ``U V^T`` is a dual point of the same value).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from .._backend import blas_threads
from ._certificate import certify
from ._ntp import exchangeable_tokens, ntp_svm_problem
from ._problem import BilinearScores, MaxMarginResult, real_array
from ._solve import DEFAULT_TOL, solve_max_margin
from .solvers.conic import logit_svm_compact
from .solvers.svt_admm import logit_svm_admm, rows_from_table

__all__ = ["check_support", "logit_finite_component", "ntp_logit_svm",
           "ntp_logit_svm_problem", "support_proxy"]


def check_support(support, name="support"):
    """Validate an ``(m, V)`` support pattern; return it as a dense bool array.

    Parameters
    ----------
    support : array-like or sparse matrix of shape (m, V)
        ``support[j, v]`` nonzero (or True) when token ``v`` is in ``S_j``;
        next-token probabilities may be passed as they are.
    name : str
        The argument's name in messages.

    Returns
    -------
    ndarray of shape (m, V), bool

    Raises
    ------
    ValueError
        Not 2-D, empty, complex or non-finite values, or a context with an
        empty support.
    """
    if sp.issparse(support):
        support = support.toarray()
    arr = np.asarray(support)
    if arr.dtype != bool:
        arr = real_array(arr, name) != 0
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D (m, V) array, got shape "
                         f"{arr.shape}.")
    empty = np.flatnonzero(~arr.any(axis=1))
    if empty.size:
        raise ValueError(f"every context needs at least one in-support token; context(s) "
                         f"{empty[:5].tolist()} have none.")
    return arr


def ntp_logit_svm_problem(support):
    """The logit-space NTP-SVM as a :class:`~skntp.svm.MaxMarginProblem`.

    The NTP-SVM constraints of :func:`~skntp.svm.ntp_svm_problem` (ties
    within ``S_j`` to an anchor, margin 1 to every ``v not in S_j``) on the
    scores ``S[j, v] = L[v, j]`` (context embeddings ``h_j = e_j``), in the
    nuclear norm.

    Parameters
    ----------
    support : array-like or sparse matrix of shape (m, V)
        The supports (:func:`check_support`).

    Returns
    -------
    MaxMarginProblem
        Parameter ``L`` of shape ``(V, m)``.
    """
    s = check_support(support)
    problem = ntp_svm_problem(np.eye(s.shape[0]), s, norm="nuclear")
    return replace(problem, name="logit NTP-SVM",
                   infeasible_message="a support covers the whole vocabulary")


def ntp_logit_svm(support, *, method="auto", tol=None, max_iter=100_000, verbose=0,
                  merge_equal=True, callback=None):
    """Solve the logit-space NTP-SVM: ``L_mm = argmin ||L||_*`` under the margins.

    The diverging direction of the logits of NTP with unconstrained features
    (Zhao et al. 2024, the regularization-path theorem): margin 1 between every
    in-support and every out-of-support token of each context, equal logits
    within a support, minimal nuclear norm.

    Contexts with equal supports, and tokens with equal support columns, are
    merged first (``merge_equal``): the program is invariant under permuting
    such contexts (tokens), so averaging over those permutations (the norm is
    convex) gives a solution constant on each class, ``L = E_t^T K E_c`` with
    ``E_t``, ``E_c`` the class indicators.  Since ``E^T D^{-1/2}`` has
    orthonormal columns (``D`` the class sizes), ``||L||_* = ||D_t^{1/2} K
    D_c^{1/2}||_*``: the program in ``K' = D_t^{1/2} K D_c^{1/2}`` has one row
    per token class and one column per context class, with scores
    ``K'[a, c] / sqrt(n_a n_c)``.  Its solution and multipliers are mapped
    back (the multiplier table ``C[j, v] = C'[c(j), a(v)] / (n_c n_a)`` keeps
    the bound ``r^T lam / ||Lambda||_2``), and the answer is certified again on
    the full program.

    Parameters
    ----------
    support : array-like or sparse matrix of shape (m, V)
        ``support[j, v]`` nonzero when ``v in S_j`` (probabilities may be
        passed; only their support counts).
    method : str, default="auto"
        A method of :func:`~skntp.svm.solve_max_margin` that minimizes the
        nuclear norm.  ``"svt-admm"`` solves the program over the classes by
        ADMM with singular value thresholding (:mod:`skntp.svm.solvers.svt_admm`)
        and ``"scs"`` its compact form (one variable per token class and context
        class, one in-support level per context class) by SCS to
        ``min(1e-10, tol / 100)``; either answer is certified on the full
        program.  ``"auto"`` tries ``"svt-admm"``, then ``"scs"``, then
        :func:`~skntp.svm.solve_max_margin`, until an answer is certified.  On
        random supports at m = V = 1,000, ``"svt-admm"`` was certified in 40.8 s
        and ``"scs"`` in 1,312 s (``benchmarks/README.md``, tables "Logit
        NTP-SVM" and "Logit NTP-SVM, method ``scs``").
    tol : float, default=None
        The certificate's tolerance (``None``: 1e-8).
    max_iter : int, default=100_000
    verbose : int, default=0
    merge_equal : bool, default=True
        Solve the program over the classes of equal contexts and tokens.
    callback : callable, optional
        ``callback(n_iter, gap, violation)`` of :func:`~skntp.svm.solve_max_margin`.

    Returns
    -------
    MaxMarginResult
        ``primal`` is ``L_mm`` of shape ``(V, m)`` (tokens by contexts, margin
        1, not normalized); ``status``, ``gap`` (signed) and ``max_violation``
        are the certificate of the full program, recomputed from its rows.
    """
    s = check_support(support)
    problem = ntp_logit_svm_problem(s)
    kwargs = {"method": method, "tol": tol, "max_iter": max_iter, "verbose": verbose,
              "callback": callback}
    _, first, ctx_class, n_ctx = np.unique(s, axis=0, return_index=True,
                                           return_inverse=True, return_counts=True)
    ctx_class = np.asarray(ctx_class).ravel()
    representative, tok_class, n_tok = exchangeable_tokens(s)
    if not merge_equal:
        ctx_class, n_ctx = np.arange(s.shape[0]), np.ones(s.shape[0], dtype=np.int64)
        representative, tok_class = np.arange(s.shape[1]), np.arange(s.shape[1])
        n_tok, first = np.ones(s.shape[1], dtype=np.int64), np.arange(s.shape[0])
    ctol = DEFAULT_TOL.get("nuclear", 1e-8) if tol is None else tol
    if method in ("auto", "svt-admm"):
        res = _compact_admm(problem, s, first, representative, ctx_class, tok_class, n_ctx,
                            n_tok, ctol, max_iter, verbose, callback)
        if res.status == "optimal" or method == "svt-admm":
            return res
    if method in ("auto", "scs"):
        res = _compact_scs(problem, s, first, representative, ctx_class, tok_class, n_ctx,
                           n_tok, ctol, max_iter, verbose)
        if res is not None and (res.status == "optimal" or method == "scs"):
            if callback is not None:
                callback(res.n_iter, res.gap, res.max_violation)
            return res
    if not merge_equal or (n_ctx.size, n_tok.size) == s.shape:
        return solve_max_margin(problem, **kwargs)
    reduced = ntp_logit_svm_problem(s[first][:, representative])
    q, r = 1.0 / np.sqrt(n_ctx), 1.0 / np.sqrt(n_tok)
    reduced = replace(reduced, scores=BilinearScores(np.diag(q), None, n_outputs=r.size,
                                                     output_scale=r))
    res = solve_max_margin(reduced, **kwargs)
    K = res.primal * r[:, None] * q[None, :]
    primal = K[tok_class][:, ctx_class]
    c = reduced.constraints
    size = n_ctx.size * n_tok.size
    table = (np.bincount(c.block * n_tok.size + c.pos, res.dual, minlength=size)
             - np.bincount(c.block * n_tok.size + c.ref, res.dual, minlength=size))
    table = (table.reshape(n_ctx.size, n_tok.size) / np.outer(n_ctx, n_tok))
    table = table[ctx_class][:, tok_class]
    dual = rows_from_table(problem, table)
    out = MaxMarginResult(primal=primal, dual=dual, method=res.method, status=res.status,
                          n_iter=res.n_iter)
    return certify(problem, out, DEFAULT_TOL.get("nuclear", 1e-8) if tol is None else tol)


def support_proxy(support):
    """The closed-form proxy of ``L_mm``: the centered support matrix.

    ``L_proxy = (I_V - 1 1^T / V) S`` with ``S[v, j] = 1`` when ``v in S_j``:
    in column ``j``, ``1 - k_j / V`` on the support and ``-k_j / V`` off it
    (``k_j = |S_j|``), as in ``SVM_thm_sol`` of the authors' code.  It is
    feasible for the logit-space NTP-SVM with every margin exactly 1.

    Parameters
    ----------
    support : array-like or sparse matrix of shape (m, V)

    Returns
    -------
    ndarray of shape (V, m)
    """
    s = check_support(support).T.astype(float)
    return s - s.mean(axis=0, keepdims=True)


def logit_finite_component(next_token_probs):
    """The finite in-support part ``L_in`` of the NTP-UFM logits.

    The minimum-norm logits whose in-support log-ratios are those of the
    data, ``L[z, j] - L[z', j] = log(p_hat_{zj} / p_hat_{z'j})`` for
    ``z, z' in S_j`` (``compute_L_fin`` of the authors' code): on ``S_j``,
    ``log p_hat_{zj}`` minus its mean over ``S_j``; 0 off the support.

    Parameters
    ----------
    next_token_probs : array-like or sparse matrix of shape (m, V)
        Non-negative; rows need not be normalized (ratios only).

    Returns
    -------
    ndarray of shape (V, m)
    """
    p = next_token_probs.toarray() if sp.issparse(next_token_probs) else next_token_probs
    p = real_array(p, "next_token_probs")
    if p.ndim != 2 or p.size == 0:
        raise ValueError(f"next_token_probs must be a non-empty 2-D (m, V) array, got "
                         f"shape {p.shape}.")
    if np.any(p < 0):
        raise ValueError("next_token_probs must be non-negative.")
    s = check_support(p, "next_token_probs")
    logp = np.where(s, np.log(np.where(s, p, 1.0)), 0.0)
    mean = logp.sum(axis=1, keepdims=True) / s.sum(axis=1, keepdims=True)
    return np.where(s, logp - mean, 0.0).T


def _compact_scs(problem, s, first, representative, ctx_class, tok_class, n_ctx, n_tok, tol,
                 max_iter, verbose):
    """The program in its compact form, solved by SCS
    (:func:`~skntp.svm.solvers.conic.logit_svm_compact`), certified on ``problem``.

    The answer is made exactly feasible (each context's level the
    mean of its in-support logits, the others clipped below it, each column
    centered), and the
    multipliers ``M`` of the two constraint blocks give the dual matrix
    ``Lambda = M / (n_a n_c)`` expanded to the classes, clipped to ``<= 0`` off
    the supports and re-centered on them (``1^T Lambda = 0``); the dispatcher's
    certificate (:func:`~skntp.svm._certificate.certify`) then decides.  ``None``
    if SCS fails.
    """
    inside = s[first][:, representative].T  # (token classes, context classes)
    solved = logit_svm_compact(inside, n_tok, n_ctx, tol, max_iter, verbose)
    if solved is None:
        return None
    K, M, n_iter = solved
    S_full = s.T
    L = K[tok_class][:, ctx_class]
    lev = np.where(S_full, L, 0.0).sum(axis=0) / S_full.sum(axis=0)
    L = np.where(S_full, lev[None, :], np.minimum(L, lev[None, :] - 1.0))
    L = L - L.mean(axis=0)  # feasible still, and ||(I - 1 1^T / V) L||_* <= ||L||_*
    M = (M / np.outer(n_tok, n_ctx))[tok_class][:, ctx_class]
    best = None
    for sign in (1.0, -1.0):
        Lam = np.where(S_full, sign * M, np.minimum(sign * M, 0.0))
        Lam = Lam - np.where(S_full, Lam.sum(axis=0) / S_full.sum(axis=0), 0.0)
        value = float(np.sum(Lam[S_full]))
        if best is None or value > best[0]:
            best = (value, Lam)
    dual = rows_from_table(problem, best[1].T)
    out = MaxMarginResult(primal=L, dual=dual, method="scs", status="max_iter",
                          n_iter=n_iter)
    return certify(problem, out, tol)


def _compact_admm(problem, s, first, representative, ctx_class, tok_class, n_ctx, n_tok, tol,
                  max_iter, verbose, callback):
    """The program over the classes by ADMM (:mod:`.solvers.svt_admm`), certified on ``problem``.

    The class logits ``K`` and dual entries are expanded to the ``V x m``
    matrices (``L[v, j] = K[a(v), c(j)]``), the multipliers of the anchored rows
    read from the dual matrix, and the dispatcher's certificate
    (:func:`~skntp.svm._certificate.certify`) decides on the full program's rows.
    The columns of ``L`` are centered (feasible still, and ``||(I - 1 1^T / V)
    L||_* <= ||L||_*``).
    """
    inside = s[first][:, representative].T  # (token classes, context classes)
    with blas_threads(0):  # one BLAS thread (see svt_admm.solve)
        K, Lam, n_iter, _ = logit_svm_admm(inside, n_tok, n_ctx, tol=tol, max_iter=max_iter,
                                           verbose=verbose, callback=callback)
        primal = K[tok_class][:, ctx_class]
        primal = primal - primal.mean(axis=0)
        table = Lam[tok_class][:, ctx_class].T
        out = MaxMarginResult(primal=primal, dual=rows_from_table(problem, table),
                              method="svt-admm", status="max_iter", n_iter=n_iter)
        return certify(problem, out, tol)
