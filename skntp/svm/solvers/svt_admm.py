"""The logit-space NTP-SVM of NTP-UFM by ADMM with singular value thresholding.

Why not a library: cvxpy writes the program as a semidefinite program with an
``(m + V)``-square cone variable.  On random supports (density 0.3) at m = V =
1,000 this method is certified (gap 1.6e-9) in 40.8 s, where SCS through cvxpy at
its default tolerance was stopped after 300 s in the same run; at m = V = 60 it
takes 0.27 s against 176 s for Clarabel (``benchmarks/README.md``, table "Logit
NTP-SVM").  SCS to ``eps = 1e-10`` (``method="scs"``) took 1,312 s at m = V =
1,000 (table "Logit NTP-SVM, method ``scs``").

The program (Zhao et al. 2024, the logit-space NTP-SVM; module docstring of
:mod:`skntp.svm._ntp_logits`) on the ``V x m`` logits ``L``:

.. math::

    \\min_L \\|L\\|_* \\quad\\text{s.t.}\\quad L \\in C = \\{L:\\;
    L_{zj} = c_j \\ (z \\in S_j),\\; L_{vj} \\le c_j - 1 \\ (v \\notin S_j)
    \\text{ for some } c \\in \\mathbb{R}^m\\}.

Douglas-Rachford splitting (ADMM on ``X = Z``) of ``||X||_* + i_C(Z)``
with over-relaxation ``alpha``, from the support proxy:

* ``X = prox_{||.||_* / rho}(Z - U)``: singular value thresholding at
  ``1 / rho``, computed from the eigendecomposition of the smaller Gram
  matrix (only singular values above the threshold are used);
* ``Z = Pi_C(alpha X + (1 - alpha) Z + U)``: the projection onto ``C``
  splits by column; in column ``j`` the level ``c_j`` minimizes a convex
  piecewise quadratic, ``c_j = (sum_{S_j} y + sum_{active} (y_v + 1)) /
  (|S_j| + |active|)`` with ``active = {v not in S_j: y_v + 1 > c_j}``, a
  prefix of the sorted ``y_v + 1``;
* ``U <- U + alpha X + (1 - alpha) Z_old - Z``.

Every iterate ``Z`` is exactly feasible, and ``Lambda = rho (Z - U - X)`` is a
subgradient of ``||.||_*`` at ``X`` (``||Lambda||_2 <= 1``).  Made dual feasible
(clipped to ``<= 0`` off the supports, re-centered on them so that
``1^T Lambda = 0``), it gives the lower bound ``<S, Lambda> / ||Lambda||_2`` of
the dual ``max <S, Lambda>`` over ``||Lambda||_2 <= 1``, ``1^T Lambda = 0``,
``Lambda_vj <= 0`` off the supports.  The method stops when the relative gap
``(||Z||_* - <S, Lambda> / ||Lambda||_2) / ||Z||_*`` is below half the
tolerance; the dispatcher's certificate (:mod:`skntp.svm._certificate`)
decides on the program's rows.

Classes of equal contexts and of equal tokens (counts ``n_c``, ``n_a``) are
solved in the weighted variable ``K' = D_t^{1/2} K D_c^{1/2}`` of
:func:`~skntp.svm.ntp_logit_svm` (``||L||_* = ||K'||_*``); the projection is
then weighted by the token counts.  The penalty starts at ``rho = 1.8 /
mean(sigma(proxy))`` (on random supports at m = V = 20 to 1,000 the gap fell
below 5e-9 in 55 to 60 iterations from there) and is halved or
doubled when the primal and dual residuals are more than a hundred times apart.
"""

from __future__ import annotations

import numpy as np

from .._problem import BilinearScores, MaxMarginResult

__all__ = ["logit_svm_admm", "rows_from_table", "solve"]

