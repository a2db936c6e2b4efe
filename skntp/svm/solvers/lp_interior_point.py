"""The max-norm program of a linear decoder, by a structured interior-point method.

Why not a library: HiGHS and Clarabel factor the program as a sparse one and
pay for the fill-in of its dense rows.  On the max-norm NTP-SVM with d = 128,
V = 50 this method takes 4.65 s at m = 200 against 106.10 s for Clarabel (gap
3.4e-4), and 21.06 s at m = 1000, where Clarabel fails after 241.05 s
(``benchmarks/README.md``, table "Norms, quiet").  HiGHS, in another run, takes
60.8 s at m = 200.

Sign descent and Adam without epsilon-dominance converge in direction to the
entrywise max-norm max-margin solution (Fan, Schmidt, Thrampoulidis 2025); on
next-token data that is the NTP-SVM (Thrampoulidis 2024, eq. (4a)-(4b)) in
``||W||_max``,

.. math::

    \\min_W \\|W\\|_{\\max} \\quad\\text{s.t.}\\quad
    (e_z - e_{z_j})^T W h_j = 0 \\ (z \\in S_j),\\qquad
    (e_{z_j} - e_v)^T W h_j \\ge 1 \\ (v \\notin S_j),

a linear program with ``V d`` variables and ``m (V - 1)`` rows of ``2 d``
nonzeros each.  Generic solvers (HiGHS, Clarabel) factor it as a sparse
program and pay for the fill-in of those dense rows.  This method writes it
with one *level* ``a_j = e_{z_j}^T W h_j`` per context:

.. math::

    \\min t \\quad\\text{s.t.}\\quad a_j - w_v^T h_j \\ge 1\\ (v \\notin S_j),\\quad
    w_z^T h_j - a_j = 0\\ (z \\in S_j),\\quad -t \\le W_{vk} \\le t,

where every row touches a single token's ``w_v`` (and one level).  In the
Newton system of a primal-dual interior-point method the ``W`` block is then
block diagonal, one ``d x d`` block per token, and so is the block of the
equality multipliers once ``W`` is eliminated; eliminating both leaves one
dense system in the ``m + 1`` levels and ``t``.  One iteration costs
``O(V d m^2 + (sum_j |S_j|) m^2)`` in large matrix products, against the
factorization of a ``(V d + m V)``-row sparse system with dense fill for a
generic solver.  The method is Mehrotra's predictor-corrector on this form,
in one BLAS thread.

The same form serves every program of linear-decoder scores whose rows, in
each block, all involve one token of the block (its *anchor*, a star), such as
the Crammer-Singer multiclass SVM; other programs are declined.  Every answer
is certified as the HiGHS path's is: ``W`` scaled to exact feasibility of the
inequalities and the relative duality gap of the multipliers
(:func:`~skntp.svm._norms.norm_gap`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg import lapack
from scipy.sparse.linalg import lsmr

from .._problem import BilinearScores, available_memory, constraint_operator
from .highs import certified_lp

#: Mehrotra's predictor-corrector needs 20-60 iterations; more means it stalls.
_MAX_ITER = 150
#: complementarity (1 at the start) beyond which the iterates diverge: on an infeasible
#: program the dual objective grows without bound
_DIVERGED = 1e8
#: relative gap below which the active set's multipliers are polished and certified
_POLISH = 1e-6
#: LSMR iterations of one polish (each a product with the active rows), and polishes
#: at most in one solve
_POLISH_ITER = 3000
_POLISHES = 2
#: LSMR iterations after which a residual not yet reduced tenfold ends a polish (the
#: guessed active set has no multipliers: measured 0.5 s instead of 5 s at m = 1000)
_POLISH_PROBE = 300
#: iterates that meet the tolerances but not the certificate before the method stops
_REFUSALS = 3
#: iterations without a new best of max(gap, residuals) (by 10 %) before it stops
_STALL = 5
#: fraction of the step to the boundary of the positive orthant
_STEP = 0.995
#: Gondzio's centrality correctors: at most this many a iteration, each aiming at steps
#: longer by _ENLARGE, products kept in [_BETA_MIN, _BETA_MAX] times the target, kept
#: when the two steps grow by _GROWTH together
_CORRECTORS = 2
_ENLARGE = 0.2
_BETA_MIN, _BETA_MAX = 0.1, 10.0
_GROWTH = 0.02
#: relative regularization of the Schur complements (levels and equalities)
_REG = 1e-13
#: smallest pivot, relative to the diagonal, of an equality block eliminated first
_PIVOT = 1e-10


@dataclass
class _LevelForm:
    """The program's rows in level form.

    Row ``k`` reads ``coef_k * (H W^T)[block_k, token_k] + kappa_k * a[block_k]``
    (``>= rhs_k`` or ``= rhs_k``); ``coef`` holds the sign of the term and the
    output scale of the token.  The problem's constraints are the first rows, in
    their order; the anchors' own rows (``S[b, z_b] - a_b = 0``) follow.
    ``has_level`` marks the blocks with an anchor (:func:`_split_rows` splits the
    rows into inequalities and equalities).
    """

    H: np.ndarray
    n_tokens: int
    block: np.ndarray
    token: np.ndarray
    coef: np.ndarray
    kappa: np.ndarray
    rhs: np.ndarray
    equality: np.ndarray
    has_level: np.ndarray


def _anchors(problem):
    """The anchor token of each block (``-1`` for a block without two-term rows), or
    ``None`` when some block's two-term rows do not share a token."""
    c = problem.constraints
    m = problem.scores.n_blocks
    two = np.flatnonzero(c.ref >= 0)
    anchor = np.full(m, -1, dtype=np.int64)
    if two.size == 0:
        return anchor
    order = two[np.argsort(c.block[two], kind="stable")]
    blocks = c.block[order]
    first = order[np.r_[True, blocks[1:] != blocks[:-1]]]
    for candidate in (c.pos[first], c.ref[first]):
        guess = np.full(m, -1, dtype=np.int64)
        guess[c.block[first]] = candidate
        g = guess[c.block[two]]
        bad = np.zeros(m, dtype=bool)
        bad[c.block[two][(c.pos[two] != g) & (c.ref[two] != g)]] = True
        take = (anchor < 0) & (guess >= 0) & ~bad
        anchor[take] = guess[take]
    if np.any(anchor[c.block[two]] < 0):
        return None
    return anchor


