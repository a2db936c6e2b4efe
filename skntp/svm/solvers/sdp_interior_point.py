"""The nuclear-norm max-margin program, by a primal-dual interior-point method.

Why not a library: a generic SDP solver forms the Schur complement in
``O(m N^4)``.  On the nuclear ATT-SVM with n = 50, T = 10, d = 32 the whole call
takes 0.136 s (median of 5 seeds) against 9.01 s for cvxpy with Clarabel written
as in the authors' code, 9.47 s for ``method="cvxpy"``, and 1.15 s for SCS, whose
optimal values are off by up to 8.1e-6 (``benchmarks/README.md``, table
"Nuclear speed").

Gradient descent on the factors ``W = Q K^T`` of attention converges in
direction to the solution of

.. math::

    \\min_W \\|W\\|_* \\quad\\text{s.t.}\\quad
    z_i^T W (x_{i\\alpha_i} - x_{it}) \\ge 1 \\quad (t \\ne \\alpha_i)

("Transformers as Support Vector Machines", Tarzanagh, Li, Thrampoulidis,
Oymak, 2023: Thm. 2 and eq. (Kqq-SVM)); gradient descent on ``W`` itself goes
to the same program with ``||W||_F`` (:func:`~skntp.svm.att_svm_w`).  With
``G_j = z_j a_j^T`` the constraint matrices (rank one) and ``N = k + d``, the
program is the semidefinite program

.. math::

    \\min \\tfrac12 \\operatorname{tr} X \\quad\\text{s.t.}\\quad
    \\langle A_j, X\\rangle \\ge b_j,\\ X = \\begin{pmatrix} Y_1 & W \\\\ W^T & Y_2
    \\end{pmatrix} \\succeq 0,\\qquad A_j = \\tfrac12 (e_j f_j^T + f_j e_j^T),

``e_j = (z_j, 0)``, ``f_j = (0, a_j)``, with dual ``max b^T y`` s.t.
``1/2 I - sum_j y_j A_j \\succeq 0`` (that is ``||sum_j y_j G_j||_2 <= 1``),
``y >= 0``.  The method is the infeasible primal-dual path-following method
with the HKM direction and Mehrotra's predictor-corrector.  Since every
``A_j`` has rank two, the Schur complement ``H_jl = tr(A_j X A_l S^{-1})`` is
four Hadamard products of ``m x m`` Gram matrices, ``O(m N^2 + m^2 N)`` to
form, against ``O(m N^4)`` for a generic SDP solver; one iteration costs one
``m x m`` Cholesky factorization.

Every iterate is certified as the fast methods are: ``W`` is scaled to exact
feasibility, the multipliers ``y`` into the dual's feasible set, and the
relative gap of the two values is reported (:func:`~skntp.svm._norms.norm_gap`).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from .._problem import MaxMarginResult, QueryKeyScores, check_program_size

__all__ = ["nuclear_certificate", "solve"]


_STEP = 0.95
#: interior-point iterations are few (20-40); more means the method stalls
_MAX_ITER = 200


def _rank_one_factors(problem):
    """``(z, a, b)``: the constraint ``j`` reads ``z_j^T W a_j >= b_j``."""
    sc, c = problem.scores, problem.constraints
    X, Z = sc.tokens, sc.queries
    a = X[c.block, c.pos]
    two = c.ref >= 0
    a[two] -= X[c.block[two], c.ref[two]]
    return Z[c.block], a, c.rhs


def nuclear_certificate(z, a, b, W, y):
    """Certified bounds of ``min ||W||_*`` s.t. ``z_j^T W a_j >= b_j`` (``b >= 0``).

    ``W`` is scaled by the smallest factor that makes every constraint with
    ``b_j > 0`` hold exactly (violations of those with ``b_j = 0`` are
    reported); ``y`` is clipped at 0 and scaled to ``||sum_j y_j z_j a_j^T||_2 = 1``.

    Returns
    -------
    W : ndarray of shape (k, d)
        The scaled primal point.
    y : ndarray of shape (m,)
        The scaled dual point.
    gap : float
        ``(||W||_* - b^T y) / ||W||_*``: the relative distance of either value
        to the optimum is at most this.
    violation : float
        Largest violation of the constraints with ``b_j = 0``.
    """
    vals = _bilinear(z, W, a)
    pos = b > 0
    if pos.any():
        if not (vals[pos] > 0).all():
            return W, y, float("inf"), float(np.max(b[pos] - vals[pos]))
        scale = float(np.max(b[pos] / vals[pos]))
        W, vals = W * scale, vals * scale
    violation = float(np.max(-vals[~pos], initial=0.0))
    y = np.maximum(y, 0.0)
    M = z.T @ (y[:, None] * a)
    spec = float(np.linalg.norm(M, 2))
    nuc = float(np.linalg.svd(W, compute_uv=False).sum())
    if nuc == 0.0:
        return W, y, 0.0, violation
    if spec == 0.0:
        return W, y, 1.0, violation
    y = y / spec
    return W, y, float((nuc - b @ y) / nuc), violation


def _bilinear(z, W, a):
    """``z_j^T W a_j`` for every row ``j``."""
    return np.sum((z @ W) * a, axis=1)


def _max_step(L, D):
    """Largest ``t <= 1`` with ``L L^T + t D`` positive definite (``L`` Cholesky)."""
    Li = sla.solve_triangular(L, np.eye(L.shape[0]), lower=True, check_finite=False)
    e = np.linalg.eigvalsh(Li @ D @ Li.T)[0]
    return 1.0 if e >= -1.0 else -1.0 / e


def _max_step_vec(x, dx):
    neg = dx < 0
    return min(1.0, float(np.min(-x[neg] / dx[neg]))) if neg.any() else 1.0


def _predictor_corrector(X, S, y, s, b, A_op, A_adj, grams):
    """One Mehrotra predictor-corrector step with the HKM direction.

    Returns the next ``(X, S, y, s)``, the primal and dual step lengths and the
    complementarity ``mu`` of the current point; ``None`` when a factorization
    fails (the iterates lost definiteness to roundoff).
    """
    N, m = X.shape[0], y.shape[0]
    r_p = b + s - A_op(X)
    R_d = 0.5 * np.eye(N) - A_adj(y) - S
    mu = (np.sum(X * S) + s @ y) / (N + m)
    try:
        Ls = np.linalg.cholesky(S)
        Lx = np.linalg.cholesky(X)
    except np.linalg.LinAlgError:
        return None
    Linv = sla.solve_triangular(Ls, np.eye(N), lower=True, check_finite=False)
    Ti = Linv.T @ Linv  # S^{-1}
    EXE, FXF, EXF = grams(X)
    ETE, FTF, ETF = grams(Ti)
    # H_jl = tr(A_j X A_l S^{-1}), A_j = (e_j f_j^T + f_j e_j^T) / 2
    H = 0.25 * (EXF.T * ETF + FXF * ETE + EXE * FTF + EXF * ETF.T)
    H[np.diag_indices(m)] += s / y
    try:
        Hc = sla.cho_factor(H, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    XRT = X @ R_d @ Ti

    def direction(Rc, rc_s):
        rhs = r_p - A_op(Rc @ Ti) + A_op(XRT) + rc_s / y
        dy = sla.cho_solve(Hc, rhs, check_finite=False)
        dS = R_d - A_adj(dy)
        dX = (Rc - X @ dS) @ Ti
        dX = 0.5 * (dX + dX.T)
        ds = (rc_s - s * dy) / y
        return dX, dy, dS, ds

    def steps(dX, dy, dS, ds):
        ap = min(_max_step(Lx, dX), _max_step_vec(s, ds))
        ad = min(_max_step(Ls, dS), _max_step_vec(y, dy))
        return ap, ad

    XS = X @ S
    dX, dy, dS, ds = direction(-XS, -s * y)
    ap, ad = steps(dX, dy, dS, ds)
    mu_aff = (np.sum((X + ap * dX) * (S + ad * dS)) + (s + ap * ds) @ (y + ad * dy)) / (N + m)
    sigma = min(1.0, (mu_aff / mu) ** 3)
    Rc = sigma * mu * np.eye(N) - XS - dX @ dS
    rc_s = sigma * mu - s * y - ds * dy
    dX, dy, dS, ds = direction(Rc, rc_s)
    ap, ad = steps(dX, dy, dS, ds)
    ap, ad = min(1.0, _STEP * ap), min(1.0, _STEP * ad)
    X = X + ap * dX
    s = s + ap * ds
    S = S + ad * dS
    y = y + ad * dy
    S = 0.5 * (S + S.T)
    X = 0.5 * (X + X.T)
    return X, S, y, s, ap, ad, mu


def solve(problem, tol, max_iter, be, verbose, callback=None, *, frobenius):
    sc, c = problem.scores, problem.constraints
    if (problem.norm != "nuclear" or not isinstance(sc, QueryKeyScores)
            or c.equality.any() or (c.rhs < 0).any()):
        return None
    z, a, b = _rank_one_factors(problem)
    m, k = z.shape
    d = a.shape[1]
    N = k + d
    # a dozen m x m matrices (the Schur complement, its factor, the Gram products)
    check_program_size(problem.name, m, "the interior-point method stores m x m matrices; "
                       "use fewer inputs or tokens, or method='cvxpy'.",
                       bytes_per_constraint=12 * 8 * (m + N))
    X, S = np.eye(N), np.eye(N)
    y, s = np.ones(m), np.ones(m)
    best = None
    it = 0
    status = "max_iter"

    def A_op(Y):  # <A_j, Y> = (z_j^T Y_12 a_j + a_j^T Y_21 z_j) / 2 for any square Y
        return 0.5 * (_bilinear(z, Y[:k, k:], a) + _bilinear(a, Y[k:, :k], z))

    def A_adj(v):  # sum_j v_j A_j = [[0, G], [G^T, 0]] / 2, G = sum_j v_j z_j a_j^T
        G = z.T @ (v[:, None] * a)
        out = np.zeros((N, N))
        out[:k, k:], out[k:, :k] = 0.5 * G, 0.5 * G.T
        return out

    def grams(Y):  # (e_j^T Y e_l, f_j^T Y f_l, e_j^T Y f_l) for symmetric Y
        zY = z @ Y[:k]
        return zY[:, :k] @ z.T, a @ Y[k:, k:] @ a.T, zY[:, k:] @ a.T

    for it in range(1, min(max_iter, _MAX_ITER) + 1):
        # certificate of the current iterate
        W = X[:k, k:]
        cert = nuclear_certificate(z, a, b, W, y)
        if callback is not None:
            callback(it, cert[2], cert[3])
        if best is None or cert[2] < best[2]:
            best = cert
        if cert[2] <= tol and cert[3] <= tol:
            status = "optimal"
            break
        step = _predictor_corrector(X, S, y, s, b, A_op, A_adj, grams)
        if step is None:  # lost definiteness to roundoff
            break
        X, S, y, s, ap, ad, mu = step
        if max(ap, ad) < 1e-10:
            break
        if verbose:
            print(f"nuclear-ipm {it:3d}: mu {mu:.2e} gap {cert[2]:.2e} "
                  f"steps {ap:.2f} {ad:.2f}")
    W, ycert, gap, violation = best
    if status != "optimal":
        # the method diverges on an infeasible program rather than certify it; the
        # Frobenius program on the same constraints certifies it (a Farkas ray)
        frobenius(problem)
    return MaxMarginResult(primal=W, dual=ycert, method="nuclear-ipm",
                           status=status if gap <= tol else "max_iter", n_iter=it,
                           gap=gap, max_violation=violation)

