"""Alignment, projections and the per-iteration metrics every estimator records."""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.linalg.lapack import dpstrf
from scipy.sparse.linalg import lsqr

from ._backend import blas_threads, scaled_norm, to_numpy
from .svm._ntp_logits import check_support, ntp_logit_svm, support_proxy
from .svm._problem import BilinearScores, Constraints, MaxMarginProblem, constraint_operator

__all__ = [
    "SubspaceProjector",
    "VocabularyLogLossScorer",
    "alignment",
    "history_metrics",
    "logit_geometry",
    "make_vocabulary_log_loss_scorer",
    "numerical_rank",
    "vocabulary_log_loss",
]

#: relative tolerance of :func:`numerical_rank`
RANK_RTOL = 1e-6


def numerical_rank(W, rtol=RANK_RTOL):
    """The number of singular values of ``W`` above ``rtol`` times the largest.

    A relative tolerance, unlike ``numpy.linalg.matrix_rank``'s default for
    small matrices and the absolute ``1e-7`` of the public rank experiments of
    "Transformers as Support Vector Machines": a max-margin solution is only
    defined up to scale, and a solver stopped at a relative accuracy ``eps``
    leaves singular values of about ``eps`` times the largest where the exact
    solution has zeros.  The default ``1e-6`` sits above the certified
    accuracy of the nuclear-norm method (a relative duality gap of 1e-8) and
    far below the smallest non-zero singular value of typical solutions.

    Parameters
    ----------
    W : array-like of shape (k, d)
    rtol : float, default=1e-6

    Returns
    -------
    int
        0 for the zero matrix.
    """
    W = np.asarray(to_numpy(W), dtype=float)
    if W.ndim != 2:
        raise ValueError(f"W must be a matrix, got shape {W.shape}.")
    if not np.all(np.isfinite(W)):
        raise ValueError("W contains NaN or infinity.")
    if not 0.0 <= rtol < 1.0:
        raise ValueError(f"rtol must lie in [0, 1), got {rtol!r}.")
    sv = np.linalg.svd(W, compute_uv=False)
    if sv.size == 0 or sv[0] == 0.0:
        return 0
    return int(np.sum(sv > rtol * sv[0]))


def alignment(w, direction):
    """Cosine ``<w, direction> / (||w|| ||direction||)`` (Frobenius inner product).

    Returns 0.0 when either argument is zero, nan when one has a NaN or an
    infinite entry.  Each argument is first divided by its largest entry, so the
    cosine is exact at any magnitude (the plain ``||w||`` is 0 for entries below
    1e-154 and ``inf`` above 1e154).
    """
    w, d = _by_largest_entry(w), _by_largest_entry(direction)
    if w is None or d is None:
        return float("nan")
    nw, nd = np.linalg.norm(w), np.linalg.norm(d)
    if nw == 0 or nd == 0:
        return 0.0
    return float(w @ d / (nw * nd))


def _by_largest_entry(a):
    """``a / max|a|`` flattened (``a`` when zero), ``None`` with a NaN or an infinity."""
    a = np.asarray(to_numpy(a), dtype=float).ravel()
    top = float(np.max(np.abs(a))) if a.size else 0.0
    if not np.isfinite(top):
        return None
    return a / top if top > 0 else a


