r"""A fast max-margin method of our own: restarted accelerated dual ascent.

Why not a library: cvxpy with Clarabel factors the whole program and does not
finish the NTP-SVM with m = 150, d = 160, V = 60 in 120 s, which this method
certifies in 0.043 s; on Graph-SVM (K = 200, d = 64, n = 5000, 14 161 edges) it
takes 1.07 s against more than 120 s for Clarabel (``benchmarks/README.md``,
table "Max-margin core").  Its iteration is two products with the score map, so
it also runs on torch and on a GPU, where ``"dcd"`` declines.

The program (see :mod:`skntp.svm._problem`) is

.. math::

    \min_w \tfrac12\|w\|^2 \quad\text{s.t.}\quad a_k^T w \ge r_k \;(k\in I),
    \qquad a_k^T w = r_k \;(k \in E),

with ``a_k^T w = S_{b_k a_k}(w) - S_{b_k t_k}(w)`` a difference of two entries
of a linear score table ``S(w)`` (one row per block).  Its Lagrange dual is

.. math::

    \max_{\lambda:\ \lambda_I \ge 0}\; D(\lambda) = r^T\lambda - \tfrac12\|A^T\lambda\|^2,
    \qquad w(\lambda) = A^T\lambda = S^*(C(\lambda)),

where ``C(lam)`` is the table ``sum_k lam_k (e_{b_k a_k} - e_{b_k t_k})``.
Strong duality holds whenever the primal is feasible, and then
``w* = w(lam*)``.

Anchored blocks (the Crammer-Singer form)
-----------------------------------------
In the NTP-SVM (Thrampoulidis 2024, constraints (4a)-(4b)), the ATT-SVM
(Tarzanagh et al. 2023, eq. (Att-SVM)), the relaxed ATT-SVM (eq. (10)) and
the head SVM ``v^mm`` every constraint of a block shares one position, the
*anchor* ``a_b``.  Then the dual is best written in terms of the table
``C`` itself: row ``c_b`` of ``C`` is

* ``c_b[t] = -lam_k <= 0`` for an inequality ``S_{b a} - S_{b t} >= r_k``,
* ``c_b[t] = -mu_k`` free for an equality (a free multiplier; an equality
  written with the anchor second just flips the sign),
* ``c_b[t] = 0`` at positions without a constraint,
* ``c_b[a] = -sum_{t != a} c_b[t] + rho_b``, where ``rho_b`` is the multiplier
  of a constraint ``S_{b a} >= r`` (``>= 0``; free for ``=``; absent: ``0``).

So the feasible set of row ``b`` is
``K_b = {c : c_t <= 0 (t in I_b), c_t = 0 (t unconstrained), sum(c) = rho_b}``,
the dual objective is ``<L, C> - 1/2 ||S^*(C)||^2`` with
``L[b, t] = -r_k`` (sign-adjusted) ``+ r_rho`` (the anchor constraint's rhs,
as ``rho_b = sum(c_b)``), and ``W = S^*(C)``; for the NTP decoder
``W = C^T H`` (``H`` the contexts).  With ``|S_j| = 1`` this is exactly the
Crammer-Singer dual with the box bound ``C = inf`` (hard margin); the support
coordinates are free.  The Euclidean projection onto ``K_b`` is
``c_t = clip(u_t - theta)``, with ``theta`` the root of the concave,
decreasing, piecewise-linear ``f(theta) = sum_t clip(u_t - theta) - rho``;
``f`` is the minimum of the lines through its pieces, so the root is found
exactly by Michelot's iteration from above (see ``_TableSpace._theta``; the
Crammer-Singer block update of liblinear, all rows at once, on the few
coordinates below the last root instead of a sort of each row).  This metric
is the natural one: in the multiplier space the "anchor" direction is ``V``
times stiffer, in ``C`` it is not.

Other problems (Graph-SVM, whose constraints are the edges of token-priority
graphs and share no anchor) are solved in the multiplier space, where the
projection is ``lam_I <- max(lam_I, 0)``.

The iteration
-------------
FISTA (accelerated projected gradient ascent on ``D``, step ``1 / ||S||^2``
from a power iteration) over all blocks at once: two matrix products per
iteration (``S`` and ``S^*``), NumPy or torch alike, with function-value
restarts (which give linear convergence on this polyhedral QP) and a
backtracking safeguard on the power-iteration step.  Once the face of the
feasible set (the set of nonzero multipliers) has nearly stopped changing
between two checks (at most 0.2% of it), a *polish* runs primal-dual
active-set cycles: maximize ``D`` exactly on the face by conjugate
gradients (on the face's coordinates only: each step is the two products
and vectors as small as the face), drop the multipliers that come out with
the wrong sign, add the constraints that the face optimum violates, repeat
(at most 10 cycles of at most 200 CG steps, one more on a consistent face
whose CG stopped at that cap; the CG iterations are capped at 3 times the
FISTA iterations so far).  If the face
is the optimal one this lands on ``lam*`` to machine precision; a face along
which ``D`` is unbounded is either a Farkas ray (tested as an infeasibility
certificate below) or a wrong guess (discarded).  Every polish result must
pass the same certificate as any other iterate; a failed one is a warm
start when it improves ``D``.

Working sets
------------
For anchored programs with many positions per block (the NTP-SVM with a
large vocabulary) most inequalities are inactive at the optimum.  Then the
method solves the program restricted to a working set of them (a
:class:`GatheredScores` map over the kept positions, so every array is
``(blocks, kept positions)``), evaluates all constraints at the restricted
solution and adds the most violated ones per block; early rounds stop at a
loose tolerance.  The restricted multipliers, zero elsewhere, are dual
feasible for the whole program with the same value, so the final
certificate is the whole program's.

Stopping rule (certified)
-------------------------
Every iterate ``lam`` is dual feasible, so ``D(lam) <= D* = 1/2 ||w*||^2``.
With ``w = A^T lam`` the iteration stops when both

* the relative duality gap ``|‖w‖^2 - r^T lam| / ‖w‖^2 <= tol`` and
* the largest constraint violation of ``w`` is ``<= tol * max(1, max|r|)``

(both floored at 1000 units of roundoff of the computed scores,
``1000 eps ||S|| ||w||``, below which no float64 method can certify).

Then ``||w - w*||^2 <= 2 (D* - D(lam))``, which is bounded by the gap up to
the (tiny) violation, so ``||w - w*|| / ||w*|| <~ sqrt(2 tol)``; in practice
the polish step makes both numbers ~1e-14.  ``gap`` and ``max_violation`` of
the :class:`MaxMarginResult` report the final values; a run that stops at
``max_iter`` issues a :class:`~sklearn.exceptions.ConvergenceWarning`
naming them.

Infeasibility
-------------
For any dual-feasible ``lam`` with ``r^T lam > 0`` and any feasible ``w``,
``r^T lam <= lam^T A w <= ||A^T lam|| ||w||``, so
``||w*|| >= r^T lam / ||A^T lam||``: every iterate certifies a lower bound on
``||w*||`` (tight at the optimum).  When the program is infeasible the dual
is unbounded, ``lam`` runs off along a Farkas direction and the bound
diverges.  The method raises :class:`NotSeparableError` once the bound
proves that the normalized margin ``1 / (||w*|| max_k ||a_k||)`` is below
``1e-9`` (the order of the infeasibility tolerance of the cvxpy/Clarabel
reference path).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..._backend import get_backend, scatter_add, to_numpy
from ..._warnings import user_stacklevel
from .._problem import Constraints, MaxMarginProblem, MaxMarginResult, NotSeparableError

__all__ = ["INFEASIBLE_MARGIN", "anchored_blocks", "anchored_structure",
           "fista", "infeasible_error", "solve", "solve_accelerated_dual"]


#: Normalized-margin threshold below which a problem is declared infeasible.
INFEASIBLE_MARGIN = 1e-9

#: Polish once at most this fraction of the face changed between two checks.
POLISH_FACE_CHANGE = 0.002

#: Smallest dual table (blocks x positions) solved on a working set by default.
#: (The NTP-SVM of 10 000 contexts over 163 token classes, a 1.6e6 table, takes
#: ~118 s whole and over 200 s in working-set rounds on 2 cores.)
WORKING_SET_MIN_TABLE = 4_000_000


# --------------------------------------------------------------------------
# Structure detection
# --------------------------------------------------------------------------
def anchored_blocks(problem):
    """Detect anchored blocks from the constraint list alone (no ``(B, T)`` table).

    Returns ``None`` unless every block has a common anchor, no position
    carries two constraints, every inequality has the anchor first, and each
    block has at most one constraint against 0 (``ref = -1``).  Otherwise a
    dict of per-constraint arrays: ``block``; ``t``, the constraint's other
    position (its anchor for ``ref = -1``); ``sigma``, +1 when the anchor is
    written first; ``is_rho``, the constraints against 0; and per block
    ``anchor`` (-1 for blocks without constraints).
    """
    c = problem.constraints
    B, T = problem.scores.n_blocks, problem.scores.n_positions
    n = len(c)
    if n == 0:
        return None
    blk, pos, ref = c.block, c.pos, c.ref
    if np.any(pos == ref):
        return None
    first = np.full(B, -1, dtype=np.int64)
    order = np.argsort(blk, kind="stable")
    ub, idx = np.unique(blk[order], return_index=True)
    first[ub] = order[idx]
    has = first >= 0
    cand = np.stack([np.where(has, pos[np.maximum(first, 0)], -1),
                     np.where(has, ref[np.maximum(first, 0)], -1)])
    ok = np.zeros((2, B), dtype=bool)
    for i in range(2):
        a = cand[i][blk]
        bad = ~((pos == a) | (ref == a)) | (a < 0)
        ok[i] = np.bincount(blk, weights=bad, minlength=B) == 0
    anchor = np.where(ok[0], cand[0], np.where(ok[1], cand[1], -1))
    if np.any(has & (anchor < 0)):
        return None
    a = anchor[blk]
    is_rho = ref < 0
    sigma = np.where(pos == a, 1.0, -1.0)
    t = np.where(pos == a, ref, pos)
    if np.any(~c.equality & (sigma < 0)):
        return None
    if np.any(np.bincount(blk[is_rho], minlength=B) > 1):
        return None
    two = ~is_rho
    key = blk[two] * T + t[two]
    if B * T <= 8 * key.size:  # a count per table entry is cheaper than a sort
        if key.size and np.bincount(key, minlength=B * T).max() > 1:
            return None
    elif np.unique(key).size != key.size:
        return None
    return {"block": blk, "t": np.where(is_rho, a, t), "sigma": sigma, "is_rho": is_rho,
            "anchor": anchor, "order": order}


def anchored_structure(problem):
    """Detect anchored blocks; return the table description or ``None``.

    Returns a dict of NumPy arrays (see the module docstring) when
    :func:`anchored_blocks` finds the anchored form.
    """
    ab = anchored_blocks(problem)
    if ab is None:
        return None
    c = problem.constraints
    B, T = problem.scores.n_blocks, problem.scores.n_positions
    blk, t, sigma, is_rho, anchor = (ab[k] for k in ("block", "t", "sigma", "is_rho", "anchor"))
    has = anchor >= 0
    two = ~is_rho
    free = np.zeros((B, T), dtype=bool)
    neg = np.zeros((B, T), dtype=bool)
    lin = np.zeros((B, T))
    bt = (blk[two], t[two])
    eq2 = c.equality[two]
    free[bt[0][eq2], bt[1][eq2]] = True
    neg[bt[0][~eq2], bt[1][~eq2]] = True
    lin[bt] = -sigma[two] * c.rhs[two]
    free[has.nonzero()[0], anchor[has]] = True
    allowed = free | neg
    sum_type = np.zeros(B, dtype=np.int64)  # 0: sum = 0, 1: sum >= 0, 2: free
    rb = blk[is_rho]
    sum_type[rb] = np.where(c.equality[is_rho], 2, 1)
    lin[rb] += c.rhs[is_rho][:, None] * allowed[rb]
    return {
        "free": free, "neg": neg, "allowed": allowed, "lin": lin,
        "sum_type": sum_type, "flat_t": blk * T + np.where(two, t, 0),
        "sigma": sigma, "is_rho": is_rho, "block": blk,
    }


# --------------------------------------------------------------------------
# Dual spaces: the variable, its linear term, the maps and the projection
# --------------------------------------------------------------------------
class _TableSpace:
    """Dual variable = the coefficient table ``C`` of anchored blocks."""

    #: the projection's passes run over the whole table above this candidate share
    dense_passes_above = 0.125

    def __init__(self, problem, be, st):
        xp = be.xp
        self.xp, self.be = xp, be
        self.smap = problem.scores.to_backend(be)
        self.B, self.T = problem.scores.n_blocks, problem.scores.n_positions
        self.free = be.asbool(st["free"])
        self.neg = be.asbool(st["neg"])
        self.allowed_f = be.asarray(st["allowed"].astype(float))
        self.free_f = be.asarray(st["free"].astype(float))
        self.n_free = xp.maximum(xp.sum(self.free_f, axis=1), 1.0)
        self.lin = be.asarray(st["lin"])
        self.sum_type = be.asindex(st["sum_type"])
        self.flat_t = be.asindex(st["flat_t"])
        self.sigma = be.asarray(st["sigma"])
        self.rho_mask = be.asarray(st["is_rho"].astype(float))
        self.blk = be.asindex(st["block"])
        self.shape = (self.B, self.T)
        self.has_rho_blocks = bool(np.any(st["sum_type"] > 0))
        self.all_allowed = bool(st["allowed"].all())
        free_b, free_t = np.nonzero(st["free"])
        self.free_rows = be.asindex(free_b)
        self.free_flat = be.asindex(free_b * self.T + free_t)
        # the clip of the projection: min(v, 0) on sign-constrained coordinates
        self.cap = be.asarray(np.where(st["neg"], 0.0, np.inf))
        self._theta_last = None

    def zeros(self):
        return self.be.zeros(self.shape)

    def apply(self, w):
        s = self.smap.forward(self.xp, w)
        return s if self.all_allowed else s * self.allowed_f

    def adjoint(self, x):
        return self.smap.adjoint(self.xp, x)

    def _theta(self, u):
        """Root of ``f(theta) = sum_t clip(u_t - theta) = 0`` per row (exact, no sort).

        ``f`` is the minimum over subsets ``A`` of the sign-constrained
        coordinates of the lines ``g_A(theta) = F + sum_A u_t - (n_free + |A|) theta``
        (``F`` the sum over free coordinates).  From ``theta_0 = F / n_free``
        (``A`` empty), the root of ``g_A`` with ``A = {t : u_t < theta_k}`` lies
        in ``[theta*, theta_k]`` (``g_A(theta_k) = f(theta_k) <= 0`` and
        ``g_A >= f``), so the iteration decreases to the root and stops, exactly,
        once ``A`` stops growing (Michelot's algorithm).  Any start above the
        root will do: after the first call it starts one step from the last
        call's root (below), and once few coordinates lie below the start
        (the only ones that can join ``A``) the passes run on those,
        gathered: all rows at once, a few passes over a short vector.
        """
        xp = self.xp
        flat = xp.reshape(u, (-1,))
        fsum = scatter_add(xp, self.free_rows, xp.take(flat, self.free_flat), self.B)

        def over_table(mask):  # (|A|, sum_A u) per row, A = mask & (u < theta)
            def stats(theta):
                below = mask & (u < theta[:, None])
                return (xp.sum(xp.astype(below, u.dtype), axis=1),
                        xp.sum(xp.where(below, u, 0.0), axis=1))
            return stats

        def over_gathered(mask):  # the same on the gathered coordinates of mask
            idx = xp.nonzero(xp.reshape(mask, (-1,)))[0]
            rows = idx // self.T
            vals = xp.take(flat, idx)

            def stats(theta):
                below = xp.astype(vals < xp.take(theta, rows), u.dtype)
                return (scatter_add(xp, rows, below, self.B),
                        scatter_add(xp, rows, vals * below, self.B))
            return stats

        theta = fsum / self.n_free
        if self._theta_last is not None:
            # warm start: one step from the last call's root.  The line g_A
            # with A = {t : u_t < last} touches f at ``last`` and lies above f
            # (f concave), so its root is >= theta* whichever side of theta*
            # ``last`` is on; usually it is a pass or two from the end.
            count, below_sum = over_table(self.neg)(self._theta_last)
            theta = xp.minimum(theta, (fsum + below_sum) / (self.n_free + count))
        # only coordinates below the start can ever join A: many of them, passes
        # over the table; few, passes over them gathered (cheaper)
        cand = self.neg & (u < theta[:, None])
        many = int(xp.sum(xp.astype(cand, xp.int64))) > self.dense_passes_above * self.B * self.T
        stats = over_table(cand) if many else over_gathered(cand)
        count = None
        for _ in range(self.T + 1):
            new_count, below_sum = stats(theta)
            if count is not None and not bool(xp.any(new_count != count)):
                break
            count = new_count
            theta = (fsum + below_sum) / (self.n_free + count)
        self._theta_last = theta
        return theta

    def project(self, u):
        xp = self.xp
        theta = self._theta(u)
        if self.has_rho_blocks:
            # sum >= 0 blocks: theta = 0 when clip(u) already has sum >= 0.
            clip0 = xp.where(self.neg, xp.minimum(u, 0.0), u) * self.allowed_f
            s0 = xp.sum(clip0, axis=1)
            theta = xp.where((self.sum_type == 2) | ((self.sum_type == 1) & (s0 >= 0)),
                             xp.zeros_like(theta), theta)
        v = xp.minimum(u - theta[:, None], self.cap)
        return v if self.all_allowed else v * self.allowed_f

    def face_mask(self, x):
        """Coordinates free on the face of ``x``'s feasible set (bool table)."""
        return self.free | (self.neg & (x < 0))

    def tangent(self, rows):
        """Projector onto the face's tangent subspace, for directions given on
        the face's coordinates (their rows in ``rows``): fixed row sums stay fixed."""
        xp = self.xp
        fix = self.sum_type == 0
        if self.has_rho_blocks:
            fix = fix | self._rho_active
        cnt = scatter_add(xp, rows, xp.astype(rows >= 0, self.lin.dtype), self.B)  # ones
        inv = xp.where(fix, 1.0 / xp.maximum(cnt, 1.0), xp.zeros_like(cnt))
        return lambda v: v - xp.take(scatter_add(xp, rows, v, self.B) * inv, rows)

    def set_face(self, x):
        xp = self.xp
        if self.has_rho_blocks:
            s = xp.sum(x, axis=1)
            scale = xp.max(xp.abs(x), axis=1)
            self._rho_active = (self.sum_type == 1) & (s <= 1e-12 * (1.0 + scale))
        return self.face_mask(x)

    def restrict(self, x, mask):
        """Zero the coordinates off the face, keeping row sums (on free coordinates)."""
        xp = self.xp
        kept = x * xp.astype(mask, x.dtype)
        shift = (xp.sum(x, axis=1) - xp.sum(kept, axis=1)) / self.n_free
        return kept + shift[:, None] * self.free_f

    def wrong_sign(self, x, mask):
        return self.neg & mask & (x > 0)

    def entering(self, w, mask, tol):
        """Off-face coordinates whose constraint ``w`` violates by more than ``tol``.

        On a face optimum the gradient ``g`` of ``D`` is constant (``theta_b``)
        over the row's face coordinates; moving mass onto ``t`` increases
        ``D`` iff ``g_t < theta_b``, i.e. iff its constraint is violated.
        """
        xp = self.xp
        g = self.lin - self.apply(w)
        mf = xp.astype(mask, g.dtype)
        theta = xp.sum(g * mf, axis=1) / xp.maximum(xp.sum(mf, axis=1), 1.0)
        return self.neg & ~mask & (g < theta[:, None] - tol)

    def to_lam(self, x):
        xp = self.xp
        vals = -self.sigma * xp.take(xp.reshape(x, (-1,)), self.flat_t)
        rho = xp.take(xp.sum(x, axis=1), self.blk)
        return xp.where(self.rho_mask > 0, rho, vals)


class _LamSpace:
    """Dual variable = the multipliers ``lam`` (general constraints)."""

    def __init__(self, problem, be):
        xp = self.xp = be.xp
        self.be = be
        self._values, self._adj = problem.operators(be)
        c = problem.constraints
        self.ineq = be.asbool(~c.equality)
        self.eq = be.asbool(c.equality)
        self.lin = be.asarray(c.rhs)
        self.shape = (len(c),)
        del xp

    def zeros(self):
        return self.be.zeros(self.shape)

    def apply(self, w):
        return self._values(w)

    def adjoint(self, x):
        return self._adj(x)

    def project(self, u):
        return self.xp.where(self.ineq, self.xp.maximum(u, 0.0), u)

    def set_face(self, x):
        return self.eq | (x > 0)

    def tangent(self, rows):
        return lambda v: v

    def restrict(self, x, mask):
        return x * self.xp.astype(mask, x.dtype)

    def wrong_sign(self, x, mask):
        return self.ineq & mask & (x < 0)

    def entering(self, w, mask, tol):
        return self.ineq & ~mask & (self.lin - self.apply(w) > tol)

    def to_lam(self, x):
        return x


# --------------------------------------------------------------------------
# The solver
# --------------------------------------------------------------------------
def _dot(xp, a, b):
    return float(xp.vecdot(xp.reshape(a, (-1,)), xp.reshape(b, (-1,))))


def _lipschitz(space, xp, be, n_iter=50, seed=0):
    """``||S||^2`` on the dual space by power iteration (with a 2% margin)."""
    rng = np.random.default_rng(seed)
    x = be.asarray(rng.standard_normal(space.shape))
    est = 0.0
    for _ in range(n_iter):
        nx = math.sqrt(_dot(xp, x, x))
        if nx == 0.0:
            break
        x = x / nx
        y = space.apply(space.adjoint(x))
        new = math.sqrt(_dot(xp, y, y))
        if abs(new - est) <= 1e-6 * new:
            est = new
            break
        est, x = new, y
    return 1.02 * est if est > 0 else 1.0


class _Checker:
    """Certificate of a dual-feasible point: gap, violation, norm bound."""

    def __init__(self, problem, be, space):
        self.xp = be.xp
        self.values, _ = problem.operators(be)
        c = problem.constraints
        self.rhs = be.asarray(c.rhs)
        self.eq = be.asbool(c.equality)
        self.space = space
        self.rscale = max(1.0, float(np.max(np.abs(c.rhs))))
        self.eps = be.eps()
        self.a_scale = 1.0
        self.tol = 0.0
        self.last_ok = False

    def __call__(self, x, w):
        xp = self.xp
        lam = self.space.to_lam(x)
        sq = _dot(xp, w, w)
        rl = _dot(xp, self.rhs, lam)
        v = self.values(w) - self.rhs
        viol = xp.where(self.eq, xp.abs(v), xp.maximum(-v, 0.0))
        viol = float(xp.max(viol)) if viol.shape[0] else 0.0
        gap = abs(sq - rl) / sq if sq > 0 else (0.0 if rl <= 0 else math.inf)
        # ||w|| as computed carries a rounding error ~ eps ||S|| sum|lam|: never
        # divide by less than that (keeps the certificate honest for huge lam).
        w_floor = 10.0 * self.eps * self.a_scale * float(xp.sum(xp.abs(lam)))
        wn = max(math.sqrt(sq), w_floor)
        bound = rl / wn if (rl > 0 and wn > 0) else (math.inf if rl > 0 else 0.0)
        # the stopping rule, with tolerances floored at 1000 ulps of the scores
        floor = 1e3 * self.eps * self.a_scale * math.sqrt(sq)
        self.last_ok = gap <= max(self.tol, 1e3 * self.eps) and viol <= max(
            self.tol * self.rscale, floor)
        return lam, gap, viol, bound


def _cg_on_face(space, x0, mask, xp, max_iter, L):
    """Maximize ``D`` on the affine face through ``x0`` (CG, tangent subspace).

    The iteration runs on the face's coordinates only (a gathered vector):
    each step is one product with ``S`` and one with ``S^*``, everything else
    is as small as the face.  ``x0`` must vanish off the face.

    Returns ``(x, ray, n_iter)``; ``ray`` is a direction of unbounded ascent or None.
    """
    flat = xp.reshape(mask, (-1,))
    idx = xp.nonzero(flat)[0]
    size = int(flat.shape[0])
    rows = idx // space.shape[1] if len(space.shape) == 2 else None

    def scatter(v):
        return xp.reshape(scatter_add(xp, idx, v, size), space.shape)

    tangent = space.tangent(rows)

    def hess(v):  # minus the Hessian of D, on the face
        return tangent(xp.take(xp.reshape(space.apply(space.adjoint(scatter(v))), (-1,)), idx))

    z = xp.take(xp.reshape(x0, (-1,)), idx)
    w0 = space.adjoint(x0)
    r = tangent(xp.take(xp.reshape(space.lin - space.apply(w0), (-1,)), idx))
    p = r
    rr = _dot(xp, r, r)
    rr0 = rr
    k = 0
    for k in range(1, max_iter + 1):
        # a residual reduction by 1e-10 is as far as float64 CG goes on these
        # (often singular) faces; iterating on only accumulates drift.
        if rr <= 1e-20 * max(rr0, 1e-300):
            break
        q = hess(p)
        pq = _dot(xp, p, q)
        if pq <= 1e-14 * L * _dot(xp, p, p):
            if rr <= 1e-20 * rr0 or _dot(xp, xp.take(xp.reshape(space.lin, (-1,)), idx), p) <= 0:
                break
            # (numerically) no curvature along an ascent direction: the face
            # is unbounded, a candidate Farkas ray (checked by the caller).
            return scatter(z), scatter(p), k
        alpha = rr / pq
        z = z + alpha * p
        r = r - alpha * q
        rr_new = _dot(xp, r, r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return scatter(z), None, k


def infeasible_error(problem, it, lam=None):
    """The method's claim of infeasibility, its multipliers (``lam``) as the ray that
    :func:`~skntp.svm.solve_max_margin` checks."""
    exc = NotSeparableError(
        f"{problem.name} is infeasible: {problem.infeasible_message}. "
        f"(The dual bounds the normalized margin by {INFEASIBLE_MARGIN:g}; "
        f"{it} iterations.)"
    )
    exc.ray = None if lam is None else np.asarray(to_numpy(lam), dtype=float)
    return exc


def _raise_if_ray(problem, space, check, xp, x, ray, a_scale, it):
    """Test the points ``x + s ray`` (projected) as infeasibility certificates."""
    nx = math.sqrt(_dot(xp, x, x)) + 1.0
    nr = math.sqrt(_dot(xp, ray, ray))
    if nr == 0.0:
        return
    for s in (1e4, 1e8, 1e12):
        xs = space.project(x + (s * nx / nr) * ray)
        lam, _, _, bound = check(xs, space.adjoint(xs))
        if bound * a_scale > 1.0 / INFEASIBLE_MARGIN:
            raise infeasible_error(problem, it, lam)


#: CG iterations per polish cycle
_POLISH_CG = 200


def _polish(problem, space, check, xp, x, w, dval, L, a_scale, it, cycles=10):
    """Active-set cycles from ``x``: maximize ``D`` exactly on a guessed face.

    A primal-dual active-set iteration with conjugate-gradient solves: on the
    face (the nonzero multipliers of ``x``) maximize ``D`` by CG ignoring the
    sign constraints; multipliers that come out with the wrong sign leave the
    face, constraints that the face optimum violates join it; repeat.  A
    point whose signs are right is dual feasible and is judged by the same
    certificate as every other iterate; if no cycle certifies, the best
    feasible point found is returned as a warm start.

    Returns ``(x, w, D, lam, gap, violation, certified, n_cg)`` with ``n_cg``
    the number of CG iterations spent.
    """
    best = (x, w, dval)
    mask = space.set_face(x)
    xk = x
    enter_tol = 0.1 * check.tol * check.rscale
    n_cg = 0
    refined = False
    for _ in range(cycles):
        xk = space.restrict(xk, mask)
        xc, ray, n = _cg_on_face(space, xk, mask, xp, max_iter=_POLISH_CG, L=L)
        n_cg += n
        if ray is not None:
            _raise_if_ray(problem, space, check, xp, xc, ray, a_scale, it)
            break
        bad = space.wrong_sign(xc, mask)
        if bool(xp.any(bad)):
            mask = mask & ~bad
            xk = xc
            continue
        xc = space.project(xc)  # a no-op up to roundoff
        wc = space.adjoint(xc)
        dc = _dot(xp, space.lin, xc) - 0.5 * _dot(xp, wc, wc)
        lam, gap, viol, _ = check(xc, wc)
        if check.last_ok:
            return xc, wc, dc, lam, gap, viol, True, n_cg
        if dc > best[2]:
            best = (xc, wc, dc)
        new = space.entering(wc, mask, enter_tol)
        if not bool(xp.any(new)):
            if refined or n < _POLISH_CG:
                break
            # the face is consistent but CG hit its cap short of the
            # certificate: one more round on the same face, from where it stopped
            refined = True
        mask = mask | new
        xk = xc
    x, w, dval = best
    lam, gap, viol, _ = check(x, w)
    return x, w, dval, lam, gap, viol, check.last_ok, n_cg


def fista(problem, st, be, tol, max_iter, verbose, check_every, polish, x0=None, L=None,
           callback=None, it0=0):
    """Restarted FISTA with face polishing on one problem (see the module docstring).

    Returns ``(result, x, L)``: the result (``status`` "optimal" or
    "max_iter"), the final dual variable in the problem's dual space and the
    step constant used, for warm starts.
    """
    xp = be.xp
    space = _TableSpace(problem, be, st) if st is not None else _LamSpace(problem, be)
    kind = "table" if st is not None else "lam"
    check = _Checker(problem, be, space)
    L = max(L or 0.0, _lipschitz(space, xp, be, n_iter=10 if L else 50))
    # largest constraint-row norm, for the normalized margin (<= sqrt(2 L))
    a_scale = math.sqrt(2.0 * L)
    check.a_scale = a_scale
    check.tol = tol
    step = 1.0 / L

    x = space.zeros() if x0 is None else x0
    w = space.adjoint(x)
    y, wy = x, w
    dval = _dot(xp, space.lin, x) - 0.5 * _dot(xp, w, w)
    tk = 1.0
    face = None
    n_polish = n_cg = 0
    it = 0
    gap = viol = math.inf
    status = "max_iter"
    while True:
        if it % check_every == 0 or it >= max_iter:
            lam, gap, viol, bound = check(x, w)
            ok = check.last_ok
            if callback is not None:
                callback(it0 + it, gap, viol)
            if verbose > 1:
                print(f"[{problem.name} accelerated-dual/{kind}] it={it} gap={gap:.2e} "
                      f"viol={viol:.2e} ||w*||>={bound:.3e}")
            if ok:
                status = "optimal"
                break
            if bound * a_scale > 1.0 / INFEASIBLE_MARGIN:
                raise infeasible_error(problem, it, lam)
            if it >= max_iter:
                break
            # polish while its CG iterations are at most 3x the FISTA iterations
            if polish and it > 0 and n_cg <= 3 * it:
                new_face = space.set_face(x)
                # polish once the face has (nearly) settled: at most 0.2% of its
                # coordinates changed since the last check
                if face is not None and float(xp.sum(xp.astype(new_face != face, x.dtype))) <= (
                        POLISH_FACE_CHANGE * float(xp.sum(xp.astype(new_face, x.dtype)))):
                    xc, wc, dc, lam_c, gap_c, viol_c, ok_c, k = _polish(
                        problem, space, check, xp, x, w, dval, L, a_scale, it)
                    n_polish += 1
                    n_cg += k
                    if verbose > 1:
                        print(f"    polish ({k} CG iterations): gap={gap_c:.2e} viol={viol_c:.2e}")
                    if ok_c:
                        x, w, lam, gap, viol = xc, wc, lam_c, gap_c, viol_c
                        status = "optimal"
                        break
                    if dc > dval:  # adopt as a warm start, reset momentum
                        x, w, y, wy, dval, tk = xc, wc, xc, wc, dc, 1.0
                    face = None
                else:
                    face = new_face
        g = space.lin - space.apply(wy)
        x_new = space.project(y + step * g)
        w_new = space.adjoint(x_new)
        d_new = _dot(xp, space.lin, x_new) - 0.5 * _dot(xp, w_new, w_new)
        if d_new < dval and not (tk == 1.0 and d_new >= dval - 1e-12 * abs(dval)):
            if tk == 1.0:
                # a plain projected-gradient step cannot decrease D when
                # step <= 1/||S||^2: the power-iteration estimate was low.
                L *= 2.0
                step = 1.0 / L
            tk = 1.0  # function-value restart
            y, wy = x, w
            it += 1
            continue
        t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * tk * tk))
        beta = (tk - 1.0) / t_next
        y = x_new + beta * (x_new - x)
        wy = w_new + beta * (w_new - w)
        x, w, dval, tk = x_new, w_new, d_new, t_next
        it += 1

    if verbose:
        print(f"[{problem.name} accelerated-dual/{kind}] {status}: {it} iterations, "
              f"{n_polish} polish, gap={gap:.2e}, violation={viol:.2e}")
    result = MaxMarginResult(
        primal=xp.reshape(w, problem.shape),
        dual=lam,
        method="accelerated-dual",
        status=status,
        n_iter=int(it),
        gap=float(gap),
        max_violation=float(viol),
    )
    return result, x, L


