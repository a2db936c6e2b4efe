"""Newton's method for the smooth convex losses whose minimizers are the finite components.

``W_fin`` of data that are not NTP-separable (:func:`skntp.svm.partial_finite_component`)
and the stationary-point proof (:func:`skntp.svm.no_row_is_separable`) minimize the
NTP cross-entropy (2) restricted to a subspace, where the minimizer is finite but the
Hessian is singular off that subspace.  The cyclic correction of the Graph-SVM
(:func:`skntp.svm.cyclic_correction`) polishes scipy's L-BFGS answer with a few
Newton steps in a small basis (:func:`newton_polish`).

Why not a library: :func:`scipy.optimize.minimize` with ``method="Newton-CG"`` stops
on the step size, not on the gradient norm the certificate needs; with
``method="trust-krylov"`` (a gradient-norm stop, the same Hessian products) it did not
converge in 200 iterations (20.4 s, relative gradient 9.6e-8) where this loop took 8
Newton steps (4.5 s, 8.8e-10), on the real text of 3,889 contexts, V = 298, d = 32
(``python benchmarks/ntp_separability.py --newton``, commit a760267, load 1.2;
``benchmarks/README.md``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.optimize
import scipy.sparse.linalg

__all__ = ["GradientStall", "newton_cg", "newton_polish"]


class GradientStall:
    """Whether Newton's quadratic phase has stalled, from the gradients it reports.

    Called with each step's gradient norm, it answers True once ``patience`` steps
    in a row have not halved the smallest norm seen so far: where Newton converges
    quadratically to a minimizer each step would more than halve it, so a stall means
    the objective's precision is reached, or the iterates drift along a direction
    with no minimizer (a separable row).  The stop of the stationary-point proof, the
    far-point split and the analytic center.
    """

    def __init__(self, patience=5):
        self.patience = patience
        self.best = math.inf
        self.flat = 0

    def __call__(self, gradient):
        self.flat = 0 if gradient <= 0.5 * self.best else self.flat + 1
        self.best = min(self.best, gradient)
        return self.flat >= self.patience


def newton_cg(fun, hess_at, x, gtol, max_iter, cg_iter=200, report=None,
              max_products=None, precondition_at=None, line_at=None, single_above=None,
              max_step=None):
    """Minimize a smooth convex ``fun`` by Newton steps (CG on the Hessian) and backtracking.

    ``fun(x) -> (value, gradient)``, ``hess_at(x) -> (v -> Hessian(x) v)``;
    ``precondition_at(x) -> (r -> M^{-1} r)``, if given, a symmetric positive
    definite preconditioner of CG on the gradient's subspace (it must map that
    subspace into itself, as the Hessian does).  Stops
    when ``||gradient|| <= gtol``, after ``max_iter`` steps, or once
    ``max_products`` Hessian products are spent, with at most ``cg_iter`` CG
    iterations per step (inexact Newton: CG's relative tolerance is
    ``min(0.5, sqrt(||gradient||))``).  CG runs in the Krylov space of the
    gradient, so a Hessian singular off the gradient's subspace (``F_I^perp``
    here) does no harm.  ``report(k, ||gradient||, x)``, if given, is called
    before each step; it may raise StopIteration to end the minimization at
    ``x`` (scipy.optimize's convention for callbacks).

    ``line_at(x, step) -> (t -> fun(x + t step)[0])``, if given, is the loss
    along the Newton step, cheaper than ``fun`` (no gradient).  A full step
    that lowers the loss by less than a quarter of the linear prediction
    (half of what a quadratic model promises) is then replaced by the step
    length that minimizes the loss on ``[0, 1]`` (``[0, t]`` with ``max_step``'s first
    length ``t``; bounded Brent, to ``1e-3``):
    far from the minimizer the Newton step overshoots, and halving it took 31
    Newton steps where this took 21 (``benchmarks/ntp_separability.py
    --preconditioner``).  Otherwise, and if the minimizer found does not lower
    the loss enough, the step is halved until it does (Armijo, ``1e-4``).

    ``single_above``, if given: steps whose CG tolerance is at least this call
    ``hess_at(x, single=True)`` (products in single precision: far from the minimizer
    the step needs a few digits, and the products are the cost).

    ``max_step(x, step)``, if given, is the largest ``t`` with ``x + t step`` in the
    domain of ``fun`` (a barrier's, where ``fun`` is ``+inf`` outside): the first
    length tried is ``min(1, 0.99 max_step)``, the fraction to the boundary of
    interior-point methods, instead of 1.

    Returns ``(x, n_iter)``.
    """
    budget = math.inf if max_products is None else int(max_products)
    value, grad = fun(x)
    for k in range(max_iter):
        g = float(np.linalg.norm(grad))
        if report is not None:
            try:
                report(k, g, x)
            except StopIteration:
                return x, k
        if g <= gtol or budget < 1:
            return x, k
        rtol = min(0.5, math.sqrt(g))
        single = single_above is not None and rtol >= single_above
        product = hess_at(x, single=True) if single else hess_at(x)
        used = [0]

        def counted(v, product=product, used=used):
            used[0] += 1
            q = product(v)
            if not float(v @ q) > 0:  # no curvature left along v (round-off)
                raise _Breakdown
            return q

        op = scipy.sparse.linalg.LinearOperator((x.size, x.size), counted, dtype=float)
        M = None if precondition_at is None else scipy.sparse.linalg.LinearOperator(
            (x.size, x.size), _guarded(precondition_at(x)), dtype=float)
        last = [np.zeros_like(x)]

        def keep(xk, last=last):
            last[0] = xk.copy()

        try:
            # an ill-conditioned Hessian can send CG's iterates past float range; the
            # step is then not finite and replaced below
            with np.errstate(over="ignore", invalid="ignore"):
                step, _ = scipy.sparse.linalg.cg(op, -grad, rtol=rtol,
                                                 maxiter=int(min(cg_iter, budget)), M=M,
                                                 callback=keep)
        except _Breakdown:  # CG's last iterate
            step = last[0]
        budget -= 0.5 * used[0] if single else used[0]  # (single: about half the time)
        with np.errstate(over="ignore", invalid="ignore"):
            slope = float(grad @ step)
        if not (slope < 0 and np.isfinite(slope)):  # CG lost descent: a gradient step
            step, slope = -grad, -g * g
        t = 1.0 if max_step is None else min(1.0, 0.99 * float(max_step(x, step)))
        if not t > 0:  # (at the domain's boundary: no step left)
            return x, k
        new_value, new_grad = fun(x + t * step)
        if (-t * slope <= 64 * np.finfo(float).eps * abs(value) and new_value <= value
                + 64 * np.finfo(float).eps * abs(value)
                and np.linalg.norm(new_grad) < g):
            # the decrease is below the loss's rounding: the values cannot rank the
            # steps, the gradient's norm can (the full Newton step is kept if it shrinks)
            x, value, grad = x + t * step, new_value, new_grad
            continue
        if line_at is not None and not new_value <= value + 0.25 * t * slope:
            along = scipy.optimize.minimize_scalar(
                line_at(x, step), bounds=(0.0, t), method="bounded",
                options={"xatol": 1e-3})
            if along.x > 0:
                t = float(along.x)
                new_value, new_grad = fun(x + t * step)
        while not (new_value <= value + 1e-4 * t * slope or t < 1e-12):
            t *= 0.5
            new_value, new_grad = fun(x + t * step)
        if t < 1e-12:  # no decrease left at this precision
            return x, k
        x, value, grad = x + t * step, new_value, new_grad
    return x, max_iter


class _Breakdown(Exception):
    """CG cannot go on: no curvature, or no preconditioned residual, left."""


def _guarded(apply):
    """The preconditioner ``apply``, raising _Breakdown where ``r^T M^{-1} r`` is not
    positive.  Near the loss's precision the residual is round-off that a
    single-precision preconditioner maps to (almost) nothing, or a direction
    without curvature; scipy's CG would divide by that zero and go on with NaN
    (a RuntimeWarning at the user's line).  The Newton step is then CG's last
    iterate."""
    def guarded(r):
        z = apply(r)
        if not float(r @ z) > 0:
            raise _Breakdown
        return z
    return guarded


def newton_polish(fun, theta, tol, steps=3, h=1e-6):
    """A few Newton steps on ``fun(theta) -> (value, gradient)`` in a small dimension.

    The Hessian is the central finite difference of the exact gradient (``2 r``
    gradients for ``r`` unknowns), solved by least squares (a singular Hessian
    gives the minimum-norm step), with backtracking.  Stops when the gradient
    norm is at most ``tol`` or a step no longer lowers it.  For polishing an
    L-BFGS answer that stopped on precision.
    """
    for _ in range(steps):
        f0, g0 = fun(theta)
        if np.linalg.norm(g0) <= tol:
            break
        r = theta.size
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
    return theta