class SubspaceProjector:
    """Orthogonal projector onto the row space of a constraint matrix.

    For the NTP decoder the rows of the log-odds equations (3) span the
    subspace ``F`` of eq. (5), so ``project(W) = P_F(W)``.  The basis is
    computed once, and each projection is then two matrix-vector products
    (``rank * n_features`` multiply-adds each, or ``(n_features - rank) *
    n_features`` through the complement when the Gram path keeps it):

    * at most as many rows as features (``n_rows <= n_features``, and
      ``n_rows * n_features <= max_dense``): by the SVD of the rows;
    * more rows than features (data that are not NTP-separable: the rows of
      ``F_I`` number about ``m V``) with ``n_features ** 2 <= max_dense``: from
      the Gram matrix ``A^T A`` of the rows (each scaled by its largest entry,
      which keeps the row space), summed over chunks of rows, by a pivoted
      Cholesky factorization (LAPACK ``dpstrf``, rank tolerance ``n eps``
      times the largest pivot, i.e. singular values of the scaled rows above
      about ``sqrt(n eps)`` times the largest count) and one QR factorization
      of the range, or of the null space when that is smaller;
    * otherwise (a parameter of more than ``sqrt(max_dense)`` entries and
      more rows than a dense basis allows, or a
      :class:`~scipy.sparse.linalg.LinearOperator`): no basis, and each
      projection solves a least-squares problem with LSQR (tens to hundreds
      of products with the rows).

    When the constraint matrix ``A`` is sparse and has fewer rows than
    features, the coordinates in the basis are also available through ``A``
    itself (:meth:`coordinates`), which is cheaper than the dense basis when
    ``A`` has few non-zeros (the decoder's rows have ``2 d`` each).

    Parameters
    ----------
    matrix : sparse matrix or LinearOperator of shape (n_rows, n_features), or None
        Rows spanning the subspace (``None`` or no rows: the zero subspace).  A
        :class:`~scipy.sparse.linalg.LinearOperator` (matrix-free rows, e.g.
        :func:`skntp.svm._problem.constraint_operator`) always takes the LSQR path.
    shape : tuple
        Shape of the parameter the projector is applied to.
    max_dense : int, default=30_000_000
        Largest number of entries of a dense array the basis may need: the rows
        (``n_rows * n_features``, SVD) or their Gram matrix
        (``n_features ** 2``, pivoted Cholesky).

    Attributes
    ----------
    basis : ndarray of shape (n_features, rank) or None
        An orthonormal basis of the subspace; ``None`` on the LSQR path.
    complement : ndarray of shape (n_features, n_features - rank) or None
        An orthonormal basis of the orthogonal complement, when the Gram path
        found it the smaller of the two (then :meth:`project` and the history's
        ``finite_distance`` use it: ``P(w) = w - N N^T w``).
    method : {"zero", "svd", "gram", "lsqr"}
        How the projector was built (see above).
    """

    #: Largest ``n_rows * n_features`` for the dense basis by default.
    MAX_DENSE = 30_000_000

    @classmethod
    def from_problem(cls, problem, max_dense=None):
        """Projector onto the row space of a program's constraints.

        Programs with few rows get their explicit sparse rows (and the SVD's
        basis); those with more rows than features and a Gram matrix within
        ``max_dense``, the basis from the Gram matrix, summed over chunks of
        explicit rows; the rest a matrix-free operator (LSQR per projection).
        Nothing of size ``(n_rows, n_features)`` is formed beyond ``max_dense``.
        """
        max_dense = cls.MAX_DENSE if max_dense is None else max_dense
        n_rows, n_features = len(problem.constraints), int(np.prod(problem.shape))
        if n_rows == 0:
            return cls(None, problem.shape)
        if n_rows <= n_features and n_rows * n_features <= max_dense:
            return cls(problem.constraint_matrix(), problem.shape, max_dense=max_dense)
        if n_features * n_features <= max_dense:
            sc = problem.scores
            if isinstance(sc, BilinearScores) and sc.outputs is None:
                gram = _decoder_gram(problem, max_dense)
            else:
                step = max(1, max_dense // n_features)
                gram = _row_gram((_problem_rows(problem, slice(a, a + step))
                                  for a in range(0, n_rows, step)), n_features)
            return cls._from_basis(*_range_basis(gram), problem.shape, "gram")
        return cls(constraint_operator(problem), problem.shape, max_dense=max_dense)

    @classmethod
    def _from_basis(cls, basis, complement, shape, method):
        """A projector with the orthonormal ``basis`` (n_features, rank) (and that of the
        orthogonal complement, or None)."""
        proj = cls(None, shape)
        if basis.shape[1]:
            proj.basis, proj.complement = basis, complement
            proj.is_zero, proj.method = False, method
        return proj

    def __init__(self, matrix, shape, max_dense=MAX_DENSE):
        self.shape = tuple(shape)
        self.basis = self.complement = None
        self.matrix = matrix
        self._from_rows = None
        self.is_zero = matrix is None or matrix.shape[0] == 0
        self.method = "zero" if self.is_zero else "lsqr"
        if self.is_zero:
            return
        n_rows, n_features = matrix.shape
        explicit = hasattr(matrix, "toarray") or isinstance(matrix, np.ndarray)
        if explicit and n_rows > n_features and n_features * n_features <= max_dense:
            step = max(1, max_dense // n_features)
            rows = matrix.tocsr() if hasattr(matrix, "toarray") else np.asarray(matrix)
            basis, self.complement = _range_basis(_row_gram(
                (rows[a:a + step] for a in range(0, n_rows, step)), n_features))
            self.basis = basis if basis.shape[1] else None
            self.is_zero = basis.shape[1] == 0
            self.method = "zero" if self.is_zero else "gram"
        elif explicit and n_rows * n_features <= max_dense:
            self.method = "svd"
            dense = matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix)
            # A = U S Vt: the basis is V (what scipy.linalg.orth(A.T) returns), and
            # V^T u = S^{-1} U^T (A u), one product with the sparse A
            u, sv, vt = scipy.linalg.svd(dense, full_matrices=False)
            tol = np.amax(sv, initial=0.0) * np.finfo(float).eps * max(dense.shape)
            rank = int(np.sum(sv > tol))
            self.basis = vt[:rank].T  # (n_features, rank)
            if hasattr(matrix, "toarray") and matrix.nnz + rank * n_rows < n_features * rank:
                self.matrix = matrix.tocsr()
                self._from_rows = u[:, :rank].T / sv[:rank, None]  # (rank, n_rows)

    def coordinates(self, w):
        """``B^T w`` for the orthonormal basis ``B`` of the subspace (NumPy).

        Through the sparse constraint matrix when that is cheaper than the
        dense basis.  Only for projectors with a basis.
        """
        flat = np.asarray(to_numpy(w), dtype=float).ravel()
        if self._from_rows is not None:
            return self._from_rows @ (self.matrix @ flat)
        return self.basis.T @ flat

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
            if self.complement is not None:  # the smaller of the two
                return (flat - self.complement @ (self.complement.T @ flat)).reshape(self.shape)
            return (self.basis @ (self.basis.T @ flat)).reshape(self.shape)

        flat = np.asarray(to_numpy(w), dtype=float).ravel()
        coef = lsqr(self.matrix.T, flat, atol=1e-12, btol=1e-12)[0]
        return np.asarray(self.matrix.T @ coef).reshape(self.shape)


def _problem_rows(problem, rows):
    """The explicit sparse constraint rows ``rows`` (a slice) of ``problem``."""
    c = problem.constraints
    part = Constraints(c.block[rows], c.pos[rows], c.ref[rows], c.rhs[rows],
                       c.equality[rows])
    return MaxMarginProblem(problem.scores, part).constraint_matrix()


def _decoder_gram(problem, max_dense):
    """:func:`_row_gram` of the rows of a linear decoder's program, from their structure.

    Row ``r`` is ``u_r (x) q_b`` with ``u_r = s_pos e_pos - s_ref e_ref`` (``W[t]`` scaled
    by ``s_t``, :class:`~skntp.svm._problem.BilinearScores`), so the Gram matrix is
    ``sum_b (sum_{r in b} u_r u_r^T) (x) q_b q_b^T``: a sparse ``(V^2, n_blocks)`` table
    of the ``u_r u_r^T`` times the ``(n_blocks, q^2)`` table of the ``q_b q_b^T``, in
    chunks of blocks; ``O(rows q^2)`` multiply-adds, no explicit row.  Each row is
    divided by its largest entry ``max|u_r| max|q_b|``, as in :func:`_row_gram`.
    """
    sc, c = problem.scores, problem.constraints
    T, q = sc.shape
    scale = np.ones(T) if sc.output_scale is None else np.asarray(sc.output_scale, float)
    two = c.ref >= 0
    ref = np.where(two, c.ref, c.pos)
    a, b = scale[c.pos], np.where(two, scale[ref], 0.0)
    top = np.maximum(np.abs(a), np.abs(b))
    a = np.divide(a, top, out=np.zeros_like(a), where=top > 0)
    b = np.divide(b, top, out=np.zeros_like(b), where=top > 0)
    pairs = np.concatenate([c.pos * T + c.pos, ref * T + ref, c.pos * T + ref,
                            ref * T + c.pos])
    outer = sp.csr_matrix((np.concatenate([a * a, b * b, -a * b, -a * b]),
                           (np.tile(c.block, 4), pairs)), shape=(sc.n_blocks, T * T))
    queries = np.asarray(sc.queries, dtype=float)
    qtop = np.max(np.abs(queries), axis=1, initial=0.0)
    queries = queries * np.divide(1.0, qtop, out=np.zeros_like(qtop), where=qtop > 0)[:, None]
    G = np.zeros((T * T, q * q))
    step = max(1, max_dense // max(q * q, 1))
    for start in range(0, sc.n_blocks, step):
        Q = queries[start:start + step]
        G += outer[start:start + step].T @ (Q[:, :, None] * Q[:, None, :]).reshape(-1, q * q)
    return G.reshape(T, T, q, q).transpose(0, 2, 1, 3).reshape(T * q, T * q)


def _row_gram(chunks, n_features):
    """``A^T A`` (dense) of the rows of ``A`` given in chunks, each row divided by its
    largest entry first.

    Scaling a row keeps the row space (the subspace of the projector) and makes
    the Gram matrix safe at any data scale (rows of 1e-150 would square to 0).
    """
    G = np.zeros((n_features, n_features))
    for rows in chunks:
        if sp.issparse(rows):
            rows = sp.csr_matrix(rows, dtype=float)
            top = np.asarray(abs(rows).max(axis=1).todense()).ravel()
            rows = sp.diags(np.divide(1.0, top, out=np.zeros_like(top), where=top > 0)) @ rows
            G += (rows.T @ rows).toarray()
        else:
            rows = np.asarray(rows, dtype=float)
            top = np.max(np.abs(rows), axis=1, initial=0.0)
            rows = rows * np.divide(1.0, top, out=np.zeros_like(top), where=top > 0)[:, None]
            G += rows.T @ rows
    return G


def _range_basis(G):
    """Orthonormal bases of the range of the positive semidefinite ``G``, shape (n, rank),
    and of its null space when that is the smaller (shape (n, n - rank), else None).

    A pivoted Cholesky factorization ``Pi^T G Pi = L L^T`` (LAPACK ``dpstrf``, its
    default tolerance ``n eps max(diag)``) gives the rank ``r`` and a factor
    ``K = Pi L`` with ``G = K K^T``: the range is that of ``K``.  When the null
    space is the smaller of the two (data that are not NTP-separable: ``F_I`` is
    nearly the whole space), it is ``Pi [-L11^{-T} L21^T; I]`` and the range its
    orthogonal complement, from one complete QR factorization; either way a QR
    factorization of at most ``n * min(r, n - r)`` entries, ``O(n^3 / 3)`` in all.
    """
    n = G.shape[0]
    if n == 0 or not np.any(G):
        return np.zeros((n, 0)), None
    # both factorizations spend much of their time in matrix-vector products with
    # the n x n matrix (their panels): below blas_threads' size they run on one
    # thread (a pool of two on a busy 2-core machine made them 10x slower at n = 1264)
    with blas_threads(n * n):
        factor, piv, rank, info = dpstrf(G, lower=1)
        if info < 0:  # pragma: no cover - an argument error of LAPACK
            raise ValueError(f"dpstrf: illegal argument {-info}.")
        piv = piv - 1  # LAPACK's pivots are 1-based: (Pi^T G Pi)[i, j] = G[piv[i], piv[j]]
        L = np.tril(factor[:, :rank])
        if rank <= n - rank:
            K = np.empty_like(L)
            K[piv] = L
            return np.linalg.qr(K)[0], None
        k = n - rank
        null = np.empty((n, k))
        null[piv[:rank]] = -scipy.linalg.solve_triangular(L[:rank], L[rank:].T, lower=True,
                                                           trans="T")
        null[piv[rank:]] = np.eye(k)
        Q = np.linalg.qr(null, mode="complete")[0]
        return Q[:, k:], Q[:, :k]


def history_metrics(be, param_index=0, direction=None, finite=None, projector=None,
                    prefix="", trials=False, other_directions=None):
    """Build the metrics callback of the training loop.

    Records, for the parameter block ``param_index``: ``norm``; ``alignment``,
    the cosine with ``direction`` of ``w - finite`` when the model has a
    finite part (the estimators' ``alignment_``), else of ``w``; with a finite
    part also ``alignment_uncorrected`` (the cosine of ``w``) and
    ``finite_distance`` (``||P(w) - finite||`` with ``P`` the
    projector onto the finite subspace).  Keys are prefixed with ``prefix``
    (e.g. ``"head_"``).  ``other_directions`` maps a name to another direction
    (e.g. ``{"fro": W^mm_fro}`` when ``direction`` is the limit in another
    norm): each is recorded as ``alignment_<name>``, computed as ``alignment``.

    With ``trials=True`` the block has a leading trial axis (batched runs,
    :mod:`skntp.sweeps`), ``direction``, ``finite`` and ``projector`` are
    sequences with one entry per trial (``None`` entries allowed for
    ``direction``: NaN there), and every value is a vector over trials.
    A single problem is computed as a batch of one.
    """
    xp = be.xp
    dirs = list(direction) if trials else [direction]
    fins = list(finite) if trials else [finite]
    projs = list(projector) if trials else [projector]
    has_dir = np.array([d is not None for d in dirs])
    has_fin = all(f is not None for f in fins)
    shape = next((np.shape(a) for a in dirs + fins if a is not None), None)
    D = F = basis = f_coords = None
    if has_dir.any():
        D = be.asarray(np.stack([d if d is not None else np.zeros(shape) for d in dirs]))
    no_dir = np.where(has_dir, 0.0, np.nan)
    others = {}
    for name, other in (other_directions or {}).items():
        if other is not None:
            others[name] = be.asarray(np.stack(list(other)) if trials else other[None])
    if has_fin:
        F = be.asarray(np.stack(fins))
    with_basis = has_fin and all(p is not None and (p.is_zero or p.basis is not None)
                                 for p in projs)
    complement = None
    if with_basis and all(not p.is_zero and p.complement is not None for p in projs):
        # the orthogonal complement (basis N) is the smaller: P(w) = w - N N^T w, and
        # ||P(w) - f||^2 = ||P(w - f)||^2 + ||N^T f||^2 (data that are not NTP-separable:
        # F_I is nearly the whole space, N has few columns)
        k = max(p.complement.shape[1] for p in projs)
        stacked = np.zeros((len(projs), int(np.prod(shape)), k))
        for b, p in enumerate(projs):
            stacked[b, :, : p.complement.shape[1]] = p.complement
        complement = be.asarray(stacked)
        f_top = _trial_top(xp, F)
        fc_unit = _coords(xp, complement, F / _row_shape(xp, f_top, F))
        f_off = f_top * xp.sqrt(xp.sum(fc_unit * fc_unit, axis=1))
    elif with_basis:
        # ||P(w) - f||^2 = ||B^T (w - f)||^2 + ||f - P(f)||^2 for an orthonormal basis B:
        # the coordinates of w per record, not a projection
        rank = max([0] + [p.basis.shape[1] for p in projs if not p.is_zero])
        stacked = np.zeros((len(projs), int(np.prod(shape)), rank))
        for b, p in enumerate(projs):
            if not p.is_zero:
                stacked[b, :, : p.basis.shape[1]] = p.basis
        basis = be.asarray(stacked)
        f_coords = _coords(xp, basis, F)
        # ||f - P(f)||, from f divided by its largest entry (f has the data's units)
        f_top = _trial_top(xp, F)
        f_unit, fc_unit = F / _row_shape(xp, f_top, F), f_coords / f_top[:, None]
        f_off = f_top * xp.sqrt(xp.maximum(
            _trial_dot(xp, f_unit, f_unit) - xp.sum(fc_unit * fc_unit, axis=1), 0.0))
    # one problem on NumPy: coordinates through the sparse constraint rows when cheaper
    sparse_coords = (not trials and with_basis and complement is None and be.name == "numpy"
                     and getattr(projs[0], "_from_rows", None) is not None)

    def metrics(params):
        # norms and cosines of each trial's block divided by its largest entry: the
        # parameters have the inverse units of the data (1e-150 data: entries of 1e150)
        W = params[param_index] if trials else params[param_index][None]
        top, Wu = _by_trial_top(xp, W)
        nw_unit = xp.sqrt(_trial_dot(xp, Wu, Wu))
        out = {"norm": top * nw_unit}
        if D is not None:
            out["alignment"] = _ratio(xp, _trial_dot(xp, Wu, D), nw_unit) + no_dir
        R = W if F is None else W - F
        Ru = Wu if F is None else _by_trial_top(xp, R)[1]
        nr_unit = nw_unit if F is None else xp.sqrt(_trial_dot(xp, Ru, Ru))
        if D is not None and F is not None:
            out["alignment_uncorrected"] = out["alignment"]
            out["alignment"] = _ratio(xp, _trial_dot(xp, Ru, D), nr_unit) + no_dir
        for name, O in others.items():
            out[f"alignment_{name}"] = _ratio(xp, _trial_dot(xp, Ru, O), nr_unit)
        if F is not None and all(p is not None for p in projs):
            if with_basis:
                if complement is not None:  # a vector of the norm of B^T (w - f)
                    c = _complement_part(xp, complement, R)
                else:
                    c = (xp.asarray(projs[0].coordinates(W[0]))[None] if sparse_coords
                         else _coords(xp, basis, W)) - f_coords
                c_top = _trial_top(xp, c)
                cu = c / c_top[:, None]
                out["finite_distance"] = np.hypot(
                    to_numpy(c_top * xp.sqrt(xp.sum(cu * cu, axis=1))), to_numpy(f_off))
            else:  # LSQR projectors (large programs)
                Wn = to_numpy(W)
                out["finite_distance"] = np.array([
                    scaled_norm(p.project(Wn[b]) - fins[b]) for b, p in enumerate(projs)])
        out = {prefix + k: np.asarray(to_numpy(v), dtype=float) for k, v in out.items()}
        return out if trials else {k: float(v[0]) for k, v in out.items()}

    return metrics


def _trial_top(xp, a):
    """``max|a|`` of each trial (leading axis), 1 where that is 0 or not finite (so a
    division by it changes nothing there)."""
    flat = xp.reshape(a, (a.shape[0], -1))
    if flat.shape[1] == 0:  # (the coordinates in a zero subspace)
        return xp.ones((a.shape[0],), dtype=a.dtype, device=getattr(a, "device", None))
    top = xp.max(xp.abs(flat), axis=1)
    ok = (top > 0) & (top < float("inf"))
    return xp.where(ok, top, xp.ones_like(top))


def _row_shape(xp, values, like):
    """Per-trial ``values`` broadcast over the trials of ``like``."""
    return xp.reshape(values, (like.shape[0],) + (1,) * (like.ndim - 1))


def _by_trial_top(xp, a):
    """``(top, a / top)`` with ``top`` of :func:`_trial_top`."""
    top = _trial_top(xp, a)
    return top, a / _row_shape(xp, top, a)


def _trial_dot(xp, a, b):
    """Per-trial inner products of arrays with a leading trial axis."""
    return xp.sum(xp.reshape(a * b, (a.shape[0], -1)), axis=1)


def _coords(xp, basis, W):
    """``B_b^T w_b`` per trial, shape (trials, rank)."""
    flat = xp.reshape(W, (W.shape[0], -1, 1))
    return (xp.matrix_transpose(basis) @ flat)[..., 0]


def _complement_part(xp, complement, W):
    """``w_b - N_b N_b^T w_b`` per trial (the projection onto the complement of the
    span of ``N_b``), flattened, shape (trials, n_features)."""
    flat = xp.reshape(W, (W.shape[0], -1))
    return flat - (complement @ _coords(xp, complement, W)[..., None])[..., 0]


def _ratio(xp, num, den):
    """``num / den`` per trial, 0 where ``den`` is 0 (NumPy)."""
    num, den = to_numpy(num), to_numpy(den)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


# ---------------------------------------------------------------------------
# Log-loss over the whole vocabulary (for GridSearchCV on next-token data)
# ---------------------------------------------------------------------------
def vocabulary_log_loss(y_true, log_proba, labels, *, sample_weight=None, eps=None):
    """Mean negative log-likelihood of next tokens, with columns named by ``labels``.

    Unlike :func:`sklearn.metrics.log_loss`, the columns of ``log_proba``
    are the whole vocabulary ``labels`` whichever tokens ``y_true`` holds: a
    test fold of next-token data rarely contains every token, and
    scikit-learn's ``"neg_log_loss"`` scorer then infers fewer classes from
    ``y_true`` than the model's ``predict_proba`` has columns, fails, and
    ``GridSearchCV`` records NaN.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Next tokens, each one of ``labels``.
    log_proba : array-like of shape (n_samples, n_labels)
        Log-probabilities of every token (a model's ``predict_log_proba``, or
        the log of ``predict_proba``).
    labels : array-like of shape (n_labels,)
        The token of every column (a fitted model's ``classes_``).
    sample_weight : array-like of shape (n_samples,), default=None
    eps : float, default=None
        Probabilities below ``eps`` count as ``eps`` (default: float64
        machine epsilon, as :func:`sklearn.metrics.log_loss` clips), so a
        token the model rules out costs ``-log(eps)`` (about 36 nats), not
        infinity.

    Returns
    -------
    float
        ``-sum_i w_i log p_i(y_i) / sum_i w_i`` (lower is better).

    Raises
    ------
    ValueError
        When ``y_true`` holds a token that is not in ``labels``.
    """
    log_proba = np.asarray(log_proba, dtype=float)
    labels = np.asarray(labels)
    y_true = np.asarray(y_true).ravel()
    if log_proba.ndim != 2 or log_proba.shape != (y_true.shape[0], labels.shape[0]):
        raise ValueError(
            f"log_proba must have shape (n_samples, n_labels) = "
            f"{(y_true.shape[0], labels.shape[0])}, got {log_proba.shape}."
        )
    index = {label: j for j, label in enumerate(labels.tolist())}
    cols = np.array([index.get(t, -1) for t in y_true.tolist()], dtype=np.int64)
    if np.any(cols < 0):
        missing = np.unique(y_true[cols < 0])[:10]
        raise ValueError(
            f"y_true holds tokens outside the labels (the model's vocabulary): "
            f"{missing.tolist()}. Fit the model with the whole vocabulary (e.g. "
            "NTPDecoderClassifier(vocabulary=...)) or pass labels=."
        )
    floor = math.log(np.finfo(np.float64).eps if eps is None else _check_eps(eps))
    picked = np.maximum(log_proba[np.arange(y_true.shape[0]), cols], floor)
    return float(-np.average(picked, weights=sample_weight))


def _check_eps(eps):
    """``eps`` as a probability floor: a real number with ``0 < eps < 1``."""
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer,
                                                                    np.floating)):
        raise ValueError(f"eps must be a probability floor, a number in (0, 1), got {eps!r}.")
    eps = float(eps)
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must be a probability floor in (0, 1) (a floor of 0 makes a "
                         f"ruled-out token cost infinity, one of 1 or more makes the score "
                         f"positive), got {eps!r}.")
    return eps


