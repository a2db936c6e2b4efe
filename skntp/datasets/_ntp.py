"""NTP data of Thrampoulidis (2024): the App. B.2 / A.2 recipe, the 2-D example of
Fig. 1/2, and next-token data from token sequences (App. D)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted, check_random_state

from ._embedder import ContextEmbedder

__all__ = ["make_ntp_2d_example", "make_ntp_data", "ntp_from_sequences"]


def make_ntp_data(
    n_samples=5000,
    n_contexts=50,
    n_features=60,
    n_tokens=10,
    support_size=6,
    *,
    concentration=1.0,
    return_params=False,
    random_state=None,
):
    """Synthetic NTP data: ``n_samples`` sequences over ``n_contexts`` distinct contexts.

    The recipe of the NTP paper's overparameterized experiment (App. B.2,
    Fig. 3-5: ``n = 5000``, ``m = 50``, ``d = 60``, ``V = 10``, ``|S_j| = 6``;
    entropy about 1.445 nats).  Each distinct context gets a Gaussian
    embedding ``h_j ~ N(0, I_d)``, a support ``S_j`` drawn uniformly
    without replacement and probabilities ``p_j ~ Dirichlet(concentration)``
    on it.  Each sample picks a context and then its next token from
    ``p_j``; every context appears, and every token of its support follows it
    at least once, so the *empirical* supports are exactly ``S_j``.

    Parameters
    ----------
    n_samples : int, default=5000
    n_contexts : int, default=50
    n_features : int, default=60
    n_tokens : int, default=10
    support_size : int or (int, int), default=6
        Support size of every context, or an inclusive range drawn per context.
    concentration : float, default=1.0
        Dirichlet concentration of the next-token probabilities.
    return_params : bool, default=False
        Also return a :class:`~sklearn.utils.Bunch` with the population
        ``embeddings`` (m, d), ``probs`` (m, V) and ``support`` (m, V).
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        Context embedding of every sample (rows repeat).
    y : ndarray of shape (n_samples,)
        Next token of every sample.
    params : Bunch, only if ``return_params``
    """
    rng = check_random_state(random_state)
    if np.ndim(support_size) == 0:
        sizes = np.full(n_contexts, int(support_size))
    else:
        lo, hi = support_size
        sizes = rng.randint(int(lo), int(hi) + 1, size=n_contexts)
    if sizes.min() < 1 or sizes.max() > n_tokens:
        raise ValueError("support_size must lie in [1, n_tokens].")
    if n_samples < sizes.sum():
        raise ValueError(
            f"n_samples={n_samples} is too small: every context's support must "
            f"appear, which takes {int(sizes.sum())} samples."
        )
    H = rng.standard_normal((n_contexts, n_features))
    probs = np.zeros((n_contexts, n_tokens))
    for j, s in enumerate(sizes):
        support = rng.choice(n_tokens, size=s, replace=False)
        probs[j, support] = rng.dirichlet(np.full(s, float(concentration)))
    # Every (context, support token) once, the rest sampled from pi x p.
    ctx = np.repeat(np.arange(n_contexts), sizes)
    tok = np.concatenate([np.flatnonzero(probs[j]) for j in range(n_contexts)])
    extra = n_samples - ctx.size
    ctx_extra = rng.randint(0, n_contexts, size=extra)
    cum = np.cumsum(probs[ctx_extra], axis=1)
    u = rng.random_sample(extra)[:, None]
    tok_extra = np.minimum((u > cum).sum(axis=1), n_tokens - 1)
    ctx = np.concatenate([ctx, ctx_extra])
    tok = np.concatenate([tok, tok_extra])
    order = rng.permutation(n_samples)
    X, y = H[ctx[order]], tok[order]
    if return_params:
        return X, y, Bunch(embeddings=H, probs=probs, support=probs > 0)
    return X, y


def make_ntp_2d_example(n_samples=None, *, probs=None):
    """The 2-D example of the NTP paper's Fig. 1/2: ``d = 2``, ``m = 3``, ``V = 5``.

    Three contexts A, B, C on the unit circle, each followed by three of five
    words (0-based here).  As in the figure, words 0 and 4 follow the same
    contexts (A and B), so their ``W^mm`` rows coincide while their ``W*``
    rows differ; word 2 follows A only, and the rest follow two contexts each.

    Parameters
    ----------
    n_samples : None or int, default=None
        ``None`` returns the aggregated data as soft labels (one row per
        context, ``sample_weight`` the context weights); an int returns that
        many samples with hard labels drawn in proportion (rounded).
    probs : array-like of shape (3, 5), optional
        Next-token probabilities (rows normalized); the default has supports
        A = {0, 2, 4}, B = {0, 1, 4}, C = {1, 3, 2}.

    Returns
    -------
    X : ndarray
    y : ndarray
        Soft labels (3, 5) if ``n_samples`` is None, else labels (n,).
    sample_weight : ndarray
        Context weights (uniform) if ``n_samples`` is None, else ones.
    """
    angles = np.deg2rad([90.0, 210.0, 330.0])
    H = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    if probs is None:
        probs = np.array(
            [
                [0.5, 0.0, 0.2, 0.0, 0.3],
                [0.2, 0.3, 0.0, 0.0, 0.5],
                [0.0, 0.4, 0.25, 0.35, 0.0],
            ]
        )
    probs = np.asarray(probs, dtype=float)
    probs = probs / probs.sum(axis=1, keepdims=True)
    if n_samples is None:
        return H, probs, np.full(3, 1.0 / 3)
    counts = np.rint(probs * (n_samples / 3)).astype(int)
    ctx, tok = np.nonzero(counts)
    reps = counts[ctx, tok]
    X = np.repeat(H[ctx], reps, axis=0)
    y = np.repeat(tok, reps)
    return X, y, np.ones(y.shape[0])


def ntp_from_sequences(sequences, embed=None, *, context_size=None, pooling=None,
                       n_features=None, random_state=None):
    """Turn token sequences into NTP data over all prefixes (App. D).

    Every prefix ``z_{1:t}`` (``t = 1..T-1``) of every sequence is a context
    and ``z_{t+1}`` its next token; repeated prefixes become one distinct
    context when the decoder aggregates them.  Raw text is first encoded by
    :class:`TokenEncoder` (words to integer ids).

    To fit a model on one text and predict on another, embed both with one
    :class:`ContextEmbedder`: a context's vector then depends on its tokens
    only, so a context of both texts gets the same vector in both.  The
    string options ``"gaussian"`` and ``"onehot"`` number the distinct
    contexts *of the given text* (by first appearance) and give every one
    its own vector, which makes the data NTP-separable, but the same context
    in another text (or in another call) gets another vector.

    Parameters
    ----------
    sequences : iterable of sequences of hashable tokens
        E.g. the id arrays of :meth:`TokenEncoder.transform`.
    embed : None, ContextEmbedder, "gaussian", "onehot", callable, mapping or \
