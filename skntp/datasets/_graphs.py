"""Token-priority-graph data of the self-attention NTP paper (App. D)."""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_random_state

from ..losses.self_attention import random_unit_embeddings

__all__ = ["make_token_priority_data", "random_unit_embeddings"]


def make_token_priority_data(n_tokens=8, embedding_dim=8, n_samples=4, seq_len=6, *,
                             acyclic=True, random_state=None):
    """Random next-token data with token-priority graphs (App. D of the self-attention paper).

    1. Embeddings ``E`` (``K x d``) drawn uniformly on the unit sphere.
    2. Each sequence holds ``seq_len`` distinct tokens drawn without
       replacement from the ``K`` tokens.
    3. Labels: with ``acyclic=True``, a random priority order (a permutation
       of the tokens) is drawn once and the label is the highest-priority
       token of the sequence, so every graph is a DAG (Def. 2) and every
       label is in its sequence (Assumption 2).  With ``acyclic=False`` the
       label is drawn uniformly from the ``K`` tokens and, when absent from
       the sequence, replaced by a token of the sequence drawn uniformly, so
       the labels stay realizable and cycles appear in the graphs.

    The paper's settings: Fig. 3 ``K = d = 8, n = 4, T = 6, acyclic``; Fig. 4
    ``K = 6, d = 8, n = 6, T = 4, acyclic=False``.

    Parameters
    ----------
    n_tokens : int, default=8
        Vocabulary size ``K``.
    embedding_dim : int, default=8
        Embedding dimension ``d``.
    n_samples : int, default=4
    seq_len : int, default=6
        Tokens per sequence ``T`` (``<= K``).
    acyclic : bool, default=True
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape (n_samples, seq_len), int
        Token ids.
    y : ndarray of shape (n_samples,), int
        Next-token ids.
    embeddings : ndarray of shape (n_tokens, embedding_dim)
    """
    K, T, n = int(n_tokens), int(seq_len), int(n_samples)
    if K < 2 or embedding_dim < 1 or n < 1 or T < 1:
        raise ValueError("need n_tokens >= 2 and embedding_dim, n_samples, seq_len >= 1.")
    if T > K:
        raise ValueError(
            f"seq_len={T} > n_tokens={K}: tokens are drawn without replacement."
        )
    rng = check_random_state(random_state)
    E = random_unit_embeddings(K, embedding_dim, rng)
    X = np.argsort(rng.random_sample((n, K)), axis=1)[:, :T]  # without replacement
    rows = np.arange(n)
    if acyclic:
        rank = np.empty(K, dtype=np.int64)
        rank[rng.permutation(K)] = np.arange(K)  # rank[token] = priority (0 = highest)
        y = X[rows, np.argmin(rank[X], axis=1)]
    else:
        y = rng.randint(K, size=n)
        absent = ~(X == y[:, None]).any(axis=1)
        y = np.where(absent, X[rows, rng.randint(T, size=n)], y)
    return X.astype(np.int64), y.astype(np.int64), E