class VocabularyLogLossScorer:
    """``scorer(estimator, X, y)``: the negated :func:`vocabulary_log_loss` of a fitted model.

    Made by :func:`make_vocabulary_log_loss_scorer`; see there.
    """

    def __init__(self, labels=None, eps=None):
        self.labels = labels
        self.eps = eps

    def __call__(self, estimator, X, y_true, sample_weight=None):
        labels = self.labels if self.labels is not None else estimator.classes_
        if hasattr(estimator, "predict_log_proba"):
            log_proba = estimator.predict_log_proba(X)
        else:
            with np.errstate(divide="ignore"):
                log_proba = np.log(estimator.predict_proba(X))
        log_proba = np.asarray(log_proba, dtype=float)
        if self.labels is not None:
            # columns follow the estimator's classes_; reorder them to labels
            classes = list(np.asarray(estimator.classes_).tolist())
            where = {c: j for j, c in enumerate(classes)}
            full = np.full((log_proba.shape[0], len(labels)), -np.inf)
            for j, label in enumerate(np.asarray(labels).tolist()):
                if label in where:
                    full[:, j] = log_proba[:, where[label]]
            log_proba = full
        return -vocabulary_log_loss(y_true, log_proba, labels, sample_weight=sample_weight,
                                    eps=self.eps)

    def __repr__(self):
        return f"make_vocabulary_log_loss_scorer(labels={self.labels!r}, eps={self.eps!r})"


