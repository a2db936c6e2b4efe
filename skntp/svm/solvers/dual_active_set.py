"""The method ``"dual-active-set"``: Goldfarb & Idnani (1983) for the identity Hessian.

Key-score programs without equalities (ATT-SVM, relaxed ATT-SVM, the head SVM)
in a parameter of at most 2000 entries, ``min ||p|| s.t. G p >= h``: the
method starts at ``p = 0`` and adds the most violated constraint one at a
time, dropping active constraints whose multipliers would turn negative, with
rank-one updates of a triangular factor.  It is exact (the answer is a vertex
of the dual, not a point within a tolerance).

Why not a library: cvxpy with Clarabel, an interior-point method, stops at its
tolerance and is slow on these programs of a small parameter and many
constraints.  On ATT-SVM with n = 1000, T = 16, d = 64 this method takes 0.023 s
against 3.99 s for Clarabel and 1.80 s for ``LinearSVC(loss="hinge", C=1e6)``;
at n = 10 000 (150 000 constraints) 0.158 s against 62.4 s; on the head SVM
(n = 1000, d = 64) 0.004-0.007 s against 0.104-0.147 s (``benchmarks/README.md``,
table "Max-margin core").
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.blas import daxpy, dger

from .._problem import KeyScores, MaxMarginResult, NotSeparableError
from .least_distance import KeyRows
from .nnls_working_set import MAX_DIM

__all__ = ["solve"]



class _Infeasible(Exception):
    """Raised by :func:`_dual_active_set` on a proof of infeasibility, with its Farkas
    multipliers (one per constraint) in ``ray``."""

    def __init__(self, ray):
        super().__init__()
        self.ray = ray


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
    rows : KeyRows
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
            ray = np.zeros(m)
            ray[zero & (h > 0)] = 1.0  # 0 >= h_i > 0
            raise _Infeasible(ray)
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
                    # n_p = sum_k r_k n_act[k] with every r_k <= 0: the normalized
                    # rows p and act[k] with multipliers 1 and -r_k cancel, and their
                    # right-hand sides sum to -sp > 0 (Farkas), back on the raw rows
                    ray = np.zeros(m)
                    ray[p] = 1.0
                    if q:
                        ray[act[:q]] = -r
                    raise _Infeasible(ray * inv)
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


def solve(problem, tol, max_iter, be, verbose, callback=None):
    c = problem.constraints
    if not isinstance(problem.scores, KeyScores) or c.equality.any():
        return None
    d = int(np.prod(problem.shape))
    if d > MAX_DIM:
        return None
    m, h = len(c), c.rhs
    rows = KeyRows(problem)
    try:
        out = _dual_active_set(rows, h, d)
    except _Infeasible as found:
        exc = NotSeparableError(
            f"{problem.name} is infeasible (dual active set: a violated constraint is a "
            f"non-positive combination of active ones, the dual is unbounded): "
            f"{problem.infeasible_message}."
        )
        exc.ray = found.ray  # its Farkas multipliers, checked by the dispatcher
        raise exc from None
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

