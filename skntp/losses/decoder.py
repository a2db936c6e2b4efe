"""Next-token prediction with a linear decoder: the model's data and its loss.

Thrampoulidis, "Implicit Bias of Next-Token Prediction" (2024): distinct
contexts ``h_j`` with weights ``pi_j`` and next-token distributions
``p_j`` (Sec. 2) and the NTP cross-entropy (eq. (2)) of ``softmax(W h)``.
"""

from __future__ import annotations

import math
import warnings
from numbers import Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import assert_all_finite, column_or_1d
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, validate_data

from .._backend import exp_, get_backend, row_chunks, scatter_add
from .._sequences import reject_token_sequences
from ._contexts import ContextProducts

__all__ = ["CrossEntropy", "aggregate_contexts", "check_next_tokens", "next_token_data",
           "next_token_targets", "ntp_cross_entropy", "ntp_logit_gaps", "vocabulary_array"]


def aggregate_contexts(X, Y, sample_weight=None):
    """Group repeated rows of ``X`` into distinct contexts (Sec. 2, eq. (2)).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Context embeddings; identical rows are the same context.
    Y : sparse matrix or ndarray of shape (n, V)
        Non-negative next-token weights per row (one-hot rows for hard labels);
        each row is normalized to sum to one.
    sample_weight : ndarray of shape (n,), optional
        Weight of each row (default 1).  Rows of weight 0 are dropped.

    Returns
    -------
    contexts : ndarray of shape (m, d)
        Distinct contexts ``h_j`` in lexicographic order.
    context_weights : ndarray of shape (m,)
        ``pi_j``, summing to one.
    next_token_probs : scipy.sparse.csr_matrix of shape (m, V)
        ``p_j``, rows summing to one, in canonical form (sorted indices).
    inverse : ndarray of shape (n_kept,)
        Context index of every kept row.
    """
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    keep = w > 0
    if not keep.any():
        raise ValueError("sample_weight is zero for every sample; nothing to fit.")
    X, w = X[keep], w[keep]
    Y = sp.csr_matrix(Y)[np.flatnonzero(keep)]
    row_sums = np.asarray(Y.sum(axis=1)).ravel()
    Y = sp.diags(w / row_sums) @ Y
    contexts, inverse = np.unique(X, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    m = contexts.shape[0]
    agg = sp.csr_matrix((np.ones(X.shape[0]), (inverse, np.arange(X.shape[0]))),
                        shape=(m, X.shape[0]))
    counts = agg @ Y  # (m, V): total weight of each next token after each context
    counts.sum_duplicates()
    counts.eliminate_zeros()
    mass = np.asarray(counts.sum(axis=1)).ravel()
    probs = sp.diags(1.0 / mass) @ counts
    probs = sp.csr_matrix(probs)
    probs.sum_duplicates()  # canonical (sorted indices): the loss sums in one fixed order
    return contexts, mass / mass.sum(), probs, inverse


class CrossEntropy:
    """``CE(W) = -sum_j pi_j sum_z p_{j,z} log S_z(W h_j)`` (eq. (2)) and its gradient.

    The gradient is ``(diag(pi) (softmax(H W^T) - P))^T H`` (eq. (2)
    differentiated): two matrix products and a row-wise max-shifted softmax,
    computed in place.  The next-token matrix ``P`` stays sparse, as
    ``(flat index, pi_j p_{j,z})`` pairs.

    When ``m * V`` exceeds the chunk budget (:data:`skntp._backend.CHUNK_ELEMENTS`)
    the contexts are processed in row chunks: each chunk's logits are
    max-shifted, exponentiated, normalized and multiplied back into the
    gradient (fused log-sum-exp and gradient), so at most one chunk of
    logits exists at a time.  With one chunk the arithmetic is exactly the
    unchunked one.  Contexts that concatenate word vectors (the text loaders'
    ``embedding="words"``) enter word by word
    (:class:`~skntp.losses._contexts.ContextProducts`): the two products shrink from
    ``m d V`` to ``sum_g n_g d_g V`` multiply-adds (``n_g`` distinct words of width
    ``d_g``), the per-word logits computed once per call and gathered chunk by chunk.

    A leading *trial* axis runs independent problems at once (batched
    trials, see :mod:`skntp.sweeps`): ``contexts`` (B, m, d), weights
    (B, m), next-token rows stacked as a sparse (B*m, V) matrix and ``W``
    (B, V, d); the loss is then the vector of the B per-trial losses and the
    gradient stacks the per-trial gradients.

    Parameters
    ----------
    be : Backend
    contexts : ndarray of shape (m, d) or (B, m, d)
    context_weights : ndarray of shape (m,) or (B, m)
    next_token_probs : sparse matrix of shape (m, V) or (B*m, V)
    max_elements : int, optional
        Chunk budget in logits per chunk (all trials together).
    """

    def __init__(self, be, contexts, context_weights, next_token_probs, max_elements=None):
        self.xp = be.xp
        contexts = np.asarray(contexts)
        context_weights = np.asarray(context_weights, dtype=float)
        self.batched = contexts.ndim == 3
        B = contexts.shape[0] if self.batched else 1
        m = contexts.shape[-2]
        coo = sp.coo_matrix(next_token_probs)
        V = coo.shape[1]
        if coo.shape[0] != B * m:
            raise ValueError(
                f"next_token_probs has {coo.shape[0]} rows; expected {B * m} "
                f"({B} trial(s) x {m} contexts)."
            )
        row, col = coo.row.astype(np.int64), coo.col.astype(np.int64)
        trial, j = np.divmod(row, m)
        weighted = context_weights.reshape(-1)[row] * coo.data
        self.n_trials, self.V = B, V
        # multiply-adds of the larger product (BLAS threads: skntp._backend.blas_threads)
        self.work_size = B * m * V * contexts.shape[-1]
        self.be = be
        self.products = ContextProducts(contexts, None, be)
        self.pi = be.asarray(context_weights[..., None])
        self.chunks = []
        for start, stop in row_chunks(m, B * V, max_elements):
            sel = (j >= start) & (j < stop)
            rows = stop - start
            flat = (trial[sel] * rows + (j[sel] - start)) * V + col[sel]
            self.chunks.append((
                start,
                stop,
                be.asindex(flat),
                be.asarray(weighted[sel]),
                be.asindex(trial[sel]) if self.batched else None,
            ))
        self.single = len(self.chunks) == 1

    def __call__(self, params):
        xp = self.xp
        W = params[0]
        Wt = xp.matrix_transpose(W) if self.batched else W.T
        words = self.products.words(Wt)
        loss, sums = 0.0, None
        for start, stop, flat_index, weighted_probs, trial in self.chunks:
            pi = self.pi if self.single else self.pi[..., start:stop, :]
            L = self.products.logits_into(Wt, self.be.empty((*Wt.shape[:-2], stop - start,
                                                              self.V)), start, words)
            L -= xp.max(L, axis=-1, keepdims=True)
            flat = xp.reshape(L, (-1,))
            picked = flat[flat_index]
            exp_(L)
            s = xp.sum(L, axis=-1, keepdims=True)
            # Split every row's mass into its support S_j and the rest, each summed
            # directly: at large norms p_z - p_hat_z = (q_z - p_hat_z) - q_z * out
            # (q the softmax restricted to S_j, out the out-of-support mass) keeps
            # the tiny out-of-support part that p_z - p_hat_z would round away.
            e_in = flat[flat_index]
            rows = flat_index // self.V
            s_in = xp.reshape(scatter_add(xp, rows, e_in, math.prod(s.shape)), s.shape)
            flat[flat_index] = 0.0
            s_out = xp.sum(L, axis=-1, keepdims=True)
            flat[flat_index] = e_in
            safe_in = xp.where(s_in > 0, s_in, xp.ones_like(s_in))
            # log s = log(big) + log1p(small / big): the ratio of the two parts the other
            # way round overflows where the support's part is subnormal (a support
            # token about 710 to 745 below the row's largest logit in float64)
            big = xp.maximum(s_in, s_out)
            log_s = xp.log(big) + xp.log1p(xp.minimum(s_in, s_out) / big)
            if self.batched:
                part = xp.sum(pi * log_s, axis=(-2, -1)) - scatter_add(
                    xp, trial, weighted_probs * picked, self.n_trials)
            else:
                part = xp.sum(pi * log_s) - xp.sum(weighted_probs * picked)
            pi_flat = xp.reshape(xp.broadcast_to(pi, s.shape), (-1,))[rows]
            q = e_in / xp.reshape(safe_in, (-1,))[rows]
            out = xp.reshape(s_out / s, (-1,))[rows]
            L *= pi / s
            flat[flat_index] = (pi_flat * q - weighted_probs) - pi_flat * q * out
            loss = part if sums is None else loss + part
            sums = self.products.table_sums(L, start, sums)
        return loss, (self.products.image_of(sums),)


def ntp_cross_entropy(W, contexts, context_weights, next_token_probs):
    """The NTP loss (eq. (2)) at ``W`` on aggregated data (NumPy)."""
    ce = CrossEntropy(get_backend(), np.asarray(contexts, float),
                       np.asarray(context_weights, float), next_token_probs)
    return float(ce((np.asarray(W, float),))[0])


def next_token_targets(y, n, vocabulary=None):
    """``(classes, Y)``: the vocabulary and an ``(n, V)`` sparse next-token matrix.

    ``y`` holds next tokens (n,) or soft labels (n, V) (non-negative rows);
    ``vocabulary`` is ``None`` (the labels seen, or the columns of soft
    labels), an int ``V`` (tokens ``0..V-1``) or an array of tokens.
    """
    y_arr = np.asarray(y) if not sp.issparse(y) else y
    soft = sp.issparse(y_arr) or (y_arr.ndim == 2 and y_arr.shape[1] > 1)
    if soft:
        Y = sp.csr_matrix(y_arr, dtype=float)
        if Y.shape[0] != n:
            raise ValueError(
                f"y has {Y.shape[0]} rows but X has {n} samples."
            )
        data = Y.data
        if not np.all(np.isfinite(data)):
            raise ValueError("soft labels y contain NaN or infinity.")
        if np.any(data < 0):
            raise ValueError("soft labels y must be non-negative.")
        if np.any(np.asarray(Y.sum(axis=1)).ravel() <= 0):
            raise ValueError(
                "every row of soft labels y needs a positive entry (a row sums to 0)."
            )
        V = Y.shape[1]
        if vocabulary is None:
            classes = np.arange(V)
        else:
            classes = vocabulary_array(vocabulary)
            if classes.shape[0] != V:
                raise ValueError(
                    f"soft labels have {V} columns but the vocabulary has "
                    f"{classes.shape[0]} tokens."
                )
        if V < 2:
            raise ValueError("soft labels need at least 2 columns (tokens).")
        return classes, Y
    y_arr = y_arr.ravel() if y_arr.ndim == 2 else y_arr
    check_next_tokens(y_arr)
    if vocabulary is None:
        classes, idx = np.unique(y_arr, return_inverse=True)
        if classes.shape[0] < 2:
            raise ValueError(
                "The decoder needs at least 2 classes (next tokens) in y "
                f"when vocabulary=None; got 1 class: {classes[0]!r}. Pass "
                "vocabulary=V to name the other tokens."
            )
    else:
        classes = vocabulary_array(vocabulary)
        idx = np.searchsorted(classes, y_arr)
        idx = np.clip(idx, 0, classes.shape[0] - 1)
        bad = classes[idx] != y_arr
        if bad.any():
            raise ValueError(
                f"labels outside the vocabulary: {np.unique(y_arr[bad])[:10]!r}."
            )
    Y = sp.csr_matrix((np.ones(n), (np.arange(n), idx.ravel())),
                      shape=(n, classes.shape[0]))
    return classes, Y


#: scikit-learn's warning that ``y`` may be a regression target; many distinct next tokens
#: (more than half the samples) is what NTP data look like, not a mistake of the user
_MANY_CLASSES = "The number of unique classes is greater than 50% of the number of samples"


def check_next_tokens(y):
    """Check next tokens ``y`` (1-D) as classification targets, NaN and infinity first.

    A NaN or an infinity raises scikit-learn's own ``ValueError`` ("Input y
    contains NaN.") before :func:`~sklearn.utils.multiclass.type_of_target`
    casts ``y`` to integers (NumPy's "invalid value encountered in cast"
    would be printed first).  scikit-learn's warning that more than half
    of the samples have distinct labels is not raised: many distinct next
    tokens is normal for NTP data.

    Parameters
    ----------
    y : ndarray of shape (n,)
        The next tokens.

    Raises
    ------
    ValueError
        ``y`` holds NaN or infinity, or is not a classification target.
    """
    if y.dtype.kind in "fc":
        assert_all_finite(y, input_name="y")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_MANY_CLASSES, category=UserWarning)
        check_classification_targets(y)