# --------------------------------------------------------------------------
# Working sets: anchored programs restricted to a few positions per block
# --------------------------------------------------------------------------
class GatheredScores:
    """The score map restricted to ``K`` positions per block.

    ``S'[b, k] = S[b, index[b, k]]``; the adjoint scatters the table back to
    the full positions.  Both are one product of the underlying map.
    """

    def __init__(self, base, index):
        self.base = base
        self.index = np.asarray(index, dtype=np.int64)
        self.n_blocks, self.n_positions = self.index.shape
        self.shape = base.shape
        self.work_size = base.work_size
        self._flat = (np.arange(self.n_blocks)[:, None] * base.n_positions
                      + self.index).ravel()

    def to_backend(self, be):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.base = self.base.to_backend(be)
        new._flat = be.asindex(self._flat)
        return new

    def forward(self, xp, w):
        s = xp.reshape(self.base.forward(xp, w), (-1,))
        return xp.reshape(xp.take(s, self._flat), (self.n_blocks, self.n_positions))

    def adjoint(self, xp, c):
        size = self.n_blocks * self.base.n_positions
        table = scatter_add(xp, self._flat, xp.reshape(c, (-1,)), size)
        return self.base.adjoint(xp, xp.reshape(table, (self.n_blocks, self.base.n_positions)))