def _level_form(problem):
    """:class:`_LevelForm` of a linear-decoder program, or ``None`` (not a star)."""
    sc, c = problem.scores, problem.constraints
    if not (type(sc) is BilinearScores and sc.outputs is None):
        return None
    if np.any((c.ref >= 0) & (c.pos == c.ref)):
        return None
    anchor = _anchors(problem)
    if anchor is None:
        return None
    scale = np.ones(sc.n_positions) if sc.output_scale is None else sc.output_scale
    a_of = anchor[c.block]
    one_sided = c.ref < 0
    to_anchor = ~one_sided & (c.ref == a_of)  # S[b, pos] - a_b
    # else the row is a_b - S[b, ref]
    token = np.where(one_sided | to_anchor, c.pos, c.ref)
    sign = np.where(one_sided | to_anchor, 1.0, -1.0)
    kappa = np.where(one_sided, 0.0, np.where(to_anchor, -1.0, 1.0))
    lev = np.flatnonzero(anchor >= 0)  # the anchors' own rows: S[b, z_b] - a_b = 0
    block = np.r_[c.block, lev]
    token = np.r_[token, anchor[lev]]
    return _LevelForm(
        H=sc.queries, n_tokens=sc.n_positions, block=block, token=token,
        coef=np.r_[sign, np.ones(lev.size)] * scale[token],
        kappa=np.r_[kappa, -np.ones(lev.size)], rhs=np.r_[c.rhs, np.zeros(lev.size)],
        equality=np.r_[c.equality, np.ones(lev.size, dtype=bool)],
        has_level=anchor >= 0)


class _Rows:
    """One kind of rows (inequalities or equalities) of a :class:`_LevelForm`, with
    the products ``A x`` and ``A^T y`` on ``x = (W, a, t)``."""

    def __init__(self, form, which):
        self.index = which
        self.block = form.block[which]
        self.token = form.token[which]
        self.coef = form.coef[which]
        self.kappa = form.kappa[which]
        self.rhs = form.rhs[which]
        self.m, self.V = form.H.shape[0], form.n_tokens
        self.cell = self.block * self.V + self.token

    def __len__(self):
        return self.block.size

    def grid(self, values):
        """``(m, V)`` table of ``values`` summed by (block, token)."""
        return np.bincount(self.cell, values, minlength=self.m * self.V).reshape(
            self.m, self.V)

    def apply(self, logits, a):
        """Row values from the logits ``H W^T`` and the levels."""
        return self.coef * logits.ravel()[self.cell] + self.kappa * a[self.block]

    def adjoint(self, H, y):
        """``(A^T y)`` as ``(W part, level part)``."""
        return (self.grid(self.coef * y).T @ H,
                np.bincount(self.block, self.kappa * y, minlength=self.m))


def _split_rows(form):
    """The inequality and equality :class:`_Rows` of ``form``, the equalities sorted
    by token (the blocks of :class:`_NewtonSystem`)."""
    e_rows = np.flatnonzero(form.equality)
    return (_Rows(form, np.flatnonzero(~form.equality)),
            _Rows(form, e_rows[np.argsort(form.token[e_rows], kind="stable")]))