def vocabulary_array(vocabulary):
    """The sorted tokens of a ``vocabulary`` parameter (an int ``V`` or tokens)."""
    if isinstance(vocabulary, Real) and not isinstance(vocabulary, bool):
        if int(vocabulary) != vocabulary:
            raise ValueError("vocabulary must be an integer number of tokens.")
        return np.arange(int(vocabulary))
    classes = np.unique(np.asarray(vocabulary))
    if classes.shape[0] < 2:
        raise ValueError("the vocabulary needs at least 2 tokens.")
    return classes


def ntp_logit_gaps(contexts, next_token_probs, *decoders):
    """Per context and decoder: the smallest in-support logit minus the largest other.

    Computed in row chunks of the logits (:func:`skntp._backend.row_chunks`),
    so memory stays bounded at any vocabulary; ``+inf`` for a context whose
    support is the whole vocabulary.

    Parameters
    ----------
    contexts : ndarray of shape (m, d)
    next_token_probs : sparse matrix of shape (m, V)
    *decoders : ndarrays of shape (V, d)

    Returns
    -------
    list of ndarray of shape (m,), one per decoder
    """
    m, V = next_token_probs.shape
    out = [np.empty(m) for _ in decoders]
    for start, stop in row_chunks(m, V):
        support = next_token_probs[start:stop].toarray() > 0
        for gaps, W in zip(out, decoders):
            L = contexts[start:stop] @ W.T
            gaps[start:stop] = (np.where(support, L, np.inf).min(axis=1)
                                - np.where(support, -np.inf, L).max(axis=1))
    return out