#: over-relaxation of the Douglas-Rachford step
ALPHA = 1.7
#: the penalty's start, in units of 1 / (mean singular value of the proxy)
RHO_SCALE = 1.8
#: iterations between two estimates of the duality gap
CHECK_EVERY = 5
#: the penalty is doubled (halved) when the primal (dual) residual, summed over
#: ``4 * CHECK_EVERY`` iterations, exceeds the other this many times
BALANCE = 100.0


def rows_from_table(problem, table):
    """The multipliers of the anchored rows from the ``(m, V)`` dual matrix ``Lambda^T``.

    The equality ``(z, anchor)`` of context ``j`` carries ``table[j, z]``; the
    inequality ``(anchor, v)`` carries ``-table[j, v]`` (``>= 0`` where
    ``Lambda_vj <= 0``).
    """
    c = problem.constraints
    return np.where(c.equality, table[c.block, c.pos], -table[c.block, c.ref])


def _logit_support(problem):
    """The ``(m, V)`` support of a logit-space NTP-SVM, or ``None`` for any other program.

    The program must be the one :func:`~skntp.svm.ntp_logit_svm_problem`
    builds: nuclear norm, identity context embeddings, and per context one
    anchor, equalities ``(z, anchor) = 0`` and inequalities ``(anchor, v) >= 1``
    that together name every token once.
    """
    sc, c = problem.scores, problem.constraints
    if (problem.norm != "nuclear" or not isinstance(sc, BilinearScores)
            or sc.outputs is not None or sc.output_scale is not None or len(c) == 0):
        return None
    m, V = sc.queries.shape[0], sc.n_positions
    if sc.queries.shape != (m, m) or not np.array_equal(sc.queries, np.eye(m)):
        return None
    eq = c.equality
    if (np.any(c.rhs[eq] != 0) or np.any(c.rhs[~eq] != 1) or np.any(c.ref < 0)
            or np.any(c.block >= m)):
        return None
    anchor = np.full(m, -1)
    anchor[c.block[eq]] = c.ref[eq]
    anchor[c.block[~eq]] = c.pos[~eq]
    if (np.any(anchor < 0) or np.any(anchor[c.block[eq]] != c.ref[eq])
            or np.any(anchor[c.block[~eq]] != c.pos[~eq])):
        return None
    count = np.zeros((m, V), dtype=np.int64)
    np.add.at(count, (c.block[eq], c.pos[eq]), 1)
    np.add.at(count, (np.arange(m), anchor), 1)
    np.add.at(count, (c.block[~eq], c.ref[~eq]), 1)
    if np.any(count != 1):
        return None
    support = np.zeros((m, V), dtype=bool)
    support[c.block[eq], c.pos[eq]] = True
    support[np.arange(m), anchor] = True
    return support


def solve(problem, tol, max_iter, be, verbose, callback=None):
    """ADMM (method ``"svt-admm"``) for the logit-space NTP-SVM; declines any other program."""
    support = _logit_support(problem)
    if support is None:
        return None
    K, Lam, n_iter, converged = logit_svm_admm(support.T, tol=tol, max_iter=max_iter,
                                               verbose=verbose, callback=callback)
    return MaxMarginResult(primal=K, dual=rows_from_table(problem, Lam.T), method="svt-admm",
                           status="optimal" if converged else "max_iter", n_iter=n_iter)


solve.blas_threads = 1  # one thread: the products are large, but two busy cores stall the pool