class _NewtonSystem:
    """The reduced Newton system of one iteration, factored.

    Solves ``[[M, A_E^T], [A_E, 0]] [dx; dz] = [r_x; r_z]`` with
    ``M = A_I^T Theta A_I + (box rows)`` over ``x = (W, a, t)``.  The ``W`` block of
    ``M`` is block diagonal (``B_v``, one per token) and is eliminated first;
    that leaves ``[[S, G^T], [G, -D]]`` over the levels and ``t`` (``y``) and the
    equality multipliers, where ``D = A_E,W B^{-1} A_E,W^T`` is block diagonal too
    (every equality row touches one token).  When each block ``D_v`` is
    well-conditioned (a token in at most ``d`` equalities, e.g. the NTP-SVM's
    supports) the multipliers are eliminated next and one dense system of
    order ``m + 1`` remains, ``S + G^T D^{-1} G``; otherwise (Crammer-Singer with
    more samples of a class than features) the levels are, and the dense
    system is ``T = G S^{-1} G^T + D`` of order ``sum_j |S_j|``.  A factor that
    lost definiteness to rounding is of a regularized matrix
    (:class:`_Cholesky`); :meth:`refined_solve` corrects for it.
    """

    def __init__(self, form, ineq, eq, theta, theta_u, theta_l, dense_equalities=True):
        H = form.H
        m, q = H.shape
        V = form.n_tokens
        self.H, self.ineq, self.eq, self.m, self.V, self.q = H, ineq, eq, m, V, q
        box = theta_u + theta_l  # (V, q)
        self.ct = theta_l - theta_u  # the W-t coupling of the box rows
        self.phi = ineq.grid(theta * ineq.coef * ineq.kappa)  # W-a coupling, (m, V)
        wgt = ineq.grid(theta * ineq.coef ** 2)
        # B_v = H^T diag(wgt[:, v]) H + diag(box_v), all tokens in one product
        B = np.empty((V, q, q))
        for v in range(V):  # a loop over tokens, one product each
            np.matmul(H.T * wgt[:, v], H, out=B[v])
        B[:, np.arange(q), np.arange(q)] += box
        self.theta, self.theta_u, self.theta_l = theta, theta_u, theta_l
        self.L = _regularized_cholesky(B)
        # X_v = L_v^{-1} C_v, C_v = [H^T diag(phi[:, v]), ct_v]: (V, q, m + 1)
        P = self._forward(np.broadcast_to(H.T, (V, q, m)))  # L_v^{-1} H^T, (V, q, m)
        X = np.empty((V, q, m + 1))
        np.multiply(P, self.phi.T[:, None, :], out=X[:, :, :m])
        X[:, :, m] = self._forward(self.ct[:, :, None])[:, :, 0]
        Xf = X.reshape(V * q, m + 1)
        diag_a = np.bincount(ineq.block, theta * ineq.kappa ** 2, minlength=m)
        diag_a = np.where(form.has_level, diag_a, 1.0)
        S = -(Xf.T @ Xf)  # a symmetric rank-k product (BLAS syrk)
        S[np.arange(m), np.arange(m)] += diag_a
        S[m, m] += box.sum()
        # equalities: z_k = L_v^{-1} g_k (g_k = coef_k h_b), G = E_y - Z^T X
        n_e = len(eq)
        Z = P[eq.token, :, eq.block] * eq.coef[:, None]  # (n_e, q)
        G = np.zeros((n_e, m + 1))
        tokens, starts = np.unique(eq.token, return_index=True)  # rows sorted by token
        self.groups = [slice(lo, hi) for lo, hi in zip(starts, np.r_[starts[1:], n_e])]
        for v, rows in zip(tokens, self.groups):  # a loop over tokens
            G[rows] = -(Z[rows] @ X[v])
        G[np.arange(n_e), eq.block] += eq.kappa
        self.G = G
        self.K = self.T = None
        self.D = self._equality_blocks(Z, strict=dense_equalities) if n_e else None
        if self.D is not None:
            # D = Z Z^T is block diagonal (one block per token): eliminate the equality
            # multipliers first, S + G^T D^{-1} G = S + K^T K with K = L_D^{-1} G
            self.K = self._dforward(G)
            S += self.K.T @ self.K
        self.S = _Cholesky(S)
        if n_e and self.D is None:
            # some D_v singular (a token in more equalities than dimensions): eliminate
            # the levels first, T = G S^{-1} G^T + D = R^T R + D
            self.R = self.S.forward(G.T)  # (m + 1, n_e)
            T = self.R.T @ self.R
            for rows in self.groups:
                T[rows, rows] += Z[rows] @ Z[rows].T
            self.T = _Cholesky(T)

    def _equality_blocks(self, Z, strict=True):
        """Cholesky factors of the blocks ``D_v = Z_v Z_v^T`` of the equality rows of
        each token, or ``None`` when one is singular or too ill-conditioned to
        eliminate first (pivot below ``_PIVOT`` times its diagonal).  Not
        ``strict`` (no memory for the other elimination), such a block is
        regularized (:func:`_regularized_cholesky`) and :meth:`refined_solve`
        corrects for it."""
        factors = []
        for rows in self.groups:  # a loop over tokens
            D = Z[rows] @ Z[rows].T
            if not strict:
                factors.append(_regularized_cholesky(D))
                continue
            if rows.stop - rows.start > self.q:
                return None
            try:
                L = np.linalg.cholesky(D)
            except np.linalg.LinAlgError:
                return None
            if np.min(np.diagonal(L)) ** 2 < _PIVOT * np.max(np.diagonal(D)):
                return None
            factors.append(L)
        return factors

    def _dforward(self, b, trans="N"):
        """``L_D^{-1} b`` (or ``L_D^{-T} b``), the equality rows' blocks."""
        out = np.empty(b.shape)
        for L, rows in zip(self.D, self.groups):  # a loop over tokens
            out[rows] = sla.solve_triangular(L, b[rows], lower=True, trans=trans,
                                             check_finite=False)
        return out

    def apply(self, dw, dy, dz):
        """The unregularized system's product ``K [dx; dz]``, for iterative refinement."""
        H, ineq, eq, m = self.H, self.ineq, self.eq, self.m
        da, dt = dy[:m], dy[m]
        lg = H @ dw.T
        v_i = self.theta * ineq.apply(lg, da)
        v_u, v_l = self.theta_u * (dt - dw), self.theta_l * (dt + dw)
        gw, ga = ineq.adjoint(H, v_i)
        ew, ea = eq.adjoint(H, dz)
        return (gw - v_u + v_l + ew, np.r_[ga + ea, v_u.sum() + v_l.sum()],
                eq.apply(lg, da))

    def refined_solve(self, r_w, r_y, r_z, max_steps=6):
        """:meth:`solve` and rounds of iterative refinement against :meth:`apply` (the
        factorization is of a regularized system), while they reduce the residual."""
        sol = self.solve(r_w, r_y, r_z)
        scale = max(np.max(np.abs(r)) for r in (r_w, r_y, r_z) if r.size) + 1e-300
        last = np.inf
        for _ in range(max_steps):
            k = self.apply(*sol)
            res = (r_w - k[0], r_y - k[1], r_z - k[2])
            size = max(np.max(np.abs(r), initial=0.0) for r in res) / scale
            if size < 1e-15 or size > 0.5 * last:
                break
            last = size
            corr = self.solve(*res)
            sol = tuple(a + b for a, b in zip(sol, corr))
        return sol

    def _binv(self, r):
        """``B^{-1} r`` for ``r`` of shape (V, q)."""
        u = self._forward(r[:, :, None])
        return self._forward(u, trans="T")[:, :, 0]

    def _forward(self, b, trans="N"):
        """``L_v^{-1} b_v`` (or ``L_v^{-T} b_v``) for a stack ``b`` of shape (V, q, k): a
        loop over tokens of triangular solves (backward stable, unlike products
        with the inverse factors, whose condition reaches 1e10 near the end)."""
        out = np.empty(b.shape)
        for v in range(self.V):
            out[v] = sla.solve_triangular(self.L[v], b[v], lower=True, trans=trans,
                                          check_finite=False)
        return out

    def solve(self, r_w, r_y, r_z):
        H, eq, m = self.H, self.eq, self.m
        u = self._binv(r_w)
        hu = H @ u.T  # (m, V)
        rho_y = r_y.copy()
        rho_y[:m] -= np.sum(self.phi * hu, axis=1)
        rho_y[m] -= np.sum(self.ct * u)
        rho_z = r_z - eq.coef * hu.ravel()[eq.cell]
        if self.D is not None:
            w = self._dforward(rho_z)
            dy = self.S.solve(rho_y + self.K.T @ w)
            dz = self._dforward(self.K @ dy - w, trans="T")
        else:
            dz = (self.T.solve(self.R.T @ self.S.forward(rho_y) - rho_z)
                  if self.T is not None else np.zeros(0))
            dy = self.S.solve(rho_y - self.G.T @ dz)
        rw = r_w - (self.phi * dy[:m, None]).T @ H - self.ct * dy[m]
        rw -= eq.grid(eq.coef * dz).T @ H
        return self._binv(rw), dy, dz