def make_vocabulary_log_loss_scorer(labels=None, *, eps=None):
    """A log-loss scorer for next-token models that knows the whole vocabulary.

    Use it as ``scoring=`` of :class:`~sklearn.model_selection.GridSearchCV`
    or :func:`~sklearn.model_selection.cross_val_score` instead of
    ``"neg_log_loss"``, which fails (NaN scores) when a test fold lacks some
    tokens of the model's ``classes_``: that is the rule, not the exception,
    for next-token data.  The score is ``-vocabulary_log_loss`` (higher is
    better, as scikit-learn's scorers).

    Parameters
    ----------
    labels : array-like, default=None
        The vocabulary.  ``None`` uses the fitted estimator's ``classes_``
        (for :class:`~skntp.NTPAttentionClassifier` every token id
        ``0..K-1``; for :class:`~skntp.NTPDecoderClassifier` the tokens seen
        in training, unless it is fitted with ``vocabulary=``).  Tokens of
        ``labels`` the estimator does not know get probability 0.
    eps : float, default=None
        Probability floor (see :func:`vocabulary_log_loss`).

    Returns
    -------
    VocabularyLogLossScorer
        A callable ``scorer(estimator, X, y, sample_weight=None)``.

    Examples
    --------
    >>> from sklearn.model_selection import GridSearchCV
    >>> from skntp import NTPAttentionClassifier
    >>> from skntp.datasets import make_token_priority_data
    >>> from skntp.metrics import make_vocabulary_log_loss_scorer
    >>> X, y, E = make_token_priority_data(8, 8, 24, 6, random_state=0)
    >>> search = GridSearchCV(NTPAttentionClassifier(E, solver="ngd", max_iter=50),
    ...                       {"lr": [0.01, 0.1]}, cv=3,
    ...                       scoring=make_vocabulary_log_loss_scorer()).fit(X, y)
    >>> bool(np.isfinite(search.cv_results_["mean_test_score"]).all())
    True
    """
    if eps is not None:
        _check_eps(eps)
    return VocabularyLogLossScorer(labels=labels, eps=eps)


