"""Losses and barriers of a few tokens per context, entry by entry.

``CE_I(W) = sum_j pi_j [log sum_{a in A_j} exp(w_a^T h_j) - sum_{z in S_j} p_{j,z} w_z^T
h_j]``, with ``A_j`` the tokens allowed in context ``j`` (the supports and the rows held
not separable).  Where the allowed tokens are a small fraction of ``m x V`` -- the side
``N`` of a split, a few tokens per context -- only their logits matter: a logit is one
dot product ``w_a^T h_j``, a gradient or a Hessian product one sparse ``V x m`` matrix
times the contexts.  A Hessian product then costs ``|A| d`` multiply-adds where
:class:`~skntp.svm._ntp_partial._RestrictedLoss` spends ``m V d``: on the Python
documentation at d = 768 (m = 11,071, V = 2,128, 33,978 allowed entries, 0.14 % of
``m V``) 45 ms against 769 ms on 2 cores (``benchmarks/side_n_certificate.py``; the
dense tables' matrix products run at BLAS speed, the entries' gathers do not).

The same two products (:class:`EntryProducts`) serve the barrier of the analytic
center of a few rows (:func:`~skntp.svm.analytic_center_of_rows`), whose Newton is
preconditioned by per-token blocks on each token's few contexts (:class:`TokenBlocks`).
NumPy only: the split's Newton (:func:`~skntp.svm.far_point_split`) runs on the host.
"""

import numpy as np
import scipy.sparse as sp

__all__ = ["SPARSE_BELOW", "EntryProducts", "SparseRestrictedLoss", "TokenBlocks",
           "sparse_enough"]

#: The fraction of allowed ``(context, token)`` entries below which the restricted
#: loss is computed entry by entry (:class:`SparseRestrictedLoss`): its products cost
#: ``|A| d`` against ``m V d`` for the dense tables, but gather rows of ``W`` and of the
#: contexts, several times slower per entry than a matrix product.
SPARSE_BELOW = 0.05

#: Entries per chunk of the logits' row-wise dot products: two ``chunk x d``
#: temporaries that stay in the cache (35,000 entries of d = 768: 38 ms by chunks of
#: 256, 99 ms by chunks of 8,192).
ENTRY_CHUNK = 256

#: Singular values of a token's contexts below this fraction of their largest are
#: dropped from its block (:class:`TokenBlocks`): the span's rounding.
SPAN_RTOL = 1e-8

#: The ridge added to each token block's diagonal, relative to its mean: the
#: curvatures near a barrier's boundary span twenty decades.
RIDGE = 1e-12


class EntryProducts:
    """The logits ``w_a^T h_j`` of a list of entries ``(j, a)`` and, for coefficients
    ``c`` of the entries, ``sum_j c_ja h_j`` for each token: the two products of a loss
    or barrier of a few tokens per context.

    Parameters
    ----------
    H : ndarray of shape (m, d)
    j, v : ndarray of int of shape (n,)
        The entries' contexts and tokens.
    n_tokens : int
    """

    def __init__(self, H, j, v, n_tokens):
        self.H = np.asarray(H, dtype=float)
        self.j, self.v = np.asarray(j), np.asarray(v)
        self.shape = (n_tokens, self.H.shape[1])
        # the entries as a V x m matrix whose data are permuted in place
        self.order = np.lexsort((self.j, self.v))
        indptr = np.r_[0, np.cumsum(np.bincount(self.v, minlength=n_tokens))]
        self.tokens = sp.csr_matrix((np.zeros(self.j.size), self.j[self.order], indptr),
                                    shape=(n_tokens, self.H.shape[0]))

    def logits(self, w):
        """``w_{v_i}^T h_{j_i}`` for each entry ``i``, ``w`` of shape ``(V d,)``."""
        W = np.reshape(w, self.shape)
        out = np.empty(self.j.size)
        for a in range(0, self.j.size, ENTRY_CHUNK):
            b = min(a + ENTRY_CHUNK, self.j.size)
            out[a:b] = np.einsum("ij,ij->i", W[self.v[a:b]], self.H[self.j[a:b]])
        return out

    def image(self, c):
        """``sum_i c_i h_{j_i}`` into row ``v_i``: shape (V, d)."""
        self.tokens.data[:] = c[self.order]
        return np.asarray(self.tokens @ self.H)


