"""Contexts to vectors by their tokens: :class:`ContextEmbedder` (exported by
:mod:`skntp.datasets`)."""

from __future__ import annotations

from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, check_random_state

__all__ = ["ContextEmbedder"]

#: Default width of a ``"gaussian"`` token table: the number of tokens, at most this.
MAX_DEFAULT_FEATURES = 256
#: Contexts x tokens x features gathered at once by ``pooling="mean"`` (memory bound).
_CHUNK = 1 << 22

_TEXT = ("ContextEmbedder embeds contexts given as token ids, not words; encode the words "
         "first: ids = skntp.datasets.TokenEncoder().fit_transform(sentences)")


class ContextEmbedder(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Embed contexts (sequences of token ids) by their content, scikit-learn style.

    A context is a sequence of token ids, e.g. a prefix of a sentence encoded
    by :class:`TokenEncoder`.  Its vector is a pooling of the rows of a token
    table, one row per token id, so it depends on *which* tokens the context
    holds and never on the order in which contexts appear in a text: the same
    fitted object embeds the training text and any new text, and a context
    that occurs in both gets the same vector in both.  This is the embedding
    to use to fit :class:`~skntp.NTPDecoderClassifier` on one text and call
    its ``predict_proba`` on another (``ntp_from_sequences(ids, embedder)``
    for every prefix of every sequence).

    ``fit`` builds the token table (``embeddings_``, ``n_tokens_`` rows) and
    the vector of unknown tokens; ``transform`` only reads them.

    Parameters
    ----------
    token_embeddings : "gaussian", "onehot", array-like of shape (V, d_tok) or callable, \
default="gaussian"
        The token table:

        * ``"gaussian"``: independent ``N(0, I/d_tok)`` rows, ``d_tok =
          n_features``, seeded by ``random_state``.  Row ``i`` depends on
          the seed and on ``d_tok`` only, not on ``V``;
        * ``"onehot"``: the ``V`` standard basis vectors (``d_tok = V``);
        * an array ``(V, d_tok)``: row ``i`` is the vector of token ``i``;
        * a callable ``ids -> vectors``, such as a trained model's embedding
          layer: called once by ``fit`` with the int64 array ``arange(V)``,
          it returns an array-like ``(V, d_tok)`` (for a torch module:
          ``lambda ids: emb(torch.as_tensor(ids)).detach().numpy()``).
          A module-level function keeps the embedder picklable.
    pooling : {"concat", "mean", "last"}, default="concat"
        How a context's token rows become one vector: the concatenation of
        its last ``context_size`` rows (oldest first; a shorter context is
        left-padded with zero rows), their mean, or the row of its last
        token.  ``"concat"`` keeps the order of the tokens, so distinct
        contexts of distinct tokens get distinct vectors; ``"mean"`` forgets
        the order and ``"last"`` all but the last token.
    context_size : int, default=None
        Read only the last ``context_size`` tokens of each context.  ``None``:
        ``"concat"`` reads as many as the longest context seen by ``fit``
        (``context_size_``), ``"mean"`` the whole context.
    n_features : int, default=None
        ``d_tok`` of ``"gaussian"``; ``None`` is ``min(V, 256)``: with
        ``d_tok >= V`` the token rows are linearly independent, as the one-hot
        rows are.  Not read by the other tables.
    n_tokens : int, default=None
        ``V``, the number of token ids ``0 .. V-1`` that have a row, for
        ``"gaussian"``, ``"onehot"`` and a callable; ``None`` is the largest
        id seen by ``fit`` plus one.  Pass the encoder's vocabulary size
        (``n_tokens=encoder.n_tokens_``) so that every word of the vocabulary
        has its row, also one that ``fit`` did not see.  An array table has
        ``V`` rows (a different ``n_tokens`` is an error).
    handle_unknown : {"error", "zeros", "random"}, default="error"
        A token id ``>= V`` (one without a row) is an error (``ValueError``,
        naming the ids), or is embedded as the zero vector, or as
        ``unknown_vector_``, one fixed random direction with the table's
        root-mean-square row norm, drawn from ``random_state``.  (A word
        outside an encoder's vocabulary is the encoder's to handle:
        ``TokenEncoder(handle_unknown="use_unknown")`` gives it the id of
        ``"<unk>"``, which has its own row.)
    random_state : int, RandomState instance or None, default=None
        Seeds the ``"gaussian"`` table and ``unknown_vector_``.

    Attributes
    ----------
    embeddings_ : ndarray of shape (V, d_tok)
        The token table.
    unknown_vector_ : ndarray of shape (d_tok,) or None
        The vector of a token without a row (``None`` with
        ``handle_unknown="error"``).
    n_tokens_ : int
        ``V``: ids ``0 .. V-1`` have a row.
    context_size_ : int or None
        The number of last tokens read (``None``: all of them).

    See Also
    --------
    skntp.datasets.TokenEncoder : Words to token ids.
    skntp.datasets.ntp_from_sequences : Contexts and next tokens of every prefix.

    Notes
    -----
    The input of ``fit`` and ``transform`` is a list of contexts, each a 1-D
    sequence of non-negative integer ids (their lengths may differ), or a
    2-D array ``(n_contexts, length)``.  Pooling is exact and canonical: the
    same context gives bit-identical vectors in every call (``"mean"`` sums
    the rows in the order of their ids), so
    :class:`~skntp.NTPDecoderClassifier` aggregates its repetitions, across
    texts too.

    Examples
    --------
    >>> from skntp.datasets import ContextEmbedder, TokenEncoder, ntp_from_sequences
    >>> enc = TokenEncoder(bos_token="<s>")
    >>> ids = enc.fit_transform(["the cat sat", "the dog sat"])
    >>> emb = ContextEmbedder(context_size=2, n_tokens=enc.n_tokens_, random_state=0)
    >>> X, y = ntp_from_sequences(ids, emb)           # fits emb, then embeds
    >>> X.shape, emb.embeddings_.shape
    ((6, 10), (5, 5))
    >>> new = ntp_from_sequences(enc.transform(["the cat"]), emb)[0]
    >>> bool((new == X[:2]).all())                    # "<s>", "<s> the": the same rows
    True
    """

    _parameter_constraints = {
        "token_embeddings": [StrOptions({"gaussian", "onehot"}), "array-like", callable],
        "pooling": [StrOptions({"concat", "mean", "last"})],
        "context_size": [Interval(Integral, 1, None, closed="left"), None],
        "n_features": [Interval(Integral, 1, None, closed="left"), None],
        "n_tokens": [Interval(Integral, 1, None, closed="left"), None],
        "handle_unknown": [StrOptions({"error", "zeros", "random"})],
        "random_state": ["random_state"],
    }

    def __init__(self, token_embeddings="gaussian", *, pooling="concat", context_size=None,
                 n_features=None, n_tokens=None, handle_unknown="error", random_state=None):
        self.token_embeddings = token_embeddings
        self.pooling = pooling
        self.context_size = context_size
        self.n_features = n_features
        self.n_tokens = n_tokens
        self.handle_unknown = handle_unknown
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Build the token table and the vector of unknown tokens.

        Parameters
        ----------
        X : list of 1-D sequences of int, or array-like of shape (n_contexts, length)
            Contexts as token ids.
        y : None
            Ignored.

        Returns
        -------
        self
        """
        for name in ("context_size", "n_features", "n_tokens"):
            if isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be None or a positive integer, not the "
                                 f"boolean {getattr(self, name)}.")
        ids = check_contexts(X)
        table = self._table(int(ids.max()) + 1)
        rng = check_random_state(self.random_state)
        direction = rng.standard_normal(table.shape[1])
        if isinstance(self.token_embeddings, str) and self.token_embeddings == "gaussian":
            # drawn after the unknown direction, row by row: row i depends on the seed
            # and d_tok only, whatever V and handle_unknown are
            table = rng.standard_normal(table.shape) / np.sqrt(table.shape[1])
        if self.handle_unknown == "error":
            unknown = None
        elif self.handle_unknown == "zeros":
            unknown = np.zeros(table.shape[1])
        else:
            rms = np.sqrt(np.mean(np.sum(table**2, axis=1)))
            unknown = direction * (rms / np.linalg.norm(direction))
        if self.pooling == "concat" and self.context_size is None:
            context_size = ids.shape[1]
        else:
            context_size = self.context_size
        self.embeddings_, self.unknown_vector_ = table, unknown
        self.n_tokens_, self.context_size_ = table.shape[0], context_size
        self._rows(self._window(ids))  # ids without a row are an error in fit too
        return self

    def _table(self, n_seen):
        """The token table (a placeholder of the right shape for ``"gaussian"``)."""
        given = self.token_embeddings
        if not isinstance(given, str) and not callable(given):
            table = _finite_table(given, "token_embeddings")
            if self.n_tokens is not None and self.n_tokens != table.shape[0]:
                raise ValueError(
                    f"n_tokens={self.n_tokens} differs from the {table.shape[0]} rows of "
                    "the token_embeddings array; leave n_tokens=None.")
            return table
        V = n_seen if self.n_tokens is None else self.n_tokens
        if callable(given):
            out = given(np.arange(V, dtype=np.int64))
            table = _finite_table(out, "the token_embeddings callable's output")
            if table.shape[0] != V:
                raise ValueError(
                    f"token_embeddings(arange({V})) must return one row per token id, "
                    f"shape ({V}, d_tok); got {np.shape(out)}.")
            return table
        if given == "onehot":
            return np.eye(V)
        d = min(V, MAX_DEFAULT_FEATURES) if self.n_features is None else self.n_features
        return np.empty((V, d))

    def transform(self, X):
        """Embed contexts: one row per context.

        Parameters
        ----------
        X : list of 1-D sequences of int, or array-like of shape (n_contexts, length)
            Contexts as token ids (the lengths may differ).

        Returns
        -------
        ndarray of shape (n_contexts, n_features_out)
            ``context_size_ * d_tok`` columns with ``pooling="concat"``,
            ``d_tok`` otherwise.

        Raises
        ------
        ValueError
            On words instead of ids, negative, non-integer or non-finite ids,
            an empty context, and ids without a row under
            ``handle_unknown="error"``.
        """
        check_is_fitted(self)
        ids = self._window(check_contexts(X))
        rows = self._rows(ids)
        d = self.embeddings_.shape[1]
        unknown = np.zeros(d) if self.unknown_vector_ is None else self.unknown_vector_
        # the table, the unknown vector (row V), the zero pad (row V + 1)
        table = np.vstack([self.embeddings_, unknown, np.zeros(d)])
        if self.pooling == "last":
            return table[rows[:, -1]]
        if self.pooling == "concat":
            return table[rows].reshape(len(rows), -1)
        rows = np.sort(rows, axis=1)  # the order of the sum: the ids, not the positions
        lengths = (ids >= 0).sum(axis=1)[:, None]
        out = np.empty((len(rows), d))
        step = max(1, _CHUNK // (rows.shape[1] * d))
        for start in range(0, len(rows), step):
            block = rows[start:start + step]
            total = np.zeros((len(block), d))
            for j in range(block.shape[1]):  # one position at a time: a fixed order
                total += table[block[:, j]]
            out[start:start + step] = total / lengths[start:start + step]
        return out

    def _window(self, ids):
        """The last ``context_size_`` columns of right-aligned ids (left-padded with -1)."""
        k = self.context_size_
        if k is None or ids.shape[1] == k:
            return ids
        if ids.shape[1] > k:
            return ids[:, -k:]
        return np.pad(ids, ((0, 0), (k - ids.shape[1], 0)), constant_values=-1)

    def _rows(self, ids):
        """Table rows of right-aligned ids: ``V`` for an unknown id, ``V + 1`` for a pad."""
        V = self.n_tokens_
        unknown = ids >= V
        if unknown.any() and self.unknown_vector_ is None:
            shown = np.unique(ids[unknown])[:10].tolist()
            raise ValueError(
                f"token id(s) {shown} out of range of the token table of n_tokens_={V} "
                f"rows (ids 0..{V - 1}). Pass n_tokens=encoder.n_tokens_ (the vocabulary "
                "size) when the ids are an encoder's, or handle_unknown='zeros' or "
                "'random' to embed them.")
        return np.where(ids < 0, V + 1, np.where(unknown, V, ids))

    @property
    def _n_features_out(self):
        d = self.embeddings_.shape[1]
        return d * self.context_size_ if self.pooling == "concat" else d

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # token ids: scikit-learn's checks pass their data as non-negative integers
        tags.input_tags.categorical = True
        tags.input_tags.positive_only = True
        tags.requires_fit = True
        return tags


def _finite_table(table, name):
    """``table`` as a finite 2-D float array with at least one row and column."""
    if np.iscomplexobj(table):
        raise ValueError(f"{name} must be real; got complex values.")
    arr = np.asarray(table, dtype=np.float64)
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"{name} must be a token table of shape (V, d_tok), got shape "
                         f"{arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity.")
    return arr