def _balanced_factors(L):
    """``(U sqrt(s), sqrt(s) V^T)`` of the thin SVD ``L = U diag(s) V^T``, numerically
    zero singular values (:data:`RANK_RTOL`) dropped."""
    U, s, Vt = np.linalg.svd(L, full_matrices=False)
    keep = s > RANK_RTOL * (s[0] if s.size else 0.0)
    r = np.sqrt(s[keep])
    return U[:, keep] * r, r[:, None] * Vt[keep]


def _gram_cosine(A, B):
    """Cosine of the Gram matrices ``A A^T`` and ``B B^T`` without forming them:
    ``<A A^T, B B^T> = ||A^T B||_F^2``."""
    num = np.linalg.norm(A.T @ B) ** 2
    den = np.linalg.norm(A.T @ A) * np.linalg.norm(B.T @ B)
    return float(num / den) if den > 0 else 0.0


def _subspace_collapse(support, contexts, words):
    """Within-group over total energy of the context embeddings of contexts that share
    their support, each projected off the span of their in-support word differences."""
    _, group, counts = np.unique(support, axis=0, return_inverse=True, return_counts=True)
    group = np.asarray(group).ravel()
    within = total = 0.0
    for g in np.flatnonzero(counts > 1):  # one pass per support pattern, not per context
        members = np.flatnonzero(group == g)
        inside = np.flatnonzero(support[members[0]])
        D = (words[inside[1:]] - words[inside[0]]).T  # (d, |S| - 1)
        Hg = contexts[members].T  # (d, n_g)
        if D.shape[1]:
            Q, _ = np.linalg.qr(D)
            Hg = Hg - Q @ (Q.T @ Hg)
        within += float(np.sum((Hg - Hg.mean(axis=1, keepdims=True)) ** 2))
        total += float(np.sum(Hg ** 2))
    return within / total if total > 0 else float("nan")