class SparseRestrictedLoss:
    """``CE_I``, its gradient and Hessian products, on the allowed entries only.

    The interface of :class:`~skntp.svm._ntp_partial._RestrictedLoss` that Newton-CG
    uses (``value_and_gradient``, ``hessian_at``, ``along``, ``S``), its tables
    vectors of one entry per allowed ``(j, a)``: softmax, log-partition and the
    Hessian's row means are segment reductions over each context's entries (sorted
    by context), gradients ``sum_j c_ja h_j`` a sparse ``V x m`` matrix of the entries
    times the contexts.

    Parameters
    ----------
    H : ndarray of shape (m, d)
    P : ndarray or sparse matrix of shape (m, V)
        Next-token probabilities, zero off ``allowed``.
    pi : ndarray of shape (m,)
    allowed : ndarray of bool of shape (m, V)
        At least one token per context.
    """

    def __init__(self, H, P, pi, allowed):
        m, V = allowed.shape
        self.shape = (V, np.shape(H)[1])
        self.j, self.v = np.nonzero(allowed)  # (sorted by context)
        self.starts = np.flatnonzero(np.r_[True, np.diff(self.j) != 0])
        self.counts = np.diff(np.r_[self.starts, self.j.size])
        if self.starts.size != m:
            raise ValueError("every context needs an allowed token.")
        self.entries = EntryProducts(H, self.j, self.v, V)
        self.pi = np.asarray(pi, dtype=float)
        self.pi_e = self.pi[self.j]
        probs = sp.csr_matrix(P)[self.j, self.v] if sp.issparse(P) else P[self.j, self.v]
        self.p = np.asarray(probs, dtype=float).ravel()
        self.target_gradient = self._image(self.pi_e * self.p)
        self.point, self.s = None, None

    def _logits(self, w):
        return self.entries.logits(w)

    def _image(self, c):
        return self.entries.image(c)

    def _segment(self, x, reduce):
        return reduce.reduceat(x, self.starts)

    def _spread(self, x):
        return np.repeat(x, self.counts)

    def _log_partition(self, z):
        """``(log sum_a exp z_ja, softmax)``, by contexts."""
        top = self._segment(z, np.maximum)
        e = np.exp(z - self._spread(top))
        total = self._segment(e, np.add)
        return top + np.log(total), e / self._spread(total)

    def value_and_gradient(self, w):
        """``(CE_I(w), gradient)``; keeps the softmax at ``w``."""
        z = self._logits(w)
        lse, s = self._log_partition(z)
        self.point, self.s = np.array(w, copy=True), s
        value = float(self.pi @ lse - self.pi_e @ (self.p * z))
        return value, (self._image(self.pi_e * s) - self.target_gradient).ravel()

    def along(self, w, step):
        """``t -> CE_I(w + t step)``: two passes of logits, then one per ``t``."""
        zw, zs = self._logits(w), self._logits(step)
        linear_w, linear_s = self.pi_e @ (self.p * zw), self.pi_e @ (self.p * zs)

        def value(t):
            return float(self.pi @ self._log_partition(zw + t * zs)[0]
                         - linear_w - t * linear_s)
        return value

    def hessian_at(self, w, single=False):
        """``u -> sum_j pi_j (diag(s_j) - s_j s_j^T) U h_j h_j^T`` on the entries
        (``single`` is accepted and ignored: the products are cheap in float64)."""
        if self.point is None or not np.array_equal(w, self.point):
            self.value_and_gradient(w)
        s = self.s

        def product(u):
            y = self._logits(u)
            mean = self._segment(s * y, np.add)
            return self._image(self.pi_e * s * (y - self._spread(mean))).ravel()
        return product

    @property
    def S(self):
        """The softmax at the last point, as a dense ``(m, V)`` table (0 off the
        allowed entries)."""
        out = np.zeros((self.starts.size, self.shape[0]))
        out[self.j, self.v] = self.s
        return out