def _restrict(problem, keep):
    """The program with only the constraints ``keep`` and, per block, their positions.

    Returns ``(sub_problem, index)`` with ``index`` the ``(B, K)`` table of
    kept positions (rows padded with a repeated position, never constrained).
    """
    c = problem.constraints
    B, T = problem.scores.n_blocks, problem.scores.n_positions
    blk, pos, ref = c.block[keep], c.pos[keep], c.ref[keep]
    has_ref = ref >= 0
    keys = np.unique(np.concatenate([blk * T + pos, (blk * T + ref)[has_ref]]))
    kb = keys // T
    start = np.searchsorted(kb, np.arange(B + 1))
    counts = np.diff(start)
    K = max(int(counts.max()), 1)
    slot = np.arange(keys.size) - start[kb]
    index = np.zeros((B, K), dtype=np.int64)
    first = np.where(counts > 0, keys[np.minimum(start[:-1], keys.size - 1)] % T, 0)
    index[:] = first[:, None]
    index[kb, slot] = keys % T

    def local(p):
        return np.searchsorted(keys, blk * T + p) - start[blk]

    new_pos = local(pos)
    new_ref = np.where(has_ref, local(np.where(has_ref, ref, 0)), -1)
    sub = MaxMarginProblem(
        GatheredScores(problem.scores, index),
        Constraints(blk, new_pos, new_ref, c.rhs[keep], c.equality[keep]),
        name=problem.name, infeasible_message=problem.infeasible_message,
    )
    return sub, index