def next_token_data(estimator, X, y, sample_weight=None):
    """Validate ``(X, y, sample_weight)`` of an NTP estimator and aggregate its contexts.

    Shared by the decoder and the embeddings estimators: ``X`` checked (and
    ``n_features_in_`` set) by :func:`~sklearn.utils.validation.validate_data`, ``y``
    as next tokens or soft labels over ``estimator.vocabulary``, the distinct
    contexts aggregated (:func:`aggregate_contexts`).

    Returns
    -------
    dict
        ``classes``, ``contexts`` (m, d), ``weights`` (m,), ``probs`` (sparse
        (m, V)) and ``entropy``, the entropy lower bound of the loss (eq. (2)).
    """
    # (+ 0.0: a -0.0 entry is the same context as 0.0)
    reject_token_sequences(X, estimator)
    X = validate_data(estimator, X, reset=True, dtype=np.float64, ensure_min_samples=1) + 0.0
    n = X.shape[0]
    y = y if sp.issparse(y) else np.asarray(y)
    if not sp.issparse(y) and not (y.ndim == 2 and y.shape[1] > 1):
        y = column_or_1d(y, warn=True)
    if y.shape[0] != n:
        raise ValueError(f"X has {n} samples but y has {y.shape[0]}.")
    classes, Y = next_token_targets(y, n, estimator.vocabulary)
    sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                         ensure_non_negative=True)
    contexts, weights, probs, _ = aggregate_contexts(X, Y, sample_weight)
    row = np.repeat(np.arange(probs.shape[0]), np.diff(probs.indptr))
    entropy = float(-np.sum(weights[row] * probs.data * np.log(probs.data)))
    return {"classes": classes, "contexts": contexts, "weights": weights, "probs": probs,
            "entropy": entropy}