def _project(Y, inside, wt, scale):
    """``Pi_C`` in the weighted variable: per column, ``K = where(S, c, min(u, c - 1))``.

    ``Y`` is ``K'``; ``u = Y / scale`` with ``scale = sqrt(n_a n_c)``; the level
    ``c`` of each column minimizes ``sum_a n_a (K_a - u_a)^2`` (``wt = n_a``).
    Returns ``K'`` of the projection and ``K``.  The columns are sorted as
    contiguous rows of the transpose.
    """
    u = Y / scale
    uT, inT = u.T, inside.T
    m = uT.shape[0]
    t = np.where(inT, -np.inf, uT + 1.0)
    if np.all(wt == 1):
        k = inT.sum(axis=1).astype(float)
        s_in = np.where(inT, uT, 0.0).sum(axis=1)
        ts = -np.sort(-t, axis=1)
        finite = np.isfinite(ts)
        cum_w = np.cumsum(finite, axis=1, dtype=float)
    else:
        w = np.broadcast_to(wt[None, :], t.shape)
        k = np.where(inT, w, 0.0).sum(axis=1)
        s_in = np.where(inT, w * uT, 0.0).sum(axis=1)
        order = np.argsort(-t, axis=1, kind="stable")
        ts = np.take_along_axis(t, order, axis=1)
        finite = np.isfinite(ts)
        cum_w = np.cumsum(np.where(finite, np.take_along_axis(w, order, axis=1), 0.0), axis=1)
    # cum_t: the weighted sums of the sorted values (weights as increments of cum_w)
    ws = np.diff(cum_w, axis=1, prepend=0.0)
    cum_t = np.cumsum(ws * np.where(finite, ts, 0.0), axis=1)
    level = np.hstack([(s_in / k)[:, None], (s_in[:, None] + cum_t) / (k[:, None] + cum_w)])
    above = np.hstack([np.full((m, 1), np.inf), ts])
    below = np.hstack([ts, np.full((m, 1), -np.inf)])
    # the prefix whose level lies between its last and the next value (rounding: nearest)
    miss = np.maximum(level - above, 0.0) + np.maximum(below - level, 0.0)
    c = level[np.arange(m), np.argmin(miss, axis=1)]
    K = np.where(inside, c[None, :], np.minimum(u, c[None, :] - 1.0))
    return K * scale, K


def _svt(A, tau):
    """``(X, nuclear norm of X)``, ``X`` the singular value thresholding of ``A`` at ``tau``.

    From the eigendecomposition of the smaller Gram matrix: singular values
    above ``tau`` only, whose relative accuracy the Gram matrix keeps.
    """
    tall = A.shape[0] >= A.shape[1]
    G = A.T @ A if tall else A @ A.T
    ev, Q = np.linalg.eigh(G)
    sig = np.sqrt(np.maximum(ev, 0.0))
    keep = sig > tau
    Qk, sk = Q[:, keep], sig[keep]
    shrink = 1.0 - tau / sk
    X = (A @ (Qk * shrink)) @ Qk.T if tall else (Qk * shrink) @ (Qk.T @ A)
    return X, float(np.sum(sk - tau))


def _dual_feasible(Lam, inside, rt, scale):
    """``Lambda'`` made dual feasible: ``<= 0`` off the supports, ``1^T Lambda = 0``.

    In full coordinates ``Lambda[v, j] = Lambda'[a, c] / sqrt(n_a n_c)``: the
    clip keeps signs, and each column is shifted by a constant on its support
    (``rt = sqrt(n_a)``).
    """
    Lam = np.where(inside, Lam, np.minimum(Lam, 0.0))
    full = Lam / scale
    w = (rt ** 2)[:, None]
    shift = (w * full).sum(axis=0) / np.where(inside, w, 0.0).sum(axis=0)
    return Lam - np.where(inside, shift[None, :] * scale, 0.0)


def _spectral_norm(A):
    """``||A||_2`` from the largest eigenvalue of the smaller Gram matrix."""
    G = A.T @ A if A.shape[0] >= A.shape[1] else A @ A.T
    return float(np.sqrt(max(np.linalg.eigvalsh(G)[-1], 0.0)))