def _table_to_full(be, x, scores):
    """Scatter a restricted table (over ``GatheredScores`` positions) into a full one."""
    B, T = scores.n_blocks, scores.base.n_positions
    flat = be.asindex(scores._flat)
    return be.xp.reshape(scatter_add(be.xp, flat, be.xp.reshape(x, (-1,)), B * T), (B, T))


def _table_from_full(be, full, scores):
    """Gather a full table onto ``GatheredScores`` positions (padding slots get 0)."""
    index = scores.index
    out = be.xp.take(be.xp.reshape(full, (-1,)), be.asindex(scores._flat))
    # padding slots repeat a row's first position: keep its value in the first slot only
    dup = np.zeros(index.shape, dtype=bool)
    dup[:, 1:] = index[:, 1:] == index[:, :1]
    return be.xp.reshape(out, index.shape) * be.asarray((~dup).astype(float))


def _solve_working_set(problem, st, be, tol, max_iter, verbose, check_every, polish,
                       initial=8, add=8, max_rounds=50, callback=None):
    """Solve an anchored program on a growing working set of inequalities.

    Equalities (the support constraints of the NTP-SVM) and anchor-only
    constraints are always kept; of the inequalities each block starts with
    the ``initial`` ones with the smallest value at a class-mean-like
    direction (the projection of the dual's linear term).  Each round solves
    the restricted program (warm-started; to ``1e-3`` first, ten times
    tighter each round, ``tol`` at the end), evaluates every constraint at
    its solution and adds, per block, up to ``add`` of the most violated
    ones.  The restricted multipliers (zero elsewhere) are dual
    feasible for the whole program with the same dual value, so once no
    constraint is violated beyond ``tol`` the whole program's certificate is
    the restricted one.
    """
    xp = be.xp
    c = problem.constraints
    B = problem.scores.n_blocks
    values, _ = problem.operators(be)
    rhs = be.asarray(c.rhs)
    eq = be.asbool(c.equality)
    rscale = max(1.0, float(np.max(np.abs(c.rhs))))
    ineq2 = ~c.equality & ~st["is_rho"]

    full_space = _TableSpace(problem, be, st)
    w0 = full_space.adjoint(full_space.project(full_space.lin))
    keep = ~ineq2
    keep |= ineq2 & _smallest_per_block(c.block, to_numpy(values(w0)), ineq2, initial, B)

    x_full = None
    L = None
    total = 0
    status = "max_iter"
    # early rounds only need the restricted solution roughly: its violations
    # outside decide the next working set
    inner_tol = max(tol, 1e-3)
    for rnd in range(max_rounds):
        sub, index = _restrict(problem, keep)
        st_sub = anchored_structure(sub)
        x0 = None if x_full is None else _table_from_full(be, x_full, sub.scores)
        try:
            res, x, L = fista(sub, st_sub, be, inner_tol, max(max_iter - total, 1),
                              verbose, check_every, polish, x0=x0, L=L, callback=callback,
                              it0=total)
        except NotSeparableError as exc:
            # a ray of the working set's rows is one of the whole program's (zero on
            # the rows left out)
            if exc.ray is not None:
                ray = np.zeros(len(c))
                ray[keep] = exc.ray
                exc.ray = ray
            raise
        total += res.n_iter
        w = xp.reshape(res.primal, problem.shape)
        v = values(w) - rhs
        viol_all = xp.where(eq, xp.abs(v), xp.maximum(-v, 0.0))
        viol = float(xp.max(viol_all))
        if verbose:
            print(f"[{problem.name} accelerated-dual/working-set] round {rnd}: "
                  f"{int(keep.sum())} of {len(c)} constraints, K={index.shape[1]}, "
                  f"tol={inner_tol:.0e}, {res.n_iter} iterations, violation {viol:.2e}")
        x_full = _table_to_full(be, x, sub.scores)
        if res.status != "optimal" or total >= max_iter:
            break
        viol_np = to_numpy(viol_all)
        new = ~keep & (viol_np > max(tol * rscale, res.max_violation))
        if not new.any():
            if inner_tol <= tol:
                status = "optimal"
                break
            inner_tol = tol
            continue
        keep |= _smallest_per_block(c.block, -viol_np, new, add, B)
        inner_tol = max(tol, 0.1 * inner_tol)
    lam_np = np.zeros(len(c))
    lam_np[keep] = to_numpy(res.dual)
    lam = be.asarray(lam_np)
    result = MaxMarginResult(
        primal=res.primal, dual=lam, method="accelerated-dual", status=status,
        n_iter=int(total), gap=res.gap, max_violation=max(viol, res.max_violation),
    )
    return result