def _regularized_cholesky(A):
    """Lower Cholesky factors of a stack of matrices ``A``, or of ``A + delta I`` with
    the smallest ``delta = _REG * 10^k * max diag(A)`` that factors."""
    idx = np.arange(A.shape[-1])
    top = np.max(np.abs(np.diagonal(A, axis1=-2, axis2=-1)), axis=-1)[..., None] + 1e-300
    for k in range(-1, 14):
        B = A.copy()
        if k >= 0:
            B[..., idx, idx] += (_REG * 10.0 ** k) * top
        try:
            return np.linalg.cholesky(B)
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError("the Newton system is singular to working precision")


class _Cholesky:
    """Lower Cholesky factor of the symmetric positive definite matrix ``A`` (only its
    lower triangle is read), with the solves the Newton system needs.

    Near the end of an interior-point method the Schur complements mix weights
    of 1e-10 and 1e+10 and may lose definiteness to rounding; then ``delta I`` is
    added, ``delta = _REG * 10^k * max diag`` the smallest that factors.
    :meth:`_NewtonSystem.refined_solve` corrects the direction against the
    unregularized system.
    """

    def __init__(self, A):
        d = np.diag_indices_from(A)
        top = float(np.max(np.abs(A[d]))) + 1e-300
        for k in range(-1, 14):
            B = A
            if k >= 0:
                B = A.copy(order="F")
                B[d] += (_REG * 10.0 ** k) * top
            L, info = lapack.dpotrf(B, lower=1, clean=1, overwrite_a=0)
            if info == 0:
                self.L = L
                return
        raise np.linalg.LinAlgError("the Newton system is singular to working precision")

    def forward(self, b):
        """``L^{-1} b``."""
        return sla.solve_triangular(self.L, b, lower=True, check_finite=False)

    def solve(self, b):
        """``A^{-1} b``."""
        return lapack.dpotrs(self.L, b, lower=1)[0]