def sparse_enough(allowed):
    """Whether :class:`SparseRestrictedLoss` serves ``allowed`` (a boolean ``(m, V)``
    mask): fewer than :data:`SPARSE_BELOW` of its entries allowed."""
    return np.count_nonzero(allowed) <= SPARSE_BELOW * allowed.size


class TokenBlocks:
    """Per-token ``r x r`` blocks ``B_a = sum_j c_ja q_j q_j^T`` over a few contexts each,
    inverted on their span, for a preconditioner of Newton-CG.

    Where each token has a few of the ``m`` contexts (the entries of a split's side
    ``N``), ``B_a = Q_a^T C_a Q_a`` with ``Q_a`` the token's ``n_a`` rows of the
    orthonormal contexts.  With ``Q_a = U_a Sigma_a V_a^T`` (thin SVD, the singular values
    above ``1e-8`` of the largest), ``B_a^+ = V_a Sigma_a^{-1} (U_a^T C_a U_a)^{-1}
    Sigma_a^{-1} V_a^T`` on the span of the token's contexts, where its gradients lie:
    ``n_a x r`` numbers per token where the dense blocks take ``r^2`` (10 GB at V = 2,128,
    r = 768).  The SVDs are computed once; each refresh inverts ``k_a x k_a`` matrices.
    Tokens are grouped by ``n_a`` (powers of two, rows padded with zeros) so that every
    step is a batched array operation, never a loop over tokens.

    Parameters
    ----------
    Q : ndarray of shape (m, r)
    j, v : ndarray of int of shape (n,)
        The entries: context ``j[i]`` is one of token ``v[i]``'s (a pair may repeat).
    n_tokens : int
    """

    def __init__(self, Q, j, v, n_tokens):
        self.shape = (n_tokens, Q.shape[1])
        order = np.lexsort((j, v))
        counts = np.bincount(v, minlength=n_tokens)
        starts = np.r_[0, np.cumsum(counts)]
        padded = np.vstack([Q, np.zeros((1, Q.shape[1]))])
        size = 2 ** np.ceil(np.log2(np.maximum(counts, 1))).astype(int)
        self.groups = []
        for n in np.unique(size[counts > 0]):
            tokens = np.flatnonzero((size == n) & (counts > 0))
            slot = np.arange(n)
            valid = slot < counts[tokens][:, None]
            at = np.where(valid, starts[tokens][:, None] + slot, -1)
            entry = np.where(valid, order[np.maximum(at, 0)], -1)  # (the entries' order)
            rows = np.where(valid, j[np.maximum(entry, 0)], Q.shape[0])
            U, s, Vt = np.linalg.svd(padded[rows], full_matrices=False)
            kept = s > SPAN_RTOL * s[:, :1]
            self.groups.append((tokens, entry, valid, U, np.where(kept, s, 1.0), kept, Vt))
        self.inverse = None

    def at(self, c):
        """Invert the blocks with the entries' weights ``c`` (shape (n,), positive);
        returns ``x -> B^+ x`` on ``x`` of shape ``(V r,)``."""
        inverses = []
        for _, entry, valid, U, s, kept, _ in self.groups:
            weights = np.where(valid, c[np.maximum(entry, 0)], 0.0)
            K = np.matmul(np.swapaxes(U, 1, 2) * weights[:, None, :], U)
            both = kept[:, :, None] & kept[:, None, :]
            K = np.where(both, K, 0.0)
            diag = np.einsum("bkk->bk", K)
            ridge = RIDGE * np.sum(diag, axis=1, keepdims=True) / np.maximum(
                np.sum(kept, axis=1, keepdims=True), 1)
            index = np.arange(K.shape[1])
            K[:, index, index] = np.where(kept, diag + ridge, 1.0)
            inverse = np.linalg.inv(K)
            inverse = np.where(both, inverse, 0.0) / (s[:, :, None] * s[:, None, :])
            inverses.append(inverse)

        def apply(x):
            X = np.reshape(x, self.shape)
            out = np.zeros(self.shape)
            for (tokens, *_, Vt), inverse in zip(self.groups, inverses):
                y = np.matmul(Vt, X[tokens][:, :, None])
                out[tokens] = np.matmul(np.swapaxes(Vt, 1, 2), np.matmul(inverse, y))[..., 0]
            return out.ravel()
        return apply
