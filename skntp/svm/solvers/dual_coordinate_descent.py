r"""The sequential dual method for the NTP-SVM: block coordinate ascent, compiled.

Why not a library: liblinear's Crammer-Singer solver (``LinearSVC``) has soft
margins and no equalities, so it serves only the one-hot NTP-SVM, and only
approximately (large ``C``).  On one-hot supports this method takes 8.71 s at
m = 10 000, d = 256, V = 100, where
``LinearSVC(multi_class="crammer_singer", C=1e6, tol=1e-8)`` does not finish in
120 s, and 1.42 s against 9.69 s at m = 2000, d = 64, V = 32
(``benchmarks/README.md``, table "One-hot against LinearSVC").  On tied supports
it is 8-18x faster than ``"accelerated-dual"`` where both finish (table "Scaling").

The NTP-SVM (Thrampoulidis 2024, Sec. 4, constraints (4a)-(4b)) is an
anchored program (see :mod:`skntp.svm.solvers.accelerated_dual`) whose score map is the
linear decoder, ``S[j, v] = s_v w_v^T h_j`` (``s_v = 1`` unless exchangeable
tokens were merged, :func:`skntp.svm.solve_ntp_svm`).  In the table form of
its dual,

.. math::

    \max_C \; \langle L, C\rangle - \tfrac12 \|W(C)\|_F^2, \qquad
    W(C) = \sum_j \operatorname{diag}(s)\, c_j h_j^T,

with row ``c_j`` of ``C`` in ``K_j = {c : c_v <= 0 (v an inequality),
c_v = 0 (no constraint), sum_v c_v = 0}``, the rows interact only through
``W``.  With the other rows fixed, the dual is a separable quadratic in
``c_j`` (its Hessian is ``||h_j||^2 diag(s)^2``), so the exact maximization over
one row is a weighted projection onto ``K_j``, solved exactly by Michelot's
iteration on the few coordinates of the row.  One pass over the rows costs
``O(sum_j |active_j| d)``: this is the sequential dual method of Keerthi et
al. (2008) for the Crammer-Singer SVM (liblinear's ``crammer_singer``),
extended to the free in-support coordinates of the NTP equalities and to
hard margins.

Three devices make it fast when constraints outnumber the parameters (the
regime where the accelerated gradient method of ``"accelerated-dual"`` needs thousands of
iterations):

* **over-relaxation**: each row takes the projected step
  ``c_j <- P_{K_j}(c_j + omega g_j / q_j)`` with ``omega = 1.8``; any
  ``omega in (0, 2)`` increases the dual (block coordinate gradient
  projection, Tseng & Yun 2009), and ``omega`` near 2 halves the number of
  passes on the NTP programs measured in ``benchmarks/``;
* **shrinking**: an inequality whose multiplier is 0 and whose constraint
  holds with slack leaves the row's active list; the full check below puts
  back every constraint that is violated or nearly active;
* **compiled rows** (numba): the row update is a short loop over the row's
  active coordinates, one dot product with ``h_j`` each.

Hand-over
---------
Block steps converge linearly at a rate set by the program's conditioning.
On programs with tiny margins (nearly non-separable data) that rate is
poor, and an infeasible program makes the dual grow without bound, which
block steps follow only linearly.  Both are detected from the certificates
(the rate of the best ``max(gap, violation)`` over the last 100 passes, and
``r^T lam`` outgrowing ``||A^T lam||^2``), and the solve goes on with the
accelerated method ``"accelerated-dual"`` from the current multipliers (whose exact face
solve certifies infeasibility).

Certificate
-----------
Every few passes the multipliers are mapped to ``w = A^T lam`` exactly,
every constraint is evaluated (in row chunks of the score table) and the
iteration stops with the certificate of :mod:`skntp.svm.solvers.accelerated_dual`: relative
duality gap and largest violation below ``tol``.  Infeasible programs make
the dual unbounded: when the multipliers grow while ``w`` does not, the
direction of their growth is tested as a Farkas ray (the lower bound
``||w*|| >= r^T lam / ||A^T lam||`` of any dual-feasible ``lam``) and
:class:`NotSeparableError` is raised once it bounds the normalized margin below
:data:`skntp.svm.solvers.accelerated_dual.INFEASIBLE_MARGIN`, with the multipliers
as its ``ray``: a claim, which :func:`~skntp.svm.solve_max_margin` checks.
"""