def _max_step(x, dx):
    """Largest step ``<= 1`` that keeps ``x + step * dx >= 0``, times :data:`_STEP`."""
    neg = dx < 0
    if not neg.any():
        return 1.0
    return min(1.0, _STEP * float(np.min(-x[neg] / dx[neg])))


def _unsorted(eq, mu, form):
    """Equality multipliers in the form's order of its equality rows."""
    full = np.zeros(form.block.size)
    full[eq.index] = mu
    return full[form.equality]


def _least_norm(J, b):
    """A solution of ``J z = b`` by LSMR on the column-scaled ``J`` (at most
    :data:`_POLISH_ITER` products), or ``None`` when it does not meet the equations
    to ``1e-10`` relative (no solution, or none found)."""
    norms = np.sqrt(np.asarray(J.multiply(J).sum(axis=0))).ravel()
    scale = 1.0 / np.where(norms > 0, norms, 1.0)
    Js = J @ sp.diags(scale)
    y, _, _, residual = lsmr(Js, b, atol=1e-16, btol=1e-16, maxiter=_POLISH_PROBE)[:4]
    if residual > 0.1 * np.linalg.norm(b):  # the least-squares residual stalls: no solution
        return None
    y = lsmr(Js, b, atol=1e-16, btol=1e-16, maxiter=_POLISH_ITER - _POLISH_PROBE, x0=y)[0]
    z = y * scale
    if not (np.all(np.isfinite(z))
            and np.max(np.abs(J @ z - b), initial=0.0) <= 1e-10 * max(1.0, np.max(np.abs(b)))):
        return None
    return z


def _polished(form, ineq, eq, W, a, t, slack, mult, mu):
    """Multipliers and a point on the active set that meet their equations to working
    precision.

    Near the optimum the iterate tells the active rows (slack below multiplier)
    and the entries of ``W`` at ``+t`` or ``-t``.  The multipliers supported on
    them are corrected by the least-norm solution of the dual equations
    ``A_I^T lam + A_E^T mu = (nu - eta, 0)`` over ``(W, a)`` and ``sum(nu + eta) = 1``
    (LSMR);
    at a vertex they are its exact multipliers.  The interior-point iterate's
    own multipliers meet those equations only to the accuracy of its last
    Newton system, which limits the certificate (the l1 norm of ``A^T lam``
    sums the error of every entry).  The point ``(W, a, t)`` is corrected the same
    way to meet the active rows as equalities.  Returns ``(W, lam, mu)``, or ``None``
    when the dual equations have no solution on the guessed active set.
    """
    H = form.H
    m, q = H.shape
    V = form.n_tokens
    n = V * q
    active = np.flatnonzero(slack[0] < mult[0])
    upper = np.flatnonzero(slack[1].ravel() < mult[1].ravel())
    lower = np.flatnonzero(slack[2].ravel() < mult[2].ravel())

    def rows_columns(rows, idx):  # columns of (A^T) for the rows idx: W part and level
        coef, tok, blk = rows.coef[idx], rows.token[idx], rows.block[idx]
        r = (tok[:, None] * q + np.arange(q)[None, :]).ravel()
        cols = np.repeat(np.arange(idx.size), q)
        vals = (coef[:, None] * H[blk]).ravel()
        keep = rows.kappa[idx] != 0
        r = np.r_[r, n + blk[keep]]
        cols = np.r_[cols, np.flatnonzero(keep)]
        vals = np.r_[vals, rows.kappa[idx][keep]]
        return sp.csc_matrix((vals, (r, cols)), shape=(n + m + 1, idx.size))

    def box(idx, sign):  # the columns of nu (sign -1) or eta (+1): W entry and t
        k = np.arange(idx.size)
        return sp.csc_matrix((np.r_[np.full(idx.size, sign), np.ones(idx.size)],
                              (np.r_[idx, np.full(idx.size, n + m)], np.r_[k, k])),
                             shape=(n + m + 1, idx.size))

    J = sp.hstack([rows_columns(ineq, active), rows_columns(eq, np.arange(len(eq))),
                   box(upper, -1.0), box(lower, 1.0)]).tocsr()
    z0 = np.r_[mult[0][active], mu, mult[1].ravel()[upper], mult[2].ravel()[lower]]
    target = np.zeros(n + m + 1)
    target[-1] = 1.0
    z = _least_norm(J, target - J @ z0)
    if z is None:  # no multipliers on this active set: not the optimal one yet
        return None
    z += z0
    lam = np.zeros(len(ineq))
    lam[active] = np.maximum(z[: active.size], 0.0)
    # the primal point on the same active set: its rows met as equalities
    x0 = np.r_[W.ravel(), a, t]
    rhs = np.r_[ineq.rhs[active], eq.rhs, np.zeros(upper.size + lower.size)]
    dx = _least_norm(J.T.tocsr(), rhs - J.T @ x0)
    if dx is None:
        return None
    x = x0 + dx
    return x[:n].reshape(V, q), lam, z[active.size: active.size + len(eq)]


