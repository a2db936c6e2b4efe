"""The spectral-norm and lp-norm max-margin programs, by barrier (path-following) methods.

Why not a library: for the spectral norm Clarabel fails.  On the spectral
NTP-SVM with m = 30, d = 12, V = 8 it fails after 0.42 s, where the spectral
barrier certifies a gap of 3.8e-7 in 1.15 s (``benchmarks/README.md``, table
"Norms, quiet").  For lp norms the library is faster: Clarabel takes 0.40 s and
0.42 s at p = 1.5 and 3 against 1.14 s and 0.94 s here (same table), so
``method="auto"`` tries Clarabel first and the lp barrier answers only where
Clarabel's answer is not certified.

Steepest descent in a norm converges in direction to the max-margin solution in
that norm: spectral descent / Muon to the spectral norm ``||W||_2`` of a matrix
parameter, lp steepest (mirror) descent to the entrywise lp norm.  Under the
score-difference constraints of :class:`~skntp.svm.MaxMarginProblem`
(``A_I w >= r_I``, ``A_E w = r_E``) the programs are

.. math::

    \\text{(lp)}\\quad \\min_w \\tfrac1p \\sum_i |w_i|^p, \\qquad
    \\text{(spectral)}\\quad \\min_{t, W}\\; t \\quad\\text{s.t.}\\quad
    S(t, W) = \\begin{pmatrix} t I & W \\\\ W^T & t I \\end{pmatrix} \\succeq 0

(the lp objective is ``||w||_p^p / p``, whose minimizer is that of
``||w||_p``; ``||W||_2 <= t`` iff ``S(t, W)`` is positive semidefinite).  Both
are solved by the barrier method (Boyd & Vandenberghe, *Convex Optimization*,
Sec. 11.3): the equalities are eliminated once (``w = w_0 + N z``, ``N`` an
orthonormal basis of the null space of ``A_E``), and for a decreasing ``mu``
Newton's method with a backtracking line search minimizes

.. math::

    F_\\mu = f(w) - \\mu \\sum_i \\log(A_I w - r_I)_i
    \\quad [\\,- \\mu \\log\\det S(t, W)\\ \\text{for the spectral norm}],

started from twice the Frobenius solution moved back onto the equalities (whose
solve also decides feasibility: an infeasible program raises
:class:`~skntp.svm.NotSeparableError` from its Farkas certificate); a program
without a strictly feasible start there (a tight row of rhs 0) is declined.  The
Hessian of ``-log det S`` in ``(t, vec W)`` is ``tr(G F_i G F_l)`` with
``G = S^{-1}`` and ``F`` the basis matrices; for ``W_ab, W_cd`` it is
``2 G11[a,c] G22[b,d] + 2 G12[a,d] G12[c,b]``, a Kronecker product plus a
permuted one, formed in ``O(n^2)`` for ``n`` entries of ``W``.

Every centered iterate is certified: the multipliers ``y_I = mu / s``, ``y_E``
from the stationarity condition (least squares on ``A_E^T``), are scaled into
the dual's feasible set ``||A^T y||_* <= 1`` (the dual norm: lq with
``1/p + 1/q = 1``, nuclear for spectral), and the relative gap between
``||w||`` and the dual value ``r^T y`` is reported
(:func:`~skntp.svm._norms.norm_gap`); the method stops when it is at most
``tol``.  The Newton systems are dense in the parameter's entries: the methods
take parameters of at most :data:`MAX_VARIABLES` entries and decline larger
ones (``method="auto"`` then uses cvxpy).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from ..._warnings import user_stacklevel
from .._norms import norm_gap, norm_kind
from .._problem import MaxMarginResult, check_program_size

__all__ = ["MAX_VARIABLES", "solve_pnorm", "solve_spectral"]

#: largest parameter (entries) the barrier methods take: their Newton systems
#: are dense ``n x n``
MAX_VARIABLES = 2500
#: barrier parameter reduction per centering
_SHRINK = 10.0
#: total Newton steps over all centerings
_MAX_NEWTON = 600


class _Program:
    """The constraints with the equalities eliminated: ``w = w0 + N z``."""

    def __init__(self, problem):
        c = problem.constraints
        A = problem.constraint_matrix().tocsr()
        self.n = A.shape[1]
        ineq, eq = ~c.equality, c.equality
        self.A_I, self.r_I = A[ineq], c.rhs[ineq]
        self.A, self.rhs, self.equality = A, c.rhs, c.equality
        self.N = None  # None: no equalities, z = w
        self.r_E = c.rhs[eq]
        if eq.any():
            A_E = A[eq].toarray()
            U, sv, Vt = sla.svd(A_E, full_matrices=True, lapack_driver="gesvd")
            rank = int(np.sum(sv > max(A_E.shape) * np.finfo(float).eps * sv[0])) if sv.size \
                else 0
            self._U, self._sv, self._Vt = U[:, :rank], sv[:rank], Vt[:rank]
            self.N = Vt[rank:].T
        self.eq = eq

    def lstsq_E(self, v):
        """Least-squares ``y_E`` of ``A_E^T y_E = v``."""
        return self._U @ ((self._Vt @ v) / self._sv)

    def project_start(self, w):
        """``w`` moved onto ``A_E w = r_E`` (least change)."""
        if self.N is None:
            return w
        res = self.r_E - self.A[self.eq] @ w
        return w + self._Vt.T @ ((self._U.T @ res) / self._sv)

    def w_of(self, w0, z):
        return w0 + z if self.N is None else w0 + self.N @ z

    def reduce(self, g, H):
        """Gradient and Hessian in ``w`` to those in ``z``."""
        if self.N is None:
            return g, H
        return self.N.T @ g, self.N.T @ H @ self.N

    def dim(self):
        return self.n if self.N is None else self.N.shape[1]

    def multipliers(self, grad_obj, y_I):
        """``y`` (all constraints) from stationarity ``A_I^T y_I + A_E^T y_E = grad_obj``."""
        y = np.zeros(len(self.rhs))
        y[~self.eq] = y_I
        if self.N is not None:
            y[self.eq] = self.lstsq_E(grad_obj - self.A_I.T @ y_I)
        return y


def _barrier_hessian(A_I, weight):
    """``A_I^T diag(weight) A_I`` as a dense array."""
    return np.asarray((A_I.T @ sp.diags(weight) @ A_I).todense())


def _newton_direction(g, H):
    """``-H^{-1} g`` by Cholesky; a tiny ridge when ``H`` is singular to working precision.

    When the factorization fails, ``H + rho I`` with ``rho = 1e-14 s``, then ``100``
    times larger up to ``1e-6 s`` (``s`` the largest ``|H_ii|``, ``1`` when every
    diagonal entry is zero); ``None`` when ``H + 1e-6 s I`` is not positive definite
    either.
    """
    ridge = 0.0
    scale = float(np.max(np.abs(np.diag(H)), initial=0.0)) or 1.0
    for _ in range(6):
        try:
            cf = sla.cho_factor(H + ridge * np.eye(H.shape[0]), check_finite=False)
            return -sla.cho_solve(cf, g, check_finite=False)
        except np.linalg.LinAlgError:
            ridge = scale * 1e-14 if ridge == 0.0 else ridge * 100.0
    return None


class _PNorm:
    """``f(w) = sum |w_i|^p / p`` and the slack barrier; ``x = z``."""

    def __init__(self, prog, p):
        self.prog, self.p = prog, p

    def start(self, w0):
        return np.zeros(self.prog.dim())

    def split(self, x):
        return x

    def value(self, w, x, mu):
        s = self.prog.A_I @ w - self.prog.r_I
        if s.size and not np.all(s > 0):
            return np.inf
        return float(np.sum(np.abs(w) ** self.p) / self.p - mu * np.sum(np.log(s)))

    def grad_obj(self, w, x, mu):
        return np.sign(w) * np.abs(w) ** (self.p - 1.0)

    def derivatives(self, w, x, mu):
        prog, p = self.prog, self.p
        s = prog.A_I @ w - prog.r_I
        a = np.abs(w)
        floor = 1e-12 * float(a.max(initial=0.0)) or 1e-300
        h = (p - 1.0) * np.maximum(a, floor) ** (p - 2.0)
        g = self.grad_obj(w, x, mu) - prog.A_I.T @ (mu / s)
        H = _barrier_hessian(prog.A_I, mu / s**2)
        H[np.diag_indices_from(H)] += h
        return prog.reduce(g, H)

    def step(self, x, dx):
        return dx

    def mu0(self, w, x):
        return float(np.sum(np.abs(w) ** self.p) / self.p) / max(1, self.prog.A_I.shape[0])


class _Spectral:
    """``t - mu log det S(t, W)`` and the slack barrier; ``x = (t, z)``."""

    def __init__(self, prog, shape):
        self.prog, self.shape = prog, shape
        P, Q = shape
        self.P, self.Q = P, Q

    def start(self, w0):
        t0 = 1.5 * float(np.linalg.norm(w0.reshape(self.shape), 2)) + 1e-12
        return np.r_[t0, np.zeros(self.prog.dim())]

    def split(self, x):
        return x[1:]

    def _lmi(self, t, w):
        P, Q = self.P, self.Q
        W = w.reshape(P, Q)
        S = np.zeros((P + Q, P + Q))
        S[:P, P:], S[P:, :P] = W, W.T
        S[np.diag_indices(P + Q)] += t
        return S

    def value(self, w, x, mu):
        s = self.prog.A_I @ w - self.prog.r_I
        if s.size and not np.all(s > 0):
            return np.inf
        try:
            L = np.linalg.cholesky(self._lmi(x[0], w))
        except np.linalg.LinAlgError:
            return np.inf
        return float(x[0] - mu * 2.0 * np.sum(np.log(np.diag(L))) - mu * np.sum(np.log(s)))

    def _inverse(self, x, w):
        S = self._lmi(x[0], w)
        cf = sla.cho_factor(S, lower=True, check_finite=False)
        return sla.cho_solve(cf, np.eye(S.shape[0]), check_finite=False)

    def grad_obj(self, w, x, mu):
        # the gradient in W of the norm part on the central path, -2 mu G12 (the
        # dual matrix Z = mu G, of trace ~1, gives A^T y = -2 Z12)
        G = self._inverse(x, w)
        return -2.0 * mu * G[:self.P, self.P:].ravel()

    def derivatives(self, w, x, mu):
        prog, P, Q = self.prog, self.P, self.Q
        n = P * Q
        s = prog.A_I @ w - prog.r_I
        G = self._inverse(x, w)
        G11, G22, G12 = G[:P, :P], G[P:, P:], G[:P, P:]
        G2 = G @ G
        H = 2.0 * mu * (np.kron(G11, G22)
                        + np.einsum("ad,cb->abcd", G12, G12).reshape(n, n))
        H += _barrier_hessian(prog.A_I, mu / s**2)
        gw = -2.0 * mu * G12.ravel() - prog.A_I.T @ (mu / s)
        htw = 2.0 * mu * G2[:P, P:].ravel()
        gz, Hz = prog.reduce(gw, H)
        htz = htw if prog.N is None else prog.N.T @ htw
        g = np.r_[1.0 - mu * np.trace(G), gz]
        Hfull = np.empty((g.size, g.size))
        Hfull[0, 0] = mu * np.sum(G * G)
        Hfull[0, 1:] = Hfull[1:, 0] = htz
        Hfull[1:, 1:] = Hz
        return g, Hfull

    def mu0(self, w, x):
        return float(x[0]) / (self.P + self.Q + self.prog.A_I.shape[0])


def _certificate(problem, prog, model, w, x, mu):
    """``(W, y, gap, violation)`` of the current point (:func:`norm_gap`)."""
    s = prog.A_I @ w - prog.r_I
    y = prog.multipliers(model.grad_obj(w, x, mu), mu / s)
    W = w.reshape(problem.shape)
    gap, y = norm_gap(problem, W, y, prog.A)
    vals = prog.A @ w - prog.rhs
    viol = np.where(prog.equality, np.abs(vals), np.maximum(-vals, 0.0))
    return W, y, float(gap), float(viol.max(initial=0.0))


def _barrier(problem, model, prog, w0, tol, max_iter, verbose, callback, name):
    """Follow the central path from ``w0``; the best certified iterate.

    ``mu`` starts at ``model.mu0`` and is divided by ``_SHRINK`` (10) after each
    centering: at most 50 damped Newton steps, each accepted at the first halving of
    the step ``alpha`` (from 1, down to 1e-12) where ``F_mu`` is finite and, for a
    Newton decrement ``-g.dx / mu`` of 0.1 or more, decreases by at least ``0.25 alpha
    (-g.dx)``; the centering ends when the decrement is at most 1e-12, when no
    halving is accepted, or when the Newton system cannot be solved.  Each
    centering's certificate (:func:`_certificate`) is passed to
    ``callback(newton_steps, gap, violation)`` and printed when ``verbose``.  The
    method stops when the gap is at most ``tol`` and the violation at most ``max(tol,
    1e-9)`` (``status="optimal"``), after two centerings that do not lower the best
    gap, when ``mu < 1e-30``, or after ``min(max_iter, 600)`` Newton steps in all
    (``n_iter``).  A best gap above ``tol`` is warned about and gives
    ``status="max_iter"``.
    """
    x = model.start(w0)
    mu = model.mu0(w0, x)
    best, status, it, newton = None, "max_iter", 0, 0
    budget = min(int(max_iter), _MAX_NEWTON)
    while newton < budget:
        # centering: Newton's method with backtracking on F_mu
        for _ in range(50):
            w = prog.w_of(w0, model.split(x))
            g, H = model.derivatives(w, x, mu)
            dx = _newton_direction(g, H)
            newton += 1
            if dx is None:
                break
            # the Newton decrement of F_mu / mu (dimensionless)
            dec = -float(g @ dx) / mu
            if dec <= 1e-12:
                break
            f0, alpha = model.value(w, x, mu), 1.0
            while alpha > 1e-12:
                xn = x + alpha * dx
                fn = model.value(prog.w_of(w0, model.split(xn)), xn, mu)
                # near the center (dec < 0.1) F_mu is nearly quadratic: a full step in
                # the domain converges fast, while the decrease falls below roundoff
                if np.isfinite(fn) and (dec < 0.1 or fn <= f0 - 0.25 * alpha * dec * mu):
                    break
                alpha *= 0.5
            else:
                break
            x = xn
            if newton >= budget:
                break
        it += 1
        w = prog.w_of(w0, model.split(x))
        cert = _certificate(problem, prog, model, w, x, mu)
        if callback is not None:
            callback(newton, cert[2], cert[3])
        if verbose:
            print(f"{name} {it:3d}: mu {mu:.2e} newton {newton} gap {cert[2]:.2e} "
                  f"violation {cert[3]:.1e}")
        if best is None or cert[2] < best[2]:
            best, stalled = cert, 0
        else:
            # past the precision of float64 near the optimum (the barrier's Hessian
            # has condition ~ 1/mu^2): the certificate only gets worse
            stalled += 1
        if cert[2] <= tol and cert[3] <= max(tol, 1e-9):
            status = "optimal"
            break
        if stalled >= 2:
            break
        mu /= _SHRINK
        if mu < 1e-30:
            break
    W, y, gap, viol = best
    if gap > tol:
        warnings.warn(
            f"{problem.name} ({name}): the certified relative duality gap is {gap:.2e} > "
            f"tol={tol:g} (the limit of float64 for this program); the solution is "
            "accurate to about that relative amount.", ConvergenceWarning,
            stacklevel=user_stacklevel())
    return MaxMarginResult(primal=W, dual=y, method=name,
                           status=status if gap <= tol else "max_iter",
                           n_iter=newton, gap=gap, max_violation=viol)


def _prepare(problem, frobenius):
    """The eliminated program and a strictly feasible start, or ``None`` (decline);
    ``frobenius(problem)``: the Frobenius solution of the same constraints."""
    n = int(np.prod(problem.shape))
    if n > MAX_VARIABLES:
        return None
    check_program_size(problem.name, len(problem.constraints),
                       "the barrier method forms dense n x n systems; use method='cvxpy'.",
                       bytes_per_constraint=16 * n)
    w_fro = np.ravel(frobenius(problem).primal)  # raises NotSeparableError if infeasible
    prog = _Program(problem)
    # twice the Frobenius solution moved back onto the equalities: 2 w_fro when r_E = 0
    # (strictly feasible unless a row of rhs 0 is tight); else, with w_fro = A_E^+ r_E + v
    # (v in the null space of A_E), A_E^+ r_E + 2 v, whose slacks are those of w_fro
    # plus A_I v
    w0 = prog.project_start(2.0 * w_fro)
    s = prog.A_I @ w0 - prog.r_I
    if s.size and not np.all(s > 0):  # not strictly feasible (e.g. a tight row of rhs 0)
        return None
    return prog, w0


def solve_pnorm(problem, tol, max_iter, be, verbose, callback=None, *, frobenius):
    """The method ``"pnorm-barrier"``: ``min ||w||_p`` (``norm=("lp", p)``)."""
    if norm_kind(problem.norm) != "lp":
        return None
    prep = _prepare(problem, frobenius)
    if prep is None:
        return None
    prog, w0 = prep
    return _barrier(problem, _PNorm(prog, problem.norm[1]), prog, w0, tol, max_iter,
                    verbose, callback, "pnorm-barrier")


def solve_spectral(problem, tol, max_iter, be, verbose, callback=None, *, frobenius):
    """The method ``"spectral-barrier"``: ``min ||W||_2`` (``norm="spectral"``)."""
    if problem.norm != "spectral":  # (a spectral program has a matrix parameter)
        return None
    prep = _prepare(problem, frobenius)
    if prep is None:
        return None
    prog, w0 = prep
    return _barrier(problem, _Spectral(prog, problem.shape), prog, w0, tol, max_iter,
                    verbose, callback, "spectral-barrier")