def logit_svm_admm(inside, n_tok=None, n_ctx=None, *, tol=1e-8, max_iter=10_000, verbose=0,
                   callback=None):
    """Solve the (class-merged) logit-space NTP-SVM by ADMM; see the module docstring.

    Parameters
    ----------
    inside : ndarray of shape (a, c), bool
        ``inside[t, k]``: token class ``t`` is in the support of context class ``k``.
    n_tok, n_ctx : ndarray of shape (a,) and (c,), optional
        Class sizes (``None``: ones, the program itself).
    tol : float, default=1e-8
        The method stops when its relative duality gap is below ``tol / 2``.
    max_iter : int, default=10_000
    verbose : int, default=0
        Print every computed gap (``> 1``: every estimate too).
    callback : callable, optional
        ``callback(n_iter, gap, violation)`` at every exact gap (violation 0: the
        iterate is feasible by construction).

    Returns
    -------
    K : ndarray of shape (a, c)
        The logits of each token class in each context class (feasible).
    Lam : ndarray of shape (a, c)
        The dual matrix's entry for each pair of classes (dual feasible,
        unscaled: the bound is ``<S, Lambda> / ||Lambda||_2`` on the expanded
        matrix).
    n_iter : int
    converged : bool
        The relative gap is below ``tol / 2``.
    """
    inside = np.asarray(inside, dtype=bool)
    a, c = inside.shape
    n_tok = np.ones(a) if n_tok is None else np.asarray(n_tok, dtype=float)
    n_ctx = np.ones(c) if n_ctx is None else np.asarray(n_ctx, dtype=float)
    rt = np.sqrt(n_tok)
    scale = np.outer(rt, np.sqrt(n_ctx))
    wS = np.where(inside, scale, 0.0)  # <S, Lambda> = sum(wS * Lambda')
    # the support proxy (columns centered in the full coordinates)
    ins = inside.astype(float)
    K0 = ins - (n_tok @ ins / n_tok.sum())[None, :]
    Z = K0 * scale
    sig = np.linalg.svd(Z, compute_uv=False)
    rho = RHO_SCALE / max(float(sig.mean()), np.finfo(float).tiny)
    U = np.zeros_like(Z)
    best = (np.inf, K0, np.zeros_like(Z))
    n_iter, converged = 0, False
    r_sum = d_sum = 0.0
    while n_iter < max_iter:
        n_iter += 1
        A = Z - U
        X, nuc = _svt(A, 1.0 / rho)
        Lam = rho * (A - X)
        Z_old = Z
        relaxed = ALPHA * X + (1.0 - ALPHA) * Z_old
        Z, K = _project(relaxed + U, inside, n_tok, scale)
        U = U + relaxed - Z
        r_sum += float(np.linalg.norm(X - Z))
        d_sum += rho * float(np.linalg.norm(Z - Z_old))
        if n_iter % CHECK_EVERY and n_iter < max_iter:
            continue
        Lam = _dual_feasible(Lam, inside, rt, scale)
        value = float(np.sum(wS * Lam))
        estimate = (nuc - value) / nuc if nuc > 0 else 0.0  # X = 0: compute the gap
        if verbose > 1:
            print(f"svt-admm {n_iter}: rho {rho:.3g}, estimated gap {estimate:.2e}")
        if abs(estimate) <= tol / 4 or n_iter >= max_iter:
            primal = float(np.linalg.svd(Z, compute_uv=False).sum())
            norm = _spectral_norm(Lam)
            bound = value / norm if norm > 0 and value > 0 else 0.0
            gap = (primal - bound) / primal if primal > 0 else 0.0
            if callback is not None:
                callback(n_iter, gap, 0.0)
            if verbose:
                print(f"svt-admm {n_iter}: gap {gap:.2e}")
            if abs(gap) < best[0]:
                best = (abs(gap), K, Lam)
            if abs(gap) <= tol / 2:
                converged = True
                break
        if n_iter % (4 * CHECK_EVERY) == 0:
            if r_sum > BALANCE * d_sum:
                rho, U = 2 * rho, U / 2
            elif d_sum > BALANCE * r_sum:
                rho, U = rho / 2, 2 * U
            r_sum = d_sum = 0.0
    _, K, Lam = best
    return K, Lam / scale, n_iter, converged
