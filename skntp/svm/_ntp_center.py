"""The analytic center of the margin polytope: a Farkas table of every margin row at once.

The table of a stationary point of the loss (2), ``T = -pi (softmax - p)``
(:func:`~skntp.svm.no_row_is_separable`, :func:`~skntp.svm.stationary_separability`),
proves every out-of-support row not separable in exact arithmetic, but its entries are
``pi_j s_jv``: exponential in the logit gaps.  On real text at the loss's minimizer
they spread down to ``1e-47`` (2,140 contexts of the Python documentation, V = 566),
and a row is certified in float64 only where its entry is well above the table's
rounding, about ``1e-16`` of its mass (:func:`~skntp.svm.farkas_row_bounds`): the
table certifies a sixth of the rows and leaves the answer undecided.

A log barrier spreads its multipliers polynomially instead.  With the margin rows
``r_jv(W) = (e_{z_j} - e_v)^T W h_j`` (module docstring of
:mod:`skntp.svm._ntp_partial`), the polytope

.. math::

    P = \\{W : r_{jv}(W) \\ge -1 \\ (v \\notin S_j), \\quad
    |r_{jz}(W)| \\le C \\ (z \\in S_j)\\}

contains ``W = 0`` in its interior and has the recession cone ``K`` of the loss (2).
It is bounded, up to ``K``'s lineality, exactly when no row is separable (Def. 3.2's
cone has no direction positive on a row).  Its analytic center minimizes

.. math::

    \\phi(W) = -\\sum_{v \\notin S_j} \\log(1 + r_{jv}(W))
    - \\sum_{z \\in S_j} \\left[\\log(C - r_{jz}(W)) + \\log(C + r_{jz}(W))\\right],

and ``grad phi = 0`` there reads ``sum lambda_jv a_jv + sum mu_jz a_jz = 0`` with
``lambda_jv = 1 / (1 + r_jv) > 0`` and ``mu_jz = 1/(C + r_jz) - 1/(C - r_jz)``: a
Farkas table of every row (``a_jv`` the row's coefficients), whose smallest entry is
``1 / (1 + max r_jv)``, not ``exp(-max r_jv)``.  On those 2,140 contexts it certifies
every one of the 1,208,069 rows (``benchmarks/README.md``).  Where some row is
separable, ``P`` is unbounded along a point of ``K`` and Newton's iterates leave along
it; the attempt then ends without a certificate.

Why not a library: the separability program of these rows (1.2 million rows on 72,448
variables, 60 times what :func:`~skntp.svm.ntp_separability` gives HiGHS) was killed for
memory at 22 of the machine's 24 GiB after about 3 minutes, and cvxpy's conic form of
it is refused for memory (:func:`~skntp.svm.solvers.conic.check_conic_size`); on 13,642
rows of real text HiGHS takes 52.1 s, the center 0.1 s (``benchmarks/analytic_center.py``,
``benchmarks/README.md``).  The barrier's Newton steps are the products of the loss's
Newton (two ``m x r x V`` products each) with the per-token blocks as preconditioner,
in :func:`~skntp.svm._newton.newton_cg`.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from .._backend import row_chunks
from ._newton import GradientStall, newton_cg
from ._ntp import _anchors, _check_contexts
from ._ntp_partial import (
    NTPSeparability,
    _dense_support,
    _invert_blocks,
    _power_of_two_scale,
    _project_off,
    _refutation_margin,
    _refuted_rows,
    _span_uncertainty,
    image_vanishes,
    orthonormal_contexts,
)
from ._ntp_sparse import EntryProducts, TokenBlocks
from ._problem import available_memory

__all__ = ["analytic_center_of_rows", "analytic_center_separability", "center_fits",
           "center_after_the_loss"]

_log = logging.getLogger("skntp.svm")

#: The half-width ``C`` of the in-support rows' box, in the units of the margin rows'
#: bound.  On the real text of 2,140 contexts (module docstring) ``C = 1`` reached the
#: certificate in 95 Newton steps (160 s) from ``W = 0``, where with ``C = 1000`` the
#: relative gradient went only from 0.27 to 0.18 between steps 60 and 95 (and from
#: ``W_fin``, 0.12 at step 86): the larger box leaves a longer damped Newton phase.
EQUALITY_BOX = 1.0

#: The largest ``m V r`` (work of one Hessian product) for which the center is tried.
MAX_CENTER_WORK = 2e9

#: The ``(m, V)`` float64 tables that :func:`analytic_center_of_rows` holds at once
#: while it checks its table (the table, its projection, the row bounds' work).
TABLES_OF_ROWS = 4

#: Relative gradient below which each Newton step checks the table.
CHECK_BELOW = 1e-6


def center_fits(m, V, rank):
    """Whether :func:`analytic_center_separability` is tried on ``m`` contexts of rank
    ``rank`` and ``V`` tokens: one Hessian product of at most :data:`MAX_CENTER_WORK`
    multiply-adds, the per-token blocks (and their inverses) in an eighth of the
    memory, its ``(m, V)`` tables (the gaps, the bounds, the table, the curvatures and
    a product's work, a few more transiently) in half of it."""
    return (m * V * rank <= MAX_CENTER_WORK
            and 16.0 * V * rank * rank <= 0.125 * available_memory()
            and 8.0 * 8 * m * V <= 0.5 * available_memory())


def center_after_the_loss(contexts, support, rank, minimizer):
    """The analytic center's certificate where the loss's own table did not certify:
    only where the loss's Newton converged (``minimizer["converged"]``, as
    :func:`~skntp.svm._ntp_partial._stationary_table` sets it; otherwise some row may
    separate, the polytope is unbounded and the center would not certify) and the
    center fits (:func:`center_fits`).  The step that :func:`~skntp.svm.ntp_separability`
    and the NTP-SVM's own infeasibility proof share.  Returns
    :class:`~skntp.svm.NTPSeparability` (no row separable) or ``None``."""
    m, V = support.shape
    if not (minimizer.get("converged") and center_fits(m, V, rank)):
        return None
    return analytic_center_separability(contexts, support)


class _MarginBarrier:
    """``phi`` (module docstring) on ``W`` of shape (V, r), the contexts an orthonormal
    basis ``Q`` (m, r): its value, gradient, Hessian products, the fraction to the
    boundary along a step, and the table of its gradient.  ``bound`` (m, V) holds each
    row's bound: ``r_jv >= -bound`` on the margin rows, ``|r_jz| <= bound`` on the
    in-support ones (1 and ``C`` in the module docstring)."""

    def __init__(self, Q, support, bound):
        m, V = support.shape
        self.Q, self.shape, self.bound = Q, (V, Q.shape[1]), bound
        self.rows = np.arange(m)
        self.anchor = _anchors(support)
        self.margin = ~support
        self.equal = support.copy()
        self.equal[self.rows, self.anchor] = False
        self.barred = self.margin | self.equal
        self.point, self.gaps = None, None

    def _gaps(self, w):
        L = self.Q @ np.reshape(w, self.shape).T
        L -= L[self.rows, self.anchor][:, None]
        np.negative(L, out=L)  # r_jv = L_jz - L_jv
        return L

    def gaps_at(self, w):
        if self.point is None or not np.array_equal(w, self.point):
            self.gaps, self.point = self._gaps(w), np.array(w, copy=True)
        return self.gaps

    def _slacks(self, w):
        """``bound + r`` on every barred row, ``bound - r`` on the in-support ones."""
        g, e = self.gaps_at(w), self.equal
        return self.bound + g, self.bound[e] - g[e]

    def _coupled(self, C):
        """``C`` with its anchors' entries set to minus their rows' sums of the others
        (a table of coefficients of ``r_jv`` as one of the logits), in place."""
        C[self.rows, self.anchor] = 0.0
        C[self.rows, self.anchor] = -C.sum(axis=1)
        return C

    def _on_logits(self, C):
        """The gradient in ``W`` of ``sum C_jv L_jv`` (``L = Q W^T``)."""
        return (C.T @ self.Q).ravel()

    def value_and_gradient(self, w):
        low, high = self._slacks(w)
        low = low[self.barred]
        if not (np.all(low > 0) and np.all(high > 0)):
            return math.inf, np.zeros_like(w)
        value = -(np.sum(np.log(low)) + np.sum(np.log(high)))
        return value, self._on_logits(self.table(w))

    def table(self, w):
        """``d phi / d L`` at ``w``: ``lambda = 1/(bound + r)`` on the margin rows,
        ``mu = 1/(bound + r) - 1/(bound - r)`` on the in-support ones, the anchors'
        entries minus their rows' sums (``r_jv = L_jz - L_jv``)."""
        low, high = self._slacks(w)
        T = np.zeros(low.shape)
        np.divide(1.0, low, out=T, where=self.barred)
        T[self.equal] -= 1.0 / high
        return self._coupled(T)

    def curvature(self, w):
        """``phi''`` of every row (the Hessian's weights), 0 on the anchors."""
        low, high = self._slacks(w)
        D = np.zeros(low.shape)
        np.divide(1.0, low * low, out=D, where=self.barred)
        D[self.equal] += 1.0 / (high * high)
        return D

    def hessian_at(self, w, single=False):
        D = self.curvature(w)

        def product(v):
            dg = self._gaps(v)
            dg *= D
            np.negative(dg, out=dg)
            return self._on_logits(self._coupled(dg))
        return product

    def max_step(self, w, step):
        """The largest ``t`` with ``w + t step`` inside the polytope."""
        low, high = self._slacks(w)
        dg = self._gaps(step)
        t = math.inf
        falling = self.barred & (dg < 0)
        if falling.any():
            t = min(t, float(np.min(low[falling] / -dg[falling])))
        rising = dg[self.equal] > 0
        if rising.any():
            t = min(t, float(np.min(high[rising] / dg[self.equal][rising])))
        return t

    def precondition_at(self):
        """``r -> B^{-1} r``, ``B`` the Hessian's per-token ``r x r`` blocks at ``w``,
        each ``sum_j c_ja q_j q_j^T`` (``c_ja`` the row's curvature, the anchor's its
        row's sum), in double precision: near the boundary the curvatures span twenty
        orders of magnitude, beyond the single-precision blocks of the loss's Newton;
        projected onto ``sum_a W_a = 0``, which the gradient and the Hessian keep
        (``phi`` depends on differences of tokens only)."""
        V, r = self.shape
        iu, ju = np.triu_indices(r)

        def at(w):
            c = self.curvature(w)
            c[self.rows, self.anchor] = c.sum(axis=1)
            upper = np.zeros((V, iu.size))
            for start, stop in row_chunks(self.Q.shape[0], iu.size):
                Qc = self.Q[start:stop]
                upper += c[start:stop].T @ (Qc[:, iu] * Qc[:, ju])
            B = np.zeros((V, r, r))
            B[:, iu, ju] = upper
            B[:, ju, iu] = upper
            mean = np.trace(B, axis1=1, axis2=2) / r
            B[:, np.arange(r), np.arange(r)] += np.maximum(
                1e-12 * mean, 1e-14 * mean.max(initial=0.0))[:, None]
            inverse = _invert_blocks(B)

            def apply(x):
                R = x.reshape(V, r)
                Y = np.einsum("ade,ae->ad", inverse, R - R.mean(axis=0))
                return (Y - Y.mean(axis=0)).ravel()
            return apply
        return at


def analytic_center_separability(contexts, support, *, start=None, max_iter=200,
                                 box=EQUALITY_BOX, callback=None):
    """Every margin row certified not separable by the analytic center, or ``None``.

    Newton (:func:`~skntp.svm._newton.newton_cg`, the fraction to the boundary, the
    per-token blocks as preconditioner) on the barrier ``phi`` of the module
    docstring, on an orthonormal basis of the contexts' span.  Once the relative
    gradient is below :data:`CHECK_BELOW` each step checks ``grad phi``'s table as
    :func:`~skntp.svm.stationary_separability` checks its own: its image on the contexts
    themselves must vanish (:func:`~skntp.svm.image_vanishes`), and
    :func:`~skntp.svm.farkas_row_bounds` bounds every row's normalized margin by
    :data:`~skntp.svm.NOT_SEPARABLE_MARGIN` (robust to the span's rounding).  The
    attempt ends when every row is certified, after ``max_iter`` steps, or when five
    steps below that gradient have not halved it (the barrier's precision, or iterates
    that leave along a separable row).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : ndarray or sparse matrix of shape (m, V), bool
        The supports ``S_j``.
    start : ndarray of shape (V, d), optional
        A point to start from, e.g. ``W_fin`` over every row (``W = 0`` by default):
        the polytope is shifted to hold it deep inside (each margin row's bound
        ``1 + max(0, -r_jv(start))``, each in-support row's ``box + |r_jz(start)|``).
        The recession cone is the same, so is the certificate; from the loss's
        minimizer Newton skips most of its damped phase.
    max_iter : int, default=200
        Newton steps, at most.
    box : float, default=EQUALITY_BOX
        The half-width ``C`` of the in-support rows' box (module docstring).
    callback : callable, optional
        ``callback(n_iter, gradient, 0.0)`` at every Newton step, ``gradient`` the
        relative gradient norm (the progress of :func:`~skntp.make_limit_progress`).

    Returns
    -------
    NTPSeparability or None
        No row separable, certified (``method="analytic center"``, the table of
        ``grad phi`` in ``farkas``); ``None`` when not every row is certified (some
        row may be separable).

    Raises
    ------
    ValueError
        Where one Hessian product (``m V r`` multiply-adds) is above
        :data:`MAX_CENTER_WORK`, or its blocks or tables do not fit
        (:func:`center_fits`).
    """
    H, support = _check_contexts(contexts, support)
    support = _dense_support(support)
    if not box > 0:
        raise ValueError(f"box must be positive, got {box!r}.")
    began = time.perf_counter()
    top = _power_of_two_scale(H)
    H = H / top
    Q, cond = orthonormal_contexts(H, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    m, V = support.shape
    r = Q.shape[1]
    if not center_fits(m, V, r):
        raise ValueError(f"the analytic center of {m} contexts x {V} tokens (rank {r}) is "
                         f"above its work bound: m V r = {m * V * r:.3g} (at most "
                         f"{MAX_CENTER_WORK:.0e}), {V} blocks of {r} x {r} and (m, V) "
                         f"tables within {available_memory() / 2**30:.1f} GiB of memory.")
    rows = ~support
    n_rows = int(np.count_nonzero(rows))
    none = np.zeros_like(support)
    if n_rows == 0:
        return NTPSeparability(none, support, "analytic center", farkas=np.zeros((m, V)))
    w = np.zeros(V * r)
    bound = np.where(support, float(box), 1.0)
    if start is not None:
        # the polytope shifted to hold start deep inside: each margin row's bound
        # 1 + max(0, -r_jv(start)), each in-support one's box + |r_jz(start)|; any
        # positive bounds give the same recession cone and a Farkas table
        w = (np.asarray(start, dtype=float) @ H.T @ Q * top).ravel()
        barrier = _MarginBarrier(Q, support, bound)
        g = barrier.gaps_at(w)
        bound += np.where(support, np.abs(g), np.maximum(-g, 0.0))
        del g
    barrier = _MarginBarrier(Q, support, bound)
    table, n_iter = _center_table(H, Q, blur, support, rows, barrier, w, max_iter, callback)
    _log.info("analytic center of %d contexts x %d tokens (rank %d): %s after %d Newton "
              "steps, %.1f s", m, V, r,
              "every row certified not separable" if table is not None else "not certified",
              n_iter, time.perf_counter() - began)
    if table is None:
        return None
    return NTPSeparability(none, support, "analytic center", farkas=table)


def _center_table(H, Q, blur, support, rows, barrier, w, max_iter, callback):
    """Newton on ``barrier`` from ``w``; returns ``(table, n_iter)``, the table of its
    gradient once it certifies every row of ``rows`` (else ``None``).

    Once the relative gradient is below :data:`CHECK_BELOW` each step checks the
    table as computed, whose image is the gradient, then projected off the basis: near
    the barrier's precision its image is the rounding of the gradient's sums (terms up
    to 1/slack), which the projection removes, moving each entry by at most that image,
    far below the smallest.  Five such steps without halving the gradient end the
    attempt (the barrier's precision, or iterates that leave along a separable row)."""
    n_rows = int(np.count_nonzero(rows))
    scale = max(float(np.max(np.linalg.norm(Q, axis=1))), np.finfo(float).tiny)
    watch = {"table": None}
    stalled = GradientStall()

    def certifies(w):
        T = -barrier.table(w)  # (the sign of the loss's table: <= 0 off the supports)
        for attempt in (T, _project_off(T.copy(), Q, support)):
            if not image_vanishes(H, support, attempt):
                continue
            proven = rows & _refuted_rows(Q, support, attempt, _refutation_margin(blur),
                                          blur)
            if np.count_nonzero(proven) == n_rows:
                watch["table"] = attempt
                return True
        return False

    def report(k, g, w):
        # (relative to the gradient's size were every multiplier 1: ||T|| ||Q||)
        g = g / (scale * math.sqrt(n_rows))
        if callback is not None:
            callback(k, g, 0.0)
        if g > CHECK_BELOW:
            return
        if certifies(w) or stalled(g):
            raise StopIteration

    w, n_iter = newton_cg(barrier.value_and_gradient, barrier.hessian_at, w,
                          0.0, max_iter, 200, report, None,
                          barrier.precondition_at(), None,
                          max_step=barrier.max_step)
    if watch["table"] is None:
        certifies(w)
    return watch["table"], n_iter


class _RowsBarrier:
    """``phi`` over the in-support equalities and the margin rows ``rows`` only, entry by
    entry: the interface of :class:`_MarginBarrier` that Newton uses, where ``rows`` are
    a few per context (a split's side ``N``).

    Its rows ``r_jv = L_{j a_j} - L_jv`` (``a_j`` the anchor) are the gathered logits of
    their entries and their contexts' anchors (:class:`~skntp.svm._ntp_sparse.EntryProducts`);
    a gradient or Hessian product puts ``c_jv`` on ``(j, v)`` and ``-sum_v c_jv`` on the
    anchor, one sparse product with the contexts; the preconditioner is the per-token
    blocks on each token's few contexts (:class:`~skntp.svm._ntp_sparse.TokenBlocks`).
    A product costs ``n r`` multiply-adds for ``n`` rows, where the dense barrier's costs
    ``m V r``.  Bounds: 1 on the margin rows, ``box`` on the in-support ones."""

    def __init__(self, Q, support, rows, box):
        m, V = support.shape
        self.shape = (V, Q.shape[1])
        anchor = _anchors(support)
        equal = support.copy()
        equal[np.arange(m), anchor] = False
        self.j, self.v = np.nonzero(rows | equal)
        self.equal = equal[self.j, self.v]
        self.bound = np.where(self.equal, float(box), 1.0)
        self.contexts = np.unique(self.j)
        self.position = np.searchsorted(self.contexts, self.j)
        self.anchors = anchor[self.contexts]
        j = np.r_[self.j, self.contexts]
        v = np.r_[self.v, self.anchors]
        self.entries = EntryProducts(Q, j, v, V)
        self.blocks = TokenBlocks(Q, j, v, V)
        self.table_shape = (m, V)

    def _gaps(self, w):
        z = self.entries.logits(w)
        return z[self.j.size:][self.position] - z[:self.j.size]

    def _slacks(self, w):
        g = self._gaps(w)
        return self.bound + g, np.where(self.equal, self.bound - g, 1.0)

    def _with_anchors(self, c):
        """The entries' coefficients ``c`` and each anchor's ``-sum`` of its row's."""
        return np.r_[c, -np.bincount(self.position, weights=c,
                                     minlength=self.contexts.size)]

    def _coefficients(self, low, high):
        return 1.0 / low - np.where(self.equal, 1.0 / high, 0.0)

    def value_and_gradient(self, w):
        low, high = self._slacks(w)
        if not (np.all(low > 0) and np.all(high > 0)):
            return math.inf, np.zeros_like(w)
        value = -(np.sum(np.log(low)) + np.sum(np.log(high[self.equal])))
        c = self._with_anchors(self._coefficients(low, high))
        return value, self.entries.image(c).ravel()

    def table(self, w):
        """``d phi / d L`` at ``w`` as an ``(m, V)`` table (:meth:`_MarginBarrier.table`)."""
        T = np.zeros(self.table_shape)
        c = self._with_anchors(self._coefficients(*self._slacks(w)))
        T[self.j, self.v] = c[:self.j.size]
        T[self.contexts, self.anchors] = c[self.j.size:]
        return T

    def _curvature(self, w):
        low, high = self._slacks(w)
        return 1.0 / low**2 + np.where(self.equal, 1.0 / high**2, 0.0)

    def hessian_at(self, w, single=False):
        D = self._curvature(w)

        def product(u):
            return self.entries.image(self._with_anchors(-D * self._gaps(u))).ravel()
        return product

    def max_step(self, w, step):
        """The largest ``t`` with ``w + t step`` inside the polytope."""
        low, high = self._slacks(w)
        dg = self._gaps(step)
        t = math.inf
        falling = dg < 0
        if falling.any():
            t = min(t, float(np.min(low[falling] / -dg[falling])))
        rising = self.equal & (dg > 0)
        if rising.any():
            t = min(t, float(np.min(high[rising] / dg[rising])))
        return t

    def precondition_at(self):
        """``w -> (r -> B^+ r)``, ``B`` the Hessian's per-token blocks at ``w`` (each
        row's curvature on its token, their sum on the anchor)."""
        def at(w):
            D = self._curvature(w)
            return self.blocks.at(np.r_[D, np.bincount(self.position, weights=D,
                                                       minlength=self.contexts.size)])
        return at


def analytic_center_of_rows(contexts, support, rows, *, max_iter=200, box=EQUALITY_BOX,
                            callback=None):
    """Every row of ``rows`` certified not separable by the analytic center of their
    polytope, or ``None``.

    The polytope of the module docstring with only the in-support equalities and the
    margin rows ``rows``: bounded, up to the lineality, exactly when no row of ``rows``
    is separable in the system of those rows alone, and then its center's gradient
    table is a Farkas table of each of them (supported on them and the supports), so
    none is separable among all the rows either.  Its entries are ``1 / (1 + r_jv)``,
    not the ``exp(-r_jv)`` of the table of the loss restricted to the same rows
    (:func:`~skntp.svm.far_point_split`'s side ``N``), which float64 cannot certify where
    that loss's minimizer is far out.  Computed entry by entry (:class:`_RowsBarrier`):
    on the Python documentation at d = 768 the 15,983 rows held not separable
    (11,071 contexts, V = 2,128) in 30 Newton steps, 60 s on 2 cores, where the loss's
    Newton stalled with its table certifying none
    (``benchmarks/side_n_certificate.py``).  Why not a library: HiGHS's interior point
    on the exact separability program of those tokens' rows (the experiment that found
    829 of these rows, 54,154 candidates) took 675 s and ended with status "Unknown",
    its multipliers not passing the check; the center certifies the same rows in 82 s.
    The table is checked as :func:`analytic_center_separability` checks its own.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : ndarray or sparse matrix of shape (m, V), bool
        The supports ``S_j``.
    rows : ndarray of shape (m, V), bool
        The margin rows to certify (off the supports).
    max_iter : int, default=200
        Newton steps, at most.
    box : float, default=EQUALITY_BOX
        The half-width ``C`` of the in-support rows' box.
    callback : callable, optional
        ``callback(n_iter, gradient, 0.0)`` at every Newton step.

    Returns
    -------
    ndarray of shape (m, V) or None
        The Farkas table (the sign of the loss's: ``<= 0`` off the supports, negative
        on ``rows``), for the contexts divided by their largest entry's power of two;
        ``None`` when not every row of ``rows`` is certified (some may be separable).

    Raises
    ------
    ValueError
        Where ``rows`` are not margin rows of the supports' shape, ``box`` is not
        positive, or the check's :data:`TABLES_OF_ROWS` ``(m, V)`` tables do not fit
        in half of the available memory.
    """
    H, support = _check_contexts(contexts, support)
    support = _dense_support(support)
    rows = np.asarray(rows, dtype=bool)
    if rows.shape != support.shape:
        raise ValueError(f"rows has shape {rows.shape}, the supports {support.shape}.")
    if np.any(rows & support):
        raise ValueError("rows must be margin rows, off the supports.")
    if not box > 0:
        raise ValueError(f"box must be positive, got {box!r}.")
    m, V = support.shape
    if TABLES_OF_ROWS * 8.0 * m * V > 0.5 * available_memory():
        raise ValueError(f"the analytic center of rows of {m} contexts x {V} tokens checks "
                         f"(m, V) tables ({TABLES_OF_ROWS} at {8.0 * m * V / 2**30:.2f} GiB "
                         f"each) that do not fit in half of the "
                         f"{available_memory() / 2**30:.1f} GiB of memory available.")
    if not rows.any():
        return np.zeros((m, V))
    began = time.perf_counter()
    H = H / _power_of_two_scale(H)
    Q, cond = orthonormal_contexts(H, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    barrier = _RowsBarrier(Q, support, rows, box)
    table, n_iter = _center_table(H, Q, blur, support, rows, barrier,
                                  np.zeros(V * Q.shape[1]), max_iter, callback)
    _log.info("analytic center of %d rows (%d contexts x %d tokens, rank %d): %s after %d "
              "Newton steps, %.1f s", int(rows.sum()), m, V, Q.shape[1],
              "every row certified not separable" if table is not None else "not certified",
              n_iter, time.perf_counter() - began)
    return table