def _smallest_per_block(block, score, eligible, k, n_blocks):
    """Mask of at most ``k`` eligible entries per block with the smallest ``score``."""
    idx = np.flatnonzero(eligible)
    if idx.size == 0:
        return np.zeros(block.shape, dtype=bool)
    order = idx[np.lexsort((score[idx], block[idx]))]
    b = block[order]
    start = np.searchsorted(b, np.arange(n_blocks))
    rank = np.arange(order.size) - start[b]
    out = np.zeros(block.shape, dtype=bool)
    out[order[rank < k]] = True
    return out


def solve_accelerated_dual(problem, tol=1e-8, max_iter=100_000, be=None, verbose=0, *,
               check_every=10, polish=True, structure="auto", working_set="auto",
               callback=None):
    """Solve a :class:`MaxMarginProblem` by restarted FISTA on its dual.

    See the module docstring for the dual, the stopping rule and the
    infeasibility certificate.

    Parameters
    ----------
    problem : MaxMarginProblem
    tol : float, default=1e-8
        Relative duality gap and (``max(1, max|r|)``-scaled) violation target.
    max_iter : int, default=100_000
        Maximum number of FISTA iterations (over all working-set rounds).
    be : Backend, optional
        Array layer (NumPy by default).
    verbose : int, default=0
    check_every : int, default=10
        Certificate / face check period (iterations).
    polish : bool, default=True
        Try the exact face maximization (conjugate gradients) once the face
        is stable.
    structure : {"auto", "table", "lam"}, default="auto"
        Dual space: the anchored coefficient table when detected, else the
        multipliers.
    working_set : {"auto", True, False}, default="auto"
        Solve anchored programs on a growing working set of inequalities
        (see :func:`_solve_working_set`); ``"auto"`` does so when blocks
        have more than 64 positions and the dual table has at least
        :data:`WORKING_SET_MIN_TABLE` entries (below that, the whole table
        is cheap and the rounds cost more than they save).
    callback : callable, optional
        ``callback(n_iter, gap, violation)`` at every certificate check.

    Returns
    -------
    MaxMarginResult

    Raises
    ------
    NotSeparableError
        When the dual bounds the normalized margin below :data:`INFEASIBLE_MARGIN`:
        a claim, its multipliers in the attribute ``ray``, that
        :func:`~skntp.svm.solve_max_margin` checks as a Farkas certificate.
    """
    if be is None:

        be = get_backend("numpy")
    t0 = time.perf_counter()
    st = anchored_structure(problem) if structure in ("auto", "table") else None
    if structure == "table" and st is None:
        raise ValueError(f"{problem.name}: the constraints are not anchored.")
    B, T = problem.scores.n_blocks, problem.scores.n_positions
    use_ws = st is not None and (
        working_set is True
        or (working_set == "auto" and T > 64 and B * T >= WORKING_SET_MIN_TABLE))
    if use_ws:
        result = _solve_working_set(problem, st, be, tol, max_iter, verbose, check_every,
                                    polish, callback=callback)
    else:
        result = fista(problem, st, be, tol, max_iter, verbose, check_every, polish,
                        callback=callback)[0]
    if result.status != "optimal":
        warnings.warn(
            f"{problem.name}: method 'accelerated-dual' stopped after {result.n_iter} "
            f"iterations with relative duality gap {result.gap:.3e} and constraint violation "
            f"{result.max_violation:.3e} (tol={tol:g}); increase max_iter or use "
            "method='cvxpy'.",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    if verbose:
        print(f"[{problem.name} accelerated-dual] {result.status}: {result.n_iter} iterations, "
              f"{time.perf_counter() - t0:.3f}s")
    return result


def solve(problem, tol, max_iter, be, verbose, callback=None):
    """The method ``"accelerated-dual"`` (:func:`solve_accelerated_dual` with its defaults)."""
    return solve_accelerated_dual(problem, tol, max_iter, be, verbose, callback=callback)