from __future__ import annotations

import math
import os
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from ..._backend import get_backend
from ..._warnings import user_stacklevel
from .._problem import BilinearScores, MaxMarginResult
from .accelerated_dual import (
    INFEASIBLE_MARGIN,
    anchored_blocks,
    anchored_structure,
    fista,
    infeasible_error,
)

__all__ = ["cache_dir", "solve", "solve_dcd"]

#: Over-relaxation of the row steps (any value in (0, 2) converges).
OMEGA = 1.8

#: Largest score-table chunk (rows x positions) evaluated at once by the check.
CHECK_CHUNK = 2**22

# Dot products may be reassociated (SIMD); nothing here relies on inf or NaN.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


def _sweep_source(H, W, scale, qn, ptr, n_active, pos, free, lin, c, cidx, order, omega,
                  shrink, buf):  # pragma: no cover - runs compiled
    """One pass of over-relaxed block coordinate ascent over the rows in ``order``.

    Row ``j`` owns the entries ``ptr[j] .. ptr[j] + n_active[j]`` (active) and
    ``.. ptr[j + 1]`` (shrunk).  Returns the largest step ``|delta| q / omega``
    (a projected-gradient norm in score units) over the pass.
    """
    d = H.shape[1]
    max_step = 0.0
    g = buf[0]
    a = buf[1]
    u = buf[2]
    for jj in range(order.shape[0]):
        j = order[jj]
        p0 = ptr[j]
        n = n_active[j]
        q = qn[j]
        if n == 0 or q == 0.0:
            continue
        # gradient of the dual on the row's active entries
        fu = 0.0
        fa = 0.0
        for e in range(n):
            t = pos[p0 + e]
            acc = 0.0
            for k in range(d):
                acc += W[t, k] * H[j, k]
            st = scale[t]
            g[e] = lin[p0 + e] - st * acc
            a[e] = omega / (q * st * st)
            u[e] = c[p0 + e] + a[e] * g[e]
            if free[p0 + e]:
                fu += u[e]
                fa += a[e]
        # Michelot: mu is the root of sum_free (u - mu a) + sum_neg min(u - mu a, 0)
        mu = fu / fa
        count = -1
        while True:
            su = fu
            sa = fa
            cnt = 0
            for e in range(n):
                if not free[p0 + e] and u[e] - mu * a[e] < 0.0:
                    su += u[e]
                    sa += a[e]
                    cnt += 1
            mu = su / sa
            if cnt == count:
                break
            count = cnt
        # update the row and W; shrink inequalities at 0 with slack
        e = 0
        while e < n:
            p = p0 + e
            new = u[e] - mu * a[e]
            if not free[p] and new > 0.0:
                new = 0.0
            delta = new - c[p]
            if delta != 0.0:
                step = abs(delta) / a[e]
                if step > max_step:
                    max_step = step
                t = pos[p]
                coef = delta * scale[t]
                for k in range(d):
                    W[t, k] += coef * H[j, k]
                c[p] = new
            if not free[p] and new == 0.0 and (u[e] - mu * a[e]) / a[e] > shrink:
                n -= 1
                last = p0 + n
                pos[p], pos[last] = pos[last], pos[p]
                free[p], free[last] = free[last], free[p]
                lin[p], lin[last] = lin[last], lin[p]
                c[p], c[last] = c[last], c[p]
                cidx[p], cidx[last] = cidx[last], cidx[p]
                u[e] = u[n]
                a[e] = a[n]
                continue
            e += 1
        n_active[j] = n
    return max_step