def logit_geometry(support, logits=None, *, word_embeddings=None, context_embeddings=None,
                   L_mm=None, finite_component=None, method="auto"):
    """Any model's logits and embeddings against the NTP-UFM theory.

    Zhao, Behnia, Vakilian, Thrampoulidis (2024): as the training of next-token
    prediction with free embeddings goes on, the logits grow along ``L_mm``
    (:func:`skntp.svm.ntp_logit_svm`), the word and context Gram matrices
    along those of its balanced factors ``U S^{1/2}`` and ``S^{1/2} V^T``,
    and contexts with the same support collapse once the in-support
    directions are projected out ("subspace collapse").  Works on the logits
    of any model evaluated on the ``m`` distinct contexts (a torch LSTM or
    transformer included), or on its word and context embeddings.

    Parameters
    ----------
    support : array-like or sparse matrix of shape (m, V)
        The supports ``S_j`` (probabilities may be passed).
    logits : array-like of shape (m, V), optional
        One row per context (a model's output orientation).  Give either the
        logits or both embeddings.
    word_embeddings : array-like of shape (V, d), optional
        ``W`` (an output/unembedding matrix, one row per token).
    context_embeddings : array-like of shape (m, d), optional
        The last hidden states ``h_j``, one row per context; the logits are then
        ``context_embeddings @ word_embeddings.T``.
    L_mm : array-like of shape (V, m), optional
        The logit-space NTP-SVM solution (tokens by contexts, as
        :func:`~skntp.svm.ntp_logit_svm` returns it); ``None``: solved here.
    finite_component : array-like of shape (V, m), optional
        The finite in-support part ``L_in`` of the logits
        (:func:`~skntp.svm.logit_finite_component`, or
        :attr:`NTPEmbeddingClassifier.finite_component_`); with it the result
        also has ``"corrected_alignment"``.
    method : str, default="auto"
        The method of :func:`~skntp.svm.ntp_logit_svm` when ``L_mm`` is None.

    Returns
    -------
    dict
        ``"logit_alignment"``: cosine of the logits with ``L_mm``, each
        context's logits centered first (softmax ignores a constant per
        context; ``L_mm`` and the proxy are centered);
        ``"proxy_alignment"``: with the centered support matrix
        (:func:`~skntp.svm.support_proxy`); ``"mm_proxy_alignment"`` and
        ``"proxy_distance"``: the proxy against ``L_mm`` (cosine, and the
        Frobenius distance of the two normalized matrices, the measure of the
        authors' code); ``"word_gram_alignment"`` and
        ``"context_gram_alignment"``: cosines of ``W W^T`` with
        ``U S U^T`` and of the context Gram matrix ``(h_j^T h_k)`` with ``V S V^T``
        (``L_mm = U S V^T``),
        from the embeddings when given, else from the balanced factors of the
        logits; ``"subspace_collapse"``: the share of the energy of the
        context embeddings, projected off the span of the in-support word
        differences ``w_z - w_z'``, that lies within the groups of contexts
        with equal supports (0: collapsed; NaN if no two supports are equal;
        with logits alone ``W`` is the identity); ``"logit_norm"``: ``||L||_F``;
        with ``finite_component``, ``"corrected_alignment"``: the cosine of
        the centered logits less ``L_in`` with ``L_mm`` (the logits are
        ``L_in + R L_mm`` plus a vanishing rest as ``R`` grows).

    Raises
    ------
    ValueError
        Neither or both of the logits and the embeddings, only one embedding,
        or shapes that disagree with ``support``.
    """
    S = check_support(support)
    L_in = None if finite_component is None else np.asarray(to_numpy(finite_component),
                                                              dtype=float)
    m, V = S.shape
    given_emb = word_embeddings is not None or context_embeddings is not None
    if (logits is None) == (not given_emb):
        raise ValueError("give either logits or word_embeddings and context_embeddings.")
    if given_emb:
        if word_embeddings is None or context_embeddings is None:
            raise ValueError("give both word_embeddings (V, d) and context_embeddings (m, d).")
        W = np.asarray(to_numpy(word_embeddings), dtype=float)
        H = np.asarray(to_numpy(context_embeddings), dtype=float)
        if W.ndim != 2 or H.ndim != 2 or W.shape[0] != V or H.shape[0] != m or (
                W.shape[1] != H.shape[1]):
            raise ValueError(f"word_embeddings must be (V, d) = ({V}, d) and "
                             f"context_embeddings (m, d) = ({m}, d), got {W.shape} and "
                             f"{H.shape}.")
        logits = H @ W.T
    logits = np.asarray(to_numpy(logits), dtype=float)
    if logits.shape != (m, V) or not np.all(np.isfinite(logits)):
        raise ValueError(f"logits must be finite with shape (m, V) = ({m}, {V}), got "
                         f"shape {logits.shape}.")
    if not given_emb:
        H, Wt = _balanced_factors(logits)  # logits = H Wt
        W = Wt.T
    Lmm = ntp_logit_svm(S, method=method).primal if L_mm is None else np.asarray(
        to_numpy(L_mm), dtype=float)
    if Lmm.shape != (V, m):
        raise ValueError(f"L_mm must have shape (V, m) = ({V}, {m}), got {Lmm.shape}.")
    if L_in is not None and (L_in.shape != (V, m) or not np.all(np.isfinite(L_in))):
        raise ValueError(f"finite_component must be finite with shape (V, m) = ({V}, {m}), "
                         f"got shape {L_in.shape}.")
    P = support_proxy(S)
    Wmm, Hmm = _balanced_factors(Lmm)
    nP, nM = np.linalg.norm(P), np.linalg.norm(Lmm)
    words = W if given_emb else np.eye(V)
    contexts = H if given_emb else logits
    centered = logits - logits.mean(axis=1, keepdims=True)  # softmax-invariant
    extra = {} if L_in is None else {"corrected_alignment": alignment(centered.T - L_in, Lmm)}
    return extra | {
        "logit_alignment": alignment(centered.T, Lmm),
        "proxy_alignment": alignment(centered.T, P),
        "mm_proxy_alignment": alignment(Lmm, P),
        "proxy_distance": float(np.linalg.norm(Lmm / nM - P / nP)),
        "word_gram_alignment": _gram_cosine(W, Wmm),
        "context_gram_alignment": _gram_cosine(H, Hmm.T),
        "subspace_collapse": _subspace_collapse(S, contexts, words),
        "logit_norm": float(np.linalg.norm(logits)),
    }