def _direction(system, ineq, slack, mult, r_p, r_d, r_e, rc):
    """The Newton direction for complementarity residuals ``rc``.

    ``slack``, ``mult``, ``r_p`` and ``rc`` are triples over the score rows, the
    rows ``t - W >= 0`` and the rows ``t + W >= 0``; ``r_d`` is the dual residual
    ``(W, a, t)``.  With ``dlam = -Theta (A dx + r_p) - rc / s`` the system reads
    ``M dx + A_E^T dz = -r_d - A^T (rc / s + Theta r_p)``, ``A_E dx = -r_e``.
    Returns ``(dW, da, dt, dslack, dmult, dmu)``.
    """
    H, m = system.H, system.m
    v_i, v_u, v_l = (c / sl + (mu_ / sl) * r for c, sl, mu_, r in zip(rc, slack, mult, r_p))
    gw, ga = ineq.adjoint(H, v_i)
    r_w = -r_d[0] - gw + v_u - v_l
    r_y = np.r_[-r_d[1] - ga, -r_d[2] - v_u.sum() - v_l.sum()]
    dw, dy, dz = system.refined_solve(r_w, r_y, -r_e)
    da, dt = dy[:m], dy[m]
    dslack = (ineq.apply(H @ dw.T, da) + r_p[0], dt - dw + r_p[1], dt + dw + r_p[2])
    dmult = tuple(-(c + mu_ * d) / sl for c, mu_, d, sl in zip(rc, mult, dslack, slack))
    return dw, da, dt, dslack, dmult, -dz


def _steps(slack, mult, dslack, dmult):
    """Primal and dual steps to the boundary (times :data:`_STEP`)."""
    return (min(_max_step(x.ravel(), dx.ravel()) for x, dx in zip(slack, dslack)),
            min(_max_step(x.ravel(), dx.ravel()) for x, dx in zip(mult, dmult)))


def _centrality_corrector(system, ineq, slack, mult, step, ap, ad, target):
    """Gondzio's multiple centrality corrector (Gondzio 1996, Comput. Optim. Appl. 6).

    The products ``slack * mult`` at a longer trial step of ``step`` are moved
    into ``[_BETA_MIN, _BETA_MAX] * target``; the correction is one more solve
    with the factored ``system``.  Returns ``(step, ap, ad)`` corrected, or
    ``None`` when the steps to the boundary do not grow by ``_GROWTH``.
    """
    ds, dm = step[3], step[4]
    trial_p, trial_d = min(1.0, ap + _ENLARGE), min(1.0, ad + _ENLARGE)
    lo, hi = _BETA_MIN * target, _BETA_MAX * target
    rc = []
    for x, dx, y, dy in zip(slack, ds, mult, dm):
        v = (x + trial_p * dx) * (y + trial_d * dy)
        rc.append(-np.maximum(np.clip(v, lo, hi) - v, -hi))
    zero_p = tuple(np.zeros_like(x) for x in slack)
    zero_d = (np.zeros((system.V, system.q)), np.zeros(system.m), 0.0)
    corr = _direction(system, ineq, slack, mult, zero_p, zero_d, np.zeros(len(system.eq)),
                      tuple(rc))
    dw, da, dt = (s + c for s, c in zip(step[:3], corr[:3]))
    ds = tuple(s + c for s, c in zip(step[3], corr[3]))
    dm = tuple(s + c for s, c in zip(step[4], corr[4]))
    dmu = step[5] + corr[5]
    new_p, new_d = _steps(slack, mult, ds, dm)
    if new_p + new_d < ap + ad + _GROWTH:
        return None
    return (dw, da, dt, ds, dm, dmu), new_p, new_d


