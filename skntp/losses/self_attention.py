"""1-layer self-attention for next-token prediction: the model's risk and gradient.

Li, Huang, Ildiz, Rawat & Oymak, "Mechanics of next token prediction with
self-attention": the model (eq. (1)) ``y_hat = C X^T softmax(X W x_bar)``
with fixed token embeddings ``E`` and head ``C``, trained in ``W`` on the
empirical risk (ERM) with the log-loss (Sec. 5), the cross-entropy or the
squared loss (Sec. 6).  Written once over an array namespace (NumPy or torch).
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.utils.validation import check_random_state

from .._backend import check_score_scale, logsumexp, scatter_add, softmax
from .._sequences import _real
from .._warnings import user_stacklevel

__all__ = ["LOSSES", "SelfAttentionRisk", "embedding_table", "head_matrix", "identity_head",
           "random_unit_embeddings", "realizable_samples", "saturation_gaps", "stacked_risk"]

LOSSES = ("log", "ce", "squared")


def _at_top(xp, s, p, mask):
    """``p`` at the most-attended position of each row (mean over exact ties), (n, 1)."""
    top = (s == xp.max(s, axis=1, keepdims=True)) & mask
    topf = xp.astype(top, s.dtype)
    return xp.sum(topf * xp.where(top, p, 0.0 * p), axis=1, keepdims=True) / xp.sum(
        topf, axis=1, keepdims=True)


def _centered(xp, s, p, mask):
    """``p_t - sum_t' s_t' p_t'`` computed as ``(p_t - p_r) - sum_t' s_t' (p_t' - p_r)``.

    ``r`` is the most-attended position: when the softmax saturates on ``r``
    both terms are exact small numbers instead of the difference of two
    nearly equal ones, so the gradient keeps its direction at any norm.
    """
    dp = xp.where(mask, p - _at_top(xp, s, p, mask), 0.0 * p)
    return dp - xp.sum(s * dp, axis=1, keepdims=True)


class SelfAttentionRisk:
    """Empirical risk of ``y_hat = C X^T softmax(X W x_bar)`` (eq. (1), ERM) and its gradient.

    With ``a_t = e_{x_t}^T W e_k`` (``k`` the query token), ``s = softmax(a)``
    over the real tokens, ``Gamma = C E^T`` and ``gamma_t = Gamma[y, x_t]``:

    * ``"log"``: ``-log u`` with ``u = sum_t s_t gamma_t`` (Sec. 5; needs
      ``gamma >= 0``); for ``C E^T = I`` (Assumption 4) ``u`` is the attention
      mass on the label and the loss is computed as ``-log1p(-r)`` with ``r``
      the mass on the other tokens, accurate at any norm;
    * ``"squared"``: ``(1 - u)^2`` (Sec. 6, Fig. 5);
    * ``"ce"``: ``-log softmax(y_hat)_y`` with ``y_hat = Gamma[:, x] s`` (Fig. 6).

    The gradient is ``E^T D E`` with ``D[x, k] = sum dloss/da_t`` over the
    positions holding token ``x`` in sequences with query ``k``: one gather,
    one scatter-add and two matrix products per call.

    A leading *trial* axis runs independent problems at once (batched trials,
    :func:`skntp.sweeps.fit_ntp_trials`): ``embeddings`` (B, K, d), ``gamma``
    (B, K, K), ``ids`` and ``mask`` (B, n, T), ``query``, ``labels`` and
    ``sample_weight`` (B, n) and ``W`` (B, d, d).  The sequences of all trials
    are then the rows of one table (every operation above is per row but the
    gather, the scatter-add and the products, which index by trial); the loss
    is the vector of the B per-trial risks and the gradient stacks theirs.

    Parameters
    ----------
    be : Backend
    embeddings : ndarray of shape (K, d) or (B, K, d)
    gamma : ndarray of shape (K, K) or (B, K, K)
        ``C E^T``.
    ids, mask : ndarrays of shape (n, T) or (B, n, T)
        Token ids and real-token mask.
    query : ndarray of shape (n,) or (B, n)
        Query (last) token of each sequence.
    labels : ndarray of shape (n,) or (B, n)
    loss : {"log", "ce", "squared"}
    sample_weight : ndarray of shape (n,) or (B, n), optional
        Defaults to ``1/n`` each (the ``1/n`` of ERM).
    """

    def __init__(self, be, embeddings, gamma, ids, mask, query, labels, loss="log",
                 sample_weight=None):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")
        self.xp = be.xp
        self.be, self.loss = be, loss
        embeddings, gamma = np.asarray(embeddings), np.asarray(gamma)
        self.batched = embeddings.ndim == 3
        B = embeddings.shape[0] if self.batched else 1
        K, d = embeddings.shape[-2:]
        ids, mask = np.asarray(ids, np.int64), np.asarray(mask, bool)
        n, T = ids.shape[-2:]
        # the trials' sequences as the rows of one table, each row knowing its trial
        ids, mask = ids.reshape(B * n, T), mask.reshape(B * n, T)
        query = np.asarray(query, np.int64).reshape(B * n)
        labels = np.asarray(labels, np.int64).reshape(B * n)
        trial = np.repeat(np.arange(B), n)
        self.K, self.n_trials, self.rows = K, B, n
        w = np.full(B * n, 1.0 / max(n, 1)) if sample_weight is None else np.asarray(
            sample_weight, float).reshape(B * n)
        gamma = gamma.reshape(B, K, K)
        self.E = be.asarray(embeddings)
        # E W E^T forms E W first: K d^2 multiply-adds, then K^2 d (threads: blas_threads)
        self.work_size = B * K * d * max(K, d) + int(np.size(ids))
        self.Et = be.asarray(np.ascontiguousarray(np.swapaxes(embeddings, -1, -2)))
        self.flat = be.asindex(np.where(mask, (trial[:, None] * K + ids) * K + query[:, None],
                                        0))
        self.shape = ids.shape
        self.mask = be.asbool(mask)
        self.neg_inf = be.asarray(np.where(mask, 0.0, -np.inf))
        self.w = be.asarray(w[:, None])
        g = np.where(mask, gamma[trial[:, None], labels[:, None], ids], 0.0)
        binary = np.all(((g == 0) | (g == 1)).reshape(B, -1), axis=1)
        if loss == "log" and binary.any() and not binary.all():
            have, lack = np.flatnonzero(binary)[:5].tolist(), np.flatnonzero(~binary)[:5].tolist()
            raise ValueError(
                "the trials of one batched run with loss='log' need heads of one kind: "
                "C E^T with entries in {0, 1} (the identity head) in every trial or in "
                f"none (the risk takes one form for all); trials {have} have one, trials "
                f"{lack} not.")
        self.binary = bool(binary.all())
        self.gamma = be.asarray(g)
        if loss == "log":
            if np.any(g[mask] < 0):
                raise ValueError(
                    "loss='log' needs c_y^T e_x >= 0 for every token of every sequence "
                    "(u = c_y^T f(X) must stay positive); use loss='ce' or 'squared' "
                    "with this head."
                )
            if not (g > 0).any(axis=1).all():
                raise ValueError(
                    "loss='log' is infinite on a sample whose sequence has no token x "
                    "with c_y^T e_x > 0 (the label is not in the sequence)."
                )
            self.log_gamma = be.asarray(
                np.where(mask & (g > 0), np.log(np.where(g > 0, g, 1.0)), -np.inf))
            self.pos = be.asarray((g > 0).astype(float))
        if loss == "ce":
            # gamma_cols[i, t] = Gamma[:, x_t] of row i's trial, (B n, T, K)
            self.gamma_cols = be.asarray(np.swapaxes(gamma, 1, 2)[trial[:, None], ids])
            self.onehot = be.asarray(np.eye(K)[labels])

    def scores(self, W):
        """Attention logits ``a`` of shape (n, T) (``-inf`` at padding); (B n, T) with a
        trial axis."""
        xp = self.xp
        G = self.E @ W @ self.Et  # G[b, x, k] = e_x^T W_b e_k
        a = xp.reshape(xp.take(xp.reshape(G, (-1,)), xp.reshape(self.flat, (-1,))),
                       self.shape)
        return a + self.neg_inf

    def __call__(self, params):
        xp = self.xp
        W = params[0]
        a = self.scores(W)
        s = softmax(xp, a, axis=1)
        if self.loss == "log":
            if self.binary:
                r = xp.sum(s * (1.0 - self.pos), axis=1, keepdims=True)
                lse_all = logsumexp(xp, a, axis=1)
                lse_y = logsumexp(xp, a + self.log_gamma, axis=1)
                q = xp.exp(a + self.log_gamma - lse_y)
                small = r < 0.5
                per = xp.where(small, -xp.log1p(-xp.where(small, r, 0.0 * r)),
                               lse_all - lse_y)
                delta = s * (1.0 - self.pos) - q * r
            else:
                lse_all = logsumexp(xp, a, axis=1)
                lse_y = logsumexp(xp, a + self.log_gamma, axis=1)
                per = lse_all - lse_y
                # s_t - q_t = s_t (u - gamma_t) / u, with u - gamma_t centred precisely
                u = xp.exp(lse_y - lse_all)
                delta = -s * _centered(xp, s, self.gamma, self.mask) / u
        elif self.loss == "squared":
            # gamma_t - u and 1 - u measured from the most-attended position r, so
            # that a saturated softmax does not lose them to cancellation.
            c = _centered(xp, s, self.gamma, self.mask)  # gamma_t - u
            g_r = _at_top(xp, s, self.gamma, self.mask)
            one_minus_u = (1.0 - g_r) - xp.sum(s * (self.gamma - g_r), axis=1,
                                               keepdims=True)
            per = one_minus_u**2
            delta = -2.0 * one_minus_u * s * c
        else:
            yhat = xp.sum(s[:, :, None] * self.gamma_cols, axis=1)  # (n, K)
            lse = logsumexp(xp, yhat, axis=1)
            per = lse - xp.sum(yhat * self.onehot, axis=1, keepdims=True)
            g = softmax(xp, yhat, axis=1) - self.onehot
            proj = xp.sum(self.gamma_cols * g[:, None, :], axis=2)  # (n, T)
            delta = s * _centered(xp, s, proj, self.mask)
        B, K = self.n_trials, self.K
        loss = (xp.sum(xp.reshape(self.w * per, (B, self.rows)), axis=1) if self.batched
                else xp.sum(self.w * per))
        delta = xp.where(self.mask, delta * self.w, 0.0 * delta)
        D = xp.reshape(scatter_add(xp, xp.reshape(self.flat, (-1,)),
                                   xp.reshape(delta, (-1,)), B * K * K),
                       (B, K, K) if self.batched else (K, K))
        return loss, (self.Et @ D @ self.E,)

    def attention(self, W):
        """Softmax attention ``s`` of shape (n, T) (or (B n, T)) at ``W``."""
        return softmax(self.xp, self.scores(W), axis=1)


def stacked_risk(be, trials):
    """One :class:`SelfAttentionRisk` with a trial axis for many problems.

    ``trials`` holds ``(embeddings, gamma, (ids, mask, query, labels), weights, loss)``
    per trial.  Each trial's sequences are padded to the largest ``n`` with
    zero-weight copies of its first sequence (a real sequence: finite risk, no
    gradient) and to the largest ``T`` with padding positions.
    """
    if len({np.shape(E) for E, *_ in trials}) != 1:
        raise ValueError("all trials need embeddings of the same shape (K, d); got "
                         f"{sorted({np.shape(E) for E, *_ in trials})}.")
    if len({loss for *_, loss in trials}) != 1:
        raise ValueError("all trials need the same loss.")
    sizes = [np.shape(seqs[0]) for _, _, seqs, _, _ in trials]
    empty = [b for b, (n, _) in enumerate(sizes) if n == 0]
    if empty:
        raise ValueError(
            f"trial {empty[0]} has no sample left to train on (none is realizable with "
            "the identity head, or every weight is 0): fit it alone, where W stays at "
            "its initialization.")
    n, T = max(n for n, _ in sizes), max(t for _, t in sizes)
    stacked = [[] for _ in range(5)]
    for _, _, (ids, mask, query, labels), w, _ in trials:
        rows = np.r_[np.arange(ids.shape[0]), np.zeros(n - ids.shape[0], int)]
        width = ((0, 0), (0, T - ids.shape[1]))
        for out, a in zip(stacked, (np.pad(ids, width)[rows], np.pad(mask, width)[rows],
                                    query[rows], labels[rows],
                                    np.r_[w, np.zeros(n - ids.shape[0])])):
            out.append(a)
    ids, mask, query, labels, w = (np.stack(a) for a in stacked)
    return SelfAttentionRisk(be, np.stack([t[0] for t in trials]),
                             np.stack([t[1] for t in trials]), ids, mask, query, labels,
                             loss=trials[0][4], sample_weight=w)


def random_unit_embeddings(n_tokens, embedding_dim, random_state=None):
    """``n_tokens`` embeddings drawn uniformly on the unit sphere of ``R^d`` (App. D, step 1)."""
    rng = check_random_state(random_state)
    E = rng.standard_normal((int(n_tokens), int(embedding_dim)))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


def identity_head(E):
    """``C = (E E^T)^{-1} E``: the minimum-norm head with ``C E^T = I_K`` (Assumption 4)."""
    K, d = E.shape
    if K > d:
        raise ValueError(
            f"head='identity' needs C E^T = I_K (Assumption 4), which is impossible with "
            f"K={K} tokens embedded in d={d} < K dimensions (E E^T is singular). Use "
            f"embedding_dim >= n_tokens, or pass head='embeddings' or a (K, d) head array."
        )
    s = np.linalg.svd(E, compute_uv=False)
    if s[-1] <= 1e-10 * s[0]:
        raise ValueError(
            "head='identity' needs C E^T = I_K (Assumption 4), which is impossible: the "
            "token embeddings are linearly dependent (E has rank < K)."
        )
    return np.linalg.solve(E @ E.T, E)


def embedding_table(embeddings, n_tokens, embedding_dim, token_ids, rng):
    """The token embeddings ``E`` (K, d): given, or drawn on the unit sphere (App. D).

    Drawn without ``n_tokens``, the vocabulary is ``0..max id``; a warning says
    when that is far larger than the ids that occur (a stray large id makes every
    product ``K x d`` large).
    """
    if embeddings is not None:
        E = _real(embeddings, "embeddings")
        if E.ndim != 2 or E.shape[0] < 2 or E.shape[1] < 1:
            raise ValueError(
                f"embeddings must be a 2-D (K, d) array with K >= 2 tokens, got shape "
                f"{E.shape}.")
        if not np.all(np.isfinite(E)):
            raise ValueError("embeddings contain NaN or infinity.")
        if n_tokens is not None and n_tokens != E.shape[0]:
            raise ValueError(f"n_tokens={n_tokens} but embeddings has {E.shape[0]} rows.")
        return E
    K = int(token_ids.max()) + 1 if n_tokens is None else n_tokens
    distinct = np.unique(token_ids).size
    if n_tokens is None and K > max(4 * distinct, distinct + 100):
        warnings.warn(
            f"the largest token id is {K - 1}, so the vocabulary has K = {K} tokens (and "
            f"the embeddings K x d entries), but only {distinct} distinct ids occur: pass "
            "n_tokens (or embeddings), or re-index the ids (skntp.datasets.TokenEncoder).",
            UserWarning, stacklevel=user_stacklevel())
    if K < 2:
        raise ValueError(f"the vocabulary needs at least 2 tokens; got n_tokens={K}. Pass "
                         "n_tokens or embeddings.")
    return random_unit_embeddings(K, K if embedding_dim is None else embedding_dim, rng)


def head_matrix(head, E):
    """``(C, Gamma = C E^T, identity)`` for a head parameter (Assumptions 3-4)."""
    K, d = E.shape
    scale = float(np.max(np.abs(E)))
    if scale == 0:
        raise ValueError(
            "the embeddings are all zero: every attention score e_x^T W e_k is 0 for every "
            "W, so attention cannot prefer any token; pass nonzero embeddings.")
    # (a Python float: inf or 0.0 past float64's range, no warning)
    check_score_scale(scale * scale, f"the embeddings have entries of magnitude {scale:.3g}")
    if isinstance(head, str):
        if head == "identity":
            return identity_head(E), np.eye(K), True
        C = E.copy()
    else:
        C = _real(head, "head")
        if C.shape != (K, d):
            raise ValueError(f"head must have shape (K, d) = {(K, d)}, got {C.shape}.")
        if not np.all(np.isfinite(C)):
            raise ValueError("head contains NaN or infinity.")
    gamma = C @ E.T
    if np.any(np.argmax(gamma, axis=1) != np.arange(K)):
        warnings.warn(
            "the head violates Assumption 3 (argmax_k c_y^T e_k = y for every token "
            "y): attention cannot reach the minimal risk by selecting the label.",
            UserWarning, stacklevel=user_stacklevel())
    return C, gamma, False


def saturation_gaps(risk, inside, mask, *weights):
    """Per sequence and weight ``W``: the smallest score inside the label's SCC minus the
    largest outside it (``svm_radius="auto"``); sequences without an outside token are
    left out."""
    outside = mask & ~inside
    has = outside.any(axis=1)
    out = []
    for W in weights:
        a = risk.scores(W)
        out.append((np.where(inside, a, np.inf).min(axis=1)
                    - np.where(outside, a, -np.inf).max(axis=1))[has])
    return out


def realizable_samples(ids, mask, y, identity):
    """The samples whose label occurs in their sequence (Assumption 2), with a warning
    about the others (left out of the loss with the identity head, which gives them no
    gradient)."""
    realizable = ((ids == y[:, None]) & mask).any(axis=1)
    if not realizable.all():
        bad = np.flatnonzero(~realizable)
        tail = ("With head='identity' (C E^T = I) their prediction y_hat_y is 0 for every W, "
                "so they carry no gradient; they are left out of the loss and the "
                "token-priority graphs." + (" No sample is left: W stays at its "
                                             "initialization." if not realizable.any()
                                             else "")
                if identity else "The theory's limits do not describe them.")
        warnings.warn(f"{bad.size} sample(s) (e.g. {bad[:5].tolist()}) are not realizable: "
                      "the label does not occur in the sequence (Assumption 2). " + tail,
                      UserWarning, stacklevel=user_stacklevel())
    return realizable
