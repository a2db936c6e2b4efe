"""Alignment, projections and the per-iteration metrics every estimator records."""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from ._backend import norm, to_numpy

__all__ = ["SubspaceProjector", "alignment", "history_metrics"]


def alignment(w, direction):
    """Cosine ``<w, direction> / (||w|| ||direction||)`` (Frobenius inner product).

    Returns 0.0 when either argument is zero.
    """
    w = np.asarray(to_numpy(w), dtype=float).ravel()
    d = np.asarray(to_numpy(direction), dtype=float).ravel()
    nw, nd = np.linalg.norm(w), np.linalg.norm(d)
    if nw == 0 or nd == 0:
        return 0.0
    return float(w @ d / (nw * nd))


class SubspaceProjector:
    """Orthogonal projector onto the row space of a constraint matrix.

    For the NTP decoder the rows of the log-odds equations (3) span the
    subspace ``F`` of eq. (5), so ``project(W) = P_F(W)``.  Small problems
    keep an orthonormal basis (one matrix product per projection); large
    ones solve a least-squares problem with LSQR per projection.

    Parameters
    ----------
    matrix : sparse matrix of shape (n_rows, n_features), or None
        Rows spanning the subspace (``None`` or no rows: the zero subspace).
    shape : tuple
        Shape of the parameter the projector is applied to.
    max_dense : int, default=30_000_000
        Largest ``n_features * rank`` for the dense basis.
    """

    def __init__(self, matrix, shape, max_dense=30_000_000):
        self.shape = tuple(shape)
        self.basis = None
        self.matrix = matrix
        self.is_zero = matrix is None or matrix.shape[0] == 0
        if self.is_zero:
            return
        n_rows, n_features = matrix.shape
        if n_rows * n_features <= max_dense:
            dense = matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix)
            self.basis = scipy.linalg.orth(dense.T)  # (n_features, rank)

    @property
    def rank(self):
        if self.is_zero:
            return 0
        return None if self.basis is None else self.basis.shape[1]

    def to_backend(self, be):
        """Return the basis on backend ``be`` (``None`` for the LSQR variant)."""
        return None if self.basis is None else be.asarray(self.basis)

    def project(self, w, basis=None, xp=None):
        """``P(w)``; ``basis``/``xp`` from :meth:`to_backend` keep it on-device."""
        if self.is_zero:
            return w * 0.0
        if basis is not None:
            flat = xp.reshape(w, (-1,))
            return xp.reshape(basis @ (basis.T @ flat), w.shape)
        if self.basis is not None:
            flat = np.asarray(to_numpy(w), dtype=float).ravel()
            return (self.basis @ (self.basis.T @ flat)).reshape(self.shape)
        from scipy.sparse.linalg import lsqr

        flat = np.asarray(to_numpy(w), dtype=float).ravel()
        coef = lsqr(self.matrix.T, flat, atol=1e-12, btol=1e-12)[0]
        return np.asarray(self.matrix.T @ coef).reshape(self.shape)


def history_metrics(be, param_index=0, direction=None, finite=None, projector=None,
                    prefix=""):
    """Build the metrics callback of the training loop.

    Records, for the parameter block ``param_index``: ``norm``; ``alignment``
    (cosine with ``direction``); ``alignment_corrected`` (cosine of
    ``w - finite`` with ``direction``); ``finite_distance``
    (``||P(w) - finite||`` with ``P`` the projector onto the finite subspace).
    Keys are prefixed with ``prefix`` (e.g. ``"head_"``).
    """
    xp = be.xp
    d = None if direction is None else be.asarray(direction)
    f = None if finite is None else be.asarray(finite)
    basis = None if projector is None else projector.to_backend(be)
    if basis is not None and f is not None:
        # ||P(w) - f||^2 = ||B^T (w - f)||^2 + ||f - P(f)||^2 for an orthonormal
        # basis B: one product with B^T per record instead of two.
        f_coords = basis.T @ xp.reshape(f, (-1,))
        f_off = max(0.0, float(xp.sum(f * f)) - float(xp.sum(f_coords * f_coords)))

    def metrics(params):
        w = params[param_index]
        nw = float(norm(xp, w))
        out = {prefix + "norm": nw}
        if d is not None:
            out[prefix + "alignment"] = float(xp.sum(w * d)) / nw if nw > 0 else 0.0
            if f is not None:
                r = w - f
                nr = float(norm(xp, r))
                out[prefix + "alignment_corrected"] = (
                    float(xp.sum(r * d)) / nr if nr > 0 else 0.0
                )
        if f is not None and projector is not None:
            if basis is None:
                pw = projector.project(w)
                out[prefix + "finite_distance"] = float(
                    np.linalg.norm(to_numpy(pw) - to_numpy(f)))
            else:
                c = basis.T @ xp.reshape(w, (-1,)) - f_coords
                out[prefix + "finite_distance"] = math.sqrt(float(xp.sum(c * c)) + f_off)
        return out

    return metrics