def _ipm(form, tol, max_iter, verbose, certify, dense_equalities=True):
    """Mehrotra's predictor-corrector on the level form.

    Variables ``W`` (V, q), levels ``a`` (m,), ``t``; slacks and multipliers of
    the score inequalities, of the box rows ``t - W >= 0`` and of ``t + W >= 0``
    (the triples ``slack``, ``mult``); multipliers ``mu`` of the equalities.
    When the iterate meets ``tol`` (relative gap and residuals),
    ``certify(W, lam, mu, n_iter)`` decides whether to stop.  Without
    ``dense_equalities`` (memory) the equality blocks are always eliminated
    first, regularized where they are singular.  Returns ``(W, lam, mu,
    n_iter, certified)``.
    """
    H = form.H
    m, q = H.shape
    V = form.n_tokens
    ineq, eq = _split_rows(form)
    W, a, t = np.zeros((V, q)), np.zeros(m), 1.0
    slack = (np.ones(len(ineq)), np.ones((V, q)), np.ones((V, q)))
    mult = (np.ones(len(ineq)), np.ones((V, q)), np.ones((V, q)))
    mu = np.zeros(len(eq))
    n_comp = len(ineq) + 2 * V * q
    scale = 1.0 + max(float(np.max(np.abs(form.rhs), initial=0.0)), 1.0)
    it, polished_at, refused, last_gap, polishes = 0, np.inf, 0, np.inf, 0
    best_merit, best_at = np.inf, 0
    for it in range(1, max_iter + 1):
        logits = H @ W.T
        r_p = (ineq.apply(logits, a) - slack[0] - ineq.rhs, t - W - slack[1],
               t + W - slack[2])
        r_e = eq.apply(logits, a) - eq.rhs
        gw_i, ga_i = ineq.adjoint(H, mult[0])
        gw_e, ga_e = eq.adjoint(H, mu)
        # dual residual c - A~^T lam~ - A_E^T mu over (W, a, t)
        r_d = (-(gw_i + gw_e) + mult[1] - mult[2], -(ga_i + ga_e),
               1.0 - mult[1].sum() - mult[2].sum())
        comp = sum(np.sum(x * y) for x, y in zip(slack, mult)) / n_comp
        dual_obj = ineq.rhs @ mult[0] + eq.rhs @ mu
        p_res = max(max(np.max(np.abs(r), initial=0.0) for r in r_p),
                    np.max(np.abs(r_e), initial=0.0)) / scale
        d_res = max(np.max(np.abs(r), initial=0.0) for r in r_d)
        gap = abs(t - dual_obj) / (1.0 + abs(t))
        if verbose:
            print(f"lp-ipm {it:3d}: t {t:.8e} dual {dual_obj:.8e} gap {gap:.1e} "
                  f"primal {p_res:.1e} dual res {d_res:.1e} comp {comp:.1e}")
        if not np.isfinite(comp) or comp > _DIVERGED:  # the sign of an infeasible program
            break
        if gap <= tol and p_res <= tol and d_res <= tol:
            if certify(W, mult[0], _unsorted(eq, mu, form), it):
                return W, mult[0], _unsorted(eq, mu, form), it, True
            refused += 1
            if refused >= _REFUSALS:  # at the precision of float64: the best one stands
                break
        # polish where the iterates stop converging fast (degenerate or ill-conditioned
        # Newton systems near the end), once per halving of the gap
        polish = (gap <= _POLISH and p_res <= _POLISH and gap < 0.5 * polished_at
                  and polishes < _POLISHES)
        if polish and gap > 0.1 * last_gap:
            polished_at, polishes = gap, polishes + 1
            found = _certified_polish(form, ineq, eq, (W, a, t, slack, mult, mu), certify, it)
            if found is not None:
                return found
        last_gap = gap
        merit = max(gap, p_res, d_res)
        if merit < 0.9 * best_merit:
            best_merit, best_at = merit, it
        elif it - best_at >= _STALL:  # lost its path (degenerate optimum, rounding)
            break
        try:
            system = _NewtonSystem(form, ineq, eq, *(y / x for x, y in zip(slack, mult)),
                                   dense_equalities=dense_equalities)
        except np.linalg.LinAlgError:  # lost to rounding: a last polish, else the caller decides
            if polish and polished_at != gap:
                found = _certified_polish(form, ineq, eq, (W, a, t, slack, mult, mu),
                                          certify, it)
                if found is not None:
                    return found
            break
        # predictor (affine scaling), then the centred corrector (Mehrotra)
        _, _, _, ds, dm, _ = _direction(system, ineq, slack, mult, r_p, r_d, r_e,
                                        tuple(x * y for x, y in zip(slack, mult)))
        ap, ad = (step / _STEP for step in _steps(slack, mult, ds, dm))
        comp_aff = sum(np.sum((x + ap * dx) * (y + ad * dy))
                       for x, dx, y, dy in zip(slack, ds, mult, dm)) / n_comp
        target = (comp_aff / comp) ** 3 * comp
        dw, da, dt, ds, dm, dmu = _direction(
            system, ineq, slack, mult, r_p, r_d, r_e,
            tuple(x * y + dx * dy - target for x, y, dx, dy in zip(slack, mult, ds, dm)))
        ap, ad = _steps(slack, mult, ds, dm)
        step = (dw, da, dt, ds, dm, dmu)
        for _ in range(_CORRECTORS):
            if min(ap, ad) >= _STEP:
                break
            found = _centrality_corrector(system, ineq, slack, mult, step, ap, ad, target)
            if found is None:
                break
            step, ap, ad = found
        dw, da, dt, ds, dm, dmu = step
        W, a, t = W + ap * dw, a + ap * da, t + ap * dt
        slack = tuple(x + ap * dx for x, dx in zip(slack, ds))
        mult = tuple(y + ad * dy for y, dy in zip(mult, dm))
        mu = mu + ad * dmu
        if max(ap, ad) < 1e-12:  # stalled
            break
    return W, mult[0], _unsorted(eq, mu, form), it, False