def check_contexts(X):
    """Contexts as a right-aligned int64 array ``(n, T)``, ``-1`` left of each context.

    Parameters
    ----------
    X : list of 1-D sequences of int, or array-like of shape (n_contexts, length)

    Returns
    -------
    ndarray of shape (n_contexts, longest length)

    Raises
    ------
    ValueError
        On text, empty input, an empty context, ids that are negative,
        non-integer or not finite, complex values, or a 1-D array (one
        context is ``[ids]``).
    TypeError
        On sparse input.
    """
    if isinstance(X, str):
        raise ValueError(f"got a single string. {_TEXT}.")
    if sp.issparse(X):
        raise TypeError("ContextEmbedder: sparse input is not supported; pass contexts as "
                        "lists of token ids or a dense 2-D array.")
    if hasattr(X, "__array__") and not isinstance(X, (list, tuple)):
        arr = np.asarray(X)
        if arr.dtype != object or arr.ndim == 2:
            if arr.ndim != 2:
                raise ValueError(
                    "Expected a 2-D array (n_contexts, length) of token ids or a list of "
                    f"contexts; got an array of shape {arr.shape}. One context is [ids]: "
                    "Reshape your data with array.reshape(1, -1).")
            if arr.shape[0] == 0:
                raise ValueError(f"no context to embed: found 0 contexts (0 sample(s), "
                                 f"shape={arr.shape}).")
            if arr.shape[1] == 0:
                raise ValueError(f"0 feature(s) (shape={arr.shape}) while a minimum of 1 "
                                 "is required: a context holds one token or more.")
            return _token_ids(arr)
        X = list(arr)
    try:
        contexts = [np.asarray(c) if not isinstance(c, str) else c for c in X]
    except TypeError:
        raise ValueError("X must be a list of contexts (sequences of token ids) or a 2-D "
                         "array (n_contexts, length).") from None
    if not contexts:
        raise ValueError("no context to embed: found 0 contexts (0 samples).")
    for i, c in enumerate(contexts):
        if isinstance(c, str) or c.dtype.kind in "USO" and any(
                isinstance(t, str) for t in c.ravel()):
            raise ValueError(f"context {i} holds text: {c!r}. {_TEXT}.")
        if c.ndim != 1:
            raise ValueError(
                f"context {i} must be a 1-D sequence of token ids, got shape {c.shape}; "
                "X is a list of contexts, e.g. [[3, 1], [3, 4, 2]] (one context: [ids]).")
        if c.size == 0:
            raise ValueError(f"context {i} is empty; a context holds one token or more.")
    lengths = np.array([c.size for c in contexts])
    flat = _token_ids(np.concatenate(contexts))
    T = int(lengths.max())
    out = np.full((len(contexts), T), -1, dtype=np.int64)
    row = np.repeat(np.arange(len(contexts)), lengths)
    ends = np.cumsum(lengths)
    col = np.arange(flat.size) - np.repeat(ends, lengths) + T  # right-aligned
    out[row, col] = flat
    return out


def _token_ids(arr):
    """``arr`` as int64 token ids: integers (or integral floats), finite, non-negative."""
    if np.iscomplexobj(arr):
        raise ValueError("Complex data not supported: token ids are non-negative integers.")
    if arr.dtype.kind in "US":
        raise ValueError(f"the contexts hold text. {_TEXT}.")
    if arr.dtype.kind not in "iu":
        try:
            values = arr.astype(np.float64)
        except ValueError:
            raise ValueError(f"the contexts hold values that are not token ids. "
                             f"{_TEXT}.") from None
        if not np.all(np.isfinite(values)):
            raise ValueError("Input contains NaN or infinity: token ids are non-negative "
                             "integers.")
        if not np.all(values == np.round(values)):
            raise ValueError("token ids must be integers; got non-integer values such as "
                             f"{values[values != np.round(values)][:3].tolist()}.")
        arr = values
    if arr.min() < 0:
        raise ValueError(f"Negative values in data: token ids are non-negative, got "
                         f"{arr.min():g}.")
    return arr.astype(np.int64)