ndarray of shape (V, d)
        How a context is given to the model:

        * ``None``: the prefixes themselves, as 1-D integer arrays (the
          input of :class:`~skntp.NTPAttentionClassifier`);
        * a :class:`ContextEmbedder`: its ``transform`` of the prefixes, by
          their tokens; an unfitted one is first fitted on them, in place, so
          that the same object then embeds new text
          (``ntp_from_sequences(new_ids, embedder)``);
        * ``"gaussian"``: an independent ``N(0, I/d)`` vector per distinct
          context of this text, ``d = n_features`` (default ``m + 8`` for
          ``m`` distinct contexts, so ``d > m`` and the data are, almost
          surely, NTP-separable and NTP_H-compatible: the overparameterized
          regime of the NTP paper's Sec. 3);
        * ``"onehot"``: the ``m`` standard basis vectors (``d = m``);
        * a callable ``embed(prefix_tuple) -> (d,)``, or a mapping from prefix
          tuples to vectors;
        * a token-embedding table indexed by integer tokens, in which case a
          prefix is embedded by ``pooling`` of its tokens' rows (as
          ``ContextEmbedder(table, pooling=pooling, context_size=context_size)``
          does).
    context_size : int, optional
        Keep only the last ``context_size`` tokens of each prefix (k-gram
        contexts); ``None`` keeps the whole prefix.  A :class:`ContextEmbedder`
        then reads the last ``context_size`` tokens of what is kept.
    pooling : {"last", "mean", "concat"}, optional
        How a token table embeds a prefix: the last token (the default), the
        mean of its tokens, or the concatenation of the last ``context_size``
        tokens (left-padded with zeros; needs ``context_size``).  A
        :class:`ContextEmbedder` has its own ``pooling``.
    n_features : int, optional
        ``d`` of ``embed="gaussian"``: a positive integer.  A
        :class:`ContextEmbedder` has its own ``n_features``.
    random_state : int, RandomState instance or None
        Seeds ``embed="gaussian"`` (distinct contexts are drawn in order of
        first appearance).  A :class:`ContextEmbedder` has its own
        ``random_state``.

    Returns
    -------
    X : ndarray of shape (n_prefixes, d), or list of ndarray of int
        Context embeddings; the prefixes when ``embed=None``.
    y : ndarray of shape (n_prefixes,)
        Next tokens.

    Raises
    ------
    ValueError
        On words instead of ids, a ``context_size`` or ``n_features`` that is
        not a positive integer, sequences too short to hold a context, and
        ``pooling``, ``n_features`` or ``random_state`` given with a
        :class:`ContextEmbedder` (they are its parameters).

    Examples
    --------
    >>> from skntp.datasets import ContextEmbedder, TokenEncoder, ntp_from_sequences
    >>> enc = TokenEncoder()
    >>> ids = enc.fit_transform(["the cat sat", "the dog sat"])
    >>> X, y = ntp_from_sequences(ids, "onehot", context_size=1)
    >>> X.shape, enc.inverse_transform(y).tolist()
    ((4, 3), ['cat', 'sat', 'dog', 'sat'])
    >>> emb = ContextEmbedder("onehot", context_size=1, n_tokens=enc.n_tokens_)
    >>> X, y = ntp_from_sequences(ids, emb)          # fits emb
    >>> enc.vocabulary_["the"]
    1
    >>> ntp_from_sequences(enc.transform(["the dog"]), emb)[0].tolist()  # new text
    [[0.0, 1.0, 0.0, 0.0]]
    """
    if not _positive_integer(context_size):
        raise ValueError(f"context_size must be None or an integer >= 1 (tokens per "
                         f"context), got {context_size!r}.")
    if not _positive_integer(n_features):
        raise ValueError(f"n_features must be None or a positive integer (the dimension d "
                         f"of embed='gaussian'), got {n_features!r}; it is not rounded.")
    if isinstance(embed, ContextEmbedder):
        given = [name for name, value in (("pooling", pooling), ("n_features", n_features),
                                          ("random_state", random_state))
                 if value is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} set the embedding of embed='gaussian' or of a token "
                "table; with a ContextEmbedder they are its own parameters: "
                "ContextEmbedder(pooling=..., n_features=..., random_state=...).")
    prefixes, targets = [], []
    for seq in sequences:
        seq = list(seq)
        for t in range(1, len(seq)):
            start = 0 if context_size is None else max(0, t - context_size)
            prefixes.append(tuple(seq[start:t]))
            targets.append(seq[t])
    if not prefixes:
        raise ValueError("no sequence has two or more tokens; there is nothing to predict.")
    y = np.asarray(targets)
    if embed is None:
        return [np.asarray(p, dtype=np.int64) for p in _integer_prefixes(prefixes)], y
    if isinstance(embed, ContextEmbedder):
        contexts = _integer_prefixes(prefixes)
        try:
            check_is_fitted(embed)
        except NotFittedError:
            embed.fit(contexts)
        return embed.transform(contexts), y
    if isinstance(embed, str):
        distinct = list(dict.fromkeys(prefixes))
        m = len(distinct)
        if embed == "onehot":
            rows = np.eye(m)
        elif embed == "gaussian":
            d = m + 8 if n_features is None else int(n_features)
            rows = check_random_state(random_state).standard_normal((m, d)) / np.sqrt(d)
        else:
            raise ValueError(
                f"embed must be None, a ContextEmbedder, 'gaussian', 'onehot', a callable, "
                f"a mapping or an array; got {embed!r}."
            )
        index = {p: j for j, p in enumerate(distinct)}
        return rows[[index[p] for p in prefixes]], y
    if callable(embed) and not isinstance(embed, np.ndarray):
        fn: Callable = embed
    elif isinstance(embed, Mapping):
        def fn(prefix):
            try:
                return embed[prefix]
            except KeyError:
                raise ValueError(f"the embedding table has no entry for {prefix!r}.") from None
    else:
        table = np.asarray(embed, dtype=float)
        if table.ndim != 2:
            raise ValueError("a token-embedding table must be 2-D (V, d).")
        pooling = "last" if pooling is None else pooling
        if pooling not in ("last", "mean", "concat"):
            raise ValueError(f"pooling must be 'last', 'mean' or 'concat', got {pooling!r}.")
        if pooling == "concat" and context_size is None:
            raise ValueError("pooling='concat' needs context_size.")
        embedder = ContextEmbedder(table, pooling=pooling, context_size=context_size)
        return embedder.fit_transform(_integer_prefixes(prefixes)), y
    cache = {}
    X = np.stack([cache.setdefault(p, np.asarray(fn(p), dtype=float)) for p in prefixes])
    return X, y


def _positive_integer(value):
    """``value`` is None or an integer >= 1 (not a bool, not a float such as 2.5)."""
    return value is None or (not isinstance(value, (bool, np.bool_))
                             and isinstance(value, (int, np.integer)) and value >= 1)


def _integer_prefixes(prefixes):
    """The prefixes as tuples of int, or a ValueError naming the encoder."""
    out = []
    for p in prefixes:
        arr = np.asarray(p)
        if arr.dtype.kind not in "iu":
            raise ValueError(
                f"the tokens must be integer ids here, got {p[:5]!r}. Encode words first: "
                "ids = skntp.datasets.TokenEncoder().fit_transform(sentences)."
            )
        if arr.size and arr.min() < 0:
            raise ValueError(f"token ids must be non-negative, got {p[:5]!r}.")
        out.append(tuple(int(t) for t in p))
    return out