def _certified_polish(form, ineq, eq, state, certify, it):
    """``_ipm``'s return value from the active-set polish of ``state`` (``W, a, t,
    slack, mult, mu``) when ``certify`` accepts it, else ``None``."""
    found = _polished(form, ineq, eq, *state)
    if found is None:
        return None
    W, lam, mu = found[0], found[1], _unsorted(eq, found[2], form)
    return (W, lam, mu, it, True) if certify(W, lam, mu, it) else None


def _memory_need(form, dense_equalities):
    """Bytes of the largest arrays of one iteration, with or without the dense system
    in the equality multipliers (``T``): an upper bound on the peak that
    ``tests/test_lp_ipm.py`` measures (``tracemalloc``)."""
    m, q = form.H.shape
    n_e = int(form.equality.sum())
    return 8.0 * (4 * (m + 1) ** 2 + 7 * n_e ** 2 * dense_equalities + 4 * n_e * (m + 1)
                  + 5 * form.n_tokens * q * (m + 1) + 2 * form.n_tokens * q * q)


def solve(problem, tol, max_iter, be, verbose, callback=None, *, frobenius):
    """``min ||W||_max`` of a linear-decoder program by the level-form interior-point
    method; declines other norms, other score maps, programs that are not stars and
    programs whose dense systems would not fit in half the available memory."""
    if problem.norm != "max":
        return None
    form = _level_form(problem)
    if form is None:
        return None
    budget = 0.5 * available_memory()
    per_token = np.bincount(form.token[form.equality], minlength=form.n_tokens)
    dense = _memory_need(form, True) <= budget
    if _memory_need(form, per_token.max(initial=0) > form.H.shape[1]) > budget:
        return None
    c = problem.constraints
    A = constraint_operator(problem)
    ineq, eq = ~c.equality, c.equality
    margin_tol = tol * max(1.0, float(np.max(c.rhs)))
    best = []

    def certified(W, lam, mu, n_iter):
        # W scaled to meet every inequality, the multipliers in the problem's rows
        x = W.ravel().copy()
        vals, pos = A @ x, ineq & (c.rhs > 0)
        if pos.any() and np.all(vals[pos] > 0):
            x *= max(1.0, float(np.max(c.rhs[pos] / vals[pos])))
        dual = np.zeros(len(c))
        dual[ineq], dual[eq] = lam, mu[: int(eq.sum())]
        return certified_lp(problem, A, x, dual, n_iter, tol, method="lp-ipm")

    def certify(W, lam, mu, n_iter):
        res = certified(W, lam, mu, n_iter)
        if not best or res.gap < best[0].gap:
            best[:] = [res]
        if callback is not None:
            callback(n_iter, res.gap, res.max_violation)
        if verbose:
            print(f"         certificate: gap {res.gap:.2e} violation {res.max_violation:.2e}")
        # a negative gap is a point below the dual bound, i.e. one that violates rows
        return abs(res.gap) <= tol and res.max_violation <= margin_tol

    W, lam, mu, it, done = _ipm(form, tol, min(max_iter, _MAX_ITER), verbose, certify,
                                dense)
    if done:
        return best[0]
    # an interior-point method does not certify infeasibility: the Frobenius
    # program on the same rows does (a Farkas ray), and raises
    frobenius(problem)
    last = certified(W, lam, mu, it)
    res = last if not best or last.gap <= best[0].gap else best[0]
    res.n_iter = it
    # uncertified: solve_max_margin's own certificate decides what it is, and
    # method="auto" hands the program to HiGHS
    res.status = "max_iter"
    return res


# one BLAS thread: its per-token loops alternate LAPACK calls (scipy's BLAS) with
# products (NumPy's, a second pool), and two pools wait for each other's cores;
# measured 30 s in one thread against 42 s in two at m = 1000 (benchmarks/norms.py)
solve.blas_threads = 1