_COMPILED = []


def _sweep(*args):
    """The compiled :func:`_sweep_source` (numba, cached on disk; imported on first use)."""
    if not _COMPILED:
        _COMPILED.append(_compile(_sweep_source))
    return _COMPILED[0](*args)


def cache_dir():
    """Where the compiled kernels are cached: ``NUMBA_CACHE_DIR`` when the user set it,
    else ``skntp/numba`` in the user's cache folder (``~/.cache`` on Linux).

    Never next to the source, numba's default: inside an installed package the
    cache files outlive ``pip uninstall`` (they are in no RECORD), and the folder
    they keep alive shadows a later editable install (``import skntp`` then
    finds a namespace package without a module: "unknown location").
    """
    import numba
    from numba.misc.appdirs import AppDirs

    return numba.config.CACHE_DIR or os.path.join(AppDirs("skntp").user_cache_dir, "numba")


def _compile(func):
    import numba

    # numba picks the cache's place when the function is decorated; the user-provided
    # locator reads numba.config.CACHE_DIR, which is set for that moment only
    chosen = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = cache_dir()
    try:
        return numba.njit(cache=True, fastmath=_FASTMATH)(func)
    finally:
        numba.config.CACHE_DIR = chosen


class _NTPDual:
    """The multipliers of an anchored linear-decoder program and the maps it needs.

    Holds the per-constraint description (block, non-anchor position, sign,
    linear term), the constraints sorted by block for chunked evaluation, and
    maps multipliers ``lam`` to ``w = A^T lam`` (a sparse product) and ``w``
    to every constraint's value (dense row chunks of the score table).
    """

    def __init__(self, problem, ab):
        c = problem.constraints
        sc = problem.scores
        self.problem = problem
        self.B, self.T = sc.n_blocks, sc.n_positions
        self.H = np.ascontiguousarray(sc.queries, dtype=np.float64)
        self.scale = (np.ones(self.T) if sc.output_scale is None
                      else np.asarray(sc.output_scale, dtype=np.float64))
        self.block = ab["block"]
        self.t = ab["t"]
        self.anchor = ab["anchor"]
        self.sigma = ab["sigma"]
        self.eq = c.equality
        self.rhs = c.rhs
        self.lin = -self.sigma * self.rhs  # entry of the dual's linear term
        self.order = ab["order"]  # constraints sorted by block (stable)
        self.block_ptr = np.searchsorted(self.block[self.order], np.arange(self.B + 1))
        self.qn = np.einsum("ij,ij->i", self.H, self.H)
        hn = np.sqrt(self.qn)
        # largest constraint-row norm ||(s_a e_a - s_t e_t) h_b^T||
        sa = self.scale[self.anchor[self.block]]
        st = self.scale[self.t]
        self.a_scale = float(np.max(np.sqrt(sa * sa + st * st) * hn[self.block]))
        self.rscale = max(1.0, float(np.max(np.abs(self.rhs))))

    def table(self, lam):
        """Sparse ``(B, T)`` dual table of ``lam`` (anchor entries = minus the row sums)."""
        nz = np.flatnonzero(lam)
        vals = -self.sigma[nz] * lam[nz]
        blk = self.block[nz]
        rows = np.concatenate([blk, blk])
        cols = np.concatenate([self.t[nz], self.anchor[blk]])
        return sp.csr_matrix((np.concatenate([vals, -vals]), (rows, cols)),
                             shape=(self.B, self.T))

    def primal(self, lam):
        """``w = A^T lam`` of shape ``(T, d)``."""
        C = self.table(lam)
        return np.asarray(C.T @ self.H) * self.scale[:, None]

    def values(self, w):
        """Every constraint's value ``S_{b a}(w) - S_{b t}(w)`` (chunks of rows)."""
        out = np.empty(self.block.size)
        ws = w * self.scale[:, None]
        rows = max(1, CHECK_CHUNK // max(self.T, 1))
        for b0 in range(0, self.B, rows):
            b1 = min(b0 + rows, self.B)
            idx = self.order[self.block_ptr[b0]:self.block_ptr[b1]]
            if idx.size == 0:
                continue
            S = self.H[b0:b1] @ ws.T
            r = self.block[idx] - b0
            out[idx] = self.sigma[idx] * (S[r, self.anchor[self.block[idx]]] - S[r, self.t[idx]])
        return out

    def certificate(self, lam, tol):
        """``(w, values, gap, violation, bound, certified)`` of a dual-feasible ``lam``."""
        eps = np.finfo(np.float64).eps
        w = self.primal(lam)
        v = self.values(w) - self.rhs
        viol = np.where(self.eq, np.abs(v), np.maximum(-v, 0.0))
        viol = float(viol.max()) if viol.size else 0.0
        sq = float(np.vdot(w, w))
        rl = float(self.rhs @ lam)
        gap = abs(sq - rl) / sq if sq > 0 else (0.0 if rl <= 0 else math.inf)
        w_floor = 10.0 * eps * self.a_scale * float(np.sum(np.abs(lam)))
        wn = max(math.sqrt(sq), w_floor)
        bound = rl / wn if (rl > 0 and wn > 0) else (math.inf if rl > 0 else 0.0)
        floor = 1e3 * eps * self.a_scale * math.sqrt(sq)
        ok = gap <= max(tol, 1e3 * eps) and viol <= max(tol * self.rscale, floor)
        return w, v, gap, viol, bound, ok

    def rows(self, lam, keep):
        """The compiled sweep's row layout for the constraints ``keep``.

        Row ``j`` lists its anchor first (free, linear term 0), then its kept
        constraints; returns ``(ptr, pos, free, lin, c, cidx)`` with
        ``cidx = -1`` at anchors.
        """
        idx = self.order[keep[self.order]]
        blk = self.block[idx]
        counts = np.bincount(blk, minlength=self.B) + 1
        ptr = np.zeros(self.B + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        n = int(ptr[-1])
        slot = np.arange(idx.size) - np.searchsorted(blk, blk) + ptr[blk] + 1
        pos = np.empty(n, dtype=np.int64)
        free = np.ones(n, dtype=np.bool_)
        lin = np.zeros(n)
        cidx = np.full(n, -1, dtype=np.int64)
        pos[ptr[:-1]] = np.maximum(self.anchor, 0)
        pos[slot] = self.t[idx]
        free[slot] = self.eq[idx]
        lin[slot] = self.lin[idx]
        cidx[slot] = idx
        vals = -self.sigma * lam
        c = np.zeros(n)
        c[slot] = vals[idx]
        c[ptr[:-1]] = -np.bincount(blk, weights=vals[idx], minlength=self.B)
        return ptr, pos, free, lin, c, cidx


def solve_dcd(problem, tol=1e-8, max_iter=100_000, be=None, verbose=0, *, callback=None,
              omega=OMEGA, random_state=0, hand_over=True):
    """Solve an anchored linear-decoder program by the sequential dual method.

    See the module docstring.  Returns ``None`` (declines) unless the
    problem's score map is :class:`BilinearScores` with ``outputs=None`` and
    its constraints are anchored with no constraint against 0 (the NTP-SVM
    and the one-hot Crammer-Singer SVM), and the backend runs on the CPU.

    Parameters
    ----------
    problem : MaxMarginProblem
    tol : float, default=1e-8
        Relative duality gap and (``max(1, max|r|)``-scaled) violation target.
    max_iter : int, default=100_000
        Maximum number of passes over the rows.
    be : Backend, optional
    verbose : int, default=0
    callback : callable, optional
        ``callback(n_iter, gap, violation)`` at every certificate check.
    omega : float, default=1.8
        Over-relaxation of the row steps, in (0, 2).
    random_state : int, default=0
        Seeds the order of the rows in each pass.
    hand_over : bool, default=True
        Go on with the accelerated method ``"accelerated-dual"``, warm-started from the
        multipliers, when the dual runs off along a ray (an infeasible
        program, certified there) or when the measured linear rate predicts
        more than ``max(10000, 10 x passes so far)`` further passes (tiny
        margins); the result then names ``method="accelerated-dual"``.

    Returns
    -------
    MaxMarginResult or None

    Raises
    ------
    NotSeparableError
        When a Farkas ray of the dual bounds the normalized margin below
        :data:`~skntp.svm.solvers.accelerated_dual.INFEASIBLE_MARGIN` (a claim, its
        multipliers in ``ray``).
    """
    sc = problem.scores
    if not isinstance(sc, BilinearScores) or sc.outputs is not None:
        return None
    if be is not None and be.name != "numpy" and str(be.device) != "cpu":
        return None
    if not 0.0 < omega < 2.0:
        raise ValueError(f"omega must lie in (0, 2), got {omega}.")
    ab = anchored_blocks(problem)
    if ab is None or ab["is_rho"].any():
        return None
    dual = _NTPDual(problem, ab)
    result = _run(dual, problem, tol, max_iter, verbose, callback, omega, random_state,
                  hand_over)
    if result.status != "optimal":
        warnings.warn(
            f"{problem.name}: method '{result.method}' stopped after {result.n_iter} "
            f"iterations with relative duality gap {result.gap:.3e} and constraint violation "
            f"{result.max_violation:.3e} (tol={tol:g}); increase max_iter.",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    return result


def _run(dual, problem, tol, max_iter, verbose, callback, omega, random_state, hand_over):
    t0 = time.perf_counter()
    rng = np.random.default_rng(random_state)
    n_c = dual.block.size
    ineq = ~dual.eq
    lam = np.zeros(n_c)
    w = np.zeros((dual.T, dual.H.shape[1]))
    keep = np.ones(n_c, dtype=bool)  # every constraint is violated at lam = 0
    shrink = 0.1  # slack (score units) beyond which a zero multiplier leaves its row
    epochs = 0
    n_checks = 0
    status = "max_iter"
    gap = viol = math.inf
    per_check = 1
    history = []  # (passes, max(gap, violation)) at every check
    while True:
        ptr, pos, free, lin, c, cidx = dual.rows(lam, keep)
        n_active = np.diff(ptr)
        width = int(n_active.max()) if n_active.size else 1
        buf = np.empty((3, max(width, 1)))
        W = np.ascontiguousarray(w)
        step = math.inf
        for _ in range(per_check):
            if epochs >= max_iter:
                break
            step = _sweep(dual.H, W, dual.scale, dual.qn, ptr, n_active, pos, free, lin, c,
                          cidx, rng.permutation(dual.B), omega, shrink, buf)
            epochs += 1
            shrink = max(min(shrink, step), tol)
            if step <= 0.1 * tol:
                break
        # multipliers of the constraints on the rows (anchors carry none)
        on = cidx >= 0
        lam = lam.copy()
        lam[keep] = 0.0
        lam[cidx[on]] = -dual.sigma[cidx[on]] * c[on]
        lam[ineq] = np.maximum(lam[ineq], 0.0)
        w, v, gap, viol, bound, ok = dual.certificate(lam, tol)
        n_checks += 1
        if callback is not None:
            callback(epochs, gap, viol)
        if verbose > 1:
            print(f"[{problem.name} dcd] pass {epochs}: gap={gap:.2e} viol={viol:.2e} "
                  f"active={int(n_active.sum())}/{n_c} ||w*||>={bound:.3e}")
        if ok:
            status = "optimal"
            break
        if bound * dual.a_scale > 1.0 / INFEASIBLE_MARGIN:
            raise infeasible_error(problem, epochs, lam)
        merit = max(gap, viol / dual.rscale)
        history.append((epochs, merit))
        reason = None
        if n_checks > 3 and float(dual.rhs @ lam) > 10.0 * float(np.vdot(w, w)):
            # r^T lam outgrows ||A^T lam||^2 ten times over (at the optimum they are
            # equal): the dual runs off along a Farkas ray, which block steps follow
            # only linearly.  The accelerated method certifies such rays by an exact
            # solve on the face.
            reason = "the dual grows without bound"
        elif _too_slow(history, tol):
            # block steps converge linearly at a rate set by the conditioning;
            # on ill-conditioned programs (tiny margins) acceleration wins
            reason = "slow linear convergence"
        if reason is not None and hand_over:
            if verbose:
                print(f"[{problem.name} dcd] {reason} after {epochs} passes: going on with "
                      "method 'accelerated-dual' from here")
            return _hand_over(dual, problem, lam, tol, max(max_iter - epochs, 1), verbose,
                              callback, epochs)
        if epochs >= max_iter:
            break
        # next rows: nonzero multipliers, equalities, and every inequality that is
        # violated or within the shrinking slack (v: each constraint's slack)
        keep = dual.eq | (lam > 0) | (v < shrink)
        # passes until the next check: a check costs about one dense score table
        # plus gathers per constraint, a pass two dot products per active entry;
        # spend about as much on passes as twice the checks (counted, not timed,
        # so that a fit is reproducible bit for bit)
        d = dual.H.shape[1]
        check_cost = dual.B * dual.T * d + 100.0 * n_c
        pass_cost = 2.0 * max(int(n_active.sum()), 1) * d  # active entries after shrinking
        per_check = int(min(50, max(1, math.ceil(2.0 * check_cost / pass_cost))))
    if verbose:
        print(f"[{problem.name} dcd] {status}: {epochs} passes, {n_checks} checks, "
              f"gap={gap:.2e}, violation={viol:.2e}, {time.perf_counter() - t0:.2f}s")
    return MaxMarginResult(primal=w, dual=lam, method="dcd", status=status, n_iter=int(epochs),
                           gap=float(gap), max_violation=float(viol))


#: Passes over which the convergence rate is measured, and the horizon beyond
#: which (``max(SLOW_HORIZON, 10 x passes so far)`` more passes predicted) the
#: method hands over to ``"accelerated-dual"``.
RATE_WINDOW, SLOW_HORIZON = 100, 10_000


def _too_slow(history, tol):
    """Whether the measured linear rate predicts too many passes to reach ``tol``.

    The rate is that of the best merit (``max(gap, violation)``) so far over the
    last :data:`RATE_WINDOW` passes: the merit itself is not monotone.
    """
    epochs = history[-1][0]
    best = min(h[1] for h in history)
    if epochs < RATE_WINDOW or best <= tol:
        return False
    past = [h for h in history if h[0] <= epochs - RATE_WINDOW]
    if not past:
        return False
    e0 = past[-1][0]
    best0 = min(h[1] for h in past)
    if best >= best0:
        return True
    per_pass = math.log(best / best0) / (epochs - e0)
    remaining = math.log(tol / best) / per_pass
    return remaining > max(SLOW_HORIZON, 10 * epochs)


def _hand_over(dual, problem, lam, tol, max_iter, verbose, callback, epochs):
    """Continue with the accelerated method ``"accelerated-dual"`` from the multipliers ``lam``."""
    x0 = dual.table(lam).toarray()
    result = fista(problem, anchored_structure(problem), get_backend("numpy"), tol, max_iter,
                    verbose, 10, True, x0=x0, callback=callback, it0=epochs)[0]
    result.n_iter += epochs
    return result


def solve(problem, tol, max_iter, be, verbose, callback=None):
    """The method ``"dcd"`` (:func:`solve_dcd` with its defaults)."""
    return solve_dcd(problem, tol, max_iter, be, verbose, callback=callback)
